// comm/comm.c — the generic layer: sequence numbers, history ring,
// counters, and the request queue served by a progress thread.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/prof.h"
#include "core/timer.h"
#include "core/trace.h"

enum { HIST = 16 };

struct CommRequest {
    Comm *c;
    int op;
    const void *in;
    void *out;
    size_t count;
    CommDtype t;
    CommRedOp red;
    int root;            // send: the peer
    int done, rc;
    Err err;
    CommRequest *next;
};

struct Comm {
    const CommBackendOps *ops;
    void *be;
    int rank, size;
    int world_rank;      // this process's rank in the world the communicator was split from
    char name[48];
    double timeout;
    CommStats stats;
    uint64_t seq;
    OpDesc hist[HIST];
    int hist_n;
    int broken;          // a call failed: the communicator is unusable
    Err broken_err;
    // one lock serialises execution; the queue holds requests not yet run
    pthread_mutex_t exec_mu, q_mu;
    pthread_cond_t q_cv, done_cv;
    CommRequest *head, *tail;
    int thread_started, stop;
    pthread_t thread;
};

const char *comm_op_name(CommOp op) {
    static const char *n[OP_COUNT] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                      "send", "recv", "barrier", "split"};
    return op >= 0 && op < OP_COUNT ? n[op] : "?";
}

double comm_timeout_default(void) {
    const char *v = getenv("TESSERA_COMM_TIMEOUT");
    double t = v ? atof(v) : 0;
    return t > 0 ? t : 300.0;
}

Comm *comm_wrap(const CommBackendOps *ops, void *be, int rank, int size, const char *name, double timeout) {
    Comm *c = calloc(1, sizeof *c);
    CHECKF(c, "out of memory");
    c->ops = ops;
    c->be = be;
    c->rank = rank;
    c->world_rank = rank;   // a world; comm_split sets its parent's
    c->size = size;
    c->timeout = timeout;
    snprintf(c->name, sizeof c->name, "%s", name);
    pthread_mutex_init(&c->exec_mu, NULL);
    pthread_mutex_init(&c->q_mu, NULL);
    pthread_cond_init(&c->q_cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    return c;
}

int comm_rank(const Comm *c) { return c->rank; }
int comm_size(const Comm *c) { return c->size; }
const char *comm_name(const Comm *c) { return c->name; }
const char *comm_backend(const Comm *c) { return c->ops->name; }
const CommStats *comm_stats(const Comm *c) { return &c->stats; }
void comm_stats_reset(Comm *c) { memset(&c->stats, 0, sizeof c->stats); }

// Writes c's last (up to) n operations, oldest first, into buf.
static void history(const Comm *c, int n, char *buf, size_t cap) {
    if (n > c->hist_n) n = c->hist_n;
    if (n > HIST) n = HIST;
    size_t k = (size_t)snprintf(buf, cap, "  communicator %s (rank %d of %d in it): last %d operations (oldest first)\n",
                                c->name, c->rank, c->size, n);
    for (int i = 0; i < n && k < cap; i++) {
        const OpDesc *d = &c->hist[(c->hist_n - n + i) % HIST];
        k += (size_t)snprintf(buf + k, cap - k, "    seq %-6llu %-14s %-4s count %-10llu", (unsigned long long)d->seq,
                              comm_op_name(d->op), comm_dtype_name(d->dtype), (unsigned long long)d->count);
        if (k < cap && d->op == OP_BROADCAST) k += (size_t)snprintf(buf + k, cap - k, " root %d", d->root);
        if (k < cap && (d->op == OP_SEND || d->op == OP_RECV)) k += (size_t)snprintf(buf + k, cap - k, " peer %d", d->root);
        if (k < cap) k += (size_t)snprintf(buf + k, cap - k, "\n");
    }
}

void comm_rank_error(Comm *world, const char *who, const Err *e) {
    if (e->shown) return;
    char line[640];
    snprintf(line, sizeof line, "%s: %s", who, e->msg);
    if (world->ops->rank_error) world->ops->rank_error(world->be, line);
    else fprintf(stderr, "%s: rank %d: %s\n", who, world->world_rank, e->msg);
}

// A call failed: the communicator is unusable from now on. The error is
// written once here, with this process's world rank and the
// communicator's recent operations (a rank stuck elsewhere may never
// return it), and marked shown so that callers do not write it again.
static void report_failure(Comm *c, Err *e) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int reported;   // the first failure of this process; the others follow from it
    c->broken = 1;
    pthread_mutex_lock(&mu);
    if (!reported) {
        char buf[1024];
        int k = snprintf(buf, sizeof buf, "tessera: rank %d: %s\n", c->world_rank, e->msg);
        if (k > 0 && (size_t)k < sizeof buf) history(c, 4, buf + k, sizeof buf - (size_t)k);
        fputs(buf, stderr);   // one write: the progress threads of other communicators may fail too
        reported = 1;
    }
    pthread_mutex_unlock(&mu);
    e->shown = 1;
    c->broken_err = *e;
}

// Runs one operation on the calling thread (exec_mu held).
static int execute(Comm *c, int op, const void *in, void *out, size_t count, CommDtype t, CommRedOp red, int root,
                   Err *err) {
    if (c->broken) {
        if (err) *err = c->broken_err;
        return -1;
    }
    OpDesc d = {.seq = ++c->seq, .op = op, .dtype = t, .redop = red, .root = root, .count = count};
    c->hist[c->hist_n++ % HIST] = d;
    uint64_t sent = 0, recv = 0;
    double t0 = timer_now();
    Err local;
    Err *e = err ? err : &local;
    int rc;
    switch (op) {
    case OP_ALLREDUCE: rc = c->ops->allreduce(c->be, &d, in, out, &sent, &recv, e); break;
    case OP_REDUCE_SCATTER: rc = c->ops->reduce_scatter(c->be, &d, in, out, &sent, &recv, e); break;
    case OP_ALLGATHER: rc = c->ops->allgather(c->be, &d, in, out, &sent, &recv, e); break;
    case OP_BROADCAST: rc = c->ops->broadcast(c->be, &d, out, &sent, &recv, e); break;
    case OP_SEND: rc = c->ops->send(c->be, &d, in, root, &sent, e); break;
    case OP_RECV: rc = c->ops->recv(c->be, &d, out, root, &recv, e); break;
    default: rc = c->ops->barrier(c->be, &d, e); break;
    }
    c->stats.calls[op]++;
    c->stats.bytes_sent[op] += sent;
    c->stats.bytes_recv[op] += recv;
    c->stats.seconds[op] += timer_now() - t0;
    if (rc) {
        report_failure(c, e);
        if (c->ops->on_failure) c->ops->on_failure(c->be);
    }
    return rc;
}

static void *progress_main(void *arg) {
    Comm *c = arg;
    pthread_mutex_lock(&c->q_mu);
    for (;;) {
        while (!c->head && !c->stop) pthread_cond_wait(&c->q_cv, &c->q_mu);
        if (!c->head) break;
        CommRequest *r = c->head;
        pthread_mutex_unlock(&c->q_mu);
        pthread_mutex_lock(&c->exec_mu);
        r->rc = execute(c, r->op, r->in, r->out, r->count, r->t, r->red, r->root, &r->err);
        pthread_mutex_unlock(&c->exec_mu);
        pthread_mutex_lock(&c->q_mu);
        c->head = r->next;
        if (!c->head) c->tail = NULL;
        r->done = 1;
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->q_mu);
    return NULL;
}

static CommRequest *enqueue_to(Comm *c, int op, const void *in, void *out, size_t count, CommDtype t, CommRedOp red,
                               int root) {
    CommRequest *r = calloc(1, sizeof *r);
    CHECKF(r, "out of memory");
    *r = (CommRequest){.c = c, .op = op, .in = in, .out = out, .count = count, .t = t, .red = red, .root = root};
    pthread_mutex_lock(&c->q_mu);
    if (!c->thread_started) {
        CHECKF(pthread_create(&c->thread, NULL, progress_main, c) == 0, "cannot start the comm progress thread");
        c->thread_started = 1;
    }
    if (c->tail) c->tail->next = r; else c->head = r;
    c->tail = r;
    pthread_cond_signal(&c->q_cv);
    pthread_mutex_unlock(&c->q_mu);
    return r;
}

static CommRequest *enqueue(Comm *c, int op, const void *in, void *out, size_t count, CommDtype t, CommRedOp red) {
    return enqueue_to(c, op, in, out, count, t, red, 0);
}

int comm_wait(CommRequest *r, Err *err) {
    Comm *c = r->c;
    double t0 = prof_begin();
    pthread_mutex_lock(&c->q_mu);
    while (!r->done) pthread_cond_wait(&c->done_cv, &c->q_mu);
    pthread_mutex_unlock(&c->q_mu);
    trace_comm(comm_op_name(r->op), c->name, (double)r->count * comm_dtype_size(r->t));
    prof_end(t0, PROF_COMM, 0, 0);
    int rc = r->rc;
    if (rc && err) *err = r->err;
    free(r);
    return rc;
}

int comm_wait_timed(CommRequest **r, double *waited, Err *err) {
    if (!*r) return 0;
    double t0 = timer_now();
    int rc = comm_wait(*r, err);
    *r = NULL;
    *waited += timer_now() - t0;
    return rc;
}

int comm_test(CommRequest *r) {
    pthread_mutex_lock(&r->c->q_mu);
    int d = r->done;
    pthread_mutex_unlock(&r->c->q_mu);
    return d;
}

// A blocking call: runs inline when nothing is queued, else behind the queue.
static int blocking(Comm *c, int op, const void *in, void *out, size_t count, CommDtype t, CommRedOp red, int root,
                    Err *err) {
    pthread_mutex_lock(&c->q_mu);
    int queued = c->head != NULL;
    pthread_mutex_unlock(&c->q_mu);
    if (queued && (op == OP_ALLREDUCE || op == OP_REDUCE_SCATTER || op == OP_ALLGATHER))
        return comm_wait(enqueue(c, op, in, out, count, t, red), err);
    double t0 = prof_begin();
    if (queued) {   // wait for the queue to drain, then run here
        pthread_mutex_lock(&c->q_mu);
        while (c->head) pthread_cond_wait(&c->done_cv, &c->q_mu);
        pthread_mutex_unlock(&c->q_mu);
    }
    pthread_mutex_lock(&c->exec_mu);
    int rc = execute(c, op, in, out, count, t, red, root, err);
    pthread_mutex_unlock(&c->exec_mu);
    trace_comm(comm_op_name(op), c->name, (double)count * comm_dtype_size(t));
    prof_end(t0, PROF_COMM, 0, 0);
    return rc;
}

int comm_allreduce(Comm *c, const void *in, void *out, size_t count, CommDtype t, CommRedOp op, Err *err) {
    return blocking(c, OP_ALLREDUCE, in, out, count, t, op, 0, err);
}
int comm_reduce_scatter(Comm *c, const void *in, void *out, size_t count, CommDtype t, CommRedOp op, Err *err) {
    if (count % (size_t)c->size)
        return err_set(err, ERR_USAGE, "reduce_scatter on %s: count %zu is not a multiple of %d ranks", c->name, count, c->size);
    return blocking(c, OP_REDUCE_SCATTER, in, out, count, t, op, 0, err);
}
int comm_allgather(Comm *c, const void *in, void *out, size_t count, CommDtype t, Err *err) {
    return blocking(c, OP_ALLGATHER, in, out, count, t, RED_SUM, 0, err);
}
int comm_broadcast(Comm *c, void *buf, size_t count, CommDtype t, int root, Err *err) {
    if (root < 0 || root >= c->size) return err_set(err, ERR_USAGE, "broadcast on %s: root %d out of range", c->name, root);
    return blocking(c, OP_BROADCAST, buf, buf, count, t, RED_SUM, root, err);
}
int comm_send(Comm *c, const void *buf, size_t count, CommDtype t, int peer, Err *err) {
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return err_set(err, ERR_USAGE, "send on %s: bad peer %d", c->name, peer);
    return blocking(c, OP_SEND, buf, NULL, count, t, RED_SUM, peer, err);
}
int comm_recv(Comm *c, void *buf, size_t count, CommDtype t, int peer, Err *err) {
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return err_set(err, ERR_USAGE, "recv on %s: bad peer %d", c->name, peer);
    return blocking(c, OP_RECV, NULL, buf, count, t, RED_SUM, peer, err);
}
int comm_barrier(Comm *c, Err *err) { return blocking(c, OP_BARRIER, NULL, NULL, 0, DT_U8, RED_SUM, 0, err); }

CommRequest *comm_iallreduce(Comm *c, const void *in, void *out, size_t count, CommDtype t, CommRedOp op) {
    return enqueue(c, OP_ALLREDUCE, in, out, count, t, op);
}
CommRequest *comm_ireduce_scatter(Comm *c, const void *in, void *out, size_t count, CommDtype t, CommRedOp op) {
    CHECKF(count % (size_t)c->size == 0, "ireduce_scatter: count not a multiple of the ranks");
    return enqueue(c, OP_REDUCE_SCATTER, in, out, count, t, op);
}
CommRequest *comm_iallgather(Comm *c, const void *in, void *out, size_t count, CommDtype t) {
    return enqueue(c, OP_ALLGATHER, in, out, count, t, RED_SUM);
}
CommRequest *comm_isend(Comm *c, const void *buf, size_t count, CommDtype t, int peer) {
    CHECKF(peer >= 0 && peer < c->size && peer != c->rank, "isend on %s: bad peer %d", c->name, peer);
    return enqueue_to(c, OP_SEND, buf, NULL, count, t, RED_SUM, peer);
}

int comm_split(Comm *c, int color, int key, const char *name, Comm **out, Err *err) {
    *out = NULL;
    pthread_mutex_lock(&c->q_mu);
    while (c->head) pthread_cond_wait(&c->done_cv, &c->q_mu);
    pthread_mutex_unlock(&c->q_mu);
    pthread_mutex_lock(&c->exec_mu);
    int rc = -1;
    if (c->broken) {
        if (err) *err = c->broken_err;
    } else {
        OpDesc d = {.seq = ++c->seq, .op = OP_SPLIT, .root = color, .count = (uint64_t)(uint32_t)key, .name = name};
        c->hist[c->hist_n++ % HIST] = d;
        void *be;
        int r, n;
        c->stats.calls[OP_SPLIT]++;
        rc = c->ops->split(c->be, &d, color, key, &be, &r, &n, err);
        if (rc == 0) {
            *out = comm_wrap(c->ops, be, r, n, name, c->timeout);
            (*out)->world_rank = c->world_rank;
        } else {
            report_failure(c, err);
        }
    }
    pthread_mutex_unlock(&c->exec_mu);
    return rc;
}

void comm_free(Comm *c) {
    if (!c) return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->q_mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->q_cv);
        pthread_mutex_unlock(&c->q_mu);
        pthread_join(c->thread, NULL);
    }
    c->ops->free(c->be);
    pthread_mutex_destroy(&c->exec_mu);
    pthread_mutex_destroy(&c->q_mu);
    pthread_cond_destroy(&c->q_cv);
    pthread_cond_destroy(&c->done_cv);
    free(c);
}

void comm_add_volume(Volume v, uint64_t *sent, uint64_t *recv) {
    *sent += v.sent;
    *recv += v.recv;
}
