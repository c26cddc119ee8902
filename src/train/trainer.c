#include "train/trainer_impl.h"

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
#include "kernels/matmul.h"
#include "kernels/peak.h"
#include "model/doc.h"
#include "parallel/dp.h"

uint64_t trainer_comm_totals(Comm *c, double *seconds) {
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

int trainer_sum_all(Trainer *t, double *v, int n, Err *err) {
    if (!t->stats) return 0;
    double out[4];
    CHECK(n <= 4);
    if (comm_allreduce(t->stats, v, out, (size_t)n, DT_F64, RED_SUM, err)) return -1;
    memcpy(v, out, (size_t)n * sizeof *v);
    return 0;
}

int trainer_agree(Trainer *t, int rc, const char *what, Err *err) {
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
// or 0.0, to be summed over the ranks): x − x is 0 but for those. (An
// integer OR, which the compiler vectorizes, where a float sum would run
// one addition at a time.)
static double grads_overflow(Trainer *t) {
    int bad = 0;
    for (int k = 0; k < t->st.table.nseg; k++) {
        size_t n;
        const float *gr = dp_owned_grads(t->dp, k, &n);
        long nn = (long)n;
#pragma omp parallel for reduction(| : bad) schedule(static)
        for (long i = 0; i < nn; i++) bad |= !(gr[i] - gr[i] == 0.0f);
    }
    return bad ? 1.0 : 0.0;
}

// The test hook of an overflow: an inf in the first gradient this rank owns.
static void poison_grads(Trainer *t) {
    stage_grads_touched(&t->st);
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
    t->prof_last = !(t->done == t->first_step && t->tc->steps - t->first_step > 1);
    if (!t->prof_last) return;
    prof_merge(t->prof_sum, t->prof);
    t->prof_steps++;
    t->prof_secs += dt;
}

// The step's sums over every rank: g[0] the loss, every gradient counted
// once (the last stage's TP ranks computed the same loss: the first one
// counts it; every stage's blocks' auxiliary losses counted by TP rank 0);
// g[1] the gradients' sum of squares; g[2] under fp16 the ranks whose
// gradients overflowed (seen in the norm's sum where it reads every owned
// gradient); g[3] with --doc-mask the attention pairs of the step's
// sequences (each DP rank's counted once), for MFU.
static int step_sums(Trainer *t, double loss_sum, double g[4], Err *err) {
    const TrainConfig *tc = t->tc;
    double p0 = prof_begin();
    double aux = stage_take_aux(&t->st);
    int counts = layout_counts_loss(t->lay, t->last);
    size_t nread = 0;
    double sq = dp_grad_sumsq(t->dp, &nread);
    g[0] = (counts ? loss_sum : 0.0) + (layout_counts_tp_replicated(t->lay) ? aux : 0.0);
    g[1] = sq;
    g[2] = !t->fp16 ? 0.0 : dp_grad_sumsq_covers(t->dp) ? (double)!isfinite(sq) : grads_overflow(t);
    g[3] = t->doc_sep >= 0 && counts ? doc_pairs(t->inp, tc->accum * tc->batch, tc->seq, t->doc_sep) : 0.0;
    prof_end(p0, PROF_GRADS, 0, (double)nread * sizeof(float));
    return trainer_sum_all(t, g, t->doc_sep >= 0 ? 4 : 3, err);
}

int trainer_step(Trainer *t, StepMetrics *m, Err *err) {
    const TrainConfig *tc = t->tc;
    Stage *st = &t->st;
    int B = tc->batch, T = tc->seq, K = tc->accum, step = t->done;
    double t0 = timer_now(), tp_s0, tp_s1;
    uint64_t tp_b0 = trainer_comm_totals(t->lay->tpg, &tp_s0);

    double pp_w0 = pipe_waited(t->pipe);
    uint64_t pp_b0 = pipe_bytes_sent(t->pipe);
    // the offload's I/O of the whole step (--offload params reads the
    // parameters' file in the passes too)
    const Offload *off = dp_offload(t->dp);
    uint64_t io_r0 = off ? offload_bytes_read(off) : 0, io_w0 = off ? offload_bytes_written(off) : 0;
    double io_s0 = off ? offload_waited(off) : 0;

    // data → micro-batches through the pipeline schedule (one stage: one
    // after another), gradients accumulating; every stage reads the same
    // micro-batches, the first uses the tokens, the last the targets
    size_t bt = (size_t)B * T;
    trace_step(step + 1);
    prof_attach(t->prof);   // (cleared) the steps are profiled, and the checkpoints after them (run.c), not evaluations
    double p0 = prof_begin();
    for (int k = 0; k < K; k++) loader_next(t->ld, t->inp + k * bt, t->tgt + k * bt);
    prof_end(p0, PROF_LOADER, 0, 0);
    p0 = prof_begin();
    size_t zeroed = stage_grads_begin(st);
    prof_end(p0, PROF_GRADS, 0, (double)zeroed);
    // d(mean loss over the global batch)/d(loss sum), times fp16's loss scale
    double scale = t->fp16 ? t->sc.scale : 1.0;
    float dscale = (float)(scale / t->tokens_per_step);
    double loss_sum = 0;
    if (pipe_step(t->pipe, t->dp, t->inp, t->tgt, B, T, dscale, &loss_sum, err)) return -1;
    // gradient sync: the owned gradients are final; then the tied
    // embedding's, summed between the first and the last stage
    int frc = dp_finish(t->dp, err);
    // a read of the parameters' file that failed is one rank's: all stop here
    if (off) frc = trainer_agree(t, frc, "its offload's I/O", err);
    if (frc || stage_tp_status(st, err)) return -1;
    if (pipe_tied_sum(t->pipe, t->dp, err)) return -1;
    uint64_t grad_sent = trainer_comm_totals(t->lay->dpg, NULL) - t->sent_mark;
    t->sent_mark += grad_sent;

    if (tc->overflow_step == step + 1 && tc->overflow_rank == t->lay->rank) poison_grads(t);

    double g[4];
    if (step_sums(t, loss_sum, g, err)) return -1;
    // the FLOPs per token of the attention really computed (model/doc), else the causal count
    double flops_tok = t->doc_sep < 0 ? t->flops_tok
                                      : arch_flops_token_pairs(&t->mc, T, g[3] * T / t->tokens_per_step);
    double loss = g[0] / t->tokens_per_step, norm = sqrt(g[1]) / scale;

    // fp16: an overflow anywhere skips the step everywhere and moves the scale
    int skipped = t->fp16 && g[2] > 0;
    if (t->fp16 && scaler_update(&t->sc, skipped, step + 1, err)) return -1;
    // the spike guard: every rank sees the same global loss and norm, so
    // all skip alike (the test hook's spikes seen once each, from their step)
    if (tc->spike_count && step + 1 >= tc->spike_step && t->spikes_injected < tc->spike_count) {
        loss *= 1000;
        t->spikes_injected++;
    }
    int spike = !skipped && spike_check(&t->spike, loss, norm);
    skipped |= spike;

    // clip (on the unscaled norm), unscale, and update the owned pieces; the
    // parameter sync starts inside (ZeRO ≥ 1)
    float clip = (float)tc->clip;
    float gscale = (float)(((clip > 0 && norm > clip) ? clip / norm : 1.0) / scale);
    float lr = lr_at(&tc->lr, step);
    int rc = skipped ? dp_skip(t->dp, err) : dp_update(t->dp, &t->opt, lr, &tc->adamw, gscale, err);
    // an I/O failure is one rank's: every rank stops at the same step
    if (off) rc = trainer_agree(t, rc, "its offload's I/O", err);
    if (rc) return -1;

    double dt = timer_now() - t0;
    t->t_steps += dt;
    trace_span(t0, t0 + dt, step + 1);
    trace_step(0);
    prof_attach(NULL);
    if (t->prof) profile_add(t, dt);
    double pp_w = pipe_waited(t->pipe) - pp_w0;
    uint64_t pp_b = pipe_bytes_sent(t->pipe) - pp_b0;
    t->pp_wait += pp_w;
    t->pp_sent += pp_b;
    uint64_t tp_b1 = trainer_comm_totals(t->lay->tpg, &tp_s1);
    t->done = step + 1;
    double tps = t->tokens_per_step / dt;
    *m = (StepMetrics){.step = step + 1, .steps = tc->steps, .loss = loss, .lr = lr, .grad_norm = norm,
                       .ms = dt * 1e3, .tokens_per_s = tps,
                       .mfu = tps * flops_tok / (t->peak * 1e9 * layout_devices(t->lay)),
                       .grad_comm_bytes = grad_sent, .tp_comm_bytes = tp_b1 - tp_b0, .tp_comm_ms = (tp_s1 - tp_s0) * 1e3,
                       .pp_comm_bytes = pp_b, .pp_wait_ms = pp_w * 1e3, .loss_scale = scale, .scaler = t->fp16,
                       .skipped = skipped, .spike = spike, .prof = t->prof, .offload = off != NULL,
                       .io_wait_ms = off ? (offload_waited(off) - io_s0) * 1e3 : 0,
                       .io_read_bytes = off ? offload_bytes_read(off) - io_r0 : 0,
                       .io_written_bytes = off ? offload_bytes_written(off) - io_w0 : 0};
    if (loader_is_mixture(t->ld)) {   // the tokens of the sequences each source gave so far
        m->tokens.n = loader_nsources(t->ld);
        for (int s = 0; s < m->tokens.n; s++) {
            LoaderSource ls = loader_source(t->ld, s);
            m->tokens.name[s] = ls.name;
            m->tokens.v[s] = (double)ls.served * T;
        }
    }
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
        const Json *dm = json_get(json_get(ckpt_meta(t->ck), "train"), "doc_mask");
        int masked = dm && dm->type == JSON_BOOL && dm->boolean;
        if (masked != !!tc->doc_mask)
            return err_set(err, ERR_USAGE, "--resume %s: the run trained %s --doc-mask; resume it %s", ckpt_dir(t->ck),
                           masked ? "with" : "without", masked ? "with it" : "without it");
    } else if (tc->init_from) {   // a GPT-2 file states no head count: the preset's when its width is the file's
        if (weights_open(&t->init, tc->init_from, &tc->model, err)) { err_prefix(err, "--init-from"); return -1; }
        *mc = t->init.mc;
        if (same_model("--init-from", tc->init_from, tc, mc, err)) return -1;
    }
    if (mc->vocab != t->tok.vocab)
        return err_set(err, ERR_USAGE, "the model's vocabulary (%d) does not match --tokenizer %s (%d)", mc->vocab,
                       t->tok.name, t->tok.vocab);
    config_pad_vocab(mc, mc->vocab, t->lay->tp);   // Megatron's padding: every TP rank an equal slice
    if (config_validate(mc, err) || stage_check_split(mc, t->lay->tp, t->lay->sp, tc->seq, err)) return -1;
    if (tc->seq > mc->max_seq)
        return err_set(err, ERR_USAGE, "--seq %d is above the model's max_seq %d", tc->seq, mc->max_seq);
    return 0;
}

// A directory holding validation shards.
static int has_val_shards(const char *path) {
    struct stat sb;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/val_000000.bin", path);
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(probe, &sb) == 0;
}

// The training loader of --data (a path or a mixture) and the validation
// set: --val-data's, or else the val shards of the --data directories (of
// a mixture, the sources that have them, their weights renormalized).
static int open_data(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    LoaderOptions lo = {.T = tc->seq, .B = tc->batch, .rank = t->rank, .ranks = t->D, .seed = tc->seed,
                        .split = SPLIT_TRAIN, .prefetch = 1};
    Mixture m, vm;
    if (mix_parse(&m, tc->data, "--data", err)) return -1;
    int rc = loader_open_mix(&t->ld, &m, &t->tok, &lo, err);
    if (rc) err_prefix(err, "--data");
    lo.split = SPLIT_VAL;
    lo.prefetch = 0;
    if (!rc && tc->val_data) {
        rc = mix_parse(&vm, tc->val_data, "--val-data", err);
        if (!rc) {
            rc = valset_open(&t->val, &vm, "--val-data", &t->tok, &lo, err);
            mix_free(&vm);
        }
    } else if (!rc) {
        vm = (Mixture){.plain = m.plain};   // borrows m's paths
        double w = 0;
        for (int s = 0; s < m.n; s++)
            if (has_val_shards(m.src[s].path)) { vm.src[vm.n++] = m.src[s]; w += m.src[s].weight; }
        for (int s = 0; s < vm.n; s++) vm.src[s].weight /= w;
        if (vm.n) rc = valset_open(&t->val, &vm, "--data (validation shards)", &t->tok, &lo, err);
    }
    mix_free(&m);
    return rc;
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
    if (!rc) rc = dp_fill_params(t->dp, fill_segment, &fl, err);
    if (whole != t->st.params) mem_free(whole);
    if (rc) return -1;
    *crc = fl.crc;
    if (!ck) return 0;
    fl.full = NULL;
    fl.section = adamw_sections[0];
    if (dp_fill_moment(t->dp, &t->opt, 0, fill_segment, &fl, err)) return -1;
    fl.section = adamw_sections[1];
    if (dp_fill_moment(t->dp, &t->opt, 1, fill_segment, &fl, err)) return -1;
    const Json *meta = ckpt_meta(ck), *ls = json_get(json_get(meta, "train"), "loader");
    if (adamw_state_read(&t->opt, meta, ckpt_dir(ck), err)) return -1;
    const Json *sj = json_get(json_get(meta, "train"), "loss_scaler");   // a run of another precision has none
    char where[4200];
    snprintf(where, sizeof where, "%s/meta.json", ckpt_dir(ck));
    double flag_scale = t->sc.scale;
    if (t->fp16 && sj && scaler_state_read(&t->sc, sj, where, err)) return -1;
    if (t->fp16 && sj && tc->loss_scale_given) t->flag_scale = flag_scale;
    if (loader_state_read(t->ld, ls, where, err)) return -1;
    const Json *sp = json_get(json_get(meta, "train"), "spike");   // a run without the guard has none
    if (t->spike.z > 0 && sp && spike_state_read(&t->spike, sp, where, err)) return -1;
    t->done = (int)ckpt_step(ck);
    return 0;
}

int trainer_rollback(Trainer *t, Err *err) {
    Ckpt *resumed = t->ck, *ck = NULL;
    LoaderState keep = loader_state(t->ld);
    int from = t->done, rc;
    uint32_t crc;
    if (ckpt_open(&ck, t->tc->ckpt_dir, err)) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return err_set(err, ERR_RUN, "--spike-rollback: %d spikes in a row at step %d and no checkpoint in %s to go back "
                       "to (%s)", t->tc->spike_rollback, from, t->tc->ckpt_dir, why);
    }
    // nothing in flight reads the parameters while they are replaced (ZeRO-3
    // has the next forward's first segment gathering), and afterwards the
    // gathers start again from the reloaded shards, as after a skipped step
    t->ck = ck;
    rc = dp_sync_params(t->dp, err) || init_state(t, &crc, err) || dp_skip(t->dp, err) ? -1 : 0;
    t->ck = resumed;
    ckpt_close(ck);
    if (rc) return -1;
    loader_set_state(t->ld, keep);
    if (t->spike.run >= t->tc->spike_rollback) t->spike.run = 0;   // a checkpoint saved before the guard was on
    t->sent_mark = trainer_comm_totals(t->lay->dpg, NULL);
    if (t->first)
        printf("spikes:    %d in a row at step %d: back to the checkpoint of step %d, the data on past their batches\n",
               t->tc->spike_rollback, from, t->done);
    return 0;
}

// Parameters start identical by construction (init by global index, or the
// same file); every DP rank verifies it before the first step.
static int check_same_start(Trainer *t, uint32_t crc, Err *err) {
    Comm *c = t->lay->dpg;
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

// Refuses, before allocating anything, a run whose ranks on this machine
// would need more than its memory: parameters, gradients, AdamW moments
// (each as ZeRO shards them), the 16-bit copy, the activations and
// --ckpt-async's staging copy, by the layout's memory model (the planner's
// figures).
static int check_room(const Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    const Layout *l = t->lay;
    LayoutMemory mem;
    if (layout_memory(l, &t->mc, l->pp_rank, tc->batch, tc->seq, tc->accum, &mem, err)) return -1;
    double bytes = mem.total;
    int local = l->world && !strcmp(comm_backend(l->world), "local") ? comm_size(l->world) : 1;
    double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (!(have > 0 && bytes * local > have)) return 0;
    // would the optimizer state on disk make it fit, or that and the
    // parameters (ZeRO-3)?
    const char *hint = "try more ranks or memory";
    for (int w = OFFLOAD_OPTIMIZER; w <= OFFLOAD_PARAMS; w++) {
        Layout off = *l;
        off.offload = (OffloadWhat)w;
        if (w == OFFLOAD_PARAMS) off.zero = 3;
        LayoutMemory om;
        if (w > (int)l->offload && layout_memory(&off, &t->mc, l->pp_rank, tc->batch, tc->seq, tc->accum, &om, err) == 0 &&
            om.total * local <= have) {
            hint = w == OFFLOAD_OPTIMIZER ? "--offload optimizer would fit it" : "--zero 3 --offload params would fit it";
            break;
        }
    }
    return err_set(err, ERR_USAGE, "%s needs %.1f GiB per rank (parameters, gradients, AdamW moments%s, activations%s)%s; "
                   "this machine has %.1f GiB (%s; tessera plan --model %s shows layouts that fit)", t->mc.name,
                   bytes / 1073741824.0, l->offload ? " on disk" : "",
                   mem.ckpt > 0 ? ", --ckpt-async's staging copy" : "", local > 1 ? " on each of the ranks here" : "",
                   have / 1073741824.0, hint, t->mc.name);
}

// The optimizer offload's files: under --offload-dir, else --ckpt-dir
// (beside the checkpoints, never in one), else a temporary directory.
static int open_offload(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    const char *base = tc->offload_dir, *flag = "--offload-dir";
    if (!base && tc->ckpt_dir) { base = tc->ckpt_dir; flag = "--ckpt-dir"; }
    if (!base) {
        base = getenv("TMPDIR");
        flag = "TMPDIR";
        if (!base || !base[0]) { base = "/tmp"; flag = "the temporary directory"; }
    }
    dp_set_prefetch(t->dp, tc->offload_prefetch);
    return dp_offload_open(t->dp, base, flag, t->lay->rank, tc->offload_unit, tc->offload_keep, err);
}

int trainer_open(Trainer **out, const TrainConfig *tc, const Layout *l, Err *err) {
    *out = NULL;
    if (l->zero && !l->dpg)
        return err_set(err, ERR_USAGE, "--zero %d needs a communicator (tessera train starts one)", l->zero);
    Trainer *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, ERR_RUN, "out of memory");
    t->tc = tc;
    t->lay = l;
    t->rank = l->dp_rank;
    t->D = l->dp;
    t->first = l->rank == 0;
    t->lock = -1;
    if (tokenizer_open(&t->tok, tc->tokenizer, err)) { free(t); return -1; }
    uint32_t crc = 0;
    if (choose_model(t, err)) goto fail;
    if (tc->threads > 0) kernels_set_threads(tc->threads);
    if (open_data(t, err)) goto fail;
    // this rank's slice of the model and its activation slots, as the layout says
    ModelSlice slice;
    int V = t->V = layout_chunks(l);
    if (!(t->begin = calloc((size_t)l->pp * V + 1, sizeof *t->begin))) { err_set(err, ERR_RUN, "out of memory"); goto fail; }
    if (layout_split_layers(l, t->mc.n_layer, t->begin, err) || layout_slice(l, &t->mc, &slice, err)) goto fail;
    t->last = slice_is_last(&slice, &t->mc);
    int slots = layout_in_flight(l, tc->accum, l->pp_rank);   // the micro-batches in flight here
    unsigned flags = layout_stage_flags(l);
    t->fp16 = l->precision == PREC_FP16;
    scaler_init(&t->sc, &tc->scaler);
    if (spike_init(&t->spike, tc->spike_z, tc->spike_window, tc->spike_rollback, err)) goto fail;
    if (check_room(t, err)) goto fail;
    if (stage_init(&t->st, &t->mc, &slice, tc->batch, tc->seq, slots, flags, err)) goto fail;
    if (l->tpg && stage_set_tp(&t->st, l->tpg, err)) goto fail;
    t->doc_sep = tc->doc_mask ? t->tok.doc_sep : -1;
    if (tc->doc_mask && t->doc_sep < 0) {
        err_set(err, ERR_USAGE, "--doc-mask: the %s tokenizer marks no document boundaries in its data", t->tok.name);
        goto fail;
    }
    if (stage_set_doc_mask(&t->st, t->doc_sep, err)) goto fail;   // before dp_init: embsync reads it
    if (dp_init(&t->dp, l, tc->bucket_mb, &t->st, err)) goto fail;
    if (tc->overflow_step) stage_fuse_norm(&t->st, 0);   // its inf is written after the passes: the norm reads all
    if (pipe_init(&t->pipe, l, tc->accum, &t->st, err)) goto fail;
    if (layout_holds_tied_copy(l, &t->mc)) dp_set_shared(t->dp, 0);   // the first stage counts the embeddings
    // the moments of the owned pieces: in memory, or on disk
    if (l->offload && open_offload(t, err)) goto fail;
    if (adamw_init(&t->opt, l->offload ? 0 : dp_shard_floats(t->dp), err)) goto fail;
    if (init_state(t, &crc, err) || check_same_start(t, crc, err) || trainer_save_open(t, err)) goto fail;
    t->first_step = t->done;
    if (tc->profile && (!(t->prof = calloc(1, sizeof *t->prof)) || !(t->prof_sum = calloc(1, sizeof *t->prof_sum)))) {
        err_set(err, ERR_RUN, "out of memory");
        goto fail;
    }
    if (l->world && comm_split(l->world, 0, comm_rank(l->world), "stats", &t->stats, err)) goto fail;
    if (t->stats && layout_hosts(l, t->stats, t->hosts, sizeof t->hosts, err)) goto fail;
    if (tc->trace_path && trainer_trace_open(t, err)) goto fail;
    // only rank 0 logs, draws the progress bar and holds the run directory's
    // lock: the others must not wait in the first step for a rank that could
    // not take them
    int rc = report_open(&t->rep, t->first ? tc->log_path : NULL, t->first && tc->progress, err);
    if (!rc && t->first && tc->ckpt_dir && (t->lock = ckpt_lock(tc->ckpt_dir, err)) < 0) rc = -1;
    if (trainer_agree(t, rc, "to start (see its error)", err)) goto fail;
    t->inp = malloc((size_t)tc->accum * tc->batch * tc->seq * sizeof *t->inp);
    t->tgt = malloc((size_t)tc->accum * tc->batch * tc->seq * sizeof *t->tgt);
    if (!t->inp || !t->tgt) { err_set(err, ERR_RUN, "out of memory"); goto fail; }
    t->tokens_per_step = layout_tokens_per_step(l, tc->batch, tc->seq, tc->accum);
    t->flops_tok = arch_flops_token(&t->mc, tc->seq);
    peak_probe(&t->peaks, kernels_threads());
    matmul_bf16_allow(peak_bf16_pays(&t->peaks));   // bf16 products where its unit outruns fp32
    t->peak = tc->peak_gflops;
    t->peak_src = "--peak-gflops";
    if (t->peak <= 0) {   // the peak of the arithmetic the run's products use
        t->peak = peak_for(&t->peaks, l->precision);
        t->peak_src = peak_for_name(&t->peaks, l->precision);
    }
    if (t->peak <= 0) { t->peak = kernels_sgemm_gflops(1024, 5); t->peak_src = "SGEMM 1024³: no FMA unit to probe"; }
    trainer_print_header(t);
    t->sent_mark = trainer_comm_totals(l->dpg, NULL);
    *out = t;
    return 0;
fail:
    trainer_close(t);
    return -1;
}

void trainer_close(Trainer *t) {
    if (!t) return;
    trainer_save_close(t);   // first: a checkpoint write in flight reads the table
    report_close(t->rep);
    if (t->lock >= 0) close(t->lock);
    prof_attach(NULL);
    trace_free(t->trace);
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
    valset_close(&t->val);
    ckpt_close(t->ck);
    weights_close(&t->init);
    tokenizer_close(&t->tok);
    spike_free(&t->spike);
    free(t);
}
