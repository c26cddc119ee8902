#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/json.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "io/checkpoint.h"
#include "io/hf_gpt2.h"
#include "parallel/ddp.h"
#include "parallel/zero.h"
#include "core/checksum.h"
#include "kernels/matmul.h"
#include "model/stage.h"

double train_flops_per_token(const ModelConfig *c, int T) {
    return 6.0 * (double)config_param_count(c, 0) + 12.0 * c->n_layer * (double)T * c->d_model;
}

// This rank's bytes by allocator tag: the peaks, and where they differ the
// current values.
static void print_memory(void) {
    char b[32], c[32];
    printf("memory:    per rank, peak (now): ");
    for (int t = 0; t < MEM_NTAGS; t++) {
        if (!mem_peak(t)) continue;
        printf("%s %s", mem_tag_name(t), mem_fmt(mem_peak(t), b, sizeof b));
        if (mem_current(t) != mem_peak(t)) printf(" (%s)", mem_fmt(mem_current(t), c, sizeof c));
        printf(", ");
    }
    printf("total %s\n", mem_fmt(mem_peak_total(), b, sizeof b));
}

static void progress_bar(int step, int total, double elapsed) {
    int width = 30, fill = (int)((double)step / total * width);
    double eta = step ? elapsed / step * (total - step) : 0;
    printf("\r[");
    for (int i = 0; i < width; i++) putchar(i < fill ? '=' : (i == fill ? '>' : ' '));
    printf("] %d/%d  ETA %dm%02ds ", step, total, (int)eta / 60, (int)eta % 60);
    fflush(stdout);
}

static char *train_meta_json(const TrainConfig *tc, int step, LoaderState ls) {
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
    jb_key(&b, "loader"); jb_obj_begin(&b);
    jb_key(&b, "epoch"); jb_int(&b, ls.epoch);
    jb_key(&b, "pos"); jb_int(&b, ls.pos);
    jb_obj_end(&b);
    jb_obj_end(&b);
    return b.s;
}

// Agrees on a status across the data-parallel ranks: the worst one (-1 if
// any rank failed); a failed reduction counts as a failure.
static int agree(Comm *stats, int rc, Err *err) {
    if (!stats) return rc;
    int32_t mine = rc ? 1 : 0, any = 0;
    Err e;
    if (comm_allreduce(stats, &mine, &any, 1, DT_I32, RED_MAX, &e)) {
        if (!rc && err) *err = e;
        return -1;
    }
    if (any && !rc && err) err_set(err, ERR_RUN, "another rank failed to write its part of the checkpoint");
    return any ? -1 : 0;
}

// Saves a checkpoint; every rank calls it. Without ZeRO rank 0 writes the
// whole model (the others hold the same). Under ZeRO every rank writes the
// pieces it owns — parameters and moments — into its own file, and rank 0
// commits once all have written.
static int save_ckpt(const TrainConfig *tc, int step, const Stage *st, const AdamW *opt, const Loader *ld, Zero *zr,
                     Comm *stats, int rank, int D, Err *err) {
    double t0 = timer_now();
    char *meta = train_meta_json(tc, step, loader_state(ld));
    int rc = 0;
    if (!zr) {
        if (rank == 0) rc = ckpt_save(tc->ckpt_dir, step, st, opt, meta, tc->keep, err);
    } else {
        int n = st->table.nseg;
        CkptPiece *pc = calloc((size_t)n + 1, sizeof *pc);
        if (!pc) rc = err_set(err, ERR_RUN, "out of memory");
        if (rank == 0 && !rc) rc = ckpt_begin(tc->ckpt_dir, step, err);
        rc = agree(stats, rc, err);
        for (int k = 0; k < n && !rc; k++) {
            size_t off;
            zero_piece(zr, k, &pc[k].lo, &pc[k].hi, &off);
            pc[k].params = zero_piece_params(zr, k);
            pc[k].m = opt->m + off;
            pc[k].v = opt->v + off;
        }
        if (!rc) rc = ckpt_write_pieces(tc->ckpt_dir, step, rank, &st->table, pc, n, 1, err);
        free(pc);
        rc = agree(stats, rc, err);
        CkptLayout lay = {D, tc->zero};
        if (rank == 0 && !rc) rc = ckpt_commit(tc->ckpt_dir, step, D, &lay, st, opt, meta, tc->keep, err);
        rc = agree(stats, rc, err);
    }
    free(meta);
    if (rc == 0) printf("checkpoint: %s/step_%08d (%.2f s)\n", tc->ckpt_dir, step, timer_now() - t0);
    return rc;
}

// ---- filling ZeRO shards segment by segment ----

typedef struct {
    const ParamTable *t;
    Ckpt *ck;
    const char *prefix;
    const float *full;     // whole parameters to cut from, or NULL
    uint64_t seed;
    uint32_t crc;          // CRC-32C of the segments so far (of the whole flat buffer at the end)
    Err *err;
} Fill;

static int fill_segment(void *ctx, int k, float *buf) {
    Fill *f = ctx;
    const ParamSeg *g = &f->t->seg[k];
    if (f->ck) {
        if (ckpt_load_range(f->ck, f->t, f->prefix, g->lo, g->hi, buf, f->err)) return -1;
    } else if (f->full) {
        memcpy(buf, f->full + g->lo, (g->hi - g->lo) * sizeof(float));
    } else {
        ptable_init_seg(f->t, k, buf, f->seed);
    }
    f->crc = crc32c(f->crc, buf, (g->hi - g->lo) * sizeof(float));
    return 0;
}

double train_evaluate(Stage *st, Loader *val, int max_batches, int64_t *ntok) {
    int B = st->B, T = st->T;
    int *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    CHECKF(in && tg, "out of memory");
    double sum = 0;
    int64_t n = 0;
    loader_rewind(val);
    for (int b = 0; max_batches <= 0 || b < max_batches; b++) {
        int got = loader_next(val, in, tg);
        if (got == 0) break;
        sum += stage_forward(st, in, tg, got, T, 0.0f);
        n += (int64_t)got * T;
    }
    free(in);
    free(tg);
    *ntok = n;
    return n ? sum / (double)n : 0.0;
}

// Bytes c has sent, over all operations (0 without c).
static uint64_t bytes_sent(Comm *c) {
    uint64_t n = 0;
    if (!c) return 0;
    const CommStats *cs = comm_stats(c);
    for (int o = 0; o < OP_COUNT; o++) n += cs->bytes_sent[o];
    return n;
}

// Evaluates, prints and logs the validation loss at `step`.
static void run_eval(const TrainConfig *tc, Stage *st, Loader *val, int step, FILE *log) {
    int64_t n;
    double t0 = timer_now();
    double loss = train_evaluate(st, val, tc->eval_batches, &n);
    if (tc->progress) printf("\r\033[K");
    printf("eval  %5d       | val loss %.4f | perplexity %.2f | %lld tokens in %.1f s\n", step, loss, exp(loss),
           (long long)n, timer_now() - t0);
    fflush(stdout);
    if (log) {
        fprintf(log, "{\"step\":%d,\"val_loss\":%.6f,\"val_ppl\":%.4f,\"val_tokens\":%lld}\n", step, loss, exp(loss),
                (long long)n);
        fflush(log);
    }
}

// The model's config and, on resume, the checkpoint to continue from.
static int choose_model(const TrainConfig *tc, const Tokenizer *tok, ModelConfig *mc, Ckpt **ck, StFile *sf, Err *err) {
    *mc = tc->model;
    config_set_vocab(mc, tok->vocab);
    if (tc->resume) {
        if (ckpt_open(ck, tc->resume, err)) { err_prefix(err, "--resume"); return -1; }
        if (ckpt_config(*ck, mc, err)) return -1;
        const Json *tn = json_get(json_get(ckpt_meta(*ck), "train"), "tokenizer");
        if (tn && tn->type == JSON_STR && strcmp(tn->text, tok->name))
            return err_set(err, ERR_USAGE, "--resume %s: the run used --tokenizer %s, not %s", ckpt_dir(*ck), tn->text,
                           tok->name);
    } else if (tc->init_from) {
        if (st_open(sf, tc->init_from, err)) { err_prefix(err, "--init-from"); return -1; }
        ModelConfig fc = {0};
        fc.n_head = tc->model.n_head;
        if (hf_read_config(sf, &fc, err)) { err_prefix(err, "--init-from"); return -1; }
        if (fc.d_model != tc->model.d_model) {   // the preset does not describe this file: infer the heads too
            fc.n_head = 0;
            if (hf_read_config(sf, &fc, err)) { err_prefix(err, "--init-from"); return -1; }
        }
        *mc = fc;
    }
    if (mc->vocab != tok->vocab)
        return err_set(err, ERR_USAGE, "the model's vocabulary (%d) does not match --tokenizer %s (%d)", mc->vocab,
                       tok->name, tok->vocab);
    if (config_validate(mc, err)) return -1;
    if (tc->seq > mc->max_seq)
        return err_set(err, ERR_USAGE, "--seq %d is above the model's max_seq %d", tc->seq, mc->max_seq);
    return 0;
}

// The starting parameters — from the checkpoint, the --init-from file or
// the seed — and on resume the AdamW state, in the stage's layout. Every
// rank computes the same whole model, segment by segment; under ZeRO it
// keeps only its pieces of what it shards. *crc gets the CRC-32C of the
// whole flat parameter buffer, for the ranks to compare.
static int init_state(const TrainConfig *tc, Stage *st, Zero *zr, AdamW *opt, Ckpt *ck, const StFile *sf,
                      uint32_t *crc, Err *err) {
    const ParamTable *t = &st->table;
    if (ck && !ckpt_has_optimizer(ck))
        return err_set(err, ERR_USAGE, "%s: holds no optimizer state (an imported model? use --init-from)", ckpt_dir(ck));
    Fill fl = {.t = t, .ck = ck, .seed = tc->seed, .prefix = "", .err = err};
    if (!st->params) {   // ZeRO-3: the parameter shard
        int rc = 0;
        float *whole = NULL;
        if (tc->init_from) {   // the file is read whole once
            st->params = whole = mem_alloc(MEM_WORKSPACE, t->total * sizeof(float));
            rc = !whole ? err_set(err, ERR_RUN, "out of memory reading --init-from") : hf_load(sf, st, err);
            if (rc) err_prefix(err, tc->init_from);
            st->params = NULL;
            fl.full = whole;
        }
        if (!rc) rc = zero_fill_shard(zr, zero_param_shard(zr), fill_segment, &fl);
        mem_free(whole);
        if (rc) return -1;
        *crc = fl.crc;
    } else {
        if (ck) {
            if (ckpt_load_range(ck, t, "", 0, t->total, st->params, err)) return -1;
        } else if (tc->init_from) {
            if (hf_load(sf, st, err)) { err_prefix(err, tc->init_from); return -1; }
        } else {
            ptable_init(t, st->params, tc->seed);
        }
        *crc = crc32c(0, st->params, t->total * sizeof(float));
    }
    if (!ck) return 0;
    if (zr) {
        fl.full = NULL;
        fl.prefix = "exp_avg/";
        if (zero_fill_shard(zr, opt->m, fill_segment, &fl)) return -1;
        fl.prefix = "exp_avg_sq/";
        if (zero_fill_shard(zr, opt->v, fill_segment, &fl)) return -1;
    } else if (ckpt_load_range(ck, t, "exp_avg/", 0, t->total, opt->m, err) ||
               ckpt_load_range(ck, t, "exp_avg_sq/", 0, t->total, opt->v, err)) {
        return -1;
    }
    return ckpt_adam_t(ck, &opt->t, err);
}

int train_run(const TrainConfig *tc, Comm *dp, Err *err) {
    int rank = dp ? comm_rank(dp) : 0, D = dp ? comm_size(dp) : 1;
    Ddp *ddp = NULL;
    Zero *zr = NULL;
    Comm *stats = NULL;   // the loss and norm reductions, so that dp's counters hold gradient traffic only
    if (tc->zero && !dp) return err_set(err, ERR_USAGE, "--zero %d needs a communicator (tessera train starts one)", tc->zero);
    Tokenizer tok;
    if (tokenizer_open(&tok, tc->tokenizer, err)) return -1;
    ModelConfig mc;
    Ckpt *ck = NULL;
    StFile sf = {0};
    Loader *ld = NULL, *val = NULL;
    Stage st;
    AdamW opt = {0};
    FILE *log = NULL;
    int *inp = NULL, *tgt = NULL, rc = -1, start = 0;
    memset(&st, 0, sizeof st);
    if (choose_model(tc, &tok, &mc, &ck, &sf, err)) goto done;
    if (tc->threads > 0) kernels_set_threads(tc->threads);
    LoaderOptions lo = {.T = tc->seq, .B = tc->batch, .rank = rank, .ranks = D, .seed = tc->seed,
                        .split = SPLIT_TRAIN, .prefetch = 1};
    if (loader_open(&ld, tc->data, &tok, &lo, err)) { err_prefix(err, "--data"); goto done; }
    lo.split = SPLIT_VAL;
    lo.prefetch = 0;
    if (tc->val_data) {
        if (loader_open(&val, tc->val_data, &tok, &lo, err)) { err_prefix(err, "--val-data"); goto done; }
    } else {
        struct stat sb;
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/val_000000.bin", tc->data);
        if (stat(tc->data, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(probe, &sb) == 0 &&
            loader_open(&val, tc->data, &tok, &lo, err)) { err_prefix(err, "--data (validation shards)"); goto done; }
    }
    ModelSlice slice = slice_whole(&mc);
    if (tc->zero) slice.pad_multiple = D;   // every segment splits into D equal pieces
    if (stage_init(&st, &mc, &slice, tc->batch, tc->seq, zero_stage_flags(tc->zero), err)) goto done;
    if (tc->zero && zero_init(&zr, dp, tc->zero, &st, err)) goto done;
    // ZeRO: this rank's AdamW moments are its shard (its piece of every segment)
    size_t S = zr ? zero_shard_floats(zr) : st.table.total;
    if (adamw_init(&opt, S, err)) goto done;
    uint32_t pcrc = 0;
    if (init_state(tc, &st, zr, &opt, ck, &sf, &pcrc, err)) goto done;
    if (ck) {
        start = (int)ckpt_step(ck);
        const Json *ls = json_get(json_get(ckpt_meta(ck), "train"), "loader");
        int64_t e = 0, p = 0;
        if (json_int64(json_get(ls, "epoch"), &e) || json_int64(json_get(ls, "pos"), &p) || e < 0 || p < 0) {
            err_set(err, ERR_USAGE, "%s/meta.json: field 'train.loader' is missing or malformed", ckpt_dir(ck));
            goto done;
        }
        loader_set_state(ld, (LoaderState){e, p % loader_samples(ld)});
    }
    if (dp) {
        // Parameters start identical by construction (init by global index,
        // or the same file); verify it before the first step.
        int32_t mine = (int32_t)pcrc, *all = calloc((size_t)D, 4);
        if (!all || comm_allgather(dp, &mine, all, 1, DT_I32, err)) { free(all); goto done; }
        for (int r = 1; r < D; r++)
            if (all[r] != all[0]) {
                err_set(err, ERR_RUN, "data-parallel ranks 0 and %d start from different parameters (checksums %08x, %08x)",
                        r, (unsigned)all[0], (unsigned)all[r]);
                free(all);
                goto done;
            }
        free(all);
        if (!tc->zero && D > 1 && ddp_init(&ddp, dp, &st, tc->bucket_mb, err)) goto done;
        if (comm_split(dp, 0, rank, "dp-stats", &stats, err)) goto done;
    }
    if (rank == 0 && tc->log_path && !(log = fopen(tc->log_path, "a"))) {
        err_set(err, ERR_USAGE, "--log %s: %s", tc->log_path, strerror(errno));
        goto done;
    }
    inp = malloc((size_t)tc->batch * tc->seq * sizeof *inp);
    tgt = malloc((size_t)tc->batch * tc->seq * sizeof *tgt);
    if (!inp || !tgt) { err_set(err, ERR_RUN, "out of memory"); goto done; }

    int B = tc->batch, T = tc->seq, K = tc->accum;
    double tokens_per_step = (double)B * T * K * D;
    double flops_tok = train_flops_per_token(&mc, T);
    double peak = tc->peak_gflops;
    const char *peak_src = "--peak-gflops";
    if (peak <= 0) { peak = kernels_sgemm_gflops(1024, 5); peak_src = "measured SGEMM 1024³"; }
    int64_t np = config_param_count(&mc, 0);
    printf("model:     %s — %d layers, %d heads, d_model %d, d_ff %d, max_seq %d, vocab %d (padded %d)\n", mc.name,
           mc.n_layer, mc.n_head, mc.d_model, mc.d_ff, mc.max_seq, mc.vocab, mc.vocab_padded);
    printf("params:    %.2fM (%lld; %zu with vocabulary padding)\n", np / 1e6, (long long)np, st.table.total);
    printf("data:      %s — %d file%s, %lld tokens (%s tokenizer), %lld sequences of %d+1 per epoch\n", tc->data,
           loader_sources(ld), loader_sources(ld) == 1 ? "" : "s", (long long)loader_tokens(ld), tc->tokenizer,
           (long long)loader_samples(ld), T);
    if (val)
        printf("val:       %lld tokens, %lld sequences; evaluated %s%s, %s\n", (long long)loader_tokens(val),
               (long long)loader_samples(val), tc->eval_every > 0 ? "every --eval-every steps and " : "",
               "at the end", tc->eval_batches ? "first --eval-batches batches" : "all of it");
    printf("batch:     %d × %d tokens × %d accumulation × %d ranks = %.0f tokens per step, %d steps\n", B, T, K, D,
           tokens_per_step, tc->steps);
    if (zr) {
        static const char *what[] = {"", "AdamW state sharded; gradients reduce-scattered per layer during the last backward, "
                                         "updated parameters allgathered during the next forward",
                                     "AdamW state and gradients sharded; gradients reduce-scattered per layer during every "
                                     "backward, updated parameters allgathered during the next forward",
                                     "AdamW state, gradients and parameters sharded; each layer's parameters allgathered "
                                     "before its forward and its backward (the next one prefetched)"};
        char b1[32];
        printf("parallel:  data parallel over %d ranks (%s backend), ZeRO-%d: %s; shard %zu of %zu floats per rank, "
               "%d segments, comm buffers %s\n", D, comm_backend(dp), tc->zero, what[tc->zero], S, st.table.total,
               st.table.nseg, mem_fmt(zero_pool_bytes(zr), b1, sizeof b1));
    }
    if (ddp)
        printf("parallel:  data parallel over %d ranks (%s backend), gradients in %d buckets of ≤ %g MB, overlapped with backward\n",
               D, comm_backend(dp), ddp_nbuckets(ddp), tc->bucket_mb);
    printf("optimizer: AdamW lr %g → %g (%s, warmup %d), betas %g/%g, eps %g, weight decay %g, clip %g\n",
           tc->opt.lr, tc->opt.schedule == LR_COSINE ? tc->opt.min_lr : tc->opt.lr,
           tc->opt.schedule == LR_COSINE ? "cosine" : "constant", tc->opt.warmup, tc->opt.beta1, tc->opt.beta2,
           tc->opt.eps, tc->opt.weight_decay, tc->opt.clip);
    printf("compute:   %d thread%s, %s; %.3g GFLOP per token; MFU against %.1f GFLOP/s (%s)\n", kernels_threads(),
           kernels_threads() == 1 ? "" : "s", kernels_blas_info(), flops_tok * 1e-9, peak, peak_src);
    print_memory();
    if (ck) printf("resumed:   %s at step %d\n", ckpt_dir(ck), start);
    if (tc->init_from) printf("init:      %s\n", tc->init_from);
    fflush(stdout);

    double t_start = timer_now();
    if (start >= tc->steps) printf("nothing to train: the checkpoint is at step %d and --steps is %d\n", start, tc->steps);
    // Gradient traffic per step: the bytes dp sent between the points where a
    // step's reductions are complete (so ZeRO-1/2's parameter allgather,
    // which runs into the next forward, counts with its own step), less
    // what evaluations sent.
    uint64_t sent_mark = bytes_sent(dp);
    for (int step = start; step < tc->steps; step++) {
        double t0 = timer_now();
        if (st.grads) memset(st.grads, 0, st.table.total * sizeof(float));
        double loss_sum = 0;
        float dscale = (float)(1.0 / tokens_per_step);
        for (int k = 0; k < K; k++) {
            loader_next(ld, inp, tgt);
            if (zr) zero_microbatch(zr, k, K);
            if (ddp) ddp_install(ddp, &st, k == K - 1);   // only the last micro-batch synchronises
            loss_sum += stage_forward(&st, inp, tgt, B, T, dscale);
            stage_backward(&st, inp, B, T);
        }
        if (ddp) ddp_install(ddp, &st, 0);
        if (dp) {
            double ls = loss_sum;
            if ((ddp && ddp_finish(ddp, err)) || (zr && zero_finish(zr, err)) ||
                comm_allreduce(stats, &ls, &loss_sum, 1, DT_F64, RED_SUM, err))
                goto done;
        }
        uint64_t grad_sent = bytes_sent(dp) - sent_mark;
        sent_mark += grad_sent;
        double loss = loss_sum / tokens_per_step, norm;
        float lr = lr_at(&tc->opt, step);
        if (zr) {
            // the global norm from the owned gradient pieces; AdamW on the
            // owned pieces (then, in stages 1 and 2, the parameters allgathered)
            double ss = zero_grad_sumsq(zr), ss_all;
            if (comm_allreduce(stats, &ss, &ss_all, 1, DT_F64, RED_SUM, err)) goto done;
            norm = sqrt(ss_all);
            float gscale = (tc->opt.clip > 0 && norm > tc->opt.clip) ? (float)(tc->opt.clip / norm) : 1.0f;
            if (zero_step(zr, &opt, lr, &tc->opt, gscale, err)) goto done;
        } else {
            norm = sqrt(sum_squares(st.grads, st.table.total));
            float gscale = (tc->opt.clip > 0 && norm > tc->opt.clip) ? (float)(tc->opt.clip / norm) : 1.0f;
            adamw_step(&opt, &st.table, st.params, st.grads, lr, &tc->opt, gscale);
        }
        double dt = timer_now() - t0;
        if (!isfinite(loss)) {
            err_set(err, ERR_RUN, "loss became %g at step %d (try a lower --lr)", loss, step + 1);
            goto done;
        }
        int last = step + 1 == tc->steps;
        if ((step + 1) % tc->log_every == 0 || last || step == 0) {
            double tps = tokens_per_step / dt, mfu = tps * flops_tok / (peak * 1e9 * D);
            if (tc->progress) printf("\r\033[K");
            printf("step %5d/%d | loss %.4f | lr %.2e | norm %6.3f | %7.1f ms | %8.0f tok/s | MFU %5.1f%%\n", step + 1,
                   tc->steps, loss, lr, norm, dt * 1e3, tps, 100 * mfu);
            fflush(stdout);
            if (log) {
                fprintf(log, "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"ms\":%.3f,"
                             "\"tokens_per_s\":%.1f,\"mfu\":%.5f,\"mem_peak_bytes\":%zu,\"mem\":{\"params\":%zu,"
                             "\"grads\":%zu,\"optim\":%zu,\"acts\":%zu,\"comm\":%zu,\"workspace\":%zu},"
                             "\"mem_now\":{\"params\":%zu,\"grads\":%zu,\"optim\":%zu,\"acts\":%zu,\"comm\":%zu,"
                             "\"workspace\":%zu},\"grad_comm_bytes\":%llu}\n",
                        step + 1, loss, lr, norm, dt * 1e3, tps, mfu, mem_peak_total(), mem_peak(MEM_PARAMS),
                        mem_peak(MEM_GRADS), mem_peak(MEM_OPTIM), mem_peak(MEM_ACTS), mem_peak(MEM_COMM),
                        mem_peak(MEM_WORKSPACE), mem_current(MEM_PARAMS), mem_current(MEM_GRADS),
                        mem_current(MEM_OPTIM), mem_current(MEM_ACTS), mem_current(MEM_COMM),
                        mem_current(MEM_WORKSPACE), (unsigned long long)grad_sent);
                fflush(log);
            }
        }
        if (tc->exit_after > 0 && step + 1 == tc->exit_after && !last) {
            if (tc->ckpt_dir && save_ckpt(tc, step + 1, &st, &opt, ld, zr, stats, rank, D, err)) goto done;
            printf("stopped:   after step %d of %d (--exit-after); continue with --resume\n", step + 1, tc->steps);
            rc = 0;
            goto done;
        }
        if (val && tc->eval_every > 0 && (step + 1) % tc->eval_every == 0 && !last) {
            if (zr && zero_sync_params(zr, err)) goto done;   // what the step sent is counted with it
            uint64_t b0 = bytes_sent(dp);
            run_eval(tc, &st, val, step + 1, log);
            sent_mark += bytes_sent(dp) - b0;   // ZeRO-3 gathers parameters to evaluate
        }
        if (tc->progress && !last) progress_bar(step + 1, tc->steps, timer_now() - t_start);
        if (tc->ckpt_dir && tc->ckpt_every > 0 && (step + 1) % tc->ckpt_every == 0 && !last &&
            save_ckpt(tc, step + 1, &st, &opt, ld, zr, stats, rank, D, err))
            goto done;
    }
    double total = timer_now() - t_start;
    if (zr && zero_sync_params(zr, err)) goto done;
    if (val) run_eval(tc, &st, val, tc->steps, log);
    if (tc->ckpt_dir && start < tc->steps && save_ckpt(tc, tc->steps, &st, &opt, ld, zr, stats, rank, D, err)) goto done;
    if (start < tc->steps)
        printf("done:      %d steps in %.1f s, %.0f tokens/s average\n", tc->steps - start, total,
               tokens_per_step * (tc->steps - start) / total);
    if (ddp) {
        const CommStats *cs = comm_stats(dp);
        double ar = cs->seconds[OP_ALLREDUCE], waited = ddp_wait_seconds(ddp);
        printf("comm:      gradient allreduce %.2f s in all, %.2f s of it waited for after backward (%.0f%% hidden); "
               "%.1f MB sent per step per rank\n", ar, waited, ar > 0 ? 100 * (1 - waited / ar) : 100.0,
               cs->bytes_sent[OP_ALLREDUCE] / 1e6 / (tc->steps - start > 0 ? tc->steps - start : 1));
    }
    if (zr) {
        const CommStats *cs = comm_stats(dp);
        double t = cs->seconds[OP_REDUCE_SCATTER] + cs->seconds[OP_ALLGATHER], waited = zero_wait_seconds(zr);
        uint64_t sent = cs->bytes_sent[OP_REDUCE_SCATTER] + cs->bytes_sent[OP_ALLGATHER];
        printf("comm:      reduce-scatter %.2f s + allgather %.2f s in all, %.2f s of it waited for (%.0f%% hidden); "
               "%.1f MB sent per step per rank\n", cs->seconds[OP_REDUCE_SCATTER], cs->seconds[OP_ALLGATHER], waited,
               t > 0 ? 100 * (1 - waited / t) : 100.0, sent / 1e6 / (tc->steps - start > 0 ? tc->steps - start : 1));
    }
    print_memory();
    rc = 0;
done:
    if (log) fclose(log);
    free(inp);
    free(tgt);
    ddp_free(ddp);   // first: they wait for collectives still writing into the stage's buffers
    zero_free(zr);
    adamw_free(&opt);
    stage_free(&st);
    comm_free(stats);
    loader_free(ld);
    loader_free(val);
    ckpt_close(ck);
    st_close(&sf);
    tokenizer_close(&tok);
    return rc;
}
