// parallel/layout — the layout of a run (DESIGN §3): named axes, and every
// piece of arithmetic that follows from them. The trainer, the pipeline,
// data parallelism, the launcher and the planner all ask this one struct;
// none of them works a rank's share out for itself.
//
// world = dp × pp × tp, tp fastest, then dp, then pp
// (rank = pp_rank·dp·tp + dp_rank·tp + tp_rank), so a tensor-parallel
// group is a run of neighbouring ranks. Ranks in the same (pp, dp) form a
// TP group, the same (pp, tp) a DP group, the same (dp, tp) a PP group.
//
// What follows from the axes:
// - the slice of the model a rank holds (its stage's layers — its chunks'
//   under the interleaved schedule —, its tensor-parallel slice, sequence
//   parallelism, ZeRO's segment padding) and the stage's buffer flags;
// - which rank counts a tensor several ranks hold alike: the loss on the
//   last stage's TP rank 0; a tensor replicated over TP on TP rank 0;
//   under ZeRO-0, where every DP rank holds every gradient, DP rank 0
//   (under ZeRO ≥ 1 each rank its own pieces); the tied embeddings on the
//   first stage, not on the last stage's copy. Summed over the ranks, every
//   value is counted exactly once;
// - the file a rank writes its checkpoint pieces to, and how many there are;
// - the denominators: devices (MFU), tokens per step (the mean loss);
// - micro-batches in flight on a stage (its activation slots);
// - the communicators a run of the layout makes (the launcher's
//   shared-memory budget);
// - the host placement (which kinds of group stay inside one host);
// - a rank's memory: parameters, their 16-bit copy, gradients, optimizer
//   state, activations, communication buffers and the staging copy of
//   asynchronous checkpoints, by one model the trainer and the planner
//   share.
//
// layout.c and layout_memory.c are pure arithmetic — they talk to nobody,
// so plan/ reads them (DESIGN §2: the planner reads model/ and the layout,
// never comm/); layout_groups.c splits the communicators and finds the
// hosts.
#ifndef TSR_PARALLEL_LAYOUT_H
#define TSR_PARALLEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "model/config.h"
#include "model/params.h"

typedef struct Comm Comm;   // comm/comm.h's; only layout_groups.c calls it

// The pipeline schedule (parallel/pipe runs it).
typedef enum { PIPE_1F1B, PIPE_GPIPE } PipeSchedule;
// Activation recomputation (model/stage keeps what it says).
typedef enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } Recompute;

// What lives on disk (parallel/offload): nothing, or the optimizer's state
// — the AdamW moments, and under bf16/fp16 the fp32 masters too (the
// 16-bit copy stays in memory; under fp32 the parameters the forward reads
// are the masters and stay in memory) — or (OFFLOAD_PARAMS, ZeRO-3 only)
// that and the owned parameter shard ZeRO-3 gathers from: its 16-bit copy
// under bf16/fp16, the fp32 parameters (the masters) under fp32.
typedef enum { OFFLOAD_NONE, OFFLOAD_OPTIMIZER, OFFLOAD_PARAMS } OffloadWhat;

typedef struct Layout {
    // the axes and how the model is laid over them
    int dp, tp, pp;              // data-parallel ranks, tensor-parallel ranks, pipeline stages
    int zero;                    // ZeRO stage 0..3 over the DP axis
    int sp;                      // sequence parallelism over the TP axis
    PipeSchedule schedule;
    int vstages;                 // chunks per stage (> 1: interleaved 1F1B); 0 or 1: one
    const int *pp_layers;        // layers of each stage (pp counts; not owned), or NULL for an even split
    Recompute recompute;
    Precision precision;         // fp32, or bf16/fp16 weights and activations over fp32 masters
    int reduce_bf16;             // data-parallel gradients sent in bf16 (summed in fp32)
    OffloadWhat offload;         // optimizer state on disk
    int naive_attention;         // the planner's what-if: attention that keeps its s² probabilities
                                 // (0 in every layout tessera runs: its attention is fused)
    int ckpt_async;              // checkpoints staged in memory and written in the background
                                 // (--ckpt-async): the staging copy is part of a rank's memory
    // this rank (layout_place): its coordinates, and its groups (layout_init;
    // NULL for one process)
    int rank, dp_rank, tp_rank, pp_rank;
    Comm *world, *dpg, *tpg, *ppg;
} Layout;

// ---- the axes ----

// The ranks (devices) of the layout: dp·tp·pp, MFU's denominator.
int layout_devices(const Layout *l);
// Chunks per stage: 1 unless interleaved.
int layout_chunks(const Layout *l);
// World rank r's coordinates.
void layout_coords(const Layout *l, int r, int *dp_rank, int *tp_rank, int *pp_rank);
// Sets l's rank and coordinates to world rank r's.
void layout_place(Layout *l, int r);
// The world rank at the coordinates.
int layout_rank_at(const Layout *l, int dp_rank, int tp_rank, int pp_rank);

// ---- the model's slice ----

// The layer ranges of pp·V virtual stages for n_layer layers (V = 1: the
// stages): an even split, or l->pp_layers (only with V = 1). -1 with
// ERR_USAGE naming --pp, --pp-layers or --virtual-stages when the split is
// impossible. begin gets pp·V + 1 entries; virtual stage j holds layers
// [begin[j], begin[j + 1]), and a stage's chunk v is virtual stage v·pp + stage.
int layout_split_layers(const Layout *l, int n_layer, int *begin, Err *err);
// The slice of mc that the rank at (pp_rank, tp_rank) holds: its stage's
// layers by layout_split_layers, its TP slice, SP, and under ZeRO ≥ 1
// segments padded to a multiple of dp floats (each splits into dp equal
// pieces). 0, or -1 with err as layout_split_layers.
int layout_slice_of(const Layout *l, const ModelConfig *mc, int pp_rank, int tp_rank, ModelSlice *s, Err *err);
// This rank's slice: layout_slice_of at its own coordinates.
int layout_slice(const Layout *l, const ModelConfig *mc, ModelSlice *s, Err *err);
// model/stage's flags for a rank of the layout: the flat buffers ZeRO
// replaces (gradients from stage 2, parameters at 3), recomputation, the
// 16-bit format, and the 16-bit weights alone where the optimizer offload
// holds the fp32 masters (layout_offloads_masters).
unsigned layout_stage_flags(const Layout *l);
// The fp32 masters are in the optimizer offload's files: offload under
// bf16/fp16 (the passes' 16-bit copy stays in memory: the stage's own
// below ZeRO-3, the owned shard's at ZeRO-3, gathered in 16 bits).
int layout_offloads_masters(const Layout *l);
// The bytes per parameter of the owned shard's file under OFFLOAD_PARAMS
// (2 under bf16/fp16, 4 under fp32; 0 without it).
int layout_params_file_bytes(const Layout *l);
// --offload's words: "optimizer" or "params" (0), else -1; and the name of
// w ("none", "optimizer", "params").
int layout_offload_parse(const char *s, OffloadWhat *w);
const char *layout_offload_name(OffloadWhat w);
// Micro-batch chunks whose activations stage `stage` holds at once under
// the schedule with M micro-batches per step (forwarded, not yet
// backwarded): M under GPipe; under 1F1B its warm-up forwards and one more
// — min(pp − stage, M), interleaved min(2(pp − stage − 1) + (V − 1)·pp + 1,
// V·M). The stage's activation slots; the first stage holds the most.
int layout_in_flight(const Layout *l, int M, int stage);

// ---- counting once ----

// This rank counts the loss: the last stage's TP rank 0 (last: this rank's
// slice holds the head).
int layout_counts_loss(const Layout *l, int last);
// This rank counts the tensors replicated over the TP group: TP rank 0.
int layout_counts_tp_replicated(const Layout *l);
// This rank's pieces are its own among its DP group, to count in the
// gradient norm and to write to a checkpoint: every rank's under ZeRO ≥ 1
// (each owns a 1/dp of every segment), DP rank 0's under ZeRO-0 (the others
// hold copies).
int layout_dp_owner(const Layout *l);
// This rank's slice holds a copy of the embeddings that the first stage
// holds too (the last stage of a pipeline under a tied head): the first
// stage counts and writes them.
int layout_holds_tied_copy(const Layout *l, const ModelConfig *mc);

// ---- checkpoints ----

// Rank files in a checkpoint: one per (stage, TP rank) and, under ZeRO ≥ 1,
// per DP rank.
int layout_ckpt_files(const Layout *l);
// This rank's file number: (pp_rank·tp + tp_rank)·(files per DP group) + its
// DP file (its DP rank under ZeRO ≥ 1, else 0). Meaningful where
// layout_dp_owner.
int layout_ckpt_file(const Layout *l);

// ---- denominators ----

// Tokens one step trains on: B·T tokens per micro-batch, M micro-batches,
// over the DP ranks (the mean loss's denominator).
double layout_tokens_per_step(const Layout *l, int B, int T, int M);

// ---- communicators ----

// A kind of communicator a run of the layout splits: `count` groups of
// `size` ranks each.
typedef struct LayoutComm {
    const char *what;
    int size, count;
} LayoutComm;
enum { LAYOUT_MAX_COMMS = 16 };
// Every communicator a run of l makes, the world included: the world and
// the trainer's statistics copy of it, the TP, DP and PP groups, and per
// pipeline (pp > 1) the neighbour pairs of each direction (parallel/pipe's
// splits, groups of one at the ends included), the interleaved schedule's
// wrap-around pair and, under a tied head (tied; pass 1 when unknown), the
// embedding group. Returns their number (at most LAYOUT_MAX_COMMS).
int layout_comms(const Layout *l, int tied, LayoutComm *out);
// The bytes of those communicators when each group of n ranks takes
// area(n) bytes (comm/local's shared-memory areas).
size_t layout_comm_bytes(const Layout *l, int tied, size_t (*area)(int n));

// ---- memory (layout_memory.c) ----

// The bytes one rank of a layout holds, as tessera allocates them: the one
// model of a rank's memory. The trainer refuses with it a run that would
// not fit the machine before it allocates anything, and the planner prints
// it (tests/plan checks it against the allocator's tags to the byte).
typedef struct LayoutMemory {
    int64_t floats;        // parameters in the rank's slice: its flat buffers' length, ZeRO padding included
    int params_shards;     // what ZeRO divides each state by: dp where the stage shards it (parameters
    int grads_shards;      // from ZeRO-3, gradients from 2, the AdamW moments from 1), else 1
    int optim_shards;
    double params;         // fp32 parameters (MEM_PARAMS): 4·floats / params_shards
    double params16;       // their 16-bit copy under bf16/fp16 (MEM_PARAMS16): 2·floats, kept whole below ZeRO-3
                           // (offloaded masters at ZeRO-3: the owned shard's, 2·floats / dp)
    double grads;          // fp32 gradients (MEM_GRADS): 4·floats / grads_shards
    double optim;          // AdamW's two moments (MEM_OPTIM): 8·floats / optim_shards; offloaded, the
                           // ring of buffers they stream through (dp_offload_ring_bytes)
    double disk;           // offloaded: the bytes of the files (the moments, and the masters where
                           // layout_offloads_masters), each read and written once per step
    double acts;           // activations (MEM_ACTS) of the micro-batches in flight (layout_in_flight); 0 where
                           // model/stage lays none out (an architecture it does not train, sizes past its limits)
    double comm;           // communication buffers (MEM_COMM): parallel/dp's (dp_comm_bytes) and the
                           // pipeline's gradient send buffers (pipe_comm_bytes; left out for schedules of
                           // more than 2^22 operations over all stages)
    double ckpt;           // --ckpt-async's staging copy (MEM_CKPT) on a rank that writes checkpoint pieces
                           // (every rank under ZeRO >= 1, DP rank 0 under ZeRO-0): its parameters and AdamW
                           // moments, 12·floats / optim_shards, the last stage's copy of tied embeddings left
                           // out; 0 without ckpt_async
    double total;          // the sum
} LayoutMemory;

// The memory of pipeline stage `stage`'s ranks (each TP rank holds an equal
// slice) training micro-batches of B sequences of T tokens, M per step, of
// mc (its vocabulary padded for l->tp, as the trainer pads it). 0, or -1
// with err (a split the layout refuses, a slice the parameter table cannot
// build).
int layout_memory(const Layout *l, const ModelConfig *mc, int stage, int B, int T, int M, LayoutMemory *out, Err *err);

// ---- the groups (layout_groups.c) ----

// Splits world into l's TP, DP and PP groups and places l at world's rank.
// Every rank of world calls it; the axes must multiply to the world size
// (else ERR_USAGE naming them). 0, or -1 with err.
int layout_init(Layout *l, Comm *world, Err *err);
void layout_free(Layout *l);
// Where the ranks run: gathers every rank's hostname over c (a copy of the
// world; every rank calls it) and, when they span more than one host,
// describes into buf the hosts' ranks and which kinds of group stay inside
// a host (shared memory) or cross hosts (the network) — the planner's
// intra/inter-node split, as it happened; "" on one host. 0, or -1 with err.
int layout_hosts(const Layout *l, Comm *c, char *buf, size_t cap, Err *err);

#endif
