#include "kernels/gemm_amx.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/half_x16.h"
#include "kernels/threads.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/bf16_impl.h"

#define AMX_FN __attribute__((target("amx-tile,amx-bf16")))
#define PACK_FN BF16_PACK_FN

enum {
    ARCH_REQ_XCOMP_PERM = 0x1023,   // Linux: ask for a dynamically enabled state component
    XFEATURE_XTILEDATA = 18,        // the tiles' 8 KiB of data
};

static int g_usable = -1;   // -1 until asked: CPUID, then the kernel's permission

int amx_usable(void) {
    int u = __atomic_load_n(&g_usable, __ATOMIC_ACQUIRE);
    if (u >= 0) return u;
    unsigned a, b, c, d;
    u = 0;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        int tile = d >> 24 & 1, bf16 = d >> 22 & 1;
        // Linux enables the tile data per process, on request; without it the first tile load faults.
        u = tile && bf16 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    __atomic_store_n(&g_usable, u, __ATOMIC_RELEASE);
    return u;
}

// The tile configuration (palette 1): 8 tiles of 16 rows × 64 bytes: C
// tiles 0-3 (16×16 fp32), A tiles 4-5 (16 rows × 16 pairs), B tiles 6-7
// (16 pairs × 16 column pairs). Every tile is whole: A's and B's come from
// zero-padded panels, and C's edge tiles go through a zero-padded copy.
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileCfg;

// A constant in memory: GCC does not count _tile_loadconfig as reading its
// operand, and would drop the stores of a configuration built on the stack.
static const TileCfg g_cfg = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

AMX_FN void amx_configure(void) { _tile_loadconfig(&g_cfg); }

AMX_FN void amx_release(void) { _tile_release(); }

// One outer reduction block's supertiles of C (32 rows × 32 columns: 2 × 2
// tiles), the tile order of gemm_bf16 (column blocks of B outermost, then
// row supertiles, then the block's column supertiles). An outer block is
// summed in inner blocks of kpc pairs, a row's supertiles at a time: each
// inner block's A panel stays in L1 while the row's supertiles take their
// pairs, and their sums wait in this thread's strip, in L2, for the next.
typedef struct Job {
    Bf16Op a, b;
    float *C;
    uint16_t *C16;   // or NULL: the last block's sums rounded to bf16 there, not stored in C
    const float *bias;
    double *part;    // or NULL: each supertile's sum of squares of C as the last block leaves it, in tile order
    int R, NC, K, KP, ldc, p0, kp, kpc, load, last, rt, ct, cpb;
} Job;

static int imin(int a, int b) { return a < b ? a : b; }

// Panels packed as whole tiles, 1 KiB each, in the order the supertile reads
// them: [chunk of 16 pairs][tile 0, 1][16 rows × 64 bytes]. Loaded with a
// stride of 64 bytes, a tile is 16 consecutive cache lines: the operands'
// own strides (a B row of 50,304 pairs is 196 KiB long; rows 4 KiB apart
// fall in one L1 set) made the tile unit wait on loads at 7-14% of its peak.
// Zeros fill what lies past the operand's rows, columns or pairs, so every
// tile is whole.
enum { PANEL = 32 * 2 * 16 };   // uint16 per chunk of a panel: 2 tiles of 16 × 32

static inline __mmask16 lanes(int n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

// A's rows [0, ra) × pairs [0, kp) (rows lda apart) as a panel.
PACK_FN static void pack_a(uint16_t *dst, const uint16_t *a, int lda, int ra, int kp) {
    for (int c = 0; c < (kp + 15) / 16; c++) {
        __mmask16 m = lanes(kp - 16 * c);
        uint16_t *d = dst + (size_t)c * PANEL;
        for (int r = 0; r < 32; r++)   // tile r/16, row r%16: consecutive
            _mm512_storeu_si512(d + 32 * r, r < ra ? _mm512_maskz_loadu_epi32(m, a + (size_t)r * lda + 32 * c)
                                                   : _mm512_setzero_si512());
    }
}

// B's pairs [0, kp) × columns [0, cb) (pair rows ldb apart) as a panel.
PACK_FN static void pack_b(uint16_t *dst, const uint16_t *b, int ldb, int cb, int kp) {
    __mmask16 m[2] = {lanes(cb), lanes(cb - 16)};
    for (int c = 0; c < (kp + 15) / 16; c++) {
        uint16_t *d = dst + (size_t)c * PANEL;
        for (int q = 0; q < 16; q++) {
            int p = 16 * c + q;
            const uint16_t *row = b + 2 * (size_t)p * ldb;
            for (int t = 0; t < 2; t++)
                _mm512_storeu_si512(d + 512 * t + 32 * q, p < kp ? _mm512_maskz_loadu_epi32(m[t], row + 32 * t)
                                                                 : _mm512_setzero_si512());
        }
    }
}

// Values of a chunk present: of the 32 from value k0 on, those before the
// block's end (2·kp) and the reduction's (k).
static int chunk_values(int c, int kp, int k) { return imin(imin(32, 2 * kp - 32 * c), k - 32 * c); }

static inline __mmask32 lanes32(int n) {
    return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

// A's rows [0, ra) × pairs [0, kp) from fp32 rows, lda apart, k values left in each.
PACK_FN static void pack_a_rows32(uint16_t *dst, const float *a, int lda, int ra, int kp, int k) {
    for (int c = 0; c < (kp + 15) / 16; c++) {
        int n = chunk_values(c, kp, k);
        uint16_t *d = dst + (size_t)c * PANEL;
        for (int r = 0; r < 32; r++)
            _mm512_storeu_si512(d + 32 * r, r < ra ? bf16_row32(a + (size_t)r * lda + 32 * c, lanes(n), lanes(n - 16))
                                                   : _mm512_setzero_si512());
    }
}

// A's rows [0, ra) × pairs [0, kp) read transposed from bf16 (f32 0) or
// fp32: A[r][k] = s[k·lds + r]. Per tile, 32 rows of s become 16 vectors
// of pairs, transposed into the tile's rows.
PACK_FN static void pack_a_cols(uint16_t *dst, const void *s, int lds, int f32, int ra, int kp, int k) {
    for (int c = 0; c < (kp + 15) / 16; c++) {
        int n = chunk_values(c, kp, k);
        for (int t = 0; t < 2; t++) {
            __mmask16 m = lanes(ra - 16 * t);
            __m512i v[16];
            for (int p = 0; p < 16; p++) {
                size_t o = (size_t)(32 * c + 2 * p) * lds + 16 * t;
                int ev = 2 * p < n, od = 2 * p + 1 < n;
                if (f32) {
                    const float *e = (const float *)s + o;
                    v[p] = bf16_pairs32(ev ? _mm512_maskz_loadu_ps(m, e) : _mm512_setzero_ps(),
                                        od ? _mm512_maskz_loadu_ps(m, e + lds) : _mm512_setzero_ps());
                } else {
                    const uint16_t *e = (const uint16_t *)s + o;   // 16 values (512-bit loads: no AVX512VL asked)
                    __m512i ve = ev ? _mm512_maskz_loadu_epi16((__mmask32)m, e) : _mm512_setzero_si512();
                    __m512i vo = od ? _mm512_maskz_loadu_epi16((__mmask32)m, e + lds) : _mm512_setzero_si512();
                    v[p] = bf16_pairs16v(_mm512_castsi512_si256(ve), _mm512_castsi512_si256(vo));
                }
            }
            bf16_transpose16(v);
            uint16_t *d = dst + (size_t)c * PANEL + 512 * t;
            for (int r = 0; r < 16; r++) _mm512_storeu_si512(d + 32 * r, v[r]);
        }
    }
}

// B's pairs [0, kp) × columns [0, cb) from bf16 (f32 0) or fp32 rows ld
// apart, k rows left: rows 2q and 2q+1 interleaved into the tile's row q.
PACK_FN static void pack_b_rows(uint16_t *dst, const void *b, int ld, int f32, int cb, int kp, int k) {
    __mmask16 m[2] = {lanes(cb), lanes(cb - 16)};
    for (int c = 0; c < (kp + 15) / 16; c++) {
        int n = chunk_values(c, kp, k);
        uint16_t *d = dst + (size_t)c * PANEL;
        for (int q = 0; q < 16; q++) {
            size_t r = (size_t)(32 * c + 2 * q) * ld;
            for (int t = 0; t < 2; t++) {
                __mmask16 me = 2 * q < n ? m[t] : 0, mo = 2 * q + 1 < n ? m[t] : 0;
                __m512i v;
                if (f32) {
                    const float *e = (const float *)b + r + 16 * t;
                    v = bf16_pairs32(_mm512_maskz_loadu_ps(me, e), _mm512_maskz_loadu_ps(mo, e + ld));
                } else {
                    const uint16_t *e = (const uint16_t *)b + r + 16 * t;
                    v = bf16_pairs16v(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(me, e)),
                                      _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(mo, e + ld)));
                }
                _mm512_storeu_si512(d + 512 * t + 32 * q, v);
            }
        }
    }
}

// B's pairs [0, kp) × columns [0, cb) read transposed from bf16 (f32 0) or
// fp32: B[k][n] = s[n·ld + k]. Per tile, 16 columns' 16 pairs each,
// transposed as 32-bit elements into the tile's rows.
PACK_FN static void pack_b_cols(uint16_t *dst, const void *s, int ld, int f32, int cb, int kp, int k) {
    for (int c = 0; c < (kp + 15) / 16; c++) {
        int n = chunk_values(c, kp, k);
        for (int t = 0; t < 2; t++) {
            __m512i v[16];
            for (int r = 0; r < 16; r++) {
                size_t o = (size_t)(16 * t + r) * ld + 32 * c;
                if (16 * t + r >= cb) v[r] = _mm512_setzero_si512();
                else if (f32) v[r] = bf16_row32((const float *)s + o, lanes(n), lanes(n - 16));
                else v[r] = _mm512_maskz_loadu_epi16(lanes32(n), (const uint16_t *)s + o);
            }
            bf16_transpose16(v);
            uint16_t *d = dst + (size_t)c * PANEL + 512 * t;
            for (int q = 0; q < 16; q++) _mm512_storeu_si512(d + 32 * q, v[q]);
        }
    }
}

// C tile (ra rows, cb columns of fp32 at c, ldc apart) as a whole 16×16 tile:
// itself when whole, else copied into s with zeros around.
static const float *c_in(const Job *j, const float *c, int ra, int cb, float *s, size_t *stride) {
    if (ra == 16 && cb == 16) {
        *stride = (size_t)j->ldc * 4;
        return c;
    }
    memset(s, 0, 256 * sizeof *s);
    for (int i = 0; i < ra; i++) memcpy(s + 16 * i, c + (size_t)i * j->ldc, (size_t)cb * sizeof *s);
    *stride = 64;
    return s;
}

// The bias's cb values from column j on, every row alike: a stride of 0 when whole.
static const float *bias_in(const float *bias, int cb, float *s, size_t *stride) {
    *stride = 0;
    if (cb == 16) return bias;
    memset(s, 0, 16 * sizeof *s);
    memcpy(s, bias, (size_t)cb * sizeof *s);
    return s;
}

// A tile's sums (s, rows 16 apart) in bf16 into dst (rows ld apart), ra
// rows of cb: half_pack's rounding, a row at a time.
PACK_FN static void tile_bf16(uint16_t *dst, size_t ld, const float *s, int ra, int cb) {
    __mmask16 m = lanes(cb);
    for (int r = 0; r < ra; r++)
        _mm512_mask_cvtepi32_storeu_epi16(dst + (size_t)r * ld, m, f32_to_bf16_x16(_mm512_loadu_si512(s + 16 * r)));
}

// Tile T's sums in: C's (load), the bias's, or zeros.
#define C_IN(T, ti, tj)                                                                         \
    do {                                                                                        \
        float *c = j->C + (size_t)(i + 16 * (ti)) * j->ldc + col + 16 * (tj);                   \
        size_t st;                                                                              \
        if (j->load) _tile_loadd(T, c_in(j, c, ra[ti], cb[tj], cs[T], &st), st);                \
        else if (j->bias) _tile_loadd(T, bias_in(j->bias + col + 16 * (tj), cb[tj], cs[T], &st), st); \
        else _tile_zero(T);                                                                     \
    } while (0)

// Tile T's sums out: into C directly when whole, else through cs[T]; the
// last block's into C16 in bf16, through cs[T].
#define C_OUT(T, ti, tj)                                                                        \
    do {                                                                                        \
        size_t at = (size_t)(i + 16 * (ti)) * j->ldc + col + 16 * (tj);                         \
        float *c = j->C + at;                                                                   \
        if (j->C16 && j->last) {                                                                \
            _tile_stored(T, cs[T], 64);                                                         \
            tile_bf16(j->C16 + at, j->ldc, cs[T], ra[ti], cb[tj]);                              \
        } else if (ra[ti] == 16 && cb[tj] == 16) _tile_stored(T, c, (size_t)j->ldc * 4);        \
        else {                                                                                  \
            _tile_stored(T, cs[T], 64);                                                         \
            for (int r = 0; r < ra[ti]; r++) memcpy(c + (size_t)r * j->ldc, cs[T] + 16 * r, (size_t)cb[tj] * 4); \
        }                                                                                       \
    } while (0)

// M(T, ti, tj) for each sum tile T the supertile has (two_r, two_c): row ti, column tj of its 2 × 2.
#define EACH_TILE(M)                         \
    do {                                     \
        M(0, 0, 0);                          \
        if (two_c) M(1, 0, 1);               \
        if (two_r) M(2, 1, 0);               \
        if (two_r && two_c) M(3, 1, 1);      \
    } while (0)

// Sum tile T to or from the strip at held: 4 whole tiles, 1 KiB apart.
#define STRIP_OUT(T, ti, tj) _tile_stored(T, held + 256 * (T), 64)
#define STRIP_IN(T, ti, tj) _tile_loadd(T, held + 256 * (T), 64)

// The supertile at row i, column col over kq pairs from the panels pa (its
// rows) and pb (its columns): up to 2 × 2 tiles, the reduction in chunks of
// 16 pairs in ascending order, each chunk's products added by the tile unit
// into the fp32 sums. They start from C's (or the bias's, or zeros) in an
// outer block's first inner block (first), else from the 4 whole tiles at
// held; they end in C (last), else at held.
AMX_FN static void supertile(const Job *j, int i, int col, const uint16_t *pa, const uint16_t *pb, int kq, int first,
                             int last, float *held) {
    int ra[2] = {imin(16, j->R - i), imin(16, j->R - i - 16)};
    int cb[2] = {imin(16, j->NC - col), imin(16, j->NC - col - 16)};
    int two_r = ra[1] > 0, two_c = cb[1] > 0;
    float cs[4][256];
    if (first) EACH_TILE(C_IN);
    else EACH_TILE(STRIP_IN);
    int chunks = (kq + 15) / 16;
    for (int c = 0; c < chunks; c++, pa += PANEL, pb += PANEL) {
        _tile_loadd(4, pa, 64);
        _tile_loadd(6, pb, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two_c) {
            _tile_loadd(7, pb + 512, 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (two_r) {
            _tile_loadd(5, pa + 512, 64);
            _tile_dpbf16ps(2, 5, 6);
            if (two_c) _tile_dpbf16ps(3, 5, 7);
        }
    }
    if (last) EACH_TILE(C_OUT);
    else EACH_TILE(STRIP_OUT);
}

// A thread's workspace: the strip of a row's sums between inner blocks (4
// whole tiles for each of the column block's supertiles), its current A
// panel over an inner block, and the B panels of the column block it works
// in over the outer block, each packed on first use (none where B comes as
// panels already).
static _Thread_local void *g_pan;
static _Thread_local size_t g_pan_bytes;

enum { HELD = 4 * 256 };   // floats of a supertile's sums in the strip

// uint16 per panel of kp pairs.
static size_t panel_len(int kp) { return (size_t)(kp + 15) / 16 * PANEL; }

// Supertiles a job's strip holds: a column block's where an outer block of
// kp pairs has more than one inner block of kpc, else none.
static int strip_len(int kp, int kpc, int cpb) { return kp > kpc ? cpb : 0; }

// This thread's workspace for a job of outer blocks of kp pairs, inner
// blocks of kpc, cpb column supertiles (room of them B panels to pack): 0,
// or -1 when the memory is not to be had.
static int panels_ready(int kp, int kpc, int cpb, int room) {
    size_t n = (size_t)strip_len(kp, kpc, cpb) * HELD * sizeof(float) +
               (panel_len(kpc) + (size_t)room * panel_len(kp)) * sizeof(uint16_t);
    return mem_grow(&g_pan, &g_pan_bytes, MEM_WORKSPACE, n) ? 0 : -1;
}

// B's column panel k of column block b over the outer block's pairs, packed
// into slot k from B in its form.
static void pack_b_at(const Job *j, uint16_t *pb, size_t pan, int b, int k) {
    int col = (b * j->cpb + k) * 32, cb = imin(32, j->NC - col), left = j->K - 2 * j->p0, ld = j->b.ld;
    uint16_t *d = pb + (size_t)k * pan;
    const uint16_t *h = j->b.p;
    const float *f = j->b.p;
    switch (j->b.form) {
    case OP_PAIRS16: pack_b(d, h + 2 * ((size_t)j->p0 * ld + col), ld, cb, j->kp); break;
    case OP_ROWS16: pack_b_rows(d, h + (size_t)2 * j->p0 * ld + col, ld, 0, cb, j->kp, left); break;
    case OP_ROWS32: pack_b_rows(d, f + (size_t)2 * j->p0 * ld + col, ld, 1, cb, j->kp, left); break;
    case OP_COLS16: pack_b_cols(d, h + (size_t)col * ld + 2 * j->p0, ld, 0, cb, j->kp, left); break;
    case OP_COLS32: pack_b_cols(d, f + (size_t)col * ld + 2 * j->p0, ld, 1, cb, j->kp, left); break;
    case OP_PANELS:
    case OP_STRIPS16: CHECK(0); break;
    }
}

// Row supertile i's A panel over pairs [p, p + kp), from A in its form.
static void pack_a_at(const Job *j, uint16_t *pa, int i, int p, int kp) {
    int ra = imin(32, j->R - i), left = j->K - 2 * p, ld = j->a.ld;
    switch (j->a.form) {
    case OP_PAIRS16: pack_a(pa, (const uint16_t *)j->a.p + (size_t)i * ld + 2 * p, ld, ra, kp); break;
    case OP_ROWS32: pack_a_rows32(pa, (const float *)j->a.p + (size_t)i * ld + 2 * p, ld, ra, kp, left); break;
    case OP_COLS32: pack_a_cols(pa, (const float *)j->a.p + (size_t)2 * p * ld + i, ld, 1, ra, kp, left); break;
    case OP_COLS16: pack_a_cols(pa, (const uint16_t *)j->a.p + (size_t)2 * p * ld + i, ld, 0, ra, kp, left); break;
    default: CHECK(0); break;
    }
}

// B's column panel cj of column block b packed, with those before it not
// yet packed: the block's packed ones are [*bmin, *bmax] (a share starts or
// ends inside a row, so its columns come in order from *bmin on).
static void pack_b_upto(const Job *j, uint16_t *pb, size_t pan, int b, int cj, int *bblock, int *bmin, int *bmax) {
    if (b != *bblock) *bblock = b, *bmin = cj, *bmax = cj - 1;
    for (int k = *bmax + 1; k <= cj; k++) pack_b_at(j, pb, pan, b, k);
    for (int k = cj; k < *bmin; k++) pack_b_at(j, pb, pan, b, k);
    if (cj > *bmax) *bmax = cj;
    if (cj < *bmin) *bmin = cj;
}

// Supertiles [lo, hi) of the outer block in tile order, on this thread's
// tiles: a row's run of them at a time, through the inner blocks in order.
static void job_share(const Job *j, long lo, long hi) {
    if (lo >= hi) return;
    size_t pan = panel_len(j->kp);   // a B panel over the outer block
    float *held = g_pan;             // panels_ready() for the job's first (longest) block
    uint16_t *pa = (uint16_t *)(held + (size_t)strip_len(j->kp, j->kpc, j->cpb) * HELD), *pb = pa + panel_len(j->kpc);
    int given = j->b.form == OP_PANELS;   // B's panels over the whole reduction, from the block's chunk on
    const uint16_t *gb = given ? (const uint16_t *)j->b.p + (size_t)j->p0 / 16 * PANEL : NULL;
    size_t gpan = panel_len(j->b.ld);   // a column panel of the given ones: over the pairs they were packed over
    int bblock = -1, bmin = 0, bmax = -1;
    amx_configure();
    long full = (long)j->rt * j->cpb;   // supertiles in a full column block
    for (long x = lo; x < hi;) {
        int b = (int)(x / full), w = imin(j->ct - b * j->cpb, j->cpb);
        long r = x - b * full;
        int ri = (int)(r / w), c0 = (int)(r % w), c1 = (int)(c0 + (hi - x < w - c0 ? hi - x : w - c0)), i = ri * 32;
        for (int q = 0; q < j->kp; q += j->kpc) {
            int kq = imin(j->kpc, j->kp - q);
            pack_a_at(j, pa, i, j->p0 + q, kq);
            for (int cj = c0; cj < c1; cj++) {
                int col = (b * j->cpb + cj) * 32;
                if (!given && q == 0) pack_b_upto(j, pb, pan, b, cj, &bblock, &bmin, &bmax);
                const uint16_t *bp = given ? gb + (size_t)(col / 32) * gpan : pb + (size_t)cj * pan;
                supertile(j, i, col, pa, bp + (size_t)q / 16 * PANEL, kq, q == 0, q + kq >= j->kp,
                          held + (size_t)(cj - c0) * HELD);
            }
        }
        for (int cj = c0; cj < c1 && j->part && j->last; cj++) {
            int col = (b * j->cpb + cj) * 32;
            j->part[x + cj - c0] = bf16_tile_squares(j->C + (size_t)i * j->ldc + col, (size_t)j->ldc,
                                                     imin(32, j->R - i), imin(32, j->NC - col));
        }
        x += c1 - c0;
    }
    amx_release();
}

// The outer reduction blocks in order, this thread's supertiles [lo, hi) of
// each: a block's sums are C's (or the bias's) plus its pairs, stored for
// the next block to load. The tile order is the same in every block, so a
// thread loads only the sums it stored itself and never waits for another.
static void job_blocks(Job *j, int KPS, int accumulate, const float *bias, long lo, long hi) {
    for (j->p0 = 0; j->p0 < j->KP; j->p0 += KPS) {
        j->kp = imin(KPS, j->KP - j->p0), j->load = accumulate || j->p0 > 0, j->last = j->p0 + KPS >= j->KP;
        j->bias = j->p0 > 0 ? NULL : bias;
        job_share(j, lo, hi);
    }
}

enum {
    AMX_KPMAX = 192,          // the longest inner block (pairs), a multiple of 16: A's panel 24 KiB, in L1
    AMX_KPOUT = 384,          // a reduction this short is one outer block; a longer one, outer blocks of one inner
    AMX_BLOCK = 512 << 10,    // bytes of packed B a column block holds, about: a quarter of a core's L2
    AMX_BLOCK_ROWS = 1024,    // from this many rows, a one-block reduction's column blocks twice that
};

int gemm_amx(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate, const float *bias,
             uint16_t *C16, int nt, double *sq) {
    CHECKF(!sq || !C16, "gemm_amx: a sum of squares of sums kept in bf16");
    if (a.form != OP_PAIRS16 && a.form != OP_ROWS32 && a.form != OP_COLS32 && a.form != OP_COLS16) return -1;
    if (b.form == OP_STRIPS16) return -1;   // the vector units' layout: gemm_bf16 runs it there
    // Inner blocks of equal length in whole chunks of 16 pairs, the last shorter: only the last chunk
    // of the whole reduction is partial. A block's sums go to the next exactly (through the strip or
    // C), so the bits do not depend on the blocks. A short reduction (the forwards of the attention
    // and MLP inputs, the MLP output's input gradient, the head's forward) is one outer block: its C
    // is written once, not stored and reloaded from memory (at 2,048 rows the fc and qkv forwards and
    // the MLP output's input gradient 9-17% faster in the step, the head's level).
    // A longer one goes through C block by block: one outer block would hold its B panels over the
    // whole reduction, so fewer of them per column block, and A would be packed again for each
    // (the weight gradients, A transposed, were 10-25% slower so).
    int KP = (K + 1) / 2, nkb = (KP + AMX_KPMAX - 1) / AMX_KPMAX, KPC = ((KP + nkb - 1) / nkb + 15) / 16 * 16;
    int KPS = KP <= AMX_KPOUT ? KP : KPC;   // KPC < KP past AMX_KPOUT
    int rt = (R + 31) / 32, ct = (NC + 31) / 32;
    size_t block = KPS == KP && R >= AMX_BLOCK_ROWS ? 2 * (size_t)AMX_BLOCK : AMX_BLOCK;
    int cpb = (int)(block / ((size_t)KPS * 32 * 4));
    if (cpb < 1) cpb = 1;
    if (cpb > ct) cpb = ct;
    int nb = (ct + cpb / 2) / cpb;
    cpb = (ct + nb - 1) / nb;
    long tiles = (long)rt * ct;
    if (nt > tiles) nt = (int)tiles;
    int room = b.form == OP_PANELS ? 0 : cpb;   // B panels a thread packs
    Job j = {.a = a, .b = b, .C = C, .C16 = C16, .bias = bias, .R = R, .NC = NC, .K = K, .KP = KP, .ldc = ldc,
             .kpc = KPC, .rt = rt, .ct = ct, .cpb = cpb};
    // a sum of squares where its parts' room is to be had (else *sq stays as it was)
    if (sq) j.part = malloc((size_t)tiles * sizeof *j.part);
    if (nt <= 1) {
        if (panels_ready(KPS, KPC, cpb, room)) {
            free(j.part);
            return -1;
        }
        job_blocks(&j, KPS, accumulate, bias, 0, tiles);
        bf16_sum_parts(j.part, tiles, sq);
        return 0;
    }
    // One team for every reduction block, so each thread gets its panels once, before any sum is written.
    int failed = 0;
    #pragma omp parallel num_threads(nt)
    {
        int th = omp_get_thread_num(), n = omp_get_num_threads();
        Job mine = j;   // each thread's own block bounds
        if (!threads_any_failed(&failed, !panels_ready(KPS, KPC, cpb, room)))
            job_blocks(&mine, KPS, accumulate, bias, tiles * th / n, tiles * (th + 1) / n);
    }
    if (failed) {
        free(j.part);
        return -1;
    }
    bf16_sum_parts(j.part, tiles, sq);
    return 0;
}

size_t amx_panels_len(int K, int NC) { return (size_t)(NC + 31) / 32 * panel_len((K + 1) / 2); }

size_t amx_panels_offset(int K, int k0, int c0) { return (size_t)c0 / 32 * panel_len((K + 1) / 2) + (size_t)k0 / 32 * PANEL; }

void amx_panels(uint16_t *dst, Bf16Op b, int K, int NC) {
    int KP = (K + 1) / 2, ct = (NC + 31) / 32;
    size_t pan = panel_len(KP);
    CHECK(b.form != OP_PANELS);
    Job j = {.b = b, .NC = NC, .K = K, .KP = KP, .p0 = 0, .kp = KP, .cpb = 1};
    // each column panel over the whole reduction: block cp's one panel
    #pragma omp parallel for schedule(static) if (!omp_in_parallel() && (double)K * NC > 65536)
    for (int cp = 0; cp < ct; cp++) pack_b_at(&j, dst + (size_t)cp * pan, pan, cp, 0);
}

#else

int amx_usable(void) { return 0; }
void amx_configure(void) {}
void amx_release(void) {}
int gemm_amx(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate, const float *bias,
             uint16_t *C16, int nt, double *sq) {
    (void)R, (void)NC, (void)K, (void)a, (void)b, (void)C, (void)ldc, (void)accumulate, (void)bias, (void)C16, (void)nt;
    (void)sq;
    return -1;
}
size_t amx_panels_len(int K, int NC) {
    (void)K, (void)NC;
    return 0;
}
void amx_panels(uint16_t *dst, Bf16Op b, int K, int NC) { (void)dst, (void)b, (void)K, (void)NC; }
size_t amx_panels_offset(int K, int k0, int c0) {
    (void)K, (void)k0, (void)c0;
    return 0;
}

#endif
