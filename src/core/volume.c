#include "core/volume.h"

Volume volume_allreduce_split(size_t count, size_t esize, int n, int rank) {
    size_t lo = count * (size_t)rank / (size_t)n, hi = count * (size_t)(rank + 1) / (size_t)n;
    uint64_t b = 2 * (uint64_t)(count - (hi - lo)) * esize;
    return (Volume){b, b};
}

Volume volume_allreduce(size_t count, size_t esize, int n, int rank) {
    size_t per = VOLUME_PIECE_BYTES / esize;
    Volume v = {0, 0};
    for (size_t off = 0; off < count; off += per) {
        size_t m = count - off < per ? count - off : per;
        Volume p = m * esize <= VOLUME_SMALL_BYTES || n == 1 ? volume_allgather(m, esize, n)   // every peer reads my piece
                                                             : volume_allreduce_split(m, esize, n, rank);
        v.sent += p.sent;
        v.recv += p.recv;
    }
    return v;
}

Volume volume_reduce_scatter(size_t count, size_t esize, int n) {
    uint64_t b = (uint64_t)(n - 1) * (count / (size_t)n) * esize;
    return (Volume){b, b};
}

Volume volume_allgather(size_t count, size_t esize, int n) {
    uint64_t b = (uint64_t)(n - 1) * count * esize;
    return (Volume){b, b};
}

Volume volume_broadcast(size_t count, size_t esize, int n, int rank, int root) {
    uint64_t b = (uint64_t)count * esize;
    return rank == root ? (Volume){(uint64_t)(n - 1) * b, 0} : (Volume){0, b};
}
