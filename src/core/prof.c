#include "core/prof.h"

#include <string.h>

#include "core/timer.h"
#include "core/trace.h"

static _Thread_local Profile *cur;

void prof_attach(Profile *p) {
    if (p) memset(p, 0, sizeof *p);
    cur = p;
}

Profile *prof_current(void) { return cur; }

double prof_begin(void) { return cur || trace_on() ? timer_now() : 0.0; }

// The row of (kind, m, n, k), added when missing (the last row when full).
static ProfRow *row_of(Profile *p, ProfKind kind, int m, int n, int k) {
    int i = 0;
    while (i < p->n && !(p->row[i].kind == kind && p->row[i].m == m && p->row[i].n == n && p->row[i].k == k)) i++;
    if (i == p->n) {
        if (p->n == PROF_MAX_ROWS) return &p->row[PROF_MAX_ROWS - 1];
        p->row[p->n++] = (ProfRow){.kind = kind, .m = m, .n = n, .k = k};
    }
    return &p->row[i];
}

static void add(ProfKind kind, int m, int n, int k, double seconds, double flops, double bytes) {
    ProfRow *r = row_of(cur, kind, m, n, k);
    r->calls += 1;
    r->seconds += seconds;
    r->flops += flops;
    r->bytes += bytes;
}

void prof_merge(Profile *dst, const Profile *src) {
    for (int i = 0; i < src->n; i++) {
        const ProfRow *s = &src->row[i];
        ProfRow *d = row_of(dst, s->kind, s->m, s->n, s->k);
        d->calls += s->calls;
        d->seconds += s->seconds;
        d->flops += s->flops;
        d->bytes += s->bytes;
    }
}

// A bracket's end, to the profile and the trace alike: one time taken.
static void close_bracket(double t0, ProfKind kind, int m, int n, int k, double flops, double bytes) {
    double t1 = timer_now();
    if (cur) add(kind, m, n, k, t1 - t0, flops, bytes);
    trace_record(t0, t1, kind, m, n, k, flops, bytes);
}

void prof_end(double t0, ProfKind kind, double flops, double bytes) {
    if (t0 != 0.0) close_bracket(t0, kind, 0, 0, 0, flops, bytes);
}

void prof_gemm(double t0, ProfKind kind, int m, int n, int k) {
    if (t0 != 0.0) close_bracket(t0, kind, m, n, k, 2.0 * m * n * k, 0);
}

// Each kind's name in the table and key in the JSONL.
static const struct {
    const char *name, *key;
} kinds[PROF_NKIND] = {
    [PROF_GEMM_FWD] = {"gemm fwd", "gemm_fwd"},
    [PROF_GEMM_DX] = {"gemm dinp", "gemm_dinp"},
    [PROF_GEMM_DW] = {"gemm dweight", "gemm_dweight"},
    [PROF_ATTENTION] = {"attention", "attention"},
    [PROF_LOSS] = {"softmax + loss", "softmax_loss"},
    [PROF_NORM] = {"norms", "norm"},
    [PROF_POINTWISE] = {"pointwise", "pointwise"},
    [PROF_EMBEDDING] = {"embedding", "embedding"},
    [PROF_HALF] = {"16-bit copies", "half"},
    [PROF_QUEUE] = {"queued rows", "queued_rows"},
    [PROF_OPTIMIZER] = {"AdamW", "adamw"},
    [PROF_GRADS] = {"grads zero/norm", "grads"},
    [PROF_LOADER] = {"loader wait", "loader"},
    [PROF_COMM] = {"communication", "comm"},
    [PROF_CKPT] = {"checkpoint I/O", "ckpt"},
    [PROF_IO] = {"disk I/O wait", "io"},
};

const char *prof_kind_name(ProfKind kind) { return kind >= 0 && kind < PROF_NKIND ? kinds[kind].name : "?"; }

const char *prof_kind_key(ProfKind kind) { return kind >= 0 && kind < PROF_NKIND ? kinds[kind].key : "?"; }
