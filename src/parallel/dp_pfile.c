// parallel/dp_pfile — ZeRO-3's owned parameter shard in a file (--offload
// params; ZeRO-Infinity's parameter offload, Rajbhandari et al. 2021).
//
// The shard (hshard's 16-bit values, or pshard's fp32 ones) is the
// offload's parameters' file, mapped shared: every reader and writer of
// the shard (the gathers, the update, a checkpoint's fill and save) works
// on it in place, with the same arithmetic as in memory, and the pages go
// back to the kernel (MADV_DONTNEED: a shared file's pages stay in the
// file and the page cache, not in this process) as soon as a piece is
// gathered or written. A gather first asks the kernel for the next
// `prefetch` segments' pieces in the order the passes go (MADV_WILLNEED:
// read ahead while this one computes), then reads its own piece through a
// CRC-32C against the units' last writes — the read that faults its pages
// in, counted as the offload's I/O.
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/prof.h"
#include "core/timer.h"
#include "parallel/dp_impl.h"

static size_t elem(const Dp *d) { return d->hshard ? sizeof(uint16_t) : sizeof(float); }
static char *base(const Dp *d) { return d->hshard ? (char *)d->hshard : (char *)d->pshard; }

// Applies advice to the whole pages inside [off, off + n) floats' worth of
// shard elements (a page shared with a neighbour is left alone).
static void advise(const Dp *d, size_t off, size_t n, int advice) {
    static long page;
    if (!page) page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)(base(d) + off * elem(d)), hi = (uintptr_t)(base(d) + (off + n) * elem(d));
    lo = (lo + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    hi &= ~((uintptr_t)page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, advice);
}

int dp_pfile_open(Dp *d, Err *err) {
    if (!(d->ufirst = calloc((size_t)d->t->nseg + 1, sizeof *d->ufirst)) ||
        !(d->pcrc = calloc((size_t)d->nunit + 1, sizeof *d->pcrc)))
        return err_set(err, ERR_RUN, "out of memory");
    for (int k = 0, u = 0; k <= d->t->nseg; k++) {
        while (u < d->nunit && d->useg[u] < k) u++;
        d->ufirst[k] = u;
    }
    size_t bytes = d->S * (d->masters ? sizeof(uint16_t) : sizeof(float));
    void *p = offload_map_params(d->off, bytes, err);
    if (!p) return -1;
    if (d->masters) d->hshard = p;
    else d->pshard = p;
    d->plast = -1;
    return 0;   // the fill that follows writes every unit (and its CRC)
}

int dp_pfile_fetch(Dp *d, int k, Err *err) {
    int dir = d->plast >= 0 && k < d->plast ? -1 : 1;
    d->plast = k;
    for (int i = 1; i <= d->prefetch; i++) {
        int j = k + dir * i;
        if (j < 0 || j >= d->t->nseg) break;
        advise(d, d->soff[j], d->sk[j], MADV_WILLNEED);
    }
    double t0 = timer_now(), p0 = prof_begin();
    int rc = offload_params_intact(d->off, err);   // a file cut short would fault (SIGBUS) where its pages are gone
    for (int u = d->ufirst[k]; u < d->ufirst[k + 1] && !rc; u++) rc = dp_pfile_check_unit(d, u, err);
    double dt = timer_now() - t0;
    prof_end(p0, PROF_IO, 0, 0);
    offload_count(d->off, d->sk[k] * elem(d), 0, dt);
    return rc;
}

int dp_pfile_check_unit(Dp *d, int u, Err *err) {
    if (crc32c(0, base(d) + d->uoff[u] * elem(d), d->un[u] * elem(d)) != d->pcrc[u])
        return err_set(err, ERR_RUN, "%s: parameters [%zu, %zu) differ from what was written (the file changed underneath)",
                       offload_params_path(d->off), d->uoff[u], d->uoff[u] + d->un[u]);
    return 0;
}

void dp_pfile_drop(Dp *d, int k) { advise(d, d->soff[k], d->sk[k], MADV_DONTNEED); }

void dp_pfile_unit_written(Dp *d, int u) {
    d->pcrc[u] = crc32c(0, base(d) + d->uoff[u] * elem(d), d->un[u] * elem(d));
    advise(d, d->uoff[u], d->un[u], MADV_DONTNEED);
    offload_count(d->off, 0, d->un[u] * elem(d), 0);
}

void dp_pfile_seg_written(Dp *d, int k) {
    for (int u = d->ufirst[k]; u < d->ufirst[k + 1]; u++) dp_pfile_unit_written(d, u);
}

void dp_pfile_drop_all(Dp *d) { advise(d, 0, d->S, MADV_DONTNEED); }
