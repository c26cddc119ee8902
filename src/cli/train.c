// tessera train — flags to a TrainConfig, then train/.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "comm/mpi.h"
#include "comm/run.h"
#include "parallel/mesh.h"
#include "train/trainer.h"

typedef struct { const TrainConfig *tc; int dp; } RankArgs;

// Ranks mpirun started on this machine (Open MPI, MPICH and Slurm say so
// in the environment); 1 when none does.
static int mpi_local_ranks(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

// One rank of the mesh (data parallel only: tp = pp = 1): rank 0 prints,
// the others keep quiet; errors go to stderr with the rank.
static int train_rank(Comm *world, void *arg) {
    RankArgs *ra = arg;
    Err e = {0};
    Mesh m;
    if (mesh_init(&m, world, ra->dp, 1, 1, &e)) {
        fprintf(stderr, "tessera train: rank %d: --dp: %s\n", comm_rank(world), e.msg);
        return e.code ? e.code : 1;
    }
    int rc = 0;
    if (comm_rank(world) != 0 && !freopen("/dev/null", "w", stdout)) rc = 1;
    else if (train_run(ra->tc, m.dpg, &e)) {
        fprintf(stderr, "tessera train: rank %d: %s\n", comm_rank(world), e.msg);
        rc = e.code ? e.code : 1;
    }
    mesh_free(&m);
    return rc;
}

int cmd_train(int argc, char **argv) {
    const char *model = "gpt2-tiny", *config = NULL, *data = NULL, *tokenizer = "gpt2", *log = NULL, *val_data = NULL;
    int eval_every = 0, eval_batches = 20;
    const char *schedule = "cosine", *ckpt_dir = NULL;
    const char *init_from = NULL, *resume = NULL;
    int keep = 0, exit_after = 0, nproc = 1, dp = 1, zero = 0;
    double bucket_mb = 25, comm_timeout = 0;
    int batch = 8, seq = 0, accum = 1, steps = 100, warmup = 10, log_every = 10, threads = 0, ckpt_every = 0;
    uint64_t seed = 1337;
    double lr = 6e-4, min_lr = -1, wd = 0.1, clip = 1.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, peak = 0;
    Flag f[] = {
        {"model", FLAG_STR, &model, 0, 0, "PRESET", "gpt2-tiny (default), gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m", 0},
        {"config", FLAG_STR, &config, 0, 0, "FILE.json", "flags as a JSON object; \"model\" may be a preset or {n_layer, n_head, d_model, d_ff, max_seq}", 0},
        {"data", FLAG_STR, &data, 0, 0, "PATH", "shard directory (from tessera prepare), shard glob, .bin file, or text file (required)", 0},
        {"val-data", FLAG_STR, &val_data, 0, 0, "PATH", "validation data (default: the val shards of a --data directory)", 0},
        {"tokenizer", FLAG_STR, &tokenizer, 0, 0, "gpt2|byte", "gpt2 (default, vocabulary 50257) or byte (256)", 0},
        {"eval-every", FLAG_INT, &eval_every, 0, 1 << 30, "N", "evaluate every N steps (default 0: only at the end)", 0},
        {"eval-batches", FLAG_INT, &eval_batches, 0, 1 << 30, "N", "batches per evaluation, 0 = all (default 20)", 0},
        {"batch", FLAG_INT, &batch, 1, 1 << 16, "B", "sequences per micro-batch (default 8)", 0},
        {"seq", FLAG_INT, &seq, 1, 1 << 20, "T", "tokens per sequence (default: the model's max_seq, at most 256)", 0},
        {"grad-accum", FLAG_INT, &accum, 1, 1 << 16, "K", "micro-batches per optimizer step (default 1)", 0},
        {"steps", FLAG_INT, &steps, 1, 1 << 30, "N", "optimizer steps (default 100)", 0},
        {"lr", FLAG_FLOAT, &lr, 0, 10, "X", "peak learning rate (default 6e-4)", 0},
        {"min-lr", FLAG_FLOAT, &min_lr, 0, 10, "X", "cosine floor (default lr/10)", 0},
        {"warmup", FLAG_INT, &warmup, 0, 1 << 30, "N", "linear warmup steps (default 10)", 0},
        {"lr-schedule", FLAG_STR, &schedule, 0, 0, "S", "cosine (default) or constant", 0},
        {"weight-decay", FLAG_FLOAT, &wd, 0, 10, "X", "AdamW decoupled weight decay, not on biases and norms (default 0.1)", 0},
        {"clip", FLAG_FLOAT, &clip, 0, 1e9, "X", "max global gradient norm, 0 = off (default 1.0)", 0},
        {"beta1", FLAG_FLOAT, &beta1, 0, 0.999999, "X", "AdamW beta1 (default 0.9)", 0},
        {"beta2", FLAG_FLOAT, &beta2, 0, 0.999999, "X", "AdamW beta2 (default 0.95)", 0},
        {"eps", FLAG_FLOAT, &eps, 1e-30, 1, "X", "AdamW epsilon (default 1e-8)", 0},
        {"seed", FLAG_U64, &seed, 0, 9.2e18, "N", "seed of init and data order (default 1337)", 0},
        {"log", FLAG_STR, &log, 0, 0, "FILE.jsonl", "append one JSON object per logged step", 0},
        {"log-every", FLAG_INT, &log_every, 1, 1 << 30, "N", "print and log every N steps (default 10)", 0},
        {"ckpt-dir", FLAG_STR, &ckpt_dir, 0, 0, "DIR", "save checkpoints under DIR (at the end, and every --ckpt-every)", 0},
        {"ckpt-every", FLAG_INT, &ckpt_every, 0, 1 << 30, "N", "steps between checkpoints (default 0: only at the end)", 0},
        {"exit-after", FLAG_INT, &exit_after, 0, 1 << 30, "N", "stop after step N with a checkpoint, as if interrupted; the LR schedule still spans --steps", 0},
        {"keep", FLAG_INT, &keep, 0, 1 << 30, "K", "keep the newest K checkpoints (default 0: all)", 0},
        {"resume", FLAG_STR, &resume, 0, 0, "[PATH]", "continue from a checkpoint or run directory (alone: --ckpt-dir's latest)", 0},
        {"init-from", FLAG_STR, &init_from, 0, 0, "FILE", "start from a safetensors file with Hugging Face GPT-2 names", 0},
        {"threads", FLAG_INT, &threads, 1, 1024, "N", "threads for kernels and BLAS (default: all cores; with --nproc or mpirun, cores / ranks on this machine)", 0},
        {"dp", FLAG_INT, &dp, 1, 256, "N", "data-parallel ranks: --batch sequences each, gradients averaged (default 1)", 0},
        {"nproc", FLAG_INT, &nproc, 1, 256, "N", "ranks to fork on this machine (= --dp); under mpirun leave it out", 0},
        {"zero", FLAG_INT, &zero, 0, 3, "Z", "ZeRO stage over the --dp ranks: 0 (default), 1 AdamW state sharded, 2 also gradients, 3 also parameters", 0},
        {"bucket-mb", FLAG_FLOAT, &bucket_mb, 0.001, 1e6, "MB", "gradient bucket size of --zero 0 (ZeRO reduces layer by layer; default 25)", 0},
        {"comm-timeout", FLAG_FLOAT, &comm_timeout, 0.001, 1e9, "S", "seconds a rank waits for the others (default 300, or $TESSERA_COMM_TIMEOUT)", 0},
        {"peak-gflops", FLAG_FLOAT, &peak, 0, 1e9, "X", "peak GFLOP/s for MFU (default: measured SGEMM)", 0},
    };
    int nf = (int)(sizeof f / sizeof f[0]), help;
    Json *cfg = NULL;
    Err e = {0};
    // --resume takes an optional value: alone it means --ckpt-dir's latest.
    int resume_latest = 0;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--resume") && (i + 1 == argc || !strncmp(argv[i + 1], "--", 2))) {
            argv[i] = "--resume=@latest";
            resume_latest = 1;
        }
    if (flags_parse(f, nf, argc, argv, "train", &help, &cfg, &e)) return cli_fail("train", &e);
    if (help) {
        printf("usage: tessera train --data PATH [flags]\n\nTrains a GPT-2 style model on one process (fp32).\n"
               "Without --val-data, a --data directory's val_*.bin shards are the validation set.\n\n");
        flags_print(f, nf);
        return 0;
    }
    TrainConfig tc;
    memset(&tc, 0, sizeof tc);
    int rc = 2;
    const Json *jm = cfg ? json_get(cfg, "model") : NULL;
    int model_on_argv = 0;   // --model on the command line wins over the config file
    for (int i = 0; i < argc; i++) model_on_argv |= !strncmp(argv[i], "--model", 7);
    if (jm && jm->type == JSON_OBJ && !model_on_argv) {
        if (config_from_json(&tc.model, jm, &e)) { err_prefix(&e, "--config: model"); goto out; }
    } else if (config_preset(&tc.model, model, &e)) {
        err_prefix(&e, "--model");
        goto out;
    }
    if (!data) { err_set(&e, ERR_USAGE, "--data PATH is required (a text file to train on)"); goto out; }
    if (strcmp(schedule, "cosine") && strcmp(schedule, "constant")) {
        err_set(&e, ERR_USAGE, "--lr-schedule: expected cosine or constant, got '%s'", schedule);
        goto out;
    }
    if (!seq) seq = tc.model.max_seq < 256 ? tc.model.max_seq : 256;
    tc.data = data;
    tc.val_data = val_data;
    tc.eval_every = eval_every;
    tc.eval_batches = eval_batches;
    tc.tokenizer = tokenizer;
    tc.log_path = log;
    tc.ckpt_dir = ckpt_dir;
    tc.ckpt_every = ckpt_every;
    tc.keep = keep;
    tc.exit_after = exit_after;
    tc.init_from = init_from;
    if (resume_latest) {
        if (!ckpt_dir) { err_set(&e, ERR_USAGE, "--resume without a path needs --ckpt-dir"); goto out; }
        resume = ckpt_dir;
    }
    tc.resume = resume;
    if (resume && init_from) { err_set(&e, ERR_USAGE, "--resume and --init-from exclude each other"); goto out; }
    tc.batch = batch;
    tc.seq = seq;
    tc.accum = accum;
    tc.steps = steps;
    tc.log_every = log_every;
    tc.threads = threads ? threads : omp_get_num_procs();
    tc.seed = seed;
    tc.peak_gflops = peak;
    tc.progress = isatty(STDOUT_FILENO);
    tc.opt = (OptimConfig){
        .lr = (float)lr, .min_lr = (float)(min_lr >= 0 ? min_lr : lr / 10), .warmup = warmup, .steps = steps,
        .schedule = strcmp(schedule, "constant") ? LR_COSINE : LR_CONSTANT, .beta1 = (float)beta1,
        .beta2 = (float)beta2, .eps = (float)eps, .weight_decay = (float)wd, .clip = (float)clip,
    };
    if (tc.opt.min_lr > tc.opt.lr) { err_set(&e, ERR_USAGE, "--min-lr %g is above --lr %g", min_lr, lr); goto out; }
    tc.bucket_mb = bucket_mb;
    tc.zero = zero;
    if (comm_mpi_launched() || nproc > 1 || dp > 1 || zero > 0) {   // ZeRO runs over a communicator, even of one rank
        int world = comm_mpi_launched() ? -1 : nproc;
        if (world > 0 && dp != nproc) {
            err_set(&e, ERR_USAGE, "--dp %d with --nproc %d: every forked rank is a data-parallel rank (set both to N)", dp, nproc);
            goto out;
        }
        if (!threads) {   // the cores shared by the ranks on this machine
            int local = world > 0 ? world : mpi_local_ranks();
            tc.threads = omp_get_num_procs() / local > 0 ? omp_get_num_procs() / local : 1;
        }
        RankArgs ra = {&tc, dp};
        Err le = {0};
        if (comm_run(world > 0 ? world : 1, train_rank, &ra, comm_timeout > 0 ? comm_timeout : comm_timeout_default(), &le)) {
            fprintf(stderr, "tessera train: %s\n", le.msg);
            rc = le.code ? le.code : 1;
            e.msg[0] = 0;
        } else rc = 0;
        goto out;
    }
    rc = train_run(&tc, NULL, &e) ? e.code : 0;
out:
    json_free(cfg);
    if (rc && e.msg[0]) return cli_fail("train", &e);
    return rc;
}
