// kernels/vmath_impl.h: exp of every float, NaN and the infinities
// included, without undefined behaviour (this test also runs under
// UBSan), the loss of a row holding NaN is NaN, not a number, and the
// softmax rows' helpers against float64.
#include <math.h>
#include <string.h>

#include "kernels/crossentropy.h"
#include "kernels/vmath_impl.h"
#include "test.h"

static void test_special_values(void) {
    volatile float nan = NAN, inf = INFINITY;
    EXPECT(vexpf(nan) >= 0 && vexpf(nan) < 1e-37f, "exp(NaN) clamps like -inf: %g", vexpf(nan));
    EXPECT(vexpf(-inf) >= 0 && vexpf(-inf) < 1e-37f, "exp(-inf) = %g", vexpf(-inf));
    EXPECT(isfinite(vexpf(inf)) && vexpf(inf) > 1e38f, "exp(+inf) = %g", vexpf(inf));
    EXPECT(fabsf(vexpf(1.0f) - 2.7182817f) < 1e-6f, "exp(1) = %.8f", vexpf(1.0f));
}

static void test_loss_of_nan_logits(void) {
    float logits[8] = {0.1f, NAN, 0.3f, 0.2f, 0, 0, 0, 0}, loss;
    int tgt = 1;
    crossentropy_forward(logits, &loss, &tgt, 1, 4, 8, 1.0f, 0);
    EXPECT(isnan(loss), "a NaN target logit gives loss %g", loss);
    float all[4] = {NAN, NAN, NAN, NAN};
    tgt = 0;
    crossentropy_forward(all, &loss, &tgt, 1, 4, 4, 0.0f, 0);
    EXPECT(!isfinite(loss), "an all-NaN row gives loss %g", loss);
}

// The softmax rows' helpers against float64, at lengths around the 16 lanes
// and a vocabulary's: the largest value exactly (a NaN passed over), every
// exp within its argument's rounding, their sum, the same sum with none
// kept, and a scaling exactly x·k.
static void test_rows(void) {
    static float x[50257], e[50257];
    int sizes[] = {1, 15, 16, 17, 100, 50257};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int n = sizes[si];
        for (int i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 2000) * 0.01f - 12.0f;
        float mref = -INFINITY;
        for (int i = 0; i < n; i++) mref = x[i] > mref ? x[i] : mref;
        EXPECT(vmax_row(x, n, -INFINITY) == mref, "n %d: max %g, not %g", n, vmax_row(x, n, -INFINITY), mref);
        if (n > 5) {
            float keep = x[5];
            x[5] = NAN;
            float m = vmax_row(x, n, -INFINITY);
            x[5] = keep;
            EXPECT(!isnan(m), "n %d: a NaN is passed over (max %g)", n, m);
        }
        float a = 0.125f, b = mref * a;
        float sum = vexp_row(e, x, n, a, b);
        double worst = 0, ref = 0;
        for (int i = 0; i < n; i++) {
            double arg = (double)x[i] * a - b, want = exp(arg);
            double err = fabs(e[i] - want) / want / (2e-7 + fabs(arg) * 1.2e-7);
            worst = err > worst ? err : worst;
            ref += e[i];
        }
        EXPECT(worst <= 1.0, "n %d: an exp off by %.2f of its bound", n, worst);
        EXPECT(fabs(sum - ref) <= 1e-6 * ref, "n %d: sum %.9g, the exps' %.9g", n, sum, ref);
        float alone = vexp_row(NULL, x, n, a, b);
        EXPECT(alone == sum, "n %d: the sum with none kept %.9g, kept %.9g", n, alone, sum);
        memcpy(e, x, (size_t)n * sizeof *x);
        vscale_row(e, n, 0.37f);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += e[i] != x[i] * 0.37f;
        EXPECT(bad == 0, "n %d: %d scaled values not x·k", n, bad);
    }
}

int main(void) {
    RUN(test_special_values);
    RUN(test_loss_of_nan_logits);
    RUN(test_rows);
    return test_finish();
}
