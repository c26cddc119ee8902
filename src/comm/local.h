// comm/local — the shared-memory backend for ranks on one machine.
//
// The launcher (comm_launch) maps one anonymous shared segment and forks the
// ranks, which inherit it: nothing is ever created in /dev/shm, so nothing
// can leak there, whatever happens to the processes. Each communicator owns
// an area of the segment: a futex barrier, per-rank operation descriptors
// (for mismatch checks and missing-rank reports), one staging slot per rank
// plus a result slot, and a mailbox per ordered pair for send/recv.
//
// Waiting ranks sleep in futex waits (after a few microseconds of polling
// when there are no more ranks than cores), waking every 100 ms to check
// for a failed peer and for the timeout.
//
// Allreduce moves data in pieces of one slot: every rank copies its piece
// in; each reduces its 1/n of the piece across the slots in rank order into
// the result slot; every rank copies the result out (a reduce-scatter then
// an allgather through shared memory: 2(n−1)/n of the bytes sent and
// received per rank, as a ring). Small messages skip the split: each rank
// reduces the whole piece itself.
#ifndef TSR_COMM_LOCAL_H
#define TSR_COMM_LOCAL_H

#include "comm/comm.h"

// Runs fn(world, arg) on nproc forked ranks sharing one segment; waits for
// them (a rank exits with fn's return value). When a rank fails (non-zero exit or a signal) the others are told,
// given a moment to report, then killed. Returns 0 when every rank returned
// 0, else -1 with err naming the first failed rank. Called once per process
// tree; the ranks end with _exit and never return into the caller.
typedef int (*CommRankMain)(Comm *world, void *arg);
int comm_launch(int nproc, CommRankMain fn, void *arg, double timeout, Err *err);

// The segment's room: the bytes a communicator of n ranks takes from it,
// and the bytes there are (the world's and every split's areas must fit).
size_t comm_local_area_bytes(int n);
size_t comm_local_segment_bytes(void);

#endif
