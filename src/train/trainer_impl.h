// train/trainer_impl.h — the trainer's state, shared by the files that make
// it up (internal to train/): trainer.c sets a run up, steps it and closes
// it; run.c is the loop around the steps, with checkpoints and
// evaluations; header.c prints what a run is about to do.
#ifndef TSR_TRAIN_TRAINER_IMPL_H
#define TSR_TRAIN_TRAINER_IMPL_H

#include "core/prof.h"
#include "core/trace.h"
#include "data/tokenizer.h"
#include "io/checkpoint.h"
#include "io/ckpt_writer.h"
#include "io/weights.h"
#include "kernels/peak.h"
#include "parallel/dp.h"
#include "train/spike.h"
#include "train/trainer.h"

// --ckpt-async's checkpoint in flight: staged and being written (or
// written) by the ranks' writers, not yet committed (train/save.c).
typedef struct SavePending {
    int active;
    int64_t step;
    char *train, *state;       // its meta.json's parts, as they were at its step
    double staged;             // seconds the save held the step up
} SavePending;

struct Trainer {
    const TrainConfig *tc;
    const Layout *lay;         // the run's layout, placed at this rank: every share and count is its
    int rank, D;               // DP rank and size
    int first;                 // world rank 0: it prints, logs and commits checkpoints
    int lock;                  // world rank 0's lock on --ckpt-dir (-1: none)
    Comm *stats;               // loss, norm and checkpoint agreement (NULL: one process), apart from the DP
                               // group so that its counters hold gradient traffic only
    Tokenizer tok;
    ModelConfig mc;
    Ckpt *ck;                  // the checkpoint resumed from (NULL: none); the header names it
    Weights init;              // --init-from's weights (their files stay open until trainer_close; none: zeroed)
    Loader *ld;
    ValSet val;                // validation data (val.n 0: none)
    Stage st;
    Dp *dp;
    Pipe *pipe;                // the pipeline schedule and the neighbours (one stage: the plain loop)
    int last;                  // this rank's stage holds the loss
    int V;                     // chunks per stage (virtual stages; 1: not interleaved)
    int *begin;                // the layers of virtual stage j: [begin[j], begin[j + 1]) (layout_split_layers)
    AdamW opt;
    LossScaler sc;             // fp16's loss scale
    int fp16;
    int doc_sep;                  // document masking's separator token, or -1 (no --doc-mask)
    double flag_scale;         // resumed fp16: --loss-scale given, then replaced by the checkpoint's scale (0: neither)
    Report *rep;
    int *inp, *tgt;            // the step's micro-batches (M,B,T)
    int done;                  // steps done
    double tokens_per_step, flops_tok, peak;   // peak: GFLOP/s of one rank's threads, MFU's denominator
    const char *peak_src;
    Peaks peaks;                               // the machine's, measured at start
    uint64_t sent_mark;        // DP bytes sent up to the end of the last step's reductions
    double t_steps, pp_wait;   // seconds in steps, and of them waited on pipeline sends and receives
    uint64_t pp_sent;          // bytes sent to pipeline neighbours in steps
    char hosts[1024];          // the ranks' hosts and which groups stay inside one (empty: one host)
    Profile *prof, *prof_sum;  // --profile: this step's rows, and their sums over the steps profiled
    int prof_steps;            // steps summed in prof_sum
    int first_step;            // steps done when this process started
    double prof_secs;          // their time
    int prof_last;             // the last step was summed (the checkpoint saved after it is too)
    Trace *trace;              // --trace: this rank's events (core/trace), attached to this thread
    int trace_first, trace_last;   // the steps it records
    SpikeGuard spike;          // --spike-guard's window (train/spike)
    int spikes_injected;       // the test hook's spikes so far
    const char *sections[3];   // a checkpoint's: the parameters, AdamW's moments (train/save.c)
    CkptWriter *writer;        // --ckpt-async's background writer on a rank that writes pieces (else NULL)
    SavePending pend;          // --ckpt-async's checkpoint not yet committed
};

// Bytes c has sent over all operations and (seconds non-NULL) the time
// spent in them; 0 without c.
uint64_t trainer_comm_totals(Comm *c, double *seconds);
// Sums n (at most 4) doubles over every rank (nothing for one process).
// 0, or -1 with err.
int trainer_sum_all(Trainer *t, double *v, int n, Err *err);
// Agrees on a status across the ranks: -1 if any rank failed (a rank that
// did not gets err "another rank failed <what>"); a failed reduction counts
// as a failure.
int trainer_agree(Trainer *t, int rc, const char *what, Err *err);

// ---- checkpoints (save.c) ----

// Sets the run's checkpoints up: the sections, and under --ckpt-async (with
// --ckpt-dir) on a rank that writes pieces the background writer, its
// staging buffer sized as the layout's memory model counts it. 0, or -1
// with err.
int trainer_save_open(Trainer *t, Err *err);
// Waits for a write in flight (nothing is committed) and frees the writer.
void trainer_save_close(Trainer *t);
// Saves a checkpoint of the current step; every rank calls it. Without
// --ckpt-async it is complete on return. With it, the previous checkpoint
// is first committed (trainer_save_settle with wait), then this one is
// staged and written in the background: `latest` names it only once it is
// committed — by a later settle, or here when wait is set (the end of the
// run, --exit-after). 0, or -1 with err.
int trainer_save(Trainer *t, int wait, Err *err);
// --ckpt-async: commits the checkpoint in flight (nothing when none is).
// wait: once this rank's write has ended; else only when every rank's has
// (a sum over the ranks, no wait), to be called by every rank alike (after
// each step). 0, or -1 with err.
int trainer_save_settle(Trainer *t, int wait, Err *err);

// --spike-rollback: every rank goes back to the run's latest checkpoint
// (parameters, AdamW moments and step, the loss scale, the spike guard's
// window) and keeps its loader where it is, past the batches of the
// spikes. 0, or -1 with err (no checkpoint to go back to, one unreadable).
int trainer_rollback(Trainer *t, Err *err);

// --trace: settles the steps traced (those of --trace-steps this run does;
// ERR_USAGE when it does none of them), agrees with the other ranks on the clock's origin, and attaches a
// trace to the calling thread. Every rank calls it. 0, or -1 with err.
int trainer_trace_open(Trainer *t, Err *err);
// --trace: gathers every rank's events to world rank 0, which writes them
// as one file and says so on stdout. Every rank calls it. 0, or -1 with err.
int trainer_trace_write(Trainer *t, Err *err);

// Prints the run's header on stdout: the model, data, batch, layout,
// optimizer, machine and precision, and where the run starts from.
void trainer_print_header(Trainer *t);

#endif
