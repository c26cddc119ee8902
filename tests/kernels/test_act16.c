// The elementwise kernels on 16-bit stores (kernels/pointwise): GELU's and
// SwiGLU's bits against the fp32 kernels on the rounded or widened values,
// and their backward passes that leave the gradients in bf16 for the tiles.
#include <string.h>

#include "core/half.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/pointwise.h"
#include "kernels/threads.h"
#include "test.h"
#include "units.h"

// The 16-bit variants: the bits of rounding the input, the fp32 kernel and
// rounding its output (forward), and of the fp32 kernel on the widened store
// (backward) — across SwiGLU's spans of 4096 and a partial last vector.
static void test_act16(void) {
    int n = 9003, N = 2, F = 4100;
    float *x = randn(n, 3), *dy = randn(n, 1), *y = calloc(n, 4), *dx = calloc(n, 4), *dx16 = calloc(n, 4);
    uint16_t *x16 = calloc(n, 2), *y16 = calloc(n, 2), *ry16 = calloc(n, 2);
    gelu_forward16(y16, x16, x, n);
    half_round(PREC_BF16, x, x, n);
    gelu_forward(y, x, n);
    half_pack(PREC_BF16, ry16, y, n);
    int ok = !memcmp(y16, ry16, n * 2);
    for (int i = 0; i < n; i++) ok &= x16[i] == f32_to_bf16(x[i]);
    EXPECT(ok, "gelu_forward16: not the bits of gelu_forward on the rounded input, rounded");
    gelu_backward(dx, x, dy, n);
    gelu_backward16(dx16, x16, dy, n);
    EXPECT(!memcmp(dx, dx16, n * sizeof *dx), "gelu_backward16: not the bits of gelu_backward on the widened store");
    size_t ng = (size_t)N * 2 * F, nh = (size_t)N * F;
    float *gu = randn(ng, 2), *h = calloc(nh, 4), *dh = randn(nh, 1), *dgu = calloc(ng, 4), *dgu16 = calloc(ng, 4);
    uint16_t *gu16 = calloc(ng, 2), *h16 = calloc(nh, 2), *rh16 = calloc(nh, 2);
    swiglu_forward16(h16, gu16, gu, N, F);
    half_round(PREC_BF16, gu, gu, ng);
    swiglu_forward(h, gu, N, F);
    half_pack(PREC_BF16, rh16, h, nh);
    ok = !memcmp(h16, rh16, nh * 2);
    for (size_t i = 0; i < ng; i++) ok &= gu16[i] == f32_to_bf16(gu[i]);
    EXPECT(ok, "swiglu_forward16: not the bits of swiglu_forward on the rounded input, rounded");
    swiglu_backward(dgu, gu, dh, N, F);
    swiglu_backward16(dgu16, gu16, dh, N, F);
    EXPECT(!memcmp(dgu, dgu16, ng * sizeof *dgu), "swiglu_backward16: not the bits of swiglu_backward on the widened store");
    free(x); free(dy); free(y); free(dx); free(dx16); free(x16); free(y16); free(ry16);
    free(gu); free(h); free(dh); free(dgu); free(dgu16); free(gu16); free(h16); free(rh16);
}

// gelu_backward16_rows: each row's gradient the bits gelu_backward16 writes,
// rounded as bf16_round_row rounds them, at the start of its own row, and
// the bias's sums the bits of colsum_add on the floats — in one chunk of
// rows and in several, across the spans of 4096 and a partial last vector.
static void test_gelu_rows16(void) {
    int shapes[][2] = {{3, 4098}, {1000, 770}};
    for (int t = 0; t < 2; t++) {
        int N = shapes[t][0], F = shapes[t][1];
        size_t n = (size_t)N * F;
        float *x = randn(n, 3), *dy = randn(n, 1), *dx = calloc(n, 4), *buf = malloc(n * 4);
        float *bias = randn(F, 4), *rbias = malloc((size_t)F * 4);
        uint16_t *x16 = calloc(n, 2), *r16 = calloc(n, 2), *y16 = calloc(n, 2);
        memcpy(rbias, bias, (size_t)F * 4);
        gelu_forward16(y16, x16, x, n);
        gelu_backward16(dx, x16, dy, n);
        colsum_add(rbias, dx, N, F);
        bf16_round_row(r16, dx, n);
        memcpy(buf, dy, n * 4);
        gelu_backward16_rows(buf, bias, x16, N, F);
        int ok = 1;
        for (int i = 0; i < N; i++) ok &= !memcmp((uint16_t *)(buf + (size_t)i * F), r16 + (size_t)i * F, (size_t)F * 2);
        EXPECT(ok, "gelu_backward16_rows N=%d F=%d: the rows are not gelu_backward16's, rounded", N, F);
        EXPECT(!memcmp(bias, rbias, (size_t)F * 4), "gelu_backward16_rows N=%d F=%d: the bias's sums are not colsum_add's",
               N, F);
        free(x); free(dy); free(dx); free(buf); free(bias); free(rbias); free(x16); free(r16); free(y16);
    }
}

// swiglu_backward16_rows: the bits of swiglu_backward16, rounded as
// bf16_round_row rounds them, across the spans of 4096.
static void test_swiglu_rows16(void) {
    int N = 3, F = 4098;
    size_t ng = (size_t)N * 2 * F, nh = (size_t)N * F;
    float *gu = randn(ng, 2), *dh = randn(nh, 1), *dgu = calloc(ng, 4), *h = calloc(nh, 4);
    uint16_t *gu16 = calloc(ng, 2), *h16 = calloc(nh, 2), *r16 = calloc(ng, 2), *d16 = calloc(ng, 2);
    swiglu_forward16(h16, gu16, gu, N, F);
    swiglu_backward16(dgu, gu16, dh, N, F);
    bf16_round_row(r16, dgu, ng);
    swiglu_backward16_rows(d16, gu16, dh, N, F);
    EXPECT(!memcmp(d16, r16, ng * 2), "swiglu_backward16_rows: not swiglu_backward16's gradients, rounded");
    free(gu); free(dh); free(dgu); free(h); free(gu16); free(h16); free(r16); free(d16);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_act16);
    if (gemm_bf16_own()) {
        RUN(test_gelu_rows16);
        RUN(test_swiglu_rows16);
    } else
        printf("     no AVX512_BF16: gelu_backward16_rows and swiglu_backward16_rows are not used here\n");
    return test_finish();
}
