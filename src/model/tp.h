// model/tp — the tensor-parallel pieces a layer calls (Shoeybi et al. 2019,
// Megatron-LM; sequence parallelism after Korthikanti et al. 2022), over
// the layout's TP group.
//
// A tensor-parallel region starts at a column-parallel linear (weights split
// by output: heads, FFN columns, vocabulary rows) and ends at a row-parallel
// one (split by input), whose outputs are partial sums over the TP ranks.
// Two operations, each the other's conjugate, enter and leave it:
//
//   tp_gather   forward: before a column-parallel linear; backward: on the
//               gradient arriving at a row-parallel linear's output.
//               Without sequence parallelism every rank already holds every
//               row: nothing. With it, each rank holds the rows
//               [s0, s0 + Ns) of the residual stream: allgather.
//   tp_reduce   forward: after a row-parallel linear; backward: on the
//               gradient leaving a column-parallel linear's input. The rows
//               are partial sums: allreduce; with sequence parallelism,
//               reduce-scatter, leaving this rank its own rows.
//
// So a layer makes 4 of these exchanges per micro-batch without sequence
// parallelism (2 allreduces forward, 2 backward) and 8 with it (4
// allgathers, 4 reduce-scatters), of N·C floats each. Under sequence
// parallelism the norms run on a rank's own rows, so their gains' and
// biases' gradients are partial: tp_sum adds them over the ranks, one more
// (small) allreduce per layer.
//
// The vocabulary-parallel loss exchanges two small per-row statistics (the
// maximum logit, then the sum of exponentials and the target's logit) and
// never the N×V logits. Statistics travel by allgather and are combined in
// rank order, so every rank computes bit-identical losses.
//
// Every function accepts NULL (one rank): tp_gather and tp_sum do nothing,
// tp_reduce returns its argument. A collective that fails is kept (the
// communicator is unusable afterwards) and reported by tp_status; the
// computation around it goes on with whatever the buffer holds.
#ifndef TSR_MODEL_TP_H
#define TSR_MODEL_TP_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/check.h"

typedef struct Tp Tp;

// Tensor parallelism over c (the TP group, ranks ordered by tp_rank); sp:
// sequence parallel. rows: the most rows a loss call gets at once.
int tp_init(Tp **out, Comm *c, int sp, int rows, Err *err);
void tp_free(Tp *t);

// x (N,C); this rank's rows [s0, s0 + N/n) are current (sequence
// parallel), and all N are afterwards.
void tp_gather(Tp *t, float *x, int N, int C);
// x (N,C) holds partial sums; returns the summed rows this rank keeps: all
// N rows in place, or (sequence parallel) its N/n rows, at x + s0·C.
float *tp_reduce(Tp *t, float *x, int N, int C);
// x (n) partial sums of a replicated parameter's gradient: summed in place.
void tp_sum(Tp *t, float *x, size_t n);

// Vocabulary-parallel cross-entropy of N ≤ rows rows: logits (N,Vl) are
// columns [v0, v0 + Vl) of the whole (N,Vp) logits, of which the first V
// are real tokens; targets (N) in [0,V) or −1 (skipped). losses (N) gets
// every row's loss (the same on every rank); with dscale != 0 the logits
// are replaced by this slice of dscale · (softmax − onehot(target)), as
// crossentropy_forward does for the whole row (with out16 in bf16, as it
// stores them).
void tp_crossentropy(Tp *t, float *logits, float *losses, const int *targets, int N, int V, int Vl, int v0,
                     float dscale, int out16);

// 0, or -1 with the first failed collective.
int tp_status(const Tp *t, Err *err);

#endif
