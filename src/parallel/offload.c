#include "parallel/offload.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/checksum.h"
#include "core/prof.h"
#include "core/timer.h"

enum { SLOT_FREE, SLOT_READING, SLOT_READY, SLOT_BUSY, SLOT_DIRTY };

typedef struct {
    float *buf[OFFLOAD_MAX_KINDS];
    int unit, state;
} Slot;

struct Offload {
    char dir[4200];
    char path[OFFLOAD_MAX_KINDS][4300];
    int fd[OFFLOAD_MAX_KINDS];
    int dirfd;              // the directory, flocked while this process uses it (-1: none)
    int kinds, nu, keep;
    size_t *off, *n, total, maxn;
    uint32_t *crc;          // per kind and unit: [k * nu + u], of its last write
    unsigned char *written; // per kind and unit: written at least once (else zeros)
    const float *map[OFFLOAD_MAX_KINDS];
    Slot slot[OFFLOAD_RING];
    // the pass
    pthread_t reader, writer;
    int running, units_done;
    int prefetched;         // the running pass was started ahead (offload_prefetch) and no unit taken yet
    int stop;               // the threads stop at their next wait (a prefetch called off)
    int counted;            // its bytes are in the allocator's offload figure
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int failed;
    Err err;
    uint64_t nread, nwritten;
    double waited;
    // the parameters' file (offload_map_params): mapped read-write
    char ppath[4300];
    int pfd;
    void *pmap;
    size_t pbytes;
};

// The parameters' files mapped in this process, for offload_fault_path
// (a SIGBUS handler's lookup: plain loads only).
enum { MAX_PMAPS = 64 };
static struct { const char *lo, *hi, *path; } pmaps[MAX_PMAPS];

size_t offload_ring_bytes(int kinds, size_t maxn) {
    return (size_t)OFFLOAD_RING * (size_t)kinds * maxn * sizeof(float);
}

// Keeps the pass's first failure (under the lock) and wakes every waiter.
static void fail_locked(Offload *o, const Err *e) {
    if (!o->failed) o->err = *e;
    o->failed = 1;
    pthread_cond_broadcast(&o->cv);
}

static int io_full(int fd, void *buf, size_t bytes, off_t at, int wr) {
    char *p = buf;
    while (bytes) {
        ssize_t r = wr ? pwrite(fd, p, bytes, at) : pread(fd, p, bytes, at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) { errno = wr ? ENOSPC : 0; return -1; }
        p += r;
        at += r;
        bytes -= (size_t)r;
    }
    return 0;
}

// Reads kind k of unit u into dst and checks it (zeros for a unit never written).
static int read_unit(Offload *o, int k, int u, float *dst, Err *err) {
    size_t bytes = o->n[u] * sizeof(float);
    if (!o->written[k * o->nu + u]) {
        memset(dst, 0, bytes);
        return 0;
    }
    if (io_full(o->fd[k], dst, bytes, (off_t)(o->off[u] * sizeof(float)), 0))
        return err_set(err, ERR_RUN, "%s: read failed: %s", o->path[k],
                       errno ? strerror(errno) : "the file is shorter than written (truncated underneath)");
    if (crc32c(0, dst, bytes) != o->crc[k * o->nu + u])
        return err_set(err, ERR_RUN, "%s: floats [%zu, %zu) differ from what was written (the file changed underneath)",
                       o->path[k], o->off[u], o->off[u] + o->n[u]);
    return 0;
}

// The writer thread's write of a unit, and offload_write's.
static int write_unit(Offload *o, int k, int u, const float *src, Err *err) {
    size_t bytes = o->n[u] * sizeof(float);
    uint32_t c = crc32c(0, src, bytes);
    if (io_full(o->fd[k], (void *)src, bytes, (off_t)(o->off[u] * sizeof(float)), 1))
        return err_set(err, ERR_RUN, "%s: write failed: %s", o->path[k], strerror(errno));
    o->crc[k * o->nu + u] = c;
    o->written[k * o->nu + u] = 1;
    return 0;
}

static void *reader_main(void *arg) {
    Offload *o = arg;
    for (int u = 0; u < o->nu; u++) {
        Slot *s = &o->slot[u % OFFLOAD_RING];
        pthread_mutex_lock(&o->mu);
        while (s->state != SLOT_FREE && !o->failed && !o->stop) pthread_cond_wait(&o->cv, &o->mu);
        int stop = o->failed || o->stop;
        if (!stop) { s->state = SLOT_READING; s->unit = u; }
        pthread_mutex_unlock(&o->mu);
        if (stop) break;
        Err e;
        int rc = 0;
        for (int k = 0; k < o->kinds && !rc; k++) rc = read_unit(o, k, u, s->buf[k], &e);
        pthread_mutex_lock(&o->mu);
        if (rc) fail_locked(o, &e);
        s->state = SLOT_READY;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        if (rc) break;
    }
    return NULL;
}

static void *writer_main(void *arg) {
    Offload *o = arg;
    for (int u = 0; u < o->nu; u++) {
        Slot *s = &o->slot[u % OFFLOAD_RING];
        pthread_mutex_lock(&o->mu);
        while (!(s->unit == u && s->state == SLOT_DIRTY) && !o->failed && !o->stop) pthread_cond_wait(&o->cv, &o->mu);
        int stop = o->failed || o->stop;
        pthread_mutex_unlock(&o->mu);
        if (stop) break;
        Err e;
        int rc = 0;
        for (int k = 0; k < o->kinds && !rc; k++) rc = write_unit(o, k, u, s->buf[k], &e);
        pthread_mutex_lock(&o->mu);
        if (rc) fail_locked(o, &e);
        else o->nwritten += (uint64_t)o->kinds * o->n[u] * sizeof(float);
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        if (rc) break;
    }
    return NULL;
}

// Starts the reader and the writer of a pass.
static int start_pass(Offload *o, Err *err) {
    o->failed = o->stop = 0;
    o->units_done = 0;
    for (int i = 0; i < OFFLOAD_RING; i++) {
        o->slot[i].unit = -1;
        o->slot[i].state = SLOT_FREE;
    }
    if (pthread_create(&o->reader, NULL, reader_main, o))
        return err_set(err, ERR_RUN, "%s: cannot start the offload reader thread", o->dir);
    if (pthread_create(&o->writer, NULL, writer_main, o)) {
        pthread_mutex_lock(&o->mu);
        Err e;
        err_set(&e, ERR_RUN, "%s: cannot start the offload writer thread", o->dir);
        fail_locked(o, &e);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->reader, NULL);
        if (err) *err = o->err;
        return -1;
    }
    o->running = 1;
    return 0;
}

int offload_pass_begin(Offload *o, Err *err) {
    if (o->running) {   // started ahead: its first units are read already (or its failure is waiting)
        CHECKF(o->prefetched, "an offload pass is already running");
        o->prefetched = 0;
        return 0;
    }
    return start_pass(o, err);
}

int offload_prefetch(Offload *o, Err *err) {
    CHECKF(!o->running, "an offload pass is still running");
    if (start_pass(o, err)) return -1;
    o->prefetched = 1;
    return 0;
}

// Calls off a pass started ahead whose units nobody has taken (the files
// are about to be written, mapped or closed): its reads are discarded.
static void quiesce(Offload *o) {
    if (!o->running) return;
    CHECKF(o->prefetched, "an offload pass is still running");
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->reader, NULL);
    pthread_join(o->writer, NULL);
    o->running = o->prefetched = o->stop = o->failed = 0;
}

int offload_unit(Offload *o, int u, float **bufs, Err *err) {
    Slot *s = &o->slot[u % OFFLOAD_RING];
    double t0 = timer_now(), p0 = prof_begin();
    pthread_mutex_lock(&o->mu);
    while (!(s->unit == u && s->state == SLOT_READY) && !o->failed) pthread_cond_wait(&o->cv, &o->mu);
    int failed = o->failed;
    if (!failed) s->state = SLOT_BUSY;
    pthread_mutex_unlock(&o->mu);
    for (int k = 0; k < o->kinds && !failed; k++)   // counted as taken: a read called off is read again
        if (o->written[k * o->nu + u]) o->nread += o->n[u] * sizeof(float);
    o->waited += timer_now() - t0;
    prof_end(p0, PROF_IO, 0, 0);
    if (failed) {
        if (err) *err = o->err;
        return -1;
    }
    for (int k = 0; k < o->kinds; k++) bufs[k] = s->buf[k];
    return 0;
}

void offload_unit_done(Offload *o, int u) {
    Slot *s = &o->slot[u % OFFLOAD_RING];
    pthread_mutex_lock(&o->mu);
    CHECKF(s->unit == u && s->state == SLOT_BUSY, "offload unit %d was not taken", u);
    s->state = SLOT_DIRTY;
    o->units_done++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

int offload_pass_end(Offload *o, Err *err) {
    if (!o->running) return 0;
    double t0 = timer_now(), p0 = prof_begin();
    pthread_mutex_lock(&o->mu);
    // a caller that stops early (a failure elsewhere) ends the pass: the
    // threads stop at their next wait
    if (o->units_done < o->nu && !o->failed) {
        Err e;
        err_set(&e, ERR_RUN, "%s: the offload pass was stopped before its end", o->dir);
        fail_locked(o, &e);
    }
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->reader, NULL);
    pthread_join(o->writer, NULL);
    o->running = 0;
    o->waited += timer_now() - t0;
    prof_end(p0, PROF_IO, 0, 0);
    if (!o->failed) return 0;
    if (err) *err = o->err;
    return -1;
}

// ---- opening and closing ----

// This host's name as it goes into a directory name: letters, digits and
// '_' only (a dot would end it), at most 63 of them.
static void host_tag(char *buf, size_t cap) {
    char h[256] = "";
    if (gethostname(h, sizeof h - 1)) snprintf(h, sizeof h, "host");
    size_t n = 0;
    for (const char *c = h; *c && n + 1 < cap && n < 63; c++)
        buf[n++] = (isalnum((unsigned char)*c) || *c == '_') ? *c : '_';
    buf[n] = 0;
}

// Whether process pid runs: it exists and is not a zombie (a killed
// process its parent has not reaped yet holds no files and no locks).
static int pid_runs(long pid) {
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;   // no /proc: take it as running
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');   // "pid (comm) S ...": the state after the command's closing parenthesis
    return !(rp && rp[1] == ' ' && rp[2] == 'Z');
}

// Removes what a killed process left under base: the directories
// offload-rRRRRR-HOST-pPID.XXXXXX of this host whose PID runs no more (a
// SIGKILL skips the removal at exit; --max-restarts would pile them up),
// with the files of these names in them. Nothing else is touched: other
// hosts' directories, live processes' (by PID, and by the flock each owner
// holds on its directory while it runs), a directory holding anything more
// (rmdir fails), and never a symbolic link (O_NOFOLLOW).
static void remove_stale(const char *base, const char *host, int kinds, const char *const *names) {
    DIR *d = opendir(base);
    if (!d) return;
    struct dirent *de;
    size_t hl = strlen(host);
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        // offload-r + 5 digits + '-' + host + "-p" + pid + '.'
        if (strncmp(nm, "offload-r", 9) || strlen(nm) < 16 + hl || nm[14] != '-' || strncmp(nm + 15, host, hl) ||
            strncmp(nm + 15 + hl, "-p", 2))
            continue;
        char *end;
        long pid = strtol(nm + 17 + hl, &end, 10);
        if (pid <= 0 || *end != '.' || pid == (long)getpid() || pid_runs(pid)) continue;
        int dfd = openat(dirfd(d), nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0) continue;
        if (flock(dfd, LOCK_EX | LOCK_NB)) {   // its owner holds it (a process this one cannot see)
            close(dfd);
            continue;
        }
        for (int k = 0; k < kinds; k++) {
            char f[300];
            snprintf(f, sizeof f, "%s.f32", names[k]);
            unlinkat(dfd, f, 0);
        }
        unlinkat(dfd, OFFLOAD_PARAMS_FILE, 0);
        close(dfd);
        unlinkat(dirfd(d), nm, AT_REMOVEDIR);
    }
    closedir(d);
}

static void remove_files(Offload *o) {
    for (int k = 0; k < o->kinds; k++)
        if (o->path[k][0]) unlink(o->path[k]);
    if (o->ppath[0]) unlink(o->ppath);
    if (o->dir[0]) rmdir(o->dir);
}

int offload_open(Offload **out, const char *base, const char *flag, int rank, int kinds, const char *const *names,
                 const size_t *off, const size_t *n, int nu, int keep, Err *err) {
    *out = NULL;
    CHECK(kinds >= 1 && kinds <= OFFLOAD_MAX_KINDS && nu >= 1);
    struct stat sb;
    if (stat(base, &sb)) return err_set(err, ERR_USAGE, "%s %s: %s", flag, base, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return err_set(err, ERR_USAGE, "%s %s: not a directory", flag, base);
    if (access(base, W_OK | X_OK)) return err_set(err, ERR_USAGE, "%s %s: not writable", flag, base);
    Offload *o = calloc(1, sizeof *o);
    if (!o) return err_set(err, ERR_RUN, "out of memory");
    o->kinds = kinds;
    o->nu = nu;
    o->keep = keep;
    for (int k = 0; k < OFFLOAD_MAX_KINDS; k++) o->fd[k] = -1;
    o->dirfd = -1;
    o->pfd = -1;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->off = malloc((size_t)nu * sizeof *o->off);
    o->n = malloc((size_t)nu * sizeof *o->n);
    o->crc = calloc((size_t)nu * kinds, sizeof *o->crc);
    o->written = calloc((size_t)nu * kinds, 1);
    if (!o->off || !o->n || !o->crc || !o->written) goto oom;
    for (int u = 0; u < nu; u++) {
        o->off[u] = off[u];
        o->n[u] = n[u];
        if (off[u] + n[u] > o->total) o->total = off[u] + n[u];
        if (n[u] > o->maxn) o->maxn = n[u];
    }
    for (int i = 0; i < OFFLOAD_RING; i++)
        for (int k = 0; k < kinds; k++)
            if (!(o->slot[i].buf[k] = mem_alloc(MEM_OPTIM, o->maxn * sizeof(float)))) goto oom;
    char host[72];
    host_tag(host, sizeof host);
    remove_stale(base, host, kinds, names);
    snprintf(o->dir, sizeof o->dir, "%s/offload-r%05d-%s-p%ld.XXXXXX", base, rank, host, (long)getpid());
    if (!mkdtemp(o->dir)) {
        err_set(err, ERR_RUN, "%s: cannot create a directory for the offload files: %s", base, strerror(errno));
        o->dir[0] = 0;
        goto fail;
    }
    o->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (o->dirfd >= 0) flock(o->dirfd, LOCK_EX | LOCK_NB);   // a sign of life for remove_stale
    for (int k = 0; k < kinds; k++) {
        snprintf(o->path[k], sizeof o->path[k], "%s/%s.f32", o->dir, names[k]);
        o->fd[k] = open(o->path[k], O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (o->fd[k] < 0) {
            err_set(err, ERR_RUN, "%s: cannot create: %s", o->path[k], strerror(errno));
            o->path[k][0] = 0;
            goto fail;
        }
        int e = o->total ? posix_fallocate(o->fd[k], 0, (off_t)(o->total * sizeof(float))) : 0;
        if (e) {
            char b[32];
            err_set(err, ERR_RUN, "%s: cannot reserve %s: %s", o->path[k], mem_fmt(o->total * sizeof(float), b, sizeof b),
                    strerror(e));
            goto fail;
        }
    }
    mem_offload_add((long long)offload_disk_bytes(o));
    o->counted = 1;
    *out = o;
    return 0;
oom:
    err_set(err, ERR_RUN, "out of memory setting up the optimizer offload");
fail:
    o->keep = 0;
    offload_close(o);
    return -1;
}

int offload_write(Offload *o, int k, int u, const float *src, Err *err) {
    quiesce(o);
    return write_unit(o, k, u, src, err);
}

void offload_close(Offload *o) {
    if (!o) return;
    quiesce(o);
    offload_unmap(o);
    for (int k = 0; k < o->kinds; k++)
        if (o->fd[k] >= 0) close(o->fd[k]);
    if (o->pmap) {
        for (int i = 0; i < MAX_PMAPS; i++)
            if (pmaps[i].lo == o->pmap) pmaps[i].lo = pmaps[i].hi = NULL;
        munmap(o->pmap, o->pbytes);
    }
    if (o->pfd >= 0) close(o->pfd);
    if (o->counted) mem_offload_add(-(long long)offload_disk_bytes(o));
    if (!o->keep) remove_files(o);
    if (o->dirfd >= 0) close(o->dirfd);
    for (int i = 0; i < OFFLOAD_RING; i++)
        for (int k = 0; k < OFFLOAD_MAX_KINDS; k++) mem_free(o->slot[i].buf[k]);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o->off);
    free(o->n);
    free(o->crc);
    free(o->written);
    free(o);
}

const char *offload_dir(const Offload *o) { return o->dir; }
size_t offload_disk_bytes(const Offload *o) { return (size_t)o->kinds * o->total * sizeof(float) + o->pbytes; }
uint64_t offload_bytes_read(const Offload *o) { return o->nread; }
uint64_t offload_bytes_written(const Offload *o) { return o->nwritten; }
double offload_waited(const Offload *o) { return o->waited; }

void offload_count(Offload *o, uint64_t read, uint64_t written, double waited) {
    pthread_mutex_lock(&o->mu);   // the writer thread adds to nwritten
    o->nread += read;
    o->nwritten += written;
    o->waited += waited;
    pthread_mutex_unlock(&o->mu);
}

// ---- the parameters' file ----

void *offload_map_params(Offload *o, size_t bytes, Err *err) {
    CHECKF(!o->pmap, "the parameters' file is already mapped");
    if (!bytes) bytes = 1;
    snprintf(o->ppath, sizeof o->ppath, "%s/%s", o->dir, OFFLOAD_PARAMS_FILE);
    o->pfd = open(o->ppath, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (o->pfd < 0) {
        err_set(err, ERR_RUN, "%s: cannot create: %s", o->ppath, strerror(errno));
        o->ppath[0] = 0;
        return NULL;
    }
    int e = posix_fallocate(o->pfd, 0, (off_t)bytes);   // written back later, the blocks are there
    if (e) {
        char b[32];
        err_set(err, ERR_RUN, "%s: cannot reserve %s: %s", o->ppath, mem_fmt(bytes, b, sizeof b), strerror(e));
        return NULL;
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, o->pfd, 0);
    if (p == MAP_FAILED) {
        err_set(err, ERR_RUN, "%s: cannot map: %s", o->ppath, strerror(errno));
        return NULL;
    }
    o->pmap = p;
    o->pbytes = bytes;
    if (o->counted) mem_offload_add((long long)bytes);
    for (int i = 0; i < MAX_PMAPS; i++)
        if (!pmaps[i].lo) {
            pmaps[i].path = o->ppath;
            pmaps[i].hi = (const char *)p + bytes;
            pmaps[i].lo = p;
            break;
        }
    return p;
}

const char *offload_params_path(const Offload *o) { return o->ppath; }

int offload_params_intact(const Offload *o, Err *err) {
    struct stat sb;
    if (fstat(o->pfd, &sb) || (size_t)sb.st_size < o->pbytes)
        return err_set(err, ERR_RUN, "%s: the file is shorter than written (cut short underneath)", o->ppath);
    return 0;
}

const char *offload_fault_path(const void *addr) {
    const char *a = addr;
    for (int i = 0; i < MAX_PMAPS; i++)
        if (pmaps[i].lo && a >= pmaps[i].lo && a < pmaps[i].hi) return pmaps[i].path;
    return NULL;
}

// ---- the files whole ----

// Kind k's units at p (the whole file) against their checksums; a unit
// never written must be zeros.
static int check_map(Offload *o, int k, const float *p, Err *err) {
    for (int u = 0; u < o->nu; u++) {
        const float *x = p + o->off[u];
        size_t bytes = o->n[u] * sizeof(float);
        int ok;
        if (o->written[k * o->nu + u]) {
            ok = crc32c(0, x, bytes) == o->crc[k * o->nu + u];
        } else {
            const unsigned char *b = (const unsigned char *)x;
            ok = bytes == 0 || (b[0] == 0 && !memcmp(b, b + 1, bytes - 1));
        }
        if (!ok)
            return err_set(err, ERR_RUN, "%s: floats [%zu, %zu) differ from what was written (the file changed underneath)",
                           o->path[k], o->off[u], o->off[u] + o->n[u]);
    }
    return 0;
}

const float *offload_map(Offload *o, int k, Err *err) {
    CHECK(k >= 0 && k < o->kinds);
    quiesce(o);
    if (o->map[k]) return o->map[k];
    if (!o->total) return (const float *)o->slot[0].buf[k];   // nothing to map: no floats
    size_t bytes = o->total * sizeof(float);
    struct stat sb;
    if (fstat(o->fd[k], &sb) || (size_t)sb.st_size < bytes) {
        err_set(err, ERR_RUN, "%s: the file is shorter than written (truncated underneath)", o->path[k]);
        return NULL;
    }
    void *p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, o->fd[k], 0);
    if (p == MAP_FAILED) {
        err_set(err, ERR_RUN, "%s: cannot map: %s", o->path[k], strerror(errno));
        return NULL;
    }
    o->map[k] = p;
    if (check_map(o, k, p, err)) return NULL;   // unmapped at offload_unmap
    return p;
}

void offload_unmap(Offload *o) {
    for (int k = 0; k < OFFLOAD_MAX_KINDS; k++)
        if (o->map[k] && o->total) {
            munmap((void *)o->map[k], o->total * sizeof(float));
            o->map[k] = NULL;
        }
}
