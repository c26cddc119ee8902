#include "parallel/dp_impl.h"

#include <stdio.h>

#include "core/alloc.h"

static size_t pool_bytes(const Dp *d) {
    size_t b = 0;
    for (int p = 0; p < NPOOL; p++) b += (d->pbuf[p].cap + d->gbuf[p].cap) * sizeof(float);
    return b + (d->es ? embsync_bytes(d->es) : 0);
}

void dp_describe(const Dp *d, char *buf, size_t cap) {
    buf[0] = 0;
    if (!d->c) return;
    if (d->zero == 0) {
        if (d->d > 1)
            snprintf(buf, cap, "data parallel over %d ranks (%s backend), gradients in %d buckets of ≤ %g MB, overlapped "
                     "with backward", d->d, comm_backend(d->c), d->nb + (d->embb.hi > 0), d->bucket_mb);
        return;
    }
    static const char *what[] = {"", "AdamW state sharded; gradients reduce-scattered per layer during the last backward, "
                                     "updated parameters allgathered during the next forward",
                                 "AdamW state and gradients sharded; gradients reduce-scattered per layer during every "
                                 "backward, updated parameters allgathered during the next forward",
                                 "AdamW state, gradients and parameters sharded; each layer's parameters allgathered "
                                 "before its forward and its backward (the next one prefetched)"};
    char b1[32];
    snprintf(buf, cap, "data parallel over %d ranks (%s backend), ZeRO-%d: %s; shard %zu of %zu floats per rank, "
             "%d segments, comm buffers %s", d->d, comm_backend(d->c), d->zero, what[d->zero], d->S, d->t->total,
             d->t->nseg, mem_fmt(pool_bytes(d), b1, sizeof b1));
}

void dp_summary(const Dp *d, int steps, char *buf, size_t cap) {
    buf[0] = 0;
    if (!d->c || (d->zero == 0 && d->d == 1)) return;
    const CommStats *cs = comm_stats(d->c);
    int n = steps > 0 ? steps : 1;
    if (d->zero == 0) {
        double ar = cs->seconds[OP_ALLREDUCE], hid = ar > 0 ? 100 * (1 - d->waited / ar) : 100.0;
        snprintf(buf, cap, "gradient allreduce %.2f s in all, %.2f s of it waited for after backward (%.0f%% hidden); "
                 "%.1f MB sent per step per rank", ar, d->waited, hid < 0 ? 0.0 : hid,
                 cs->bytes_sent[OP_ALLREDUCE] / 1e6 / n);
        return;
    }
    double t = cs->seconds[OP_REDUCE_SCATTER] + cs->seconds[OP_ALLGATHER], hid = t > 0 ? 100 * (1 - d->waited / t) : 100.0;
    uint64_t sent = cs->bytes_sent[OP_REDUCE_SCATTER] + cs->bytes_sent[OP_ALLGATHER];
    snprintf(buf, cap, "reduce-scatter %.2f s + allgather %.2f s in all, %.2f s of it waited for (%.0f%% hidden); "
             "%.1f MB sent per step per rank", cs->seconds[OP_REDUCE_SCATTER], cs->seconds[OP_ALLGATHER], d->waited,
             hid < 0 ? 0.0 : hid, sent / 1e6 / n);
}
