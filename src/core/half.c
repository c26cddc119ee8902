#include "core/half.h"

#include <string.h>

#include "core/check.h"
#include "core/half_x16.h"
#include "core/prof.h"

#include <stdint.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#ifdef __F16C__
#include <immintrin.h>
#endif

const char *prec_name(Precision p) {
    static const char *n[PREC_COUNT] = {"fp32", "bf16", "fp16"};
    return p >= 0 && p < PREC_COUNT ? n[p] : "?";
}

int prec_parse(const char *s, Precision *p) {
    for (int k = 0; k < PREC_COUNT; k++)
        if (!strcmp(s, prec_name((Precision)k))) {
            *p = (Precision)k;
            return 0;
        }
    return -1;
}

#ifdef __F16C__
float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
uint16_t f32_to_f16(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#else
float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u, b;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f;
        return s ? -v : v;
    }
    b = e == 31 ? s | 0x7F800000u | m << 13 : s | (e + 112u) << 23 | m << 13;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t s = (b >> 16) & 0x8000u, e = (b >> 23) & 0xFFu, m = b & 0x7FFFFFu;
    if (e == 0xFF) return (uint16_t)(s | 0x7C00u | (m ? 0x200u : 0));
    int ex = (int)e - 127 + 15;
    if (ex >= 31) return (uint16_t)(s | 0x7C00u);
    if (ex <= 0) {   // subnormal or zero
        if (ex < -10) return (uint16_t)s;
        m |= 0x800000u;
        int shift = 14 - ex;
        uint32_t half = 1u << (shift - 1), r = m & ((1u << shift) - 1), v = m >> shift;
        if (r > half || (r == half && (v & 1))) v++;
        return (uint16_t)(s | v);
    }
    uint32_t v = (uint32_t)ex << 10 | m >> 13, r = m & 0x1FFFu;
    if (r > 0x1000u || (r == 0x1000u && (v & 1))) v++;   // may carry into the exponent: correct
    return (uint16_t)(s | v);
}
#endif

// The bulk conversions split n over the threads in blocks of this many.
enum { HALF_BLOCK = 1 << 14 };

// src in the format p into dst: bf16 16 values at a time on AVX-512, else
// by f32_to_bf16 (a loop the compiler vectorises); fp16 by F16C.
static void pack_block(Precision p, uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    if (p == PREC_BF16) {
#ifdef __AVX512F__
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(f32_to_bf16_x16(_mm512_loadu_si512(src + i))));
#endif
        for (; i < n; i++) dst[i] = f32_to_bf16(src[i]);
        return;
    }
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = f32_to_f16(src[i]);
}

static void unpack_block(Precision p, float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    if (p == PREC_BF16) {
        for (; i < n; i++) {
            uint32_t b = (uint32_t)src[i] << 16;
            memcpy(dst + i, &b, 4);
        }
        return;
    }
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

static void round_block(Precision p, float *dst, const float *src, size_t n) {
    uint16_t tmp[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t k = n - i < 256 ? n - i : 256;
        pack_block(p, tmp, src + i, k);
        unpack_block(p, dst + i, tmp, k);
    }
}

// Runs one of the conversions over n values in blocks, split over the threads.
// (BULK_PACK_WIDEN also widens what it packed into dst2.)
enum { BULK_PACK, BULK_UNPACK, BULK_ROUND, BULK_PACK_WIDEN };
static void bulk(int op, Precision p, void *dst, const void *src, size_t n, float *dst2) {
    long nb = (long)((n + HALF_BLOCK - 1) / HALF_BLOCK);
#pragma omp parallel for schedule(static) if (nb > 4)
    for (long b = 0; b < nb; b++) {
        size_t lo = (size_t)b * HALF_BLOCK, k = n - lo < HALF_BLOCK ? n - lo : HALF_BLOCK;
        if (op == BULK_PACK || op == BULK_PACK_WIDEN) pack_block(p, (uint16_t *)dst + lo, (const float *)src + lo, k);
        if (op == BULK_PACK_WIDEN) unpack_block(p, dst2 + lo, (const uint16_t *)dst + lo, k);
        if (op == BULK_UNPACK) unpack_block(p, (float *)dst + lo, (const uint16_t *)src + lo, k);
        if (op == BULK_ROUND) round_block(p, (float *)dst + lo, (const float *)src + lo, k);
    }
}

void half_pack(Precision p, uint16_t *dst, const float *src, size_t n) {
    double t0 = prof_begin();
    CHECKF(p == PREC_BF16 || p == PREC_FP16, "packing into %s", prec_name(p));
    bulk(BULK_PACK, p, dst, src, n, NULL);
    prof_end(t0, PROF_HALF, 0, 6.0 * n);
}

void half_pack_serial(Precision p, uint16_t *dst, const float *src, size_t n) { pack_block(p, dst, src, n); }

void half_pack_stream(Precision p, uint16_t *dst, const float *src, size_t n) {
#if defined(__x86_64__)
    if (!((uintptr_t)dst & 1)) {
        size_t i = ((16 - ((uintptr_t)dst & 15)) & 15) / 2;   // values before a 16-byte boundary
        if (i > n) i = n;
        pack_block(p, dst, src, i);
        for (; i + 64 <= n; i += 64) {   // 64 values packed in L1, then streamed out
            _Alignas(16) uint16_t t[64];
            pack_block(p, t, src + i, 64);
            for (int k = 0; k < 64; k += 8)
                _mm_stream_si128((__m128i *)(dst + i + k), _mm_load_si128((const __m128i *)(t + k)));
        }
        pack_block(p, dst + i, src + i, n - i);
        _mm_sfence();   // the streamed stores ordered before whatever the caller does next
        return;
    }
#endif
    pack_block(p, dst, src, n);
}

void half_pack_widen(Precision p, uint16_t *h, float *dst, const float *src, size_t n) {
    double t0 = prof_begin();
    CHECKF(p == PREC_BF16 || p == PREC_FP16, "packing into %s", prec_name(p));
    bulk(BULK_PACK_WIDEN, p, h, src, n, dst);
    prof_end(t0, PROF_HALF, 0, 10.0 * n);
}

void half_unpack(Precision p, float *dst, const uint16_t *src, size_t n) {
    double t0 = prof_begin();
    CHECKF(p == PREC_BF16 || p == PREC_FP16, "unpacking %s", prec_name(p));
    bulk(BULK_UNPACK, p, dst, src, n, NULL);
    prof_end(t0, PROF_HALF, 0, 6.0 * n);
}

void half_round(Precision p, float *dst, const float *src, size_t n) {
    if (p == PREC_FP32) {
        if (dst != src) memmove(dst, src, n * sizeof *dst);
        return;
    }
    double t0 = prof_begin();
    bulk(BULK_ROUND, p, dst, src, n, NULL);
    prof_end(t0, PROF_HALF, 0, 8.0 * n);
}
