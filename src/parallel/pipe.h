// parallel/pipe — pipeline parallelism over the mesh's PP group: the
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
// The micro-batch in flight lives in a stage slot (model/stage); a
// forward receives the previous stage's output into its slot's input
// before it runs and sends its output on; a backward receives the
// gradient of its output and sends the gradient of its input back. Sends
// go through the communicators' progress threads (comm_isend) and each
// neighbour pair has one communicator per direction, so a rank never
// blocks on a send: it blocks only to receive what the schedule needs
// next, or, before it reuses a slot, until that slot's sends have left.
// Every such wait is the pipeline bubble this rank sees, and is timed.
#ifndef TSR_PARALLEL_PIPE_H
#define TSR_PARALLEL_PIPE_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/check.h"
#include "model/stage.h"
#include "parallel/dp.h"

typedef enum { PIPE_1F1B, PIPE_GPIPE } PipeSchedule;

// "1f1b" or "gpipe" to a schedule; -1 with ERR_USAGE naming --schedule.
int pipe_schedule_parse(const char *s, PipeSchedule *out, Err *err);
const char *pipe_schedule_name(PipeSchedule s);

// One operation of a stage's schedule.
typedef struct PipeOp {
    int bwd;   // 0: forward, 1: backward
    int mb;    // the micro-batch
} PipeOp;

// Stage `rank` of P's operations for M micro-batches into ops (2·M of
// them); returns their number.
int pipe_schedule(PipeSchedule s, int P, int rank, int M, PipeOp *ops);
// The largest number of micro-batches whose activations are held at once
// on stage `rank` (forwarded, not yet backwarded): the stage's slots.
int pipe_in_flight(PipeSchedule s, int P, int rank, int M);

// The layer ranges of P stages for n_layer layers: an even split, or
// `layers` (P counts, NULL for even). -1 with ERR_USAGE naming --pp or
// --pp-layers when the split is impossible. begin gets P + 1 entries.
int pipe_split_layers(int n_layer, int P, const int *layers, int *begin, Err *err);

typedef struct Pipe Pipe;

// The pipeline of stage st over ppg (NULL: one stage), M micro-batches
// per step under schedule s; st has pipe_in_flight slots. Every rank of
// ppg calls it (it splits the neighbour and embedding communicators off
// ppg). 0, or -1 with err.
int pipe_init(Pipe **out, Comm *ppg, PipeSchedule s, int M, Stage *st, Err *err);
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

// Whether this stage holds a copy of the embeddings that another stage
// holds too (the last stage of a pipeline with a tied head): its gradient
// is summed with the first stage's by pipe_tied_sum, and counted once, on
// the first stage.
int pipe_holds_tied_copy(const Pipe *p);
// Sums the owned gradients g (n floats of the embeddings' segment, the
// same piece on both) of the first and last stage, first + last, in place
// on both; nothing on other stages or without a tied head. 0, or -1 with
// err.
int pipe_tied_sum(Pipe *p, float *g, size_t n, Err *err);

// Seconds this rank spent blocked on receives and sends (the bubble it
// saw) and bytes it sent to its neighbours, since pipe_init.
double pipe_waited(const Pipe *p);
uint64_t pipe_bytes_sent(const Pipe *p);
int pipe_stages(const Pipe *p);

#endif
