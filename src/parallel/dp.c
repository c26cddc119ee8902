#include "parallel/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/half.h"
#include "parallel/dp_impl.h"
#include "parallel/embsync.h"

static int pool_of_seg(const ParamSeg *g) {
    if (g->layer >= 0) return POOL_BLK0 + (g->layer & 1);
    return g->part == PART_EMBED ? POOL_EMB : POOL_LNF;
}

static int pool_of(const Dp *d, int k) { return pool_of_seg(&d->t->seg[k]); }

// The floats of each pool's buffers (stages 2, 3): its largest segment.
static void pool_caps(const ParamTable *t, size_t caps[NPOOL]) {
    for (int p = 0; p < NPOOL; p++) caps[p] = 0;
    for (int k = 0; k < t->nseg; k++) {
        size_t n = t->seg[k].hi - t->seg[k].lo;
        int p = pool_of_seg(&t->seg[k]);
        if (n > caps[p]) caps[p] = n;
    }
}

// Gradients are reduced across ranks (else no hooks, no buffers).
static int reduces_of(int zero, int ranks) { return zero >= 1 || ranks > 1; }

// The embeddings' segment this table puts first (-1: none).
static int emb_seg(const ParamTable *t) {
    const ParamInfo *pe = ptable_role(t, ROLE_TOK_EMB);
    return pe && pe->part == PART_EMBED ? ptable_seg_of(t, pe->offset) : -1;
}

size_t dp_comm_bytes(const ParamTable *t, const ModelSlice *sl, const Layout *l, int B, int T, int C) {
    int zero = l->zero, bf16 = l->reduce_bf16, reduces = reduces_of(zero, l->dp);
    size_t caps[NPOOL], bytes = 0;
    pool_caps(t, caps);
    for (int p = 0; zero >= 2 && p < NPOOL; p++)   // gradients, gathered parameters, the bf16 copy sent
        bytes += caps[p] * (sizeof(float) + (zero >= 3 ? sizeof(float) : 0) + (bf16 ? sizeof(uint16_t) : 0));
    for (int p = 0; zero >= 3 && layout_offloads_masters(l) && p < NPOOL; p++)   // the 16-bit values gathered
        bytes += caps[p] * sizeof(uint16_t);
    if (bf16 && zero <= 1 && reduces) bytes += t->total * sizeof(uint16_t);
    if (emb_seg(t) >= 0 && slice_is_first(sl) && reduces) bytes += embsync_size(l->dp, (size_t)B * T, C);
    return bytes;
}

// Keeps the first failure (a collective inside a hook cannot return one);
// dp_finish and dp_update report it.
static void keep_failure(Dp *d, const Err *e) {
    if (d->failed) return;
    d->failed = 1;
    d->err = *e;
}

// Waits for r (the time counts as not hidden).
static void wait_req(Dp *d, CommRequest **r) {
    Err e;
    if (comm_wait_timed(r, &d->waited, &e)) keep_failure(d, &e);
}

// 0, or -1 with the first failure of a collective of this module.
static int status(const Dp *d, Err *err) {
    if (!d->failed) return 0;
    if (err) *err = d->err;
    return -1;
}

// The owned gradients of segment k's piece (stages 1-3).
float *dp_piece_grads(const Dp *d, int k) {
    if (d->zero >= 2) return d->gshard + d->soff[k];
    return d->st->grads + d->t->seg[k].lo + (size_t)d->rank * d->sk[k];
}

// Adds every rank's embedding rows to the part [lo, lo + n) of the
// embeddings' gradients, whose values are at g.
static void apply_rows(Dp *d, float *g, size_t lo, size_t n) {
    Err e;
    if (embsync_apply(d->es, g, lo, lo + n, &d->waited, &e)) keep_failure(d, &e);
}

// ---- reductions ----

// Starts the sum of n gradients at g over the ranks: an allreduce in place,
// or (scatter) a reduce-scatter leaving this rank's piece at g + mine.
// Under a bf16 reduction they travel as bf16 through h (n values), and
// reduce_done widens the result back.
static CommRequest *reduce_start(Dp *d, float *g, uint16_t *h, size_t n, int scatter) {
    size_t mine = scatter ? (size_t)d->rank * (n / (size_t)d->d) : 0;
    if (d->reduce == DT_F32)
        return scatter ? comm_ireduce_scatter(d->c, g, g + mine, n, DT_F32, RED_SUM)
                       : comm_iallreduce(d->c, g, g, n, DT_F32, RED_SUM);
    half_pack(PREC_BF16, h, g, n);
    return scatter ? comm_ireduce_scatter(d->c, h, h + mine, n, DT_BF16, RED_SUM)
                   : comm_iallreduce(d->c, h, h, n, DT_BF16, RED_SUM);
}

// Waits for a reduction of reduce_start and widens what it left (n values
// from g, through h) back into fp32.
static void reduce_done(Dp *d, CommRequest **r, float *g, const uint16_t *h, size_t n) {
    if (!*r) return;
    wait_req(d, r);
    if (d->reduce == DT_BF16 && !d->failed) half_unpack(PREC_BF16, g, h, n);
}

// ---- stage 0: buckets ----

// Starts every bucket whose gradients are final: those at offset >= ready.
static void start_from(Dp *d, size_t ready) {
    while (d->next < d->nb && d->b[d->next].lo >= ready) {
        Bucket *b = &d->b[d->next++];
        b->req = reduce_start(d, d->st->grads + b->lo, d->h + b->lo, b->hi - b->lo, 0);
    }
}

static void start_embeddings(Dp *d) {
    if (d->embb.hi > d->embb.lo && !d->embb.req) {
        d->embb.req = reduce_start(d, d->st->grads + d->embb.lo, d->h + d->embb.lo, d->embb.hi - d->embb.lo, 0);
    }
}

// Cuts the gradient buffer into buckets of whole tensors from its end; the
// embeddings' segment (when it starts the buffer) is a bucket of its own.
static int make_buckets(Dp *d) {
    const ParamTable *t = d->t;
    if (!(d->b = calloc((size_t)t->n + 1, sizeof *d->b))) return -1;
    size_t base = 0;
    int first = 0;
    if (d->emb == 0) {
        d->embb = (Bucket){0, t->seg[0].hi, NULL};
        base = t->seg[0].hi;
        first = t->seg[0].n;
    }
    size_t cap = (size_t)(d->bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    size_t hi = t->total;
    for (int k = t->n - 1; k >= first; k--) {
        size_t lo = k == first ? base : t->p[k].offset;
        if (hi - lo >= cap || k == first) {
            d->b[d->nb++] = (Bucket){lo, hi, NULL};
            hi = lo;
        }
    }
    return 0;
}

// ---- stage 3: parameters ----

static void gather_start(Dp *d, int k) {
    Buf *b = &d->pbuf[pool_of(d, k)];
    CHECKF(b->state != BUF_IN_USE, "ZeRO-3: segment %d's buffer is still in use", b->seg);
    wait_req(d, &b->req);   // a prefetch of another segment that was never used
    Err e;
    if (d->poff && !d->failed && dp_pfile_fetch(d, k, &e)) keep_failure(d, &e);   // gathered all the same: the step fails after
    b->seg = k;
    b->state = BUF_PENDING;
    b->req = d->hshard ? comm_iallgather(d->c, d->hshard + d->soff[k], b->h, d->sk[k], DT_BF16)   // 2-byte values, copied
                       : comm_iallgather(d->c, d->pshard + d->soff[k], b->buf, d->sk[k], DT_F32);
}

// Waits for b's gather; 16-bit values gathered are widened into its floats
// (exactly: the passes round them again to the same values).
static void gather_done(Dp *d, Buf *b) {
    wait_req(d, &b->req);
    if (d->poff) dp_pfile_drop(d, b->seg);
    if (d->hshard && !d->failed) half_unpack(d->st->prec, b->buf, b->h, d->sk[b->seg] * (size_t)d->d);
    b->state = BUF_READY;
}

// Waits for parameter gathers that were prefetched; their data stays usable.
static void settle_prefetches(Dp *d) {
    for (int p = 0; p < NPOOL; p++)
        if (d->pbuf[p].state == BUF_PENDING) gather_done(d, &d->pbuf[p]);
}

// ---- the stage's hooks ----

static const float *hook_params(void *ctx, int k, int next) {
    Dp *d = ctx;
    if (d->zero < 3) {   // the whole parameters, once this segment's allgather after the last update has arrived
        wait_req(d, &d->ag[k]);
        return d->st->params ? d->st->params + d->t->seg[k].lo : NULL;   // NULL: the 16-bit copy alone, gathered
    }
    Buf *b = &d->pbuf[pool_of(d, k)];
    if (b->seg != k || (b->state != BUF_PENDING && b->state != BUF_READY)) gather_start(d, k);
    if (b->state == BUF_PENDING) gather_done(d, b);
    b->state = BUF_IN_USE;
    if (next >= 0) {
        Buf *nb = &d->pbuf[pool_of(d, next)];
        int have = nb->seg == next && (nb->state == BUF_PENDING || nb->state == BUF_READY);
        if (!have && nb->state != BUF_IN_USE) gather_start(d, next);
    }
    return b->buf;
}

static void hook_params_done(void *ctx, int k) {
    Dp *d = ctx;
    Buf *b = &d->pbuf[pool_of(d, k)];
    if (b->seg == k && b->state == BUF_IN_USE) b->state = BUF_EMPTY;   // gathered again when next needed
}

// Completes b's reduce-scatter and adds the owned piece into the shard (the
// first micro-batch of a step copies it).
static void reduce_finish(Dp *d, Buf *b) {
    if (b->state != BUF_PENDING) return;
    int k = b->seg;
    size_t mine = (size_t)d->rank * d->sk[k];
    reduce_done(d, &b->req, b->buf + mine, b->h + mine, d->sk[k]);
    const float *src = b->buf + mine;
    float *dst = d->gshard + d->soff[k];
    if (b->micro == 0) memcpy(dst, src, d->sk[k] * sizeof(float));
    else
        for (size_t i = 0; i < d->sk[k]; i++) dst[i] += src[i];
    b->state = BUF_EMPTY;
    // then this micro-batch's embedding rows
    if (k == d->emb && d->es) apply_rows(d, dst, d->t->seg[k].lo + (size_t)d->rank * d->sk[k], d->sk[k]);
}

static float *hook_grads(void *ctx, int k) {
    Dp *d = ctx;
    Buf *b = &d->gbuf[pool_of(d, k)];
    if (b->seg == k && b->state == BUF_IN_USE) return b->buf;
    reduce_finish(d, b);
    memset(b->buf, 0, (d->t->seg[k].hi - d->t->seg[k].lo) * sizeof(float));
    b->seg = k;
    b->state = BUF_IN_USE;
    return b->buf;
}

static void hook_grads_done(void *ctx, int k) {
    Dp *d = ctx;
    if (d->zero == 0) {   // the last micro-batch's buckets; the embeddings' right after the output head
        if (!d->last) return;
        if (k == d->emb && d->embb.hi > 0) start_embeddings(d);
        else start_from(d, d->t->seg[k].lo);
        return;
    }
    size_t n = (size_t)d->d * d->sk[k];
    if (d->zero == 1) {   // whole gradients: reduce the last micro-batch's, in place
        if (d->last) d->rs[k] = reduce_start(d, d->st->grads + d->t->seg[k].lo, d->h + d->t->seg[k].lo, n, 1);
        return;
    }
    Buf *b = &d->gbuf[pool_of(d, k)];
    CHECK(b->seg == k && b->state == BUF_IN_USE);
    b->state = BUF_PENDING;
    b->micro = d->micro;
    b->req = reduce_start(d, b->buf, b->h, n, 1);
}

// The embedding lookup's rows travel separately whenever this micro-batch
// reduces (stages 0 and 1: the last one; stages 2, 3: every one).
static int hook_take_rows(void *ctx) {
    Dp *d = ctx;
    return d->es && (d->zero >= 2 || d->last);
}

static void hook_rows(void *ctx, const int *tokens, const float *dres, int B, int T) {
    Dp *d = ctx;
    embsync_hook(d->es, tokens, dres, B, T);
}

// ---- setup ----

int dp_init(Dp **out, const Layout *l, double bucket_mb, Stage *st, Err *err) {
    *out = NULL;
    Comm *c = l->dpg;
    int zero = l->zero;
    CommDtype reduce = l->reduce_bf16 ? DT_BF16 : DT_F32;
    CHECKF(c || zero == 0, "ZeRO-%d needs a communicator", zero);
    const ParamTable *t = &st->table;
    Dp *d = calloc(1, sizeof *d);
    if (!d) return err_set(err, ERR_RUN, "out of memory");
    d->c = c;
    d->zero = zero;
    d->rank = c ? comm_rank(c) : 0;
    d->d = c ? comm_size(c) : 1;
    d->owner = layout_dp_owner(l);
    d->counts_tp = layout_counts_tp_replicated(l);
    d->bucket_mb = bucket_mb;
    CHECKF(reduce == DT_F32 || reduce == DT_BF16, "gradients reduced in %s", comm_dtype_name(reduce));
    d->reduce = reduce;
    d->st = st;
    d->t = t;
    d->npc = zero ? t->nseg : 1;
    d->sk = calloc((size_t)t->nseg + 1, sizeof *d->sk);
    d->soff = calloc((size_t)t->nseg + 1, sizeof *d->soff);
    d->rs = calloc((size_t)t->nseg + 1, sizeof *d->rs);
    d->ag = calloc((size_t)t->nseg + 1, sizeof *d->ag);
    if (!d->sk || !d->soff || !d->rs || !d->ag) goto oom;
    d->emb = emb_seg(t);
    // the table puts the embeddings first: stage 0's buckets rely on it
    CHECKF(d->emb <= 0, "the embeddings are segment %d, not the first", d->emb);
    // the lookup's rows travel whenever gradients are reduced across ranks
    int reduces = reduces_of(zero, d->d);
    d->shared = -1;
    if (d->emb >= 0 && slice_is_first(&st->slice) && reduces && embsync_init(&d->es, c, st, err)) { dp_free(d); return -1; }
    for (int k = 0; k < t->nseg; k++) {   // stage 0's one piece is the whole buffer (S = total)
        size_t n = t->seg[k].hi - t->seg[k].lo;
        size_t per = zero ? (size_t)d->d : 1;
        CHECKF(n % per == 0, "segment %d (%zu floats) is not padded to %zu ranks", k, n, per);
        d->sk[k] = n / per;
        d->soff[k] = d->S;
        d->S += d->sk[k];
    }
    CHECK(zero || d->S == t->total);
    size_t caps[NPOOL];
    pool_caps(t, caps);
    for (int p = 0; p < NPOOL; p++) {
        if (zero >= 2) d->gbuf[p].cap = caps[p];
        d->gbuf[p].seg = d->pbuf[p].seg = -1;
        if (zero >= 3) d->pbuf[p].cap = d->gbuf[p].cap;
        if ((d->gbuf[p].cap && !(d->gbuf[p].buf = mem_alloc(MEM_COMM, d->gbuf[p].cap * sizeof(float)))) ||
            (d->pbuf[p].cap && !(d->pbuf[p].buf = mem_alloc(MEM_COMM, d->pbuf[p].cap * sizeof(float)))))
            goto oom;
        if (reduce == DT_BF16 && d->gbuf[p].cap &&
            !(d->gbuf[p].h = mem_alloc(MEM_COMM, d->gbuf[p].cap * sizeof(uint16_t))))
            goto oom;
        if (layout_offloads_masters(l) && d->pbuf[p].cap &&
            !(d->pbuf[p].h = mem_alloc(MEM_COMM, d->pbuf[p].cap * sizeof(uint16_t))))
            goto oom;
    }
    if (zero >= 2 && !(d->gshard = mem_alloc(MEM_GRADS, d->S * sizeof(float)))) goto oom;
    d->masters = layout_offloads_masters(l);
    d->poff = l->offload == OFFLOAD_PARAMS;   // the shard is mapped from a file at dp_offload_open
    CHECKF(!d->poff || zero >= 3, "--offload params without ZeRO-3");
    d->prefetch = 2;
    if (zero >= 3 && !d->poff && !d->masters && !(d->pshard = mem_alloc(MEM_PARAMS, d->S * sizeof(float)))) goto oom;
    if (zero >= 3 && !d->poff && d->masters && !(d->hshard = mem_alloc(MEM_PARAMS16, d->S * sizeof(uint16_t)))) goto oom;
    if (zero == 0 && d->d > 1 && make_buckets(d)) goto oom;
    if (reduce == DT_BF16 && zero <= 1 && reduces && !(d->h = mem_alloc(MEM_COMM, t->total * sizeof(uint16_t)))) goto oom;
    if (reduces) {
        StageHooks h = {.ctx = d, .grads_done = hook_grads_done};
        if (zero >= 1) h.params = hook_params;
        if (zero >= 2) h.grads = hook_grads;
        if (zero >= 3) h.params_done = hook_params_done;
        if (d->es) { h.take_rows = hook_take_rows; h.rows = hook_rows; }
        stage_set_hooks(st, &h);
    }
    stage_fuse_norm(st, d->d == 1 && zero == 0);   // the gradients the passes leave are the ones the norm reads
    *out = d;
    return 0;
oom:
    dp_free(d);
    return err_set(err, ERR_RUN, "out of memory setting up data parallelism (ZeRO-%d)", zero);
}

void dp_free(Dp *d) {
    if (!d) return;
    // after an error some collectives may still be queued on the stage's buffers
    if (d->embb.req) wait_req(d, &d->embb.req);
    for (int i = 0; i < d->nb; i++) wait_req(d, &d->b[i].req);
    for (int p = 0; p < NPOOL; p++) {
        wait_req(d, &d->pbuf[p].req);
        wait_req(d, &d->gbuf[p].req);
        mem_free(d->pbuf[p].buf);
        mem_free(d->gbuf[p].buf);
        mem_free(d->gbuf[p].h);
        mem_free(d->pbuf[p].h);
    }
    mem_free(d->h);
    for (int k = 0; d->rs && k < d->t->nseg; k++) wait_req(d, &d->rs[k]);
    for (int k = 0; d->ag && k < d->t->nseg; k++) wait_req(d, &d->ag[k]);
    embsync_free(d->es);
    offload_close(d->off);   // a mapped shard (--offload params) with it
    if (d->st->hooks.ctx == d) stage_set_hooks(d->st, NULL);
    if (!d->poff) {   // else the offload's mapping, gone with it
        mem_free(d->pshard);
        mem_free(d->hshard);
    }
    mem_free(d->gshard);
    free(d->b);
    free(d->sk);
    free(d->soff);
    free(d->rs);
    free(d->ag);
    free(d->useg);
    free(d->uoff);
    free(d->un);
    free(d->ufirst);
    free(d->pcrc);
    free(d);
}

// ---- the step ----

void dp_microbatch(Dp *d, int k, int K) {
    d->micro = k;
    d->last = k == K - 1;
}

int dp_finish(Dp *d, Err *err) {
    if (d->zero == 0) {
        if (d->d == 1) return 0;
        start_embeddings(d);
        start_from(d, 0);
        float *g = d->st->grads;
        reduce_done(d, &d->embb.req, g + d->embb.lo, d->h + d->embb.lo, d->embb.hi - d->embb.lo);
        for (int i = 0; i < d->nb; i++) reduce_done(d, &d->b[i].req, g + d->b[i].lo, d->h + d->b[i].lo, d->b[i].hi - d->b[i].lo);
        d->next = 0;
        if (!d->failed && d->es) apply_rows(d, d->st->grads, 0, d->embb.hi);
        return status(d, err);
    }
    for (int k = 0; k < d->t->nseg; k++) {
        size_t at = d->t->seg[k].lo + (size_t)d->rank * d->sk[k];
        if (d->zero == 1) reduce_done(d, &d->rs[k], d->st->grads + at, d->h + at, d->sk[k]);
    }
    if (d->zero == 1 && d->es) apply_rows(d, dp_piece_grads(d, d->emb), d->t->seg[d->emb].lo + (size_t)d->rank * d->sk[d->emb],
                                          d->sk[d->emb]);
    for (int p = 0; p < NPOOL; p++) reduce_finish(d, &d->gbuf[p]);
    settle_prefetches(d);
    return status(d, err);
}

// The sums of squares the stage's products took as they wrote their
// gradients last (stage_fuse_norm), where the gradients are the ones the
// norm reads: one rank's own, whole (no DP, no sharding); else NULL.
static const double *taken_sums(const Dp *d) { return d->d == 1 && d->zero == 0 ? stage_grad_sumsq(d->st) : NULL; }

// sum_squares, its n floats counted into *nread.
static double squares(const float *g, size_t n, size_t *nread) {
    *nread += n;
    return sum_squares(g, n);
}

// The sum of squares of the gradients g of the flat range [lo, hi) that
// belong to tensors split over TP: every TP rank holds the replicated ones
// alike, and only TP rank 0 counts those.
static double split_sumsq(const Dp *d, const float *g, size_t lo, size_t hi, size_t *nread) {
    const double *tsq = taken_sums(d);
    double s = 0;
    for (int i = 0; i < d->t->n; i++) {
        const ParamInfo *p = &d->t->p[i];
        size_t a = p->offset > lo ? p->offset : lo, b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (p->shard_dim < 0 || a >= b) continue;
        int taken = tsq && tsq[i] >= 0 && a == p->offset && b == p->offset + p->numel;
        s += taken ? tsq[i] : squares(g + (a - lo), b - a, nread);
    }
    return s;
}

double dp_grad_sumsq(const Dp *d, size_t *nread) {
    if (!d->owner) return 0.0;
    // a shared copy is the embeddings' segment, the first: start after it
    size_t from = d->shared >= 0 ? d->t->seg[d->shared].hi : 0;
    if (!d->counts_tp) {
        double s = 0;
        for (int k = 0; k < d->npc; k++) {
            if (d->zero && k == d->shared) continue;
            DpPiece p = dp_piece((Dp *)d, k);
            size_t lo = p.lo > from || d->zero ? p.lo : from;
            s += split_sumsq(d, p.grads + (lo - p.lo), lo, p.hi, nread);
        }
        return s;
    }
    if (d->zero == 0) return sum_squares_taken(d->t, d->st->grads + from, from, d->t->total, taken_sums(d), nread);
    if (d->zero >= 2) return squares(d->gshard + (from ? d->sk[0] : 0), d->S - (from ? d->sk[0] : 0), nread);
    double s = 0;
    for (int k = 0; k < d->t->nseg; k++)
        if (k != d->shared) s += squares(dp_piece_grads(d, k), d->sk[k], nread);
    return s;
}

int dp_grad_sumsq_covers(const Dp *d) { return d->owner && d->counts_tp && d->shared < 0; }

void dp_set_shared(Dp *d, int seg) {
    CHECKF(seg == 0 && d->t->seg[0].part == PART_EMBED, "a shared segment is the embeddings' (segment 0), not %d", seg);
    d->shared = seg;
}

float *dp_owned_grads(Dp *d, int seg, size_t *n) {
    if (d->zero == 0) {
        *n = d->t->seg[seg].hi - d->t->seg[seg].lo;
        return d->st->grads + d->t->seg[seg].lo;
    }
    *n = d->sk[seg];
    return dp_piece_grads(d, seg);
}

int dp_npieces(const Dp *d) { return d->npc; }
size_t dp_shard_floats(const Dp *d) { return d->S; }

DpPiece dp_piece(Dp *d, int k) {
    if (d->zero == 0) return (DpPiece){0, d->t->total, 0, d->st->params, d->st->grads};
    size_t lo = d->t->seg[k].lo + (size_t)d->rank * d->sk[k];
    float *p = d->zero >= 3 ? (d->pshard ? d->pshard + d->soff[k] : NULL) : d->st->params ? d->st->params + lo : NULL;
    return (DpPiece){lo, lo + d->sk[k], d->soff[k], p, dp_piece_grads(d, k)};
}

int dp_update(Dp *d, AdamW *opt, float lr, const AdamWConfig *o, float grad_scale, Err *err) {
    if (d->off) return dp_update_offloaded(d, opt, lr, o, grad_scale, err);
    // Without sharding the update covers every parameter: it writes the
    // stage's 16-bit copy as it goes, and the passes need not make it again.
    Precision prec16 = PREC_FP32;
    uint16_t *p16 = d->zero == 0 ? stage_params16(d->st, &prec16) : NULL;
    adamw_begin_step(opt);
    for (int k = 0; k < d->npc; k++) {
        DpPiece p = dp_piece(d, k);
        OptPiece op = {p.lo, p.hi, p.params, p.grads, p.off, p16 ? p16 + p.lo : NULL, prec16, NULL, NULL};
        adamw_update_pieces(opt, d->t, &op, 1, lr, o, grad_scale);
        // every rank gets each updated piece back, in place, as soon as it
        // is updated; the next forward waits for each segment in turn
        if (d->zero == 1 || d->zero == 2)
            d->ag[k] = comm_iallgather(d->c, p.params, d->st->params + d->t->seg[k].lo, d->sk[k], DT_F32);
    }
    if (p16) stage_params16_current(d->st);
    else stage_params_changed(d->st);
    return dp_skip(d, err);
}

int dp_skip(Dp *d, Err *err) {
    if (d->zero >= 3) {
        // gathered copies are stale now; the next forward's first segment
        // starts gathering at once
        for (int p = 0; p < NPOOL; p++) d->pbuf[p].state = BUF_EMPTY;
        if (!d->failed) gather_start(d, 0);
    }
    return status(d, err);
}

int dp_sync_params(Dp *d, Err *err) {
    if (d->zero == 0) return 0;
    for (int k = 0; k < d->t->nseg; k++) wait_req(d, &d->ag[k]);
    settle_prefetches(d);
    return status(d, err);
}

// Fills segment k through buf and keeps the owned piece at dst;
// buf is zeroed before and after (it is scratch that the step expects clean).
static int fill_piece(Dp *d, int k, float *buf, float *dst, DpFill fill, void *ctx) {
    size_t n = d->t->seg[k].hi - d->t->seg[k].lo;
    memset(buf, 0, n * sizeof(float));
    int rc = fill(ctx, k, buf);
    if (rc == 0) memcpy(dst, buf + (size_t)d->rank * d->sk[k], d->sk[k] * sizeof(float));
    memset(buf, 0, n * sizeof(float));
    return rc;
}

float *dp_scratch(Dp *d, int k) {
    return d->zero >= 2 ? d->gbuf[pool_of(d, k)].buf : d->st->grads + d->t->seg[k].lo;
}

int dp_fill_params(Dp *d, DpFill fill, void *ctx, Err *err) {
    if (d->masters) return dp_fill_offloaded(d, OFF_MASTER, fill, ctx, err);
    int rc = 0;
    for (int k = 0; k < d->t->nseg && rc == 0; k++)
        if (!(rc = d->zero < 3 ? fill(ctx, k, d->st->params + d->t->seg[k].lo)
                               : fill_piece(d, k, dp_scratch(d, k), d->pshard + d->soff[k], fill, ctx)) && d->poff)
            dp_pfile_seg_written(d, k);
    stage_params_changed(d->st);
    return rc;
}

int dp_fill_moment(Dp *d, AdamW *opt, int which, DpFill fill, void *ctx, Err *err) {
    if (d->off) return dp_fill_offloaded(d, which ? OFF_V : OFF_M, fill, ctx, err);
    float *shard = which ? opt->v : opt->m;
    int rc = 0;
    for (int k = 0; k < d->t->nseg && rc == 0; k++)
        rc = d->zero == 0 ? fill(ctx, k, shard + d->t->seg[k].lo)
                          : fill_piece(d, k, dp_scratch(d, k), shard + d->soff[k], fill, ctx);
    return rc;
}
