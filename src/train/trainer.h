// train/trainer — the training loop of one process: data, forward/backward
// over gradient-accumulation micro-batches, clipping, AdamW, LR schedule,
// progress, the JSONL metrics log and checkpoints.
#ifndef TSR_TRAIN_TRAINER_H
#define TSR_TRAIN_TRAINER_H

#include <stdint.h>

#include "core/check.h"
#include "comm/comm.h"
#include "data/loader.h"
#include "model/config.h"
#include "model/stage.h"
#include "train/optim.h"

typedef struct TrainConfig {
    ModelConfig model;         // vocabulary is replaced by the tokenizer's
    const char *data;          // shard directory, glob, .bin file or text file
    const char *val_data;      // validation data; NULL: the val shards of a data directory, if any
    const char *tokenizer;     // "gpt2" or "byte"
    int eval_every;            // steps between evaluations (0: only at the end)
    int eval_batches;          // batches per evaluation (0: all of the validation data)
    const char *log_path;      // JSONL metrics (appended), or NULL
    const char *ckpt_dir;      // checkpoints, or NULL
    int ckpt_every;            // steps between checkpoints (0: only at the end)
    int keep;                  // checkpoints to keep (0: all)
    int exit_after;            // stop after this step with a checkpoint, as if interrupted (0: run to steps)
    const char *resume;        // checkpoint or run directory to continue from, or NULL
    const char *init_from;     // safetensors file (Hugging Face GPT-2 names) to start from, or NULL
    int batch, seq, accum, steps;
    int log_every;             // print/log every this many steps (and the last)
    int threads;
    uint64_t seed;
    OptimConfig opt;
    double peak_gflops;        // MFU denominator; 0 = measure SGEMM at start
    int progress;              // draw a progress bar (stdout is a terminal)
    double bucket_mb;          // data-parallel gradient bucket size
    int zero;                  // ZeRO stage: 0, or 1 (optimizer state sharded over dp)
} TrainConfig;

// FLOPs of one training step per token: 6·N + 12·L·T·C (PaLM's convention:
// N parameters without padding, plus attention's score/value products).
double train_flops_per_token(const ModelConfig *c, int T);

// Mean loss per token of the model over the validation loader (from its
// start, at most max_batches batches of the stage's B; 0 = all); the number
// of tokens scored goes to *ntok.
double train_evaluate(Stage *st, Loader *val, int max_batches, int64_t *ntok);

// Runs the whole training; prints the header, one line per logged step and
// a summary to stdout. With dp (a communicator of data-parallel ranks; NULL
// for one process) every rank trains on its share of each global batch of
// batch·dp·grad_accum sequences and gradients are averaged across ranks in
// buckets overlapped with backward. Returns 0, or -1 with err set.
int train_run(const TrainConfig *tc, Comm *dp, Err *err);

#endif
