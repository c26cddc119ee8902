// parallel/ddp — data-parallel gradient synchronisation in buckets,
// overlapped with the backward pass.
//
// The flat gradient buffer is cut into buckets of about bucket_mb, whole
// tensors each, from the end of the buffer (the last layers, whose
// gradients are final first). During the last micro-batch's backward the
// stage says when each segment's gradients are done (the grads_done hook);
// every bucket entirely past the earliest done segment starts its
// allreduce (non-blocking, on the communicator's progress thread) while
// backward goes on. ddp_finish starts what is left and waits for all of it.
//
// The embeddings (wte, wpe) are a bucket of their own that starts first,
// as soon as backward begins: the output head's dense contribution is
// complete then, and the embedding lookup's rows travel separately
// (parallel/embsync) and are added after the reduction.
#ifndef TSR_PARALLEL_DDP_H
#define TSR_PARALLEL_DDP_H

#include "comm/comm.h"
#include "core/check.h"
#include "model/stage.h"

typedef struct Ddp Ddp;

// Buckets over st's gradient buffer.
int ddp_init(Ddp **out, Comm *dp, const Stage *st, double bucket_mb, Err *err);
void ddp_free(Ddp *d);
int ddp_nbuckets(const Ddp *d);
// Installs on st, for the micro-batch that syncs, the hooks that start the
// buckets and send the embedding rows (sync = 0: removes them).
void ddp_install(Ddp *d, Stage *st, int sync);
// Starts the remaining buckets, waits for every allreduce, adds the
// embedding rows; 0 or -1 with err.
int ddp_finish(Ddp *d, Err *err);
// Seconds spent waiting in ddp_finish in total (communication not hidden
// behind backward).
double ddp_wait_seconds(const Ddp *d);

#endif
