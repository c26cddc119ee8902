// tessera train — flags to a TrainConfig, then train/.
#include <ctype.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "comm/mpi.h"
#include "comm/run.h"
#include "core/fileio.h"
#include "core/json.h"
#include "data/mixture.h"
#include "data/tokenizer.h"
#include "io/checkpoint.h"
#include "model/stage.h"
#include "parallel/layout.h"
#include "train/trainer.h"

typedef struct { const TrainConfig *tc; int dp; } RankArgs;   // dp 0: the world's ranks / (tp·pp)

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

// TESSERA_TEST_OVERFLOW's rank is one of the world's ranks. 0, or -1 with e.
static int overflow_rank_check(const TrainConfig *tc, int world, Err *e) {
    if (tc->overflow_rank < world) return 0;
    return err_set(e, ERR_USAGE, "TESSERA_TEST_OVERFLOW='%s': rank %d is not one of the run's %d rank%s (0..%d)",
                   getenv("TESSERA_TEST_OVERFLOW"), tc->overflow_rank, world, world == 1 ? "" : "s", world - 1);
}

// One rank of the layout: rank 0 prints, the others keep quiet; errors go
// to stderr with the rank.
static int train_rank(Comm *world, void *arg) {
    RankArgs *ra = arg;
    Err e = {0};
    Layout l = ra->tc->layout;
    l.dp = ra->dp ? ra->dp : comm_size(world) / (l.tp * l.pp);   // under mpirun: the ranks started / (tp·pp)
    if (overflow_rank_check(ra->tc, comm_size(world), &e)) {   // under mpirun: known only now; every rank sees it
        if (comm_rank(world) == 0) comm_rank_error(world, "tessera train", &e);
        return ERR_USAGE;
    }
    if ((l.tp > 1 || l.pp > 1) && !strcmp(comm_backend(world), "mpi") && !comm_mpi_thread_multiple()) {
        err_set(&e, ERR_USAGE, "--%s under mpirun needs an MPI library that grants MPI_THREAD_MULTIPLE (tensor-parallel "
                "collectives and pipeline sends run beside the data-parallel group's)", l.tp > 1 ? "tp" : "pp");
        comm_rank_error(world, "tessera train", &e);
        return ERR_USAGE;
    }
    if (layout_init(&l, world, &e)) {
        err_prefix(&e, "--dp/--tp/--pp");
        comm_rank_error(world, "tessera train", &e);
        return e.code ? e.code : 1;
    }
    int rc = 0;
    if (comm_rank(world) != 0 && !freopen("/dev/null", "w", stdout)) rc = 1;
    else if (train_run(ra->tc, &l, &e)) {
        comm_rank_error(world, "tessera train", &e);
        rc = e.code ? e.code : 1;
    }
    layout_free(&l);
    return rc;
}

// A path flag names something that exists (a glob is left to the loader).
static int path_exists(const char *flag, const char *path, Err *e) {
    struct stat sb;
    if (!path || strpbrk(path, "*?[") || stat(path, &sb) == 0) return 0;
    return err_set(e, ERR_USAGE, "%s: %s: %s", flag, path, strerror(errno));
}

// A data flag's path exists, or its mixture parses (names, weights, every
// source's path; its sources' tokenizers agree with --tokenizer).
static int data_exists(const char *flag, const char *spec, const char *tokenizer, Err *e) {
    Mixture m;
    if (!spec) return 0;
    if (mix_parse(&m, spec, flag, e)) return -1;
    int rc = m.plain ? path_exists(flag, spec, e) : mix_check_tokenizer(&m, tokenizer, e);
    if (rc && !m.plain) err_prefix(e, flag);
    mix_free(&m);
    return rc;
}

// The data paths exist and the sequence fits the flags' model (a
// checkpoint's or file's model is checked as the run starts).
static int check_inputs(const TrainConfig *tc, Err *e) {
    if (data_exists("--data", tc->data, tc->tokenizer, e) || data_exists("--val-data", tc->val_data, tc->tokenizer, e) ||
        path_exists("--init-from", tc->init_from, e))
        return -1;
    struct stat sb;
    if (tc->resume && stat(tc->resume, &sb))
        return err_set(e, ERR_USAGE, "--resume: %s: no such checkpoint or run directory (%s)", tc->resume, strerror(errno));
    if (!tc->resume && !tc->init_from && tc->seq > tc->model.max_seq)
        return err_set(e, ERR_USAGE, "--seq %d is above the model's max_seq %d", tc->seq, tc->model.max_seq);
    return 0;
}

// --trace FILE.json and --trace-steps A:B: the steps a run of --steps N can
// trace, and a file that can be written (a temporary made beside it and
// removed), before any rank starts.
static int trace_flags(TrainConfig *tc, const char *steps, Err *e) {
    if (!tc->trace_path) return steps ? err_set(e, ERR_USAGE, "--trace-steps needs --trace FILE.json") : 0;
    int a = 0, b = 0, used = 0;
    size_t n = steps ? strlen(steps) : 0;
    if (steps && (strspn(steps, "0123456789:") != n || !isdigit((unsigned char)steps[0]) ||
                  sscanf(steps, "%9d:%9d%n", &a, &b, &used) != 2 || used != (int)n || a < 1 || b < a || b > tc->steps))
        return err_set(e, ERR_USAGE, "--trace-steps '%s': expected A:B, steps A to B with 1 <= A <= B <= --steps %d", steps,
                       tc->steps);
    tc->trace_first = a;
    tc->trace_last = b;
    const char *cap = getenv("TESSERA_TEST_TRACE_CAP");   // test hook: a rank's trace holds N events
    if (cap && *cap && (sscanf(cap, "%9d%n", &tc->trace_cap, &used) != 1 || cap[used] || tc->trace_cap < 1))
        return err_set(e, ERR_USAGE, "TESSERA_TEST_TRACE_CAP='%s': expected a count of events, at least 1", cap);
    struct stat sb;
    if (stat(tc->trace_path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return err_set(e, ERR_USAGE, "--trace %s: not a regular file", tc->trace_path);
    char tmp[4200];
    int fd = file_temp_create(tc->trace_path, tmp, sizeof tmp, e);
    if (fd < 0) {   // the reason, after the temporary's name
        const char *why = strrchr(e->msg, ':');
        char reason[sizeof e->msg];
        snprintf(reason, sizeof reason, "%s", why ? why + 2 : e->msg);
        return err_set(e, ERR_USAGE, "--trace %s: cannot write a file there (%s)", tc->trace_path, reason);
    }
    close(fd);
    unlink(tmp);
    return 0;
}

// The forked ranks' communicators — every one the layout lists
// (layout_comms: the world, the statistics' copy of it, the TP, DP and PP
// groups, a pipeline's neighbour pairs, wrap-around pair and embedding
// group) — fit in the local backend's shared-memory segment (exit 2
// before forking). A checkpoint's or file's model is not known yet: its
// head is taken as tied (one more group).
static int local_room(const Layout *l, Err *e) {
    size_t need = layout_comm_bytes(l, 1, comm_local_area_bytes);
    if (need <= comm_local_segment_bytes()) return 0;
    int n = layout_devices(l), most = n;
    for (; most > 1; most--) {   // the most data-parallel ranks alone that fit
        Layout d = {.dp = most, .tp = 1, .pp = 1};
        if (layout_comm_bytes(&d, 1, comm_local_area_bytes) <= comm_local_segment_bytes()) break;
    }
    return err_set(e, ERR_USAGE, "--nproc %d: the ranks' shared-memory communicators need %zu MiB, more than the %zu MiB "
                   "segment (at most %d data-parallel ranks on one machine; start more with mpirun)", n, need >> 20,
                   comm_local_segment_bytes() >> 20, most);
}

// The pipeline's flags into tc: the schedule, the micro-batches (the same
// number as --grad-accum), each stage's layers (*layers, pp counts, from
// --pp-layers; NULL for an even split) and what can be checked of the
// split before any rank starts (the flags' model; a checkpoint's or file's
// is checked as the run starts).
static int pipeline_flags(TrainConfig *tc, const char *spec, const char *sched, int micro, int **layers, Err *e) {
    Layout *l = &tc->layout;
    int pp = l->pp;
    if (pipe_schedule_parse(sched, &l->schedule, e)) return -1;
    if (micro) {
        if (tc->accum != 1 && tc->accum != micro)
            return err_set(e, ERR_USAGE, "--micro-batches %d and --grad-accum %d: they name the same number (give one)",
                           micro, tc->accum);
        tc->accum = micro;
    }
    if (spec) {
        if (pp == 1) return err_set(e, ERR_USAGE, "--pp-layers splits the layers over pipeline stages: it needs --pp 2 or more");
        if (!(*layers = calloc((size_t)pp, sizeof **layers))) return err_set(e, ERR_RUN, "out of memory");
        const char *q = spec;
        for (int k = 0; k < pp; k++) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q || v < 1 || v > 1 << 20 || (k + 1 < pp && *end != ',') || (k + 1 == pp && *end))
                return err_set(e, ERR_USAGE, "--pp-layers '%s': expected %d positive layer counts separated by commas (one "
                               "per --pp stage)", spec, pp);
            (*layers)[k] = (int)v;
            q = end + 1;
        }
        l->pp_layers = *layers;
    }
    int V = layout_chunks(l);
    if (pipe_check(l->schedule, pp, tc->accum, V, l->pp_layers, e)) return -1;
    if (pp > 256 || (int64_t)pp * V > 4096) return err_set(e, ERR_USAGE, "--pp %d × --virtual-stages %d: at most 256 stages and 4096 chunks", pp, V);
    int begin[4097];
    if (!tc->resume && !tc->init_from && layout_split_layers(l, tc->model.n_layer, begin, e)) return -1;
    return 0;
}

// A resumed run continues with its own sequence length when --seq is not
// given (the checkpoint's, or its model's max_seq up to 256); a checkpoint
// that cannot be read is left for the run to report, with the rest.
// --resume's model into *mc and, without --seq, its run's sequence length
// into tc->seq; 0 when the checkpoint cannot be read (the ranks say why).
static int resumed_model(TrainConfig *tc, ModelConfig *mc) {
    Ckpt *ck = NULL;
    Err ignored;
    struct stat sb;
    if (stat(tc->resume, &sb) || ckpt_open(&ck, tc->resume, &ignored)) return 0;
    int64_t s = 0;
    int got = ckpt_config(ck, mc, &ignored) == 0;
    if (got && !tc->seq) {
        const Json *tr = json_get(ckpt_meta(ck), "train");
        if (json_int64(json_get(tr, "seq"), &s) || s < 1 || s > mc->max_seq) s = mc->max_seq < 256 ? mc->max_seq : 256;
        tc->seq = (int)s;
    }
    ckpt_close(ck);
    return got;
}

// --precision, --reduce-dtype and fp16's loss-scale flags into tc (a
// loss-scale flag without fp16 is an error: bf16 and fp32 need no scale);
// the test hook TESSERA_TEST_OVERFLOW=STEP[:RANK] puts an inf into that
// rank's gradients at that step (a step of --steps; the rank is checked
// against the world once its size is known).
static int precision_flags(TrainConfig *tc, const char *prec, const char *reduce, ScalerConfig *sc, Err *e) {
    if (prec_parse(prec, &tc->layout.precision))
        return err_set(e, ERR_USAGE, "--precision: expected fp32, bf16 or fp16, got '%s'", prec);
    if (strcmp(reduce, "fp32") && strcmp(reduce, "bf16"))
        return err_set(e, ERR_USAGE, "--reduce-dtype: expected fp32 or bf16, got '%s'", reduce);
    tc->layout.reduce_bf16 = !strcmp(reduce, "bf16");
    const char *given = sc->init ? "--loss-scale" : sc->window ? "--loss-scale-window" : sc->hysteresis ? "--hysteresis"
                      : sc->min >= 0 ? "--loss-scale-min" : NULL;
    if (given && tc->layout.precision != PREC_FP16)
        return err_set(e, ERR_USAGE, "%s is fp16's dynamic loss scale: it needs --precision fp16 (%s needs no scale)", given,
                       prec_name(tc->layout.precision));
    tc->loss_scale_given = sc->init > 0;
    tc->scaler = (ScalerConfig){.init = sc->init ? sc->init : 65536.0, .window = sc->window ? sc->window : 2000,
                                .hysteresis = sc->hysteresis ? sc->hysteresis : 1, .min = sc->min >= 0 ? sc->min : 1.0};
    if (tc->scaler.init < tc->scaler.min)
        return err_set(e, ERR_USAGE, "--loss-scale %g is below --loss-scale-min %g", tc->scaler.init, tc->scaler.min);
    const char *hook = getenv("TESSERA_TEST_OVERFLOW");
    if (hook && *hook) {
        char *end;
        errno = 0;
        long long s = strtoll(hook, &end, 10), r = 0;
        int bad = end == hook;
        if (!bad && *end == ':') {
            const char *at = end + 1;
            r = strtoll(at, &end, 10);
            bad = end == at;
        }
        if (bad || errno || *end)
            return err_set(e, ERR_USAGE, "TESSERA_TEST_OVERFLOW='%s': expected STEP or STEP:RANK", hook);
        if (s < 1 || s > tc->steps)
            return err_set(e, ERR_USAGE, "TESSERA_TEST_OVERFLOW='%s': step %lld is not one of the run's steps (1..%d)", hook,
                           s, tc->steps);
        if (r < 0 || r > 255)   // --nproc's limit; the run's own rank count is checked once it is known
            return err_set(e, ERR_USAGE, "TESSERA_TEST_OVERFLOW='%s': rank %lld is not a rank (0..255)", hook, r);
        tc->overflow_step = (int)s;
        tc->overflow_rank = (int)r;
    }
    return 0;
}

// A test hook's "STEP:N" (both at least 1) into *a and *b; 0 when unset.
static int test_hook_pair(const char *name, int *a, int *b, Err *e) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    int n = 0;
    if (sscanf(v, "%d:%d%n", a, b, &n) != 2 || v[n] || *a < 1 || *b < 1)
        return err_set(e, ERR_USAGE, "%s='%s': expected STEP:N, both at least 1", name, v);
    return 0;
}

// --spike-guard, --spike-window, --spike-rollback, and the guard's test
// hooks (TESSERA_TEST_SPIKE: from a step, N steps' losses seen ×1000;
// TESSERA_TEST_SKIP: after a step, the loader past N steps' batches).
static int spike_flags(TrainConfig *tc, Err *e) {
    if ((tc->spike_window || tc->spike_rollback) && tc->spike_z <= 0)
        return err_set(e, ERR_USAGE, "%s is the spike guard's: it needs --spike-guard Z",
                       tc->spike_window ? "--spike-window" : "--spike-rollback");
    if (tc->spike_rollback && !tc->ckpt_dir)
        return err_set(e, ERR_USAGE, "--spike-rollback goes back to the run's last checkpoint: it needs --ckpt-dir (and --ckpt-every)");
    return test_hook_pair("TESSERA_TEST_SPIKE", &tc->spike_step, &tc->spike_count, e) ||
           test_hook_pair("TESSERA_TEST_SKIP", &tc->skip_step, &tc->skip_steps, e) ? -1 : 0;
}

// What train's flags give: the run's configuration, and how its ranks
// start (their defaults in train_flags).
typedef struct {
    TrainConfig tc;
    const char *model, *config, *lr_schedule, *pp_layers, *pipe_sched, *recompute, *precision, *reduce, *trace_steps, *offload;
    int nproc, dp, tp, pp, micro, max_restarts;
    ScalerConfig sc;   // fp16's loss-scale flags, 0 (min: -1) when not given
    double comm_timeout, restart_delay;
    int threads_given;   // --threads; else the cores, shared by the ranks on this machine
} TrainArgs;

// train's flag table: fills *a from the defaults, --config and the command
// line, or prints the usage (*help). *cfg holds --config's JSON, which a's
// strings may point into (json_free it after the last use). 0, or -1 with e.
static int train_flags(TrainArgs *a, int argc, char **argv, int *help, Json **cfg, Err *e) {
    *a = (TrainArgs){
        .tc = {.tokenizer = "gpt2", .eval_batches = 20, .batch = 8, .accum = 1, .steps = 100, .log_every = 10, .seed = 1337,
               .lr = {.lr = 6e-4, .min_lr = -1, .warmup = 10}, .adamw = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
               .clip = 1.0, .bucket_mb = 25, .offload_prefetch = -1, .layout = {.vstages = 1}},
        .model = "gpt2-tiny", .lr_schedule = "cosine", .pipe_sched = "1f1b", .recompute = "none", .precision = "fp32", .reduce = "fp32",
        .tp = 1, .pp = 1, .sc = {.init = 0, .window = 0, .hysteresis = 0, .min = -1}, .restart_delay = 1,
    };
    char model_help[1200];
    snprintf(model_help, sizeof model_help, "%s (default gpt2-tiny)", config_preset_list());
    Flag f[] = {
        {"model", FLAG_STR, &a->model, 0, 0, "PRESET", model_help, 0, NULL},
        {"config", FLAG_STR, &a->config, 0, 0, "FILE.json", "flags as a JSON object; \"model\" may be a preset or {arch, n_layer, n_head, d_model, d_ff, max_seq, vocab; llama and qwen2: n_kv_head, rope_theta, norm_eps, tie_embeddings}", 0, NULL},
        {"data", FLAG_STR, &a->tc.data, 0, 0, "PATH", "shard directory (from tessera prepare), shard glob, .bin file, or text file; or a mixture NAME=PATH:WEIGHT,NAME=PATH:WEIGHT... or FILE.json ({\"sources\": [{\"name\", \"path\", \"weight\"}, ...]}): each next sequence from the source furthest below its weight, each source shuffled by its own epochs, the tokens of each in the step log (required)", 0, NULL},
        {"val-data", FLAG_STR, &a->tc.val_data, 0, 0, "PATH", "validation data, a path or a mixture (each source's loss, and their weighted mean) (default: the val shards of the --data directories)", 0, NULL},
        {"tokenizer", FLAG_STR, &a->tc.tokenizer, 0, 0, "gpt2|llama|byte", "gpt2 (default, vocabulary 50257), llama (32000) or byte (256)", 0, NULL},
        {"eval-every", FLAG_INT, &a->tc.eval_every, 0, 1 << 30, "N", "evaluate every N steps (default 0: only at the end)", 0, NULL},
        {"eval-batches", FLAG_INT, &a->tc.eval_batches, 0, 1 << 30, "N", "sequences per evaluation in steps' worth (--batch × --grad-accum × data-parallel ranks each, so every layout evaluates the same ones), 0 = all (default 20)", 0, NULL},
        {"batch", FLAG_INT, &a->tc.batch, 1, 1 << 16, "B", "sequences per micro-batch (default 8)", 0, NULL},
        {"seq", FLAG_INT, &a->tc.seq, 1, 1 << 20, "T", "tokens per sequence (default: a resumed run's; else the model's max_seq, at most 256)", 0, NULL},
        {"grad-accum", FLAG_INT, &a->tc.accum, 1, 1 << 16, "K", "micro-batches per optimizer step (default 1)", 0, NULL},
        {"steps", FLAG_INT, &a->tc.steps, 1, 1 << 30, "N", "optimizer steps (default 100)", 0, NULL},
        {"lr", FLAG_FLOAT, &a->tc.lr.lr, 0, 10, "X", "peak learning rate (default 6e-4)", 0, NULL},
        {"min-lr", FLAG_FLOAT, &a->tc.lr.min_lr, 0, 10, "X", "cosine floor (default lr/10)", 0, NULL},
        {"warmup", FLAG_INT, &a->tc.lr.warmup, 0, 1 << 30, "N", "linear warmup steps (default 10)", 0, NULL},
        {"lr-schedule", FLAG_STR, &a->lr_schedule, 0, 0, "S", "cosine (default) or constant", 0, NULL},
        {"weight-decay", FLAG_FLOAT, &a->tc.adamw.weight_decay, 0, 10, "X", "AdamW decoupled weight decay, not on biases and norms (default 0.1)", 0, NULL},
        {"clip", FLAG_FLOAT, &a->tc.clip, 0, 1e9, "X", "max global gradient norm, 0 = off (default 1.0)", 0, NULL},
        {"beta1", FLAG_FLOAT, &a->tc.adamw.beta1, 0, 0.999999, "X", "AdamW beta1 (default 0.9)", 0, NULL},
        {"beta2", FLAG_FLOAT, &a->tc.adamw.beta2, 0, 0.999999, "X", "AdamW beta2 (default 0.95)", 0, NULL},
        {"eps", FLAG_FLOAT, &a->tc.adamw.eps, 1e-30, 1, "X", "AdamW epsilon (default 1e-8)", 0, NULL},
        {"seed", FLAG_U64, &a->tc.seed, 0, 9.2e18, "N", "seed of init and data order (default 1337)", 0, NULL},
        {"log", FLAG_STR, &a->tc.log_path, 0, 0, "FILE.jsonl", "append one JSON object per logged step, evaluation and restart", 0, NULL},
        {"log-every", FLAG_INT, &a->tc.log_every, 1, 1 << 30, "N", "print and log every N steps (default 10)", 0, NULL},
        {"ckpt-dir", FLAG_STR, &a->tc.ckpt_dir, 0, 0, "DIR", "save checkpoints under DIR (at the end, and every --ckpt-every)", 0, NULL},
        {"ckpt-every", FLAG_INT, &a->tc.ckpt_every, 0, 1 << 30, "N", "steps between checkpoints (default 0: only at the end)", 0, NULL},
        {"ckpt-async", FLAG_BOOL, &a->tc.layout.ckpt_async, 0, 0, "", "write checkpoints in the background: each rank copies its pieces to a staging buffer (memory the size of its parameters and AdamW moments) and a thread writes, checksums and fsyncs them while training goes on; the ranks commit a checkpoint (meta.json, latest) once all have written it, the next save, --exit-after and the end of the run waiting for it; the same bytes as a synchronous save", 0, NULL},
        {"spike-guard", FLAG_FLOAT, &a->tc.spike_z, 0, 1e6, "Z", "skip a step (no update, on every rank, marked \"spike\" in the log) whose loss or gradient norm exceeds the mean of the last --spike-window accepted steps by more than Z standard deviations; active once 10 steps are in the window (default off)", 0, NULL},
        {"spike-window", FLAG_INT, &a->tc.spike_window, 10, 1 << 20, "W", "accepted steps --spike-guard's mean and deviation cover (default 100)", 0, NULL},
        {"spike-rollback", FLAG_INT, &a->tc.spike_rollback, 1, 1 << 20, "K", "after K spikes in a row, go back to the last checkpoint (parameters, optimizer, the guard's window) and on past the batches that caused them (needs --spike-guard and --ckpt-dir)", 0, NULL},
        {"exit-after", FLAG_INT, &a->tc.exit_after, 0, 1 << 30, "N", "stop after step N with a checkpoint, as if interrupted; the LR schedule still spans --steps", 0, NULL},
        {"keep", FLAG_INT, &a->tc.keep, 0, 1 << 30, "K", "keep the newest K checkpoints (default 0: all)", 0, NULL},
        {"resume", FLAG_STR, &a->tc.resume, 0, 0, "[PATH]", "continue from a checkpoint or run directory (alone: --ckpt-dir's latest)", 0, "@latest"},
        {"init-from", FLAG_STR, &a->tc.init_from, 0, 0, "PATH", "start (step 0, a fresh optimizer) from these weights: a Hugging Face model directory (GPT-2, LLaMA or Qwen2), a GPT-2 safetensors file, or a tessera checkpoint or run directory; --model, if given, must be their model", 0, NULL},
        {"threads", FLAG_INT, &a->tc.threads, 1, 1024, "N", "threads for kernels and BLAS (default: all cores; with --nproc or mpirun, cores / ranks on this machine)", 0, NULL},
        {"dp", FLAG_INT, &a->dp, 1, 256, "N", "data-parallel ranks: --batch sequences each, gradients averaged (default: ranks / (--tp × --pp))", 0, NULL},
        {"tp", FLAG_INT, &a->tp, 1, 256, "N", "tensor-parallel ranks: each layer's heads, FFN columns and vocabulary split over N neighbouring ranks (default 1)", 0, NULL},
        {"sp", FLAG_BOOL, &a->tc.layout.sp, 0, 0, "", "sequence parallelism with --tp: norms and residual stream split by rows, allgather/reduce-scatter instead of allreduce", 0, NULL},
        {"pp", FLAG_INT, &a->pp, 1, 256, "N", "pipeline stages: each rank holds a contiguous range of layers, activations sent between stages per micro-batch (default 1)", 0, NULL},
        {"pp-layers", FLAG_STR, &a->pp_layers, 0, 0, "N,N,...", "layers of each pipeline stage (default: an even split)", 0, NULL},
        {"micro-batches", FLAG_INT, &a->micro, 1, 1 << 16, "M", "micro-batches per step through the pipeline: the same as --grad-accum (give either; both must agree)", 0, NULL},
        {"schedule", FLAG_STR, &a->pipe_sched, 0, 0, "S", "pipeline schedule: 1f1b (default; at most --pp micro-batches of activations per rank) or gpipe (all M)", 0, NULL},
        {"virtual-stages", FLAG_INT, &a->tc.layout.vstages, 1, 64, "V", "interleaved 1F1B: each rank holds V chunks of layers, P apart, and a micro-batch goes round the stages V times; the bubble shrinks V-fold (default 1; needs --micro-batches a multiple of --pp)", 0, NULL},
        {"doc-mask", FLAG_BOOL, &a->tc.doc_mask, 0, 0, "", "document masking: inside each packed sequence, attention stops at document boundaries and positions (learned or rotary) restart at each document's first token, the separator prepare writes at its head (gpt2: <|endoftext|>; llama: <s>; the byte tokenizer has none); kept in checkpoints, so eval, sample and --resume mask alike", 0, NULL},
        {"recompute", FLAG_STR, &a->recompute, 0, 0, "R", "activation recomputation: none (default), selective (the attention core again in backward) or full (each block again; only block outputs kept); the same gradients, bit for bit", 0, NULL},
        {"precision", FLAG_STR, &a->precision, 0, 0, "P", "fp32 (default), bf16 or fp16: 16-bit weights (a copy of the fp32 masters) and activations; bf16 multiplies on the CPU's bf16 unit (AMX tiles, or AVX512_BF16's dot product where it outruns the fp32 FMAs), fp32 elsewhere; fp16 has no arithmetic unit on CPUs: it stores in 16 bits and computes in fp32, with a dynamic loss scale", 0, NULL},
        {"reduce-dtype", FLAG_STR, &a->reduce, 0, 0, "T", "data-parallel gradient reduction: fp32 (default) or bf16 (half the bytes, summed in fp32)", 0, NULL},
        {"loss-scale", FLAG_FLOAT, &a->sc.init, 1e-30, 1e30, "S", "fp16: the first loss scale (default 65536; a resumed run continues its checkpoint's)", 0, NULL},
        {"loss-scale-window", FLAG_INT, &a->sc.window, 1, 1 << 30, "N", "fp16: steps without overflow before the scale doubles (default 2000)", 0, NULL},
        {"hysteresis", FLAG_INT, &a->sc.hysteresis, 1, 1 << 30, "N", "fp16: overflows before the scale first halves (default 1, PyTorch's; Megatron-LM uses 2)", 0, NULL},
        {"loss-scale-min", FLAG_FLOAT, &a->sc.min, 0, 1e30, "X", "fp16: stop with an error when the scale falls below X (default 1)", 0, NULL},
        {"nproc", FLAG_INT, &a->nproc, 1, 256, "N", "ranks to fork on this machine (= --dp × --tp × --pp); under mpirun leave it out", 0, NULL},
        {"zero", FLAG_INT, &a->tc.layout.zero, 0, 3, "Z", "ZeRO stage over the --dp ranks: 0 (default), 1 AdamW state sharded, 2 also gradients, 3 also parameters", 0, NULL},
        {"bucket-mb", FLAG_FLOAT, &a->tc.bucket_mb, 0.001, 1e6, "MB", "gradient bucket size of --zero 0 (ZeRO reduces layer by layer; default 25)", 0, NULL},
        {"comm-timeout", FLAG_FLOAT, &a->comm_timeout, 0.001, 1e9, "S", "seconds a rank waits for the others (default 300, or $TESSERA_COMM_TIMEOUT)", 0, NULL},
        {"max-restarts", FLAG_INT, &a->max_restarts, 0, 1000, "K", "when a rank dies or the run fails (exit 1), start every rank again from --ckpt-dir's latest checkpoint, up to K times (default 0)", 0, NULL},
        {"restart-delay", FLAG_FLOAT, &a->restart_delay, 0, 3600, "S", "seconds to wait before a restart (default 1)", 0, NULL},
        {"peak-gflops", FLAG_FLOAT, &a->tc.peak_gflops, 0, 1e9, "X", "peak GFLOP/s for MFU (default: the register-only probe of the arithmetic the products use)", 0, NULL},
        {"profile", FLAG_BOOL, &a->tc.profile, 0, 0, "", "time each kind of work (every GEMM shape, attention, loss, norms, AdamW, loader, communication, checkpoint I/O, disk I/O wait) and print where the steps' time went (checkpoints included, with the steps before them)", 0, NULL},
        {"trace", FLAG_STR, &a->tc.trace_path, 0, 0, "FILE.json", "write a timeline of the --trace-steps steps, every rank's, as one Chrome trace-event file (Perfetto, chrome://tracing): kernels by kind and layer, collectives with their group and bytes, pipeline sends and receives, the loader, checkpoint writes", 0, NULL},
        {"trace-steps", FLAG_STR, &a->trace_steps, 0, 0, "A:B", "the steps --trace records, A to B (default: the second and third steps the run does, 2:3 from scratch; its only step when it does one); a resumed run traces those after its checkpoint", 0, NULL},
        {"offload", FLAG_STR, &a->offload, 0, 0, "optimizer|params", "optimizer: keep the optimizer state of each rank's owned pieces in files instead of memory (ZeRO-Offload), streamed segment by segment through a ring of 3 buffers with read-ahead and write-behind threads: the AdamW moments always; under bf16/fp16 also the fp32 master weights (the 16-bit copy the passes read stays in memory: the whole model's, or under ZeRO-3 the owned shard's, gathered in 16 bits); under fp32 the weights stay in memory (they are the masters the forward reads). params (needs --zero 3, at one rank too; ZeRO-Infinity): that, and the owned parameter shard ZeRO-3 gathers from (its 16-bit copy under bf16/fp16, the fp32 weights under fp32) in a file mapped in place, each segment's piece read ahead (--offload-prefetch) and checked before its gather and handed back to the kernel once gathered: resident are the activations, the gradient shard and a few gathered segments. The same bits either way; checkpoints are ordinary ones (resume with or without it)", 0, NULL},
        {"offload-prefetch", FLAG_INT, &a->tc.offload_prefetch, 0, 64, "N", "with --offload params: the segments read ahead of the one being gathered, in the pass's direction (default 2)", 0, NULL},
        {"offload-dir", FLAG_STR, &a->tc.offload_dir, 0, 0, "DIR", "with --offload: make the offload directory (offload-rRRRRR-HOST-pPID.XXXXXX, one per rank; those a killed run of this host left are removed) under DIR (default: --ckpt-dir, else $TMPDIR or /tmp)", 0, NULL},
        {"offload-keep", FLAG_BOOL, &a->tc.offload_keep, 0, 0, "", "with --offload: leave the offload files in place at exit (default: removed)", 0, NULL},
    };
    int nf = (int)(sizeof f / sizeof f[0]);
    if (flags_parse(f, nf, argc, argv, "train", help, cfg, e)) return -1;
    if (*help) {
        printf("usage: tessera train --data PATH [flags]\n\nTrains a GPT-2, LLaMA or Qwen2 model (fp32, bf16 or fp16) on one process, or on a 3D mesh of\n"
               "--nproc forked ranks or the ranks mpirun starts: data parallel with ZeRO 0-3 (--dp, --zero),\n"
               "tensor parallel (Megatron-style, --tp, --sp) and pipeline parallel (--pp, --micro-batches,\n"
               "--schedule, --virtual-stages). rank = pp_rank·dp·tp + dp_rank·tp + tp_rank: tensor-parallel ranks are neighbours.\n"
               "Every layout trains the same model as one process.\n"
               "Without --val-data, a --data directory's val_*.bin shards are the validation set.\n\n");
        flags_print(f, nf);
    }
    return 0;
}

// The model: --config's model object (unless --model is on the command
// line, which wins) or the preset. 0, or -1 with e.
static int train_model(TrainArgs *a, int argc, char **argv, const Json *cfg, Err *e) {
    TrainConfig *tc = &a->tc;
    const Json *jm = cfg ? json_get(cfg, "model") : NULL;
    int model_on_argv = 0;   // --model on the command line wins over the config file
    for (int i = 0; i < argc; i++) model_on_argv |= !strncmp(argv[i], "--model", 7);
    tc->model_given = model_on_argv || jm;
    if (jm && jm->type == JSON_OBJ && !model_on_argv) {
        if (config_from_json(&tc->model, jm, e) || config_validate(&tc->model, e)) { err_prefix(e, "--config: model"); return -1; }
    } else if (config_preset(&tc->model, a->model, e)) {
        err_prefix(e, "--model");
        return -1;
    }
    return 0;
}

// The rest of the flags into a->tc, and what can be checked before any rank
// starts, in one order for every run: the data, the LR schedule, resume,
// restarts and checkpoints, the pipeline, recomputation and precision, and
// the layout's split of the model (on resume the checkpoint's). *layers:
// --pp-layers' counts (free them after the run). 0, or -1 with e.
static int train_config(TrainArgs *a, int **layers, Err *e) {
    TrainConfig *tc = &a->tc;
    if (!tc->data) return err_set(e, ERR_USAGE, "--data PATH is required (a text file to train on)");
    if (strcmp(a->lr_schedule, "cosine") && strcmp(a->lr_schedule, "constant"))
        return err_set(e, ERR_USAGE, "--lr-schedule: expected cosine or constant, got '%s'", a->lr_schedule);
    tc->lr.shape = strcmp(a->lr_schedule, "constant") ? LR_COSINE : LR_CONSTANT;
    tc->lr.steps = tc->steps;
    if (tc->lr.min_lr < 0) tc->lr.min_lr = tc->lr.lr / 10;
    if ((float)tc->lr.min_lr > (float)tc->lr.lr) return err_set(e, ERR_USAGE, "--min-lr %g is above --lr %g", tc->lr.min_lr, tc->lr.lr);
    if (tc->resume && !strcmp(tc->resume, "@latest")) {
        if (!tc->ckpt_dir) return err_set(e, ERR_USAGE, "--resume without a path needs --ckpt-dir");
        tc->resume = tc->ckpt_dir;
    }
    ModelConfig split = tc->model;   // the model the layout splits: the flags', or on resume the checkpoint's
    int split_known = !tc->init_from && (!tc->resume || resumed_model(tc, &split));
    if (!tc->seq) tc->seq = tc->model.max_seq < 256 ? tc->model.max_seq : 256;
    if (tc->resume && tc->init_from) return err_set(e, ERR_USAGE, "--resume and --init-from exclude each other");
    if (a->max_restarts && !tc->ckpt_dir)
        return err_set(e, ERR_USAGE, "--max-restarts %d resumes from the run's checkpoints: it needs --ckpt-dir (and --ckpt-every)",
                       a->max_restarts);
    if (a->max_restarts && comm_mpi_launched())
        return err_set(e, ERR_USAGE, "--max-restarts restarts the ranks this command forks (--nproc); under mpirun or srun, "
                       "resubmit the job (Slurm: --requeue) with --resume");
    if (spike_flags(tc, e) || trace_flags(tc, a->trace_steps, e)) return -1;
    if (tc->exit_after && !tc->ckpt_dir)
        return err_set(e, ERR_USAGE, "--exit-after %d stops with a checkpoint to resume from: it needs --ckpt-dir", tc->exit_after);
    if (tc->layout.ckpt_async && !tc->ckpt_dir)
        return err_set(e, ERR_USAGE, "--ckpt-async writes checkpoints in the background: it needs --ckpt-dir");
    // what can be checked before any rank starts: one line, exit 2
    if (check_inputs(tc, e) || (tc->ckpt_dir && ckpt_prepare_dir(tc->ckpt_dir, e))) return -1;
    a->threads_given = tc->threads > 0;
    if (!a->threads_given) tc->threads = omp_get_num_procs();
    // the bar only when the launcher's stdout is a terminal: mpirun hands its
    // ranks a terminal of its own even when its output goes to a file or pipe,
    // so a rank under it cannot tell, and draws none
    tc->progress = isatty(STDOUT_FILENO) && !comm_mpi_launched();
    tc->layout.dp = a->dp;   // 0 until the ranks are counted
    tc->layout.tp = a->tp;
    tc->layout.pp = a->pp;
    if (tc->doc_mask && tokenizer_doc_sep_of(tc->tokenizer) < 0)
        return err_set(e, ERR_USAGE, "--doc-mask: the %s tokenizer writes nothing between documents (prepare's data with "
                       "--tokenizer gpt2 or llama marks where each starts)", tc->tokenizer);
    if (tc->layout.sp && a->tp == 1) return err_set(e, ERR_USAGE, "--sp splits the sequence over the tensor-parallel ranks: it needs --tp 2 or more");
    if (pipeline_flags(tc, a->pp_layers, a->pipe_sched, a->micro, layers, e)) return -1;
    if (!strcmp(a->recompute, "full")) tc->layout.recompute = RECOMPUTE_FULL;
    else if (!strcmp(a->recompute, "selective")) tc->layout.recompute = RECOMPUTE_SELECTIVE;
    else if (strcmp(a->recompute, "none"))
        return err_set(e, ERR_USAGE, "--recompute: expected none, selective or full, got '%s'", a->recompute);
    if (precision_flags(tc, a->precision, a->reduce, &a->sc, e)) return -1;
    tc->layout.offload = OFFLOAD_NONE;
    if (a->offload && layout_offload_parse(a->offload, &tc->layout.offload))
        return err_set(e, ERR_USAGE, "--offload: expected optimizer or params, got '%s'", a->offload);
    if (tc->layout.offload == OFFLOAD_PARAMS && tc->layout.zero != 3)
        return err_set(e, ERR_USAGE, "--offload params: the parameters are offloaded as ZeRO-3 gathers them: add --zero 3 (it runs on one rank too)");
    if (tc->offload_prefetch >= 0 && tc->layout.offload != OFFLOAD_PARAMS)
        return err_set(e, ERR_USAGE, "--offload-prefetch reads the parameters' file ahead: it needs --offload params");
    if (tc->offload_prefetch < 0) tc->offload_prefetch = 2;
    const char *unit = getenv("TESSERA_TEST_OFFLOAD_UNIT");   // test hook: small units, so tiny models stream several per segment
    if (unit && unit[0]) {
        char *end;
        long long v = strtoll(unit, &end, 10);
        if (*end || v < 1 || v > (1LL << 40))
            return err_set(e, ERR_USAGE, "TESSERA_TEST_OFFLOAD_UNIT='%s': expected floats in 1..2^40", unit);
        tc->offload_unit = (size_t)v;
    }
    if (!a->offload && (tc->offload_dir || tc->offload_keep))
        return err_set(e, ERR_USAGE, "%s says where the offload's files go: it needs --offload optimizer or params",
                       tc->offload_dir ? "--offload-dir" : "--offload-keep");
    struct stat od;   // checked before any rank starts (each makes its directory in it)
    if (tc->offload_dir && stat(tc->offload_dir, &od))
        return err_set(e, ERR_USAGE, "--offload-dir %s: %s", tc->offload_dir, strerror(errno));
    if (tc->offload_dir && !S_ISDIR(od.st_mode)) return err_set(e, ERR_USAGE, "--offload-dir %s: not a directory", tc->offload_dir);
    // the same layout rules for a fresh run and a resumed one, before any
    // rank starts (an --init-from file's model is checked by every rank)
    if (split_known) {   // padded as the trainer pads it
        config_pad_vocab(&split, split.vocab, a->tp);
        if (stage_check_split(&split, a->tp, tc->layout.sp, tc->seq, e)) return -1;
    }
    return 0;
}

// Whether the run needs ranks: under mpirun, or a layout of several ranks,
// or ZeRO (which runs over a communicator, even of one rank), or restarts
// (which need a launcher that outlives the ranks).
static int needs_ranks(const TrainArgs *a) {
    return comm_mpi_launched() || a->nproc > 1 || a->dp > 1 || a->tp > 1 || a->pp > 1 || a->tc.layout.zero > 0 || a->max_restarts > 0;
}

// The ranks: forked here (--nproc, or dp·tp·pp) or the ones mpirun started,
// their layout checked against the world first. The run's exit status, or -1
// with e when a check failed before any rank started.
static int train_ranks(TrainArgs *a, Err *e) {
    TrainConfig *tc = &a->tc;
    int nproc = a->nproc, tp = a->tp, pp = a->pp, dp = a->dp;
    int world = comm_mpi_launched() ? -1 : nproc ? nproc : (dp ? dp : 1) * tp * pp;
    if (!dp && world > 0) dp = world / (tp * pp);   // under mpirun the rank takes the world size / (tp·pp)
    if (world > 0 && (int64_t)dp * tp * pp != world) {
        if (nproc % (tp * pp) && pp == 1) return err_set(e, ERR_USAGE, "--tp %d does not divide --nproc %d", tp, nproc);
        if (nproc % (tp * pp)) return err_set(e, ERR_USAGE, "--tp %d × --pp %d = %d does not divide --nproc %d", tp, pp, tp * pp, nproc);
        return err_set(e, ERR_USAGE, "--dp %d with --nproc %d: dp × tp × pp = %d × %d × %d ranks must be the ranks started",
                       dp, nproc, dp, tp, pp);
    }
    Layout l = tc->layout;
    l.dp = dp;
    if (world > 0 && (local_room(&l, e) || overflow_rank_check(tc, world, e))) return -1;
    if (!a->threads_given) {   // the cores shared by the ranks on this machine
        int local = world > 0 ? world : mpi_local_ranks();
        tc->threads = omp_get_num_procs() / local > 0 ? omp_get_num_procs() / local : 1;
    }
    RankArgs ra = {tc, dp};
    double timeout = a->comm_timeout > 0 ? a->comm_timeout : comm_timeout_default();
    return train_launch(tc, world, train_rank, &ra, timeout, a->max_restarts, a->restart_delay);
}

int cmd_train(int argc, char **argv) {
    TrainArgs a;
    Json *cfg = NULL;   // --config's JSON lives to the end: the flags' strings may point into it
    int *layers = NULL, help = 0, rc = 2;
    Err e = {0};
    if (train_flags(&a, argc, argv, &help, &cfg, &e)) return cli_fail("train", &e);
    if (help) { rc = 0; goto out; }
    if (train_model(&a, argc, argv, cfg, &e) || train_config(&a, &layers, &e)) goto out;
    if (needs_ranks(&a)) {
        rc = train_ranks(&a, &e);
        if (rc >= 0) e.msg[0] = 0;   // the ranks reported their own errors
        goto out;
    }
    if (overflow_rank_check(&a.tc, 1, &e)) goto out;
    Layout one = a.tc.layout;   // one process: dp = tp = pp = 1, no groups
    one.dp = one.tp = one.pp = 1;
    layout_place(&one, 0);
    rc = train_run(&a.tc, &one, &e) ? e.code : 0;
out:
    json_free(cfg);
    free(layers);
    if (rc && e.msg[0]) return cli_fail("train", &e);
    return rc;
}
