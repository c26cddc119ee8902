// tessera comm-bench --disk DIR — the disk bandwidth the optimizer offload
// gets (tessera plan's --disk-gbps): its own files, units and ring
// (parallel/offload), passes that read every unit ahead and write it back
// behind, timed whole. What the offload sees, the page cache included: a
// file set smaller than the free memory stays cached after its first pass.
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "core/alloc.h"
#include "core/timer.h"
#include "parallel/offload.h"

enum { UNIT = 1 << 23 };   // floats per unit: parallel/dp's largest

int disk_probe(const char *dir, size_t bytes, int passes, int warmup, double *gbps, size_t *files, Err *e) {
    static const char *const names[3] = {"bench_a", "bench_b", "bench_c"};
    size_t per = bytes / 3 / sizeof(float), nu = (per + UNIT - 1) / UNIT;
    size_t *off = calloc(nu + 1, sizeof *off), *n = calloc(nu + 1, sizeof *n);
    float *zeros = calloc(per < UNIT ? per + 1 : UNIT, sizeof *zeros);
    Offload *o = NULL;
    int rc = -1;
    if (!off || !n || !zeros) { err_set(e, ERR_RUN, "out of memory"); goto out; }
    for (size_t u = 0; u < nu; u++) {
        off[u] = u * UNIT;
        n[u] = per - off[u] < UNIT ? per - off[u] : UNIT;
    }
    if (offload_open(&o, dir, "--disk", 0, 3, names, off, n, (int)nu, 0, e)) goto out;
    for (size_t u = 0; u < nu; u++)   // every unit written once: the passes read what they wrote
        for (int k = 0; k < 3; k++)
            if (offload_write(o, k, (int)u, zeros, e)) goto out;
    double t = 0;
    for (int it = -warmup; it < passes; it++) {
        double t0 = timer_now();
        if (offload_pass_begin(o, e)) goto out;
        for (size_t u = 0; u < nu; u++) {
            float *b[OFFLOAD_MAX_KINDS];
            if (offload_unit(o, (int)u, b, e)) break;
            offload_unit_done(o, (int)u);
        }
        if (offload_pass_end(o, e)) goto out;
        if (it >= 0) t += timer_now() - t0;
    }
    double moved = 2.0 * (double)offload_disk_bytes(o) * passes;   // read and written
    *gbps = t > 0 ? moved / t * 1e-9 : 0.0;
    *files = offload_disk_bytes(o);
    rc = 0;
out:
    offload_close(o);
    free(off);
    free(n);
    free(zeros);
    return rc;
}

int disk_bench(const char *dir, size_t bytes, int passes, int warmup, Err *e) {
    double gbps;
    size_t files;
    if (disk_probe(dir, bytes, passes, warmup, &gbps, &files, e)) return -1;
    char b1[32];
    printf("# disk-bench: %s, %s of offload files (3 files, units of %d floats), %d passes (page cache included)\n", dir,
           mem_fmt(files, b1, sizeof b1), UNIT, passes);
    printf("disk: %.3f GB/s read and written together (%.3f s per pass) -> tessera plan --disk-gbps %.3g\n", gbps,
           gbps > 0 ? 2.0 * (double)files * 1e-9 / gbps : 0.0, gbps);
    return 0;
}
