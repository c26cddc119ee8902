#include "comm/local.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "core/timer.h"

enum {
    MAX_RANKS = 256,
    SLOT = VOLUME_PIECE_BYTES,    // staging bytes per rank
    P2P = 256 << 10,              // mailbox bytes per ordered pair
    SMALL = VOLUME_SMALL_BYTES,   // allreduce pieces up to this many bytes skip the split
    SEG_BYTES = 1 << 30,          // virtual size of the segment (pages appear when touched)
};

#define SEQ_BUSY UINT64_MAX      // a descriptor being rewritten

typedef struct {                 // per rank, in a communicator's area
    _Atomic uint64_t seq;        // last collective entered
    int32_t op, dtype, root, color;
    uint64_t count;
    int32_t key;
    uint64_t offer;              // split: area offset offered by a group leader
    _Atomic uint32_t arrived;    // the barrier phase it last arrived at, plus one
} RankDesc;

typedef struct {                 // a sender -> receiver mailbox
    _Atomic uint32_t full;       // bytes waiting (0 = empty); futex word
    uint32_t pad[15];
} Mailbox;

typedef struct {                 // a communicator's area
    _Atomic uint32_t arrive, phase;   // barrier: count and generation (futex word)
    uint32_t n;
    _Atomic uint32_t sleepers;   // ranks in a futex wait on any word of this area
    uint32_t pad[12];
    int32_t world_rank[MAX_RANKS];
    RankDesc desc[];             // n of them, then slots, mailboxes, buffers
} Area;

typedef struct {                 // the segment header
    _Atomic int32_t failed_rank; // set by the launcher when a rank died
    _Atomic int32_t failed_status;
    _Atomic uint64_t bump;       // next free byte for communicator areas
    int32_t nproc;
    pid_t pids[MAX_RANKS];
    char error[MAX_RANKS][640];  // each rank's error line for the launcher ("" = none)
} Segment;

typedef struct {
    Segment *seg;
    Area *a;
    int me, n, spin;
    char name[48];
    double timeout;
    double t_start;              // of the current collective
    const OpDesc *cur;
    uint32_t in_barrier;         // the phase + 1 of the barrier it waits in (0: a mailbox)
    uint64_t use;                // buffer-set uses so far (the same on every rank)
} Local;

static size_t area_bytes(int n) {
    size_t b = sizeof(Area) + (size_t)n * sizeof(RankDesc);
    b = (b + 63) & ~(size_t)63;
    b += 2 * (size_t)(n + 1) * SLOT;               // two sets of slots + result
    b += (size_t)n * n * (sizeof(Mailbox) + P2P);  // mailboxes
    return (b + 4095) & ~(size_t)4095;
}

size_t comm_local_area_bytes(int n) { return area_bytes(n); }
// The segment header (with the ranks' error lines) takes the first pages.
static size_t header_bytes(void) { return (sizeof(Segment) + 4095) & ~(size_t)4095; }
size_t comm_local_segment_bytes(void) { return SEG_BYTES - header_bytes(); }

// Staging slot r (n: the result slot) of the current buffer set. Two sets
// alternate from one use to the next, so a set is only rewritten after a
// barrier that every reader of its previous use has passed — most
// collectives need a single barrier.
static unsigned char *slot(const Local *l, int r) {
    size_t b = (sizeof(Area) + (size_t)l->n * sizeof(RankDesc) + 63) & ~(size_t)63;
    return (unsigned char *)l->a + b + ((size_t)(l->use & 1) * (size_t)(l->n + 1) + (size_t)r) * SLOT;
}
static Mailbox *mailbox(const Local *l, int src, int dst) {
    size_t b = (sizeof(Area) + (size_t)l->n * sizeof(RankDesc) + 63) & ~(size_t)63;
    unsigned char *base = (unsigned char *)l->a + b + 2 * (size_t)(l->n + 1) * SLOT;
    return (Mailbox *)(base + (size_t)(src * l->n + dst) * (sizeof(Mailbox) + P2P));
}
static unsigned char *mail_data(Mailbox *m) { return (unsigned char *)(m + 1); }

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}
static void futex_wake_raw(_Atomic uint32_t *addr) { syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

// The error of a wait that cannot finish: a failed peer or the timeout. It
// names the ranks waited for: a send's or receive's peer; in a collective
// those that have not entered it or, when all have, those that have not
// reached the barrier this rank waits in (stopped or stuck inside it).
static int wait_error(Local *l, Err *err) {
    const OpDesc *d = l->cur;
    char missing[512] = "";
    size_t used = 0;
    int p2p = d->op == OP_SEND || d->op == OP_RECV, inside = 0;
    if (p2p) used = (size_t)snprintf(missing, sizeof missing, "%d (to %s)", d->root, d->op == OP_SEND ? "take the message" : "send");
    for (int r = 0; !p2p && r < l->n; r++)
        if (r != l->me && atomic_load(&l->a->desc[r].seq) < d->seq && used < sizeof missing - 16)
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d", used ? ", " : "", r);
    for (int r = 0; !p2p && !used && l->in_barrier && r < l->n; r++)   // every rank entered: who is not here?
        if (r != l->me && atomic_load(&l->a->desc[r].arrived) != l->in_barrier && used < sizeof missing - 64) {
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d", used ? ", " : "", r);
            inside = 1;
        }
    if (inside) snprintf(missing + used, sizeof missing - used, " (inside it: stopped or stuck)");
    int fr = atomic_load(&l->seg->failed_rank);
    if (fr >= 0) {
        int st = atomic_load(&l->seg->failed_status);
        return err_set(err, ERR_RUN, "%s (seq %llu) on communicator %s: world rank %d %s; ranks not arrived: %s",
                       comm_op_name(d->op), (unsigned long long)d->seq, l->name, fr,
                       st >= 256 ? "exited with an error" : "was killed", used ? missing : "none");
    }
    return err_set(err, ERR_RUN, "%s (seq %llu) on communicator %s: timed out after %.0f s waiting for rank(s) %s",
                   comm_op_name(d->op), (unsigned long long)d->seq, l->name, l->timeout,
                   used ? missing : "that have already left it (a rank was stopped?)");
}

// Wakes the waiters on word — a system call only when someone sleeps. The
// writer changes the word before looking at `sleepers`, a waiter counts
// itself in before its last look at the word, so no wake-up is lost.
static void wake(Local *l, _Atomic uint32_t *word) {
    if (atomic_load(&l->a->sleepers)) futex_wake_raw(word);
}

// Waits until *word != val; returns -1 with err on failure or timeout.
static int wait_change(Local *l, _Atomic uint32_t *word, uint32_t val, Err *err) {
    for (int i = 0; i < l->spin && atomic_load(word) == val; i++) __builtin_ia32_pause();
    while (atomic_load(word) == val) {
        atomic_fetch_add(&l->a->sleepers, 1);
        if (atomic_load(word) == val) futex_wait(word, val, 100);
        atomic_fetch_sub(&l->a->sleepers, 1);
        if (atomic_load(word) != val) break;
        if (atomic_load(&l->seg->failed_rank) >= 0 || timer_now() - l->t_start > l->timeout) return wait_error(l, err);
    }
    return 0;
}

static int barrier(Local *l, Err *err) {
    Area *a = l->a;
    uint32_t ph = atomic_load(&a->phase);
    atomic_store(&a->desc[l->me].arrived, ph + 1);
    if (atomic_fetch_add(&a->arrive, 1) == (uint32_t)l->n - 1) {
        atomic_store(&a->arrive, 0);
        atomic_fetch_add(&a->phase, 1);
        wake(l, &a->phase);
        return 0;
    }
    l->in_barrier = ph + 1;
    int rc = wait_change(l, &a->phase, ph, err);
    l->in_barrier = 0;
    return rc;
}

// Publishes this rank's descriptor for collective d.
static void publish(Local *l, const OpDesc *d) {
    l->cur = d;
    l->t_start = timer_now();
    RankDesc *me = &l->a->desc[l->me];
    // a seqlock: readers skip a descriptor whose seq is SEQ_BUSY or changes
    // while they read it
    atomic_store(&me->seq, SEQ_BUSY);
    atomic_thread_fence(memory_order_seq_cst);
    me->op = d->op;
    me->dtype = d->dtype;
    me->root = d->root;
    me->count = d->count;
    atomic_thread_fence(memory_order_seq_cst);
    atomic_store(&me->seq, d->seq);
}

// After the first barrier of d: checks that every rank called the same collective.
static int check_peers(Local *l, const OpDesc *d, Err *err) {
    for (int r = 0; r < l->n; r++) {
        const RankDesc *o = &l->a->desc[r];
        // A peer may already have left this collective and be publishing
        // its next one: read its descriptor like a seqlock, skip it then.
        uint64_t s1 = atomic_load(&o->seq);
        atomic_thread_fence(memory_order_seq_cst);
        RankDesc snap = {.op = o->op, .dtype = o->dtype, .root = o->root, .count = o->count};
        atomic_thread_fence(memory_order_seq_cst);
        uint64_t s2 = atomic_load(&o->seq);
        if (s1 != s2 || s1 == SEQ_BUSY || s1 > d->seq) continue;
        const RankDesc *q = &snap;
        int same_root = d->op != OP_BROADCAST || q->root == d->root;
        if (s1 != d->seq || q->op != d->op || q->dtype != d->dtype || q->count != d->count || !same_root)
            return err_set(err, ERR_RUN,
                           "collective mismatch on communicator %s at seq %llu: rank %d called %s(%s, count %llu%s), "
                           "rank %d called %s(%s, count %llu) at seq %llu",
                           l->name, (unsigned long long)d->seq, l->me, comm_op_name(d->op), comm_dtype_name(d->dtype),
                           (unsigned long long)d->count, same_root ? "" : ", other root", r, comm_op_name(q->op),
                           comm_dtype_name(q->dtype), (unsigned long long)q->count, (unsigned long long)s1);
    }
    return 0;
}

// Publish, meet, check: the entry of a collective that moves no data first.
static int enter(Local *l, const OpDesc *d, Err *err) {
    publish(l, d);
    if (barrier(l, err)) return -1;
    return check_peers(l, d, err);
}

// The barrier after a piece was staged; the first one of a collective also
// checks the peers.
static int staged(Local *l, const OpDesc *d, int first, Err *err) {
    if (barrier(l, err)) return -1;
    return first ? check_peers(l, d, err) : 0;
}

static int l_barrier(void *be, const OpDesc *d, Err *err) { return enter(be, d, err); }

static int l_allreduce(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err) {
    Local *l = be;
    publish(l, d);
    int n = l->n;
    size_t es = comm_dtype_size(d->dtype), per = SLOT / es, count = d->count;
    const void *srcs[MAX_RANKS];
    if (count == 0) return enter(l, d, err);
    for (size_t off = 0; off < count; off += per) {
        size_t m = count - off < per ? count - off : per;
        l->use++;
        memcpy(slot(l, l->me), (const char *)in + off * es, m * es);
        if (staged(l, d, off == 0, err)) return -1;
        if (m * es <= SMALL || n == 1) {
            for (int r = 0; r < n; r++) srcs[r] = slot(l, r);
            comm_reduce((char *)out + off * es, srcs, n, m, d->dtype, d->redop);   // every peer reads my piece
        } else {   // reduce-scatter, then allgather
            size_t lo = m * (size_t)l->me / (size_t)n, hi = m * (size_t)(l->me + 1) / (size_t)n;
            for (int r = 0; r < n; r++) srcs[r] = slot(l, r) + lo * es;
            comm_reduce(slot(l, n) + lo * es, srcs, n, hi - lo, d->dtype, d->redop);
            if (barrier(l, err)) return -1;
            memcpy((char *)out + off * es, slot(l, n), m * es);
        }
        comm_add_volume(volume_allreduce(m, es, n, l->me), sent, recv);
    }
    return 0;
}

static int l_reduce_scatter(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err) {
    Local *l = be;
    publish(l, d);
    int n = l->n;
    size_t es = comm_dtype_size(d->dtype), k = d->count / (size_t)n, per = SLOT / es / (size_t)n;
    if (per == 0) per = 1;
    const void *srcs[MAX_RANKS];
    if (k == 0) return enter(l, d, err);
    for (size_t off = 0; off < k; off += per) {
        size_t m = k - off < per ? k - off : per;
        l->use++;
        // my slot holds piece [off, off+m) of every block, block by block
        for (int b = 0; b < n; b++) memcpy(slot(l, l->me) + (size_t)b * m * es, (const char *)in + ((size_t)b * k + off) * es, m * es);
        if (staged(l, d, off == 0, err)) return -1;
        for (int r = 0; r < n; r++) srcs[r] = slot(l, r) + (size_t)l->me * m * es;
        comm_reduce((char *)out + off * es, srcs, n, m, d->dtype, d->redop);
        comm_add_volume(volume_reduce_scatter((size_t)n * m, es, n), sent, recv);   // piece [off, off+m) of n blocks
    }
    return 0;
}

static int l_allgather(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err) {
    Local *l = be;
    publish(l, d);
    int n = l->n;
    size_t es = comm_dtype_size(d->dtype), k = d->count, per = SLOT / es;
    if (k == 0) return enter(l, d, err);
    for (size_t off = 0; off < k; off += per) {
        size_t m = k - off < per ? k - off : per;
        l->use++;
        memcpy(slot(l, l->me), (const char *)in + off * es, m * es);
        if (staged(l, d, off == 0, err)) return -1;
        for (int r = 0; r < n; r++) memcpy((char *)out + ((size_t)r * k + off) * es, slot(l, r), m * es);
        comm_add_volume(volume_allgather(m, es, n), sent, recv);
    }
    return 0;
}

static int l_broadcast(void *be, const OpDesc *d, void *buf, uint64_t *sent, uint64_t *recv, Err *err) {
    Local *l = be;
    publish(l, d);
    size_t es = comm_dtype_size(d->dtype), per = SLOT / es, count = d->count;
    if (count == 0) return enter(l, d, err);
    for (size_t off = 0; off < count; off += per) {
        size_t m = count - off < per ? count - off : per;
        l->use++;
        if (l->me == d->root) memcpy(slot(l, l->n), (char *)buf + off * es, m * es);
        if (staged(l, d, off == 0, err)) return -1;
        if (l->me != d->root) memcpy((char *)buf + off * es, slot(l, l->n), m * es);
        comm_add_volume(volume_broadcast(m, es, l->n, l->me, d->root), sent, recv);
    }
    return 0;
}

static int l_send(void *be, const OpDesc *d, const void *buf, int peer, uint64_t *sent, Err *err) {
    Local *l = be;
    publish(l, d);
    Mailbox *mb = mailbox(l, l->me, peer);
    size_t bytes = d->count * comm_dtype_size(d->dtype);
    for (size_t off = 0; off < bytes || off == 0; off += P2P) {
        size_t m = bytes - off < P2P ? bytes - off : P2P;
        uint32_t f;
        while ((f = atomic_load(&mb->full)) != 0)
            if (wait_change(l, &mb->full, f, err)) return -1;
        memcpy(mail_data(mb), (const char *)buf + off, m);
        atomic_store(&mb->full, (uint32_t)m | 0x80000000u);   // high bit: a piece, possibly empty
        wake(l, &mb->full);
        *sent += m;
        if (bytes == 0) break;
    }
    return 0;
}

static int l_recv(void *be, const OpDesc *d, void *buf, int peer, uint64_t *recv, Err *err) {
    Local *l = be;
    publish(l, d);
    Mailbox *mb = mailbox(l, peer, l->me);
    size_t bytes = d->count * comm_dtype_size(d->dtype);
    for (size_t off = 0; off < bytes || off == 0; off += P2P) {
        size_t m = bytes - off < P2P ? bytes - off : P2P;
        while (atomic_load(&mb->full) == 0)
            if (wait_change(l, &mb->full, 0, err)) return -1;
        uint32_t got = atomic_load(&mb->full) & 0x7FFFFFFFu;
        if (got != m)
            return err_set(err, ERR_RUN, "recv on %s from rank %d: message size mismatch (%u bytes arrived, %zu expected)",
                           l->name, peer, got, m);
        memcpy((char *)buf + off, mail_data(mb), m);
        atomic_store(&mb->full, 0);
        wake(l, &mb->full);
        *recv += m;
        if (bytes == 0) break;
    }
    return 0;
}

static Local *local_new(Segment *seg, Area *a, int me, int n, const char *name, double timeout) {
    Local *l = calloc(1, sizeof *l);
    CHECKF(l, "out of memory");
    l->seg = seg;
    l->a = a;
    l->me = me;
    l->n = n;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    l->spin = seg->nproc <= cpus ? 4000 : 0;   // poll briefly only when every rank has a core
    l->timeout = timeout;
    snprintf(l->name, sizeof l->name, "%s", name);
    return l;
}

static Area *area_alloc(Segment *seg, int n, Err *err) {
    size_t need = area_bytes(n);
    uint64_t off = atomic_fetch_add(&seg->bump, need);
    if (off + need > SEG_BYTES) {
        err_set(err, ERR_RUN, "shared-memory segment exhausted (%d-rank communicator needs %zu bytes)", n, need);
        return NULL;
    }
    Area *a = (Area *)((char *)seg + off);
    memset(a, 0, sizeof(Area) + (size_t)n * sizeof(RankDesc));
    a->n = (uint32_t)n;
    return a;
}

static int l_split(void *be, const OpDesc *d, int color, int key, void **out_be, int *rank, int *size, Err *err) {
    Local *l = be;
    RankDesc *me = &l->a->desc[l->me];
    me->color = color;
    me->key = key;
    me->offer = 0;
    OpDesc dd = *d;
    dd.root = 0;
    dd.count = 0;
    if (enter(l, &dd, err)) return -1;
    // my group, ordered by (key, rank)
    int members[MAX_RANKS] = {0}, m = 0;
    for (int r = 0; r < l->n; r++)
        if (l->a->desc[r].color == color) members[m++] = r;
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0; j--) {
            const RankDesc *x = &l->a->desc[members[j - 1]], *y = &l->a->desc[members[j]];
            if (x->key > y->key || (x->key == y->key && members[j - 1] > members[j])) {
                int t = members[j - 1]; members[j - 1] = members[j]; members[j] = t;
            } else break;
        }
    int my = 0;
    while (members[my] != l->me) my++;
    int leader = members[0];
    for (int i = 1; i < m; i++) leader = members[i] < leader ? members[i] : leader;
    if (l->me == leader) {
        Area *na = area_alloc(l->seg, m, err);
        if (!na) return -1;
        for (int i = 0; i < m; i++) na->world_rank[i] = l->a->world_rank[members[i]];
        me->offer = (uint64_t)((char *)na - (char *)l->seg);
    }
    if (barrier(l, err)) return -1;
    Area *na = (Area *)((char *)l->seg + l->a->desc[leader].offer);
    if (barrier(l, err)) return -1;   // everyone has read the offers before they are reused
    *out_be = local_new(l->seg, na, my, m, d->name ? d->name : "split", l->timeout);
    *rank = my;
    *size = m;
    return 0;
}

static void l_free(void *be) { free(be); }

static void l_rank_error(void *be, const char *line) {
    Local *l = be;
    snprintf(l->seg->error[l->a->world_rank[l->me]], sizeof l->seg->error[0], "%s", line);
}

static const CommBackendOps LOCAL_OPS = {
    "local", l_allreduce, l_reduce_scatter, l_allgather, l_broadcast, l_send, l_recv, l_barrier, l_split, l_free, NULL,
    l_rank_error,
};

// Writes each distinct error line the ranks left once, naming the ranks
// that had it ("<who>: ranks 0, 1, 2: <message>").
static void write_rank_errors(const Segment *seg, int nproc) {
    for (int r = 0; r < nproc; r++) {
        const char *line = seg->error[r], *colon = strstr(line, ": ");
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = !strcmp(seg->error[q], line);
        if (!line[0] || seen || !colon) continue;
        char ranks[96];
        int k = 0, n = 0;
        for (int q = r; q < nproc; q++)
            if (!strcmp(seg->error[q], line) && k < (int)sizeof ranks - 16) {
                k += snprintf(ranks + k, sizeof ranks - (size_t)k, "%s%d", n ? ", " : "", q);
                n++;
            }
        fprintf(stderr, "%.*s: rank%s %s: %s\n", (int)(colon - line), line, n > 1 ? "s" : "", ranks, colon + 2);
    }
}

// ---- the launcher ----

int comm_launch(int nproc, CommRankMain fn, void *arg, double timeout, Err *err) {
    if (nproc < 1 || nproc > MAX_RANKS) return err_set(err, ERR_USAGE, "--nproc %d: must be in 1..%d", nproc, MAX_RANKS);
    Segment *seg = mmap(NULL, SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (seg == MAP_FAILED) return err_set(err, ERR_RUN, "cannot map %d MiB of shared memory", SEG_BYTES >> 20);
    atomic_store(&seg->failed_rank, -1);
    seg->nproc = nproc;
    atomic_store(&seg->bump, header_bytes());
    Area *world = area_alloc(seg, nproc, err);
    if (!world) { munmap(seg, SEG_BYTES); return -1; }
    for (int r = 0; r < nproc; r++) world->world_rank[r] = r;
    fflush(NULL);
    pid_t parent = getpid();
    for (int r = 0; r < nproc; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            for (int k = 0; k < r; k++) kill(seg->pids[k], SIGKILL);
            while (wait(NULL) > 0) {}
            munmap(seg, SEG_BYTES);
            return err_set(err, ERR_RUN, "fork failed for rank %d: %s", r, strerror(errno));
        }
        if (pid == 0) {   // rank r
            prctl(PR_SET_PDEATHSIG, SIGKILL);   // the launcher gone: go too
            if (getppid() != parent) _exit(1);
            Comm *w = comm_wrap(&LOCAL_OPS, local_new(seg, world, r, nproc, "world", timeout), r, nproc, "world", timeout);
            int rc = fn(w, arg);
            comm_free(w);
            fflush(NULL);
            _exit(rc < 0 ? 1 : rc > 255 ? 255 : rc);   // the rank's own status
        }
        seg->pids[r] = pid;
    }
    // Wait; on the first failure tell the others, give them a moment to
    // report (they poll every 100 ms), then kill what is left.
    int left = nproc, first = -1, first_status = 0;
    double deadline = 0;
    while (left > 0) {
        int status;
        pid_t pid = first >= 0 ? waitpid(-1, &status, WNOHANG) : waitpid(-1, &status, 0);
        if (pid > 0) {
            left--;
            int r = 0;
            while (r < nproc && seg->pids[r] != pid) r++;
            int bad = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
            if (bad && first < 0) {
                first = r;
                first_status = status;
                atomic_store(&seg->failed_status, WIFEXITED(status) ? 256 : 0);
                atomic_store(&seg->failed_rank, r);
                deadline = timer_now() + 2.0;
            }
            continue;
        }
        if (pid < 0 && errno != EINTR) break;
        if (first >= 0 && timer_now() > deadline) {
            for (int r = 0; r < nproc; r++) kill(seg->pids[r], SIGKILL);
            deadline = 1e300;
        }
        if (first >= 0) usleep(20000);
    }
    write_rank_errors(seg, nproc);
    munmap(seg, SEG_BYTES);
    if (first < 0) return 0;
    if (WIFSIGNALED(first_status))
        return err_set(err, ERR_RUN, "rank %d was killed by signal %d; all ranks stopped", first, WTERMSIG(first_status));
    int st = WEXITSTATUS(first_status);   // a rank's usage error stays one for the command
    return err_set(err, st == ERR_USAGE ? ERR_USAGE : ERR_RUN, "all ranks stopped after rank %d's error above (exit "
                   "status %d)", first, st);
}
