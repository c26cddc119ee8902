#include "parallel/zero.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/timer.h"
#include "parallel/embsync.h"

enum { POOL_EMB, POOL_LNF, POOL_BLK0, POOL_BLK1, NPOOL };
enum { BUF_EMPTY, BUF_PENDING, BUF_READY, BUF_IN_USE };

// A pooled buffer: one segment's parameters (gathered) or gradients (to be
// reduce-scattered) at a time.
typedef struct {
    float *buf;
    size_t cap;
    int seg, state;
    int micro;           // gradients: the micro-batch they are from
    CommRequest *req;
} Buf;

struct Zero {
    Comm *c;
    int stage, rank, d;
    Stage *st;
    const ParamTable *t;
    size_t *sk, *soff;       // per segment: piece floats, offset in the shard
    size_t S;
    float *pshard;           // stage 3: owned parameters
    float *gshard;           // stages 2, 3: owned gradients
    Buf pbuf[NPOOL];         // stage 3: gathered parameters
    Buf gbuf[NPOOL];         // stages 2, 3: gradients being written or reduced
    CommRequest **rs;        // stage 1: per segment, its in-place reduce-scatter
    CommRequest **ag;        // stages 1, 2: per segment, the allgather of the updated parameters
    int emb;                 // the embeddings' segment (-1: none)
    EmbSync *es;             // the embedding lookup's gradient rows
    int micro, last;         // the current micro-batch; it is the last of the step
    int failed;
    Err err;
    double waited;
};

unsigned zero_stage_flags(int stage) {
    return (stage >= 2 ? STAGE_NO_GRADS : 0) | (stage >= 3 ? STAGE_NO_PARAMS : 0);
}

static int pool_of(const Zero *z, int k) {
    const ParamSeg *g = &z->t->seg[k];
    if (g->layer >= 0) return POOL_BLK0 + (g->layer & 1);
    return k == 0 ? POOL_EMB : POOL_LNF;
}

// Keeps the first failure (a collective inside a hook cannot return one);
// zero_finish and zero_step report it.
static void keep_failure(Zero *z, const Err *e) {
    if (z->failed) return;
    z->failed = 1;
    z->err = *e;
}

// Waits for r (the time counts as not hidden).
static void wait_req(Zero *z, CommRequest **r) {
    if (!*r) return;
    double t0 = timer_now();
    Err e;
    if (comm_wait(*r, &e)) keep_failure(z, &e);
    *r = NULL;
    z->waited += timer_now() - t0;
}

// The owned gradients of segment k's piece.
static float *piece_grads(const Zero *z, int k) {
    if (z->stage >= 2) return z->gshard + z->soff[k];
    return z->st->grads + z->t->seg[k].lo + (size_t)z->rank * z->sk[k];
}

// Adds every rank's embedding rows to the owned piece of the embeddings'
// segment, whose values are at g.
static void apply_rows(Zero *z, float *g) {
    size_t lo = z->t->seg[z->emb].lo + (size_t)z->rank * z->sk[z->emb];
    Err e;
    if (embsync_apply(z->es, g, lo, lo + z->sk[z->emb], &z->waited, &e)) keep_failure(z, &e);
}

// 0, or -1 with the first failure of a collective of this module.
static int status(const Zero *z, Err *err) {
    if (!z->failed) return 0;
    if (err) *err = z->err;
    return -1;
}

// ---- stage 3: parameters ----

static void gather_start(Zero *z, int k) {
    Buf *b = &z->pbuf[pool_of(z, k)];
    CHECKF(b->state != BUF_IN_USE, "ZeRO-3: segment %d's buffer is still in use", b->seg);
    wait_req(z, &b->req);   // a prefetch of another segment that was never used
    b->seg = k;
    b->state = BUF_PENDING;
    b->req = comm_iallgather(z->c, z->pshard + z->soff[k], b->buf, z->sk[k], DT_F32);
}

// Waits for parameter gathers that were prefetched; their data stays usable.
static void settle_prefetches(Zero *z) {
    for (int p = 0; p < NPOOL; p++)
        if (z->pbuf[p].state == BUF_PENDING) {
            wait_req(z, &z->pbuf[p].req);
            z->pbuf[p].state = BUF_READY;
        }
}

static const float *hook_params(void *ctx, int k, int next) {
    Zero *z = ctx;
    Buf *b = &z->pbuf[pool_of(z, k)];
    if (b->seg != k || (b->state != BUF_PENDING && b->state != BUF_READY)) gather_start(z, k);
    wait_req(z, &b->req);
    b->state = BUF_IN_USE;
    if (next >= 0) {
        Buf *nb = &z->pbuf[pool_of(z, next)];
        int have = nb->seg == next && (nb->state == BUF_PENDING || nb->state == BUF_READY);
        if (!have && nb->state != BUF_IN_USE) gather_start(z, next);
    }
    return b->buf;
}

static void hook_params_done(void *ctx, int k) {
    Zero *z = ctx;
    Buf *b = &z->pbuf[pool_of(z, k)];
    if (b->seg == k && b->state == BUF_IN_USE) b->state = BUF_EMPTY;   // gathered again when next needed
}

// Stages 1, 2: the whole parameters, once this segment's allgather after
// the last update has arrived (it overlaps the next forward).
static const float *hook_params_whole(void *ctx, int k, int next) {
    Zero *z = ctx;
    (void)next;
    wait_req(z, &z->ag[k]);
    return z->st->params + z->t->seg[k].lo;
}

// ---- stages 2, 3: gradients ----

// Completes b's reduce-scatter and adds the owned piece into the shard (the
// first micro-batch of a step copies it).
static void reduce_finish(Zero *z, Buf *b) {
    if (b->state != BUF_PENDING) return;
    wait_req(z, &b->req);
    int k = b->seg;
    const float *src = b->buf + (size_t)z->rank * z->sk[k];
    float *dst = z->gshard + z->soff[k];
    if (b->micro == 0) memcpy(dst, src, z->sk[k] * sizeof(float));
    else
        for (size_t i = 0; i < z->sk[k]; i++) dst[i] += src[i];
    b->state = BUF_EMPTY;
    if (k == z->emb && z->es) apply_rows(z, dst);   // then this micro-batch's embedding rows
}

static float *hook_grads(void *ctx, int k) {
    Zero *z = ctx;
    Buf *b = &z->gbuf[pool_of(z, k)];
    if (b->seg == k && b->state == BUF_IN_USE) return b->buf;
    reduce_finish(z, b);
    memset(b->buf, 0, (z->t->seg[k].hi - z->t->seg[k].lo) * sizeof(float));
    b->seg = k;
    b->state = BUF_IN_USE;
    return b->buf;
}

static void hook_grads_done(void *ctx, int k) {
    Zero *z = ctx;
    size_t n = (size_t)z->d * z->sk[k], mine = (size_t)z->rank * z->sk[k];
    if (z->stage == 1) {   // whole gradients: reduce the last micro-batch's, in place
        if (z->last) {
            float *g = z->st->grads + z->t->seg[k].lo;
            z->rs[k] = comm_ireduce_scatter(z->c, g, g + mine, n, DT_F32, RED_SUM);
        }
        return;
    }
    Buf *b = &z->gbuf[pool_of(z, k)];
    CHECK(b->seg == k && b->state == BUF_IN_USE);
    b->state = BUF_PENDING;
    b->micro = z->micro;
    b->req = comm_ireduce_scatter(z->c, b->buf, b->buf + mine, n, DT_F32, RED_SUM);
}

// ---- setup ----

int zero_init(Zero **out, Comm *dp, int stage, Stage *st, Err *err) {
    *out = NULL;
    const ParamTable *t = &st->table;
    int d = comm_size(dp);
    Zero *z = calloc(1, sizeof *z);
    if (!z) return err_set(err, ERR_RUN, "out of memory");
    z->c = dp;
    z->stage = stage;
    z->rank = comm_rank(dp);
    z->d = d;
    z->st = st;
    z->t = t;
    z->sk = calloc((size_t)t->nseg + 1, sizeof *z->sk);
    z->soff = calloc((size_t)t->nseg + 1, sizeof *z->soff);
    z->rs = calloc((size_t)t->nseg + 1, sizeof *z->rs);
    z->ag = calloc((size_t)t->nseg + 1, sizeof *z->ag);
    if (!z->sk || !z->soff || !z->rs || !z->ag) goto oom;
    const ParamInfo *pe = ptable_find(t, "wte.weight");
    z->emb = pe && t->seg[0].layer == -1 && pe->offset < t->seg[0].hi ? 0 : -1;
    if (z->emb == 0 && embsync_init(&z->es, dp, st, err)) { zero_free(z); return -1; }
    for (int k = 0; k < t->nseg; k++) {
        size_t n = t->seg[k].hi - t->seg[k].lo;
        CHECKF(n % (size_t)d == 0, "segment %d (%zu floats) is not padded to %d ranks", k, n, d);
        z->sk[k] = n / (size_t)d;
        z->soff[k] = z->S;
        z->S += z->sk[k];
        if (stage >= 2) {
            int p = pool_of(z, k);
            if (n > z->gbuf[p].cap) z->gbuf[p].cap = n;
        }
    }
    for (int p = 0; p < NPOOL; p++) {
        z->gbuf[p].seg = z->pbuf[p].seg = -1;
        if (stage >= 3) z->pbuf[p].cap = z->gbuf[p].cap;
        if ((z->gbuf[p].cap && !(z->gbuf[p].buf = mem_alloc(MEM_COMM, z->gbuf[p].cap * sizeof(float)))) ||
            (z->pbuf[p].cap && !(z->pbuf[p].buf = mem_alloc(MEM_COMM, z->pbuf[p].cap * sizeof(float)))))
            goto oom;
    }
    if (stage >= 2 && !(z->gshard = mem_alloc(MEM_GRADS, z->S * sizeof(float)))) goto oom;
    if (stage >= 3 && !(z->pshard = mem_alloc(MEM_PARAMS, z->S * sizeof(float)))) goto oom;
    st->hooks = (StageHooks){.ctx = z, .grads_done = hook_grads_done, .params = hook_params_whole};
    if (stage >= 2) { st->hooks.grads = hook_grads; }
    if (stage >= 3) { st->hooks.params = hook_params; st->hooks.params_done = hook_params_done; }
    *out = z;
    return 0;
oom:
    zero_free(z);
    return err_set(err, ERR_RUN, "out of memory setting up ZeRO-%d", stage);
}

void zero_free(Zero *z) {
    if (!z) return;
    for (int p = 0; p < NPOOL; p++) {
        wait_req(z, &z->pbuf[p].req);
        wait_req(z, &z->gbuf[p].req);
        mem_free(z->pbuf[p].buf);
        mem_free(z->gbuf[p].buf);
    }
    for (int k = 0; z->rs && k < z->t->nseg; k++) wait_req(z, &z->rs[k]);
    for (int k = 0; z->ag && k < z->t->nseg; k++) wait_req(z, &z->ag[k]);
    embsync_free(z->es);
    if (z->st->hooks.ctx == z) z->st->hooks = (StageHooks){0};
    if (z->st->embed_grads_ctx == z->es) z->st->embed_grads = NULL;
    mem_free(z->pshard);
    mem_free(z->gshard);
    free(z->sk);
    free(z->soff);
    free(z->rs);
    free(z->ag);
    free(z);
}

size_t zero_shard_floats(const Zero *z) { return z->S; }
float *zero_param_shard(Zero *z) { return z->pshard; }
double zero_wait_seconds(const Zero *z) { return z->waited; }

size_t zero_pool_bytes(const Zero *z) {
    size_t b = 0;
    for (int p = 0; p < NPOOL; p++) b += (z->pbuf[p].cap + z->gbuf[p].cap) * sizeof(float);
    return b + (z->es ? embsync_bytes(z->es) : 0);
}

void zero_piece(const Zero *z, int k, size_t *lo, size_t *hi, size_t *off) {
    *lo = z->t->seg[k].lo + (size_t)z->rank * z->sk[k];
    *hi = *lo + z->sk[k];
    *off = z->soff[k];
}

float *zero_piece_params(Zero *z, int k) {
    if (z->stage >= 3) return z->pshard + z->soff[k];
    return z->st->params + z->t->seg[k].lo + (size_t)z->rank * z->sk[k];
}

const float *zero_piece_grads(const Zero *z, int k) { return piece_grads(z, k); }

// ---- the step ----

void zero_microbatch(Zero *z, int k, int K) {
    z->micro = k;
    z->last = k == K - 1;
    // the embedding lookup's rows travel separately whenever this micro-batch
    // reduces (stage 1: the last one; stages 2, 3: every one)
    int defer = z->es && (z->stage >= 2 || z->last);
    z->st->embed_grads = defer ? embsync_hook : NULL;
    z->st->embed_grads_ctx = defer ? z->es : NULL;
}

int zero_finish(Zero *z, Err *err) {
    for (int k = 0; k < z->t->nseg; k++) wait_req(z, &z->rs[k]);
    if (z->stage == 1 && z->es) apply_rows(z, piece_grads(z, z->emb));
    for (int p = 0; p < NPOOL; p++) reduce_finish(z, &z->gbuf[p]);
    settle_prefetches(z);
    return status(z, err);
}

double zero_grad_sumsq(const Zero *z) {
    if (z->stage >= 2) return sum_squares(z->gshard, z->S);
    double s = 0;
    for (int k = 0; k < z->t->nseg; k++) s += sum_squares(zero_piece_grads(z, k), z->sk[k]);
    return s;
}

int zero_step(Zero *z, AdamW *opt, float lr, const OptimConfig *o, float grad_scale, Err *err) {
    int n = z->t->nseg;
    OptPiece *pc = calloc((size_t)n + 1, sizeof *pc);
    if (!pc) return err_set(err, ERR_RUN, "out of memory");
    for (int k = 0; k < n; k++) {
        size_t off;
        zero_piece(z, k, &pc[k].lo, &pc[k].hi, &off);
        pc[k].params = zero_piece_params(z, k);
        pc[k].grads = zero_piece_grads(z, k);
        pc[k].opt_off = off;
    }
    adamw_begin_step(opt);
    if (z->stage >= 3) {
        adamw_update_pieces(opt, z->t, pc, n, lr, o, grad_scale);
        // gathered copies are stale now; the next forward's first segment
        // starts gathering at once
        for (int p = 0; p < NPOOL; p++) z->pbuf[p].state = BUF_EMPTY;
        if (!z->failed) gather_start(z, 0);
    } else {
        // every rank gets each updated piece back, in place, as soon as it is
        // updated; the next forward waits for each segment in turn
        for (int k = 0; k < n; k++) {
            adamw_update_pieces(opt, z->t, &pc[k], 1, lr, o, grad_scale);
            z->ag[k] = comm_iallgather(z->c, pc[k].params, z->st->params + z->t->seg[k].lo, z->sk[k], DT_F32);
        }
    }
    free(pc);
    return status(z, err);
}

int zero_sync_params(Zero *z, Err *err) {
    for (int k = 0; k < z->t->nseg; k++) wait_req(z, &z->ag[k]);
    settle_prefetches(z);
    return status(z, err);
}

int zero_fill_shard(Zero *z, float *shard, int (*fill)(void *ctx, int k, float *buf), void *ctx) {
    int rc = 0;
    for (int k = 0; k < z->t->nseg && rc == 0; k++) {
        // scratch for the whole segment: a pooled buffer, or in stage 1 the
        // gradient buffer (zeroed again before every step)
        size_t n = z->t->seg[k].hi - z->t->seg[k].lo;
        float *buf = z->stage >= 2 ? z->gbuf[pool_of(z, k)].buf : z->st->grads + z->t->seg[k].lo;
        memset(buf, 0, n * sizeof(float));
        rc = fill(ctx, k, buf);
        if (rc == 0) memcpy(shard + z->soff[k], buf + (size_t)z->rank * z->sk[k], z->sk[k] * sizeof(float));
        memset(buf, 0, n * sizeof(float));
    }
    return rc;
}
