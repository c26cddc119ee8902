#include "parallel/ddp.h"

#include <stdlib.h>

#include "core/timer.h"
#include "parallel/embsync.h"

typedef struct {
    size_t lo, hi;          // float range of the flat buffer
    CommRequest *req;
} Bucket;

struct Ddp {
    Comm *c;
    const ParamTable *t;
    float *grads;
    Bucket *b;              // b[0] is the last range of the buffer
    int n, next;            // buckets, next to start
    Bucket emb;             // the embeddings' bucket (hi = 0: none)
    EmbSync *es;
    double waited;
};

int ddp_init(Ddp **out, Comm *dp, const Stage *st, double bucket_mb, Err *err) {
    *out = NULL;
    const ParamTable *t = &st->table;
    Ddp *d = calloc(1, sizeof *d);
    if (!d || !(d->b = calloc((size_t)t->n + 1, sizeof *d->b))) {
        free(d);
        return err_set(err, ERR_RUN, "out of memory");
    }
    d->c = dp;
    d->t = t;
    d->grads = st->grads;
    // the embeddings' segment, when it starts the buffer and holds wte
    const ParamInfo *pe = ptable_find(t, "wte.weight");
    size_t base = 0;
    int first = 0;
    if (pe && pe->offset == 0 && t->seg[0].layer == -1) {
        d->emb = (Bucket){0, t->seg[0].hi, NULL};
        base = t->seg[0].hi;
        first = t->seg[0].n;
        if (embsync_init(&d->es, dp, st, err)) { ddp_free(d); return -1; }
    }
    size_t cap = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    size_t hi = t->total;
    for (int k = t->n - 1; k >= first; k--) {   // tensors from the end, whole tensors per bucket
        size_t lo = k == first ? base : t->p[k].offset;
        if (hi - lo >= cap || k == first) {
            d->b[d->n++] = (Bucket){lo, hi, NULL};
            hi = lo;
        }
    }
    *out = d;
    return 0;
}

void ddp_free(Ddp *d) {
    if (!d) return;
    // after an error some allreduces may still be queued on the gradients
    if (d->emb.req) comm_wait(d->emb.req, NULL);
    for (int i = 0; i < d->n; i++)
        if (d->b[i].req) comm_wait(d->b[i].req, NULL);
    embsync_free(d->es);
    free(d->b);
    free(d);
}

int ddp_nbuckets(const Ddp *d) { return d->n + (d->emb.hi > 0); }
double ddp_wait_seconds(const Ddp *d) { return d->waited; }

// Starts every bucket whose gradients are final: those at offset >= ready.
static void start_from(Ddp *d, size_t ready) {
    while (d->next < d->n && d->b[d->next].lo >= ready) {
        Bucket *b = &d->b[d->next++];
        b->req = comm_iallreduce(d->c, d->grads + b->lo, d->grads + b->lo, b->hi - b->lo, DT_F32, RED_SUM);
    }
}

static void start_embeddings(Ddp *d) {
    if (d->emb.hi > 0 && !d->emb.req)
        d->emb.req = comm_iallreduce(d->c, d->grads, d->grads, d->emb.hi, DT_F32, RED_SUM);
}

// The grads_done hook: segment k's gradients are done. The embeddings' one
// comes right after the output head (the lookup's rows travel apart).
static void hook_done(void *ctx, int k) {
    Ddp *d = ctx;
    if (k == 0 && d->emb.hi > 0) start_embeddings(d);
    else start_from(d, d->t->seg[k].lo);
}

void ddp_install(Ddp *d, Stage *st, int sync) {
    st->hooks = sync ? (StageHooks){.ctx = d, .grads_done = hook_done} : (StageHooks){0};
    st->embed_grads = sync && d->es ? embsync_hook : NULL;
    st->embed_grads_ctx = sync ? d->es : NULL;
}

int ddp_finish(Ddp *d, Err *err) {
    start_embeddings(d);
    start_from(d, 0);
    double t0 = timer_now();
    int rc = 0;
    Err e;
    if (d->emb.req && comm_wait(d->emb.req, &e)) {
        rc = -1;
        if (err) *err = e;
    }
    d->emb.req = NULL;
    for (int i = 0; i < d->n; i++) {
        if (comm_wait(d->b[i].req, &e) && rc == 0) {
            rc = -1;
            if (err) *err = e;
        }
        d->b[i].req = NULL;
    }
    d->next = 0;
    d->waited += timer_now() - t0;
    if (rc == 0 && d->es && embsync_apply(d->es, d->grads, 0, d->emb.hi, &d->waited, err)) rc = -1;
    return rc;
}
