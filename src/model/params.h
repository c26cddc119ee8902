// model/params — the parameter table and the flat buffers it describes
// (DESIGN §1.4).
//
// A rank holds one contiguous float buffer of parameters (and, alike, of
// gradients and optimizer moments). The table says where each tensor lives
// in it, its global shape, and which slice of the global tensor this rank
// holds (tensor parallelism splits one dimension). Buckets, ZeRO partitions
// and checkpoint shards are ranges of these buffers.
//
// Initial values are a pure function of (seed, name, global element index),
// so every layout starts from the same model.
#ifndef TSR_MODEL_PARAMS_H
#define TSR_MODEL_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "model/arch.h"
#include "model/config.h"

// The part of the model one rank runs: layers [layer_begin, layer_end) and
// tensor-parallel slice tp_rank of tp_size. The whole model is
// {0, L, 0, 1}. Under an interleaved pipeline schedule a rank runs
// `chunks` such ranges, chunk v being [layer_begin + v·chunk_stride,
// layer_end + v·chunk_stride): non-adjacent pieces of the model, each a
// virtual stage of its own (chunks 0 or 1: one range).
typedef struct ModelSlice {
    int layer_begin, layer_end;
    int tp_rank, tp_size;
    int pad_multiple;   // each segment is padded to a multiple of this many floats (ZeRO shards); 0 or 1: none
    int sp;             // sequence parallel (tp_size > 1): the residual stream's rows are split over the TP ranks too
    int chunks, chunk_stride;
} ModelSlice;

ModelSlice slice_whole(const ModelConfig *c);
int slice_is_first(const ModelSlice *s);   // holds the embeddings (in its chunk 0)
int slice_is_last(const ModelSlice *s, const ModelConfig *c);   // holds the final norm and the head (in its last chunk)
int slice_chunks(const ModelSlice *s);     // its layer ranges (1 without interleaving)
// Chunk v's layers [*begin, *end).
void slice_chunk_layers(const ModelSlice *s, int v, int *begin, int *end);

enum { PARAM_MAX_DIM = ARCH_MAX_DIM };

typedef struct ParamInfo {
    char name[64];                   // the architecture's name for it (model/arch)
    Role role;
    Part part;
    int desc;                        // its index in the architecture's table of that part
    int ndim;
    int64_t shape[PARAM_MAX_DIM];    // global shape
    int shard_dim;                   // split dimension, -1 when this rank holds all of it
    int64_t shard_off;               // first global index held along shard_dim
    int64_t lshape[PARAM_MAX_DIM];   // local shape
    size_t offset;                   // first float in the flat buffer
    size_t numel;                    // local elements
    int layer;                       // transformer block, -1 for the embeddings and the final part
    int flags;                       // PARAM_NO_DECAY
    int init;                        // INIT_NORMAL (std), INIT_ZERO, INIT_ONE
    float std;
    int64_t init_rows;               // global rows (dim 0) drawn at init; later rows start at 0
    int vocab_rows;                  // dim 0 is the padded vocabulary: rows from init_rows (V) on are padding,
                                     // zero always, and their number depends on the tensor-parallel size
} ParamInfo;

// A segment: the tensors of one part — one transformer block, the
// embeddings, or the final norm (and head) — the unit ZeRO gathers and reduces. [lo, hi) of the flat
// buffer; hi − lo is a multiple of the slice's pad_multiple, and the floats
// after the last tensor (the padding) stay zero.
typedef struct ParamSeg {
    size_t lo, hi;
    int first, n;    // its tensors: p[first .. first + n)
    int layer;       // the block, or -1
    Part part;
} ParamSeg;

typedef struct ParamTable {
    ParamInfo *p;
    int n;
    size_t total;    // floats in the flat buffer (with any segment padding)
    ParamSeg *seg;   // in flat-buffer order
    int nseg;
} ParamTable;

// Builds the table of the slice's tensors from the architecture's
// description, in flat-buffer order: the embeddings (first stage; with a
// tied head the last stage holds a copy of them too), each block's
// tensors (chunk by chunk, in layer order), then the final part (last
// stage). Errors name the dimension that the tensor-parallel size does not
// divide.
int ptable_build(ParamTable *t, const ModelConfig *c, const ModelSlice *s, Err *err);
void ptable_free(ParamTable *t);
// The tensor named name, or NULL (a scan: for tools and tests, not for a step).
const ParamInfo *ptable_find(const ParamTable *t, const char *name);
// The first tensor of the given role outside the blocks (the token or
// position embedding, the head), or NULL when the slice holds none.
const ParamInfo *ptable_role(const ParamTable *t, Role role);
// Writes every tensor's initial values (normal(0, std), zeros or ones) into params.
void ptable_init(const ParamTable *t, float *params, uint64_t seed);
// The same for the tensors of segment k only, into buf laid out as its
// range [lo, hi) (padding zeroed).
void ptable_init_seg(const ParamTable *t, int k, float *buf, uint64_t seed);
// The segment holding flat offset off.
int ptable_seg_of(const ParamTable *t, size_t off);

#endif
