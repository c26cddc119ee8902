// core/rng — counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
//
// A draw is a pure function of (seed, stream, index): no state, so any rank
// can produce element i of any tensor without producing elements 0..i-1. This
// is what makes initial weights identical across parallel layouts.
#ifndef TSR_CORE_RNG_H
#define TSR_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

// The raw generator: 4 x 32 random bits for counter (ctr_hi, ctr_lo) under key.
void rng_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]);

// Uniform in [0, 1) with 53 random bits.
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal (Box-Muller): indices 2k and 2k+1 are the two halves of
// one pair, so filling a tensor costs one Philox block per two elements.
double rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
// Both normals of pair k: out = {rng_normal(.., 2k), rng_normal(.., 2k+1)}.
void rng_normal_pair(uint64_t seed, uint64_t stream, uint64_t pair, double out[2]);
// A uniformly random integer in [0, n), n > 0, without modulo bias.
uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n);

// A stable 64-bit stream id for a name (FNV-1a, then mixed).
uint64_t rng_stream_of(const char *name);

#endif
