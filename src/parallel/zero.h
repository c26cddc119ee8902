// parallel/zero — ZeRO stages 1, 2 and 3 over a data-parallel communicator
// (Rajbhandari et al. 2020; the sharding unit is FSDP's).
//
// The unit is the parameter table's segment (a transformer block, the
// embeddings, the final norm), padded to a multiple of the dp size d: rank
// r owns the contiguous r-th 1/d of every segment, its "piece". The rank's
// shard is its pieces one after another (S = total/d floats), so every
// segment's reduce-scatter and allgather is an even NCCL-style collective
// that can start as soon as backward has finished that segment.
//
//   stage 1: the AdamW moments are sharded. Gradients stay whole; during the
//            last micro-batch's backward each finished segment is
//            reduce-scattered in place; AdamW updates the owned pieces; the
//            pieces are allgathered back into the whole parameters, while
//            the next forward runs (it waits for each segment's in turn).
//   stage 2: the gradients are sharded too: the stage adds each segment's
//            gradients into a pooled buffer that is reduce-scattered as soon
//            as the segment is done (every micro-batch) and added to the
//            owned gradient shard; the buffer is then reused.
//   stage 3: the parameters are sharded too: a segment's parameters are
//            allgathered into a pooled buffer just before its forward and
//            again before its backward (the next one prefetched while the
//            current one computes) and dropped after use.
//
// The embeddings' segment is reduced as soon as the output head is done;
// the embedding lookup's gradient follows as rows (parallel/embsync).
//
// Pools: one buffer for the embeddings (held from the embedding lookup to
// the tied output head, and for their gradients from the head to the
// embedding backward), one for the final norm, two alternating ones for the
// blocks. They are MEM_COMM; shards are MEM_PARAMS / MEM_GRADS.
#ifndef TSR_PARALLEL_ZERO_H
#define TSR_PARALLEL_ZERO_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/check.h"
#include "model/stage.h"
#include "train/optim.h"

typedef struct Zero Zero;

// Flags stage_init needs for this stage (0 for stage 1).
unsigned zero_stage_flags(int stage);

// Sets up stage `stage` (1..3) over dp for st, built with pad_multiple =
// comm_size(dp) and zero_stage_flags(stage); installs st's hooks.
int zero_init(Zero **out, Comm *dp, int stage, Stage *st, Err *err);
void zero_free(Zero *z);

size_t zero_shard_floats(const Zero *z);   // S
// Segment k's piece: flat range [*lo, *hi), at *off in the shard.
void zero_piece(const Zero *z, int k, size_t *lo, size_t *hi, size_t *off);
// The owned values of segment k's piece: parameters and gradients.
float *zero_piece_params(Zero *z, int k);
const float *zero_piece_grads(const Zero *z, int k);

// Before each micro-batch's forward: k of K.
void zero_microbatch(Zero *z, int k, int K);
// After the last backward: waits for every gradient reduction; the owned
// gradient pieces are then final. 0, or -1 with err (also for a collective
// that failed inside a hook).
int zero_finish(Zero *z, Err *err);
// Sum of squares of the owned gradients (fixed order).
double zero_grad_sumsq(const Zero *z);
// AdamW on the owned pieces, then (stages 1, 2) the allgather of the
// parameters starts; the next forward waits for each segment's as it
// reaches it. 0, or -1 with err.
int zero_step(Zero *z, AdamW *opt, float lr, const OptimConfig *o, float grad_scale, Err *err);
// Waits for every parameter allgather in flight: in stages 1 and 2 the
// whole parameters are current afterwards; in stage 3 a prefetch stays
// usable. 0, or -1 with err.
int zero_sync_params(Zero *z, Err *err);

// Stage 3's parameter shard (S floats), NULL in stages 1 and 2.
float *zero_param_shard(Zero *z);
// Fills a shard-sized array (the parameter shard, or AdamW moments) from
// fill, which writes segment k's whole values into buf; stops at fill's
// first non-zero return and returns it. Call it between steps only (it
// uses the pooled or gradient buffers as scratch).
int zero_fill_shard(Zero *z, float *shard, int (*fill)(void *ctx, int k, float *buf), void *ctx);

// Seconds spent blocked on this module's collectives (not hidden behind
// computation), and bytes of pooled buffers.
double zero_wait_seconds(const Zero *z);
size_t zero_pool_bytes(const Zero *z);

#endif
