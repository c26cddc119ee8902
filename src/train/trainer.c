#include "train/trainer.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/checksum.h"
#include "core/json.h"
#include "core/prof.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "io/checkpoint.h"
#include "io/weights.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/peak.h"
#include "parallel/dp.h"

struct Trainer {
    const TrainConfig *tc;
    Mesh *mesh;
    int rank, D;               // DP rank and size
    int first;                 // world rank 0: it prints, logs and commits checkpoints
    int lock;                  // world rank 0's lock on --ckpt-dir (-1: none)
    Comm *stats;               // loss, norm and checkpoint agreement (NULL: one process), apart from the DP
                               // group so that its counters hold gradient traffic only
    Tokenizer tok;
    ModelConfig mc;
    Ckpt *ck;                  // the checkpoint resumed from (NULL: none); the header names it
    Weights init;              // --init-from's weights (their files stay open until trainer_close; none: zeroed)
    Loader *ld, *val;
    Stage st;
    Dp *dp;
    Pipe *pipe;                // the pipeline schedule and the neighbours (one stage: the plain loop)
    int last;                  // this rank's stage holds the loss
    int V;                     // chunks per stage (virtual stages; 1: not interleaved)
    int *begin;                // the layers of virtual stage j: [begin[j], begin[j + 1]) (pipe_split_layers)
    AdamW opt;
    LossScaler sc;             // fp16's loss scale
    int fp16;
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
};

double train_flops_per_token(const ModelConfig *c, int T) {
    // an untied token embedding is only looked up: its rows cost no FLOPs
    // (a tied one is the head's GEMM too, and counts)
    double lookup = arch_of(c)->tied_head ? 0.0 : (double)c->vocab * c->d_model;
    return 6.0 * ((double)config_param_count(c, 0) - lookup) + 12.0 * c->n_layer * (double)T * c->d_model;
}

int train_evaluate(Stage *st, Pipe *p, Loader *val, int64_t max_rounds, double *sum, int64_t *ntok, Err *err) {
    int B = st->B, T = st->T, rc = 0;
    int *in = calloc((size_t)B * T, sizeof *in), *tg = calloc((size_t)B * T, sizeof *tg);
    CHECKF(in && tg, "out of memory");
    double s = 0;
    int64_t n = 0;
    loader_rewind(val);
    for (int64_t b = 0; (max_rounds <= 0 || b < max_rounds) && loader_state(val).pos < loader_samples(val); b++) {
        int got = loader_next(val, in, tg);
        // a rank past the end still runs the round's forward (on one row of
        // what its buffer holds, the result unused): its data-parallel
        // peers' passes may gather parameters from it (ZeRO-3)
        int rows = got > 0 ? got : 1;
        double part = 0;
        if (p) rc = pipe_forward(p, in, tg, rows, T, &part, err);
        else part = stage_forward(st, 0, in, tg, rows, T, 0.0f);
        if (rc) break;
        if (got == 0) continue;
        s += part;
        n += (int64_t)got * T;
    }
    free(in);
    free(tg);
    *sum = s;
    *ntok = n;
    return rc;
}

// Bytes c has sent over all operations and (seconds non-NULL) the time
// spent in them; 0 without c.
static uint64_t comm_totals(Comm *c, double *seconds) {
    uint64_t n = 0;
    double s = 0;
    if (c) {
        const CommStats *cs = comm_stats(c);
        for (int o = 0; o < OP_COUNT; o++) {
            n += cs->bytes_sent[o];
            s += cs->seconds[o];
        }
    }
    if (seconds) *seconds = s;
    return n;
}
static uint64_t bytes_sent(Comm *c) { return comm_totals(c, NULL); }

// Sums n doubles over every rank (nothing for one process).
static int sum_all(Trainer *t, double *v, int n, Err *err) {
    if (!t->stats) return 0;
    double out[4];
    CHECK(n <= 4);
    if (comm_allreduce(t->stats, v, out, (size_t)n, DT_F64, RED_SUM, err)) return -1;
    memcpy(v, out, (size_t)n * sizeof *v);
    return 0;
}

// Agrees on a status across the ranks: -1 if any rank failed (a rank that
// did not gets err "another rank failed <what>"); a failed reduction counts
// as a failure.
static int agree(Trainer *t, int rc, const char *what, Err *err) {
    if (!t->stats) return rc;
    int32_t mine = rc ? 1 : 0, any = 0;
    Err e;
    if (comm_allreduce(t->stats, &mine, &any, 1, DT_I32, RED_MAX, &e)) {
        if (!rc && err) *err = e;
        return -1;
    }
    if (any && !rc && err) err_set(err, ERR_RUN, "another rank failed %s", what);
    return any ? -1 : 0;
}

// ---- one step ----

// Whether a gradient this rank holds after the reduction is inf or NaN (1.0
// or 0.0, to be summed over the ranks): a product with zero is NaN exactly
// for those.
static double grads_overflow(Trainer *t) {
    float z = 0.0f;
    for (int k = 0; k < t->st.table.nseg; k++) {
        size_t n;
        const float *gr = dp_owned_grads(t->dp, k, &n);
        long nn = (long)n;
#pragma omp parallel for reduction(+ : z) schedule(static)
        for (long i = 0; i < nn; i++) z += gr[i] * 0.0f;
    }
    return z != z ? 1.0 : 0.0;
}

// The test hook of an overflow: an inf in the first gradient this rank owns.
static void poison_grads(Trainer *t) {
    for (int k = 0; k < t->st.table.nseg; k++) {
        size_t n;
        float *gr = dp_owned_grads(t->dp, k, &n);
        if (n) {
            gr[0] = INFINITY;
            return;
        }
    }
}

// Adds the step's profile to the sums, the process's first step left out
// (its first touch of every buffer is not the steady state) unless it is
// the only one.
static void profile_add(Trainer *t, double dt) {
    if (t->done == t->first_step && t->tc->steps - t->first_step > 1) return;
    prof_merge(t->prof_sum, t->prof);
    t->prof_steps++;
    t->prof_secs += dt;
}

int trainer_step(Trainer *t, StepMetrics *m, Err *err) {
    const TrainConfig *tc = t->tc;
    Stage *st = &t->st;
    int B = tc->batch, T = tc->seq, K = tc->accum, step = t->done;
    double t0 = timer_now(), tp_s0, tp_s1;
    uint64_t tp_b0 = comm_totals(t->mesh->tpg, &tp_s0);

    double pp_w0 = pipe_waited(t->pipe);
    uint64_t pp_b0 = pipe_bytes_sent(t->pipe);

    // data → micro-batches through the pipeline schedule (one stage: one
    // after another), gradients accumulating; every stage reads the same
    // micro-batches, the first uses the tokens, the last the targets
    size_t bt = (size_t)B * T;
    prof_attach(t->prof);   // (cleared) only the steps are profiled, not evaluations or checkpoints
    double p0 = prof_begin();
    for (int k = 0; k < K; k++) loader_next(t->ld, t->inp + k * bt, t->tgt + k * bt);
    prof_end(p0, PROF_LOADER, 0, 0);
    p0 = prof_begin();
    stage_grads_begin(st);
    prof_end(p0, PROF_GRADS, 0, st->grads ? st->table.total * sizeof(float) : 0);
    // d(mean loss over the global batch)/d(loss sum), times fp16's loss scale
    double scale = t->fp16 ? t->sc.scale : 1.0;
    float dscale = (float)(scale / t->tokens_per_step);
    double loss_sum = 0;
    if (pipe_step(t->pipe, t->dp, t->inp, t->tgt, B, T, dscale, &loss_sum, err)) return -1;
    // gradient sync: the owned gradients are final; then the tied
    // embedding's, summed between the first and the last stage
    if (dp_finish(t->dp, err) || stage_tp_status(st, err)) return -1;
    if (pipe_tied_sum(t->pipe, t->dp, err)) return -1;
    uint64_t grad_sent = bytes_sent(t->mesh->dpg) - t->sent_mark;
    t->sent_mark += grad_sent;

    if (tc->overflow_step == step + 1 && tc->overflow_rank == t->mesh->rank) poison_grads(t);

    // the global loss and gradient norm, every gradient counted once (the
    // last stage's TP ranks computed the same loss: the first one counts
    // it), and under fp16 the ranks whose gradients overflowed
    p0 = prof_begin();
    double g[3] = {t->mesh->tp_rank == 0 && t->last ? loss_sum : 0.0, dp_grad_sumsq(t->dp),
                   t->fp16 ? grads_overflow(t) : 0.0};
    prof_end(p0, PROF_GRADS, 0, 0);
    if (sum_all(t, g, 3, err)) return -1;
    double loss = g[0] / t->tokens_per_step, norm = sqrt(g[1]) / scale;

    // fp16: an overflow anywhere skips the step everywhere and moves the scale
    int skipped = t->fp16 && g[2] > 0;
    if (t->fp16 && scaler_update(&t->sc, skipped, step + 1, err)) return -1;

    // clip (on the unscaled norm), unscale, and update the owned pieces; the
    // parameter sync starts inside (ZeRO ≥ 1)
    float clip = (float)tc->clip;
    float gscale = (float)(((clip > 0 && norm > clip) ? clip / norm : 1.0) / scale);
    float lr = lr_at(&tc->lr, step);
    if (skipped ? dp_skip(t->dp, err) : dp_update(t->dp, &t->opt, lr, &tc->adamw, gscale, err)) return -1;

    double dt = timer_now() - t0;
    t->t_steps += dt;
    prof_attach(NULL);
    if (t->prof) profile_add(t, dt);
    double pp_w = pipe_waited(t->pipe) - pp_w0;
    uint64_t pp_b = pipe_bytes_sent(t->pipe) - pp_b0;
    t->pp_wait += pp_w;
    t->pp_sent += pp_b;
    uint64_t tp_b1 = comm_totals(t->mesh->tpg, &tp_s1);
    t->done = step + 1;
    double tps = t->tokens_per_step / dt;
    *m = (StepMetrics){.step = step + 1, .steps = tc->steps, .loss = loss, .lr = lr, .grad_norm = norm,
                       .ms = dt * 1e3, .tokens_per_s = tps,
                       .mfu = tps * t->flops_tok / (t->peak * 1e9 * t->D * t->mesh->tp * t->mesh->pp),
                       .grad_comm_bytes = grad_sent, .tp_comm_bytes = tp_b1 - tp_b0, .tp_comm_ms = (tp_s1 - tp_s0) * 1e3,
                       .pp_comm_bytes = pp_b, .pp_wait_ms = pp_w * 1e3, .loss_scale = scale, .scaler = t->fp16,
                       .skipped = skipped, .prof = t->prof};
    if (skipped) return 0;
    if (!isfinite(loss)) return err_set(err, ERR_RUN, "loss became %g at step %d (try a lower --lr)", loss, step + 1);
    if (!isfinite(norm))
        return err_set(err, ERR_RUN, "the gradient norm became %g at step %d (try a lower --lr, or --clip)", norm, step + 1);
    return 0;
}

int trainer_steps_done(const Trainer *t) { return t->done; }

// ---- setting up ----

// A --model given on the command line is the model of the checkpoint or
// file the run starts from (flag names it).
static int same_model(const char *flag, const char *src, const TrainConfig *tc, const ModelConfig *mc, Err *err) {
    const ModelConfig *g = &tc->model;
    if (!tc->model_given || (g->arch == mc->arch && g->n_layer == mc->n_layer && g->n_head == mc->n_head &&
                             config_kv_heads(g) == config_kv_heads(mc) && g->d_model == mc->d_model &&
                             g->d_ff == mc->d_ff && g->max_seq == mc->max_seq))
        return 0;
    return err_set(err, ERR_USAGE, "--model %s: %s %s holds another model (%s, %d layers, %d heads, d_model %d, d_ff %d, "
                   "max_seq %d); leave --model out to %s it", g->name, flag, src, config_arch_name(mc->arch), mc->n_layer,
                   mc->n_head, mc->d_model, mc->d_ff, mc->max_seq, flag[2] == 'r' ? "continue" : "start from");
}

// The model's config and, on resume, the checkpoint to continue from (on
// --init-from, the weights to start from).
static int choose_model(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    ModelConfig *mc = &t->mc;
    *mc = tc->model;
    config_set_vocab(mc, t->tok.vocab);
    if (tc->resume) {
        if (ckpt_open(&t->ck, tc->resume, err)) { err_prefix(err, "--resume"); return -1; }
        if (ckpt_config(t->ck, mc, err) || same_model("--resume", ckpt_dir(t->ck), tc, mc, err)) return -1;
        const Json *tn = json_get(json_get(ckpt_meta(t->ck), "train"), "tokenizer");
        if (tn && tn->type == JSON_STR && strcmp(tn->text, t->tok.name))
            return err_set(err, ERR_USAGE, "--resume %s: the run used --tokenizer %s, not %s", ckpt_dir(t->ck), tn->text,
                           t->tok.name);
    } else if (tc->init_from) {   // a GPT-2 file states no head count: the preset's when its width is the file's
        if (weights_open(&t->init, tc->init_from, &tc->model, err)) { err_prefix(err, "--init-from"); return -1; }
        *mc = t->init.mc;
        if (same_model("--init-from", tc->init_from, tc, mc, err)) return -1;
    }
    if (mc->vocab != t->tok.vocab)
        return err_set(err, ERR_USAGE, "the model's vocabulary (%d) does not match --tokenizer %s (%d)", mc->vocab,
                       t->tok.name, t->tok.vocab);
    config_pad_vocab(mc, mc->vocab, t->mesh->tp);   // Megatron's padding: every TP rank an equal slice
    if (config_validate(mc, err) || stage_check_split(mc, t->mesh->tp, tc->sp, tc->seq, err)) return -1;
    if (tc->seq > mc->max_seq)
        return err_set(err, ERR_USAGE, "--seq %d is above the model's max_seq %d", tc->seq, mc->max_seq);
    return 0;
}

static int open_data(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    LoaderOptions lo = {.T = tc->seq, .B = tc->batch, .rank = t->rank, .ranks = t->D, .seed = tc->seed,
                        .split = SPLIT_TRAIN, .prefetch = 1};
    if (loader_open(&t->ld, tc->data, &t->tok, &lo, err)) { err_prefix(err, "--data"); return -1; }
    lo.split = SPLIT_VAL;
    lo.prefetch = 0;
    if (tc->val_data) {
        if (loader_open(&t->val, tc->val_data, &t->tok, &lo, err)) { err_prefix(err, "--val-data"); return -1; }
        return 0;
    }
    struct stat sb;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/val_000000.bin", tc->data);
    if (stat(tc->data, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(probe, &sb) == 0 &&
        loader_open(&t->val, tc->data, &t->tok, &lo, err)) {
        err_prefix(err, "--data (validation shards)");
        return -1;
    }
    return 0;
}

// Where the starting values of a segment come from.
typedef struct {
    const ParamTable *t;
    Ckpt *ck;
    const char *section;   // of the checkpoint ("": the parameters)
    const float *full;     // whole parameters to cut from, or NULL
    uint64_t seed;
    uint32_t crc;          // CRC-32C of the segments so far (of the whole flat buffer at the end)
    Err *err;
} Fill;

static int fill_segment(void *ctx, int k, float *buf) {
    Fill *f = ctx;
    const ParamSeg *g = &f->t->seg[k];
    if (f->ck) {
        if (ckpt_load_range(f->ck, f->t, f->section, g->lo, g->hi, buf, f->err)) return -1;
    } else if (f->full) {
        if (buf != f->full + g->lo) memcpy(buf, f->full + g->lo, (g->hi - g->lo) * sizeof(float));
    } else {
        ptable_init_seg(f->t, k, buf, f->seed);
    }
    f->crc = crc32c(f->crc, buf, (g->hi - g->lo) * sizeof(float));
    return 0;
}

// The starting state — parameters from the checkpoint, the --init-from
// file or the seed, and on resume the AdamW moments, step count and the
// loader's place — segment by segment, each rank keeping what it owns.
// *crc gets the CRC-32C of the whole flat parameter buffer, for the ranks
// to compare.
static int init_state(Trainer *t, uint32_t *crc, Err *err) {
    const TrainConfig *tc = t->tc;
    const ParamTable *tb = &t->st.table;
    Ckpt *ck = t->ck;
    if (ck && !ckpt_has_section(ck, adamw_sections[0]))
        return err_set(err, ERR_USAGE, "%s: holds no optimizer state (an imported model? use --init-from)", ckpt_dir(ck));
    Fill fl = {.t = tb, .ck = ck, .seed = tc->seed, .section = "", .err = err};
    float *whole = NULL;
    int rc = 0;
    if (tc->init_from) {   // the file is read whole once, into the parameters or (ZeRO-3) a scratch buffer
        whole = t->st.params ? t->st.params : mem_alloc(MEM_WORKSPACE, tb->total * sizeof(float));
        rc = !whole ? err_set(err, ERR_RUN, "out of memory reading --init-from")
                    : weights_load(&t->init, &t->mc, tb, whole, err);
        if (rc) err_prefix(err, tc->init_from);
        fl.full = whole;
    }
    if (!rc) rc = dp_fill_params(t->dp, fill_segment, &fl);
    if (whole != t->st.params) mem_free(whole);
    if (rc) return -1;
    *crc = fl.crc;
    if (!ck) return 0;
    fl.full = NULL;
    fl.section = adamw_sections[0];
    if (dp_fill_shard(t->dp, t->opt.m, fill_segment, &fl)) return -1;
    fl.section = adamw_sections[1];
    if (dp_fill_shard(t->dp, t->opt.v, fill_segment, &fl)) return -1;
    const Json *meta = ckpt_meta(ck), *ls = json_get(json_get(meta, "train"), "loader");
    int64_t e = 0, p = 0;
    if (adamw_state_read(&t->opt, meta, ckpt_dir(ck), err)) return -1;
    const Json *sj = json_get(json_get(meta, "train"), "loss_scaler");   // a run of another precision has none
    char where[4200];
    snprintf(where, sizeof where, "%s/meta.json", ckpt_dir(ck));
    double flag_scale = t->sc.scale;
    if (t->fp16 && sj && scaler_state_read(&t->sc, sj, where, err)) return -1;
    if (t->fp16 && sj && tc->loss_scale_given) t->flag_scale = flag_scale;
    if (json_int64(json_get(ls, "epoch"), &e) || json_int64(json_get(ls, "pos"), &p) || e < 0 || p < 0 ||
        e > INT32_MAX || p > loader_samples(t->ld))
        return err_set(err, ERR_USAGE, "%s/meta.json: field 'train.loader' is missing or out of range (epoch %lld, position "
                       "%lld of %lld samples)", ckpt_dir(ck), (long long)e, (long long)p, (long long)loader_samples(t->ld));
    loader_set_state(t->ld, (LoaderState){e, p % loader_samples(t->ld)});
    t->done = (int)ckpt_step(ck);
    return 0;
}

// Parameters start identical by construction (init by global index, or the
// same file); every DP rank verifies it before the first step.
static int check_same_start(Trainer *t, uint32_t crc, Err *err) {
    Comm *c = t->mesh->dpg;
    if (!c) return 0;
    int32_t mine = (int32_t)crc, *all = calloc((size_t)t->D, 4);
    if (!all || comm_allgather(c, &mine, all, 1, DT_I32, err)) { free(all); return -1; }
    int rc = 0;
    for (int r = 1; r < t->D && !rc; r++)
        if (all[r] != all[0])
            rc = err_set(err, ERR_RUN, "data-parallel ranks 0 and %d start from different parameters (checksums %08x, %08x)",
                         r, (unsigned)all[0], (unsigned)all[r]);
    free(all);
    return rc;
}

// The pipeline and every rank's place in the mesh: its stage's layers (its
// chunks', interleaved) and its tensor-parallel slice.
static void print_pipeline(Trainer *t) {
    const Mesh *m = t->mesh;
    const ModelConfig *mc = &t->mc;
    int P = m->pp, V = t->V, M = t->tc->accum, n = m->dp * m->tp * m->pp;
    char sched[128];
    int cl = mc->n_layer / (P * V);
    if (V > 1) snprintf(sched, sizeof sched, "interleaved 1f1b schedule (%d chunks of %d layer%s per stage)", V, cl,
                        cl == 1 ? "" : "s");
    else snprintf(sched, sizeof sched, "%s schedule", pipe_schedule_name(t->tc->schedule));
    printf("pipeline:  %d stages (%s backend), %s, %d micro-batches per step; activations of %d micro-batch%s held at "
           "once on this rank (stage 0; the memory line is its)\n", P, comm_backend(m->ppg), sched, M, t->st.slots,
           V > 1 ? " chunks" : "es");
    if (n > 16) {
        printf("ranks:     %d (rank = pp_rank·%d + dp_rank·%d + tp_rank)\n", n, m->dp * m->tp, m->tp);
        return;
    }
    for (int r = 0; r < n; r++) {
        int d, tr, pr;
        mesh_coords(r, m->dp, m->tp, m->pp, &d, &tr, &pr);
        char tpd[96] = "", layers[160] = "";
        if (m->tp > 1) {
            int h = mc->n_head / m->tp, v = mc->vocab_padded / m->tp;
            snprintf(tpd, sizeof tpd, ", tp %d/%d (heads %d–%d, vocabulary rows %d–%d)", tr, m->tp, tr * h, tr * h + h - 1,
                     tr * v, tr * v + v - 1);
        }
        for (int v = 0, k = 0; v < V && k < (int)sizeof layers; v++) {   // chunk v is virtual stage v·P + pr
            int j = v * P + pr, b = t->begin[j], e = t->begin[j + 1] - 1;
            k += b == e ? snprintf(layers + k, sizeof layers - (size_t)k, "%s%d", v ? ", " : "", b)
                        : snprintf(layers + k, sizeof layers - (size_t)k, "%s%d–%d", v ? ", " : "", b, e);
        }
        printf("%s rank %d: stage %d, layer%s %s%s%s%s, dp %d/%d\n", r ? "          " : "ranks:    ", r, pr,
               strchr(layers, ',') || strstr(layers, "–") ? "s" : "", layers,
               pr == 0 ? " + embeddings" : "", pr == P - 1 ? " + final norm, head, loss" : "", tpd, d, m->dp);
    }
}

// Gathers every rank's hostname and describes, when the ranks span more
// than one host, where they are and which kinds of group stay inside a
// host (shared memory) or cross hosts (the network): the planner's
// intra/inter-node split, as it happened. Every rank calls it.
static int find_hosts(Trainer *t, Err *err) {
    enum { NAME = 64 };
    const Mesh *m = t->mesh;
    int n = m->dp * m->tp * m->pp;
    char mine[NAME] = "";
    gethostname(mine, NAME - 1);
    char *all = calloc((size_t)n, NAME);
    int *host = calloc((size_t)n, sizeof *host);
    if (!all || !host) { free(all); free(host); return err_set(err, ERR_RUN, "out of memory"); }
    int rc = comm_allgather(t->stats, mine, all, NAME, DT_U8, err), nh = 0;
    for (int r = 0; !rc && r < n; r++) {   // host ids in order of first rank
        int h = 0;
        while (h < r && strncmp(all + (size_t)h * NAME, all + (size_t)r * NAME, NAME)) h++;
        host[r] = h < r ? host[h] : nh++;
    }
    t->hosts[0] = 0;
    if (!rc && nh > 1) {
        size_t len = 0, cap = sizeof t->hosts;
        len += (size_t)snprintf(t->hosts + len, cap - len, "%d (", nh);
        for (int h = 0; h < nh && len < cap; h++) {
            int first = 1;
            for (int r = 0; r < n && len < cap; r++) {
                if (host[r] != h) continue;
                int end = r;
                while (end + 1 < n && host[end + 1] == h) end++;
                if (first) len += (size_t)snprintf(t->hosts + len, cap - len, "%s%s: ranks ", h ? ", " : "", all + (size_t)r * NAME);
                len += (size_t)snprintf(t->hosts + len, cap - len, first ? (end > r ? "%d-%d" : "%d") : (end > r ? ",%d-%d" : ",%d"), r, end);
                first = 0;
                r = end;
            }
        }
        // each kind of group: inside one host when all its groups are
        static const char *kind[3] = {"data-parallel", "tensor-parallel", "pipeline"};
        int inside[3] = {1, 1, 1};
        for (int r = 0; r < n; r++)
            for (int q = 0; q < n; q++) {
                int d1, t1, p1, d2, t2, p2;
                mesh_coords(r, m->dp, m->tp, m->pp, &d1, &t1, &p1);
                mesh_coords(q, m->dp, m->tp, m->pp, &d2, &t2, &p2);
                if (host[r] == host[q]) continue;
                if (t1 == t2 && p1 == p2) inside[0] = 0;   // the same data-parallel group
                if (d1 == d2 && p1 == p2) inside[1] = 0;
                if (d1 == d2 && t1 == t2) inside[2] = 0;
            }
        int sizes[3] = {m->dp, m->tp, m->pp};
        char in[96] = "", out[96] = "";
        for (int k = 0; k < 3; k++) {
            if (sizes[k] == 1) continue;
            char *d = inside[k] ? in : out;
            size_t dl = strlen(d);
            snprintf(d + dl, sizeof in - dl, "%s%s", dl ? ", " : "", kind[k]);
        }
        if (len < cap) len += (size_t)snprintf(t->hosts + len, cap - len, ")");
        if (in[0] && len < cap) len += (size_t)snprintf(t->hosts + len, cap - len, "; inside one host: %s groups", in);
        if (out[0] && len < cap) snprintf(t->hosts + len, cap - len, "; across hosts: %s groups", out);
    }
    free(all);
    free(host);
    return rc;
}

static void print_header(Trainer *t) {
    const TrainConfig *tc = t->tc;
    const ModelConfig *mc = &t->mc;
    int64_t np = config_param_count(mc, 0);
    printf("model:     %s — %d layers, %d heads, d_model %d, d_ff %d, max_seq %d, vocab %d (padded %d)\n", mc->name,
           mc->n_layer, mc->n_head, mc->d_model, mc->d_ff, mc->max_seq, mc->vocab, mc->vocab_padded);
    if (t->mesh->tp > 1 || t->mesh->pp > 1)
        printf("params:    %.2fM (%lld; %zu on this rank's %s with vocabulary padding)\n", np / 1e6, (long long)np,
               t->st.table.total, t->mesh->pp > 1 ? "stage" : "tensor-parallel slice");
    else
        printf("params:    %.2fM (%lld; %zu with vocabulary padding)\n", np / 1e6, (long long)np, t->st.table.total);
    printf("data:      %s — %d file%s, %lld tokens (%s tokenizer), %lld sequences of %d+1 per epoch\n", tc->data,
           loader_sources(t->ld), loader_sources(t->ld) == 1 ? "" : "s", (long long)loader_tokens(t->ld), tc->tokenizer,
           (long long)loader_samples(t->ld), tc->seq);
    if (t->val)
        printf("val:       %lld tokens, %lld sequences; evaluated %s%s, %s\n", (long long)loader_tokens(t->val),
               (long long)loader_samples(t->val), tc->eval_every > 0 ? "every --eval-every steps and " : "",
               "at the end", tc->eval_batches ? "first --eval-batches batches" : "all of it");
    printf("batch:     %d × %d tokens × %d %s × %d ranks = %.0f tokens per step, %d steps\n", tc->batch, tc->seq,
           tc->accum, t->mesh->pp > 1 ? "micro-batches" : "accumulation", t->D, t->tokens_per_step, tc->steps);
    char line[1024];
    dp_describe(t->dp, line, sizeof line);
    if (line[0]) printf("parallel:  %s\n", line);
    if (t->mesh->tp > 1)
        printf("tensor:    %d-way tensor parallel (%s backend): heads, FFN columns and vocabulary rows split over the "
               "ranks (Megatron column/row layers, vocabulary-parallel embedding and loss)%s\n", t->mesh->tp,
               comm_backend(t->mesh->tpg), tc->sp ? "; sequence parallel: norms and residual stream split by rows" : "");
    if (t->mesh->pp > 1) print_pipeline(t);
    printf("optimizer: AdamW lr %g → %g (%s, warmup %d), betas %g/%g, eps %g, weight decay %g, clip %g\n",
           (float)tc->lr.lr, (float)(tc->lr.shape == LR_COSINE ? tc->lr.min_lr : tc->lr.lr),
           tc->lr.shape == LR_COSINE ? "cosine" : "constant", tc->lr.warmup, (float)tc->adamw.beta1,
           (float)tc->adamw.beta2, (float)tc->adamw.eps, (float)tc->adamw.weight_decay, (float)tc->clip);
    if (t->hosts[0]) printf("hosts:     %s\n", t->hosts);
    const Peaks *pk = &t->peaks;
    printf("cpu:       %s; peaks of %d thread%s (register-only probes): fp32 FMA %.0f (256-bit)", peak_isa(pk),
           pk->threads, pk->threads == 1 ? "" : "s", pk->fp32_256);
    if (pk->fp32_512 > 0) printf(", %.0f (512-bit)", pk->fp32_512);
    if (pk->bf16 > 0) printf(", bf16 dot %.0f", pk->bf16);
    printf(" GFLOP/s\n");
    printf("compute:   %d thread%s, %s%s; %.3g GFLOP per token; MFU against %.1f GFLOP/s (%s)\n", kernels_threads(),
           kernels_threads() == 1 ? "" : "s", kernels_blas_info(),
           tc->precision == PREC_BF16 && gemm_bf16_own() ? "; bf16 products on the bf16 units" : "",
           t->flops_tok * 1e-9, t->peak, t->peak_src);
    if (tc->precision != PREC_FP32)
        printf("precision: %s — the passes read a 16-bit copy of the fp32 weights (AdamW updates the fp32 masters) and "
               "store activations in 16 bits (norm statistics, softmax log-sum-exp and the residual stream in fp32); "
               "%s; gradients fp32\n", prec_name(tc->precision),
               tc->precision == PREC_BF16 && gemm_bf16_own()
                   ? "the linear layers and attention multiply bf16 pairs on the bf16 units (vdpbf16ps) into fp32 "
                     "sums, the rest computes in fp32"
                   : tc->precision == PREC_FP16 ? "every operation computes in fp32 (no fp16 arithmetic unit here)"
                                                : "every operation computes in fp32");
    if (t->fp16)
        printf("scaler:    dynamic loss scale from %g: ×2 after %d steps without overflow, ×0.5 on overflow (hysteresis "
               "%d: the overflows before the first halving), the step skipped on every rank; the run stops below %g\n",
               t->sc.scale, tc->scaler.window, tc->scaler.hysteresis, tc->scaler.min);
    if (t->flag_scale > 0)
        printf("scaler:    the checkpoint's loss scale %g is used, not --loss-scale %g: a resumed run continues its scale "
               "(--loss-scale sets a fresh run's)\n", t->sc.scale, t->flag_scale);
    if (tc->recompute == STAGE_RECOMPUTE_FULL)
        printf("recompute: full — each block keeps only its output (the next block's input) and runs forward again "
               "before its backward\n");
    if (tc->recompute == STAGE_RECOMPUTE_SELECTIVE)
        printf("recompute: selective — the attention core's output is recomputed from the saved q/k/v before each "
               "block's backward\n");
    report_memory(t->rep);
    if (t->ck) printf("resumed:   %s at step %d\n", ckpt_dir(t->ck), t->done);
    if (tc->init_from) printf("init:      %s\n", tc->init_from);
    fflush(stdout);
}

// Refuses, before allocating anything, a run whose ranks on this machine
// would need more than its memory: parameters, gradients, AdamW moments
// (each as ZeRO shards them), the 16-bit copy and the activations.
static int check_room(const Trainer *t, const ModelSlice *sl, int slots, unsigned flags, Err *err) {
    const TrainConfig *tc = t->tc;
    ParamTable pt;
    if (ptable_build(&pt, &t->mc, sl, err)) return -1;
    double n = (double)pt.total, d = t->D;
    ptable_free(&pt);
    double bytes = 4 * n / (tc->zero >= 3 ? d : 1) + 4 * n / (tc->zero >= 2 ? d : 1) + 8 * n / (tc->zero >= 1 ? d : 1) +
                   (tc->precision != PREC_FP32 && tc->zero < 3 ? 2 * n : 0) +
                   (double)stage_act_bytes(&t->mc, sl, tc->batch, tc->seq, slots, flags);
    int local = t->mesh->world && !strcmp(comm_backend(t->mesh->world), "local") ? comm_size(t->mesh->world) : 1;
    double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have > 0 && bytes * local > have)
        return err_set(err, ERR_USAGE, "%s needs %.1f GiB per rank (parameters, gradients, AdamW moments, activations)%s; "
                       "this machine has %.1f GiB (tessera plan --model %s shows layouts that fit)", t->mc.name,
                       bytes / 1073741824.0, local > 1 ? " on each of the ranks here" : "", have / 1073741824.0,
                       t->mc.name);
    return 0;
}

int trainer_open(Trainer **out, const TrainConfig *tc, Mesh *m, Err *err) {
    *out = NULL;
    if (tc->zero && !m->dpg)
        return err_set(err, ERR_USAGE, "--zero %d needs a communicator (tessera train starts one)", tc->zero);
    Trainer *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, ERR_RUN, "out of memory");
    t->tc = tc;
    t->mesh = m;
    t->rank = m->dpg ? comm_rank(m->dpg) : 0;
    t->D = m->dpg ? comm_size(m->dpg) : 1;
    t->first = m->rank == 0;
    t->lock = -1;
    if (tokenizer_open(&t->tok, tc->tokenizer, err)) { free(t); return -1; }
    uint32_t crc = 0;
    if (choose_model(t, err)) goto fail;
    if (tc->threads > 0) kernels_set_threads(tc->threads);
    if (open_data(t, err)) goto fail;
    ModelSlice slice = slice_whole(&t->mc);
    int V = t->V = tc->virtual_stages > 1 ? tc->virtual_stages : 1;
    if (!(t->begin = calloc((size_t)m->pp * V + 1, sizeof *t->begin))) { err_set(err, ERR_RUN, "out of memory"); goto fail; }
    if (pipe_split_layers(t->mc.n_layer, m->pp, V, tc->pp_layers, t->begin, err)) goto fail;
    pipe_stage_slice(&slice, t->begin, m->pp, V, m->pp_rank);
    slice.tp_rank = m->tp_rank;
    slice.tp_size = m->tp;
    slice.sp = tc->sp;
    slice.pad_multiple = dp_pad_multiple(tc->zero, t->D);   // ZeRO: every segment splits into D equal pieces
    t->last = slice_is_last(&slice, &t->mc);
    int slots = pipe_in_flight(tc->schedule, m->pp, m->pp_rank, tc->accum, V);   // the micro-batches in flight here
    unsigned prec = stage_prec_flag(tc->precision);
    t->fp16 = tc->precision == PREC_FP16;
    scaler_init(&t->sc, &tc->scaler);
    if (check_room(t, &slice, slots, dp_stage_flags(tc->zero) | tc->recompute | prec, err)) goto fail;
    if (stage_init(&t->st, &t->mc, &slice, tc->batch, tc->seq, slots, dp_stage_flags(tc->zero) | tc->recompute | prec,
                   err))
        goto fail;
    if (m->tpg && stage_set_tp(&t->st, m->tpg, err)) goto fail;
    if (dp_init(&t->dp, m->dpg, tc->zero, tc->bucket_mb, tc->reduce_bf16 ? DT_BF16 : DT_F32, &t->st, err)) goto fail;
    if (pipe_init(&t->pipe, m->ppg, tc->schedule, tc->accum, &t->st, err)) goto fail;
    if (pipe_holds_tied_copy(t->pipe)) dp_set_shared(t->dp, 0);   // the first stage counts the embeddings
    if (adamw_init(&t->opt, dp_shard_floats(t->dp), err)) goto fail;   // the moments of the owned pieces
    if (init_state(t, &crc, err) || check_same_start(t, crc, err)) goto fail;
    t->first_step = t->done;
    if (tc->profile && (!(t->prof = calloc(1, sizeof *t->prof)) || !(t->prof_sum = calloc(1, sizeof *t->prof_sum)))) {
        err_set(err, ERR_RUN, "out of memory");
        goto fail;
    }
    if (m->world && comm_split(m->world, 0, comm_rank(m->world), "stats", &t->stats, err)) goto fail;
    if (t->stats && find_hosts(t, err)) goto fail;
    // only rank 0 logs, draws the progress bar and holds the run directory's
    // lock: the others must not wait in the first step for a rank that could
    // not take them
    int rc = report_open(&t->rep, t->first ? tc->log_path : NULL, t->first && tc->progress, err);
    if (!rc && t->first && tc->ckpt_dir && (t->lock = ckpt_lock(tc->ckpt_dir, err)) < 0) rc = -1;
    if (agree(t, rc, "to start (see its error)", err)) goto fail;
    t->inp = malloc((size_t)tc->accum * tc->batch * tc->seq * sizeof *t->inp);
    t->tgt = malloc((size_t)tc->accum * tc->batch * tc->seq * sizeof *t->tgt);
    if (!t->inp || !t->tgt) { err_set(err, ERR_RUN, "out of memory"); goto fail; }
    t->tokens_per_step = (double)tc->batch * tc->seq * tc->accum * t->D;
    t->flops_tok = train_flops_per_token(&t->mc, tc->seq);
    peak_probe(&t->peaks, kernels_threads());
    t->peak = tc->peak_gflops;
    t->peak_src = "--peak-gflops";
    if (t->peak <= 0) {   // the peak of the arithmetic the run's products use
        t->peak = peak_for(&t->peaks, tc->precision);
        t->peak_src = peak_for_name(&t->peaks, tc->precision);
    }
    if (t->peak <= 0) { t->peak = kernels_sgemm_gflops(1024, 5); t->peak_src = "SGEMM 1024³: no FMA unit to probe"; }
    print_header(t);
    t->sent_mark = bytes_sent(m->dpg);
    *out = t;
    return 0;
fail:
    trainer_close(t);
    return -1;
}

void trainer_close(Trainer *t) {
    if (!t) return;
    report_close(t->rep);
    if (t->lock >= 0) close(t->lock);
    prof_attach(NULL);
    free(t->prof);
    free(t->prof_sum);
    free(t->inp);
    free(t->tgt);
    free(t->begin);
    pipe_free(t->pipe);   // first: it and dp wait for what is still in flight from the stage's buffers
    dp_free(t->dp);
    adamw_free(&t->opt);
    stage_free(&t->st);
    comm_free(t->stats);
    loader_free(t->ld);
    loader_free(t->val);
    ckpt_close(t->ck);
    weights_close(&t->init);
    tokenizer_close(&t->tok);
    free(t);
}

// ---- the run ----

static char *train_meta_json(const TrainConfig *tc, int step, LoaderState ls, const LossScaler *sc) {
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "steps_done"); jb_int(&b, step);
    jb_key(&b, "seed"); jb_int(&b, (int64_t)tc->seed);
    jb_key(&b, "tokenizer"); jb_str(&b, tc->tokenizer);
    if (tc->val_data) { jb_key(&b, "val_data"); jb_str(&b, tc->val_data); }
    jb_key(&b, "data"); jb_str(&b, tc->data);
    jb_key(&b, "batch"); jb_int(&b, tc->batch);
    jb_key(&b, "seq"); jb_int(&b, tc->seq);
    jb_key(&b, "grad_accum"); jb_int(&b, tc->accum);
    jb_key(&b, "precision"); jb_str(&b, prec_name(tc->precision));
    if (sc) {
        char *s = scaler_state_json(sc);
        jb_key(&b, "loss_scaler");
        jb_raw(&b, s);
        free(s);
    }
    jb_key(&b, "loader"); jb_obj_begin(&b);
    jb_key(&b, "epoch"); jb_int(&b, ls.epoch);
    jb_key(&b, "pos"); jb_int(&b, ls.pos);
    jb_obj_end(&b);
    jb_obj_end(&b);
    return b.s;
}

// Saves a checkpoint of the current step; every rank calls it. Each rank
// that owns distinct pieces (every rank under ZeRO, DP rank 0 otherwise)
// writes its parameters and moments — its stage's and TP slice's — into
// its own file, number (pp_rank·tp + tp_rank)·(files per DP group) + its
// DP file; the last stage leaves out its copy of the tied embeddings
// (the first stage's is the same). World rank 0 creates the step first and
// commits it once all have written. Any failure fails all.
static int save(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    double t0 = timer_now();
    int n = dp_npieces(t->dp), rc = 0;
    char *train = train_meta_json(tc, t->done, loader_state(t->ld), t->fp16 ? &t->sc : NULL);
    char *state = adamw_state_json(&t->opt);
    CkptPiece *pc = calloc((size_t)n + 1, sizeof *pc);
    if (!pc || !train || !state) rc = err_set(err, ERR_RUN, "out of memory");
    if (t->first && !rc) rc = ckpt_begin(tc->ckpt_dir, t->done, err);
    rc = agree(t, rc, "to write its part of the checkpoint", err);
    if (!rc && dp_writes_checkpoint(t->dp)) {
        size_t from = pipe_holds_tied_copy(t->pipe) ? t->st.table.seg[0].hi : 0;   // past the tied copy
        int np = 0;
        for (int k = 0; k < n; k++) {
            DpPiece p = dp_piece(t->dp, k);
            if (p.hi <= from) continue;
            size_t cut = p.lo < from ? from - p.lo : 0;
            pc[np++] = (CkptPiece){p.lo + cut, p.hi, {p.params + cut, t->opt.m + p.off + cut, t->opt.v + p.off + cut}};
        }
        const char *const sections[3] = {"", adamw_sections[0], adamw_sections[1]};   // parameters, moments
        // files per (stage, TP rank): its DP ranks' (ZeRO) or its first DP rank's
        int per = dp_checkpoint_files(t->dp);
        int file = (t->mesh->pp_rank * t->mesh->tp + t->mesh->tp_rank) * per + (per > 1 ? t->rank : 0);
        rc = ckpt_write_pieces(tc->ckpt_dir, t->done, file, &t->st.table, sections, 3, pc, np, err);
    }
    rc = agree(t, rc, "to write its part of the checkpoint", err);
    CkptMeta md = {.step = t->done, .cfg = &t->mc, .nfiles = dp_checkpoint_files(t->dp) * t->mesh->tp * t->mesh->pp,
                   .dp = t->D, .tp = t->mesh->tp, .pp = t->mesh->pp,
                   .zero = tc->zero, .state = state, .train = train};
    if (t->first && !rc) rc = ckpt_commit(tc->ckpt_dir, &md, tc->keep, err);
    rc = agree(t, rc, "to write its part of the checkpoint", err);
    if (rc && t->first) ckpt_abort(tc->ckpt_dir, t->done);
    free(pc);
    free(train);
    free(state);
    if (rc == 0) printf("checkpoint: %s/step_%08d (%.2f s)\n", tc->ckpt_dir, t->done, timer_now() - t0);
    return rc;
}

// Evaluates, prints and logs the validation loss; what ZeRO-3 gathers for
// it is not counted as the steps' traffic.
static int evaluate(Trainer *t, Err *err) {
    if (dp_sync_params(t->dp, err)) return -1;   // what the step sent is counted with it
    uint64_t b0 = bytes_sent(t->mesh->dpg);
    int64_t n;
    double t0 = timer_now(), sum;
    // --eval-batches steps' worth of sequences (batch × accumulation × DP
    // ranks each), every DP rank its part, as a step reads them: every
    // layout of the same step evaluates the same sequences
    int rc = train_evaluate(&t->st, t->pipe, t->val, (int64_t)t->tc->eval_batches * t->tc->accum, &sum, &n, err);
    if (rc || stage_tp_status(&t->st, err)) return -1;
    // the last stage scored each DP rank's tokens: one of its ranks counts
    // them, and every rank gets the sum
    int counts = t->last && t->mesh->tp_rank == 0;
    double v[2] = {counts ? sum : 0.0, counts ? (double)n : 0.0};
    if (sum_all(t, v, 2, err)) return -1;
    n = (int64_t)v[1];
    double loss = v[1] > 0 ? v[0] / v[1] : 0.0;
    report_eval(t->rep, t->done, loss, n, timer_now() - t0);
    t->sent_mark += bytes_sent(t->mesh->dpg) - b0;
    return 0;
}

static char *linear_name(void *ctx, int in, int out, char *buf, size_t n) { return stage_linear_name(ctx, in, out, buf, n); }

// --profile: the table of each pipeline stage's first rank (its TP and DP
// peers run the same shapes), gathered to world rank 0, which prints them.
static int print_profile(Trainer *t, Err *err) {
    enum { HEAD = 4, ROW = 8, SLOT = HEAD + ROW * PROF_MAX_ROWS };
    int P = t->mesh->pp;
    double *v = calloc((size_t)P * SLOT, sizeof *v), *sum = calloc((size_t)P * SLOT, sizeof *sum);
    if (!v || !sum) { free(v); free(sum); return err_set(err, ERR_RUN, "out of memory"); }
    if (t->mesh->dp_rank == 0 && t->mesh->tp_rank == 0) {
        double *o = v + (size_t)t->mesh->pp_rank * SLOT;
        const Profile *p = t->prof_sum;
        o[0] = p->n;
        o[1] = t->prof_steps;
        o[2] = t->prof_secs;
        o[3] = t->peak;
        for (int i = 0; i < p->n; i++) {
            const ProfRow *r = &p->row[i];
            double *x = o + HEAD + ROW * i;
            x[0] = r->kind; x[1] = r->m; x[2] = r->n; x[3] = r->k;
            x[4] = r->calls; x[5] = r->seconds; x[6] = r->flops; x[7] = r->bytes;
        }
    }
    int rc = t->stats ? comm_allreduce(t->stats, v, sum, (size_t)P * SLOT, DT_F64, RED_SUM, err) : 0;
    if (!rc && !t->stats) memcpy(sum, v, (size_t)P * SLOT * sizeof *v);
    for (int s = 0; !rc && t->first && s < P; s++) {
        const double *o = sum + (size_t)s * SLOT;
        Profile p = {.n = (int)o[0]};
        for (int i = 0; i < p.n; i++) {
            const double *x = o + HEAD + ROW * i;
            p.row[i] = (ProfRow){.kind = (ProfKind)x[0], .m = (int)x[1], .n = (int)x[2], .k = (int)x[3], .calls = x[4],
                                 .seconds = x[5], .flops = x[6], .bytes = x[7]};
        }
        char title[160];
        int w = s * t->mesh->dp * t->mesh->tp;   // the world rank of (pp s, dp 0, tp 0)
        if (P > 1)
            snprintf(title, sizeof title, "stage %d of %d (world rank %d, %d thread%s)", s, P, w, kernels_threads(),
                     kernels_threads() == 1 ? "" : "s");
        else
            snprintf(title, sizeof title, "rank 0 of %d (%d thread%s)", t->mesh->dp * t->mesh->tp, kernels_threads(),
                     kernels_threads() == 1 ? "" : "s");
        report_profile(t->rep, &p, (int)o[1], o[2], o[3], title, linear_name, &t->st);
    }
    free(v);
    free(sum);
    return rc;
}

int train_run(const TrainConfig *tc, Mesh *m, Err *err) {
    Trainer *t;
    if (trainer_open(&t, tc, m, err)) return -1;
    int start = t->done, rc = -1;
    double t_start = timer_now();
    if (start >= tc->steps) printf("nothing to train: the checkpoint is at step %d and --steps is %d\n", start, tc->steps);
    while (t->done < tc->steps) {
        StepMetrics sm;
        if (trainer_step(t, &sm, err)) goto done;
        int step = t->done, last = step == tc->steps;
        if (step % tc->log_every == 0 || last || step == 1 || sm.skipped) report_step(t->rep, &sm);
        if (t->val && tc->eval_every > 0 && step % tc->eval_every == 0 && !last && evaluate(t, err)) goto done;
        if (tc->exit_after > 0 && step == tc->exit_after && !last) {   // after the step's evaluation, as without it
            if (tc->ckpt_dir && save(t, err)) goto done;
            printf("stopped:   after step %d of %d (--exit-after); continue with --resume\n", step, tc->steps);
            rc = 0;
            goto done;
        }
        if (!last) report_progress(t->rep, step, tc->steps, timer_now() - t_start);
        if (tc->ckpt_dir && tc->ckpt_every > 0 && step % tc->ckpt_every == 0 && !last && save(t, err)) goto done;
    }
    double total = timer_now() - t_start;
    if (dp_sync_params(t->dp, err)) goto done;
    if (t->val && evaluate(t, err)) goto done;
    if (tc->ckpt_dir && start < tc->steps && save(t, err)) goto done;
    if (start < tc->steps)
        printf("done:      %d steps in %.1f s, %.0f tokens/s average\n", tc->steps - start, total,
               t->tokens_per_step * (tc->steps - start) / total);
    char line[1024];
    dp_summary(t->dp, tc->steps - start, line, sizeof line);
    if (line[0]) printf("comm:      %s\n", line);
    if (t->mesh->tp > 1 && start < tc->steps) {
        const CommStats *cs = comm_stats(t->mesh->tpg);
        double tps;
        uint64_t sent = comm_totals(t->mesh->tpg, &tps);
        printf("comm:      tensor-parallel collectives %.2f s in all (%.0f%% of the run, evaluations included); "
               "%.1f MB sent per rank, %llu calls\n", tps, total > 0 ? 100 * tps / total : 0.0,
               sent / 1e6, (unsigned long long)(cs->calls[OP_ALLREDUCE] +
               cs->calls[OP_ALLGATHER] + cs->calls[OP_REDUCE_SCATTER]));
    }
    if (m->pp > 1 && start < tc->steps) {
        // every rank's waits against every rank's step time: the mean bubble
        double v[4] = {t->pp_wait, t->t_steps, (double)t->pp_sent, 0};
        if (sum_all(t, v, 3, err)) goto done;
        double n = tc->steps - start;
        printf("pipeline:  bubble %.1f%% measured (time the ranks waited on pipeline sends and receives, mean over %d "
               "ranks) against %s = %.1f%% planned; %.2f MB sent between stages per step per rank\n",
               v[1] > 0 ? 100 * v[0] / v[1] : 0.0, m->dp * m->tp * m->pp, t->V > 1 ? "(P−1)/(V·M+P−1)" : "(P−1)/(M+P−1)",
               100 * pipe_bubble(m->pp, tc->accum, t->V), v[2] / 1e6 / n / (m->dp * m->tp * m->pp));
    }
    if (tc->profile && start < tc->steps && print_profile(t, err)) goto done;
    report_memory(t->rep);
    rc = 0;
done:
    trainer_close(t);
    return rc;
}
