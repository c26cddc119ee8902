// plan/plan — memory, FLOPs, communication and time of training a model on a
// cluster with a given layout, and the search for the best layout. Pure
// computation: allocates nothing, talks to nobody.
//
// Conventions (each printed under --explain):
// - Parameters are counted exactly, final norm included, from the
//   architecture's tensor table (model/arch), the one count in tessera.
// - Memory per device comes from the layout's memory model
//   (layout_memory, parallel/layout), the one the trainer checks its ranks
//   against: the parameters of the busiest stage's slice as its parameter
//   table counts them, its activations and communication buffers to the
//   byte, and under --ckpt-async the staging copy of its checkpoint pieces. Model states
//   follow ZeRO (Rajbhandari et al. 2020): fp32 training 4+4+8 bytes per
//   parameter, as tessera allocates; mixed precision the paper's 2
//   (weights) + 2 (gradients) + 12 (fp32 master, Adam m and v); ZeRO-1
//   divides the optimizer states by dp, ZeRO-2 also the gradients, ZeRO-3
//   everything. With the optimizer offload (layout.offload) every figure
//   is tessera's own, in every precision: the moments (and, under 16 bits
//   below ZeRO-3, the fp32 masters) are on disk, the ring of buffers they
//   stream through in memory; the step adds reading and writing the files
//   once each at the disk's bandwidth, less the ring's first units read
//   during forward and backward (hidden up to the compute's time).
// - FLOPs per token: 6N + 12·L·h·s (PaLM, appendix B; model/arch's
//   arch_flops_token, the trainer's MFU count: N leaves out an untied token
//   embedding, only looked up); hardware FLOPs add recomputation (full:
//   one more forward, 8N + 16·L·h·s). With document masking (train
//   --doc-mask) and an expected document length D < s, attention computes
//   D(D+1)/2 pairs per document, s/D documents per sequence, instead of
//   s(s+1)/2: its terms are scaled by (D+1)/(s+1) (arch_flops_token_pairs;
//   the trainer's MFU counts each step's real documents).
// - Activations: the tensors tessera's layer keeps for backward (see
//   plan_act_layer), with the Korthikanti et al. 2022 expression
//   s·b·h·(34 + 5·a·s/h) for 16-bit Megatron layers given for comparison.
// - Communication: ring allreduce 2(n−1)/n of the bytes per device,
//   reduce-scatter and allgather (n−1)/n, ZeRO-3 1.5× the data-parallel
//   volume, tensor parallel 4 allreduces of s·b·h per layer and micro-batch
//   (plus the embedding's, the head's and the loss statistics:
//   plan_tp_comm), pipeline s·b·h per stage boundary, direction and
//   micro-batch (a middle stage sends both ways, an end stage one; the
//   interleaved schedule crosses V·P − 1 boundaries, the last stage
//   handing each chunk's output back to the first).
// - Pipeline bubble: (P − 1)/M of the compute (1F1B and GPipe), (P − 1)/(V·M)
//   interleaved (Narayanan et al. 2021); activations in flight on stage 0:
//   min(P, M) micro-batches (1F1B), M (GPipe), or min(V·M, 2(P − 1) +
//   (V − 1)·P + 1) chunks of L/(P·V) layers (interleaved).
// - The vocabulary is padded as the trainer pads it: to a multiple of
//   128·tp (Megatron-LM).
#ifndef TSR_PLAN_PLAN_H
#define TSR_PLAN_PLAN_H

#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "model/config.h"
#include "parallel/layout.h"


// The model: its config (model/arch describes its tensors, so parameter
// counts come from there) and the sizes the formulas use, read off it.
typedef struct PlanModel {
    char name[32];
    ModelConfig cfg;                // its architecture: arch_of(&cfg)
    int64_t L, h, a, kv, f, V, s;   // layers, width, heads, kv heads, FFN, vocabulary, positions
    int64_t vpad;                   // vocabulary rows tessera allocates at tp = 1 (V padded to 128; 128·tp for tp ranks)
} PlanModel;

typedef struct PlanCluster {
    int64_t devices, per_node;
    double mem_gb;                  // per device, GiB
    double tflops;                  // peak per device
    double mfu;                     // fraction of peak achieved on compute
    double bw_intra, bw_inter;      // GB/s per device
    double alpha_us;                // latency per message
    double disk_gbps;               // GB/s of the disk the optimizer offload's files are on (layout.offload)
} PlanCluster;

typedef struct PlanJob {
    int64_t seq, global_batch, micro_batch;
    double tokens;                  // to train on
    double doc_len;                 // document masking: the expected document length (0: none, causal over seq)
} PlanJob;

// A layout is parallel/layout's, the trainer's own: the axes, ZeRO, SP,
// schedule, virtual stages, recomputation, precision, reduction dtype (and
// naive_attention, the what-if of an attention that keeps its s²
// probabilities). The planner reads the axes only, never the groups.

typedef struct PlanResult {
    int64_t params;                 // exact, final norm included
    int64_t params_device;          // on the busiest device
    double weights, grads, optim, model_states, acts, comm_buf, total;   // bytes per device
    double ckpt;                    // --ckpt-async's staging copy (layout_memory's), the stages' larger; in total
    double act_layer;               // bytes per layer per micro-batch
    double act_korthikanti;         // s·b·h·(34 + 5as/h) for comparison
    double act_formula;             // the activations by plan_act_layer's formula
    int act_exact;                  // acts is tessera's stage layout itself (an architecture it trains), to the byte
    int64_t micro_batches, inflight;   // in flight on stage 0 (layout_in_flight): micro-batches (interleaved: chunks)
    double flops_token, hw_flops_token;
    double t_compute, t_bubble, t_dp, t_dp_exposed, t_tp, t_pp, t_step;
    double bytes_dp, bytes_tp, bytes_pp;   // per device per step
    int dp_inter, pp_inter;                // the data-parallel / pipeline groups cross nodes (the inter-node
                                           // bandwidth); tensor-parallel groups stay inside a node
    double tp_messages;             // tensor-parallel collectives per step, each a step of latency per peer
    double tokens_per_s, mfu, days, device_hours, megatron_days;
    // the offload (layout.offload): bytes of its files per device, read and
    // written per step (the optimizer's once each; the parameters' file,
    // --offload params, at every gather), and the time of them not hidden
    // at the disk's bandwidth
    double disk, io_read, io_written, t_io;   // t_io: the I/O's exposed seconds (see plan_eval)
    double io_gather;                          // of io_read, the parameters' reads at the gathers (--offload params)
    int fits;
} PlanResult;

int plan_model_preset(PlanModel *m, const char *name, Err *err);
void plan_model_from_config(PlanModel *m, const ModelConfig *c);
// Replaces the vocabulary (V and its padding).
void plan_model_set_vocab(PlanModel *m, int64_t vocab);
// Exact parameters, final norm included: model/arch's count.
int64_t plan_params(const PlanModel *m);

// Checks what holds for every layout: the job's sequence fits the model's
// positions, and --devices-per-node divides --devices (or, fewer devices
// than a node, one node holds them all).
int plan_check_inputs(const PlanModel *m, const PlanCluster *c, const PlanJob *j, Err *err);
// Checks the layout against the model, cluster and job (DESIGN §3), the
// above included; the message names the constraint.
int plan_check(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l, Err *err);
// Evaluates a checked layout.
void plan_eval(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l, PlanResult *r);

// Bytes one device sends in the tensor-parallel group per step, and the
// messages they take, as tessera's layers exchange them (model/tp) and its
// shared-memory backend counts them (core/volume): per layer and
// micro-batch 4 allreduces of s·b·h floats (2 forward, 2 backward), plus
// one each for the vocabulary-parallel embedding and the output head, and
// the loss statistics (allgathers of 3 floats per token); under sequence
// parallelism each allreduce is a reduce-scatter and an allgather, and the
// norms' gradients (4h per layer, 2h for the final norm) are summed.
// Bytes as TP rank 0 counts them (another rank may differ by a few bytes
// when a large allreduce's pieces do not split evenly over tp).
void plan_tp_comm(const PlanModel *m, const PlanJob *j, const Layout *l, double *bytes, double *messages);

// Activation bytes one layer keeps for backward per micro-batch of b·s tokens
// on one device (see plan.c for the derivation): under full recomputation
// only its input; under selective all but the attention core's.
double plan_act_layer(const PlanModel *m, const PlanJob *j, const Layout *l);
// Bytes of one layer's attention core per micro-batch (what selective
// recomputation drops and recomputes into one shared set).
double plan_act_core(const PlanModel *m, const PlanJob *j, const Layout *l);

#endif
