// parallel/embsync — the embedding lookup's gradient, sent as rows.
//
// The token embedding's gradient is final only after the last thing
// backward computes (the lookup's scatter-add), so reducing it densely —
// it is the largest tensor — can never overlap with backward. But the
// lookup adds only B·T rows: the dense part (the tied output head's
// contribution, known at the start of backward) is reduced early, and the
// lookup's rows are allgathered instead — B·T token ids and B·T×C
// gradients per rank, a few hundred KB — and every rank adds all ranks'
// rows, in rank order, after the dense reduction. The position
// embedding's gradient comes the same way. Each element receives the same
// sequence of additions on every rank and in every layout, so the result
// is deterministic, and the same as adding the lookup of rank 0, 1, ... to
// the reduced dense gradient.
#ifndef TSR_PARALLEL_EMBSYNC_H
#define TSR_PARALLEL_EMBSYNC_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/check.h"
#include "model/stage.h"

typedef struct EmbSync EmbSync;

// For st (a first stage, B×T tokens per micro-batch, its document masking
// set: stage_set_doc_mask) over c.
int embsync_init(EmbSync **out, Comm *c, const Stage *st, Err *err);
void embsync_free(EmbSync *e);
// The stage's rows hook (StageHooks.rows): copies this rank's token ids and gradient
// rows and starts their allgathers.
void embsync_hook(void *ctx, const int *tokens, const float *dres, int B, int T);
// Waits for the allgathers and adds every rank's rows, rank by rank, to the
// flat range [lo, hi) of the gradient buffer, whose values are at g
// (indexed from lo); nothing when no rows came since the last call.
// Returns 0, or -1 with err. Seconds blocked are added to *waited.
int embsync_apply(EmbSync *e, float *g, size_t lo, size_t hi, double *waited, Err *err);
size_t embsync_bytes(const EmbSync *e);   // its buffers (MEM_COMM)
// The bytes of those buffers for `ranks` ranks exchanging `rows` token
// rows of C floats: the ids and rows out, and every rank's in.
size_t embsync_size(int ranks, size_t rows, int C);

#endif
