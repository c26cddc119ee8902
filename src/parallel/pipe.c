#include "parallel/pipe.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/timer.h"

// A communicator and the rank to talk to in it (c NULL: no such neighbour).
typedef struct {
    Comm *c;
    int peer;
} Link;

struct Pipe {
    PipeSchedule sched;
    int P, rank, M, V;
    Stage *st;
    // one communicator per neighbour pair and direction (NULL at the ends);
    // in each the lower stage is rank 0
    Comm *act_in, *act_out;     // activations from the previous stage, to the next
    Comm *grad_in, *grad_out;   // their gradients from the next stage, to the previous
    // interleaved: the last stage's chunk v hands on to the first stage's
    // chunk v + 1 (the first stage is rank 0 in both)
    Comm *wrap_act, *wrap_grad;
    Comm *tied;                 // the first and the last stage (a tied head, P > 1), else NULL
    PipeOp *ops;
    int nops;
    int *slot_of;               // (V, M): the slot holding chunk v's micro-batch m (-1: none)
    int *free_slots, nfree;
    CommRequest **act_req;      // per slot: its output's send in flight
    float *gbuf;                // ngrad buffers of gcap floats: the gradients being sent back, used in turn
    size_t gcap;
    int ngrad, gnext;
    CommRequest **grad_req;     // per buffer: its send in flight
    double waited;
};

int pipe_schedule_parse(const char *s, PipeSchedule *out, Err *err) {
    if (!strcmp(s, "1f1b")) *out = PIPE_1F1B;
    else if (!strcmp(s, "gpipe")) *out = PIPE_GPIPE;
    else return err_set(err, ERR_USAGE, "--schedule: expected 1f1b or gpipe, got '%s'", s);
    return 0;
}

const char *pipe_schedule_name(PipeSchedule s) { return s == PIPE_GPIPE ? "gpipe" : "1f1b"; }

int pipe_check(PipeSchedule s, int P, int M, int V, const int *layers, Err *err) {
    if (V > 1 && P < 2)
        return err_set(err, ERR_USAGE, "--virtual-stages %d interleaves the chunks of several pipeline stages: it needs "
                       "--pp 2 or more", V);
    if (V > 1 && s != PIPE_1F1B)
        return err_set(err, ERR_USAGE, "--virtual-stages %d: the interleaved schedule is 1F1B's (leave out --schedule %s)",
                       V, pipe_schedule_name(s));
    if (P > 1 && s == PIPE_1F1B && M < P)
        return err_set(err, ERR_USAGE, "--micro-batches %d is below --pp %d: the 1F1B schedule needs at least one micro-batch "
                       "per stage to fill the pipeline (more shrink the bubble)", M, P);
    if (V > 1 && layers)
        return err_set(err, ERR_USAGE, "--pp-layers: the interleaved schedule (--virtual-stages %d) splits the layers evenly; "
                       "leave one of them out", V);
    if (V > 1 && M % P)
        return err_set(err, ERR_USAGE, "--micro-batches %d is not a multiple of --pp %d: the interleaved schedule runs the "
                       "micro-batches in groups of one per stage", M, P);
    return 0;
}

// The k-th forward (bwd 0) or backward of the interleaved schedule: group
// k / (P·V) of P micro-batches, in it chunk after chunk (backward: from the
// last), in each chunk the group's micro-batches in order.
static PipeOp interleaved_op(int k, int bwd, int P, int V) {
    int in = k % (P * V), chunk = in / P;
    return (PipeOp){bwd, bwd ? V - 1 - chunk : chunk, k / (P * V) * P + in % P};
}

int pipe_schedule(PipeSchedule s, int P, int rank, int M, int V, PipeOp *ops) {
    CHECKF(pipe_check(s, P, M, V, NULL, NULL) == 0, "schedule %s, P %d, M %d, V %d", pipe_schedule_name(s), P, M, V);
    int n = 0;
    if (s == PIPE_GPIPE) {
        for (int m = 0; m < M; m++) ops[n++] = (PipeOp){0, 0, m};
        for (int m = 0; m < M; m++) ops[n++] = (PipeOp){1, 0, m};
        return n;
    }
    // 1F1B: warm-up forwards, then one forward and one backward, then the
    // remaining backwards; with one chunk, op k is micro-batch k
    int total = M * V, warm = V == 1 ? P - rank - 1 : 2 * (P - rank - 1) + (V - 1) * P;
    if (warm > total) warm = total;
    for (int k = 0; k < warm; k++) ops[n++] = interleaved_op(k, 0, P, V);
    for (int k = 0; k < total - warm; k++) {
        ops[n++] = interleaved_op(warm + k, 0, P, V);
        ops[n++] = interleaved_op(k, 1, P, V);
    }
    for (int k = total - warm; k < total; k++) ops[n++] = interleaved_op(k, 1, P, V);
    return n;
}

// The most micro-batch chunks a stage's n operations hold at once
// (forwarded, not yet backwarded): pipe_init checks layout_in_flight by it.
static int held_most(const PipeOp *ops, int n) {
    int held = 0, most = 0;
    for (int i = 0; i < n; i++) {
        held += ops[i].bwd ? -1 : 1;
        if (held > most) most = held;
    }
    return most;
}

size_t pipe_comm_bytes(const Layout *l, int M, int stage, size_t boundary) {
    return (size_t)pipe_grad_buffers(l->schedule, l->pp, stage, M, layout_chunks(l)) * boundary * sizeof(float);
}

double pipe_bubble(int P, int M, int V) { return (double)(P - 1) / ((double)V * M + P - 1); }

int pipe_grad_buffers(PipeSchedule s, int P, int rank, int M, int V) {
    if (P == 1 || (V == 1 && rank == 0)) return 0;   // nothing goes back
    // every stage's operations, and where each (stage, bwd, chunk, mb) is in its list
    int n = 2 * M * V, dst = (rank + P - 1) % P;   // dst: the stage the gradients go to
    PipeOp *ops = malloc((size_t)P * n * sizeof *ops);
    int *at = malloc((size_t)P * n * sizeof *at), *late = malloc((size_t)P * n * sizeof *late), *next = calloc((size_t)P, sizeof *next);
    CHECKF(ops && at && late && next, "out of memory");
    for (int q = 0; q < P; q++) {
        pipe_schedule(s, P, q, M, V, ops + (size_t)q * n);
        for (int i = 0; i < n; i++) {
            PipeOp o = ops[(size_t)q * n + i];
            at[(size_t)q * n + (o.bwd * V + o.chunk) * M + o.mb] = i;
        }
    }
    // late[q·n + i]: the last of dst's operations that (q, i) depends on,
    // itself included (−1: none), found by running the schedules in an
    // order that respects every dependence
    for (int progress = 1; progress;) {
        progress = 0;
        for (int q = 0; q < P; q++)
            for (; next[q] < n; next[q]++) {
                int i = next[q];
                PipeOp o = ops[(size_t)q * n + i];
                int j = o.chunk * P + q, from = o.bwd ? j + 1 : j - 1, l = i ? late[(size_t)q * n + i - 1] : -1;
                if (from >= 0 && from < P * V) {   // the message it receives, from virtual stage `from`
                    int fq = from % P, fi = at[(size_t)fq * n + (o.bwd * V + from / P) * M + o.mb];
                    if (fi >= next[fq]) break;   // not run yet
                    if (late[(size_t)fq * n + fi] > l) l = late[(size_t)fq * n + fi];
                }
                late[(size_t)q * n + i] = q == dst ? i : l;
                progress = 1;
            }
    }
    for (int q = 0; q < P; q++) CHECKF(next[q] == n, "the schedule of stage %d deadlocks", q);
    // this stage's gradient sends, in order, and where dst takes each (in
    // order too): at each, those taken after the last operation of dst it
    // depends on (late only grows along a stage's list) are still open
    int most = 0, sent = 0, taken = 0, *recv_at = malloc((size_t)n * sizeof *recv_at);
    CHECKF(recv_at, "out of memory");
    for (int i = 0; i < n; i++) {
        PipeOp o = ops[(size_t)rank * n + i];
        int j = o.chunk * P + rank;
        if (!o.bwd || j == 0) continue;
        while (taken < sent && recv_at[taken] <= late[(size_t)rank * n + i]) taken++;
        if (sent - taken + 1 > most) most = sent - taken + 1;
        recv_at[sent++] = at[(size_t)dst * n + (V + (j - 1) / P) * M + o.mb];
    }
    free(recv_at);
    free(ops);
    free(at);
    free(late);
    free(next);
    return most;
}

// ---- setup ----

int pipe_init(Pipe **out, const Layout *l, int M, Stage *st, Err *err) {
    *out = NULL;
    Comm *ppg = l->ppg;
    PipeSchedule s = l->schedule;
    Pipe *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, ERR_RUN, "out of memory");
    p->sched = s;
    p->P = ppg ? comm_size(ppg) : 1;
    p->rank = ppg ? comm_rank(ppg) : 0;
    p->M = M;
    p->V = st->chunks;
    p->st = st;
    size_t vm = (size_t)p->V * (size_t)M;
    p->ops = calloc(2 * vm, sizeof *p->ops);
    p->slot_of = malloc(vm * sizeof *p->slot_of);
    p->free_slots = calloc((size_t)st->slots, sizeof *p->free_slots);
    p->act_req = calloc((size_t)st->slots, sizeof *p->act_req);
    if (!p->ops || !p->slot_of || !p->free_slots || !p->act_req) {
        pipe_free(p);
        return err_set(err, ERR_RUN, "out of memory");
    }
    if (pipe_check(s, p->P, M, p->V, NULL, err)) { pipe_free(p); return -1; }
    p->ngrad = pipe_grad_buffers(s, p->P, p->rank, M, p->V);
    p->gcap = stage_boundary_floats(st, st->B, st->T);
    p->grad_req = calloc((size_t)p->ngrad + 1, sizeof *p->grad_req);
    if (p->ngrad) p->gbuf = mem_alloc(MEM_COMM, pipe_comm_bytes(l, M, p->rank, p->gcap));
    if (!p->grad_req || (p->ngrad && !p->gbuf)) {
        pipe_free(p);
        return err_set(err, ERR_RUN, "out of memory for the pipeline's gradient send buffers");
    }
    p->nops = pipe_schedule(s, p->P, p->rank, M, p->V, p->ops);
    int need = held_most(p->ops, p->nops);
    CHECKF(st->slots >= need && need == layout_in_flight(l, M, p->rank), "the stage has %d slots, the schedule needs %d",
           st->slots, need);
    if (p->P == 1) { *out = p; return 0; }
    // neighbour pairs (2j, 2j+1) from one pair of splits, (2j+1, 2j+2) from
    // another; a rank's group of one (an end of the chain) is dropped
    int r = p->rank, P = p->P;
    Comm *c[4] = {0};
    int rc = comm_split(ppg, r / 2, r, "pp_act", &c[0], err) || comm_split(ppg, r / 2, r, "pp_grad", &c[1], err) ||
             comm_split(ppg, (r + 1) / 2, r, "pp_act", &c[2], err) || comm_split(ppg, (r + 1) / 2, r, "pp_grad", &c[3], err);
    if (!rc) {
        int nx = r % 2 ? 2 : 0, pv = r % 2 ? 0 : 2;   // the splits holding the pair with the next and the previous stage
        if (r + 1 < P) { p->act_out = c[nx]; p->grad_in = c[nx + 1]; c[nx] = c[nx + 1] = NULL; }
        if (r > 0) { p->act_in = c[pv]; p->grad_out = c[pv + 1]; c[pv] = c[pv + 1] = NULL; }
    }
    for (int k = 0; k < 4; k++) comm_free(c[k]);
    // the two ends: the interleaved schedule's wrap-around, and the tied embedding
    int ends = r == 0 || r == P - 1;
    Comm *e[3] = {0};
    if (!rc && p->V > 1)
        rc = comm_split(ppg, ends ? 0 : 1, r, "pp_act_wrap", &e[0], err) ||
             comm_split(ppg, ends ? 0 : 1, r, "pp_grad_wrap", &e[1], err);
    if (!rc && arch_of(&st->cfg)->tied_head) rc = comm_split(ppg, ends ? 0 : 1, r, "embedding", &e[2], err);
    if (ends) {
        p->wrap_act = e[0];
        p->wrap_grad = e[1];
        p->tied = e[2];
    } else {
        for (int k = 0; k < 3; k++) comm_free(e[k]);
    }
    if (rc) { pipe_free(p); return -1; }
    *out = p;
    return 0;
}

void pipe_free(Pipe *p) {
    if (!p) return;
    Err e;
    for (int k = 0; p->act_req && k < p->st->slots; k++)   // after an error: sends still queued
        if (p->act_req[k]) comm_wait(p->act_req[k], &e);
    for (int k = 0; p->grad_req && k < p->ngrad; k++)
        if (p->grad_req[k]) comm_wait(p->grad_req[k], &e);
    mem_free(p->gbuf);
    comm_free(p->act_in);
    comm_free(p->act_out);
    comm_free(p->grad_in);
    comm_free(p->grad_out);
    comm_free(p->wrap_act);
    comm_free(p->wrap_grad);
    comm_free(p->tied);
    free(p->ops);
    free(p->slot_of);
    free(p->free_slots);
    free(p->act_req);
    free(p->grad_req);
    free(p);
}

// ---- where a chunk's messages come from and go to ----

static Link act_from(const Pipe *p, int v) {
    if (p->rank > 0) return (Link){p->act_in, 0};
    return v > 0 ? (Link){p->wrap_act, 1} : (Link){NULL, 0};   // the last stage's previous chunk
}

static Link act_to(const Pipe *p, int v) {
    if (p->rank < p->P - 1) return (Link){p->act_out, 1};
    return v < p->V - 1 ? (Link){p->wrap_act, 0} : (Link){NULL, 0};
}

static Link grad_from(const Pipe *p, int v) {
    if (p->rank < p->P - 1) return (Link){p->grad_in, 1};
    return v < p->V - 1 ? (Link){p->wrap_grad, 0} : (Link){NULL, 0};
}

static Link grad_to(const Pipe *p, int v) {
    if (p->rank > 0) return (Link){p->grad_out, 0};
    return v > 0 ? (Link){p->wrap_grad, 1} : (Link){NULL, 0};
}

// ---- sends and receives, timed ----

static int receive(Pipe *p, Link l, float *buf, size_t n, Err *err) {
    if (!l.c) return 0;
    double t0 = timer_now();
    int rc = comm_recv(l.c, buf, n, DT_F32, l.peer, err);
    p->waited += timer_now() - t0;
    return rc;
}

static CommRequest *send(Link l, const float *buf, size_t n) {
    return l.c ? comm_isend(l.c, buf, n, DT_F32, l.peer) : NULL;
}

// Waits for the slot's output to have left: its memory is about to be
// written again.
static int settle(Pipe *p, int slot, Err *err) { return comm_wait_timed(&p->act_req[slot], &p->waited, err); }

// Sends the slot's input gradient back through the next send buffer.
static int send_grad(Pipe *p, int slot, Link to, size_t n, Err *err) {
    if (!to.c) return 0;
    int k = p->gnext++ % p->ngrad;
    float *buf = p->gbuf + (size_t)k * p->gcap;
    if (comm_wait_timed(&p->grad_req[k], &p->waited, err)) return -1;   // taken already: pipe_grad_buffers
    memcpy(buf, stage_grad_input(p->st, slot), n * sizeof(float));
    p->grad_req[k] = send(to, buf, n);
    return 0;
}

static int forward_one(Pipe *p, int slot, int v, const int *tok, const int *tgt, int B, int T, float dscale, double *sum,
                       Err *err) {
    Stage *st = p->st;
    size_t n = stage_boundary_floats(st, B, T);
    if (settle(p, slot, err)) return -1;
    stage_bind(st, slot, v);
    if (receive(p, act_from(p, v), stage_input(st, slot), n, err)) return -1;
    *sum += stage_forward(st, slot, tok, tgt, B, T, dscale);
    p->act_req[slot] = send(act_to(p, v), stage_output(st, slot), n);
    return 0;
}

int pipe_step(Pipe *p, Dp *dp, const int *tokens, const int *targets, int B, int T, float dscale, double *loss_sum,
              Err *err) {
    Stage *st = p->st;
    size_t n = stage_boundary_floats(st, B, T), bt = (size_t)B * T;
    double sum = 0;
    *loss_sum = 0;
    p->nfree = st->slots;
    for (int k = 0; k < st->slots; k++) p->free_slots[k] = st->slots - 1 - k;   // slot 0 first
    stage_grads_hold(st, 1);   // the last micro-batch's weight gradients after its input gradient is sent
    for (int i = 0; i < p->nops; i++) {
        PipeOp op = p->ops[i];
        int *slot = &p->slot_of[op.chunk * p->M + op.mb];
        const int *tok = tokens + op.mb * bt, *tgt = targets + op.mb * bt;
        dp_microbatch(dp, op.mb, p->M);
        stage_microbatch(st, op.mb, p->M);
        if (!op.bwd) {
            CHECKF(p->nfree > 0, "no free slot for micro-batch %d of chunk %d", op.mb, op.chunk);
            *slot = p->free_slots[--p->nfree];
            if (forward_one(p, *slot, op.chunk, tok, tgt, B, T, dscale, &sum, err)) return -1;
            continue;
        }
        if (receive(p, grad_from(p, op.chunk), stage_grad_output(st, *slot), n, err)) return -1;
        stage_backward(st, *slot, tok, B, T);
        if (send_grad(p, *slot, grad_to(p, op.chunk), n, err)) return -1;
        if (op.mb == p->M - 1) stage_grads_flush(st);   // the gradients the last micro-batch's passes queued
        p->free_slots[p->nfree++] = *slot;
    }
    stage_grads_hold(st, 0);
    stage_microbatch(st, 0, 0);   // the passes after the step's are not the step's
    for (int k = 0; k < st->slots; k++)
        if (settle(p, k, err)) return -1;
    for (int k = 0; k < p->ngrad; k++)
        if (comm_wait_timed(&p->grad_req[k], &p->waited, err)) return -1;
    *loss_sum = sum;
    return 0;
}

int pipe_forward(Pipe *p, const int *tokens, const int *targets, int B, int T, double *loss_sum, Err *err) {
    *loss_sum = 0;
    for (int v = 0; v < p->V; v++)   // round the stages once per chunk, in slot 0
        if (forward_one(p, 0, v, tokens, targets, B, T, 0.0f, loss_sum, err)) return -1;
    return settle(p, 0, err);
}

// ---- the tied embedding ----

int pipe_tied_sum(Pipe *p, Dp *dp, Err *err) {
    if (!p->tied) return 0;
    size_t n;
    float *g = dp_owned_grads(dp, 0, &n);   // the embeddings' segment is the first on both
    return comm_allreduce(p->tied, g, g, n, DT_F32, RED_SUM, err);
}

double pipe_waited(const Pipe *p) { return p->waited; }
int pipe_stages(const Pipe *p) { return p->P; }

uint64_t pipe_bytes_sent(const Pipe *p) {
    Comm *c[6] = {p->act_in, p->act_out, p->grad_in, p->grad_out, p->wrap_act, p->wrap_grad};
    uint64_t b = 0;
    for (int k = 0; k < 6; k++)
        if (c[k]) b += comm_stats(c[k])->bytes_sent[OP_SEND];
    return b;
}
