// core/volume — the bytes a collective moves per rank: the one formula that
// comm/'s backends count (CommStats) and plan/ predicts from. It lives in
// core/ because both sides read it and plan/ may not include comm/
// (DESIGN §2); it knows nothing of communicators, only sizes.
//
// count and esize are as in comm/comm.h's calls (count per rank: an
// allreduce's or allgather's input, a reduce-scatter's whole n·k vector);
// n is the group's size, rank the calling rank's place in it.
#ifndef TSR_CORE_VOLUME_H
#define TSR_CORE_VOLUME_H

#include <stddef.h>
#include <stdint.h>

// Bytes one rank sends and receives in one collective.
typedef struct { uint64_t sent, recv; } Volume;

// How the shared-memory backend (comm/local) moves an allreduce: the data
// goes in pieces of VOLUME_PIECE_BYTES (its staging slot); every rank reads
// a piece of at most VOLUME_SMALL_BYTES whole from every other, a larger
// piece is reduce-scattered and allgathered (volume_allreduce_split).
enum { VOLUME_PIECE_BYTES = 1 << 20, VOLUME_SMALL_BYTES = 16 << 10 };

// An allreduce as comm/local moves it, piece by piece (above). The same
// bytes each way.
Volume volume_allreduce(size_t count, size_t esize, int n, int rank);
// An allreduce as one reduce-scatter and one allgather, rank r holding
// elements [count·r/n, count·(r+1)/n): every rank sends and receives twice
// the elements it does not hold (comm/mpi's, and comm/local's large pieces).
Volume volume_allreduce_split(size_t count, size_t esize, int n, int rank);
// A reduce-scatter of count = n·k elements: (n−1)·k elements each way.
Volume volume_reduce_scatter(size_t count, size_t esize, int n);
// An allgather of count elements per rank: (n−1)·count elements each way.
Volume volume_allgather(size_t count, size_t esize, int n);
// A broadcast from root: the root sends (n−1)·count elements, every other
// rank receives count.
Volume volume_broadcast(size_t count, size_t esize, int n, int rank, int root);

#endif
