// core/: JSON strictness and round trips, the counter-based RNG, the tagged
// allocator and CRC-32C.
#include <string.h>

#include "core/alloc.h"
#include "core/checksum.h"
#include "core/json.h"
#include "core/rng.h"
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

int main(void) {
    RUN(test_json_strict);
    RUN(test_json_values);
    RUN(test_rng);
    RUN(test_alloc);
    RUN(test_crc32c);
    return test_finish();
}
