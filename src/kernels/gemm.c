#include "kernels/gemm.h"

#include <cblas.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>

#include "kernels/threads.h"
#include "kernels/vmath_impl.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "kernels/bf16_impl.h"

int gemm_own(void) { return 1; }

// One register tile: C (mr, nr) (+)= A (mr, kc) · B (kc, nr), nr <= 16·NV.
// Per k: NV vectors of B's row k, and for each of the mr rows one broadcast
// of A[i][k] into NV fused multiply-adds; mr·NV accumulators (24 of the 32
// zmm registers at the full tile). Lanes past nr are masked: read as 0,
// never written.
typedef struct Tile {
    const float *A, *B;
    float *C;
    int lda, ldb, ldc, kc, nr, load;
    const float *pf;   // the next panel of B to prefetch (NULL: none), from line pfl on
    int pfl;
    const float *pc;   // the next tile of C to prefetch (NULL: none)
    const float *pa;   // the next row tile of A to prefetch (NULL: none), mr rows lda apart
    double *sq;        // or NULL: the sum of squares of the sums the tile stores (tile_reg_squares)
} Tile;

// The k-steps of a tile, each B vector loaded by LOAD, with the prefetches
// of the lines the next tiles read: a line per k-step of each run.
#define TILE_STEPS(NV, LOAD)                                                                                   \
    for (int k = 0; k < kc; k++) {                                                                             \
        const float *b = B + (size_t)k * ldb;                                                                  \
        __m512 y[NV];                                                                                          \
        if (pc && k < mr * NV)                                                                                 \
            _mm_prefetch((const char *)(pc + (size_t)(k / NV) * ldc + 16 * (k % NV)), _MM_HINT_T0);            \
        if (pa && k < mr * kl)                                                                                 \
            _mm_prefetch((const char *)(pa + (size_t)(k / kl) * lda + 16 * (k % kl)), _MM_HINT_T0);            \
        if (pf && pfl + k < NV * kc)                                                                           \
            _mm_prefetch((const char *)(pf + (size_t)((pfl + k) / NV) * ldb + 16 * ((pfl + k) % NV)), _MM_HINT_T1); \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) y[v] = LOAD;                                      \
        _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++) {                                                \
            __m512 x = _mm512_set1_ps(A[(size_t)i * lda + k]);                                                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(x, y[v], c[i][v]);   \
        }                                                                                                      \
    }

// The edge panel's loads of B are masked, a full panel's not: on Intel's
// cores masked loads throughout made a pipeline stage's products of 64 rows
// (gpt2-124m, in the step) 2-12% slower.
#define GEMM_TILE(NV, MRMAX)                                                                                   \
    static inline __attribute__((always_inline)) void tile##NV(int mr, const Tile *t) {                        \
        const float *A = t->A, *B = t->B, *pf = t->pf, *pc = t->pc, *pa = t->pa;                               \
        const int kl = (t->kc + 15) / 16; /* lines per row of A's tile */                                      \
        float *C = t->C;                                                                                       \
        const int lda = t->lda, ldb = t->ldb, ldc = t->ldc, kc = t->kc, pfl = t->pfl;                          \
        __m512 c[MRMAX][NV];                                                                                   \
        __mmask16 m[NV];                                                                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) m[v] = vlanes16(t->nr - 16 * v);                 \
        _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++)                                                  \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[i][v] =                                     \
                t->load ? _mm512_maskz_loadu_ps(m[v], C + (size_t)i * ldc + 16 * v) : _mm512_setzero_ps();     \
        if (t->nr == 16 * NV) TILE_STEPS(NV, _mm512_loadu_ps(b + 16 * v))                                      \
        else TILE_STEPS(NV, _mm512_maskz_loadu_ps(m[v], b + 16 * v))                                           \
        _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++)                                                  \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                               \
                _mm512_mask_storeu_ps(C + (size_t)i * ldc + 16 * v, m[v], c[i][v]);                            \
        if (t->sq) *t->sq = tile_reg_squares_##NV(c, mr);                                                      \
    }

GEMM_TILE(2, 12)
GEMM_TILE(3, 8)
GEMM_TILE(4, 6)

typedef void (*TileFn)(int mr, const Tile *t);

// Each row count gets its own instance, so the accumulators stay in registers.
#define T(NV, R) \
    case R: tile##NV(R, t); break;
static void tiles2(int mr, const Tile *t) {
    switch (mr) { T(2, 12) T(2, 11) T(2, 10) T(2, 9) T(2, 8) T(2, 7) T(2, 6) T(2, 5) T(2, 4) T(2, 3) T(2, 2) T(2, 1) }
}
static void tiles3(int mr, const Tile *t) { switch (mr) { T(3, 8) T(3, 7) T(3, 6) T(3, 5) T(3, 4) T(3, 3) T(3, 2) T(3, 1) } }
static void tiles4(int mr, const Tile *t) { switch (mr) { T(4, 6) T(4, 5) T(4, 4) T(4, 3) T(4, 2) T(4, 1) } }
#undef T

enum { GEMM_KC = 256 };   // reduction block when B is wide: 256 rows of a panel of B, reused by every row tile

// One reduction block [p0, p0 + kc) of a product: its tiles, the order they
// are walked in and the tile function of their width.
typedef struct Block {
    const float *A, *B;
    float *C;
    int R, NC, lda, ldb, ldc, p0, kc, load, last, MR, NR, rt, ct, rows_outer;
    double *part;   // or NULL: each tile's sum of squares of C as the last block leaves it, by tile index
    TileFn fn;
} Block;

// Tiles [lo, hi) of a block: a chunk one thread takes.
static void block_tiles(const void *arg, long lo, long hi) {
    const Block *b = arg;
    const int MR = b->MR, NR = b->NR, ct = b->ct, rt = b->rt, p0 = b->p0, kc = b->kc;
    const int lda = b->lda, ldb = b->ldb, ldc = b->ldc, R = b->R, NC = b->NC;
    for (long x = lo; x < hi; x++) {
        int i = (int)(b->rows_outer ? x / ct : x % rt) * MR, j = (int)(b->rows_outer ? x % ct : x / rt) * NR;
        Tile t = {.A = b->A + (size_t)i * lda + p0, .B = b->B + (size_t)p0 * ldb + j, .C = b->C + (size_t)i * ldc + j,
                  .lda = lda, .ldb = ldb, .ldc = ldc, .kc = kc, .nr = NC - j < NR ? NC - j : NR, .load = b->load,
                  .sq = b->part && b->last ? &b->part[x] : NULL};
        // Columns outer: the row tiles of a panel fetch, one cache line per k, the next panel
        // of B (NV lines in each of kc rows ldb apart, a pattern the hardware prefetcher
        // follows poorly), the first tile the first kc lines, the second the next kc, ...
        if (!b->rows_outer && j + NR < NC) t.pf = b->B + (size_t)p0 * ldb + j + NR, t.pfl = i / MR * kc;
        // Rows outer: the last panel of a row tile fetches the next row tile of A, a line per k.
        if (b->rows_outer && j + NR >= NC && i + MR < R) t.pa = b->A + (size_t)(i + MR) * lda + p0;
        // With C read back (an accumulation, or a later block of the reduction), the tile
        // fetches the lines of this thread's next tile of C, MR rows ldc apart.
        if (b->load && x + 1 < hi) {
            int i2 = (int)(b->rows_outer ? (x + 1) / ct : (x + 1) % rt) * MR;
            int j2 = (int)(b->rows_outer ? (x + 1) % ct : (x + 1) / rt) * NR;
            t.pc = b->C + (size_t)i2 * ldc + j2;
        }
        b->fn(R - i < MR ? R - i : MR, &t);
    }
}

int gemm_nn_sq(int R, int NC, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
               int accumulate, double *sq) {
    if (R <= 0 || NC <= 0 || K <= 0) return -1;
    int nv = tile_vectors(NC);
    Block b = {.A = A, .B = B, .C = C, .R = R, .NC = NC, .lda = lda, .ldb = ldb, .ldc = ldc, .NR = 16 * nv,
               .MR = nv == 2 ? 12 : nv == 3 ? 8 : 6, .fn = nv == 2 ? tiles2 : nv == 3 ? tiles3 : tiles4};
    // A B of at most 1 MiB stays in L2 whole: no reduction blocks, each tile of C written once.
    int KC = (double)K * NC <= 262144 ? K : GEMM_KC;
    b.rt = (R + b.MR - 1) / b.MR, b.ct = (NC + b.NR - 1) / b.NR;
    long tiles = (long)b.rt * b.ct;
    if (sq && !(b.part = malloc((size_t)tiles * sizeof *b.part))) return -1;
    // The operand read from memory is walked once: row tiles outer when A is the larger
    // (each A tile stays in L1 across the columns), column panels outer when B is.
    b.rows_outer = (double)R * K >= (double)K * NC;
    int nt = omp_in_parallel() ? 1 : kernels_threads();
    if ((double)R * NC * K < 4e6) nt = 1;   // a small product is not worth waking threads
    if (nt > tiles) nt = (int)tiles;
    // The threads take runs of a row tile's columns (rows outer) or of a column panel's rows, as each
    // finishes its last (threads_chunks: gemm_bf16 says why).
    long chunk = threads_chunk(tiles, nt, b.rows_outer ? b.ct : b.rt, 2.0 * b.MR * b.NR * KC);
    for (b.p0 = 0; b.p0 < K; b.p0 += KC) {
        b.kc = K - b.p0 < KC ? K - b.p0 : KC, b.load = accumulate || b.p0 > 0, b.last = b.p0 + KC >= K;
        threads_chunks(nt, tiles, chunk, block_tiles, &b);
    }
    bf16_sum_parts(b.part, tiles, sq);   // by tile index: the same for every thread count
    return 0;
}

void gemm_nn(int R, int NC, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
             int accumulate) {
    if (R <= 0 || NC <= 0) return;
    if (K <= 0) {   // an empty reduction: C = 0, or unchanged
        if (!accumulate)
            for (int i = 0; i < R; i++)
                for (int j = 0; j < NC; j++) C[(size_t)i * ldc + j] = 0.0f;
        return;
    }
    gemm_nn_sq(R, NC, K, A, lda, B, ldb, C, ldc, accumulate, NULL);
}

// dst (8 rows, ldd apart) = the 8×8 block of src (8 rows, lds apart) transposed, + b (8) per row.
static inline void transpose8(float *dst, int ldd, const float *src, int lds, __m256 b) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds), r2 = _mm256_loadu_ps(src + 2 * lds),
           r3 = _mm256_loadu_ps(src + 3 * lds), r4 = _mm256_loadu_ps(src + 4 * lds),
           r5 = _mm256_loadu_ps(src + 5 * lds), r6 = _mm256_loadu_ps(src + 6 * lds),
           r7 = _mm256_loadu_ps(src + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_permute2f128_ps(u0, u4, 0x20), b));
    _mm256_storeu_ps(dst + ldd, _mm256_add_ps(_mm256_permute2f128_ps(u1, u5, 0x20), b));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_add_ps(_mm256_permute2f128_ps(u2, u6, 0x20), b));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_add_ps(_mm256_permute2f128_ps(u3, u7, 0x20), b));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_add_ps(_mm256_permute2f128_ps(u0, u4, 0x31), b));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_add_ps(_mm256_permute2f128_ps(u1, u5, 0x31), b));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_add_ps(_mm256_permute2f128_ps(u2, u6, 0x31), b));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_add_ps(_mm256_permute2f128_ps(u3, u7, 0x31), b));
}

// Columns [c0, c1) of src (multiples of 16, within its first C8), its first R8 rows.
static void transpose_cols(float *dst, int ldd, const float *src, int lds, const float *bias, int R8, int C8, int c0,
                           int c1) {
    // 8×8 blocks, columns of src outer, 16 at a time (a cache line of each src row), and its
    // rows inner: each of dst's 16 rows is written front to back.
    for (int c = c0; c < c1; c += 16) {
        for (int r = 0; r < R8; r += 8) {
            __m256 b = bias ? _mm256_loadu_ps(bias + r) : _mm256_setzero_ps();
            transpose8(dst + (size_t)c * ldd + r, ldd, src + (size_t)r * lds + c, lds, b);
            if (c + 8 < C8) transpose8(dst + (size_t)(c + 8) * ldd + r, ldd, src + (size_t)r * lds + c + 8, lds, b);
        }
    }
}

void transpose_add(float *dst, int ldd, const float *src, int lds, const float *bias, int R, int C) {
    int R8 = R & ~7, C8 = C & ~7, n16 = (C8 + 15) / 16;
    int nt = omp_in_parallel() || (double)R * C < 65536 ? 1 : kernels_threads();
    if (nt == 1) {
        transpose_cols(dst, ldd, src, lds, bias, R8, C8, 0, 16 * n16);
    } else {
        #pragma omp parallel num_threads(nt)
        {
            int th = omp_get_thread_num(), n = omp_get_num_threads();
            transpose_cols(dst, ldd, src, lds, bias, R8, C8, 16 * (n16 * th / n), 16 * (n16 * (th + 1) / n));
        }
    }
    for (int r = 0; r < R; r++)   // the edges: the last C % 8 columns, and the last R % 8 rows
        for (int c = r < R8 ? C8 : 0; c < C; c++)
            dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c] + (bias ? bias[r] : 0.0f);
}

#else   // no AVX-512: CBLAS, and a plain transpose

int gemm_own(void) { return 0; }

int gemm_nn_sq(int R, int NC, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
               int accumulate, double *sq) {
    (void)R, (void)NC, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)accumulate, (void)sq;
    return -1;
}

void gemm_nn(int R, int NC, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
             int accumulate) {
    if (R <= 0 || NC <= 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, NC, K, 1.0f, A, lda, B, ldb,
                accumulate ? 1.0f : 0.0f, C, ldc);
}

void transpose_add(float *dst, int ldd, const float *src, int lds, const float *bias, int R, int C) {
    for (int r0 = 0; r0 < R; r0 += 16)
        for (int c0 = 0; c0 < C; c0 += 16)
            for (int r = r0; r < r0 + 16 && r < R; r++)
                for (int c = c0; c < c0 + 16 && c < C; c++)
                    dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c] + (bias ? bias[r] : 0.0f);
}

#endif
