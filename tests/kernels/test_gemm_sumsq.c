// The sums of squares a weight gradient's last product takes as it writes
// it (kernels/gemm_bf16's gemm_bf16_op_sq, kernels/matmul's
// matmul_grad_sumsq): equal to a float64 pass over what the product left,
// over its columns only (not the rows' padding), the same for every thread
// count, the product's own bits unchanged; the marks of the linear layers
// used by the right product, a product over several marked tensors
// counted once, and other paths leaving the sums as they were.
#include <math.h>
#include <string.h>

#include "core/half.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/threads.h"
#include "test.h"
#include "units.h"

// The float64 sum of squares of C (R,NC), rows ldc apart.
static double squares64(const float *c, int R, int NC, int ldc) {
    double s = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < NC; j++) s += (double)c[(size_t)i * ldc + j] * c[(size_t)i * ldc + j];
    return s;
}

// C (R,NC) (+)= A · B in the forms of a weight gradient's product (A read
// transposed from fp32, B fp32 rows), rows ldc > NC apart (the padding
// random, to be left out): sq on 1 and 2 threads.
static void check_sq(int R, int NC, int K, int acc) {
    int ldc = NC + 3, saved = kernels_threads();
    float *At = randn((size_t)K * R, 1), *B = randn((size_t)K * NC, 1), *C0 = randn((size_t)R * ldc, 1);
    size_t n = (size_t)R * ldc;
    float *ref = malloc(n * sizeof *ref), *c = malloc(n * sizeof *c);
    uint16_t *room = calloc(gemm_bf16_room(R, NC, K, OP_ROWS32, OP_ROWS32), sizeof *room);
    Bf16Op a = {OP_COLS32, At, R}, b = {OP_ROWS32, B, NC};
    memcpy(ref, C0, n * sizeof *ref);
    EXPECT(gemm_bf16_op(R, NC, K, a, b, ref, ldc, acc, NULL, room) == 0, "gemm_bf16_op R=%d NC=%d K=%d failed", R, NC, K);
    double sq[2] = {-1, -1};
    int same = 1;
    for (int t = 0; t < 2; t++) {
        kernels_set_threads(t + 1);
        memcpy(c, C0, n * sizeof *c);
        same &= gemm_bf16_op_sq(R, NC, K, a, b, c, ldc, acc, NULL, room, &sq[t]) == 0 && memcmp(c, ref, n * sizeof *c) == 0;
    }
    kernels_set_threads(saved);
    double want = squares64(ref, R, NC, ldc);
    EXPECT(same, "gemm_bf16_op_sq R=%d NC=%d K=%d acc=%d: C not gemm_bf16_op's bits", R, NC, K, acc);
    EXPECT(sq[0] == sq[1], "gemm_bf16_op_sq R=%d NC=%d K=%d: %.17g on 1 thread, %.17g on 2", R, NC, K, sq[0], sq[1]);
    EXPECT(fabs(sq[0] - want) <= 1e-12 * want, "gemm_bf16_op_sq R=%d NC=%d K=%d acc=%d: %.17g, float64 %.17g", R, NC, K,
           acc, sq[0], want);
    free(At); free(B); free(C0); free(ref); free(c); free(room);
}

static void test_gemm_sq(void) {
    for (int acc = 0; acc < 2; acc++) {
        check_sq(1, 1, 1, acc);
        check_sq(37, 45, 67, acc);      // edges everywhere, odd K
        check_sq(70, 100, 801, acc);    // reduction blocks: the last one's sums
        check_sq(64, 1100, 96, acc);    // column blocks of B
        check_sq(768, 64, 256, acc);    // a weight gradient's shape: many rows, a short reduction
        check_sq(33, 17, 4101, acc);    // a long reduction, rows past a tile
    }
    // a product that does not run leaves the sum as it was (the vector units meet the tiles' panels)
    if (gemm_bf16_unit() != BF16_AMX) {
        uint16_t pan[64] = {0};
        float c[4] = {1, 2, 3, 4}, x[4] = {1, 1, 1, 1};
        double sq = -1;
        EXPECT(gemm_bf16_op_sq(2, 2, 2, (Bf16Op){OP_ROWS32, x, 2}, (Bf16Op){OP_PANELS, pan, 1}, c, 2, 0, NULL, NULL,
                               &sq) == -1 && sq == -1,
               "a refused product set the sum of squares to %g", sq);
    }
}

// q, k and v's gradients (40 rows of C each, one after another) written by
// one product (OC = 120), each marked; dw (OC,C) starts at random values
// (accumulate) or is marked unwritten (written).
static void check_marks(int sixteen, int written) {
    int N = 64, C = 48, OC = 120, h = OC / 3;
    size_t nw = (size_t)OC * C;
    float *x = randn((size_t)N * C, 1), *w = randn(nw, 1), *dy = randn((size_t)N * OC, 1), *dw = randn(nw, 1);
    uint16_t *d16 = calloc((size_t)N * OC, sizeof *d16);
    for (size_t i = 0; i < (size_t)N * OC; i++) d16[i] = f32_to_bf16(dy[i]);
    double s[3] = {-1, -1, -1};
    for (int t = 0; t < 3; t++) matmul_grad_sumsq(dw + (size_t)t * h * C, &s[t]);
    if (written) matmul_grad_fresh(dw);
    if (sixteen) linear_backward16(NULL, dw, d16, OC, x, w, N, C, OC, 0);
    else linear_backward(NULL, dw, NULL, dy, x, w, N, C, OC, 0);
    double want = squares64(dw, OC, C, C);
    const char *what = sixteen ? "linear_backward16" : "linear_backward";
    EXPECT(fabs(s[0] - want) <= 1e-12 * want && s[1] == 0 && s[2] == 0,
           "%s (written %d): the sums %.17g, %g, %g, float64 %.17g", what, written, s[0], s[1], s[2], want);
    // the marks were used up: a later product into the same gradient takes none
    s[0] = -1;
    linear_backward(NULL, dw, NULL, dy, x, w, N, C, OC, 0);
    EXPECT(s[0] == -1, "%s: a mark outlived its product", what);
    free(x); free(w); free(dy); free(dw); free(d16);
}

static void test_marks(void) {
    int prev = matmul_set_bf16(1);
    for (int written = 0; written < 2; written++) {
        check_marks(0, written);
        if (matmul_grad16()) check_marks(1, written);
    }
    matmul_set_bf16(prev);
}

static void on_unit(void) {
    RUN(test_gemm_sq);
    RUN(test_marks);
}

// In fp32 a weight gradient's product on kernels/gemm_pack (Intel's cores)
// or the own kernel (elsewhere, at few rows: matmul_fp32_sumsq) takes the
// sum, equal to a float64 pass over what it left and the same on 1 and 2
// threads; the others (OpenBLAS, oneDNN) take none and leave the sum as it
// was. Either way the mark is used up, and a clear drops a mark no product
// met.
static void check_fp32_sq(int N, int C, int OC) {
    int prev = matmul_set_bf16(0), saved = kernels_threads();
    float *x = randn((size_t)N * C, 1), *dy = randn((size_t)N * OC, 1), *dw = calloc((size_t)OC * C, sizeof *dw);
    double s[2] = {-1, -1};
    for (int t = 0; t < 2; t++) {
        kernels_set_threads(t + 1);
        matmul_grad_fresh(dw);   // written, not added to: both runs leave the same gradient
        matmul_grad_sumsq(dw, &s[t]);
        linear_backward(NULL, dw, NULL, dy, x, NULL, N, C, OC, 0);
    }
    kernels_set_threads(saved);
    if (matmul_fp32_sumsq(N, C, OC)) {
        double want = squares64(dw, OC, C, C);
        EXPECT(fabs(s[0] - want) <= 1e-12 * want, "N=%d C=%d OC=%d: the sum of squares %.17g, a float64 pass %.17g",
               N, C, OC, s[0], want);
        EXPECT(s[0] == s[1], "N=%d C=%d OC=%d: %.17g on 1 thread, %.17g on 2", N, C, OC, s[0], s[1]);
    } else
        EXPECT(s[0] == -1 && s[1] == -1, "N=%d C=%d OC=%d: an fp32 product that takes none set the sum to %g", N, C,
               OC, s[0]);
    matmul_set_bf16(prev);
    free(x); free(dy); free(dw);
}

static void test_fp32(void) {
    check_fp32_sq(64, 256, 300);    // threads split the tiles; a last block of output channels
    check_fp32_sq(1000, 768, 200);  // past the own kernel's rows: the BLAS or oneDNN where they run it
    int prev = matmul_set_bf16(0), N = 8, C = 16, OC = 24;
    float *x = randn((size_t)N * C, 1), *w = randn((size_t)OC * C, 1), *dy = randn((size_t)N * OC, 1);
    float *dw = randn((size_t)OC * C, 1);
    double s = -1;
    matmul_grad_sumsq(dw, &s);
    linear_backward(NULL, dw, NULL, dy, x, w, N, C, OC, 0);
    if (matmul_fp32_sumsq(N, C, OC)) {
        double want = squares64(dw, OC, C, C);
        EXPECT(fabs(s - want) <= 1e-12 * want, "the product's sum of squares %.17g, a float64 pass %.17g", s, want);
    } else
        EXPECT(s == -1, "an fp32 product that takes no sum set it to %g", s);
    s = -1;
    linear_backward(NULL, dw, NULL, dy, x, w, N, C, OC, 0);
    EXPECT(s == -1, "a used mark was used again (%g)", s);
    matmul_grad_sumsq(dw, &s);
    matmul_grad_sumsq_clear();
    matmul_set_bf16(1);
    linear_backward(NULL, dw, NULL, dy, x, w, N, C, OC, 0);
    EXPECT(s == -1, "a cleared mark was used (%g)", s);
    matmul_set_bf16(prev);
    free(x); free(w); free(dy); free(dw);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_fp32);
    if (!gemm_bf16_own()) {
        printf("     the bf16 kernel is not built in (no AVX512_BF16): no product takes a sum\n");
        return test_finish();
    }
    each_bf16_unit(on_unit);
    return test_finish();
}
