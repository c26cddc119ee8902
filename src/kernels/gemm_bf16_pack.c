// kernels/gemm_bf16_pack — the packers of kernels/gemm_bf16's operand
// layouts (its header declares them): fp32 rounded to bf16 (nearest even)
// or bf16 moved as it is, into A's rows of pairs and B's pairs, from row-major
// or transposed sources, on the kernels' threads for a large operand.
#include <omp.h>
#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "kernels/gemm_bf16.h"
#include "kernels/threads.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>

#include "kernels/bf16_impl.h"

static int pack_threads(double elems) { return omp_in_parallel() || elems < 65536 ? 1 : kernels_threads(); }

// A packer's operands; its passes run over [lo, hi) of its rows or blocks.
// B's pairs go into strips of W columns (W = NC: the pairs (kp, NC, 2)).
typedef struct Pack {
    uint16_t *dst;
    const void *src;
    int ldd, lds, K, NC, W;
} Pack;

// Where B's pair p of column n goes: its strip starts after c0 columns' kp
// pairs, and the strip's rows are w pairs long. n % 16 == 0 for a vector of
// 16 pairs: W is a multiple of 16, so the vector never straddles two strips.
static inline int strip_w(const Pack *pk, int n) {
    int c0 = n - n % pk->W;
    return pk->NC - c0 < pk->W ? pk->NC - c0 : pk->W;
}
static inline uint16_t *pair_at(const Pack *pk, int p, int n) {
    int c0 = n - n % pk->W;
    return pk->dst + 2 * ((size_t)c0 * ((pk->K + 1) / 2) + (size_t)p * strip_w(pk, n) + (n - c0));
}
typedef void (*PackFn)(const Pack *pk, int lo, int hi);

typedef struct {
    PackFn fn;
    const Pack *pk;
} PackJob;
static void pack_chunk(const void *arg, long lo, long hi) {
    const PackJob *j = arg;
    j->fn(j->pk, (int)lo, (int)hi);
}

// fn over [0, n) on nt threads, in chunks each takes as it finishes its
// last (threads_chunks), 8 a thread.
static void pack_split(int nt, int n, PackFn fn, const Pack *pk) {
    PackJob j = {fn, pk};
    threads_chunks(nt, n, n / (8L * (nt > 1 ? nt : 1)), pack_chunk, &j);
}

// 16 floats to 16 bf16, nearest even.
static inline __m256i cvt16(const float *s) { return (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s)); }

static void rows_pass(const Pack *pk, int lo, int hi) {
    int K = pk->K, K16 = K & ~15;
    for (int r = lo; r < hi; r++) {
        uint16_t *d = pk->dst + (size_t)r * pk->ldd;
        const float *s = (const float *)pk->src + (size_t)r * pk->lds;
        for (int k = 0; k < K16; k += 16) _mm256_storeu_si256((__m256i *)(d + k), cvt16(s + k));
        for (int k = K16; k < K; k++) d[k] = f32_to_bf16(s[k]);
        if (K & 1) d[K] = 0;
    }
}

void bf16_pack_rows(uint16_t *dst, int ldd, const float *src, int lds, int R, int K) {
    Pack pk = {.dst = dst, .src = src, .ldd = ldd, .lds = lds, .K = K};
    pack_split(pack_threads((double)R * K), R, rows_pass, &pk);
}

// Blocks of 32 rows of src (16 k-pairs) × 16 columns: each pair of rows
// rounded into one vector of pairs, the 16 vectors transposed as 32-bit
// elements, each then a whole 64-byte piece of a row of dst (16 pairs).
// Four column strips at a time, so each row of src is read 256 bytes on.
static void rows_t_pass(const Pack *pk, int lo, int hi) {
    const float *src = pk->src;
    int lds = pk->lds, ldd = pk->ldd, K32 = pk->K & ~31;
    for (int s0 = lo; s0 < hi; s0 += 4) {
        int s1 = s0 + 4 < hi ? s0 + 4 : hi;
        for (int k0 = 0; k0 < K32; k0 += 32)
            for (int st = s0; st < s1; st++) {
                int r0 = 16 * st;
                __m512i v[16];
                for (int p = 0; p < 16; p++) {
                    const float *e = src + (size_t)(k0 + 2 * p) * lds + r0;
                    v[p] = bf16_pairs32(_mm512_loadu_ps(e), _mm512_loadu_ps(e + lds));
                }
                bf16_transpose16(v);
                for (int r = 0; r < 16; r++) _mm512_storeu_si512(pk->dst + (size_t)(r0 + r) * ldd + k0, v[r]);
            }
    }
}

void bf16_pack_rows_t(uint16_t *dst, int ldd, const float *src, int lds, int R, int K) {
    int R16 = R & ~15, K32 = K & ~31;
    Pack pk = {.dst = dst, .src = src, .ldd = ldd, .lds = lds, .K = K};
    pack_split(pack_threads((double)R * K), R16 / 16, rows_t_pass, &pk);
    for (int r = 0; r < R; r++) {   // the edges: the last K % 32 columns of every row, the last R % 16 rows
        uint16_t *d = dst + (size_t)r * ldd;
        for (int k = r < R16 ? K32 : 0; k < K; k++) d[k] = f32_to_bf16(src[(size_t)k * lds + r]);
        if (K & 1) d[K] = 0;
    }
}

static void pairs_pass(const Pack *pk, int lo, int hi) {
    int K = pk->K, NC = pk->NC, N16 = NC & ~15;
    for (int p = lo; p < hi; p++) {
        const float *e = (const float *)pk->src + (size_t)(2 * p) * pk->lds, *o = 2 * p + 1 < K ? e + pk->lds : NULL;
        for (int c0 = 0; c0 < NC; c0 += pk->W) {   // a strip's row at a time: one run of memory
            uint16_t *d = pair_at(pk, p, c0) - 2 * c0;   // column n's pair at d + 2n
            int c1 = c0 + pk->W < N16 ? c0 + pk->W : N16;
            for (int n = c0; n < c1; n += 16) {
                __m512 ve = _mm512_loadu_ps(e + n), vo = o ? _mm512_loadu_ps(o + n) : _mm512_setzero_ps();
                _mm512_storeu_si512(d + 2 * n, bf16_pairs32(ve, vo));
            }
        }
        for (int n = N16; n < NC; n++) {
            uint16_t *d = pair_at(pk, p, n);
            d[0] = f32_to_bf16(e[n]);
            d[1] = o ? f32_to_bf16(o[n]) : 0;
        }
    }
}

void bf16_pack_pairs(uint16_t *dst, const float *src, int lds, int K, int NC) {
    Pack pk = {.dst = dst, .src = src, .lds = lds, .K = K, .NC = NC, .W = NC};
    pack_split(pack_threads((double)NC * K), (K + 1) / 2, pairs_pass, &pk);
}

// 16×16 blocks of pairs: 16 rows of src (16 n, 32 k each) converted into 16 pairs each, transposed in
// registers, then written as 16 rows of dst (16 p).
static void pairs_t_pass(const Pack *pk, int lo, int hi) {
    int K32 = pk->K & ~31;
    for (int n0 = 16 * lo; n0 < 16 * hi; n0 += 16) {
        for (int k0 = 0; k0 < K32; k0 += 32) {
            __m512i v[16];
            for (int n = 0; n < 16; n++) {
                const float *s = (const float *)pk->src + (size_t)(n0 + n) * pk->lds + k0;
                v[n] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 16), _mm512_loadu_ps(s));   // pairs (k, k+1)
            }
            bf16_transpose16(v);
            uint16_t *d = pair_at(pk, k0 / 2, n0);
            size_t row = 2 * (size_t)strip_w(pk, n0);
            for (int p = 0; p < 16; p++) _mm512_storeu_si512(d + p * row, v[p]);
        }
    }
}

// The edges of a transposed B: pairs past K32 for every column, every pair of the last NC % 16.
static void pairs_t_edges(const Pack *pk, int f32) {
    int K = pk->K, KP = (K + 1) / 2, K32 = K & ~31, NC = pk->NC, N16 = NC & ~15;
    for (int n = 0; n < NC; n++)
        for (int p = n < N16 ? K32 / 2 : 0; p < KP; p++) {
            uint16_t *d = pair_at(pk, p, n);
            if (f32) {
                const float *s = (const float *)pk->src + (size_t)n * pk->lds;
                d[0] = f32_to_bf16(s[2 * p]);
                d[1] = 2 * p + 1 < K ? f32_to_bf16(s[2 * p + 1]) : 0;
            } else {
                const uint16_t *s = (const uint16_t *)pk->src + (size_t)n * pk->lds;
                d[0] = s[2 * p];
                d[1] = 2 * p + 1 < K ? s[2 * p + 1] : 0;
            }
        }
}

void bf16_pack_pairs_t(uint16_t *dst, const float *src, int lds, int K, int NC) {
    Pack pk = {.dst = dst, .src = src, .lds = lds, .K = K, .NC = NC, .W = NC};
    pack_split(pack_threads((double)NC * K), (NC & ~15) / 16, pairs_t_pass, &pk);
    pairs_t_edges(&pk, 1);
}

static void pairs16_pass(const Pack *pk, int p0, int p1) {
    int K = pk->K, NC = pk->NC, N16 = NC & ~15;
    const __m256i zero = _mm256_setzero_si256();
    for (int p = p0; p < p1; p++) {
        const uint16_t *e = (const uint16_t *)pk->src + (size_t)(2 * p) * pk->lds;
        const uint16_t *o = 2 * p + 1 < K ? e + pk->lds : NULL;
        for (int c0 = 0; c0 < NC; c0 += pk->W) {   // a strip's row at a time: one run of memory
            uint16_t *d = pair_at(pk, p, c0) - 2 * c0;   // column n's pair at d + 2n
            int c1 = c0 + pk->W < N16 ? c0 + pk->W : N16;
            for (int n = c0; n < c1; n += 16) {
                __m256i ve = _mm256_loadu_si256((const __m256i *)(e + n));
                __m256i vo = o ? _mm256_loadu_si256((const __m256i *)(o + n)) : zero;
                _mm512_storeu_si512(d + 2 * n, bf16_pairs16v(ve, vo));
            }
        }
        for (int n = N16; n < NC; n++) {
            uint16_t *d = pair_at(pk, p, n);
            d[0] = e[n];
            d[1] = o ? o[n] : 0;
        }
    }
}

void bf16_pairs16(uint16_t *dst, const uint16_t *src, int lds, int K, int NC) {
    Pack pk = {.dst = dst, .src = src, .lds = lds, .K = K, .NC = NC, .W = NC};
    pack_split(pack_threads((double)NC * K), (K + 1) / 2, pairs16_pass, &pk);
}

// 16×16 blocks of pairs: 16 rows of src (16 n, 16 pairs each) transposed in registers as 32-bit elements.
static void pairs_t16_pass(const Pack *pk, int lo, int hi) {
    int K32 = pk->K & ~31;
    for (int n0 = 16 * lo; n0 < 16 * hi; n0 += 16) {
        for (int k0 = 0; k0 < K32; k0 += 32) {
            __m512i v[16];
            for (int n = 0; n < 16; n++)
                v[n] = _mm512_loadu_si512((const uint16_t *)pk->src + (size_t)(n0 + n) * pk->lds + k0);
            bf16_transpose16(v);
            uint16_t *d = pair_at(pk, k0 / 2, n0);
            size_t row = 2 * (size_t)strip_w(pk, n0);
            for (int p = 0; p < 16; p++) _mm512_storeu_si512(d + p * row, v[p]);
        }
    }
}

void bf16_pairs_t16(uint16_t *dst, const uint16_t *src, int lds, int K, int NC) {
    Pack pk = {.dst = dst, .src = src, .lds = lds, .K = K, .NC = NC, .W = NC};
    pack_split(pack_threads((double)NC * K), (NC & ~15) / 16, pairs_t16_pass, &pk);
    pairs_t_edges(&pk, 0);
}

void bf16_strips(uint16_t *dst, Bf16Op b, int K, int NC) {
    Pack pk = {.dst = dst, .src = b.p, .lds = b.ld, .K = K, .NC = NC, .W = bf16_strip_width(NC)};
    int nt = pack_threads((double)NC * K), KP = (K + 1) / 2;
    switch (b.form) {
    case OP_ROWS32: pack_split(nt, KP, pairs_pass, &pk); break;
    case OP_ROWS16: pack_split(nt, KP, pairs16_pass, &pk); break;
    case OP_COLS32:
    case OP_COLS16:
        pack_split(nt, (NC & ~15) / 16, b.form == OP_COLS32 ? pairs_t_pass : pairs_t16_pass, &pk);
        pairs_t_edges(&pk, b.form == OP_COLS32);
        break;
    default: CHECKF(0, "bf16_strips: form %d is not a B to pack", (int)b.form);
    }
}

// rows_t_pass from bf16: each pair of rows' 16 values interleaved into one
// vector of pairs, no rounding. Eight column strips at a time: each row of
// src is read 256 bytes on.
static void rows_t16_pass(const Pack *pk, int lo, int hi) {
    const uint16_t *src = pk->src;
    int lds = pk->lds, ldd = pk->ldd, K32 = pk->K & ~31;
    for (int s0 = lo; s0 < hi; s0 += 8) {
        int s1 = s0 + 8 < hi ? s0 + 8 : hi;
        for (int k0 = 0; k0 < K32; k0 += 32)
            for (int st = s0; st < s1; st++) {
                int r0 = 16 * st;
                __m512i v[16];
                for (int p = 0; p < 16; p++) {
                    const uint16_t *e = src + (size_t)(k0 + 2 * p) * lds + r0;
                    v[p] = bf16_pairs16v(_mm256_loadu_si256((const __m256i *)e),
                                         _mm256_loadu_si256((const __m256i *)(e + lds)));
                }
                bf16_transpose16(v);
                for (int r = 0; r < 16; r++) _mm512_storeu_si512(pk->dst + (size_t)(r0 + r) * ldd + k0, v[r]);
            }
    }
}

void bf16_rows_t16(uint16_t *dst, int ldd, const uint16_t *src, int lds, int R, int K) {
    int R16 = R & ~15, K32 = K & ~31;
    Pack pk = {.dst = dst, .src = src, .ldd = ldd, .lds = lds, .K = K};
    pack_split(pack_threads((double)R * K), R16 / 16, rows_t16_pass, &pk);
    for (int r = 0; r < R; r++) {   // the edges, as bf16_pack_rows_t's
        uint16_t *d = dst + (size_t)r * ldd;
        for (int k = r < R16 ? K32 : 0; k < K; k++) d[k] = src[(size_t)k * lds + r];
        if (K & 1) d[K] = 0;
    }
}

void bf16_round_row(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i += 32) {
        size_t m = n - i;
        __mmask16 lo = m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1);
        __mmask16 hi = m >= 32 ? (__mmask16)0xFFFF : m <= 16 ? 0 : (__mmask16)((1u << (m - 16)) - 1);
        __mmask32 all = m >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << m) - 1);
        _mm512_mask_storeu_epi16(dst + i, all, bf16_row32(src + i, lo, hi));   // loaded before stored: in place
    }
}

#else   // no AVX512_BF16: callers ask gemm_bf16_own() first

#define NOT_BUILT CHECKF(0, "the bf16 kernel is not built in (no AVX512_BF16): ask gemm_bf16_own() first")
void bf16_pack_rows(uint16_t *dst, int ldd, const float *src, int lds, int R, int K) {
    (void)dst, (void)ldd, (void)src, (void)lds, (void)R, (void)K;
    NOT_BUILT;
}
void bf16_pack_rows_t(uint16_t *dst, int ldd, const float *src, int lds, int R, int K) {
    (void)dst, (void)ldd, (void)src, (void)lds, (void)R, (void)K;
    NOT_BUILT;
}
void bf16_pack_pairs(uint16_t *dst, const float *src, int lds, int K, int NC) {
    (void)dst, (void)src, (void)lds, (void)K, (void)NC;
    NOT_BUILT;
}
void bf16_pack_pairs_t(uint16_t *dst, const float *src, int lds, int K, int NC) {
    (void)dst, (void)src, (void)lds, (void)K, (void)NC;
    NOT_BUILT;
}

void bf16_pairs16(uint16_t *dst, const uint16_t *src, int lds, int K, int NC) {
    (void)dst, (void)src, (void)lds, (void)K, (void)NC;
    NOT_BUILT;
}
void bf16_pairs_t16(uint16_t *dst, const uint16_t *src, int lds, int K, int NC) {
    (void)dst, (void)src, (void)lds, (void)K, (void)NC;
    NOT_BUILT;
}
void bf16_strips(uint16_t *dst, Bf16Op b, int K, int NC) {
    (void)dst, (void)b, (void)K, (void)NC;
    NOT_BUILT;
}
void bf16_rows_t16(uint16_t *dst, int ldd, const uint16_t *src, int lds, int R, int K) {
    (void)dst, (void)ldd, (void)src, (void)lds, (void)R, (void)K;
    NOT_BUILT;
}
void bf16_round_row(uint16_t *dst, const float *src, size_t n) {
    (void)dst, (void)src, (void)n;
    NOT_BUILT;
}

#endif
