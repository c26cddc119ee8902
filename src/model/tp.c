#include "model/tp.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/crossentropy.h"

struct Tp {
    Comm *c;
    int n, rank, sp;
    int rows;          // capacity of the loss statistics
    float *mine;       // (rows,2) this rank's statistics
    float *all;        // (n,rows,2) every rank's
    float *mx;         // (rows) row maxima
    int failed;
    Err err;
};

int tp_init(Tp **out, Comm *c, int sp, int rows, Err *err) {
    *out = NULL;
    Tp *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, ERR_RUN, "out of memory");
    t->c = c;
    t->n = comm_size(c);
    t->rank = comm_rank(c);
    t->sp = sp;
    t->rows = rows;
    t->mine = mem_alloc(MEM_WORKSPACE, (size_t)rows * 2 * sizeof(float));
    t->all = mem_alloc(MEM_WORKSPACE, (size_t)t->n * rows * 2 * sizeof(float));
    t->mx = mem_alloc(MEM_WORKSPACE, (size_t)rows * sizeof(float));
    if (!t->mine || !t->all || !t->mx) {
        tp_free(t);
        return err_set(err, ERR_RUN, "out of memory for the tensor-parallel loss statistics");
    }
    *out = t;
    return 0;
}

void tp_free(Tp *t) {
    if (!t) return;
    mem_free(t->mine);
    mem_free(t->all);
    mem_free(t->mx);
    free(t);
}

static void keep(Tp *t, int rc, const Err *e) {
    if (rc && !t->failed) {
        t->failed = 1;
        t->err = *e;
    }
}

void tp_gather(Tp *t, float *x, int N, int C) {
    if (!t || !t->sp) return;
    size_t k = (size_t)N / (size_t)t->n * (size_t)C;
    Err e;
    keep(t, comm_allgather(t->c, x + (size_t)t->rank * k, x, k, DT_F32, &e), &e);
}

float *tp_reduce(Tp *t, float *x, int N, int C) {
    if (!t) return x;
    Err e;
    size_t n = (size_t)N * (size_t)C;
    if (!t->sp) {
        keep(t, comm_allreduce(t->c, x, x, n, DT_F32, RED_SUM, &e), &e);
        return x;
    }
    float *mine = x + (size_t)t->rank * (n / (size_t)t->n);
    keep(t, comm_reduce_scatter(t->c, x, mine, n, DT_F32, RED_SUM, &e), &e);
    return mine;
}

void tp_sum(Tp *t, float *x, size_t n) {
    if (!t) return;
    Err e;
    keep(t, comm_allreduce(t->c, x, x, n, DT_F32, RED_SUM, &e), &e);
}

// Gathers k floats per rank from t->mine into t->all.
static void exchange(Tp *t, size_t k) {
    Err e;
    keep(t, comm_allgather(t->c, t->mine, t->all, k, DT_F32, &e), &e);
}

void tp_crossentropy(Tp *t, float *logits, float *losses, const int *targets, int N, int V, int Vl, int v0,
                     float dscale, int out16) {
    if (!t) {
        crossentropy_forward(logits, losses, targets, N, V, Vl, dscale, out16);
        return;
    }
    CHECKF(N <= t->rows, "tp_crossentropy: %d rows, room for %d", N, t->rows);
    int Vr = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;   // real columns in this slice
    size_t n = (size_t)t->n, rows = (size_t)N;
    // the row maxima, over the ranks in rank order
    crossentropy_local_max(logits, t->mine, targets, N, Vr, Vl);
    exchange(t, rows);
    for (size_t i = 0; i < rows; i++) {
        float m = t->all[i];
        for (size_t r = 1; r < n; r++) m = t->all[r * rows + i] > m ? t->all[r * rows + i] : m;
        t->mx[i] = m;
    }
    // the sums of exponentials and the target's logit, added in rank order
    crossentropy_local_sum(logits, t->mine, t->mx, targets, N, Vr, Vl, v0, dscale != 0.0f);
    exchange(t, 2 * rows);
    for (size_t i = 0; i < 2 * rows; i++) {
        float s = t->all[i];
        for (size_t r = 1; r < n; r++) s += t->all[r * 2 * rows + i];
        t->mine[i] = s;
    }
    crossentropy_finish(logits, losses, t->mine, t->mx, targets, N, Vr, Vl, v0, dscale, out16);
}

int tp_status(const Tp *t, Err *err) {
    if (!t || !t->failed) return 0;
    if (err) *err = t->err;
    return -1;
}
