// io/ckpt_writer.c — the background checkpoint writer (ckpt_writer.h): the
// staging copy, and one thread per write that ckpt_writer_wait joins.
#include "io/ckpt_writer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"

struct CkptWriter {
    float *stage;              // the staging buffer (MEM_CKPT), `cap` floats
    size_t cap;
    // the write in flight: what ckpt_write_pieces takes, the pieces pointing into stage
    char *dir;
    int64_t step;
    int rank, nsec, npc;
    const ParamTable *t;
    const char *const *sections;
    CkptPiece *pc;
    pthread_t thread;
    int running;               // a thread started and not yet joined
    atomic_int finished;       // the thread has ended its write
    int rc;                    // its status, and why
    Err err;
};

int ckpt_writer_open(CkptWriter **out, size_t floats, Err *err) {
    *out = NULL;
    CkptWriter *w = calloc(1, sizeof *w);
    if (!w || !(w->stage = mem_alloc(MEM_CKPT, floats * sizeof(float)))) {
        free(w);
        return err_set(err, ERR_RUN, "out of memory for --ckpt-async's staging copy (%.1f MiB)",
                       (double)floats * sizeof(float) / 1048576.0);
    }
    w->cap = floats;
    *out = w;
    return 0;
}

// TESSERA_TEST_CKPT_DELAY's pause (the test hook in ckpt_writer.h).
static void test_delay(void) {
    const char *v = getenv("TESSERA_TEST_CKPT_DELAY");
    long ms = v ? atol(v) : 0;
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static void *write_thread(void *arg) {
    CkptWriter *w = arg;
    test_delay();
    w->rc = ckpt_write_pieces(w->dir, w->step, w->rank, w->t, w->sections, w->nsec, w->pc, w->npc, &w->err);
    test_delay();
    atomic_store(&w->finished, 1);
    return NULL;
}

// Copies n floats with the run's threads (a staging copy of a large model
// is memory-bound: one thread would hold the step up).
static void copy_floats(float *dst, const float *src, size_t n) {
    enum { CHUNK = 1 << 18 };
    long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        size_t a = (size_t)c * CHUNK, z = a + CHUNK < n ? a + CHUNK : n;
        memcpy(dst + a, src + a, (z - a) * sizeof *dst);
    }
}

int ckpt_writer_start(CkptWriter *w, const char *dir, int64_t step, int rank, const ParamTable *t,
                      const char *const *sections, int nsec, const CkptPiece *pc, int npc, Err *err) {
    CHECKF(!w->running, "a checkpoint write is already in flight");
    CHECK(nsec >= 1 && nsec <= CKPT_MAX_SECTIONS);
    size_t need = 0;
    for (int q = 0; q < npc; q++) need += (pc[q].hi - pc[q].lo) * (size_t)nsec;
    CHECKF(need <= w->cap, "checkpoint pieces of %zu floats, staging buffer of %zu", need, w->cap);
    free(w->dir);
    free(w->pc);
    w->dir = strdup(dir);
    w->pc = malloc(((size_t)npc + 1) * sizeof *w->pc);
    if (!w->dir || !w->pc) return err_set(err, ERR_RUN, "out of memory");
    // section by section, piece after piece: the staging buffer in the order the file stores them
    float *o = w->stage;
    for (int k = 0; k < nsec; k++)
        for (int q = 0; q < npc; q++) {
            size_t n = pc[q].hi - pc[q].lo;
            copy_floats(o, pc[q].data[k], n);
            w->pc[q].lo = pc[q].lo;
            w->pc[q].hi = pc[q].hi;
            w->pc[q].data[k] = o;
            o += n;
        }
    w->step = step;
    w->rank = rank;
    w->t = t;
    w->sections = sections;
    w->nsec = nsec;
    w->npc = npc;
    w->rc = 0;
    atomic_store(&w->finished, 0);
    int e = pthread_create(&w->thread, NULL, write_thread, w);
    if (e) return err_set(err, ERR_RUN, "cannot start the checkpoint writer's thread: %s", strerror(e));
    w->running = 1;
    return 0;
}

int ckpt_writer_done(CkptWriter *w) { return !w->running || atomic_load(&w->finished); }

int ckpt_writer_wait(CkptWriter *w, Err *err) {
    if (!w->running) return 0;
    pthread_join(w->thread, NULL);
    w->running = 0;
    if (w->rc && err) *err = w->err;
    return w->rc ? -1 : 0;
}

void ckpt_writer_close(CkptWriter *w) {
    if (!w) return;
    ckpt_writer_wait(w, NULL);
    mem_free(w->stage);
    free(w->dir);
    free(w->pc);
    free(w);
}
