#include "parallel/ddp.h"

#include <stdlib.h>

#include "core/timer.h"

typedef struct {
    size_t lo, hi;          // float range of the flat buffer
    CommRequest *req;
} Bucket;

struct Ddp {
    Comm *c;
    float *grads;
    Bucket *b;              // b[0] is the last range of the buffer
    int n, next;            // buckets, next to start
    double waited;
};

int ddp_init(Ddp **out, Comm *dp, const ParamTable *t, float *grads, double bucket_mb, Err *err) {
    *out = NULL;
    Ddp *d = calloc(1, sizeof *d);
    if (!d || !(d->b = calloc((size_t)t->n + 1, sizeof *d->b))) {
        free(d);
        return err_set(err, ERR_RUN, "out of memory");
    }
    d->c = dp;
    d->grads = grads;
    size_t cap = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
    if (cap < 1) cap = 1;
    size_t hi = t->total;
    for (int k = t->n - 1; k >= 0; k--) {   // tensors from the end, whole tensors per bucket
        size_t lo = t->p[k].offset;
        if (hi - lo >= cap || k == 0) {
            d->b[d->n++] = (Bucket){lo, hi, NULL};
            hi = lo;
        }
    }
    *out = d;
    return 0;
}

void ddp_free(Ddp *d) {
    if (!d) return;
    free(d->b);
    free(d);
}

int ddp_nbuckets(const Ddp *d) { return d->n; }
double ddp_wait_seconds(const Ddp *d) { return d->waited; }

void ddp_ready(void *ctx, size_t ready) {
    Ddp *d = ctx;
    while (d->next < d->n && d->b[d->next].lo >= ready) {
        Bucket *b = &d->b[d->next++];
        b->req = comm_iallreduce(d->c, d->grads + b->lo, d->grads + b->lo, b->hi - b->lo, DT_F32, RED_SUM);
    }
}

int ddp_finish(Ddp *d, Err *err) {
    ddp_ready(d, 0);
    double t0 = timer_now();
    int rc = 0;
    for (int i = 0; i < d->n; i++) {
        Err e;
        if (comm_wait(d->b[i].req, &e) && rc == 0) {
            rc = -1;
            if (err) *err = e;
        }
        d->b[i].req = NULL;
    }
    d->next = 0;
    d->waited += timer_now() - t0;
    return rc;
}
