// train/report — what a run shows: the per-step terminal line, the
// progress bar, evaluations, the memory line, and the JSONL metrics record
// (one object per logged step and per evaluation, through the JSON writer).
// Only the rank that prints opens one with a log file.
#ifndef TSR_TRAIN_REPORT_H
#define TSR_TRAIN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "core/check.h"
#include "core/prof.h"
#include "data/mixture.h"

// A mixture's figures by source (n 0: not a mixture, nothing shown).
typedef struct SourceFigures {
    int n;
    const char *name[MIX_MAX_SOURCES];
    double v[MIX_MAX_SOURCES];    // tokens read (steps), mean loss (evaluations)
} SourceFigures;

// One optimizer step, as measured on this rank after the step.
typedef struct StepMetrics {
    int step, steps;              // this step (1-based) of the run's steps
    double loss;                  // mean over the global batch
    double lr, grad_norm;         // the rate used; the global norm before clipping
    double ms, tokens_per_s, mfu;
    uint64_t grad_comm_bytes;     // bytes the DP group sent for this step's gradients and parameters
    uint64_t tp_comm_bytes;       // bytes the TP group sent in this step (activations, loss statistics)
    double tp_comm_ms;            // time spent in the TP group's collectives in this step
    uint64_t pp_comm_bytes;       // bytes this rank sent to its pipeline neighbours in this step
    double pp_wait_ms;            // time this rank waited on pipeline sends and receives (its bubble)
    double loss_scale;            // fp16: the scale this step's backward used (1 without a scaler)
    int scaler;                   // the run has a loss scaler (fp16)
    int skipped;                  // the step was skipped: its gradients overflowed, or a spike
    int spike;                    // skipped by the spike guard (--spike-guard)
    int offload;                  // the optimizer state is on disk (--offload): the I/O figures below mean something
    double io_wait_ms;            // time this rank waited on the offload's reads and writes in this step
    uint64_t io_read_bytes, io_written_bytes;   // bytes this rank's offload read and wrote in this step
    const Profile *prof;          // --profile: where this step's time went on this rank (NULL: none)
    SourceFigures tokens;         // a mixture: the tokens each source has given the run so far (all ranks)
} StepMetrics;

typedef struct Report Report;

// log_path: JSONL appended to (NULL: none); progress: draw a progress bar
// (stdout is a terminal).
int report_open(Report **out, const char *log_path, int progress, Err *err);
void report_close(Report *r);
// The step's terminal line and JSONL record (with the memory by tag and,
// of a mixture, the tokens by source).
void report_step(Report *r, const StepMetrics *m);
// An evaluation's line and record; by: a mixture's loss of each source.
void report_eval(Report *r, int step, double loss, int64_t tokens, double seconds, const SourceFigures *by);
// The progress bar after `step` of `total` steps, `elapsed` seconds in.
void report_progress(Report *r, int step, int total, double elapsed);
// Where the steps' time went on one rank (train --profile): prof sums
// `steps` steps of `seconds` in all; GEMM rows are named by name(ctx, in,
// out, buf, n) (the layers taking `in` features to `out`) and quoted against the SGEMM ceiling `peak` GFLOP/s of the rank's
// threads; `title` says whose rows they are.
void report_profile(Report *r, const Profile *prof, int steps, double seconds, double peak, const char *title,
                    char *(*name)(void *ctx, int in, int out, char *buf, size_t n), void *ctx);
// This rank's bytes by allocator tag: the peaks, and where they differ the
// current values.
void report_memory(Report *r);

#endif
