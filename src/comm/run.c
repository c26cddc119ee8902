#include "comm/run.h"

#include <stdio.h>

#include "comm/local.h"
#include "comm/mpi.h"

int comm_run(int nproc, CommRankMain fn, void *arg, double timeout, Err *err) {
    if (!comm_mpi_launched()) return comm_launch(nproc, fn, arg, timeout, err);
    Comm *w;
    if (comm_mpi_world(&w, timeout, err)) return -1;
    if (nproc > 1 && nproc != comm_size(w)) {
        int n = comm_size(w);
        comm_free(w);
        comm_mpi_finalize();
        return err_set(err, ERR_USAGE, "--nproc %d under mpirun with %d ranks: leave --nproc out (mpirun starts the ranks)", nproc, n);
    }
    int me = comm_rank(w), rc = fn(w, arg);
    comm_free(w);
    comm_mpi_finalize();
    if (!rc) return 0;
    err_set(err, rc == ERR_USAGE ? ERR_USAGE : ERR_RUN, "MPI rank %d failed (status %d)", me, rc);
    err->shown = 1;   // the rank wrote its error; mpirun reports the failed process
    return -1;
}
