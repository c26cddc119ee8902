// parallel/dp — data parallelism over the layout's DP group, ZeRO stages 0-3
// in one code path (Rajbhandari et al. 2020; the sharding unit is FSDP's,
// and, as in FSDP's NO_SHARD / SHARD_GRAD_OP / FULL_SHARD, the stages
// differ only in what a rank keeps).
//
// A rank "owns" pieces of the flat buffers and updates only those. With
// ZeRO-0 the owned piece is the whole buffer (every rank holds and updates
// all of it). With ZeRO ≥ 1 the unit is the parameter table's segment (a
// transformer block, the embeddings, the final norm), padded to a multiple
// of the dp size d: rank r owns the contiguous r-th 1/d of every segment,
// and its shard is its pieces one after another (S = total/d floats), so
// every segment's reduce-scatter and allgather is an even NCCL-style
// collective that can start as soon as backward has finished the segment.
//
//   stage 0: gradients reduced by allreduce in buckets of about bucket_mb
//            (whole tensors, from the end of the buffer), each started as
//            soon as backward has finished writing it, during the last
//            micro-batch's backward only.
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
// In every stage the embeddings' segment is reduced as soon as the output
// head is done; the embedding lookup's gradient follows as rows
// (parallel/embsync). Pools (stages 2, 3): one buffer for the embeddings,
// one for the final norm, two alternating ones for the blocks; MEM_COMM.
// Shards are MEM_PARAMS / MEM_GRADS.
//
// The module installs the stage's hooks once, at dp_init (none where
// nothing is reduced: one process, or ZeRO-0 on one rank); the trainer
// calls dp_microbatch before each micro-batch and the rest once per step.
#ifndef TSR_PARALLEL_DP_H
#define TSR_PARALLEL_DP_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/check.h"
#include "model/stage.h"
#include "optim/adamw.h"
#include "parallel/layout.h"
#include "parallel/offload.h"

typedef struct Dp Dp;

// Data parallelism of l's ZeRO stage (0..3) over l's DP group (NULL: one
// process, stage 0) for st, built with layout_slice and layout_stage_flags;
// installs st's hooks. bucket_mb sizes stage 0's buckets. l->reduce_bf16:
// the gradients go on the wire in bf16 (each range is rounded to bf16
// before it is sent, summed in fp32 in rank order and rounded to bf16
// again, then widened back into the fp32 gradients); else fp32. What this
// rank counts in the gradient norm is the layout's (layout_dp_owner,
// layout_counts_tp_replicated).
int dp_init(Dp **out, const Layout *l, double bucket_mb, Stage *st, Err *err);
void dp_free(Dp *d);
// The bytes of the communication buffers (MEM_COMM) dp_init allocates for
// a stage of table t and slice sl under layout l, micro-batches of B×T
// tokens of C channels: stages 2 and 3's pools (a pool's largest segment,
// for the gradients, stage 3's gathered parameters and a bf16 reduction's
// copy), stages 0 and 1's bf16 copy of the gradients, and the embedding
// rows (parallel/embsync) of a first stage whose gradients are reduced.
size_t dp_comm_bytes(const ParamTable *t, const ModelSlice *sl, const Layout *l, int B, int T, int C);

// ---- the optimizer offload (parallel/offload) ----
// The owned pieces' optimizer state moves to files under base (flag names
// it in errors; rank numbers this process's file set): the AdamW moments,
// and the fp32 masters where the stage keeps 16-bit weights alone
// (layout_offloads_masters). Each segment's owned piece is a unit; the
// update streams them through the offload's ring, segment after segment,
// with the same kernel in the same order (the same bits). The AdamW
// passed to dp_update then holds no moments (adamw_init of 0 floats).
// A piece larger than unit floats (0: DP_UNIT_FLOATS, 8 Mi) streams as
// several units. keep: the files stay at dp_free. Call once, after dp_init.
int dp_offload_open(Dp *d, const char *base, const char *flag, int rank, size_t unit, int keep, Err *err);
// --offload params: the segments whose pieces of the parameters' file are
// asked for ahead of each gather (default 2).
void dp_set_prefetch(Dp *d, int segments);
// The bytes the offload's ring of buffers takes (MEM_OPTIM) for table t
// under layout l (0 without offload).
size_t dp_offload_ring_bytes(const ParamTable *t, const Layout *l);
// The offload (NULL: none), for its counters and directory.
const Offload *dp_offload(const Dp *d);

// Before micro-batch k (of K)'s forward and before its backward (a
// pipeline schedule interleaves them): the gradients the stage finishes
// next are micro-batch k's.
void dp_microbatch(Dp *d, int k, int K);
// After the last backward: waits for every gradient reduction; the owned
// gradients are then final (summed over the DP ranks). 0, or -1 with err
// (also for a collective that failed inside a hook).
int dp_finish(Dp *d, Err *err);
// The sum of squares of the gradients this rank counts, in a fixed order,
// as the layout says: its owned pieces under ZeRO ≥ 1; under ZeRO-0, where
// every rank holds every gradient, all of them on DP rank 0 and none
// elsewhere (layout_dp_owner). On a TP rank other than 0 only the tensors
// split over TP count (the replicated ones are the same on every TP rank:
// layout_counts_tp_replicated). Summed over the DP and TP ranks it counts
// every gradient exactly once. With one DP rank and no sharding the
// gradients the passes leave are final, and the stage's products take the
// linear layers' sums as they write them last (dp_init turns that on:
// stage_fuse_norm); those gradients are not read again. *nread += the
// floats it read.
double dp_grad_sumsq(const Dp *d, size_t *nread);
// Whether dp_grad_sumsq reads every gradient this rank owns (those of
// dp_owned_grads): then an inf or NaN among them makes it non-finite (the
// squares of finite floats cannot overflow a double), and no other pass
// need look for one.
int dp_grad_sumsq_covers(const Dp *d);
// Segment seg (the embeddings', segment 0) is a copy another stage holds
// too (a pipeline's last stage with a tied head): dp_grad_sumsq leaves it
// out, the other stage counts it.
void dp_set_shared(Dp *d, int seg);
// This rank's final gradients of segment seg after dp_finish: the whole
// segment (ZeRO-0) or the owned piece; *n gets their number.
float *dp_owned_grads(Dp *d, int seg, size_t *n);
// AdamW on the owned pieces (one step), and the stage's 16-bit copy made
// current (written by the update itself without sharding, else marked to
// be made again from the gathered parameters); then the parameters are brought
// back in step: stages 1 and 2 allgather each piece as soon as it is
// updated (the next forward waits for each segment's in turn), stage 3
// starts gathering the next forward's first segment. 0, or -1 with err.
int dp_update(Dp *d, AdamW *opt, float lr, const AdamWConfig *o, float grad_scale, Err *err);
// (With the optimizer offload, an I/O failure returns -1 with the error
// naming the file.)
// The step is skipped (fp16 gradients overflowed): parameters and moments
// stay as they are; the next forward starts as after dp_update. 0, or -1
// with err.
int dp_skip(Dp *d, Err *err);
// Waits for every parameter allgather in flight: the parameters the stage
// reads are current afterwards. 0, or -1 with err.
int dp_sync_params(Dp *d, Err *err);

// The owned pieces: each a flat range [lo, hi) of the buffers, at off in
// this rank's shard (the AdamW moments), with its parameter and gradient
// values.
typedef struct DpPiece {
    size_t lo, hi, off;
    float *params;
    const float *grads;
} DpPiece;
int dp_npieces(const Dp *d);
DpPiece dp_piece(Dp *d, int k);
size_t dp_shard_floats(const Dp *d);     // S: floats of the AdamW moments on this rank

// Filling state segment by segment, between steps: fill writes segment k's
// whole values into buf (laid out as its range [lo, hi)). dp_fill_params
// fills the parameters the rank keeps (the whole buffer, or stage 3's
// shard; offloaded masters: their file, and the 16-bit copy made from
// them) and marks them changed for the stage; dp_fill_moment AdamW moment
// `which` (0: exp_avg, 1: exp_avg_sq) of the owned pieces, in opt or the
// offload's files. Both stop at fill's first non-zero return and return
// it (-1 with err for an offload write that failed).
typedef int (*DpFill)(void *ctx, int k, float *buf);
int dp_fill_params(Dp *d, DpFill fill, void *ctx, Err *err);
int dp_fill_moment(Dp *d, AdamW *opt, int which, DpFill fill, void *ctx, Err *err);

// The optimizer state for a checkpoint, where it lives: the moments as
// shard-sized arrays (a piece's at DpPiece.off) and, where they are
// offloaded, the masters the same way (NULL: DpPiece.params) — opt's, or
// the offload's files mapped read-only after their checksums are checked;
// valid until dp_state_release. 0, or -1 with err.
typedef struct DpState {
    const float *m, *v, *masters;
} DpState;
int dp_state(Dp *d, const AdamW *opt, DpState *s, Err *err);
void dp_state_release(Dp *d);

// For the header and the summary: one line describing the layout ("" for
// one process), and one line of what the gradient collectives cost over
// `steps` steps ("" for one process).
void dp_describe(const Dp *d, char *buf, size_t cap);
void dp_summary(const Dp *d, int steps, char *buf, size_t cap);

#endif
