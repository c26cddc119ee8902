// tessera comm-bench — collective bandwidth and latency, like nccl-tests:
// for each operation and message size, the time per call, the algorithm
// bandwidth (size / time) and the bus bandwidth (algbw · 2(n−1)/n for
// allreduce, · (n−1)/n for reduce_scatter and allgather, · 1 for broadcast).
// size is the whole message: allreduce/broadcast count·dtype, reduce_scatter
// the input, allgather the output.
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "comm/run.h"
#include "core/alloc.h"
#include "core/timer.h"

typedef struct {
    int op;            // -1: all
    size_t min_bytes, max_bytes;
    int iters, warmup;
} Bench;

enum { MAX_MESSAGE = 1 << 30 };   // the largest message comm-bench sends (two buffers of it per rank)

// "8", "64K", "1M", "1G" -> bytes; 0 on error or above MAX_MESSAGE.
static size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 1) || v > MAX_MESSAGE) return 0;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': mul = 1024; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    default: return 0;
    }
    if (toupper((unsigned char)*end) == 'B') end++;
    return *end || v * mul > MAX_MESSAGE ? 0 : (size_t)(v * mul);
}

static int bench_main(Comm *c, void *arg) {
    const Bench *b = arg;
    int n = comm_size(c), me = comm_rank(c);
    static const int ops[] = {OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST};
    size_t cap = b->max_bytes + 64;
    char *x = mem_alloc(MEM_COMM, cap), *y = mem_alloc(MEM_COMM, cap);
    Err e;
    if (!x || !y) { fprintf(stderr, "comm-bench: out of memory for %zu-byte buffers\n", cap); return 1; }
    memset(x, 1, cap);
    if (me == 0) printf("# comm-bench: %d ranks, backend %s, float32, sum\n", n, comm_backend(c));
    for (int k = 0; k < 4; k++) {
        int op = ops[k];
        if (b->op >= 0 && b->op != op) continue;
        double factor = op == OP_ALLREDUCE ? 2.0 * (n - 1) / n : op == OP_BROADCAST ? 1.0 : (double)(n - 1) / n;
        if (me == 0) {
            printf("# %s\n", comm_op_name(op));
            printf("%14s %12s %12s %12s %12s\n", "bytes", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
        }
        for (size_t bytes = b->min_bytes; bytes <= b->max_bytes; bytes *= 2) {
            size_t count = bytes / 4;
            if (op == OP_REDUCE_SCATTER || op == OP_ALLGATHER) count = count / (size_t)n * (size_t)n;
            if (count == 0) count = (op == OP_REDUCE_SCATTER || op == OP_ALLGATHER) ? (size_t)n : 1;
            size_t real = count * 4;
            int iters = b->iters;
            if (real * (size_t)iters > ((size_t)2 << 30)) iters = (int)(((size_t)2 << 30) / real) > 2 ? (int)(((size_t)2 << 30) / real) : 2;
            double t = 0;
            for (int it = -b->warmup; it < iters; it++) {
                double t0 = timer_now();
                int rc = 0;
                switch (op) {
                case OP_ALLREDUCE: rc = comm_allreduce(c, x, y, count, DT_F32, RED_SUM, &e); break;
                case OP_REDUCE_SCATTER: rc = comm_reduce_scatter(c, x, y, count, DT_F32, RED_SUM, &e); break;
                case OP_ALLGATHER: rc = comm_allgather(c, x, y, count / (size_t)n, DT_F32, &e); break;
                default: rc = comm_broadcast(c, x, count, DT_F32, 0, &e); break;
                }
                if (rc) return 1;
                if (it >= 0) t += timer_now() - t0;
            }
            t /= iters;
            float tf = (float)t, tm;   // the slowest rank's time
            if (comm_allreduce(c, &tf, &tm, 1, DT_F32, RED_MAX, &e)) return 1;
            if (me == 0) {
                double algbw = real / (double)tm * 1e-9;
                printf("%14zu %12zu %12.2f %12.3f %12.3f\n", real, count, tm * 1e6, algbw, algbw * factor);
                fflush(stdout);
            }
            if (bytes == 0) break;
        }
    }
    mem_free(x);
    mem_free(y);
    return 0;
}

int cmd_comm_bench(int argc, char **argv) {
    int nproc = 2, iters = 20, warmup = 5;
    const char *op = "all", *min_s = "8", *max_s = "256M", *disk = NULL;
    double timeout = 0;
    Flag f[] = {
        {"nproc", FLAG_INT, &nproc, 1, 256, "N", "ranks to fork on this machine (local backend; default 2; under mpirun, mpirun's ranks)", 0, NULL},
        {"op", FLAG_STR, &op, 0, 0, "OP", "allreduce, reduce_scatter, allgather, broadcast or all (default)", 0, NULL},
        {"min-bytes", FLAG_STR, &min_s, 0, 0, "S", "smallest message, with K/M/G suffixes (default 8)", 0, NULL},
        {"max-bytes", FLAG_STR, &max_s, 0, 0, "S", "largest message (default 256M)", 0, NULL},
        {"iters", FLAG_INT, &iters, 1, 1 << 20, "N", "timed calls per size (default 20; fewer above 100 MB)", 0, NULL},
        {"warmup", FLAG_INT, &warmup, 0, 1 << 20, "N", "untimed calls first (default 5)", 0, NULL},
        {"comm-timeout", FLAG_FLOAT, &timeout, 0.001, 1e9, "S", "seconds a rank waits for the others (default 300, or $TESSERA_COMM_TIMEOUT)", 0, NULL},
        {"disk", FLAG_STR, &disk, 0, 0, "DIR", "instead of the collectives, the bandwidth the optimizer offload gets from files under DIR (--max-bytes of them, --iters passes; tessera plan's --disk-gbps)", 0, NULL},
    };
    int nf = (int)(sizeof f / sizeof f[0]), help;
    Json *unused = NULL;
    Err e = {0};
    if (flags_parse(f, nf, argc, argv, "comm-bench", &help, &unused, &e)) return cli_fail("comm-bench", &e);
    if (help) {
        printf("usage: tessera comm-bench [--nproc N] [--op OP] [--min-bytes S] [--max-bytes S] [--iters N]\n"
               "       tessera comm-bench --disk DIR [--max-bytes S] [--iters N]\n\n"
               "Collective bandwidth (nccl-tests style): one row per size, bytes first, bus bandwidth last.\n"
               "With --disk: the disk bandwidth the optimizer offload (tessera train --offload) gets under DIR.\n\n");
        flags_print(f, nf);
        return 0;
    }
    Bench b = {.op = -1, .iters = iters, .warmup = warmup};
    if (strcmp(op, "all")) {
        for (int k = 0; k < OP_COUNT; k++)
            if (!strcmp(op, comm_op_name(k)) && k <= OP_BROADCAST) b.op = k;
        if (b.op < 0) { err_set(&e, ERR_USAGE, "--op: expected allreduce, reduce_scatter, allgather, broadcast or all, got '%s'", op); return cli_fail("comm-bench", &e); }
    }
    b.min_bytes = parse_size(min_s);
    b.max_bytes = parse_size(max_s);
    if (!b.min_bytes) {
        err_set(&e, ERR_USAGE, "--min-bytes: expected a size from 1 to 1G like 8, 64K or 1M, got '%s'", min_s);
        return cli_fail("comm-bench", &e);
    }
    if (!b.max_bytes || b.max_bytes < b.min_bytes) {
        err_set(&e, ERR_USAGE, "--max-bytes: expected a size from --min-bytes to 1G, got '%s'", max_s);
        return cli_fail("comm-bench", &e);
    }
    if (disk) return disk_bench(disk, b.max_bytes, iters, warmup > 1 ? 1 : warmup, &e) ? cli_fail("comm-bench", &e) : 0;
    if (comm_run(nproc, bench_main, &b, timeout > 0 ? timeout : comm_timeout_default(), &e)) return cli_fail("comm-bench", &e);
    return 0;
}
