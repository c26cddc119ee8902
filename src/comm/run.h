// comm/run — starting the ranks: under mpirun/srun each process is one rank
// of the MPI backend; otherwise `nproc` ranks are forked on this machine
// with the local backend. A rank never needs to know which.
#ifndef TSR_COMM_RUN_H
#define TSR_COMM_RUN_H

#include "comm/local.h"

// Runs fn(world, arg) on every rank. Under MPI nproc must be 1 (or the MPI
// world size). Returns 0 when fn returned 0 everywhere (this process's rank
// under MPI), else -1 with err.
int comm_run(int nproc, CommRankMain fn, void *arg, double timeout, Err *err);

#endif
