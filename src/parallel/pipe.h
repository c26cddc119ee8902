// parallel/pipe — pipeline parallelism over the layout's PP group: the
// schedule of one step's micro-batches on this rank's stage, the
// activations and their gradients sent between neighbouring stages, and
// the tied embedding's gradient summed between the first and the last
// stage (Megatron's embedding group).
//
// A step runs M micro-batches through P stages. Each rank executes its own
// list of operations — forward of micro-batch m, backward of micro-batch m —
// built by pipe_schedule:
//
//   gpipe  every forward, then every backward (Huang et al. 2019): M
//          micro-batches of activations in flight on every stage.
//   1f1b   stage r runs min(P − r − 1, M) forwards ahead (warm-up), then
//          alternates one forward and one backward, then drains the
//          backwards (PipeDream-flush, Narayanan et al. 2021): at most
//          P − r micro-batches in flight.
//
// Both keep the bubble at (P − 1)/(M + P − 1) of the step. With P = 1,
// 1F1B is the plain loop: forward and backward of one micro-batch after
// another, one set of activations.
//
// Interleaved 1F1B (V virtual stages, Narayanan et al. 2021 §2.2): the
// layers are cut into V·P chunks and rank r holds chunks r, r + P, …,
// r + (V−1)·P (its chunk v is virtual stage v·P + r), so a micro-batch
// goes round the ranks V times, the last rank handing it back to the
// first. The operations are those of chunk and micro-batch: forwards in
// groups of P micro-batches, chunk 0 of the group first; backwards alike
// from the last chunk down; stage r runs 2·(P − r − 1) + (V − 1)·P
// forwards ahead, then one forward and one backward, then drains. Each
// operation is 1/V of a stage's work, so the bubble shrinks to
// (P − 1)/(V·M + P − 1), for V times the messages and a little more
// activation memory. M must be a multiple of P.
//
// A micro-batch in flight lives in a stage slot (model/stage), any free
// one, bound to its chunk; a forward receives the previous stage's output
// into its slot's input before it runs and sends its output on; a
// backward receives the gradient of its output and sends the gradient of
// its input back. Sends go through the communicators' progress threads
// (comm_isend) and each neighbour pair has one communicator per direction
// (the interleaved schedule adds the pair last → first). A send of more
// than a mailbox's worth completes only as the receiver takes it (as MPI's
// rendezvous does), so a rank must never wait for a send that the
// receiver will take only after something this rank has yet to do. A
// slot's output has always been taken by the time the slot is free again
// (the next stage's forward comes before the backward that frees it); the
// gradient sent back is copied into the oldest of a few send buffers, as
// many as pipe_grad_buffers counts so that the oldest's previous send
// has been taken however slow the receiving stage is. So a rank blocks
// only to receive what the schedule needs next, and every such wait is
// the pipeline bubble this rank sees, and is timed.
#ifndef TSR_PARALLEL_PIPE_H
#define TSR_PARALLEL_PIPE_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/check.h"
#include "model/stage.h"
#include "parallel/dp.h"
#include "parallel/layout.h"

// PipeSchedule is the layout's (parallel/layout).

// "1f1b" or "gpipe" to a schedule; -1 with ERR_USAGE naming --schedule.
int pipe_schedule_parse(const char *s, PipeSchedule *out, Err *err);
const char *pipe_schedule_name(PipeSchedule s);

// One operation of a stage's schedule.
typedef struct PipeOp {
    int bwd;     // 0: forward, 1: backward
    int chunk;   // the rank's chunk (0 without interleaving)
    int mb;      // the micro-batch
} PipeOp;

// Whether schedule s can run M micro-batches on P stages of V chunks each
// (layers: the stages' layer counts, or NULL for an even split);
// ERR_USAGE naming the flag (--micro-batches, --virtual-stages, --schedule,
// --pp-layers) otherwise.
int pipe_check(PipeSchedule s, int P, int M, int V, const int *layers, Err *err);
// Stage `rank` of P's operations for M micro-batches through its V chunks
// (V > 1: interleaved 1F1B) into ops (2·M·V of them); returns their
// number. The arguments pass pipe_check.
int pipe_schedule(PipeSchedule s, int P, int rank, int M, int V, PipeOp *ops);
// The planned bubble: (P − 1)/(V·M + P − 1) of the step.
double pipe_bubble(int P, int M, int V);
// Send buffers stage `rank` needs for the gradients it sends back: one more
// than the most of its earlier sends whose receiving backward need not
// have run when a backward finishes (the operations that surely have:
// those it depends on through its own order and the messages it
// received). Sends to one stage are taken in order, so with that many
// used in turn the oldest has always been taken.
int pipe_grad_buffers(PipeSchedule s, int P, int rank, int M, int V);
// The bytes of those buffers (MEM_COMM) on stage `stage` of layout l, M
// micro-batches per step, each buffer `boundary` floats
// (stage_boundary_floats): what pipe_init allocates.
size_t pipe_comm_bytes(const Layout *l, int M, int stage, size_t boundary);

typedef struct Pipe Pipe;

// The pipeline of stage st over l's PP group (NULL: one stage), M
// micro-batches per step under l's schedule through st's chunks
// (interleaved when it has more than one); st has layout_in_flight slots.
// Every rank of the group calls it (it splits the neighbour and embedding
// communicators off it, as layout_comms lists them). 0, or -1 with err.
int pipe_init(Pipe **out, const Layout *l, int M, Stage *st, Err *err);
void pipe_free(Pipe *p);

// One step's M micro-batches: tokens and targets hold M micro-batches of
// B×T each, in order; dscale as in stage_forward. Calls dp_microbatch
// before every forward and backward. Returns 0 and, on the last stage,
// the sum of the per-token losses in *loss_sum (0 elsewhere); -1 with err
// when a send or receive failed.
int pipe_step(Pipe *p, Dp *dp, const int *tokens, const int *targets, int B, int T, float dscale, double *loss_sum,
              Err *err);
// A forward pass of one batch (B ≤ the stage's) through every stage, no
// gradients (evaluation). On the last stage *loss_sum gets the sum of the
// per-token losses, elsewhere 0. 0, or -1 with err.
int pipe_forward(Pipe *p, const int *tokens, const int *targets, int B, int T, double *loss_sum, Err *err);

// After dp_finish: sums the owned gradients of the embeddings' segment
// (the same piece on both) of the first and last stage, first + last, in
// place on both; nothing on other stages or without a tied head (the last
// stage's copy is counted on the first: layout_holds_tied_copy). 0, or -1
// with err.
int pipe_tied_sum(Pipe *p, Dp *dp, Err *err);

// Seconds this rank spent blocked on receives and sends (the bubble it
// saw) and bytes it sent to its neighbours, since pipe_init.
double pipe_waited(const Pipe *p);
uint64_t pipe_bytes_sent(const Pipe *p);
int pipe_stages(const Pipe *p);

#endif
