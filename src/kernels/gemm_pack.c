// kernels/gemm_pack — the cache-blocked fp32 SGEMM (see gemm_pack.h).
#include "kernels/gemm_pack.h"

#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/threads.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "kernels/bf16_impl.h"
#include "kernels/vmath_impl.h"

// The blocking, from the step's shapes at 256 and 2,048 rows on 2 threads
// (a Xeon with 48 KiB of L1 and 2 MiB of L2 a core): the reduction in
// blocks of at most KC steps, split evenly; a B block of 1 MiB (L2), as
// many whole strips as fit, dealt evenly; an A block of MCB rows (96 KiB
// at most), a panel of MR rows (12 KiB, L1). C is loaded and stored once
// per reduction block. Blocks of 768 steps (three passes over C fewer at
// 2,048 rows) made the step's weight gradients there 4-21% slower and its
// input gradients 1-7% faster; fetching the next B block's rows a few
// lines a tile ahead, or reading a row-major A in place, gained nothing
// measurable. Fetching the next tile's C a tile ahead made the step's
// gradients at 2,048 rows 2-3% faster.
enum {
    MR = 8, NV = 3, NR = 16 * NV,   // the register tile: MR × NR sums, MR·NV = 24 accumulators
    KC = 384,                       // reduction steps per block, at most
    B_FLOATS = 384 * 672,           // a B block: 1 MiB
    MCB = 64,                       // rows per A block: 8 panels of MR
};

int gemm_pack_own(void) { return 1; }

// One tile: C (mr, nr) (+)= Ap (MR, kc) · Bp (kc, NR), the strip's lanes
// past nr zero in Bp and never stored, rows past mr zero in Ap and never
// stored. A panel's element (i,k) is at Ap[i·AI + k·AK]: [i][kc] when A's
// rows were copied (AI = kc, AK = 1), [k][MR] when its columns were (AI = 1,
// AK = MR). With next given (C is read), the next tile's C is fetched into
// L2 as this one starts: a block of C that L2 no longer holds (2,048 rows)
// is read a tile ahead, not all at once at each tile's start.
#define PACK_TILE(NAME, AI, AK)                                                                                \
    static void NAME(int kc, const float *restrict Ap, const float *restrict Bp, float *C, long ldc, int mr,  \
                     int nr, int load, const float *next) {                                                    \
        __m512 c[MR][NV];                                                                                      \
        if (next)                                                                                              \
            _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                               \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                           \
                    _mm_prefetch((const char *)(next + i * ldc + 16 * v), _MM_HINT_T1);                        \
        __mmask16 m[NV];                                                                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) m[v] = vlanes16(nr - 16 * v);                   \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++)                                                   \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[i][v] =                                     \
                load && i < mr ? _mm512_maskz_loadu_ps(m[v], C + i * ldc + 16 * v) : _mm512_setzero_ps();      \
        _Pragma("GCC unroll 2") for (int k = 0; k < kc; k++, Ap += (AK), Bp += NR) {                           \
            __m512 y[NV];                                                                                      \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) y[v] = _mm512_load_ps(Bp + 16 * v);           \
            _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) {                                             \
                __m512 x = _mm512_set1_ps(Ap[i * (AI)]);                                                       \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(x, y[v], c[i][v]); \
            }                                                                                                  \
        }                                                                                                      \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; i++) if (i < mr)                                       \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                               \
                _mm512_mask_storeu_ps(C + i * ldc + 16 * v, m[v], c[i][v]);                                    \
    }

PACK_TILE(tile_rows, kc, 1)
PACK_TILE(tile_cols, 1, MR)

// A block: rows [0, mc) of A over the reduction steps [0, kc) as panels of
// MR rows, each kc·MR floats, rows past mc zero. A row-major A (acs == 1)
// is copied a row at a time ([i][kc]); a column-major one (ars == 1: the
// weight gradient's dout^T) a column of MR at a time ([k][MR]); any other
// element by element, [k][MR].
static void pack_a(float *Ap, const float *A, long ars, long acs, int mc, int kc) {
    int pad = (MR - mc % MR) % MR;
    if (acs == 1) {
        for (int i = 0; i < mc; i++) memcpy(Ap + (size_t)i * kc, A + i * ars, (size_t)kc * sizeof(float));
        memset(Ap + (size_t)mc * kc, 0, (size_t)pad * kc * sizeof(float));
        return;
    }
    for (int i0 = 0; i0 < mc; i0 += MR) {
        float *d = Ap + (size_t)i0 * kc;
        int mr = mc - i0 < MR ? mc - i0 : MR;
        for (int k = 0; k < kc; k++) {
            const float *a = A + i0 * ars + k * acs;
            if (ars == 1)
                _mm256_storeu_ps(d + k * MR, _mm256_maskz_loadu_ps((__mmask8)vlanes16(mr), a));
            else
                for (int i = 0; i < MR; i++) d[k * MR + i] = i < mr ? a[i * ars] : 0.0f;
        }
    }
}

// A B block: columns [0, nc) of B over the reduction steps [0, kc) as strips
// of NR columns, each [k][NR], lanes past nc zero. Rows of B contiguous
// (bcs == 1, as both gradients' B is): copied a row at a time; else element
// by element.
static void pack_b(float *Bp, const float *B, long brs, long bcs, int kc, int nc) {
    for (int j0 = 0; j0 < nc; j0 += NR) {
        float *d = Bp + (size_t)(j0 / NR) * kc * NR;
        int nr = nc - j0 < NR ? nc - j0 : NR;
        if (bcs == 1) {
            for (int k = 0; k < kc; k++)
                for (int v = 0; v < NV; v++)
                    _mm512_store_ps(d + k * NR + 16 * v,
                                    _mm512_maskz_loadu_ps(vlanes16(nr - 16 * v), B + k * brs + j0 + 16 * v));
        } else {
            for (int k = 0; k < kc; k++)
                for (int j = 0; j < NR; j++) d[k * NR + j] = j < nr ? B[k * brs + (j0 + j) * bcs] : 0.0f;
        }
    }
}

typedef struct {
    const float *A, *B;
    float *C;
    long ars, acs, brs, bcs, ldc;
    int accumulate;
    double *part;      // NULL, or each tile's sum of squares as last stored, [panel][strip] of the whole C
    int strips, i0, j0;   // C's strips of NR; the share's first row and column in the whole C
} Operands;

// One thread's product over rows [0, M) and columns [0, N) of o (its share
// already offset in), with its own packing buffers Bp and Ap.
static void product(const Operands *o, int M, int N, int K, float *Bp, float *Ap) {
    // The B block's bytes fixed: a short reduction takes more columns a block (up to all of them),
    // and the columns are dealt evenly, in whole strips, between the blocks.
    int kblocks = (K + KC - 1) / KC, kb = ((K + kblocks - 1) / kblocks + 15) / 16 * 16;
    int most = B_FLOATS / kb / NR * NR, blocks = (N + most - 1) / most;
    int ncb = ((N + blocks - 1) / blocks + NR - 1) / NR * NR;
    for (int jc = 0; jc < N; jc += ncb) {
        int nc = N - jc < ncb ? N - jc : ncb;
        for (int pc = 0; pc < K; pc += kb) {
            int kc = K - pc < kb ? K - pc : kb, load = o->accumulate || pc > 0;
            pack_b(Bp, o->B + pc * o->brs + jc * o->bcs, o->brs, o->bcs, kc, nc);
            for (int i0 = 0; i0 < M; i0 += MCB) {
                int mc = M - i0 < MCB ? M - i0 : MCB;
                pack_a(Ap, o->A + i0 * o->ars + pc * o->acs, o->ars, o->acs, mc, kc);
                for (int i = i0; i < i0 + mc; i += MR) {
                    int mr = i0 + mc - i < MR ? i0 + mc - i : MR;
                    const float *ap = Ap + (size_t)(i - i0) * kc;
                    for (int j = 0; j < nc; j += NR) {
                        float *c = o->C + i * o->ldc + jc + j;
                        const float *bp = Bp + (size_t)(j / NR) * kc * NR;
                        int nr = nc - j < NR ? nc - j : NR;
                        const float *next = !load               ? NULL   // C is only written
                                            : j + NR < nc        ? c + NR
                                            : i + MR < i0 + mc   ? o->C + (i + MR) * o->ldc + jc
                                                                 : NULL;
                        if (o->acs == 1) tile_rows(kc, ap, bp, c, o->ldc, mr, nr, load, next);
                        else tile_cols(kc, ap, bp, c, o->ldc, mr, nr, load, next);
                        if (o->part && pc + kc == K)   // the tile's last store, still in L1
                            o->part[(size_t)((o->i0 + i) / MR) * o->strips + (o->j0 + jc + j) / NR] =
                                bf16_tile_squares(c, (size_t)o->ldc, mr, nr);
                    }
                }
            }
        }
    }
}

static _Thread_local void *g_buf;
static _Thread_local size_t g_buf_bytes;

// The calling thread's packing buffers, B's block then A's; NULL when not to be had.
static float *buffers(void) {
    return mem_grow(&g_buf, &g_buf_bytes, MEM_WORKSPACE, ((size_t)B_FLOATS + (size_t)KC * MCB) * sizeof(float));
}

// Thread th of nt: its share of the rows (split into panels of MR) when C is
// taller than wide, else of the columns (strips of NR). Each thread packs
// its own blocks: splitting the longer side repeats the packing of the
// smaller operand (B, or A) in each thread rather than the larger.
static int run_share(const Operands *o, int M, int N, int K, int th, int nt) {
    float *Bp = buffers();
    if (!Bp) return -1;
    float *Ap = Bp + (size_t)B_FLOATS;
    Operands mine = *o;
    if (M > N) {
        int panels = (M + MR - 1) / MR, r0 = panels * th / nt * MR, r1 = panels * (th + 1) / nt * MR;
        if (r1 > M) r1 = M;
        mine.A += r0 * o->ars, mine.C += r0 * o->ldc, mine.i0 = r0;
        if (r1 > r0) product(&mine, r1 - r0, N, K, Bp, Ap);
    } else {
        int strips = (N + NR - 1) / NR, c0 = strips * th / nt * NR, c1 = strips * (th + 1) / nt * NR;
        if (c1 > N) c1 = N;
        mine.B += c0 * o->bcs, mine.C += c0, mine.j0 = c0;
        if (c1 > c0) product(&mine, M, c1 - c0, K, Bp, Ap);
    }
    return 0;
}

int gemm_pack(int M, int N, int K, const float *A, long ars, long acs, const float *B, long brs, long bcs, float *C,
              long ldc, int accumulate, double *sq) {
    if (M <= 0 || N <= 0 || K <= 0) return -1;   // nothing to multiply: the caller's path handles it
    int strips = (N + NR - 1) / NR;
    long tiles = (long)((M + MR - 1) / MR) * strips;
    Operands o = {A, B, C, ars, acs, brs, bcs, ldc, accumulate, NULL, strips, 0, 0};
    if (sq && !(o.part = malloc((size_t)tiles * sizeof *o.part))) return -1;
    int nt = omp_in_parallel() ? 1 : kernels_threads();
    if ((double)M * N * K < 4e6) nt = 1;   // a small product is not worth waking threads
    if (nt == 1) {
        int r = run_share(&o, M, N, K, 0, 1);
        if (r) free(o.part);
        else bf16_sum_parts(o.part, tiles, sq);
        return r;
    }
    // Every thread's buffers first: a thread that cannot have them leaves C untouched for every other.
    int failed = 0;
    #pragma omp parallel num_threads(nt)
    {
        int th = omp_get_thread_num(), n = omp_get_num_threads();
        if (!threads_any_failed(&failed, buffers() != NULL)) run_share(&o, M, N, K, th, n);
    }
    if (failed) {
        free(o.part);
        return -1;
    }
    bf16_sum_parts(o.part, tiles, sq);
    return 0;
}

#else   // no AVX-512: the caller's other paths run every product

int gemm_pack_own(void) { return 0; }

int gemm_pack(int M, int N, int K, const float *A, long ars, long acs, const float *B, long brs, long bcs, float *C,
              long ldc, int accumulate, double *sq) {
    (void)M, (void)N, (void)K, (void)A, (void)ars, (void)acs, (void)B, (void)brs, (void)bcs, (void)C, (void)ldc;
    (void)accumulate, (void)sq;
    return -1;
}

#endif
