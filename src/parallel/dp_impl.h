// parallel/dp_impl.h — the data-parallel state, shared by dp.c (setup,
// the stage's hooks, the step) and dp_report.c (what the header and the
// summary say of it). Internal to parallel/.
#ifndef TSR_PARALLEL_DP_IMPL_H
#define TSR_PARALLEL_DP_IMPL_H

#include "parallel/dp.h"
#include "parallel/embsync.h"

enum { POOL_EMB, POOL_LNF, POOL_BLK0, POOL_BLK1, NPOOL };
enum { BUF_EMPTY, BUF_PENDING, BUF_READY, BUF_IN_USE };
enum { OFF_M, OFF_V, OFF_MASTER };   // the offload's files: exp_avg, exp_avg_sq, masters
// The largest unit the offload streams (floats): a segment's piece larger
// than this (the embeddings, a wide block) goes in several, so the ring
// stays a few tens of MiB whatever the model.
enum { DP_UNIT_FLOATS = 1 << 23 };

// A pooled buffer: one segment's parameters (gathered) or gradients (to be
// reduce-scattered) at a time.
typedef struct {
    float *buf;
    uint16_t *h;         // gradients under a bf16 reduction: buf's values in bf16, as sent; stage 3's
                         // parameters where the masters are offloaded: the 16-bit values gathered
    size_t cap;
    int seg, state;
    int micro;           // gradients: the micro-batch they are from
    CommRequest *req;
} Buf;

// Stage 0: an allreduce bucket, a float range of the gradient buffer.
typedef struct {
    size_t lo, hi;
    CommRequest *req;
} Bucket;

struct Dp {
    Comm *c;                 // NULL: one process
    int zero, rank, d;
    double bucket_mb;
    Stage *st;
    const ParamTable *t;
    int npc;                 // owned pieces: 1 (stage 0) or one per segment
    size_t *sk, *soff;       // per segment: piece floats, offset in the shard
    size_t S;
    int emb;                 // the embeddings' segment (-1: none)
    int shared;              // a segment another stage holds and counts (-1: none)
    int owner, counts_tp;    // this rank counts its pieces (layout_dp_owner), and the tensors replicated over TP
    EmbSync *es;             // the embedding lookup's gradient rows
    int micro, last;         // the current micro-batch; it is the last of the step
    // stage 0
    Bucket *b;               // b[0] is the last range of the buffer
    int nb, next;            // buckets, next to start
    Bucket embb;             // the embeddings' bucket (hi = 0: none)
    // stages 1-3
    float *pshard;           // stage 3: owned parameters (NULL where the masters are offloaded)
    uint16_t *hshard;        // stage 3 with the masters offloaded: the owned parameters' 16-bit copy (MEM_PARAMS16)
    float *gshard;           // stages 2, 3: owned gradients
    Buf pbuf[NPOOL];         // stage 3: gathered parameters
    Buf gbuf[NPOOL];         // stages 2, 3: gradients being written or reduced
    CommRequest **rs;        // stage 1: per segment, its in-place reduce-scatter
    CommRequest **ag;        // stages 1, 2: per segment, the allgather of the updated parameters
    CommDtype reduce;        // the gradients' dtype on the wire
    uint16_t *h;             // stages 0, 1 under a bf16 reduction: the gradient buffer in bf16, as sent (MEM_COMM)
    int failed;
    Err err;
    double waited;
    // the optimizer offload
    Offload *off;            // NULL: the state in memory
    int masters;             // the fp32 masters are in its files (kind OFF_MASTER): layout_offloads_masters
    int nunit;               // its units: each segment's owned piece cut into runs of at most dp_offload_open's unit
    int *useg;               // per unit: its segment
    size_t *uoff, *un;       // per unit: its offset in the shard (and the files), its floats
    // --offload params: pshard (fp32) or hshard (16-bit) is the offload's
    // parameters' file, mapped (dp_pfile.c)
    int poff;
    int prefetch;            // segments read ahead of a gather (madvise)
    int plast;               // the segment gathered last (-1: none), for the direction of the read-ahead
    int *ufirst;             // per segment, its first unit (nseg + 1 entries)
    uint32_t *pcrc;          // per unit: the CRC-32C of its parameters as last written
};

// The owned gradients of segment k's piece (stages 1-3).
float *dp_piece_grads(const Dp *d, int k);
// Scratch for segment k's whole values: a pooled buffer (stages 2, 3), or
// the gradient buffer (zeroed again before every step).
float *dp_scratch(Dp *d, int k);

// dp_offload.c: dp_update with the state streamed from the offload's
// files, and dp_fill_* into kind `kind` of them (the masters also into
// the stage's 16-bit copy).
int dp_update_offloaded(Dp *d, AdamW *opt, float lr, const AdamWConfig *o, float grad_scale, Err *err);
int dp_fill_offloaded(Dp *d, int kind, DpFill fill, void *ctx, Err *err);

// dp_pfile.c: the owned parameter shard in the offload's file. Opened by
// dp_offload_open; segment k's piece is checked against its units' CRCs
// before its gather (the read: its pages fault in, counted and timed as
// the offload's I/O), the next segments' pieces are asked for ahead, and
// the piece's pages go back to the kernel once gathered; written units
// get their CRC and go back too.
int dp_pfile_open(Dp *d, Err *err);
int dp_pfile_fetch(Dp *d, int k, Err *err);
// Unit u's values against their CRC (the file's length checked first by
// the caller: offload_params_intact).
int dp_pfile_check_unit(Dp *d, int u, Err *err);
void dp_pfile_drop(Dp *d, int k);
void dp_pfile_unit_written(Dp *d, int u);
void dp_pfile_seg_written(Dp *d, int k);
// Every page of the file given back (after a checkpoint read the shard).
void dp_pfile_drop_all(Dp *d);

#endif
