// comm/comm — the collective-communication library (DESIGN §4): an
// NCCL/HCCL-shaped API over interchangeable backends.
//
// A Comm is a group of ranks. (f64 exists for small exact statistics such as
// gradient norms.) Collectives are called by every rank of the
// group in the same order; each call gets a sequence number. Reductions add
// contributions in rank order (0, 1, ..., n−1), so results are bitwise
// reproducible and independent of the backend; bf16 and f16 are reduced in
// fp32. Every call counts its calls, bytes sent and received (by the
// algorithm's own volume) and seconds per operation kind, and is recorded
// in a small ring of recent collectives printed on failure.
//
// Errors (a peer that died, a timeout, ranks calling different collectives
// at the same sequence number) make the call return -1 with an Err that
// names the operation, the communicator, the sequence number and the
// missing ranks; the communicator is unusable afterwards.
//
// Non-blocking variants return a request completed, in call order, by a
// per-communicator progress thread; comm_wait blocks (no spinning) until it
// is done.
#ifndef TSR_COMM_COMM_H
#define TSR_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

typedef struct Comm Comm;
typedef struct CommRequest CommRequest;

typedef enum { DT_F32, DT_BF16, DT_F16, DT_I32, DT_I64, DT_U8, DT_F64, DT_COUNT } CommDtype;
typedef enum { RED_SUM, RED_MAX } CommRedOp;
typedef enum {
    OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST, OP_SEND, OP_RECV, OP_BARRIER, OP_SPLIT, OP_COUNT
} CommOp;

size_t comm_dtype_size(CommDtype t);
const char *comm_dtype_name(CommDtype t);
const char *comm_op_name(CommOp op);

typedef struct CommStats {
    uint64_t calls[OP_COUNT];
    uint64_t bytes_sent[OP_COUNT];
    uint64_t bytes_recv[OP_COUNT];
    double seconds[OP_COUNT];
} CommStats;

int comm_rank(const Comm *c);
int comm_size(const Comm *c);
const char *comm_name(const Comm *c);       // "world", or the name given to comm_split
const char *comm_backend(const Comm *c);    // "local" or "mpi"
const CommStats *comm_stats(const Comm *c);
void comm_stats_reset(Comm *c);

// Collectives. count is per rank: allreduce and broadcast move count
// elements; reduce_scatter reduces count = n·k elements and leaves block
// `rank` (k elements) in out; allgather gathers count elements from every
// rank into out (n·count elements, rank order). In place, as in NCCL:
// allreduce's in may be out; reduce_scatter's out may be in + rank·k;
// allgather's in may be out + rank·count. Return 0, or -1 with err set.
int comm_allreduce(Comm *c, const void *in, void *out, size_t count, CommDtype t, CommRedOp op, Err *err);
int comm_reduce_scatter(Comm *c, const void *in, void *out, size_t count, CommDtype t, CommRedOp op, Err *err);
int comm_allgather(Comm *c, const void *in, void *out, size_t count, CommDtype t, Err *err);
int comm_broadcast(Comm *c, void *buf, size_t count, CommDtype t, int root, Err *err);
int comm_send(Comm *c, const void *buf, size_t count, CommDtype t, int peer, Err *err);
int comm_recv(Comm *c, void *buf, size_t count, CommDtype t, int peer, Err *err);
int comm_barrier(Comm *c, Err *err);

// Splits c into groups of equal color; ranks in a group are ordered by
// (key, rank in c). name labels the new communicator in errors and stats.
int comm_split(Comm *c, int color, int key, const char *name, Comm **out, Err *err);
void comm_free(Comm *c);

// Non-blocking collectives: the buffers must stay untouched until
// comm_wait. Requests complete in call order.
CommRequest *comm_iallreduce(Comm *c, const void *in, void *out, size_t count, CommDtype t, CommRedOp op);
CommRequest *comm_ireduce_scatter(Comm *c, const void *in, void *out, size_t count, CommDtype t, CommRedOp op);
CommRequest *comm_iallgather(Comm *c, const void *in, void *out, size_t count, CommDtype t);
// A send that the progress thread carries out (after what is queued
// before it); the receiver calls comm_recv. buf stays untouched until
// comm_wait.
CommRequest *comm_isend(Comm *c, const void *buf, size_t count, CommDtype t, int peer);
// Blocks until r is done, frees it; returns its status.
int comm_wait(CommRequest *r, Err *err);
// comm_wait on *r unless it is NULL, which it then becomes; adds the
// seconds blocked to *waited (the time a caller could not hide).
int comm_wait_timed(CommRequest **r, double *waited, Err *err);
// 1 when r is done (then comm_wait returns at once), else 0.
int comm_test(CommRequest *r);

// A rank's error as "<who>: rank R: <message>" — once: nothing when a
// failed collective already wrote it (e->shown); with forked ranks the
// launcher writes each distinct message once, naming every rank that had
// it; under MPI the rank writes it at once.
void comm_rank_error(Comm *world, const char *who, const Err *e);

// The communication timeout in seconds: --comm-timeout, else
// $TESSERA_COMM_TIMEOUT, else 300.
double comm_timeout_default(void);

#endif
