#include "comm/mpi.h"

#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"

int comm_mpi_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

#ifndef TSR_MPI

int comm_mpi_world(Comm **out, double timeout, Err *err) {
    (void)timeout;
    *out = NULL;
    return err_set(err, ERR_USAGE, "started under MPI, but this tessera was built without MPI (install libopenmpi-dev, rebuild)");
}
int comm_mpi_thread_multiple(void) { return thread_multiple; }

void comm_mpi_finalize(void) {}
int comm_mpi_thread_multiple(void) { return 0; }

#else
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core/timer.h"

// The watchdog: MPI calls cannot time out by themselves, so a thread checks
// the calls in flight and ends the job when one has waited too long. Each
// thread that calls MPI (the main thread, a communicator's progress thread)
// has a slot of its own: calls on different communicators may overlap
// (MPI_THREAD_MULTIPLE), e.g. a tensor-parallel collective on the main
// thread while the data-parallel group reduces gradients on its thread.
enum { WATCH_SLOTS = 16 };
static _Atomic long long inflight_us[WATCH_SLOTS];    // start of the slot's MPI call in flight, 0 when none
static const OpDesc *_Atomic inflight_op[WATCH_SLOTS];
static _Atomic int watch_next;
static _Thread_local int watch_slot = -1;
static int thread_multiple;               // MPI granted MPI_THREAD_MULTIPLE

static int my_slot(void) {
    if (watch_slot < 0) watch_slot = atomic_fetch_add(&watch_next, 1) % WATCH_SLOTS;
    return watch_slot;
}
static double watchdog_timeout;
static pthread_t watchdog;
static _Atomic int watchdog_stop;
static int watchdog_started;

static long long now_us(void) { return (long long)(timer_now() * 1e6); }

// Heartbeats, so that a timeout can name the ranks that went silent (a
// host or link down, a rank hung or stopped): with MPI_THREAD_MULTIPLE the
// watchdog sends every other rank a small message each HB_US on a
// communicator of its own and keeps a receive posted from each; the last
// time each one was heard from is kept.
enum { HB_US = 250000 };
static MPI_Comm hb_comm = MPI_COMM_NULL;
static int hb_n, hb_me;
static MPI_Request *hb_send, *hb_recv;
static int *hb_in, hb_out;
static long long *hb_heard, hb_sent_us;

static void hb_start(void) {
    if (!thread_multiple || MPI_Comm_dup(MPI_COMM_WORLD, &hb_comm) != MPI_SUCCESS) return;
    MPI_Comm_set_errhandler(hb_comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(hb_comm, &hb_n);
    MPI_Comm_rank(hb_comm, &hb_me);
    hb_send = calloc((size_t)hb_n, sizeof *hb_send);
    hb_recv = calloc((size_t)hb_n, sizeof *hb_recv);
    hb_in = calloc((size_t)hb_n, sizeof *hb_in);
    hb_heard = calloc((size_t)hb_n, sizeof *hb_heard);
    if (!hb_send || !hb_recv || !hb_in || !hb_heard) { MPI_Comm_free(&hb_comm); hb_comm = MPI_COMM_NULL; return; }
    long long now = now_us();
    for (int r = 0; r < hb_n; r++) {
        hb_send[r] = hb_recv[r] = MPI_REQUEST_NULL;
        hb_heard[r] = now;
        if (r != hb_me) MPI_Irecv(&hb_in[r], 1, MPI_INT, r, 0, hb_comm, &hb_recv[r]);
    }
}

// One round: what arrived is noted (and the receive posted again); every
// HB_US a beat goes to each rank whose last one has left.
static void hb_poll(void) {
    if (hb_comm == MPI_COMM_NULL) return;
    long long now = now_us();
    for (int r = 0; r < hb_n; r++) {
        if (r == hb_me) continue;
        int done = 0;
        if (hb_recv[r] != MPI_REQUEST_NULL && MPI_Test(&hb_recv[r], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
            hb_heard[r] = now;
            MPI_Irecv(&hb_in[r], 1, MPI_INT, r, 0, hb_comm, &hb_recv[r]);
        }
        if (hb_send[r] != MPI_REQUEST_NULL) MPI_Test(&hb_send[r], &done, MPI_STATUS_IGNORE);
        if (now - hb_sent_us >= HB_US && hb_send[r] == MPI_REQUEST_NULL)
            MPI_Isend(&hb_out, 1, MPI_INT, r, 0, hb_comm, &hb_send[r]);
    }
    if (now - hb_sent_us >= HB_US) hb_sent_us = now;
}

// The ranks not heard from for `silent` seconds into buf ("2, 3"), or "".
static void hb_silent(char *buf, size_t n, double silent) {
    buf[0] = 0;
    long long now = now_us();
    size_t len = 0;
    for (int r = 0; r < hb_n && len < n; r++)
        if (r != hb_me && (now - hb_heard[r]) * 1e-6 > silent)
            len += (size_t)snprintf(buf + len, n - len, "%s%d", len ? ", " : "", r);
}

// Before MPI_Finalize: no request left behind.
static void hb_stop(void) {
    if (hb_comm == MPI_COMM_NULL) return;
    MPI_Barrier(hb_comm);   // every rank has stopped beating
    for (int r = 0; r < hb_n; r++) {
        MPI_Request *q[2] = {&hb_recv[r], &hb_send[r]};
        for (int k = 0; k < 2; k++)
            if (*q[k] != MPI_REQUEST_NULL) {
                MPI_Cancel(q[k]);
                MPI_Wait(q[k], MPI_STATUS_IGNORE);
            }
    }
    MPI_Comm_free(&hb_comm);
    hb_comm = MPI_COMM_NULL;
    free(hb_send);
    free(hb_recv);
    free(hb_in);
    free(hb_heard);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    while (!atomic_load(&watchdog_stop)) {
        usleep(100000);
        hb_poll();
        for (int k = 0; k < WATCH_SLOTS; k++) {
            long long t0 = atomic_load(&inflight_us[k]);
            if (!t0 || (now_us() - t0) * 1e-6 <= watchdog_timeout) continue;
            const OpDesc *d = atomic_load(&inflight_op[k]);
            int me = -1;
            MPI_Comm_rank(MPI_COMM_WORLD, &me);
            char silent[512] = "";
            if (hb_comm != MPI_COMM_NULL) hb_silent(silent, sizeof silent, watchdog_timeout / 2 > 1 ? watchdog_timeout / 2 : 1);
            fprintf(stderr, "tessera: MPI rank %d: %s (seq %llu) timed out after %.0f s; %s%s%s; ending the job\n", me,
                    d ? comm_op_name(d->op) : "collective", d ? (unsigned long long)d->seq : 0ULL, watchdog_timeout,
                    silent[0] ? "unreachable: world ranks " : hb_comm != MPI_COMM_NULL ? "every rank still answers (one is "
                    "stuck elsewhere or called another collective)" : "", silent,
                    silent[0] ? " (no heartbeat for half the timeout: their host or link is down, or they stopped)" : "");
            // An unreachable host: its daemon is lost to mpirun too, and an
            // abort now would have mpirun wait on it to stop its ranks; give
            // the launcher (which notices a lost host by its own keepalive
            // or scheduler) a moment to end the job first.
            for (int w = 0; silent[0] && w < 100; w++) usleep(100000);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    return NULL;
}

#define GUARDED(d, call) (guard_slot = my_slot(), atomic_store(&inflight_op[guard_slot], (d)), \
                          atomic_store(&inflight_us[guard_slot], now_us()), guard_rc = (call), \
                          atomic_store(&inflight_us[guard_slot], 0LL), guard_rc)
static _Thread_local int guard_rc, guard_slot;

typedef struct {
    MPI_Comm comm;
    int me, n;
    unsigned char *tmp;     // scratch for the all-to-all blocks
    size_t tmp_bytes;
} Mpi;

static int mpi_fail(Err *err, const OpDesc *d, int code) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, s, &len);
    return err_set(err, ERR_RUN, "%s (seq %llu): MPI error: %s", comm_op_name(d->op), (unsigned long long)d->seq, s);
}

static unsigned char *scratch(Mpi *m, size_t bytes) {
    if (bytes > m->tmp_bytes) {
        free(m->tmp);
        m->tmp = malloc(bytes);
        CHECKF(m->tmp, "out of memory (%zu bytes) in the MPI backend", bytes);
        m->tmp_bytes = bytes;
    }
    return m->tmp;
}

// Block b of count elements split over n ranks: [lo, hi).
static size_t blk(size_t count, int n, int b) { return count * (size_t)b / (size_t)n; }

// Each rank receives block `me` of every rank's `in` (count elements split
// in n blocks) into tmp, rank after rank, and reduces it in rank order into out.
static int scatter_reduce(Mpi *m, const OpDesc *d, const void *in, void *out, size_t count, Err *err) {
    int n = m->n;
    size_t es = comm_dtype_size(d->dtype);
    size_t mylo = blk(count, n, m->me), mine = blk(count, n, m->me + 1) - mylo;
    unsigned char *tmp = scratch(m, mine * es * n + 1);
    int *sc = malloc(4 * sizeof(int) * n), *sd = sc + n, *rc = sd + n, *rd = rc + n;
    for (int r = 0; r < n; r++) {
        size_t lo = blk(count, n, r), hi = blk(count, n, r + 1);
        sc[r] = (int)((hi - lo) * es);
        sd[r] = (int)(lo * es);
        rc[r] = (int)(mine * es);
        rd[r] = (int)(r * mine * es);
    }
    int e = GUARDED(d, MPI_Alltoallv(in, sc, sd, MPI_BYTE, tmp, rc, rd, MPI_BYTE, m->comm));
    free(sc);
    if (e != MPI_SUCCESS) return mpi_fail(err, d, e);
    const void *src[1024];
    for (int r = 0; r < n; r++) src[r] = tmp + (size_t)r * mine * es;
    comm_reduce(out, src, n, mine, d->dtype, d->redop);
    return 0;
}

static int m_allreduce(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err) {
    Mpi *m = be;
    int n = m->n;
    size_t es = comm_dtype_size(d->dtype), count = d->count;
    if (count * es > (size_t)1 << 30) return err_set(err, ERR_USAGE, "allreduce: messages above 1 GiB are not supported by the MPI backend");
    size_t mylo = blk(count, n, m->me), mine = blk(count, n, m->me + 1) - mylo;
    unsigned char *red = malloc(mine * es + 1);
    if (scatter_reduce(m, d, in, red, count, err)) { free(red); return -1; }
    int *rc = malloc(2 * sizeof(int) * n), *rd = rc + n;
    for (int r = 0; r < n; r++) {
        rc[r] = (int)((blk(count, n, r + 1) - blk(count, n, r)) * es);
        rd[r] = (int)(blk(count, n, r) * es);
    }
    int e = GUARDED(d, MPI_Allgatherv(red, (int)(mine * es), MPI_BYTE, out, rc, rd, MPI_BYTE, m->comm));
    free(rc);
    free(red);
    if (e != MPI_SUCCESS) return mpi_fail(err, d, e);
    comm_add_volume(volume_allreduce_split(count, es, n, m->me), sent, recv);
    return 0;
}

static int m_reduce_scatter(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err) {
    Mpi *m = be;
    if (scatter_reduce(m, d, in, out, d->count, err)) return -1;
    comm_add_volume(volume_reduce_scatter(d->count, comm_dtype_size(d->dtype), m->n), sent, recv);
    return 0;
}

static int m_allgather(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err) {
    Mpi *m = be;
    size_t bytes = d->count * comm_dtype_size(d->dtype);
    int inplace = (const char *)in == (const char *)out + (size_t)m->me * bytes;   // MPI wants MPI_IN_PLACE then
    int e = GUARDED(d, MPI_Allgather(inplace ? MPI_IN_PLACE : in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, m->comm));
    if (e != MPI_SUCCESS) return mpi_fail(err, d, e);
    comm_add_volume(volume_allgather(d->count, comm_dtype_size(d->dtype), m->n), sent, recv);
    return 0;
}

static int m_broadcast(void *be, const OpDesc *d, void *buf, uint64_t *sent, uint64_t *recv, Err *err) {
    Mpi *m = be;
    size_t bytes = d->count * comm_dtype_size(d->dtype);
    int e = GUARDED(d, MPI_Bcast(buf, (int)bytes, MPI_BYTE, d->root, m->comm));
    if (e != MPI_SUCCESS) return mpi_fail(err, d, e);
    comm_add_volume(volume_broadcast(d->count, comm_dtype_size(d->dtype), m->n, m->me, d->root), sent, recv);
    return 0;
}

static int m_send(void *be, const OpDesc *d, const void *buf, int peer, uint64_t *sent, Err *err) {
    Mpi *m = be;
    size_t bytes = d->count * comm_dtype_size(d->dtype);
    int e = GUARDED(d, MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 7, m->comm));
    if (e != MPI_SUCCESS) return mpi_fail(err, d, e);
    *sent += bytes;
    return 0;
}

static int m_recv(void *be, const OpDesc *d, void *buf, int peer, uint64_t *recv, Err *err) {
    Mpi *m = be;
    size_t bytes = d->count * comm_dtype_size(d->dtype);
    MPI_Status st;
    int e = GUARDED(d, MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 7, m->comm, &st));
    if (e != MPI_SUCCESS) return mpi_fail(err, d, e);
    int got;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if ((size_t)got != bytes) return err_set(err, ERR_RUN, "recv from rank %d: %d bytes arrived, %zu expected", peer, got, bytes);
    *recv += bytes;
    return 0;
}

static int m_barrier(void *be, const OpDesc *d, Err *err) {
    int e = GUARDED(d, MPI_Barrier(((Mpi *)be)->comm));
    return e == MPI_SUCCESS ? 0 : mpi_fail(err, d, e);
}

static Mpi *mpi_new(MPI_Comm c) {
    Mpi *m = calloc(1, sizeof *m);
    CHECKF(m, "out of memory");
    m->comm = c;
    MPI_Comm_rank(c, &m->me);
    MPI_Comm_size(c, &m->n);
    return m;
}

static int m_split(void *be, const OpDesc *d, int color, int key, void **out_be, int *rank, int *size, Err *err) {
    Mpi *m = be;
    MPI_Comm nc;
    int e = MPI_Comm_split(m->comm, color, key, &nc);
    if (e != MPI_SUCCESS) return mpi_fail(err, d, e);
    Mpi *n = mpi_new(nc);
    *out_be = n;
    *rank = n->me;
    *size = n->n;
    return 0;
}

static void m_free(void *be) {
    Mpi *m = be;
    if (m->comm != MPI_COMM_WORLD) MPI_Comm_free(&m->comm);
    free(m->tmp);
    free(m);
}

// A failed collective cannot be recovered from under MPI: end the whole job
// (mpirun then stops every rank and exits non-zero).
static void m_on_failure(void *be) {
    (void)be;
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static const CommBackendOps MPI_OPS = {
    "mpi", m_allreduce, m_reduce_scatter, m_allgather, m_broadcast, m_send, m_recv, m_barrier, m_split, m_free,
    m_on_failure, NULL,
};

int comm_mpi_world(Comm **out, double timeout, Err *err) {
    int provided, inited;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return err_set(err, ERR_RUN, "MPI_Init_thread failed");
    if (inited) MPI_Query_thread(&provided);
    thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    watchdog_timeout = timeout;
    if (!watchdog_started) {
        hb_start();
        if (pthread_create(&watchdog, NULL, watchdog_main, NULL) == 0) watchdog_started = 1;
    }
    Mpi *m = mpi_new(MPI_COMM_WORLD);
    *out = comm_wrap(&MPI_OPS, m, m->me, m->n, "world", timeout);
    return 0;
}

int comm_mpi_thread_multiple(void) { return thread_multiple; }

void comm_mpi_finalize(void) {
    if (watchdog_started) {
        atomic_store(&watchdog_stop, 1);
        pthread_join(watchdog, NULL);
        watchdog_started = 0;
        hb_stop();
    }
    int fin;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}
#endif
