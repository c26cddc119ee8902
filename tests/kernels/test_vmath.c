// kernels/vmath_impl.h: exp of every float, NaN and the infinities
// included, without undefined behaviour (this test also runs under
// UBSan), and the loss of a row holding NaN is NaN, not a number.
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
    crossentropy_forward(logits, &loss, &tgt, 1, 4, 8, 1.0f);
    EXPECT(isnan(loss), "a NaN target logit gives loss %g", loss);
    float all[4] = {NAN, NAN, NAN, NAN};
    tgt = 0;
    crossentropy_forward(all, &loss, &tgt, 1, 4, 4, 0.0f);
    EXPECT(!isfinite(loss), "an all-NaN row gives loss %g", loss);
}

int main(void) {
    RUN(test_special_values);
    RUN(test_loss_of_nan_logits);
    return test_finish();
}
