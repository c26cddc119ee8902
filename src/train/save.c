// train/save.c — checkpoints of a run: what every rank writes (its pieces:
// parameters and AdamW moments), and how the ranks commit them —
// synchronously, or with --ckpt-async through a background writer
// (io/ckpt_writer) whose checkpoint the ranks commit together later, on
// the training thread.
#include "train/trainer_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/json.h"
#include "core/timer.h"

static char *train_meta_json(const TrainConfig *tc, int step, const Loader *ld, const LossScaler *sc,
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
    if (tc->doc_mask) { jb_key(&b, "doc_mask"); jb_bool(&b, 1); }   // eval and sample mask the same way
    if (sc) {
        char *s = scaler_state_json(sc);
        jb_key(&b, "loss_scaler");
        jb_raw(&b, s);
        free(s);
    }
    char *ls = loader_state_json(ld);
    jb_key(&b, "loader");
    jb_raw(&b, ls);
    free(ls);
    if (spike->z > 0) {
        char *s = spike_state_json(spike);
        jb_key(&b, "spike");
        jb_raw(&b, s);
        free(s);
    }
    jb_obj_end(&b);
    return b.s;
}

// This rank's pieces of a checkpoint into pc (room for dp_npieces + 1):
// its owned pieces with their parameters and moments, past the last
// stage's copy of the tied embeddings (the first stage's is the same);
// the moments (and offloaded masters) where ds says they live, or opt's
// and the pieces' own with ds NULL. Their count; *floats (non-NULL) gets
// their floats in one section.
static int save_pieces(Trainer *t, const DpState *ds, CkptPiece *pc, size_t *floats) {
    size_t from = layout_holds_tied_copy(t->lay, &t->mc) ? t->st.table.seg[0].hi : 0, sum = 0;
    const float *m = ds ? ds->m : t->opt.m, *v = ds ? ds->v : t->opt.v;
    int np = 0;
    for (int k = 0; k < dp_npieces(t->dp); k++) {
        DpPiece p = dp_piece(t->dp, k);
        if (p.hi <= from) continue;
        size_t cut = p.lo < from ? from - p.lo : 0;
        const float *params = ds && ds->masters ? ds->masters + p.off : p.params;
        pc[np++] = (CkptPiece){p.lo + cut, p.hi, {params + cut, m + p.off + cut, v + p.off + cut}};
        sum += p.hi - p.lo - cut;
    }
    if (floats) *floats = sum;
    return np;
}

int trainer_save_open(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    t->sections[0] = "";   // parameters, then AdamW's moments
    t->sections[1] = adamw_sections[0];
    t->sections[2] = adamw_sections[1];
    if (!tc->ckpt_dir || !t->lay->ckpt_async || !layout_dp_owner(t->lay)) return 0;
    CkptPiece *pc = calloc((size_t)dp_npieces(t->dp) + 1, sizeof *pc);
    if (!pc) return err_set(err, ERR_RUN, "out of memory");
    size_t floats;
    save_pieces(t, NULL, pc, &floats);
    free(pc);
    // the layout's memory model counts this buffer (the planner's figure)
    LayoutMemory mem;
    if (layout_memory(t->lay, &t->mc, t->lay->pp_rank, tc->batch, tc->seq, tc->accum, &mem, err)) return -1;
    CHECKF(mem.ckpt == 12.0 * (double)floats, "--ckpt-async stages %zu floats, the layout's memory model %.0f bytes",
           3 * floats, mem.ckpt);
    return ckpt_writer_open(&t->writer, 3 * floats, err);
}

void trainer_save_close(Trainer *t) {
    ckpt_writer_close(t->writer);   // first: its thread reads the table and writes the step directory
    t->writer = NULL;
    free(t->pend.train);
    free(t->pend.state);
    t->pend = (SavePending){0};
}

// The pending checkpoint's meta.json and the rest of the commit, on world
// rank 0, once every rank's file is durable; every rank calls it. Any
// failure fails all, and the step's temporary directory goes.
static int commit_pending(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    CkptMeta md = {.step = t->pend.step, .cfg = &t->mc, .nfiles = layout_ckpt_files(t->lay), .dp = t->lay->dp,
                   .tp = t->lay->tp, .pp = t->lay->pp, .zero = t->lay->zero, .state = t->pend.state,
                   .train = t->pend.train};
    int rc = t->writer ? ckpt_writer_wait(t->writer, err) : 0;
    rc = trainer_agree(t, rc, "to write its part of the checkpoint", err);
    if (t->first && !rc) rc = ckpt_commit(tc->ckpt_dir, &md, tc->keep, err);
    rc = trainer_agree(t, rc, "to write its part of the checkpoint", err);
    if (rc && t->first) ckpt_abort(tc->ckpt_dir, t->pend.step);
    if (rc == 0)
        printf("checkpoint: %s/step_%08lld (%.2f s to stage it, written in the background)\n", tc->ckpt_dir,
               (long long)t->pend.step, t->pend.staged);
    free(t->pend.train);
    free(t->pend.state);
    t->pend = (SavePending){0};
    return rc;
}

int trainer_save_settle(Trainer *t, int wait, Err *err) {
    if (!t->pend.active) return 0;
    if (!wait) {   // every rank's write has ended, or none commits yet
        double busy = t->writer && !ckpt_writer_done(t->writer) ? 1 : 0;
        if (trainer_sum_all(t, &busy, 1, err)) return -1;
        if (busy > 0) return 0;
    }
    return commit_pending(t, err);
}

// --ckpt-async: the previous checkpoint committed (its write waited for),
// then this step's begun, staged and handed to the writer on every rank
// that writes.
static int save_async(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    if (trainer_save_settle(t, 1, err)) return -1;
    double t0 = timer_now();
    int rc = 0, started = 0;
    t->pend.train = train_meta_json(tc, t->done, t->ld, t->fp16 ? &t->sc : NULL, &t->spike);
    t->pend.state = adamw_state_json(&t->opt);
    CkptPiece *pc = calloc((size_t)dp_npieces(t->dp) + 1, sizeof *pc);
    if (!pc || !t->pend.train || !t->pend.state) rc = err_set(err, ERR_RUN, "out of memory");
    if (t->first && !rc) rc = ckpt_begin(tc->ckpt_dir, t->done, err);
    rc = trainer_agree(t, rc, "to write its part of the checkpoint", err);
    DpState ds;   // the moments (and offloaded masters) where they live: memory, or the offload's files
    if (!rc && t->writer && !(rc = dp_state(t->dp, &t->opt, &ds, err))) {
        int np = save_pieces(t, &ds, pc, NULL);
        rc = ckpt_writer_start(t->writer, tc->ckpt_dir, t->done, layout_ckpt_file(t->lay), &t->st.table, t->sections,
                               3, pc, np, err);
        started = !rc;
    }
    if (t->writer) dp_state_release(t->dp);   // staged: the writer reads its copies
    free(pc);
    rc = trainer_agree(t, rc, "to write its part of the checkpoint", err);
    if (rc) {
        if (started) ckpt_writer_wait(t->writer, NULL);
        if (t->first) ckpt_abort(tc->ckpt_dir, t->done);
        free(t->pend.train);
        free(t->pend.state);
        t->pend = (SavePending){0};
        return -1;
    }
    t->pend.active = 1;
    t->pend.step = t->done;
    t->pend.staged = timer_now() - t0;
    return 0;
}

// Saves a checkpoint of the current step; every rank calls it. Each rank
// that owns distinct pieces (every rank under ZeRO, DP rank 0 otherwise)
// writes its parameters and moments — its stage's and TP slice's — into
// its own file, numbered by the layout (layout_ckpt_file). World rank 0
// creates the step first and commits it once all have written. Any failure
// fails all.
static int save_sync(Trainer *t, Err *err) {
    const TrainConfig *tc = t->tc;
    double t0 = timer_now();
    int rc = 0;
    char *train = train_meta_json(tc, t->done, t->ld, t->fp16 ? &t->sc : NULL, &t->spike);
    char *state = adamw_state_json(&t->opt);
    CkptPiece *pc = calloc((size_t)dp_npieces(t->dp) + 1, sizeof *pc);
    if (!pc || !train || !state) rc = err_set(err, ERR_RUN, "out of memory");
    if (t->first && !rc) rc = ckpt_begin(tc->ckpt_dir, t->done, err);
    rc = trainer_agree(t, rc, "to write its part of the checkpoint", err);
    DpState ds;   // the moments (and offloaded masters) where they live: memory, or the offload's files
    if (!rc && layout_dp_owner(t->lay) && !(rc = dp_state(t->dp, &t->opt, &ds, err))) {
        int np = save_pieces(t, &ds, pc, NULL);
        rc = ckpt_write_pieces(tc->ckpt_dir, t->done, layout_ckpt_file(t->lay), &t->st.table, t->sections, 3, pc, np,
                               err);
    }
    if (layout_dp_owner(t->lay)) dp_state_release(t->dp);
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

int trainer_save(Trainer *t, int wait, Err *err) {
    if (!t->lay->ckpt_async) return save_sync(t, err);
    return save_async(t, err) || (wait && trainer_save_settle(t, 1, err)) ? -1 : 0;
}
