// kernels/matmul_defer — the queues behind matmul_defer (kernels/matmul.h):
// a weight gradient's rows copied, micro-batch after micro-batch, until
// one product takes them all. One queue per gradient, keyed by its
// address, kept (MEM_WORKSPACE) from one step to the next.
//
// A product gathers g micro-batches (g = the limit's rows over a
// micro-batch's). The gradients do not all take theirs at the same
// micro-batch: each queue has a phase, 0 .. g-1, and multiplies where
// (micro-batch + phase) % g is g-1, so every micro-batch's backward runs
// about 1/g of the stage's weight-gradient work, as it would without the
// queues. A pipeline stage whose backward ran all of it every g-th
// micro-batch would hold its neighbour waiting there: gpt2-124m at pp=2,
// 8 micro-batches of 64 rows, waited 100 → 245 ms a step for 100 ms of
// products saved. Phases go to queues as they are made, each to the
// phase with the fewest weights so far.
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/prof.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"

typedef struct Queue {
    float *dweight;   // the gradient
    int OC, C, bf16, rows, phase;
    void *dout, *inp;   // (rows, OC) and (rows, C), 2 or 4 bytes a value
    size_t bytes_dout, bytes_inp;
} Queue;

enum { QUEUES_MAX = 256, PHASES_MAX = 128 };
static _Thread_local Queue g_q[QUEUES_MAX];
static _Thread_local int g_nq, g_mb = -1;
static _Thread_local double g_load[PHASES_MAX];   // the weights (OC·C) of the queues of each phase

int matmul_defer(int mb) {
    int was = g_mb;
    g_mb = mb < 0 && mb != MATMUL_DEFER_ALL ? -1 : mb;
    return was;
}

int defer_next(float **dweight, int *OC, int *C, int *bf16, WRows *r) {
    for (int i = 0; i < g_nq; i++) {
        Queue *q = &g_q[i];
        if (!q->rows) continue;
        *dweight = q->dweight, *OC = q->OC, *C = q->C, *bf16 = q->bf16;
        *r = (WRows){q->dout, q->inp, q->OC, q->rows, q->bf16, q->bf16};
        q->rows = 0;
        return 1;
    }
    return 0;
}

int matmul_deferred(void) {
    int n = 0;
    for (int i = 0; i < g_nq; i++) n += g_q[i].rows > 0;
    return n;
}

int defer_holds(const float *w) {
    for (int i = 0; i < g_nq; i++)
        if (g_q[i].rows > 0 && w >= g_q[i].dweight && w < g_q[i].dweight + (size_t)g_q[i].OC * g_q[i].C) return 1;
    return 0;
}

// An empty queue for dweight's operands: its own from an earlier step, else
// an empty one of the same shape (its buffers fit), else a new one, else
// any empty one; NULL where every queue holds rows. One that changes hands
// takes the phase of fewest weights among g.
static Queue *queue_for(float *dweight, int OC, int C, int bf16, int g) {
    Queue *same = NULL, *any = NULL;
    for (int i = 0; i < g_nq; i++) {
        Queue *q = &g_q[i];
        if (q->rows) continue;
        if (q->dweight == dweight && q->OC == OC && q->C == C && q->bf16 == bf16) return q;
        if (!same && q->OC == OC && q->C == C && q->bf16 == bf16) same = q;
        if (!any) any = q;
    }
    Queue *q = same ? same : g_nq < QUEUES_MAX ? &g_q[g_nq++] : any;
    if (!q) return NULL;
    if (q->dweight) g_load[q->phase] -= (double)q->OC * q->C;
    int p = 0;
    for (int k = 1; k < g && k < PHASES_MAX; k++)
        if (g_load[k] < g_load[p]) p = k;
    g_load[p] += (double)OC * C;
    q->dweight = dweight, q->OC = OC, q->C = C, q->bf16 = bf16, q->phase = p;
    return q;
}

// n rows of cols values, src's ld apart (fp32, or bf16 where src16), to
// dst's (cols apart) in the queue's form.
static void copy_rows(void *dst, int bf16, const void *src, int src16, int ld, int n, int cols) {
    for (int i = 0; i < n; i++) {
        size_t at = (size_t)i * cols, from = (size_t)i * ld;
        if (!bf16) memcpy((float *)dst + at, (const float *)src + from, (size_t)cols * sizeof(float));
        else if (src16) memcpy((uint16_t *)dst + at, (const uint16_t *)src + from, (size_t)cols * sizeof(uint16_t));
        else bf16_round_row((uint16_t *)dst + at, (const float *)src + from, (size_t)cols);
    }
}

// *buf (have bytes, the first keep of them in use) grown to bytes, what it held kept.
static int grow_kept(void **buf, size_t *have, size_t keep, size_t bytes) {
    if (*have >= bytes) return 0;
    void *p = mem_alloc(MEM_WORKSPACE, bytes);
    if (!p) return -1;
    if (keep) memcpy(p, *buf, keep);
    mem_free(*buf);
    *buf = p, *have = bytes;
    return 0;
}

// r's rows after the queued ones, room made for cap rows at least; -1 with
// the queue as it was where its memory is wanting.
static int append(Queue *q, const WRows *r, int cap) {
    size_t es = q->bf16 ? sizeof(uint16_t) : sizeof(float);
    if (cap < q->rows + r->rows) cap = q->rows + r->rows;
    if (grow_kept(&q->dout, &q->bytes_dout, (size_t)q->rows * q->OC * es, (size_t)cap * q->OC * es) ||
        grow_kept(&q->inp, &q->bytes_inp, (size_t)q->rows * q->C * es, (size_t)cap * q->C * es))
        return -1;
    double t0 = prof_begin();
    copy_rows((char *)q->dout + (size_t)q->rows * q->OC * es, q->bf16, r->dout, r->dout16, r->ldo, r->rows, q->OC);
    copy_rows((char *)q->inp + (size_t)q->rows * q->C * es, q->bf16, r->inp, r->inp16, q->C, r->rows, q->C);
    q->rows += r->rows;
    prof_end(t0, PROF_QUEUE, 0, (double)r->rows * (q->OC + q->C) * es * 2);
    return 0;
}

int defer_take(float *dweight, int OC, int C, int limit, int bf16, WRows *r) {
    Queue *q = NULL;
    for (int i = 0; i < g_nq && !q; i++)
        if (g_q[i].dweight == dweight && g_q[i].rows > 0) q = &g_q[i];
    int queued = q ? q->rows : 0, g = r->rows > 0 ? limit / r->rows : 0;
    if (g_mb != -1 && g >= 2 && queued + 2 * r->rows <= limit) {
        if (!q) q = queue_for(dweight, OC, C, bf16, g);
        // room for the limit's rows at once: the call that empties the queue adds its own
        if (q && (g_mb == MATMUL_DEFER_ALL || (g_mb + q->phase) % g != g - 1) && !append(q, r, limit)) return 1;
    }
    if (!queued) return 0;
    CHECKF(q->OC == OC && q->C == C && q->bf16 == bf16, "a queued weight gradient (%d×%d) met a product of another form",
           OC, C);
    CHECKF(!append(q, r, limit), "out of memory for a weight gradient's queued rows (%d + %d of %d×%d)", q->rows,
           r->rows, OC, C);
    *r = (WRows){q->dout, q->inp, OC, q->rows, bf16, bf16};
    q->rows = 0;
    return 0;
}
