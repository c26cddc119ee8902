// data/loader — serves (inputs, targets) windows of T+1 tokens.
//
// Files are token shards (a directory's train_*.bin or val_*.bin, a glob,
// or one .bin file) or a text file tokenized in memory. Each file is cut
// into windows: window j of a file is its tokens [j·T, j·T+T+1); windows
// never cross files. All windows of all files form one global sample index
// space.
//
// A loader reads one source (a plain path) or a mixture of weighted
// sources (data/mixture), each source the files of one path.
//
// Training order: epoch e of a source visits each of its samples once in a
// permutation that is a pure function of (seed, source index, e); a
// mixture interleaves its sources by data/mixture's rule, each source
// going through its own epochs. The global batch of a step is the next
// B·ranks sequences of that order; rank r takes sequences [r·B, (r+1)·B)
// of it, so ranks are disjoint and their union is the batch, whatever the
// number of ranks. A background thread prepares the next batch while the
// caller trains. The state is each source's (epoch, position); restoring
// it continues with exactly the batches an uninterrupted loader would give,
// on any number of ranks.
//
// Validation order: samples in index order, from the start after each
// loader_rewind, B·ranks at a time as in training (rank r takes samples
// [r·B, (r+1)·B) of them), so the ranks together read what one rank reading
// B·ranks at a time reads, whatever their number.
#ifndef TSR_DATA_LOADER_H
#define TSR_DATA_LOADER_H

#include <stdint.h>

#include "core/check.h"
#include "core/json.h"
#include "data/mixture.h"
#include "data/tokenizer.h"

typedef struct Loader Loader;

typedef struct LoaderState {
    int64_t epoch[MIX_MAX_SOURCES];   // each source's epochs completed
    int64_t pos[MIX_MAX_SOURCES];     // its samples of the current epoch already served (all ranks);
                                      // validation: pos[0], the samples read
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
// Opens the sources of m (a plain one as loader_open); a mixture's sources
// must share tok (mix_check_tokenizer). Errors name the source.
int loader_open_mix(Loader **out, const Mixture *m, const Tokenizer *tok, const LoaderOptions *o, Err *err);
void loader_free(Loader *l);

int64_t loader_tokens(const Loader *l);    // tokens over all files
int64_t loader_samples(const Loader *l);   // samples per epoch (of all sources together)
int loader_files(const Loader *l);         // files read

typedef struct LoaderSource {
    const char *name;        // "" for a plain path
    double weight;           // normalized
    int files;
    int64_t tokens, samples; // over its files; samples: its windows
    int64_t served;          // its sequences handed out so far (all ranks, every epoch)
} LoaderSource;
int loader_nsources(const Loader *l);      // 1 for a plain path
int loader_is_mixture(const Loader *l);    // opened from a mixture spec (even of one source)
LoaderSource loader_source(const Loader *l, int s);

// Fills inputs (B,T) and targets (B,T) with this rank's part of the next
// global batch (training), or of the next B·ranks samples in order
// (validation, returning how many of its B were left: fewer at the end, 0
// for a rank past it; loader_done once the last round is read).
int loader_next(Loader *l, int *inputs, int *targets);

LoaderState loader_state(const Loader *l);
void loader_set_state(Loader *l, LoaderState s);
void loader_rewind(Loader *l);   // validation: back to the first sample
int loader_done(const Loader *l);   // validation: every sample read since the rewind

// The training state as a checkpoint's JSON object (malloc'd): a plain
// loader's {"epoch", "pos"}; a mixture's {"count", "sources": [{"name",
// "weight", "epoch", "pos"}, ...]}.
char *loader_state_json(const Loader *l);
// Restores what loader_state_json wrote (j; `where` names the file). A
// mixture resumes only the same mixture (names and weights), a plain
// loader only a plain one. 0, or -1 with err (ERR_USAGE).
int loader_state_read(Loader *l, const Json *j, const char *where, Err *err);

#endif
