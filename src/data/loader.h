// data/loader — serves (inputs, targets) windows of T+1 tokens.
//
// The token stream is cut into samples: sample i is tokens [i·T, i·T+T+1).
// An epoch visits every sample once in an order that is a pure function of
// (seed, epoch) (a Fisher-Yates shuffle driven by the counter-based RNG).
// The global batch of a step is the next B samples of that order; the
// loader's state is two integers (epoch, position) that a checkpoint can
// save and restore exactly.
#ifndef TSR_DATA_LOADER_H
#define TSR_DATA_LOADER_H

#include <stdint.h>

#include "core/check.h"
#include "data/tokenizer.h"

typedef struct Loader Loader;

typedef struct LoaderState {
    int64_t epoch;      // epochs completed
    int64_t pos;        // samples of the current epoch already served
} LoaderState;

// Reads a text file, tokenizes it, and holds the token stream. T is the
// window length. The error names the file (missing, unreadable, too short).
int loader_open_text(Loader **out, const char *path, const Tokenizer *tok, int T, uint64_t seed, Err *err);
void loader_free(Loader *l);

int64_t loader_tokens(const Loader *l);    // tokens in the stream
int64_t loader_samples(const Loader *l);   // samples per epoch

// Fills inputs (B,T) and targets (B,T) with the next B samples, starting a
// new (reshuffled) epoch when the current one runs out.
void loader_next(Loader *l, int *inputs, int *targets, int B);

LoaderState loader_state(const Loader *l);
void loader_set_state(Loader *l, LoaderState s);

#endif
