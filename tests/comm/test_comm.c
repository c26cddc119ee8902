// comm/: every collective on 1..8 forked ranks against a serial reference
// summed in rank order (bitwise), sub-communicators of a 2×2×2 mesh,
// non-blocking overlap, byte counters, and failures: a killed rank, a
// timeout, a mismatched collective.
#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "comm/local.h"
#include "core/rng.h"
#include "core/timer.h"
#include "test.h"

#include "cases.h"

static void test_every_op_dtype_and_size(void) {
    for (int n = 1; n <= 8; n++) {
        Err e;
        int rc = comm_launch(n, ops_main, NULL, 60, &e);
        EXPECT(rc == 0, "%d ranks: %s", n, e.msg);
    }
}

static void test_split_mesh(void) {
    Err e;
    EXPECT(comm_launch(8, mesh_main, NULL, 60, &e) == 0, "%s", e.msg);
}

static void test_nonblocking_overlap(void) {
    Err e;
    EXPECT(comm_launch(4, async_main, NULL, 60, &e) == 0, "%s", e.msg);
}

static void test_byte_counters(void) {
    int ns[] = {2, 4, 8};
    for (int k = 0; k < 3; k++) {
        Err e;
        EXPECT(comm_launch(ns[k], counters_main, NULL, 60, &e) == 0, "%d ranks: %s", ns[k], e.msg);
    }
}

// ---- failures ----

static int kill_main(Comm *c, void *arg) {
    (void)arg;
    float x[1024] = {0}, y[1024];
    Err e;
    for (int i = 0; i < 1000000; i++) {
        if (comm_rank(c) == 2 && i == 50) raise(SIGKILL);
        if (comm_allreduce(c, x, y, 1024, DT_F32, RED_SUM, &e)) {
            int ok = strstr(e.msg, "world rank 2 was killed") != NULL && strstr(e.msg, "allreduce") != NULL;
            return ok ? 3 : 4;   // failed as expected (3) or with the wrong message (4)
        }
    }
    return 0;
}

static int dev_shm_entries(void) {
    FILE *p = popen("ls /dev/shm 2>/dev/null | wc -l", "r");
    int n = -1;
    if (p) { if (fscanf(p, "%d", &n) != 1) n = -1; pclose(p); }
    return n;
}

static void test_killed_rank(void) {
    int before = dev_shm_entries();
    Err e;
    double t0 = timer_now();
    int rc = comm_launch(4, kill_main, NULL, 30, &e);
    double dt = timer_now() - t0;
    EXPECT(rc == -1 && strstr(e.msg, "rank 2 was killed by signal 9"), "launcher: %s", rc ? e.msg : "returned 0");
    EXPECT(dt < 10, "took %.1f s", dt);
    EXPECT(dev_shm_entries() == before, "/dev/shm changed: %d -> %d entries", before, dev_shm_entries());
}

static int timeout_main(Comm *c, void *arg) {
    (void)arg;
    Err e;
    int x = 1, y;
    if (comm_rank(c) == 1) { sleep(3); return 0; }   // never joins
    if (comm_allreduce(c, &x, &y, 1, DT_I32, RED_SUM, &e) == 0) return 1;
    return strstr(e.msg, "timed out after 1 s waiting for rank(s) 1") && strstr(e.msg, "communicator world") ? 3 : 4;
}

static void test_timeout(void) {
    Err e;
    double t0 = timer_now();
    int rc = comm_launch(3, timeout_main, NULL, 1.0, &e);
    EXPECT(rc == -1 && strstr(e.msg, "exit status 3"), "a waiting rank reports the timeout: %s", rc ? e.msg : "returned 0");
    EXPECT(timer_now() - t0 < 6, "took %.1f s", timer_now() - t0);
}

// Both ranks receive from each other: every rank is inside an operation,
// and the timeout names the peer each one waits for.
static int p2p_timeout_main(Comm *c, void *arg) {
    (void)arg;
    Err e;
    float x[4];
    int peer = 1 - comm_rank(c);
    if (comm_recv(c, x, 4, DT_F32, peer, &e) == 0) return 1;
    char want[64];
    snprintf(want, sizeof want, "waiting for rank(s) %d (to send)", peer);
    return strstr(e.msg, want) && strstr(e.msg, "timed out after 1 s") ? 3 : 4;
}

static void test_p2p_timeout(void) {
    Err e;
    int rc = comm_launch(2, p2p_timeout_main, NULL, 1.0, &e);
    EXPECT(rc == -1 && strstr(e.msg, "exit status 3"), "a receive's timeout names its peer: %s", rc ? e.msg : "returned 0");
}

static int mismatch_main(Comm *c, void *arg) {
    (void)arg;
    Err e;
    float x[16] = {0}, y[32];
    int rc = comm_rank(c) == 1 ? comm_allgather(c, x, y, 16, DT_F32, &e) : comm_allreduce(c, x, y, 16, DT_F32, RED_SUM, &e);
    if (rc == 0) return 1;
    return strstr(e.msg, "collective mismatch on communicator world at seq 1") ? 3 : 4;
}

static void test_mismatch(void) {
    Err e;
    int rc = comm_launch(2, mismatch_main, NULL, 30, &e);
    EXPECT(rc == -1 && strstr(e.msg, "exit status 3"), "mismatch reported: %s", rc ? e.msg : "returned 0");
}

int main(void) {
    RUN(test_every_op_dtype_and_size);
    RUN(test_split_mesh);
    RUN(test_nonblocking_overlap);
    RUN(test_byte_counters);
    RUN(test_killed_rank);
    RUN(test_timeout);
    RUN(test_p2p_timeout);
    RUN(test_mismatch);
    return test_finish();
}
