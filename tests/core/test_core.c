// core/: JSON strictness and round trips, the counter-based RNG, the tagged
// allocator, CRC-32C, the 16-bit float formats and the profile (core/prof).
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checksum.h"
#include "core/half.h"
#include "core/json.h"
#include "core/prof.h"
#include "core/rng.h"
#include "core/timer.h"
#include "core/trace.h"
#include "core/volume.h"
#include "test.h"

static int parses(const char *s) {
    Err e;
    Json *j = json_parse(s, strlen(s), &e);
    int ok = j != NULL;
    json_free(j);
    return ok;
}

static void test_json_strict(void) {
    const char *good[] = {"{}", "[]", "0", "-0.5e+3", "\"a\\u00e9\\ud83d\\ude00\"", "{\"a\":[1,2,{\"b\":null}]}",
                          " true ", "\"\xc3\xa9\""};
    const char *bad[] = {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "+1", "\"a", "\"\\x\"", "\"\\ud800\"",
                         "\"\\udc00\"", "{\"a\":1,\"a\":2}", "[1] 2", "nul", "\"\x01\"", "\"\xff\"", "\"\xc0\xaf\"",
                         "{1:2}", "1e999", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) EXPECT(parses(good[i]), "rejected valid %s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) EXPECT(!parses(bad[i]), "accepted invalid %s", bad[i]);
    Err e;
    Json *j = json_parse("{\n  \"a\": [1, 2,]\n}", 18, &e);
    EXPECT(!j && strstr(e.msg, "line 2"), "error position: %s", e.msg);
}

static void test_json_values(void) {
    Err e;
    const char *s = "{\"n\":9007199254740993,\"f\":0.1,\"s\":\"x\\ny\",\"a\":[true,false,null]}";
    Json *j = json_parse(s, strlen(s), &e);
    int64_t v = 0;
    EXPECT(j && json_int64(json_get(j, "n"), &v) == 0 && v == 9007199254740993LL, "exact int64");
    EXPECT(json_int64(json_get(j, "f"), &v) == -1, "0.1 is not an integer");
    EXPECT(json_get(j, "f")->num == 0.1, "double");
    EXPECT(!strcmp(json_get(j, "s")->text, "x\ny"), "escape");
    EXPECT(json_get(j, "a")->len == 3 && json_at(json_get(j, "a"), 2)->type == JSON_NULL, "array");
    json_free(j);
    // writer -> reader round trip, including awkward doubles and strings
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "x"); jb_num(&b, 0.1 + 0.2);
    jb_key(&b, "y"); jb_num(&b, 1e-300);
    jb_key(&b, "s"); jb_str(&b, "q\"\\\t\x01");
    jb_key(&b, "l"); jb_arr_begin(&b); jb_int(&b, -5); jb_bool(&b, 1); jb_null(&b); jb_arr_end(&b);
    jb_obj_end(&b);
    j = json_parse(b.s, b.len, &e);
    EXPECT(j != NULL, "writer output does not parse: %s", b.s);
    if (j) {
        EXPECT(json_get(j, "x")->num == 0.1 + 0.2 && json_get(j, "y")->num == 1e-300, "doubles round trip");
        EXPECT(!strcmp(json_get(j, "s")->text, "q\"\\\t\x01"), "string round trip");
        EXPECT(json_get(j, "l")->len == 3, "array round trip");
    }
    json_free(j);
    jb_free(&b);
}

static void test_rng(void) {
    EXPECT(rng_uniform(1, 2, 3) == rng_uniform(1, 2, 3), "not a pure function");
    EXPECT(rng_uniform(1, 2, 3) != rng_uniform(1, 2, 4) && rng_uniform(1, 2, 3) != rng_uniform(1, 3, 3) &&
           rng_uniform(1, 2, 3) != rng_uniform(2, 2, 3), "seed/stream/index all matter");
    double z[2];
    rng_normal_pair(5, 6, 7, z);
    EXPECT(z[0] == rng_normal(5, 6, 14) && z[1] == rng_normal(5, 6, 15), "pair halves");
    int n = 200000;
    double m = 0, v = 0, um = 0;
    for (int i = 0; i < n; i++) {
        double x = rng_normal(9, 1, i);
        m += x; v += x * x;
        um += rng_uniform(9, 2, i);
    }
    m /= n; v = v / n - m * m; um /= n;
    EXPECT(fabs(m) < 0.01 && fabs(v - 1) < 0.02 && fabs(um - 0.5) < 0.005, "moments m=%.4f v=%.4f u=%.4f", m, v, um);
    int hist[7] = {0};
    for (int i = 0; i < 70000; i++) hist[rng_below(3, 3, i, 7)]++;
    for (int k = 0; k < 7; k++) EXPECT(abs(hist[k] - 10000) < 500, "rng_below bucket %d has %d", k, hist[k]);
    // Philox4x32-10 known-answer vector (Random123 kat_vectors: ctr 0, key 0).
    uint32_t r[4];
    rng_philox(0, 0, 0, r);
    EXPECT(r[0] == 0x6627e8d5u && r[1] == 0xe169c58du && r[2] == 0xbc57ac4cu && r[3] == 0x9b00dbd8u,
           "philox KAT: %08x %08x %08x %08x", r[0], r[1], r[2], r[3]);
}

static void test_alloc(void) {
    size_t base = mem_current(MEM_ACTS);
    mem_reset_peak();
    float *a = mem_alloc(MEM_ACTS, 1000), *b = mem_alloc(MEM_ACTS, 24);
    EXPECT(a && b && ((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "alignment");
    EXPECT(a[0] == 0 && a[249] == 0, "zeroed");
    EXPECT(mem_current(MEM_ACTS) == base + 1024, "current %zu", mem_current(MEM_ACTS));
    mem_free(a);
    EXPECT(mem_current(MEM_ACTS) == base + 24 && mem_peak(MEM_ACTS) == base + 1024, "peak kept after free");
    mem_free(b);
    mem_fail_after(2);
    void *x = mem_alloc(MEM_GRADS, 8), *y = mem_alloc(MEM_GRADS, 8), *z = mem_alloc(MEM_GRADS, 8);
    EXPECT(x && !y && z, "fail hook hits exactly the 2nd allocation");
    mem_free(x);
    mem_free(z);
    EXPECT(mem_current(MEM_GRADS) == 0, "grads leaked");
    char buf[32];
    EXPECT(!strcmp(mem_fmt(1536, buf, sizeof buf), "1.50 KiB"), "fmt %s", buf);
}

static void test_crc32c(void) {
    EXPECT(crc32c(0, "123456789", 9) == 0xE3069283u, "check value %08x", crc32c(0, "123456789", 9));
    uint32_t c = crc32c(0, "12345", 5);
    EXPECT(crc32c(c, "6789", 4) == 0xE3069283u, "incremental");
}

// The value x rounds to in a format of `bits` bits of precision whose
// smallest normal is 2^emin and largest finite `maxf`, in float64: the
// nearest multiple of the quantum at x's binade, ties to even (nearbyint's
// default mode); past the largest finite by half a quantum or more, inf.
static double ref_round(float x, int bits, int emin, double maxf) {
    if (isnan(x) || isinf(x) || x == 0) return x;
    int e;
    frexp(fabs((double)x), &e);   // |x| in [2^(e-1), 2^e)
    int ex = e - 1 < emin ? emin : e - 1;
    double q = ldexp(1.0, ex - (bits - 1));
    double r = nearbyint((double)x / q) * q;
    if (fabs(r) > maxf) return x > 0 ? INFINITY : -INFINITY;
    return r;
}

// Every 16-bit value survives the trip through fp32; random fp32 values
// (every exponent, the ties, the edges of the range) pack to the nearest
// value, ties to even, in both formats; the bulk conversions (threads,
// vector paths and their tails) agree with the scalar ones.
static void test_half(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float b = bf16_to_f32((uint16_t)h), f = f16_to_f32((uint16_t)h);
        if (!isnan(b)) EXPECT(f32_to_bf16(b) == h, "bf16 %04x round trip", h);
        if (!isnan(f)) EXPECT(f32_to_f16(f) == h, "f16 %04x round trip", h);
        if (isnan(b)) EXPECT(isnan(bf16_to_f32(f32_to_bf16(b))), "bf16 NaN stays NaN");
        if (isnan(f)) EXPECT(isnan(f16_to_f32(f32_to_f16(f))), "f16 NaN stays NaN");
    }
    enum { N = 200003 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *z = malloc(N * sizeof *z);
    uint16_t *h = malloc(N * sizeof *h);
    for (int i = 0; i < N; i++) {
        uint32_t o[4];
        rng_philox(5, 0, (uint64_t)i, o);
        uint32_t u = o[0];
        if (i % 3 == 1) u = (u & 0xFFFF0000u) | 0x8000u;           // a bf16 tie
        if (i % 3 == 2) u = (u & 0xFFFFE000u) | 0x1000u;           // an fp16 tie (normal range)
        if (i % 7 == 0) u = (u & 0x807FFFFFu) | (uint32_t)(100 + i % 60) << 23;   // around fp16's range
        memcpy(&x[i], &u, 4);
    }
    x[0] = 65504.0f; x[1] = 65520.0f; x[2] = 65519.996f; x[3] = 5.9604645e-8f; x[4] = 2.9802322e-8f;
    x[5] = 2.9802326e-8f; x[6] = FLT_MAX; x[7] = -0.0f; x[8] = INFINITY; x[9] = NAN;
    for (int p = PREC_BF16; p <= PREC_FP16; p++) {
        int bits = p == PREC_BF16 ? 8 : 11, emin = p == PREC_BF16 ? -126 : -14;
        double maxf = p == PREC_BF16 ? ldexp(255.0, 120) : 65504.0;
        half_pack((Precision)p, h, x, N);
        half_unpack((Precision)p, y, h, N);
        half_round((Precision)p, z, x, N);
        uint16_t *h2 = malloc(N * sizeof *h2);
        float *w = malloc(N * sizeof *w);
        half_pack_widen((Precision)p, h2, w, x, N);
        EXPECT(!memcmp(h2, h, N * sizeof *h) && !memcmp(w, y, N * sizeof *w), "%s: pack and widen in one pass",
               prec_name((Precision)p));
        free(w);
        for (int o = 0; o < 40; o += 3) {   // streamed: every alignment of the start, tails of every length
            int n = N - o - 1 - o * 7 % 31;
            memset(h2, 0xAB, N * sizeof *h2);
            half_pack_stream((Precision)p, h2 + o, x + o, (size_t)n);
            EXPECT(!memcmp(h2 + o, h + o, (size_t)n * sizeof *h) && h2[o + n] == 0xABAB && (o == 0 || h2[o - 1] == 0xABAB),
                   "%s: streamed from value %d, %d values: the bits of half_pack", prec_name((Precision)p), o, n);
        }
        free(h2);
        int wrong = 0, first = -1;
        for (int i = 0; i < N; i++) {
            double want = ref_round(x[i], bits, emin, maxf);
            uint16_t one = p == PREC_BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
            int ok = isnan(x[i]) ? isnan(y[i]) && isnan(z[i])
                                 : (double)y[i] == want && signbit(y[i]) == signbit(x[i]) && h[i] == one &&
                                       memcmp(&y[i], &z[i], 4) == 0;
            if (!ok && !wrong++) first = i;
        }
        EXPECT(!wrong, "%s: %d of %d values round wrongly (first: %a -> %a, want %a)", prec_name((Precision)p), wrong, N,
               first >= 0 ? x[first] : 0.0f, first >= 0 ? y[first] : 0.0f,
               first >= 0 ? ref_round(x[first], bits, emin, maxf) : 0.0);
    }
    half_round(PREC_FP32, z, x, N);
    EXPECT(!memcmp(z, x, N * sizeof *x), "fp32 rounding copies");
    Precision q;
    EXPECT(prec_parse("bf16", &q) == 0 && q == PREC_BF16 && prec_parse("fp8", &q) == -1, "parse");
    free(x); free(y); free(z); free(h);
}

static void *record_elsewhere(void *arg) {
    (void)arg;
    prof_end(prof_begin(), PROF_NORM, 1, 1);   // this thread has no profile: nothing
    double t = 1.0;                            // a begin from another thread, ended here
    prof_end(t, PROF_NORM, 1, 1);
    return NULL;
}

// core/prof: rows by kind and GEMM shape, the calls, FLOPs and bytes
// given, time only while attached and only on the attached thread.
static void test_prof(void) {
    static Profile p, q;
    prof_end(prof_begin(), PROF_NORM, 1, 1);   // no profile yet: nothing to record into
    EXPECT(prof_begin() == 0.0 && !prof_current(), "no profile attached");
    p.n = 5;
    prof_attach(&p);
    EXPECT(p.n == 0 && prof_current() == &p, "attaching clears");
    double t0 = prof_begin();
    EXPECT(t0 > 0.0, "a bracket starts at the time now");
    for (volatile int i = 0; i < 100000; i++) {}
    prof_gemm(t0, PROF_GEMM_FWD, 4, 8, 16);
    prof_gemm(prof_begin(), PROF_GEMM_FWD, 4, 8, 16);
    prof_gemm(prof_begin(), PROF_GEMM_DW, 4, 8, 16);
    prof_end(prof_begin(), PROF_LOSS, 0, 100);
    prof_end(0.0, PROF_LOSS, 0, 100);   // a bracket begun without a profile
    pthread_t th;
    pthread_create(&th, NULL, record_elsewhere, NULL);
    pthread_join(th, NULL);
    EXPECT(p.n == 3, "rows: gemm fwd 4x8x16, gemm dweight 4x8x16, loss (%d)", p.n);
    EXPECT(p.row[0].kind == PROF_GEMM_FWD && p.row[0].m == 4 && p.row[0].n == 8 && p.row[0].k == 16 &&
               p.row[0].calls == 2 && p.row[0].flops == 2 * 2.0 * 4 * 8 * 16 && p.row[0].seconds > 0,
           "the forward GEMM row: %g calls, %g FLOPs", p.row[0].calls, p.row[0].flops);
    EXPECT(p.row[1].kind == PROF_GEMM_DW && p.row[1].calls == 1, "a row per kind and shape");
    EXPECT(p.row[2].kind == PROF_LOSS && p.row[2].calls == 1 && p.row[2].bytes == 100 && p.row[2].flops == 0,
           "the loss row: %g calls, %g bytes", p.row[2].calls, p.row[2].bytes);
    prof_attach(NULL);
    prof_end(prof_begin(), PROF_NORM, 1, 1);
    EXPECT(p.n == 3, "detached: nothing recorded");
    prof_merge(&q, &p);
    prof_merge(&q, &p);
    EXPECT(q.n == 3 && q.row[0].calls == 4 && q.row[2].bytes == 200, "merging adds the rows");
    // a full profile folds new rows into its last one
    prof_attach(&p);
    for (int i = 0; i < PROF_MAX_ROWS + 10; i++) prof_gemm(prof_begin(), PROF_GEMM_DX, i + 1, 1, 1);
    prof_attach(NULL);
    EXPECT(p.n == PROF_MAX_ROWS && p.row[PROF_MAX_ROWS - 1].calls == 11, "full: %d rows, last %g calls", p.n,
           p.row[PROF_MAX_ROWS - 1].calls);
    EXPECT(!strcmp(prof_kind_name(PROF_OPTIMIZER), "AdamW") && !strcmp(prof_kind_key(PROF_GEMM_DX), "gemm_dinp"),
           "kind names");
}

static void *trace_elsewhere(void *arg) {
    (void)arg;
    trace_step(2);   // no trace attached to this thread: nothing
    prof_end(prof_begin(), PROF_NORM, 1, 1);
    return NULL;
}

// core/trace: events only inside the steps and on the attached thread, the
// durations the profile sums, the layer and collective context on the right
// events, one thread's events apart, the cap counted, Chrome's fields.
static void test_trace(void) {
    static Profile p;
    Err err;
    Trace *t = trace_create(2, 3, 0, timer_now(), &err);
    EXPECT(t != NULL, "created");
    if (!t) return;
    trace_attach(t);
    trace_step(1);
    EXPECT(!trace_on() && prof_begin() == 0.0, "step 1 is outside 2:3: no time taken");
    prof_end(prof_begin(), PROF_NORM, 1, 1);
    trace_step(2);
    EXPECT(trace_on() && prof_begin() > 0.0, "step 2 is inside: brackets are timed without a profile");
    prof_attach(&p);
    double s0 = timer_now();
    trace_layer(3);
    prof_gemm(prof_begin(), PROF_GEMM_FWD, 4, 8, 16);
    trace_comm("allreduce", "tp", 64);
    prof_end(prof_begin(), PROF_COMM, 0, 0);
    trace_layer(-1);
    trace_comm("recv", "pp_act", 32);   // a note is for a collective's bracket only
    prof_end(prof_begin(), PROF_NORM, 0, 8);
    trace_span(s0, timer_now(), 2);
    pthread_t th;
    pthread_create(&th, NULL, trace_elsewhere, NULL);
    pthread_join(th, NULL);
    trace_step(4);
    prof_end(prof_begin(), PROF_NORM, 1, 1);   // profiled, not traced
    prof_attach(NULL);
    EXPECT(trace_count(t) == 4 && trace_dropped(t) == 0, "4 events: gemm, allreduce, norm, step (%zu)", trace_count(t));
    JsonBuf b;
    jb_init(&b);
    jb_arr_begin(&b);
    trace_json(t, 7, "rank 7", &b);
    jb_arr_end(&b);
    Json *j = json_parse(b.s, b.len, &err);
    EXPECT(j && j->type == JSON_ARR, "the events parse as a JSON array");
    const Json *e[4] = {0};
    int meta = 0;
    for (size_t i = 0; j && json_at(j, i); i++) {
        const Json *x = json_at(j, i), *ph = json_get(x, "ph");
        if (ph && !strcmp(ph->text, "M")) meta++;
        else if (i - meta < 4) e[i - meta] = x;
    }
    EXPECT(meta == 12 && e[3], "the process's and 5 threads' names and order, then the events (%d)", meta);
    if (e[3]) {
        const char *keys[] = {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args"};
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < 8; k++) EXPECT(json_get(e[i], keys[k]), "event %d has %s", i, keys[k]);
        EXPECT(!strcmp(json_get(e[0], "name")->text, "gemm fwd L3 4×16 · 16×8") &&
                   !strcmp(json_get(e[0], "cat")->text, "gemm_fwd") && json_get(json_get(e[0], "args"), "flops")->num == 2.0 * 4 * 8 * 16,
               "a GEMM by kind, layer and shape: %s", json_get(e[0], "name")->text);
        const Json *a1 = json_get(e[1], "args");
        EXPECT(!strcmp(json_get(e[1], "name")->text, "allreduce tp L3") && json_get(a1, "bytes")->num == 64 &&
                   !strcmp(json_get(a1, "group")->text, "tp") && json_get(e[1], "tid")->num == 2,
               "a collective by operation, group and bytes on the communication row");
        EXPECT(!strcmp(json_get(e[2], "name")->text, "norms") && !json_get(json_get(e[2], "args"), "op") &&
                   json_get(json_get(e[2], "args"), "bytes")->num == 8 && json_get(e[2], "pid")->num == 7,
               "the norm after the layer: no layer, no collective, its own bytes");
        EXPECT(!strcmp(json_get(e[3], "cat")->text, "step") && json_get(e[3], "tid")->num == 0, "the step on its row");
        for (int i = 0; i + 1 < 3; i++)
            EXPECT(json_get(e[i], "ts")->num + json_get(e[i], "dur")->num <= json_get(e[i + 1], "ts")->num,
                   "events %d and %d apart", i, i + 1);
        double dur = json_get(e[0], "dur")->num, prof = p.row[0].seconds * 1e6;
        EXPECT(p.row[0].kind == PROF_GEMM_FWD && fabs(dur - prof) <= 0.002, "the profile's time: %.3f µs, %.3f", dur, prof);
    }
    json_free(j);
    jb_free(&b);
    // past the cap: dropped and counted
    trace_step(3);
    for (int i = 0; i < TRACE_MAX_EVENTS; i++) trace_span(1, 1, 3);
    EXPECT(trace_count(t) == TRACE_MAX_EVENTS && trace_dropped(t) == 4, "capped: %zu held, %zu dropped", trace_count(t),
           trace_dropped(t));
    trace_free(t);
    EXPECT(!trace_on(), "freed: detached");
}

// core/volume against the textbook counts: a ring-like allreduce sends
// 2(n−1)/n of the vector, a small one (n−1)·B, summed over the ranks of an
// uneven split 2(n−1)·B; reduce-scatter and allgather (n−1)/n of the full
// vector; a broadcast (n−1)·B from the root.
static void test_volume(void) {
    size_t big = 4 << 20, small = 1000;   // floats: 4 pieces of 1 MiB each; one piece of 4000 bytes
    Volume v = volume_allreduce(big, 4, 4, 1);
    EXPECT(v.sent == 2 * 3 * (uint64_t)big * 4 / 4 && v.recv == v.sent, "large allreduce: %llu", (unsigned long long)v.sent);
    v = volume_allreduce(small, 4, 4, 2);
    EXPECT(v.sent == 3 * (uint64_t)small * 4 && v.recv == v.sent, "small allreduce: every peer reads it");
    EXPECT(volume_allreduce(big, 4, 1, 0).sent == 0, "one rank sends nothing");
    uint64_t sum = 0;
    for (int r = 0; r < 3; r++) sum += volume_allreduce_split(1001, 2, 3, r).sent;
    EXPECT(sum == 2 * 2 * 1001 * 2, "uneven split over 3 ranks: %llu bytes in all", (unsigned long long)sum);
    EXPECT(volume_reduce_scatter(4 * 256, 4, 4).sent == 3 * 256 * 4, "reduce-scatter: (n−1)·k elements");
    EXPECT(volume_allgather(256, 2, 4).recv == 3 * 256 * 2, "allgather: (n−1)·count elements");
    Volume root = volume_broadcast(100, 8, 5, 2, 2), leaf = volume_broadcast(100, 8, 5, 0, 2);
    EXPECT(root.sent == 4 * 800 && root.recv == 0 && leaf.sent == 0 && leaf.recv == 800, "broadcast: root sends, others receive");
}

int main(void) {
    RUN(test_json_strict);
    RUN(test_json_values);
    RUN(test_rng);
    RUN(test_alloc);
    RUN(test_crc32c);
    RUN(test_half);
    RUN(test_prof);
    RUN(test_trace);
    RUN(test_volume);
    return test_finish();
}
