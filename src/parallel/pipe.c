#include "parallel/pipe.h"

#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

struct Pipe {
    PipeSchedule sched;
    int P, rank, M;
    Stage *st;
    // one communicator per neighbour and direction (NULL at the ends); in
    // each the lower stage is rank 0
    Comm *act_in, *act_out;     // activations from the previous stage, to the next
    Comm *grad_in, *grad_out;   // their gradients from the next stage, to the previous
    Comm *tied;                 // the first and the last stage (a tied head, P > 1), else NULL
    PipeOp *ops;
    int nops;
    CommRequest **act_req, **grad_req;   // per slot: its output's and its input gradient's send in flight
    double waited;
};

int pipe_schedule_parse(const char *s, PipeSchedule *out, Err *err) {
    if (!strcmp(s, "1f1b")) *out = PIPE_1F1B;
    else if (!strcmp(s, "gpipe")) *out = PIPE_GPIPE;
    else return err_set(err, ERR_USAGE, "--schedule: expected 1f1b or gpipe, got '%s'", s);
    return 0;
}

const char *pipe_schedule_name(PipeSchedule s) { return s == PIPE_GPIPE ? "gpipe" : "1f1b"; }

int pipe_schedule(PipeSchedule s, int P, int rank, int M, PipeOp *ops) {
    int n = 0;
    if (s == PIPE_GPIPE) {
        for (int m = 0; m < M; m++) ops[n++] = (PipeOp){0, m};
        for (int m = 0; m < M; m++) ops[n++] = (PipeOp){1, m};
        return n;
    }
    int warm = P - rank - 1 < M ? P - rank - 1 : M;
    for (int m = 0; m < warm; m++) ops[n++] = (PipeOp){0, m};
    for (int i = 0; i < M - warm; i++) {
        ops[n++] = (PipeOp){0, warm + i};
        ops[n++] = (PipeOp){1, i};
    }
    for (int m = M - warm; m < M; m++) ops[n++] = (PipeOp){1, m};
    return n;
}

int pipe_in_flight(PipeSchedule s, int P, int rank, int M) {
    if (s == PIPE_GPIPE) return M;
    return P - rank < M ? P - rank : M;
}

int pipe_split_layers(int n_layer, int P, const int *layers, int *begin, Err *err) {
    if (P > n_layer)
        return err_set(err, ERR_USAGE, "--pp %d: the model has only %d layers (at least one per stage)", P, n_layer);
    begin[0] = 0;
    if (!layers) {
        if (n_layer % P)
            return err_set(err, ERR_USAGE, "--pp %d does not divide the model's %d layers: give each stage's layers with "
                           "--pp-layers a,b,…", P, n_layer);
        for (int k = 0; k < P; k++) begin[k + 1] = begin[k] + n_layer / P;
        return 0;
    }
    for (int k = 0; k < P; k++) {
        if (layers[k] < 1) return err_set(err, ERR_USAGE, "--pp-layers: stage %d has %d layers (at least 1)", k, layers[k]);
        begin[k + 1] = begin[k] + layers[k];
    }
    if (begin[P] != n_layer)
        return err_set(err, ERR_USAGE, "--pp-layers: the stages' layers sum to %d, but the model has %d", begin[P], n_layer);
    return 0;
}

// ---- setup ----

int pipe_init(Pipe **out, Comm *ppg, PipeSchedule s, int M, Stage *st, Err *err) {
    *out = NULL;
    Pipe *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, ERR_RUN, "out of memory");
    p->sched = s;
    p->P = ppg ? comm_size(ppg) : 1;
    p->rank = ppg ? comm_rank(ppg) : 0;
    p->M = M;
    p->st = st;
    p->ops = calloc(2 * (size_t)M, sizeof *p->ops);
    p->act_req = calloc((size_t)st->slots, sizeof *p->act_req);
    p->grad_req = calloc((size_t)st->slots, sizeof *p->grad_req);
    if (!p->ops || !p->act_req || !p->grad_req) { pipe_free(p); return err_set(err, ERR_RUN, "out of memory"); }
    p->nops = pipe_schedule(s, p->P, p->rank, M, p->ops);
    CHECKF(st->slots >= pipe_in_flight(s, p->P, p->rank, M), "the stage has %d slots, the schedule needs %d", st->slots,
           pipe_in_flight(s, p->P, p->rank, M));
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
    if (!rc && arch_of(&st->cfg)->tied_head) {
        Comm *e = NULL;
        int ends = r == 0 || r == P - 1;
        rc = comm_split(ppg, ends ? 0 : 1, r, "embedding", &e, err);
        if (ends) p->tied = e; else comm_free(e);
    }
    if (rc) { pipe_free(p); return -1; }
    *out = p;
    return 0;
}

void pipe_free(Pipe *p) {
    if (!p) return;
    Err e;
    for (int k = 0; p->act_req && p->grad_req && k < p->st->slots; k++) {   // after an error: sends still queued
        if (p->act_req[k]) comm_wait(p->act_req[k], &e);
        if (p->grad_req[k]) comm_wait(p->grad_req[k], &e);
    }
    comm_free(p->act_in);
    comm_free(p->act_out);
    comm_free(p->grad_in);
    comm_free(p->grad_out);
    comm_free(p->tied);
    free(p->ops);
    free(p->act_req);
    free(p->grad_req);
    free(p);
}

// ---- sends and receives, timed ----

// Waits for a send in flight; 0, or -1 with err.
static int settle(Pipe *p, CommRequest **r, Err *err) {
    if (!*r) return 0;
    double t0 = timer_now();
    int rc = comm_wait(*r, err);
    *r = NULL;
    p->waited += timer_now() - t0;
    return rc;
}

static int receive(Pipe *p, Comm *c, float *buf, size_t n, int peer, Err *err) {
    double t0 = timer_now();
    int rc = comm_recv(c, buf, n, DT_F32, peer, err);
    p->waited += timer_now() - t0;
    return rc;
}

// Floats of a pipeline message: the micro-batch's residual stream, the
// rank's rows of it under sequence parallelism.
static size_t message_floats(const Stage *st, int B, int T) {
    size_t N = (size_t)B * T;
    if (st->slice.sp && st->slice.tp_size > 1) N /= (size_t)st->slice.tp_size;
    return N * (size_t)st->cfg.d_model;
}

static int forward_one(Pipe *p, int slot, const int *tok, const int *tgt, int B, int T, float dscale, double *sum,
                       Err *err) {
    Stage *st = p->st;
    size_t n = message_floats(st, B, T);
    if (settle(p, &p->act_req[slot], err) || settle(p, &p->grad_req[slot], err)) return -1;
    if (p->act_in && receive(p, p->act_in, stage_input(st, slot), n, 0, err)) return -1;
    *sum += stage_forward(st, slot, tok, tgt, B, T, dscale);
    if (p->act_out) p->act_req[slot] = comm_isend(p->act_out, stage_output(st, slot), n, DT_F32, 1);
    return 0;
}

int pipe_step(Pipe *p, Dp *dp, const int *tokens, const int *targets, int B, int T, float dscale, double *loss_sum,
              Err *err) {
    Stage *st = p->st;
    size_t n = message_floats(st, B, T), bt = (size_t)B * T;
    double sum = 0;
    *loss_sum = 0;
    for (int i = 0; i < p->nops; i++) {
        PipeOp op = p->ops[i];
        int slot = op.mb % st->slots;
        const int *tok = tokens + op.mb * bt, *tgt = targets + op.mb * bt;
        dp_microbatch(dp, op.mb, p->M);
        if (!op.bwd) {
            if (forward_one(p, slot, tok, tgt, B, T, dscale, &sum, err)) return -1;
            continue;
        }
        if (p->grad_in && receive(p, p->grad_in, stage_grad_output(st, slot), n, 1, err)) return -1;
        stage_backward(st, slot, tok, B, T);
        if (p->grad_out) p->grad_req[slot] = comm_isend(p->grad_out, stage_grad_input(st, slot), n, DT_F32, 0);
    }
    for (int k = 0; k < st->slots; k++)
        if (settle(p, &p->act_req[k], err) || settle(p, &p->grad_req[k], err)) return -1;
    *loss_sum = sum;
    return 0;
}

int pipe_forward(Pipe *p, const int *tokens, const int *targets, int B, int T, double *loss_sum, Err *err) {
    *loss_sum = 0;
    if (forward_one(p, 0, tokens, targets, B, T, 0.0f, loss_sum, err)) return -1;
    return settle(p, &p->act_req[0], err);
}

// ---- the tied embedding ----

int pipe_holds_tied_copy(const Pipe *p) { return p->tied && p->rank == p->P - 1; }

int pipe_tied_sum(Pipe *p, float *g, size_t n, Err *err) {
    if (!p->tied) return 0;
    return comm_allreduce(p->tied, g, g, n, DT_F32, RED_SUM, err);
}

double pipe_waited(const Pipe *p) { return p->waited; }
int pipe_stages(const Pipe *p) { return p->P; }

uint64_t pipe_bytes_sent(const Pipe *p) {
    uint64_t b = 0;
    if (p->act_out) b += comm_stats(p->act_out)->bytes_sent[OP_SEND];
    if (p->grad_out) b += comm_stats(p->grad_out)->bytes_sent[OP_SEND];
    return b;
}
