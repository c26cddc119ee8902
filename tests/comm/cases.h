// tests/comm/cases.h — collective test cases shared by the local-backend
// test (test_comm.c, forked ranks) and the MPI test (test_comm_mpi.c under
// mpirun): each *_main runs on every rank and returns its failure count.
#ifndef TSR_TEST_COMM_CASES_H
#define TSR_TEST_COMM_CASES_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/rng.h"

// ---- the serial reference ----

static float bf16f(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
static uint16_t fbf16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    b += 0x7FFFu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}
static float f16f(uint16_t h) {   // normal numbers only (the test data stays normal)
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, b;
    if (e == 0) return (s ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;
    b = s | (e + 112) << 23 | m << 13;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static uint16_t ff16(float f) {   // round to nearest even, normal range
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t s = (b >> 16) & 0x8000, m = b & 0x7FFFFF;
    int e = (int)((b >> 23) & 0xFF) - 127 + 15;
    if (e <= 0) return (uint16_t)s;
    uint32_t v = (uint32_t)e << 10 | m >> 13, r = m & 0x1FFF;
    if (r > 0x1000 || (r == 0x1000 && (v & 1))) v++;
    return (uint16_t)(s | v);
}

// Input element i of rank r for dtype t: small values so sums stay exact-ish
// but still round in bf16/f16.
static void fill(void *buf, CommDtype t, size_t n, int rank, uint64_t salt) {
    for (size_t i = 0; i < n; i++) {
        double u = rng_uniform(salt, (uint64_t)rank, i) * 2 - 1;
        switch (t) {
        case DT_F32: ((float *)buf)[i] = (float)(u * 100); break;
        case DT_BF16: ((uint16_t *)buf)[i] = fbf16((float)(u * 10)); break;
        case DT_F16: ((uint16_t *)buf)[i] = ff16((float)(u * 10 + (u < 0 ? -1 : 1))); break;
        case DT_I32: ((int32_t *)buf)[i] = (int32_t)(u * 2e9); break;
        case DT_I64: ((int64_t *)buf)[i] = (int64_t)(u * 9e18); break;
        case DT_F64: ((double *)buf)[i] = u * 1e3; break;
        default: ((uint8_t *)buf)[i] = (uint8_t)(u * 255); break;
        }
    }
}

// ref[i] = op over ranks 0..n-1 in order of element i.
static void reference(void *ref, CommDtype t, CommRedOp op, size_t count, int n, uint64_t salt) {
    size_t es = comm_dtype_size(t);
    unsigned char *x = malloc(count * es + 8);
    for (int r = 0; r < n; r++) {
        fill(x, t, count, r, salt);
        for (size_t i = 0; i < count; i++) {
            switch (t) {
            case DT_F32: {
                float *o = (float *)ref + i, v = ((float *)x)[i];
                *o = r == 0 ? v : op == RED_SUM ? *o + v : (v > *o ? v : *o);
                break;
            }
            case DT_F64: {
                double *o = (double *)ref + i, v = ((double *)x)[i];
                *o = r == 0 ? v : op == RED_SUM ? *o + v : (v > *o ? v : *o);
                break;
            }
            case DT_BF16: case DT_F16: {
                // accumulate in fp32 across ranks, round once at the end: keep
                // the fp32 accumulator in a side array
                break;
            }
            case DT_I32: {
                int32_t *o = (int32_t *)ref + i, v = ((int32_t *)x)[i];
                *o = r == 0 ? v : op == RED_SUM ? (int32_t)((uint32_t)*o + (uint32_t)v) : (v > *o ? v : *o);
                break;
            }
            case DT_I64: {
                int64_t *o = (int64_t *)ref + i, v = ((int64_t *)x)[i];
                *o = r == 0 ? v : op == RED_SUM ? (int64_t)((uint64_t)*o + (uint64_t)v) : (v > *o ? v : *o);
                break;
            }
            default: {
                uint8_t *o = (uint8_t *)ref + i, v = ((uint8_t *)x)[i];
                *o = r == 0 ? v : op == RED_SUM ? (uint8_t)(*o + v) : (v > *o ? v : *o);
            }
            }
        }
    }
    if (t == DT_BF16 || t == DT_F16) {
        float *acc = malloc(count * 4 + 4);
        for (int r = 0; r < n; r++) {
            fill(x, t, count, r, salt);
            for (size_t i = 0; i < count; i++) {
                float v = t == DT_BF16 ? bf16f(((uint16_t *)x)[i]) : f16f(((uint16_t *)x)[i]);
                acc[i] = r == 0 ? v : op == RED_SUM ? acc[i] + v : (v > acc[i] ? v : acc[i]);
            }
        }
        for (size_t i = 0; i < count; i++) ((uint16_t *)ref)[i] = t == DT_BF16 ? fbf16(acc[i]) : ff16(acc[i]);
        free(acc);
    }
    free(x);
}

static int fails;
#define CHECK_RANK(cond, ...) do { if (!(cond)) { fails++; fprintf(stderr, "  rank check failed: " __VA_ARGS__); fputc('\n', stderr); } } while (0)

static const size_t sizes[] = {0, 1, 2, 7, 13, 127, 1021, 65537, 300007};

static int ops_main(Comm *c, void *arg) {
    (void)arg;
    int n = comm_size(c), me = comm_rank(c);
    Err e;
    for (int t = 0; t < DT_COUNT; t++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            size_t count = sizes[si], es = comm_dtype_size((CommDtype)t);
            if (count > 70000 && t != DT_F32 && t != DT_BF16) continue;   // large sizes: two types suffice
            uint64_t salt = 1000 + (uint64_t)t * 100 + si;
            unsigned char *in = malloc(count * es * n + 16), *out = malloc(count * es * n + 16),
                          *ref = malloc(count * es * n + 16), *all = malloc(count * es * n + 16);
            for (int op = 0; op < 2; op++) {
                fill(in, (CommDtype)t, count, me, salt);
                reference(ref, (CommDtype)t, (CommRedOp)op, count, n, salt);
                CHECK_RANK(comm_allreduce(c, in, out, count, (CommDtype)t, (CommRedOp)op, &e) == 0, "%s", e.msg);
                CHECK_RANK(memcmp(out, ref, count * es) == 0, "allreduce %s %s count %zu n=%d", comm_dtype_name(t),
                           op ? "max" : "sum", count, n);
                // in place
                CHECK_RANK(comm_allreduce(c, in, in, count, (CommDtype)t, (CommRedOp)op, &e) == 0, "%s", e.msg);
                CHECK_RANK(memcmp(in, ref, count * es) == 0, "in-place allreduce %s count %zu", comm_dtype_name(t), count);
            }
            // reduce_scatter of n·count: block me of the reduced vector
            fill(all, (CommDtype)t, count * n, me, salt + 7);
            reference(ref, (CommDtype)t, RED_SUM, count * n, n, salt + 7);
            CHECK_RANK(comm_reduce_scatter(c, all, out, count * n, (CommDtype)t, RED_SUM, &e) == 0, "%s", e.msg);
            CHECK_RANK(memcmp(out, ref + (size_t)me * count * es, count * es) == 0, "reduce_scatter %s count %zu n=%d",
                       comm_dtype_name(t), count, n);
            // allgather
            fill(in, (CommDtype)t, count, me, salt + 9);
            CHECK_RANK(comm_allgather(c, in, out, count, (CommDtype)t, &e) == 0, "%s", e.msg);
            int bad = 0;
            for (int r = 0; r < n; r++) {
                fill(ref, (CommDtype)t, count, r, salt + 9);
                bad += memcmp(out + (size_t)r * count * es, ref, count * es) != 0;
            }
            CHECK_RANK(bad == 0, "allgather %s count %zu n=%d", comm_dtype_name(t), count, n);
            // broadcast from the last rank
            if (me == n - 1) fill(in, (CommDtype)t, count, 99, salt); else memset(in, 0, count * es);
            CHECK_RANK(comm_broadcast(c, in, count, (CommDtype)t, n - 1, &e) == 0, "%s", e.msg);
            fill(ref, (CommDtype)t, count, 99, salt);
            CHECK_RANK(memcmp(in, ref, count * es) == 0, "broadcast %s count %zu", comm_dtype_name(t), count);
            // send/recv around a ring (even ranks send first)
            if (n > 1) {
                int to = (me + 1) % n, from = (me + n - 1) % n;
                fill(in, (CommDtype)t, count, me, salt + 11);
                if (me % 2 == 0) {
                    CHECK_RANK(comm_send(c, in, count, (CommDtype)t, to, &e) == 0, "%s", e.msg);
                    CHECK_RANK(comm_recv(c, out, count, (CommDtype)t, from, &e) == 0, "%s", e.msg);
                } else {
                    CHECK_RANK(comm_recv(c, out, count, (CommDtype)t, from, &e) == 0, "%s", e.msg);
                    CHECK_RANK(comm_send(c, in, count, (CommDtype)t, to, &e) == 0, "%s", e.msg);
                }
                fill(ref, (CommDtype)t, count, from, salt + 11);
                CHECK_RANK(memcmp(out, ref, count * es) == 0, "send/recv %s count %zu", comm_dtype_name(t), count);
            }
            CHECK_RANK(comm_barrier(c, &e) == 0, "%s", e.msg);
            free(in); free(out); free(ref); free(all);
        }
    return fails;
}

// 8 ranks as tp × dp × pp = 2 × 2 × 2 (rank = pp·4 + dp·2 + tp): a
// different collective on each kind of group at once.
static int mesh_main(Comm *c, void *arg) {
    (void)arg;
    int r = comm_rank(c), tp = r % 2, dp = (r / 2) % 2, pp = r / 4;
    Comm *gtp, *gdp, *gpp;
    Err e;
    if (comm_split(c, pp * 2 + dp, tp, "tp", &gtp, &e) || comm_split(c, pp * 2 + tp, dp, "dp", &gdp, &e) ||
        comm_split(c, dp * 2 + tp, pp, "pp", &gpp, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    CHECK_RANK(comm_size(gtp) == 2 && comm_rank(gtp) == tp && comm_rank(gdp) == dp && comm_rank(gpp) == pp,
               "group ranks %d %d %d", comm_rank(gtp), comm_rank(gdp), comm_rank(gpp));
    float v = (float)r, sum;
    CHECK_RANK(comm_allreduce(gtp, &v, &sum, 1, DT_F32, RED_SUM, &e) == 0, "%s", e.msg);
    CHECK_RANK(sum == (float)(r - tp) * 2 + 1, "tp sum %g at rank %d", sum, r);
    int32_t mine = r, got[2];
    CHECK_RANK(comm_allgather(gdp, &mine, got, 1, DT_I32, &e) == 0, "%s", e.msg);
    CHECK_RANK(got[0] == pp * 4 + tp && got[1] == pp * 4 + 2 + tp, "dp gather %d %d at rank %d", got[0], got[1], r);
    int64_t b = pp == 0 ? 1000 + r : -1;
    CHECK_RANK(comm_broadcast(gpp, &b, 1, DT_I64, 0, &e) == 0, "%s", e.msg);
    CHECK_RANK(b == 1000 + dp * 2 + tp, "pp broadcast %lld at rank %d", (long long)b, r);
    comm_free(gtp); comm_free(gdp); comm_free(gpp);
    return fails;
}

// A posted allreduce completes while the caller computes.
static int async_main(Comm *c, void *arg) {
    (void)arg;
    int n = comm_size(c), me = comm_rank(c);
    size_t count = 3 << 20;
    float *x = malloc(count * 4), *y = malloc(count * 4), *ref = malloc(count * 4);
    fill(x, DT_F32, count, me, 5);
    reference(ref, DT_F32, RED_SUM, count, n, 5);
    Err e;
    CommRequest *rq = comm_iallreduce(c, x, y, count, DT_F32, RED_SUM);
    double acc = 0;
    for (int i = 0; i < 20000000; i++) acc += sin(i * 1e-3);   // compute meanwhile
    int done_before_wait = comm_test(rq);
    CHECK_RANK(comm_wait(rq, &e) == 0, "%s", e.msg);
    CHECK_RANK(memcmp(y, ref, count * 4) == 0, "async allreduce result");
    // a blocking collective after queued ones runs after them, in order
    CommRequest *a = comm_iallreduce(c, x, y, count, DT_F32, RED_SUM);
    int32_t one = 1, s;
    CHECK_RANK(comm_allreduce(c, &one, &s, 1, DT_I32, RED_SUM, &e) == 0 && s == n, "ordered blocking call");
    CHECK_RANK(comm_test(a) == 1 && comm_wait(a, &e) == 0, "queued request done first");
    if (me == 0) fprintf(stderr, "  (allreduce done before wait: %s; acc %.1f)\n", done_before_wait ? "yes" : "no", acc);
    free(x); free(y); free(ref);
    return fails;
}

// Counters: the chunked allreduce sends and receives 2(n−1)/n of the bytes
// per rank, reduce_scatter and allgather (n−1)/n of the full vector.
static int counters_main(Comm *c, void *arg) {
    (void)arg;
    int n = comm_size(c);
    size_t count = (size_t)n << 18;   // whole pieces, each divisible by n
    float *x = calloc(count * n, 4), *y = calloc(count * n, 4);
    Err e;
    comm_stats_reset(c);
    comm_allreduce(c, x, y, count, DT_F32, RED_SUM, &e);
    comm_reduce_scatter(c, x, y, count, DT_F32, RED_SUM, &e);
    comm_allgather(c, x, y, count / n, DT_F32, &e);
    const CommStats *s = comm_stats(c);
    uint64_t B = count * 4;
    CHECK_RANK(s->bytes_sent[OP_ALLREDUCE] == 2 * (uint64_t)(n - 1) * B / n && s->bytes_recv[OP_ALLREDUCE] == s->bytes_sent[OP_ALLREDUCE],
               "allreduce bytes %llu, want %llu", (unsigned long long)s->bytes_sent[OP_ALLREDUCE], (unsigned long long)(2 * (uint64_t)(n - 1) * B / n));
    CHECK_RANK(s->bytes_sent[OP_REDUCE_SCATTER] == (uint64_t)(n - 1) * B / n, "reduce_scatter bytes %llu",
               (unsigned long long)s->bytes_sent[OP_REDUCE_SCATTER]);
    CHECK_RANK(s->bytes_sent[OP_ALLGATHER] == (uint64_t)(n - 1) * B / n, "allgather bytes %llu",
               (unsigned long long)s->bytes_sent[OP_ALLGATHER]);
    CHECK_RANK(s->calls[OP_ALLREDUCE] == 1 && s->seconds[OP_ALLREDUCE] > 0, "calls and seconds");
    free(x); free(y);
    return fails;
}


#endif
