// comm/comm_impl.h — the backend interface of comm/ (internal).
//
// A backend moves data and synchronises; the generic layer (comm.c) does
// the bookkeeping: sequence numbers, history, counters, the request queue
// and the progress thread. Every backend call gets the sequence number of
// the collective and an OpDesc for mismatch checks, and reports the bytes
// it sent and received by its algorithm's volume (core/volume, the
// formulas plan/ predicts from).
#ifndef TSR_COMM_COMM_IMPL_H
#define TSR_COMM_COMM_IMPL_H

#include "comm/comm.h"
#include "core/volume.h"

typedef struct OpDesc {
    uint64_t seq;
    int op, dtype, redop, root;
    uint64_t count;
    const char *name;    // split: the new communicator's name
} OpDesc;

typedef struct CommBackendOps {
    const char *name;
    int (*allreduce)(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err);
    int (*reduce_scatter)(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err);
    int (*allgather)(void *be, const OpDesc *d, const void *in, void *out, uint64_t *sent, uint64_t *recv, Err *err);
    int (*broadcast)(void *be, const OpDesc *d, void *buf, uint64_t *sent, uint64_t *recv, Err *err);
    int (*send)(void *be, const OpDesc *d, const void *buf, int peer, uint64_t *sent, Err *err);
    int (*recv)(void *be, const OpDesc *d, void *buf, int peer, uint64_t *recv, Err *err);
    int (*barrier)(void *be, const OpDesc *d, Err *err);
    // Collective over the parent: returns the new group's backend state, its rank and size.
    int (*split)(void *be, const OpDesc *d, int color, int key, void **out_be, int *rank, int *size, Err *err);
    void (*free)(void *be);
    // Called after a failure was reported (may be NULL): MPI ends the job.
    void (*on_failure)(void *be);
    // Keeps this rank's error line for the launcher, which writes each
    // distinct one once (may be NULL: comm_rank_error writes it at once).
    void (*rank_error)(void *be, const char *line);
} CommBackendOps;

// Wraps a backend state into a Comm (generic layer).
Comm *comm_wrap(const CommBackendOps *ops, void *be, int rank, int size, const char *name, double timeout);

// Adds a collective's volume to a backend call's byte counts.
void comm_add_volume(Volume v, uint64_t *sent, uint64_t *recv);

// Element-wise reduction in rank order: out[i] = src[0][i] op src[1][i] op ...
// (bf16/f16 accumulate in fp32; out may alias src[0]).
void comm_reduce(void *out, const void *const *src, int nsrc, size_t count, CommDtype t, CommRedOp op);

#endif
