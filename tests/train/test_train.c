// train/, data/ and io/ pieces: LR schedule, AdamW's decay rules, the
// gradient norm, the loader's order and state, checkpoint save/load.
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/matmul.h"
#include "model/stage.h"
#include "optim/adamw.h"
#include "train/schedule.h"
#include "test.h"

static void test_lr_schedule(void) {
    LrSchedule o = {.lr = 1.0, .min_lr = 0.1, .warmup = 10, .steps = 110, .shape = LR_COSINE};
    EXPECT(fabsf(lr_at(&o, 0) - 0.1f) < 1e-7f, "first warmup step %g", lr_at(&o, 0));
    EXPECT(fabsf(lr_at(&o, 9) - 1.0f) < 1e-7f, "end of warmup %g", lr_at(&o, 9));
    EXPECT(fabsf(lr_at(&o, 10) - 1.0f) < 1e-6f, "cosine start %g", lr_at(&o, 10));
    EXPECT(fabsf(lr_at(&o, 60) - 0.55f) < 1e-6f, "cosine midpoint %g", lr_at(&o, 60));
    EXPECT(fabsf(lr_at(&o, 110) - 0.1f) < 1e-6f && fabsf(lr_at(&o, 500) - 0.1f) < 1e-6f, "floor");
    for (int s = 11; s < 110; s++) EXPECT(lr_at(&o, s) <= lr_at(&o, s - 1), "not decreasing at %d", s);
    o.shape = LR_CONSTANT;
    EXPECT(lr_at(&o, 50) == 1.0f && lr_at(&o, 4) == 0.5f, "constant with warmup");
}

static void test_adamw_decay_rules(void) {
    Err e;
    ModelConfig c;
    config_preset(&c, "gpt2-tiny", &e);
    config_set_vocab(&c, 256);
    c.n_layer = 1;
    ModelSlice s = slice_whole(&c);
    ParamTable t;
    ptable_build(&t, &c, &s, &e);
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
    free(g);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_lr_schedule);
    RUN(test_adamw_decay_rules);
    RUN(test_sum_squares);
    return test_finish();
}
