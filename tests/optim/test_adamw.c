// optim/adamw: weight decay only where the table allows it, the update in
// pieces equal to the update of the whole buffer, the checkpoint state's
// round trip, and the thread-count-independent sum of squares.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/matmul.h"
#include "optim/adamw.h"
#include "test.h"

// The parameter table of gpt2-tiny with a byte vocabulary and L layers.
static ParamTable tiny_table(int L) {
    Err e;
    ModelConfig c;
    config_preset(&c, "gpt2-tiny", &e);
    config_set_vocab(&c, 256);
    c.n_layer = L;
    ModelSlice s = slice_whole(&c);
    ParamTable t;
    CHECKF(ptable_build(&t, &c, &s, &e) == 0, "%s", e.msg);
    return t;
}

static void test_adamw_decay_rules(void) {
    Err e;
    ParamTable t = tiny_table(1);
    float *p = mem_alloc(MEM_PARAMS, t.total * 4), *g = mem_alloc(MEM_GRADS, t.total * 4);
    for (size_t i = 0; i < t.total; i++) p[i] = 1.0f;
    AdamW a;
    EXPECT(adamw_init(&a, t.total, &e) == 0, "%s", e.msg);
    AdamWConfig o = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.5};
    adamw_step(&a, &t, p, g, 0.1f, &o, 1.0f);   // zero gradient: only decay moves parameters
    for (int k = 0; k < t.n; k++) {
        float want = (t.p[k].flags & PARAM_NO_DECAY) ? 1.0f : 1.0f - 0.1f * 0.5f;
        EXPECT(p[t.p[k].offset] == want && p[t.p[k].offset + t.p[k].numel - 1] == want, "%s: %g want %g",
               t.p[k].name, p[t.p[k].offset], want);
    }
    adamw_free(&a);
    mem_free(p);
    mem_free(g);
    ptable_free(&t);
}

static void test_sum_squares(void) {
    size_t n = 300001;
    float *g = malloc(n * 4);
    double ref = 0;
    for (size_t i = 0; i < n; i++) { g[i] = (float)((i % 97) * 0.01 - 0.3); ref += (double)g[i] * g[i]; }
    kernels_set_threads(1);
    double a = sum_squares(g, n);
    kernels_set_threads(2);
    double b = sum_squares(g, n);
    EXPECT(a == b, "thread count changes the norm: %.17g vs %.17g", a, b);
    EXPECT(fabs(a - ref) < 1e-9 * ref, "value %.17g vs %.17g", a, ref);
    // from an address off the vectors' alignment, a length off their width
    double tail = ref - (double)g[0] * g[0], c = sum_squares(g + 1, n - 1);
    EXPECT(fabs(c - tail) < 1e-9 * tail, "from g + 1: %.17g vs %.17g", c, tail);
    free(g);
}

// Updating the buffer as pieces (a ZeRO rank's, cut anywhere) gives the
// bits of one update of the whole buffer.
static void test_pieces(void) {
    Err e;
    ParamTable t = tiny_table(2);
    size_t n = t.total;
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4), *g = malloc(n * 4);
    for (size_t i = 0; i < n; i++) { p1[i] = p2[i] = (float)((i % 31) * 0.01); g[i] = (float)((i % 17) * 0.003 - 0.02); }
    AdamW a, b;
    adamw_init(&a, n, &e);
    adamw_init(&b, n, &e);
    AdamWConfig o = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    size_t cut[4] = {0, n / 3 + 5, 2 * n / 3 + 1, n};
    for (int step = 0; step < 3; step++) {
        adamw_step(&a, &t, p1, g, 1e-3f, &o, 0.5f);
        adamw_begin_step(&b);
        for (int q = 0; q < 3; q++) {
            OptPiece pc = {cut[q], cut[q + 1], p2 + cut[q], g + cut[q], cut[q], NULL, PREC_FP32, NULL, NULL};
            adamw_update_pieces(&b, &t, &pc, 1, 1e-3f, &o, 0.5f);
        }
    }
    EXPECT(memcmp(p1, p2, n * 4) == 0 && memcmp(a.m, b.m, n * 4) == 0 && memcmp(a.v, b.v, n * 4) == 0 && a.t == b.t,
           "pieces differ from the whole update");
    char *js = adamw_state_json(&a);
    Json *j = json_parse(js, strlen(js), &e);
    AdamW r = {0};
    EXPECT(j && adamw_state_read(&r, j, "x", &e) == 0 && r.t == 3, "state round trip: %s", js);
    json_free(j);
    free(js);
    j = json_parse("{}", 2, &e);
    EXPECT(adamw_state_read(&r, j, "dir", &e) == -1 && strstr(e.msg, "dir/meta.json") && strstr(e.msg, "adam_t"),
           "missing adam_t: %s", e.msg);
    json_free(j);
    adamw_free(&a);
    adamw_free(&b);
    free(p1); free(p2); free(g);
    ptable_free(&t);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_adamw_decay_rules);
    RUN(test_pieces);
    RUN(test_sum_squares);
    return test_finish();
}
