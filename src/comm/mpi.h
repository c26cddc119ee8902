// comm/mpi — the MPI backend (OpenMPI or MPICH), chosen when the process
// was started by mpirun/mpiexec/srun. Built only when MPI is found at build
// time (TSR_MPI); otherwise comm_mpi_world says so.
//
// Data moves as bytes; reductions never use MPI_Op, so that results are the
// same bits as the local backend's: allreduce is an all-to-all of blocks,
// a reduction of each rank's block in rank order, and an allgather of the
// reduced blocks — 2(n−1)/n of the bytes sent and received per rank.
#ifndef TSR_COMM_MPI_H
#define TSR_COMM_MPI_H

#include "comm/comm.h"

// A collective that waits longer than the timeout ends the job, naming the
// ranks that stopped answering: with MPI_THREAD_MULTIPLE every rank sends
// every other a heartbeat on a communicator of its own.
//
// 1 when the environment says this process is an MPI rank.
int comm_mpi_launched(void);
// Initialises MPI (asking for MPI_THREAD_MULTIPLE) and returns the world
// communicator.
int comm_mpi_world(Comm **out, double timeout, Err *err);
// 1 when MPI granted MPI_THREAD_MULTIPLE: collectives on different
// communicators may run at once from different threads (each
// communicator's own calls are serialized by comm/). Without it only one
// communicator may be busy at a time: no tensor parallelism next to the
// data-parallel group's background reductions.
int comm_mpi_thread_multiple(void);
// Finalises MPI after the last communicator is freed.
void comm_mpi_finalize(void);

#endif
