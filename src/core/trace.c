#include "core/trace.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

// The rows ("threads") of a process in the viewer: the work of the one
// thread that records, by stream, so that each stream's events sit on a
// line of their own (they never overlap: the brackets are leaves of one
// thread, one after another).
enum { TID_STEPS, TID_COMPUTE, TID_COMM, TID_LOADER, TID_CKPT, TID_N };
static const char *const tid_names[TID_N] = {"steps", "compute", "communication", "loader", "checkpoint I/O"};

typedef struct {
    int64_t t0, t1;            // nanoseconds from the origin
    int step;
    short kind;                // a ProfKind, or -1: the step itself
    short layer;               // -1: none
    int m, n, k;               // GEMM shape
    double flops, bytes;
    const char *op;            // a collective's operation (a static string), or NULL
    char group[16];            // its communicator's name
} Event;

struct Trace {
    int first, last;
    double origin;
    size_t n, dropped, cap;
    Event *ev;                 // cap of them
};

static _Thread_local Trace *att;
static _Thread_local int on;           // att is set and the step is inside its range
static _Thread_local int cur_step, cur_layer = -1;
static _Thread_local const char *c_op, *c_group;
static _Thread_local double c_bytes;

Trace *trace_create(int first, int last, size_t cap, double origin, Err *err) {
    if (!cap) cap = TRACE_MAX_EVENTS;
    Trace *t = calloc(1, sizeof *t);
    if (t) t->ev = mem_alloc(MEM_WORKSPACE, cap * sizeof *t->ev);
    if (!t || !t->ev) {
        free(t);
        err_set(err, ERR_RUN, "out of memory for a trace of %zu events", cap);
        return NULL;
    }
    t->cap = cap;
    t->first = first;
    t->last = last;
    t->origin = origin;
    return t;
}

void trace_free(Trace *t) {
    if (!t) return;
    if (att == t) trace_attach(NULL);
    mem_free(t->ev);
    free(t);
}

void trace_attach(Trace *t) {
    att = t;
    on = 0;
}

void trace_step(int step) {
    cur_step = step;
    c_op = c_group = NULL;
    on = att && step >= att->first && step <= att->last;
}

int trace_on(void) { return on; }

void trace_layer(int layer) { cur_layer = layer; }

void trace_comm(const char *op, const char *group, double bytes) {
    if (!on) return;
    c_op = op;
    c_group = group;
    c_bytes = bytes;
}

static Event *add(double t0, double t1) {
    Trace *t = att;
    if (t->n == t->cap) {
        t->dropped++;
        return NULL;
    }
    Event *e = &t->ev[t->n++];
    // rounding both ends to whole nanoseconds keeps one thread's events apart
    *e = (Event){.t0 = llround((t0 - t->origin) * 1e9), .t1 = llround((t1 - t->origin) * 1e9), .step = cur_step,
                 .layer = -1};
    return e;
}

void trace_record(double t0, double t1, ProfKind kind, int m, int n, int k, double flops, double bytes) {
    const char *op = kind == PROF_COMM ? c_op : NULL, *group = op ? c_group : NULL;
    double cb = c_bytes;
    c_op = c_group = NULL;
    if (!on) return;
    Event *e = add(t0, t1);
    if (!e) return;
    e->kind = (short)kind;
    e->layer = (short)cur_layer;
    e->m = m;
    e->n = n;
    e->k = k;
    e->flops = flops;
    e->bytes = op ? cb : bytes;
    e->op = op;
    if (group) snprintf(e->group, sizeof e->group, "%s", group);
}

void trace_span(double t0, double t1, int step) {
    if (!on) return;
    Event *e = add(t0, t1);
    if (!e) return;
    e->kind = -1;
    e->step = step;
}

size_t trace_count(const Trace *t) { return t->n; }
size_t trace_dropped(const Trace *t) { return t->dropped; }
size_t trace_cap(const Trace *t) { return t->cap; }

static int tid_of(int kind) {
    switch (kind) {
    case -1: return TID_STEPS;
    case PROF_COMM: return TID_COMM;
    case PROF_LOADER: return TID_LOADER;
    case PROF_CKPT: return TID_CKPT;
    default: return TID_COMPUTE;
    }
}

// Microseconds with three decimals, exactly from whole nanoseconds.
static void micros(JsonBuf *b, int64_t ns) {
    char s[40];
    snprintf(s, sizeof s, "%s%lld.%03lld", ns < 0 ? "-" : "", (long long)(llabs(ns) / 1000), (long long)(llabs(ns) % 1000));
    jb_raw(b, s);
}

static void meta(JsonBuf *b, int pid, int tid, const char *what, const char *key, const char *name, int index) {
    jb_obj_begin(b);
    jb_key(b, "ph"); jb_str(b, "M");
    jb_key(b, "name"); jb_str(b, what);
    jb_key(b, "pid"); jb_int(b, pid);
    jb_key(b, "tid"); jb_int(b, tid);
    jb_key(b, "args"); jb_obj_begin(b);
    jb_key(b, key);
    if (name) jb_str(b, name); else jb_int(b, index);
    jb_obj_end(b);
    jb_obj_end(b);
    jb_raw(b, "\n");   // one event a line
}

static void event(JsonBuf *b, const Event *e, int pid) {
    char name[96], shape[48] = "", lay[16] = "";
    if (e->layer >= 0) snprintf(lay, sizeof lay, " L%d", e->layer);
    if (e->kind >= 0 && e->kind <= PROF_GEMM_DW)   // C(M,N) = A(M,K)·B(K,N)
        snprintf(shape, sizeof shape, "%d×%d · %d×%d", e->m, e->k, e->k, e->n);
    if (e->kind < 0) snprintf(name, sizeof name, "step %d", e->step);
    else if (e->op) snprintf(name, sizeof name, "%s %s%s", e->op, e->group, lay);
    else snprintf(name, sizeof name, "%s%s%s%s", prof_kind_name(e->kind), lay, shape[0] ? " " : "", shape);
    jb_obj_begin(b);
    jb_key(b, "ph"); jb_str(b, "X");
    jb_key(b, "name"); jb_str(b, name);
    jb_key(b, "cat"); jb_str(b, e->kind < 0 ? "step" : prof_kind_key(e->kind));
    jb_key(b, "pid"); jb_int(b, pid);
    jb_key(b, "tid"); jb_int(b, tid_of(e->kind));
    jb_key(b, "ts"); micros(b, e->t0);
    jb_key(b, "dur"); micros(b, e->t1 - e->t0);
    jb_key(b, "args"); jb_obj_begin(b);
    jb_key(b, "step"); jb_int(b, e->step);
    if (e->layer >= 0) { jb_key(b, "layer"); jb_int(b, e->layer); }
    if (shape[0]) {
        jb_key(b, "shape"); jb_str(b, shape);
        jb_key(b, "m"); jb_int(b, e->m);
        jb_key(b, "n"); jb_int(b, e->n);
        jb_key(b, "k"); jb_int(b, e->k);
    }
    if (e->op) {
        jb_key(b, "op"); jb_str(b, e->op);
        jb_key(b, "group"); jb_str(b, e->group);
    }
    if (e->flops > 0) { jb_key(b, "flops"); jb_num(b, e->flops); }
    if (e->bytes > 0) { jb_key(b, "bytes"); jb_num(b, e->bytes); }
    jb_obj_end(b);
    jb_obj_end(b);
    jb_raw(b, "\n");
}

void trace_json(const Trace *t, int pid, const char *process_name, JsonBuf *b) {
    meta(b, pid, 0, "process_name", "name", process_name, 0);
    meta(b, pid, 0, "process_sort_index", "sort_index", NULL, pid);
    for (int i = 0; i < TID_N; i++) {
        meta(b, pid, i, "thread_name", "name", tid_names[i], 0);
        meta(b, pid, i, "thread_sort_index", "sort_index", NULL, i);
    }
    for (size_t i = 0; i < t->n; i++) event(b, &t->ev[i], pid);
}
