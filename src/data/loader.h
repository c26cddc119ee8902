// data/loader — serves (inputs, targets) windows of T+1 tokens.
//
// Sources are token shards (a directory's train_*.bin or val_*.bin, a glob,
// or one .bin file) or a text file tokenized in memory. Each source is cut
// into windows: window j of a source is its tokens [j·T, j·T+T+1); windows
// never cross sources. All windows of all sources form one global sample
// index space.
//
// Training order: epoch e visits every sample once in a permutation that is
// a pure function of (seed, e). The global batch of a step is the next
// B·ranks samples of that order; rank r takes samples [r·B, (r+1)·B) of it,
// so ranks are disjoint and their union is the batch, whatever the number of
// ranks. A background thread prepares the next batch while the caller
// trains. The state (epoch, position) is two integers; restoring it
// continues with exactly the batches an uninterrupted loader would give.
//
// Validation order: samples in index order, from the start after each
// loader_rewind, B·ranks at a time as in training (rank r takes samples
// [r·B, (r+1)·B) of them), so the ranks together read what one rank reading
// B·ranks at a time reads, whatever their number.
#ifndef TSR_DATA_LOADER_H
#define TSR_DATA_LOADER_H

#include <stdint.h>

#include "core/check.h"
#include "data/tokenizer.h"

typedef struct Loader Loader;

typedef struct LoaderState {
    int64_t epoch;      // epochs completed
    int64_t pos;        // samples of the current epoch already served (all ranks)
} LoaderState;

typedef enum { SPLIT_TRAIN, SPLIT_VAL } LoaderSplit;

typedef struct LoaderOptions {
    int T;              // window length
    int B;              // samples per rank per call
    int rank, ranks;    // this rank and the number of data-parallel ranks
    uint64_t seed;
    LoaderSplit split;  // which shards of a directory; VAL reads in order
    int prefetch;       // run a background thread
} LoaderOptions;

// Opens `path` for tok's vocabulary. The error names the path (missing, no
// shards, too short for one window, bad shard).
int loader_open(Loader **out, const char *path, const Tokenizer *tok, const LoaderOptions *o, Err *err);
void loader_free(Loader *l);

int64_t loader_tokens(const Loader *l);    // tokens over all sources
int64_t loader_samples(const Loader *l);   // samples per epoch
int loader_sources(const Loader *l);       // files read

// Fills inputs (B,T) and targets (B,T) with this rank's part of the next
// global batch (training), or of the next B·ranks samples in order
// (validation, returning how many of its B were left: fewer at the end, 0
// for a rank past it; loader_state's pos reaches loader_samples when done).
int loader_next(Loader *l, int *inputs, int *targets);

LoaderState loader_state(const Loader *l);
void loader_set_state(Loader *l, LoaderState s);
void loader_rewind(Loader *l);   // validation: back to the first sample

#endif
