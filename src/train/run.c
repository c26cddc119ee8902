#include "train/trainer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/timer.h"
#include "kernels/matmul.h"

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

static char *train_meta_json(const TrainConfig *tc, int step, LoaderState ls, const LossScaler *sc,
                             const SpikeGuard *spike) {
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
    jb_key(&b, "precision"); jb_str(&b, prec_name(tc->layout.precision));
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
    if (spike->z > 0) {
        char *s = spike_state_json(spike);
        jb_key(&b, "spike");
        jb_raw(&b, s);
        free(s);
    }
    jb_obj_end(&b);
    return b.s;
}

// Saves a checkpoint of the current step; every rank calls it. Each rank
// that owns distinct pieces (every rank under ZeRO, DP rank 0 otherwise)
// writes its parameters and moments — its stage's and TP slice's — into
// its own file, numbered by the layout (layout_ckpt_file); the last stage
// leaves out its copy of the tied embeddings (the first stage's is the
// same). World rank 0 creates the step first and
// commits it once all have written. Any failure fails all.
static int save(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    double t0 = timer_now();
    int n = dp_npieces(t->dp), rc = 0;
    char *train = train_meta_json(tc, t->done, loader_state(t->ld), t->fp16 ? &t->sc : NULL, &t->spike);
    char *state = adamw_state_json(&t->opt);
    CkptPiece *pc = calloc((size_t)n + 1, sizeof *pc);
    if (!pc || !train || !state) rc = err_set(err, ERR_RUN, "out of memory");
    if (t->first && !rc) rc = ckpt_begin(tc->ckpt_dir, t->done, err);
    rc = trainer_agree(t, rc, "to write its part of the checkpoint", err);
    DpState ds;   // the moments (and offloaded masters) where they live: memory, or the offload's files
    if (!rc && layout_dp_owner(t->lay) && !(rc = dp_state(t->dp, &t->opt, &ds, err))) {
        size_t from = layout_holds_tied_copy(t->lay, &t->mc) ? t->st.table.seg[0].hi : 0;   // past the tied copy
        int np = 0;
        for (int k = 0; k < n; k++) {
            DpPiece p = dp_piece(t->dp, k);
            if (p.hi <= from) continue;
            size_t cut = p.lo < from ? from - p.lo : 0;
            const float *params = ds.masters ? ds.masters + p.off : p.params;
            pc[np++] = (CkptPiece){p.lo + cut, p.hi, {params + cut, ds.m + p.off + cut, ds.v + p.off + cut}};
        }
        const char *const sections[3] = {"", adamw_sections[0], adamw_sections[1]};   // parameters, moments
        rc = ckpt_write_pieces(tc->ckpt_dir, t->done, layout_ckpt_file(t->lay), &t->st.table, sections, 3, pc, np, err);
    }
    dp_state_release(t->dp);
    rc = trainer_agree(t, rc, "to write its part of the checkpoint", err);
    CkptMeta md = {.step = t->done, .cfg = &t->mc, .nfiles = layout_ckpt_files(t->lay), .dp = t->lay->dp,
                   .tp = t->lay->tp, .pp = t->lay->pp, .zero = t->lay->zero, .state = state, .train = train};
    if (t->first && !rc) rc = ckpt_commit(tc->ckpt_dir, &md, tc->keep, err);
    rc = trainer_agree(t, rc, "to write its part of the checkpoint", err);
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
    uint64_t b0 = trainer_comm_totals(t->lay->dpg, NULL);
    int64_t n;
    double t0 = timer_now(), sum;
    // --eval-batches steps' worth of sequences (batch × accumulation × DP
    // ranks each), every DP rank its part, as a step reads them: every
    // layout of the same step evaluates the same sequences
    int rc = train_evaluate(&t->st, t->pipe, t->val, (int64_t)t->tc->eval_batches * t->tc->accum, &sum, &n, err);
    stage_take_aux(&t->st);   // the model's loss alone: auxiliary terms only train
    if (rc || stage_tp_status(&t->st, err)) return -1;
    // the last stage scored each DP rank's tokens: one of its ranks counts
    // them, and every rank gets the sum
    int counts = layout_counts_loss(t->lay, t->last);
    double v[2] = {counts ? sum : 0.0, counts ? (double)n : 0.0};
    if (trainer_sum_all(t, v, 2, err)) return -1;
    n = (int64_t)v[1];
    double loss = v[1] > 0 ? v[0] / v[1] : 0.0;
    report_eval(t->rep, t->done, loss, n, timer_now() - t0);
    t->sent_mark += trainer_comm_totals(t->lay->dpg, NULL) - b0;
    return 0;
}

static char *linear_name(void *ctx, int in, int out, char *buf, size_t n) { return stage_linear_name(ctx, in, out, buf, n); }

// --profile: the table of each pipeline stage's first rank (its TP and DP
// peers run the same shapes), gathered to world rank 0, which prints them.
static int print_profile(Trainer *t, Err *err) {
    enum { HEAD = 4, ROW = 8, SLOT = HEAD + ROW * PROF_MAX_ROWS };
    int P = t->lay->pp;
    double *v = calloc((size_t)P * SLOT, sizeof *v), *sum = calloc((size_t)P * SLOT, sizeof *sum);
    if (!v || !sum) { free(v); free(sum); return err_set(err, ERR_RUN, "out of memory"); }
    if (t->lay->dp_rank == 0 && t->lay->tp_rank == 0) {
        double *o = v + (size_t)t->lay->pp_rank * SLOT;
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
        int w = layout_rank_at(t->lay, 0, 0, s);
        if (P > 1)
            snprintf(title, sizeof title, "stage %d of %d (world rank %d, %d thread%s)", s, P, w, kernels_threads(),
                     kernels_threads() == 1 ? "" : "s");
        else
            snprintf(title, sizeof title, "rank 0 of %d (%d thread%s)", layout_devices(t->lay), kernels_threads(),
                     kernels_threads() == 1 ? "" : "s");
        report_profile(t->rep, &p, (int)o[1], o[2], o[3], title, linear_name, &t->st);
    }
    free(v);
    free(sum);
    return rc;
}

// The test hook of --spike-rollback's oracle: the loader moves past n
// steps' batches, as a rollback leaves it past the spikes'.
static void skip_batches(Trainer *t, int n) {
    for (int i = 0; i < n * t->tc->accum; i++) loader_next(t->ld, t->inp, t->tgt);
}

int train_run(const TrainConfig *tc, const Layout *l, Err *err) {
    Trainer *t;
    if (trainer_open(&t, tc, l, err)) return -1;
    int start = t->done, rc = -1;
    double t_start = timer_now();
    if (start >= tc->steps) printf("nothing to train: the checkpoint is at step %d and --steps is %d\n", start, tc->steps);
    while (t->done < tc->steps) {
        StepMetrics sm;
        if (trainer_step(t, &sm, err)) goto done;
        int step = t->done, last = step == tc->steps;
        if (step % tc->log_every == 0 || last || step == 1 || sm.skipped) report_step(t->rep, &sm);
        if (sm.spike && tc->spike_rollback && t->spike.run >= tc->spike_rollback) {   // back, and on past the data
            if (trainer_rollback(t, err)) goto done;
            continue;
        }
        if (tc->skip_step == step) skip_batches(t, tc->skip_steps);
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
    if (t->lay->tp > 1 && start < tc->steps) {
        const CommStats *cs = comm_stats(t->lay->tpg);
        double tps;
        uint64_t sent = trainer_comm_totals(t->lay->tpg, &tps);
        printf("comm:      tensor-parallel collectives %.2f s in all (%.0f%% of the run, evaluations included); "
               "%.1f MB sent per rank, %llu calls\n", tps, total > 0 ? 100 * tps / total : 0.0,
               sent / 1e6, (unsigned long long)(cs->calls[OP_ALLREDUCE] +
               cs->calls[OP_ALLGATHER] + cs->calls[OP_REDUCE_SCATTER]));
    }
    if (l->pp > 1 && start < tc->steps) {
        // every rank's waits against every rank's step time: the mean bubble
        double v[4] = {t->pp_wait, t->t_steps, (double)t->pp_sent, 0};
        if (trainer_sum_all(t, v, 3, err)) goto done;
        double n = tc->steps - start;
        printf("pipeline:  bubble %.1f%% measured (time the ranks waited on pipeline sends and receives, mean over %d "
               "ranks) against %s = %.1f%% planned; %.2f MB sent between stages per step per rank\n",
               v[1] > 0 ? 100 * v[0] / v[1] : 0.0, layout_devices(l), t->V > 1 ? "(P−1)/(V·M+P−1)" : "(P−1)/(M+P−1)",
               100 * pipe_bubble(l->pp, tc->accum, t->V), v[2] / 1e6 / n / layout_devices(l));
    }
    if (tc->profile && start < tc->steps && print_profile(t, err)) goto done;
    report_memory(t->rep);
    rc = 0;
done:
    trainer_close(t);
    return rc;
}
