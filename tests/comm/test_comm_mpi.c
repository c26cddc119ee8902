// The collective test cases under mpirun with the MPI backend: the same
// serial references as the local backend's test, so both backends give the
// same bits. Rank 0 prints the "N passed, N failed" line.
#include <signal.h>

#include "comm/mpi.h"
#include "cases.h"

int main(void) {
    Comm *w;
    Err e;
    if (!comm_mpi_launched()) {
        fprintf(stderr, "run under mpirun\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (comm_mpi_world(&w, comm_timeout_default(), &e)) {
        fprintf(stderr, "%s\n", e.msg);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (getenv("TESSERA_TEST_KILL_RANK") && comm_rank(w) == atoi(getenv("TESSERA_TEST_KILL_RANK"))) {
        float x = 0, y;
        comm_allreduce(w, &x, &y, 1, DT_F32, RED_SUM, &e);
        raise(SIGKILL);
    }
    const char *names[] = {"every op, dtype and size", "2x2x2 mesh of sub-communicators", "non-blocking overlap", "byte counters"};
    int (*cases[])(Comm *, void *) = {ops_main, mesh_main, async_main, counters_main};
    int passed = 0, failed = 0, n = comm_size(w);
    for (int k = 0; k < 4; k++) {
        if (k == 1 && n != 8) continue;   // the mesh needs 8 ranks
        fails = 0;
        int32_t f = cases[k](w, NULL), total;
        comm_allreduce(w, &f, &total, 1, DT_I32, RED_SUM, &e);
        if (comm_rank(w) == 0) printf("%s %s (%d ranks, mpi)\n", total ? "FAIL" : "ok  ", names[k], n);
        if (total) failed++; else passed++;
    }
    int me = comm_rank(w);
    comm_free(w);
    comm_mpi_finalize();
    if (me == 0) printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
