// kernels/threads' chunks: every item [0, n) run once and once only, for
// any count of items, chunk and threads; a call inside a parallel region
// runs on its caller's thread; the chunk as many runs as make CHUNK_FLOPS,
// cut to leave each thread 8; and a thread that is slow takes fewer chunks
// than the others, not an equal share (the point of taking chunks as
// threads finish).
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/threads.h"
#include "test.h"

typedef struct {
    int *count;      // per item: times run
    int *thread;     // per item: the thread that ran it
    long chunks[8];  // per thread: chunks taken
    int slow;        // thread that sleeps in each chunk, or -1
} Job;

static void mark(const void *arg, long lo, long hi) {
    const Job *j = arg;
    int th = omp_get_thread_num();
    for (long i = lo; i < hi; i++) {
        #pragma omp atomic
        j->count[i]++;
        j->thread[i] = th;
    }
    #pragma omp atomic
    ((Job *)j)->chunks[th]++;
    if (th == j->slow) nanosleep(&(struct timespec){0, 2000000}, NULL);
}

static void test_cover(void) {
    long ns[] = {1, 7, 100, 1001};
    long cs[] = {0, 1, 3, 64, 5000};
    int ts[] = {1, 2, 3, 8};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof cs / sizeof *cs; b++)
            for (size_t c = 0; c < sizeof ts / sizeof *ts; c++) {
                long n = ns[a];
                Job j = {.count = calloc(n, sizeof(int)), .thread = calloc(n, sizeof(int)), .slow = -1};
                threads_chunks(ts[c], n, cs[b], mark, &j);
                int once = 1;
                for (long i = 0; i < n; i++) once &= j.count[i] == 1;
                EXPECT(once, "n=%ld chunk=%ld threads=%d: an item not run exactly once", n, cs[b], ts[c]);
                free(j.count), free(j.thread);
            }
    threads_chunks(2, 0, 1, mark, &(Job){.slow = -1});   // no items: nothing called
}

static void test_nested(void) {
    enum { N = 50 };
    int ok = 1;
    #pragma omp parallel num_threads(2)
    {
        int count[N] = {0}, thread[N];
        Job j = {.count = count, .thread = thread, .slow = -1};
        threads_chunks(1, N, 4, mark, &j);
        int me = omp_get_thread_num();
        for (int i = 0; i < N; i++)
            if (count[i] != 1 || thread[i] != me) {
                #pragma omp atomic write
                ok = 0;
            }
    }
    EXPECT(ok, "one thread inside a region: not every item once, on the caller");
}

static void test_chunk(void) {
    // runs of 10 items of 1 MFLOP: 4 runs make CHUNK_FLOPS (32 Mi)
    EXPECT(threads_chunk(1000, 2, 10, 1e6) == 40, "runs to CHUNK_FLOPS: %ld", threads_chunk(1000, 2, 10, 1e6));
    EXPECT(threads_chunk(1000, 2, 10, 1e9) == 10, "one run past CHUNK_FLOPS: %ld", threads_chunk(1000, 2, 10, 1e9));
    EXPECT(threads_chunk(1000, 2, 64, 1e9) == 62, "8 chunks a thread at most: %ld", threads_chunk(1000, 2, 64, 1e9));
    EXPECT(threads_chunk(5, 2, 64, 1) == 1, "fewer items than chunks wanted: %ld", threads_chunk(5, 2, 64, 1));
}

// Thread 0 sleeps 2 ms in each of its chunks; thread 1 does not. Equal
// shares would give each 100; taken as they finish, thread 1 takes most.
static void test_slow_thread(void) {
    enum { N = 200 };
    int count[N] = {0}, thread[N];
    Job j = {.count = count, .thread = thread, .slow = 0};
    threads_chunks(2, N, 1, mark, &j);
    EXPECT(j.chunks[0] + j.chunks[1] == N, "chunks taken %ld + %ld", j.chunks[0], j.chunks[1]);
    EXPECT(j.chunks[0] < N / 2, "the slow thread took %ld of %d chunks", j.chunks[0], N);
}

int main(void) {
    RUN(test_cover);
    RUN(test_nested);
    RUN(test_chunk);
    RUN(test_slow_thread);
    return test_finish();
}
