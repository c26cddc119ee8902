#include "core/rng.h"

#include <math.h>

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void rng_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static inline double u53(uint32_t a, uint32_t b) {
    uint64_t x = ((uint64_t)a << 21) ^ (uint64_t)b;     // 53 bits after the mask
    return (double)(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    rng_philox(seed, stream, index, r);
    return u53(r[0], r[1]);
}

double rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    // Indices 2k and 2k+1 share Philox block k of the stream's upper half:
    // the cosine and sine halves of one Box-Muller pair.
    uint32_t r[4];
    rng_philox(seed, stream ^ 0x8000000000000000ull, index >> 1, r);
    double u1 = 1.0 - u53(r[0], r[1]);       // (0, 1]: log is finite
    double u2 = u53(r[2], r[3]);
    double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586 * u2;
    return rad * ((index & 1) ? sin(ang) : cos(ang));
}

void rng_normal_pair(uint64_t seed, uint64_t stream, uint64_t pair, double out[2]) {
    uint32_t r[4];
    rng_philox(seed, stream ^ 0x8000000000000000ull, pair, r);
    double u1 = 1.0 - u53(r[0], r[1]);
    double u2 = u53(r[2], r[3]);
    double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586 * u2;
    out[0] = rad * cos(ang);
    out[1] = rad * sin(ang);
}

uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n) {
    // Multiply-shift of 64 random bits: the bias is at most n / 2^64.
    uint32_t r[4];
    rng_philox(seed, stream, index, r);
    uint64_t x = ((uint64_t)r[0] << 32) | r[1];
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

uint64_t rng_stream_of(const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33;
    return h;
}
