#include "kernels/gemm_bf16.h"

#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "kernels/gemm_amx.h"
#include "kernels/threads.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>

#include "core/half_x16.h"
#include "kernels/bf16_impl.h"

int gemm_bf16_own(void) { return 1; }

static int g_unit = -1;   // -1: not chosen yet, AMX where usable

Bf16Unit gemm_bf16_unit(void) {
    if (g_unit < 0) g_unit = amx_usable() ? BF16_AMX : BF16_DOT;
    return (Bf16Unit)g_unit;
}

int gemm_bf16_use(Bf16Unit u) {
    if (u == BF16_AMX && !amx_usable()) return 0;
    g_unit = u;
    return 1;
}

const char *gemm_bf16_unit_name(void) { return gemm_bf16_unit() == BF16_AMX ? "AMX tiles (tdpbf16ps)" : "vdpbf16ps"; }

static inline __mmask16 lane_mask(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

// One register tile: C (mr, nr) (+)= A (mr, 2·kp) · Bp (kp, nr, 2), nr <= 16·NV.
// Per pair p: NV vectors of 16 column pairs of B, and for each of the mr rows
// A's pair broadcast into NV dot products; mr·NV fp32 accumulators. Lanes
// past nr are masked: read as 0, never written.
typedef struct TileH {
    const uint16_t *A, *B;
    float *C;
    const float *next;   // with load: the sums a later tile loads, fetched into cache meanwhile (NULL: none)
    const float *bias;   // with load 0: the sums start from these nr values, every row alike (NULL: from 0)
    double *sq;          // or NULL: the sum of squares (float64) of the sums the tile stores
    uint16_t *C16;       // or NULL: the sums stored there in bf16 (half_pack's rounding), rows ldc apart, not in C
    int lda, ldb, ldc, kp, nr, load;
    int pfb;             // pairs ahead that B's rows are prefetched (0: none)
} TileH;

#define BF16_TILE(NV, MRMAX)                                                                                   \
    static inline __attribute__((always_inline)) void tile##NV(int mr, const TileH *t) {                       \
        const uint16_t *A = t->A, *B = t->B;                                                                   \
        float *C = t->C;                                                                                       \
        const int lda = t->lda, ldb2 = 2 * t->ldb, ldc = t->ldc, kp = t->kp;                                   \
        const size_t pfb = (size_t)t->pfb * ldb2; /* B's row pfb pairs ahead, fetched into L1 */               \
        __m512 c[MRMAX][NV];                                                                                   \
        __mmask16 m[NV];                                                                                       \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) m[v] = lane_mask(t->nr - 16 * v);                \
        _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++)                                                  \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[i][v] =                                     \
                t->load   ? _mm512_maskz_loadu_ps(m[v], C + (size_t)i * ldc + 16 * v)                         \
                : t->bias ? _mm512_maskz_loadu_ps(m[v], t->bias + 16 * v)                                      \
                          : _mm512_setzero_ps();                                                               \
        if (t->next) _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++)                                     \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                               \
                _mm_prefetch((const char *)(t->next + (size_t)i * ldc + 16 * v), _MM_HINT_T0);                 \
        for (int p = 0; p < kp; p++) {                                                                         \
            const uint16_t *b = B + (size_t)p * ldb2;                                                          \
            if (pfb) _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                      \
                _mm_prefetch((const char *)(b + pfb + 32 * v), _MM_HINT_T0);                                   \
            __m512bh y[NV];                                                                                    \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) y[v] =                                        \
                (__m512bh)_mm512_maskz_loadu_epi32(m[v], b + 32 * v);                                          \
            _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++) {                                            \
                int32_t a;                                                                                     \
                memcpy(&a, A + (size_t)i * lda + 2 * p, sizeof a);                                             \
                __m512bh x = (__m512bh)_mm512_set1_epi32(a);                                                   \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) c[i][v] = _mm512_dpbf16_ps(c[i][v], x, y[v]); \
            }                                                                                                  \
        }                                                                                                      \
        if (t->C16) _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++)                                      \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                               \
                _mm512_mask_cvtepi32_storeu_epi16(t->C16 + (size_t)i * ldc + 16 * v, m[v],                     \
                                                  f32_to_bf16_x16(_mm512_castps_si512(c[i][v])));               \
        else _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++)                                             \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++)                                               \
                _mm512_mask_storeu_ps(C + (size_t)i * ldc + 16 * v, m[v], c[i][v]);                            \
        if (t->sq) *t->sq = tile_reg_squares_##NV(c, mr);                                                      \
    }

BF16_TILE(2, 12)
BF16_TILE(3, 8)
BF16_TILE(4, 6)

typedef void (*TileFn)(int mr, const TileH *t);

// Each row count gets its own instance, so the accumulators stay in registers.
#define T(NV, R) \
    case R: tile##NV(R, t); break;
static void tiles2(int mr, const TileH *t) {
    switch (mr) { T(2, 12) T(2, 11) T(2, 10) T(2, 9) T(2, 8) T(2, 7) T(2, 6) T(2, 5) T(2, 4) T(2, 3) T(2, 2) T(2, 1) }
}
static void tiles3(int mr, const TileH *t) { switch (mr) { T(3, 8) T(3, 7) T(3, 6) T(3, 5) T(3, 4) T(3, 3) T(3, 2) T(3, 1) } }
static void tiles4(int mr, const TileH *t) { switch (mr) { T(4, 6) T(4, 5) T(4, 4) T(4, 3) T(4, 2) T(4, 1) } }
#undef T

// The blocking, measured at the step's shapes (2 threads, Zen 5, B in
// strips): reductions of up to 2,048 pairs in one block, 0-8% faster than
// blocks of 512 (most at the input gradients of 3,072 and the weight
// gradients of 2,048 rows), so C is loaded and stored once; column blocks
// of 384 KiB, and 512 KiB where C is 16 times taller than wide (the head's
// weight gradient: A, 100 MB, is read once per column block; 5% faster,
// where the others run 1-3% slower with 512).
enum {
    BF16_ROW_PAD = 32,              // values past a packed A row's pairs (gemm_bf16_room)
    BF16_KPMAX = 2048,              // the longest reduction block (pairs): a tile's strip of B at most 512 KiB
    BF16_BLOCK = 384 << 10,         // bytes of packed B a column block holds, about: under half a core's L2
    BF16_BLOCK_TALL = 512 << 10,    // the same where C is BF16_TALL times taller than wide, or more
    BF16_TALL = 16,
};

// The tile order: column blocks of B that fit BF16_BLOCK outermost, then
// row tiles, then the column tiles of the block. A's row tile stays in L1
// across the block's column tiles, the block in L2 across all row tiles;
// B is read from memory once and A once per column block. Tile x of the
// step's rt·ct tiles (row tile, column tile) under that order:
static void tile_at(long x, int rt, int ct, int cpb, int *ri, int *ci) {
    long full = (long)rt * cpb;               // tiles in a full column block
    int b = (int)(x / full), w = ct - b * cpb < cpb ? ct - b * cpb : cpb;   // the block and its width
    long r = x - b * full;
    *ri = (int)(r / w);
    *ci = b * cpb + (int)(r % w);
}

// One reduction block's tiles, tile order as tile_at, the share [lo, hi) of them.
typedef struct Block {
    const uint16_t *A, *Bp;
    float *C;
    uint16_t *C16;  // or NULL: the last block's sums in bf16 there, not in C
    const float *bias;
    double *part;   // or NULL: each tile's sum of squares of C as the last block leaves it, in tile order
    int R, NC, KP, lda, ldb, ldc, p0, kp, load, last, rt, ct, cpb, MR, NR, pfb;
    int strips;   // B is in strips of NR columns (bf16_strips), else pairs ldb apart
    TileFn fn;
} Block;

static void block_share(const void *arg, long lo, long hi) {
    const Block *b = arg;
    for (long x = lo; x < hi; x++) {
        int ri, ci;
        tile_at(x, b->rt, b->ct, b->cpb, &ri, &ci);
        int i = ri * b->MR, j = ci * b->NR, nr = b->NC - j < b->NR ? b->NC - j : b->NR;
        // In strips, column j's strip starts after j columns' kp pairs and its rows are nr pairs long.
        const uint16_t *B = b->strips ? b->Bp + 2 * ((size_t)j * b->KP + (size_t)b->p0 * nr)
                                      : b->Bp + 2 * ((size_t)b->p0 * b->ldb + j);
        TileH t = {.A = b->A + (size_t)i * b->lda + 2 * (size_t)b->p0, .B = B, .C = b->C + (size_t)i * b->ldc + j,
                   .bias = b->bias ? b->bias + j : NULL, .lda = b->lda, .ldb = b->strips ? nr : b->ldb,
                   .ldc = b->ldc, .kp = b->kp, .nr = nr, .load = b->load, .pfb = b->pfb,
                   .sq = b->part && b->last ? &b->part[x] : NULL,
                   .C16 = b->C16 && b->last ? b->C16 + (size_t)i * b->ldc + j : NULL};
        // Loaded sums come from memory when C is large (a weight gradient accumulated over micro-batches):
        // the tile below, a block's width of tiles later, is fetched while this one multiplies.
        if (b->load && i + 2 * b->MR <= b->R) t.next = t.C + (size_t)b->MR * b->ldc;
        int mr = b->R - i < b->MR ? b->R - i : b->MR;
        b->fn(mr, &t);
    }
}

// The threads of a product: one inside a parallel region or for a small one
// (not worth waking threads), else the kernels' count.
static int run_threads(int R, int NC, int KP) {
    return omp_in_parallel() || (double)R * NC * KP < 2e6 ? 1 : kernels_threads();
}

int bf16_strip_width(int NC) { return 16 * tile_vectors(NC); }

// The product on the vector units, operands in gemm_bf16's layouts (B in
// strips where strips, else pairs ldb apart).
static void gemm_run(int R, int NC, int KP, const uint16_t *A, int lda, const uint16_t *Bp, int ldb, int strips,
                     float *C, uint16_t *C16, int ldc, int accumulate, const float *bias, double *sq) {
    if (R <= 0 || NC <= 0) return;
    if (KP <= 0) {   // an empty reduction: C = 0 or the bias, or unchanged
        for (int i = 0; i < R && !accumulate; i++) {
            if (bias) memcpy(C + (size_t)i * ldc, bias, (size_t)NC * sizeof *C);
            else memset(C + (size_t)i * ldc, 0, (size_t)NC * sizeof *C);
        }
        return;
    }
    int nv = tile_vectors(NC), NR = 16 * nv, MR = nv == 2 ? 12 : nv == 3 ? 8 : 6;
    TileFn fn = nv == 2 ? tiles2 : nv == 3 ? tiles3 : tiles4;
    // Reduction blocks of equal length, at most BF16_KPMAX pairs: C is read and written once per block.
    // A tile stores its sums as fp32 and the next block reloads them, so the blocks change no bits.
    int nkb = (KP + BF16_KPMAX - 1) / BF16_KPMAX, KPC = (KP + nkb - 1) / nkb;
    int rt = (R + MR - 1) / MR, ct = (NC + NR - 1) / NR;
    size_t block = R >= BF16_TALL * NC ? BF16_BLOCK_TALL : BF16_BLOCK;
    int cpb = (int)(block / ((size_t)KPC * NR * 4));   // column tiles per block
    if (cpb < 1) cpb = 1;
    if (cpb > ct) cpb = ct;
    // Blocks of equal width, their count rounded: a last block of a few tiles
    // would read all of A once more for little of B (the head's weight
    // gradient: 12 column tiles, 10 to a block, takes them in one).
    int nb = (ct + cpb / 2) / cpb;   // at least 1: cpb <= ct
    cpb = (ct + nb - 1) / nb;
    long tiles = (long)rt * ct;
    int nt = run_threads(R, NC, KP);
    if (nt > tiles) nt = (int)tiles;
    // B's rows fetched into L1 4 pairs ahead. In pairs, only with few rows (a step of 256 tokens, a
    // pipeline's micro-batch), where each panel of B serves few row tiles and comes from memory or L2
    // as much as from L1: 5-10% faster at 256 rows, 25-40% at 64; with many rows B stays in L2 and
    // the fetches cost a little. In strips, the rows of a strip follow one another, and the fetches
    // are as fast or faster at every shape of the step (2,048 rows: 0-3%).
    int pfb = (R <= 512 || strips) && KP >= 128 ? 4 : 0;
    Block b = {.A = A, .Bp = Bp, .C = C, .C16 = C16, .bias = bias, .R = R, .NC = NC, .KP = KP, .lda = lda, .ldb = ldb,
               .ldc = ldc, .rt = rt, .ct = ct, .cpb = cpb, .MR = MR, .NR = NR, .pfb = pfb, .strips = strips,
               .fn = fn};
    if (sq) b.part = malloc((size_t)tiles * sizeof *b.part);   // NULL: *sq stays as it was
    // The threads take runs of a row tile across a column block (A's tiles stay in L1 across each),
    // as each finishes its last: balanced as they go, a product on 2 vCPUs whose one ran 30% slower
    // took 11-18% less time than in two equal contiguous shares.
    long chunk = threads_chunk(tiles, nt, cpb, 4.0 * MR * NR * KPC);
    for (b.p0 = 0; b.p0 < KP; b.p0 += KPC) {
        b.kp = KP - b.p0 < KPC ? KP - b.p0 : KPC, b.load = accumulate || b.p0 > 0, b.last = b.p0 + KPC >= KP;
        threads_chunks(nt, tiles, chunk, block_share, &b);
    }
    bf16_sum_parts(b.part, tiles, sq);
}

// The product on the vector units, A and B packed into gemm_bf16's layouts
// in room where they are in another form; the last block's sums into C16 in
// bf16 where it is given.
static int vector_op(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, uint16_t *C16, int ldc, int accumulate,
                     const float *bias, uint16_t *room, double *sq) {
    if (b.form == OP_PANELS) return -1;
    int KP = (K + 1) / 2;
    const uint16_t *A = a.p, *Bp = b.p;
    int lda = a.ld, ldb = b.ld;
    if (a.form != OP_PAIRS16) {
        if (!room) return -1;
        if (a.form == OP_ROWS32) bf16_pack_rows(room, 2 * KP + BF16_ROW_PAD, a.p, a.ld, R, K);
        else if (a.form == OP_COLS32) bf16_pack_rows_t(room, 2 * KP + BF16_ROW_PAD, a.p, a.ld, R, K);
        else if (a.form == OP_COLS16) bf16_rows_t16(room, 2 * KP + BF16_ROW_PAD, a.p, a.ld, R, K);
        else CHECKF(0, "gemm_bf16_op: form %d is not an A operand", (int)a.form);
        A = room, lda = 2 * KP + BF16_ROW_PAD, room += (size_t)R * lda;
    }
    int strips = b.form == OP_STRIPS16;
    if (b.form != OP_PAIRS16 && !strips) {
        if (!room) return -1;
        bf16_strips(room, b, K, NC);
        Bp = room, strips = 1;
    }
    gemm_run(R, NC, KP, A, lda, Bp, ldb, strips, C, C16, ldc, accumulate, bias, sq);
    return 0;
}

// The tiles first where they are the unit; the vector units otherwise, or
// where the tiles' panels were not to be had.
int gemm_bf16_op_sq(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate,
                    const float *bias, uint16_t *room, double *sq) {
    int KP = (K + 1) / 2;
    if (R > 0 && NC > 0 && KP > 0 && gemm_bf16_unit() == BF16_AMX && b.form != OP_STRIPS16 &&
        gemm_amx(R, NC, K, a, b, C, ldc, accumulate, bias, NULL, run_threads(R, NC, KP), sq) == 0)
        return 0;
    return vector_op(R, NC, K, a, b, C, NULL, ldc, accumulate, bias, room, sq);
}

size_t gemm_bf16_room(int R, int NC, int K, Bf16Form a, Bf16Form b) {
    size_t kp = (size_t)(K + 1) / 2, n = a == OP_PAIRS16 ? 0 : (size_t)R * (2 * kp + BF16_ROW_PAD);
    return n + (b == OP_PAIRS16 || b == OP_STRIPS16 || b == OP_PANELS ? 0 : kp * NC * 2);
}

int gemm_bf16_op(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate, const float *bias,
                 uint16_t *room) {
    return gemm_bf16_op_sq(R, NC, K, a, b, C, ldc, accumulate, bias, room, NULL);
}

int gemm_bf16_op16(int R, int NC, int K, Bf16Op a, Bf16Op b, uint16_t *C16, float *C, int ldc, const float *bias,
                   uint16_t *room) {
    int KP = (K + 1) / 2;
    if (R <= 0 || NC <= 0 || KP <= 0) return -1;
    if (gemm_bf16_unit() == BF16_AMX && b.form != OP_STRIPS16)
        return gemm_amx(R, NC, K, a, b, C, ldc, 0, bias, C16, run_threads(R, NC, KP), NULL);
    return vector_op(R, NC, K, a, b, C, C16, ldc, 0, bias, room, NULL);
}

void gemm_bf16(int R, int NC, int KP, const uint16_t *A, int lda, const uint16_t *Bp, int ldb, float *C, int ldc,
               int accumulate) {
    gemm_bf16_op(R, NC, 2 * KP, (Bf16Op){OP_PAIRS16, A, lda}, (Bf16Op){OP_PAIRS16, Bp, ldb}, C, ldc, accumulate, NULL,
                 NULL);
}

void gemm_bf16_bias(int R, int NC, int KP, const uint16_t *A, int lda, const uint16_t *Bp, int ldb, float *C, int ldc,
                    const float *bias) {
    gemm_bf16_op(R, NC, 2 * KP, (Bf16Op){OP_PAIRS16, A, lda}, (Bf16Op){OP_PAIRS16, Bp, ldb}, C, ldc, 0, bias, NULL);
}

size_t gemm_bf16_panels_len(int K, int NC) { return amx_panels_len(K, NC); }

void gemm_bf16_panels(uint16_t *dst, Bf16Op b, int K, int NC) {
    CHECKF(gemm_bf16_unit() == BF16_AMX, "gemm_bf16_panels: the tiles' panels without the tiles");
    amx_panels(dst, b, K, NC);
}

Bf16Op gemm_bf16_panels_at(const uint16_t *panels, int K, int k0, int c0) {
    CHECKF(k0 % 32 == 0 && c0 % 32 == 0, "gemm_bf16_panels_at: row %d, column %d not multiples of 32", k0, c0);
    return (Bf16Op){OP_PANELS, panels + amx_panels_offset(K, k0, c0), (K + 1) / 2};
}

#else   // no AVX512_BF16: callers ask gemm_bf16_own() first

int gemm_bf16_own(void) { return 0; }
Bf16Unit gemm_bf16_unit(void) { return BF16_DOT; }
int gemm_bf16_use(Bf16Unit u) { return u == BF16_DOT; }
const char *gemm_bf16_unit_name(void) { return "none"; }

#define NOT_BUILT CHECKF(0, "the bf16 kernel is not built in (no AVX512_BF16): ask gemm_bf16_own() first")
void gemm_bf16(int R, int NC, int KP, const uint16_t *A, int lda, const uint16_t *Bp, int ldb, float *C, int ldc,
               int accumulate) {
    (void)R, (void)NC, (void)KP, (void)A, (void)lda, (void)Bp, (void)ldb, (void)C, (void)ldc, (void)accumulate;
    NOT_BUILT;
}
void gemm_bf16_bias(int R, int NC, int KP, const uint16_t *A, int lda, const uint16_t *Bp, int ldb, float *C, int ldc,
                    const float *bias) {
    (void)R, (void)NC, (void)KP, (void)A, (void)lda, (void)Bp, (void)ldb, (void)C, (void)ldc, (void)bias;
    NOT_BUILT;
}
int gemm_bf16_op(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate, const float *bias,
                 uint16_t *room) {
    (void)R, (void)NC, (void)K, (void)a, (void)b, (void)C, (void)ldc, (void)accumulate, (void)bias, (void)room;
    NOT_BUILT;
    return -1;
}
int gemm_bf16_op_sq(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate,
                    const float *bias, uint16_t *room, double *sq) {
    (void)sq;
    return gemm_bf16_op(R, NC, K, a, b, C, ldc, accumulate, bias, room);
}
int gemm_bf16_op16(int R, int NC, int K, Bf16Op a, Bf16Op b, uint16_t *C16, float *C, int ldc, const float *bias,
                   uint16_t *room) {
    (void)R, (void)NC, (void)K, (void)a, (void)b, (void)C16, (void)C, (void)ldc, (void)bias, (void)room;
    NOT_BUILT;
    return -1;
}
size_t gemm_bf16_panels_len(int K, int NC) {
    (void)K, (void)NC;
    NOT_BUILT;
    return 0;
}
int bf16_strip_width(int NC) {
    (void)NC;
    NOT_BUILT;
    return 0;
}
size_t gemm_bf16_room(int R, int NC, int K, Bf16Form a, Bf16Form b) {
    (void)R, (void)NC, (void)K, (void)a, (void)b;
    return 0;
}
void gemm_bf16_panels(uint16_t *dst, Bf16Op b, int K, int NC) {
    (void)dst, (void)b, (void)K, (void)NC;
    NOT_BUILT;
}
Bf16Op gemm_bf16_panels_at(const uint16_t *panels, int K, int k0, int c0) {
    (void)panels, (void)K, (void)k0, (void)c0;
    NOT_BUILT;
    return (Bf16Op){OP_PANELS, NULL, 0};
}
#endif
