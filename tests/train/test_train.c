// train/schedule: warmup, cosine decay to the floor, constant.
#include <stdio.h>
#include <string.h>

#include "kernels/matmul.h"
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

int main(void) {
    kernels_set_threads(2);
    RUN(test_lr_schedule);
    return test_finish();
}
