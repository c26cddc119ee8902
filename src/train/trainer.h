// train/trainer — the training step, written once for every layout, and
// the run around it.
//
// trainer_open sets a run up on its layout (parallel/layout: what this
// rank holds and counts, and its groups): data, the stage (this rank's part
// of the model), the data-parallel module (ZeRO 0-3), the optimizer, the
// starting state (checkpoint, --init-from file or seed), and prints the
// header. trainer_step is one optimizer step, always the same sequence:
//
//   data → micro-batches (forward, backward) → gradient sync → global norm
//   → loss-scale check (fp16: an overflow on any rank skips the step on
//   every rank) → clip → update → parameter sync → metrics
//
// train_run is the loop: steps, reports, evaluations and checkpoints.
//
// trainer.c holds open / step / close, run.c the loop and evaluation,
// header.c the header; trainer_impl.h is their shared, private state.
#ifndef TSR_TRAIN_TRAINER_H
#define TSR_TRAIN_TRAINER_H

#include <stdint.h>

#include "core/check.h"
#include "data/loader.h"
#include "model/config.h"
#include "model/stage.h"
#include "optim/adamw.h"
#include "optim/scaler.h"
#include "parallel/layout.h"
#include "parallel/pipe.h"
#include "train/report.h"
#include "train/schedule.h"

typedef struct TrainConfig {
    ModelConfig model;         // vocabulary is replaced by the tokenizer's
    int model_given;           // model came from --model or --config: a checkpoint's must match it
    const char *data;          // shard directory, glob, .bin file or text file
    const char *val_data;      // validation data; NULL: the val shards of a data directory, if any
    const char *tokenizer;     // "gpt2" or "byte"
    int eval_every;            // steps between evaluations (0: only at the end)
    int eval_batches;          // steps' worth of sequences per evaluation, batch × accum × dp each (0: all of the validation data)
    const char *log_path;      // JSONL metrics (appended), or NULL
    const char *ckpt_dir;      // checkpoints, or NULL
    int ckpt_every;            // steps between checkpoints (0: only at the end)
    int keep;                  // checkpoints to keep (0: all)
    int exit_after;            // stop after this step with a checkpoint, as if interrupted (0: run to steps)
    const char *resume;        // checkpoint or run directory to continue from, or NULL
    const char *init_from;     // safetensors file (Hugging Face GPT-2 names) to start from, or NULL
    int batch, seq, accum, steps;   // per DP rank: batch sequences of seq tokens, accum micro-batches per step
                                    // (with a pipeline, its micro-batches)
    int log_every;             // print/log every this many steps (and the last)
    int threads;
    uint64_t seed;
    LrSchedule lr;
    AdamWConfig adamw;
    double clip;               // max global gradient norm; 0 disables clipping
    double peak_gflops;        // MFU denominator; 0 = the measured peak of the run's arithmetic (kernels/peak)
    int progress;              // draw a progress bar on rank 0 (the launcher's stdout is a terminal)
    double bucket_mb;          // ZeRO-0 gradient bucket size
    Layout layout;             // the layout the flags ask for: axes (dp 0 until the ranks are counted), ZeRO,
                               // SP, schedule, virtual stages, --pp-layers, recomputation, precision, reduction
                               // dtype; the ranks run on it placed, with their groups (trainer_open's l)
    const char *offload_dir;   // --offload-dir: where the optimizer offload's files go (NULL: --ckpt-dir, else $TMPDIR
                               // or /tmp); layout.offload says whether there is one
    int offload_keep;          // --offload-keep: the offload's files stay after the run
    int offload_prefetch;      // --offload-prefetch: segments of the parameters' file read ahead of a gather (--offload params)
    size_t offload_unit;       // test hook (TESSERA_TEST_OFFLOAD_UNIT): the offload's largest unit in floats (0: its own)
    ScalerConfig scaler;       // fp16's dynamic loss scale (optim/scaler)
    int loss_scale_given;      // --loss-scale was given (a resumed run keeps its checkpoint's scale and says so)
    int profile;               // time each kind of work in the steps, print the table at the end (core/prof)
    const char *trace_path;    // --trace: the steps' timeline, every rank's, as one Chrome trace-event file (NULL: none)
    int trace_first, trace_last;   // --trace-steps: the steps traced (0: the second and third this run does)
    int trace_cap;             // test hook: events a rank's trace holds (0: TRACE_MAX_EVENTS)
    int overflow_step, overflow_rank;   // test hook: an inf in that world rank's gradients at that step (0: none)
    double spike_z;            // --spike-guard: skip a step Z standard deviations above its window (0: off; train/spike)
    int spike_window;          // --spike-window: accepted steps the guard's statistics cover
    int spike_rollback;        // --spike-rollback: spikes in a row that send the run back to its last checkpoint (0: never)
    int spike_step, spike_count;   // test hook: `count` steps from that one have their loss seen ×1000 (once each)
    int skip_step, skip_steps;     // test hook: after that step the loader moves past `skip_steps` steps' batches
    int doc_mask;              // --doc-mask: attention and positions restart at each document of a packed sequence
                               // (model/doc; the tokenizer's doc_sep opens a document); kept in the checkpoint
} TrainConfig;

typedef struct Trainer Trainer;

// Sets up a run of tc on layout l: tc->layout placed at this rank, with its
// DP, TP and PP groups (layout_init; l->world NULL is one process). Prints
// the header on stdout. 0, or -1 with err.
int trainer_open(Trainer **out, const TrainConfig *tc, const Layout *l, Err *err);
void trainer_close(Trainer *t);
// Steps done so far (the checkpoint's step after a resume).
int trainer_steps_done(const Trainer *t);
// One optimizer step; fills *m. 0, or -1 with err (a collective failed, or
// the loss is no longer finite).
int trainer_step(Trainer *t, StepMetrics *m, Err *err);

// Runs the whole training of tc on l (as trainer_open): header, steps, one line per logged
// step, evaluations, checkpoints and the summary. Returns 0, or -1 with err.
int train_run(const TrainConfig *tc, const Layout *l, Err *err);


// The sum of the per-token losses of the model over this rank's part of
// the validation loader (from its start, at most max_rounds rounds of the
// loader's B·ranks sequences; 0 = all) into *sum — on a pipeline's last
// stage; other stages get 0 — and the number of tokens scored into *ntok.
// Every data-parallel rank runs the same number of forwards. p: the
// pipeline (NULL: the stage is the whole model). 0, or -1 with err.
int train_evaluate(Stage *st, Pipe *p, Loader *val, int64_t max_rounds, double *sum, int64_t *ntok, Err *err);

// Validation data: one loader per source of a mixture (one for a plain
// path), each evaluated alone; the loss of a mixture is its sources'
// losses weighted by their weights, of a plain path its own.
typedef struct ValSet {
    int n, plain;
    char name[MIX_MAX_SOURCES][MIX_NAME_MAX];
    double weight[MIX_MAX_SOURCES];   // normalized
    Loader *ld[MIX_MAX_SOURCES];
} ValSet;
// Opens every source of m for validation (SPLIT_VAL in o); a mixture's
// sources share tok. Errors name flag and the source. 0, or -1 with err.
int valset_open(ValSet *v, const Mixture *m, const char *flag, const Tokenizer *tok, const LoaderOptions *o, Err *err);
void valset_close(ValSet *v);
// train_evaluate on each source: its loss sum into sum[s], its tokens into ntok[s].
int valset_evaluate(ValSet *v, Stage *st, Pipe *p, int64_t max_rounds, double *sum, int64_t *ntok, Err *err);
// The set's loss from the sources' (summed over the ranks): loss[s] gets
// each source's mean loss (0 for a source without tokens).
double valset_loss(const ValSet *v, const double *sum, const int64_t *ntok, double *loss);

#endif
