// core/half — the 16-bit floating-point formats: bf16 (the top half of an
// fp32: its range, 8 bits of precision) and IEEE fp16 (5 exponent bits,
// 11 bits of precision, largest finite 65504). Conversions from fp32 round
// to nearest even; NaN stays NaN; fp16 overflows to ±inf, as hardware does.
// This CPU has no 16-bit arithmetic: tessera stores in 16 bits and computes
// in fp32 (DESIGN §1.6).
#ifndef TSR_CORE_HALF_H
#define TSR_CORE_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

// The precision of a run: what its weights and activations are stored in.
typedef enum { PREC_FP32, PREC_BF16, PREC_FP16, PREC_COUNT } Precision;

const char *prec_name(Precision p);     // "fp32", "bf16", "fp16"
int prec_parse(const char *s, Precision *p);   // 0, or -1 for another name

static inline float bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

// Without branches (a NaN quieted, not rounded), so loops of it vectorise.
static inline uint16_t f32_to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
    uint32_t r = nan ? b | 0x400000u : b + 0x7FFFu + ((b >> 16) & 1u);
    return (uint16_t)(r >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// dst[i] = src[i] in the format p (PREC_BF16 or PREC_FP16), n of them.
void half_pack(Precision p, uint16_t *dst, const float *src, size_t n);
// dst[i] = src[i] back in fp32 (exact).
void half_unpack(Precision p, float *dst, const uint16_t *src, size_t n);
// dst[i] = src[i] rounded to the format p and back (dst may be src): the
// value a 16-bit store keeps. PREC_FP32 copies.
void half_round(Precision p, float *dst, const float *src, size_t n);
// half_pack on the calling thread alone, for a block a kernel has just
// written (AdamW writing the 16-bit copy as it updates the masters).
void half_pack_serial(Precision p, uint16_t *dst, const float *src, size_t n);
// half_pack_serial's bits written with streaming stores (x86-64): for a
// copy not read again soon (AdamW's 16-bit weights, read at the next
// forward), the stores skip the cache and the read for ownership a plain
// store makes of each line.
void half_pack_stream(Precision p, uint16_t *dst, const float *src, size_t n);
// half_pack into h and the same values widened into dst, in one pass.
void half_pack_widen(Precision p, uint16_t *h, float *dst, const float *src, size_t n);

#endif
