// Every kernel against a naive float64 reference (forward) and against
// central finite differences of that reference (backward), on awkward shapes.
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/dnnl.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/pointwise.h"
#include "kernels/rope.h"
#include "fd.h"
#include "ref.h"
#include "test.h"

#include <omp.h>

// ---- linear ----
typedef struct { int N, C, OC, bias; } LinCtx;
static void ref_linear(double *out, double **in, const void *vctx) {
    const LinCtx *c = vctx;
    for (int n = 0; n < c->N; n++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->bias ? in[2][o] : 0;
            for (int i = 0; i < c->C; i++) s += in[0][n * c->C + i] * in[1][o * c->C + i];
            out[n * c->OC + o] = s;
        }
}

static void check_linear(int N, int C, int OC, int bias) {
    LinCtx ctx = {N, C, OC, bias};
    float *x = fbuf(N * C), *w = fbuf(OC * C), *b = fbuf(OC), *y = fbuf(N * OC), *dy = fbuf(N * OC);
    float *dx = fbuf(N * C), *dw = fbuf(OC * C), *db = fbuf(OC);
    randn(x, N * C, 1); randn(w, OC * C, 0.5f); randn(b, OC, 1); randn(dy, N * OC, 1);
    double *in[3] = {to_d(x, N * C), to_d(w, OC * C), to_d(b, OC)};
    double *yr = calloc(N * OC + 1, sizeof(double)), *R = to_d(dy, N * OC);
    linear_forward(y, x, w, bias ? b : NULL, N, C, OC);
    ref_linear(yr, in, &ctx);
    double e = rel_err_fd(y, yr, N * OC, 1e-6);
    EXPECT(e < 1e-5, "linear fwd N=%d C=%d OC=%d rel err %.2e", N, C, OC, e);
    // dweight/dbias accumulate: start from a known value and subtract it.
    for (int i = 0; i < OC * C; i++) dw[i] = 1.0f;
    linear_backward(dx, dw, bias ? db : NULL, dy, x, w, N, C, OC, 0);
    for (int i = 0; i < OC * C; i++) dw[i] -= 1.0f;
    e = fd_check(dx, ref_linear, in, 0, N * C, R, N * OC, &ctx);
    EXPECT(e < 1e-4, "linear dinp rel err %.2e", e);
    e = fd_check(dw, ref_linear, in, 1, OC * C, R, N * OC, &ctx);
    EXPECT(e < 1e-4, "linear dweight rel err %.2e", e);
    if (bias) {
        e = fd_check(db, ref_linear, in, 2, OC, R, N * OC, &ctx);
        EXPECT(e < 1e-4, "linear dbias rel err %.2e", e);
    }
    free(x); free(w); free(b); free(y); free(dy); free(dx); free(dw); free(db);
    for (int i = 0; i < 3; i++) free(in[i]);
    free(yr); free(R);
}

static void test_linear(void) {
    check_linear(7, 13, 5, 1);
    check_linear(1, 1, 1, 1);
    check_linear(33, 17, 65, 0);
    check_linear(70, 64, 130, 1);
}

// ---- gemm (the own kernel for skinny products) ----
// C (R,NC) = A (R,K) · B (K,NC) [+ C] with row strides past the widths,
// against float64, on shapes that reach every tile width (32/48/64 columns),
// every partial row tile, partial column tiles, blocked and whole
// reductions; then 1 and 2 threads give the same bits.
static void check_gemm(int R, int NC, int K, int accumulate) {
    int lda = K + 3, ldb = NC + 5, ldc = NC + 2;
    float *A = fbuf((size_t)R * lda), *B = fbuf((size_t)K * ldb), *C = fbuf((size_t)R * ldc);
    float *C0 = fbuf((size_t)R * ldc);
    randn(A, (size_t)R * lda, 1); randn(B, (size_t)K * ldb, 1); randn(C0, (size_t)R * ldc, 1);
    memcpy(C, C0, (size_t)R * ldc * sizeof(float));
    gemm_nn(R, NC, K, A, lda, B, ldb, C, ldc, accumulate);
    double worst = 0, scale = sqrt((double)K) + 1;
    int pad_ok = 1;
    for (int i = 0; i < R; i++) {
        for (int j = 0; j < NC; j++) {
            double ref = accumulate ? C0[(size_t)i * ldc + j] : 0;
            for (int k = 0; k < K; k++) ref += (double)A[(size_t)i * lda + k] * B[(size_t)k * ldb + j];
            double e = fabs(C[(size_t)i * ldc + j] - ref) / scale;
            if (e > worst) worst = e;
        }
        for (int j = NC; j < ldc; j++) pad_ok &= C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
    }
    EXPECT(worst < 1e-5, "gemm R=%d NC=%d K=%d acc=%d err %.2e (relative to sqrt(K))", R, NC, K, accumulate, worst);
    EXPECT(pad_ok, "gemm R=%d NC=%d K=%d wrote past the row's NC columns", R, NC, K);
    free(A); free(B); free(C); free(C0);
}

static void test_gemm(void) {
    for (int R = 1; R <= 13; R++) check_gemm(R, 37, 19, R & 1);   // partial row tiles, 48-column tile
    int widths[] = {1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 100, 129, 200};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) check_gemm(25, widths[w], 40, 0);
    check_gemm(30, 70, 0, 0);    // an empty reduction: C = 0
    check_gemm(30, 70, 0, 1);    // ... or unchanged
    check_gemm(9, 1100, 300, 1); // the reduction in blocks (B over 1 MiB), and its tail
    check_gemm(70, 64, 5000, 0); // a narrow B, long whole reduction
    // threads: tiles split differently, the same sums
    int R = 100, NC = 300, K = 400;
    float *A = fbuf((size_t)R * K), *B = fbuf((size_t)K * NC), *c1 = fbuf((size_t)R * NC), *c2 = fbuf((size_t)R * NC);
    randn(A, (size_t)R * K, 1); randn(B, (size_t)K * NC, 1);
    int saved = kernels_threads();
    kernels_set_threads(1);
    gemm_nn(R, NC, K, A, K, B, NC, c1, NC, 0);
    kernels_set_threads(2);
    gemm_nn(R, NC, K, A, K, B, NC, c2, NC, 0);
    kernels_set_threads(saved);
    if (gemm_own())   // (CBLAS, without AVX-512, promises no such thing)
        EXPECT(memcmp(c1, c2, (size_t)R * NC * sizeof(float)) == 0, "gemm differs between 1 and 2 threads");
    free(A); free(B); free(c1); free(c2);
}

// transpose_add: every element moved, the bias added per source row, edges of 8×8 blocks included.
static void test_transpose(void) {
    int shapes[][2] = {{1, 1}, {8, 8}, {13, 29}, {64, 768}, {300, 17}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], C = shapes[s][1], lds = C + 1, ldd = R + 3;
        float *src = fbuf((size_t)R * lds), *dst = fbuf((size_t)C * ldd), *bias = fbuf(R);
        randn(src, (size_t)R * lds, 1); randn(bias, R, 1);
        for (int b = 0; b < 2; b++) {
            transpose_add(dst, ldd, src, lds, b ? bias : NULL, R, C);
            int ok = 1;
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++) ok &= dst[(size_t)c * ldd + r] == src[(size_t)r * lds + c] + (b ? bias[r] : 0.0f);
            EXPECT(ok, "transpose_add R=%d C=%d bias=%d", R, C, b);
        }
        free(src); free(dst); free(bias);
    }
}

// linear layers at the row counts where the own kernel and OpenBLAS take turns, against float64.
static void test_linear_rows(void) {
    int rows[] = {2, 64, 255, 256, 257, 300};
    int C = 40, OC = 1600;   // over one 1536-channel block of the forward
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int N = rows[r];
        float *x = fbuf((size_t)N * C), *w = fbuf((size_t)OC * C), *b = fbuf(OC), *y = fbuf((size_t)N * OC);
        float *dy = fbuf((size_t)N * OC), *dx = fbuf((size_t)N * C), *dw = fbuf((size_t)OC * C);
        randn(x, (size_t)N * C, 1); randn(w, (size_t)OC * C, 1); randn(b, OC, 1); randn(dy, (size_t)N * OC, 1);
        linear_forward(y, x, w, b, N, C, OC);
        linear_backward(dx, dw, NULL, dy, x, w, N, C, OC, 0);
        double ey = 0, ex = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double ref = b[o];
                for (int c = 0; c < C; c++) ref += (double)x[(size_t)n * C + c] * w[(size_t)o * C + c];
                ey = fmax(ey, fabs(y[(size_t)n * OC + o] - ref));
            }
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double ref = 0;
                for (int o = 0; o < OC; o++) ref += (double)dy[(size_t)n * OC + o] * w[(size_t)o * C + c];
                ex = fmax(ex, fabs(dx[(size_t)n * C + c] - ref) / sqrt((double)OC));
            }
        EXPECT(ey < 1e-5 * sqrt((double)C) && ex < 1e-5, "linear N=%d: fwd err %.2e, dinp err %.2e", N, ey, ex);
        float *dx2 = fbuf((size_t)N * C);   // no weight gradient asked for: the same input gradient
        linear_backward(dx2, NULL, NULL, dy, x, w, N, C, OC, 0);
        EXPECT(memcmp(dx, dx2, (size_t)N * C * sizeof(float)) == 0, "linear N=%d: dinp differs without dweight", N);
        free(dx2);
        free(x); free(w); free(b); free(y); free(dy); free(dx); free(dw);
    }
}

// A weight gradient marked unwritten (matmul_grad_fresh) is written by its
// next product, whatever it held (NaN here), with the bits of adding to
// zero; the mark is used up, so the next product adds. At 64 rows (own
// kernel; gemm_pack on Intel's cores) and 300 (BLAS, oneDNN or gemm_pack),
// fp32 and bf16.
static void test_grad_fresh(void) {
    int C = 40, OC = 70, rows[] = {64, 300};
    for (int ri = 0; ri < 2; ri++)
        for (int bf = 0; bf < 2; bf++) {
            int N = rows[ri], prev = matmul_set_bf16(bf);
            float *x = fbuf((size_t)N * C), *dy = fbuf((size_t)N * OC), *w = fbuf((size_t)OC * C);
            float *d0 = fbuf((size_t)OC * C), *d1 = fbuf((size_t)OC * C);
            randn(x, (size_t)N * C, 1); randn(dy, (size_t)N * OC, 1); randn(w, (size_t)OC * C, 1);
            for (size_t i = 0; i < (size_t)OC * C; i++) d0[i] = 0.0f, d1[i] = NAN;
            linear_backward(NULL, d0, NULL, dy, x, w, N, C, OC, 0);
            matmul_grad_fresh(d1);
            linear_backward(NULL, d1, NULL, dy, x, w, N, C, OC, 0);
            EXPECT(!memcmp(d0, d1, (size_t)OC * C * 4) && matmul_grads_unwritten() == 0,
                   "N=%d %s: a fresh weight gradient is not the sum from zero", N, bf ? "bf16" : "fp32");
            linear_backward(NULL, d0, NULL, dy, x, w, N, C, OC, 0);
            linear_backward(NULL, d1, NULL, dy, x, w, N, C, OC, 0);
            EXPECT(!memcmp(d0, d1, (size_t)OC * C * 4), "N=%d %s: the product after a fresh one did not add", N,
                   bf ? "bf16" : "fp32");
            matmul_set_bf16(prev);
            free(x); free(dy); free(w); free(d0); free(d1);
        }
}

// ---- oneDNN's fp32 products (kernels/dnnl) ----
// C (M,NC) (+)= A · B [+ bias] at the three stride patterns the linear
// layers use (B read by columns: the forward; both by rows: the input
// gradient; A read by columns: the weight gradient), against float64; a
// repeat call gives the same bits.
static void check_dnnl(int M, int NC, int K, int pattern, int accumulate, int with_bias) {
    long ars = pattern == 2 ? 1 : K, acs = pattern == 2 ? M : 1, brs = pattern == 0 ? 1 : NC, bcs = pattern == 0 ? K : 1;
    int ldc = NC + 3;
    float *A = fbuf((size_t)M * K), *B = fbuf((size_t)K * NC), *C = fbuf((size_t)M * ldc), *C0 = fbuf((size_t)M * ldc);
    float *C2 = fbuf((size_t)M * ldc), *bias = fbuf((size_t)NC);
    randn(A, (size_t)M * K, 1); randn(B, (size_t)K * NC, 1); randn(C0, (size_t)M * ldc, 1); randn(bias, NC, 2);
    const float *b = with_bias ? bias : NULL;
    memcpy(C, C0, (size_t)M * ldc * 4);
    memcpy(C2, C0, (size_t)M * ldc * 4);
    int rc = dnnl_gemm_f32(M, NC, K, A, ars, acs, B, brs, bcs, C, ldc, accumulate, b);
    EXPECT(rc == 0, "dnnl_gemm_f32 M=%d NC=%d K=%d pattern %d refused", M, NC, K, pattern);
    double worst = 0;
    int pad_ok = 1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < NC; j++) {
            double ref = (accumulate ? C0[(size_t)i * ldc + j] : 0) + (b ? b[j] : 0);
            for (int k = 0; k < K; k++) ref += (double)A[i * ars + k * acs] * B[k * brs + j * bcs];
            worst = fmax(worst, fabs(C[(size_t)i * ldc + j] - ref) / (sqrt((double)K) + 1));
        }
        for (int j = NC; j < ldc; j++) pad_ok &= C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
    }
    EXPECT(worst < 1e-5 && pad_ok, "dnnl_gemm_f32 M=%d NC=%d K=%d pattern %d acc %d bias %d: err %.2e, pad %s", M, NC,
           K, pattern, accumulate, with_bias, worst, pad_ok ? "kept" : "written");
    dnnl_gemm_f32(M, NC, K, A, ars, acs, B, brs, bcs, C2, ldc, accumulate, b);
    EXPECT(!memcmp(C, C2, (size_t)M * ldc * 4), "dnnl_gemm_f32 M=%d NC=%d K=%d: a repeat differs", M, NC, K);
    free(A); free(B); free(C); free(C0); free(C2); free(bias);
}

static void test_dnnl(void) {
    if (!dnnl_own()) {
        printf("     oneDNN is not built in: its products are not used\n");
        return;
    }
    int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {256, 300, 130}, {70, 1600, 40}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int pattern = 0; pattern < 3; pattern++)
            for (int acc = 0; acc < 4; acc++)   // accumulate, then bias, each without and with
                check_dnnl(shapes[s][0], shapes[s][1], shapes[s][2], pattern, acc & 1, acc >> 1);
}

// ---- layernorm ----
typedef struct { int N, C; } NCtx;
static void ref_layernorm(double *out, double **in, const void *vctx) {
    const NCtx *c = vctx;
    for (int n = 0; n < c->N; n++) {
        const double *x = in[0] + n * c->C;
        double m = 0, v = 0;
        for (int i = 0; i < c->C; i++) m += x[i];
        m /= c->C;
        for (int i = 0; i < c->C; i++) v += (x[i] - m) * (x[i] - m);
        v /= c->C;
        double r = 1 / sqrt(v + 1e-5);
        for (int i = 0; i < c->C; i++) out[n * c->C + i] = (x[i] - m) * r * in[1][i] + in[2][i];
    }
}

static void check_layernorm(int N, int C) {
    NCtx ctx = {N, C};
    float *x = fbuf(N * C), *w = fbuf(C), *b = fbuf(C), *y = fbuf(N * C), *dy = fbuf(N * C);
    float *mean = fbuf(N), *rstd = fbuf(N), *dx = fbuf(N * C), *dw = fbuf(C), *db = fbuf(C);
    randn(x, N * C, 2); randn(w, C, 1); randn(b, C, 1); randn(dy, N * C, 1);
    for (int i = 0; i < N * C; i++) x[i] += 0.5f;
    double *in[3] = {to_d(x, N * C), to_d(w, C), to_d(b, C)};
    double *yr = calloc(N * C + 1, sizeof(double)), *R = to_d(dy, N * C);
    layernorm_forward(y, mean, rstd, x, w, b, N, C);
    ref_layernorm(yr, in, &ctx);
    double e = rel_err_fd(y, yr, N * C, 1e-6);
    EXPECT(e < 1e-5, "layernorm fwd N=%d C=%d rel err %.2e", N, C, e);
    layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
    e = fd_check(dx, ref_layernorm, in, 0, N * C, R, N * C, &ctx);
    EXPECT(e < 1e-4, "layernorm dinp N=%d C=%d rel err %.2e", N, C, e);
    e = fd_check(dw, ref_layernorm, in, 1, C, R, N * C, &ctx);
    EXPECT(e < 1e-4, "layernorm dweight rel err %.2e", e);
    e = fd_check(db, ref_layernorm, in, 2, C, R, N * C, &ctx);
    EXPECT(e < 1e-4, "layernorm dbias rel err %.2e", e);
    free(x); free(w); free(b); free(y); free(dy); free(mean); free(rstd); free(dx); free(dw); free(db);
    for (int i = 0; i < 3; i++) free(in[i]);
    free(yr); free(R);
}

static void test_layernorm(void) {
    check_layernorm(5, 7);
    check_layernorm(1, 3);
    check_layernorm(13, 130);
    check_layernorm(600, 9);   // 19 chunks of the parameters' sums (kernels/chunks)
}

// ---- rmsnorm ----
static void ref_rmsnorm(double *out, double **in, const void *vctx) {
    const NCtx *c = vctx;
    ref_rmsnorm_d(out, in[0], in[1], c->N, c->C, 1e-6);
}

static void check_rmsnorm(int N, int C) {
    NCtx ctx = {N, C};
    float *x = fbuf(N * C), *w = fbuf(C), *y = fbuf(N * C), *dy = fbuf(N * C), *rstd = fbuf(N), *dx = fbuf(N * C);
    float *dw = fbuf(C);
    randn(x, N * C, 2); randn(w, C, 1); randn(dy, N * C, 1);
    double *in[2] = {to_d(x, N * C), to_d(w, C)}, *yr = calloc(N * C + 1, sizeof(double)), *R = to_d(dy, N * C);
    rmsnorm_forward(y, rstd, x, w, N, C, 1e-6f);
    ref_rmsnorm(yr, in, &ctx);
    double e = rel_err_fd(y, yr, N * C, 1e-6);
    EXPECT(e < 1e-5, "rmsnorm fwd N=%d C=%d rel err %.2e", N, C, e);
    for (int i = 0; i < N * C; i++) dx[i] = 0.25f;   // adds to what is there
    rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
    for (int i = 0; i < N * C; i++) dx[i] -= 0.25f;
    e = fd_check(dx, ref_rmsnorm, in, 0, N * C, R, N * C, &ctx);
    EXPECT(e < 1e-4, "rmsnorm dinp N=%d C=%d rel err %.2e", N, C, e);
    e = fd_check(dw, ref_rmsnorm, in, 1, C, R, N * C, &ctx);
    EXPECT(e < 1e-4, "rmsnorm dweight rel err %.2e", e);
    free(x); free(w); free(y); free(dy); free(rstd); free(dx); free(dw);
    free(in[0]); free(in[1]); free(yr); free(R);
}

static void test_rmsnorm(void) {
    check_rmsnorm(5, 7);
    check_rmsnorm(1, 3);
    check_rmsnorm(13, 130);
    check_rmsnorm(600, 9);
}

// ---- swiglu ----
static void ref_swiglu(double *out, double **in, const void *vctx) {
    const NCtx *c = vctx;
    ref_swiglu_d(out, in[0], c->N, c->C);
}

static void test_swiglu(void) {
    int N = 7, F = 37;
    NCtx ctx = {N, F};
    float *gu = fbuf(N * 2 * F), *y = fbuf(N * F), *dy = fbuf(N * F), *dgu = fbuf(N * 2 * F);
    randn(gu, N * 2 * F, 3); randn(dy, N * F, 1);
    gu[0] = 30; gu[1] = -30; gu[2] = 0;
    double *in[1] = {to_d(gu, N * 2 * F)}, *yr = calloc(N * F, sizeof(double)), *R = to_d(dy, N * F);
    swiglu_forward(y, gu, N, F);
    ref_swiglu(yr, in, &ctx);
    double e = rel_err_fd(y, yr, N * F, 1e-6);
    EXPECT(e < 1e-5, "swiglu fwd rel err %.2e", e);
    swiglu_backward(dgu, gu, dy, N, F);
    e = fd_check(dgu, ref_swiglu, in, 0, N * 2 * F, R, N * F, &ctx);
    EXPECT(e < 1e-4, "swiglu backward rel err %.2e", e);
    free(gu); free(y); free(dy); free(dgu); free(in[0]); free(yr); free(R);
}

// ---- rope ----
typedef struct { int B, T, heads, HS, ld; double theta; } RopeCtx;
static void ref_rope(double *out, double **in, const void *vctx) {
    const RopeCtx *c = vctx;
    size_t n = (size_t)c->B * c->T * c->ld;
    memcpy(out, in[0], n * sizeof *out);
    ref_rope_d(out, c->B * c->T, c->T, c->heads, c->HS, c->ld, c->theta);
}

// q and k heads rotated inside rows that also hold v (left alone), at
// positions up to 300 with LLaMA's θ and a small one.
static void check_rope(int B, int T, int heads, int HS, int ld, double theta) {
    RopeCtx ctx = {B, T, heads, HS, ld, theta};
    size_t n = (size_t)B * T * ld;
    float *x = fbuf(n), *y = fbuf(n), *dy = fbuf(n);
    randn(x, n, 1); randn(dy, n, 1);
    memcpy(y, x, n * sizeof *x);
    double *in[1] = {to_d(x, n)}, *yr = calloc(n, sizeof(double)), *R = to_d(dy, n);
    rope_forward(y, NULL, B, T, 0, heads, HS, ld, (float)theta);
    ref_rope(yr, in, &ctx);
    double e = rel_err_fd(y, yr, n, 1e-6);
    EXPECT(e < 1e-5, "rope fwd T=%d HS=%d theta %g rel err %.2e", T, HS, theta, e);
    rope_backward(dy, NULL, B, T, 0, heads, HS, ld, (float)theta);
    e = fd_check(dy, ref_rope, in, 0, n, R, n, &ctx);
    EXPECT(e < 1e-4, "rope backward T=%d HS=%d rel err %.2e", T, HS, e);
    free(x); free(y); free(dy); free(in[0]); free(yr); free(R);
}

static void test_rope(void) {
    check_rope(2, 5, 3, 4, 16, 10000);
    check_rope(1, 300, 2, 8, 20, 10000);
    check_rope(1, 17, 1, 6, 6, 100);
    // a pass of incremental decoding from position pos0 turns its rows as the
    // whole sequence's rows pos0 .. are turned
    int T = 40, pos0 = 29, heads = 3, HS = 8, ld = 30;
    float *x = fbuf((size_t)T * ld), *y = fbuf((size_t)T * ld);
    randn(x, (size_t)T * ld, 2);
    memcpy(y, x + (size_t)pos0 * ld, (size_t)(T - pos0) * ld * sizeof *x);
    rope_forward(x, NULL, 1, T, 0, heads, HS, ld, 10000.0f);
    rope_forward(y, NULL, 1, T - pos0, pos0, heads, HS, ld, 10000.0f);
    EXPECT(!memcmp(x + (size_t)pos0 * ld, y, (size_t)(T - pos0) * ld * sizeof *x), "rope from position %d", pos0);
    free(x); free(y);
}

// ---- gelu ----
static void ref_gelu(double *out, double **in, const void *vctx) {
    const NCtx *c = vctx;
    for (int i = 0; i < c->N; i++) {
        double x = in[0][i];
        // 0.5·x·(1 + tanh u) written as x·sigmoid(2u): equal, but without the
        // cancellation of 1 + tanh u for very negative u in double.
        double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
        out[i] = x / (1 + exp(-2 * u));
    }
}

static void test_gelu(void) {
    int n = 1003;
    NCtx ctx = {n, 1};
    float *x = fbuf(n), *y = fbuf(n), *dy = fbuf(n), *dx = fbuf(n);
    randn(x, n, 3); randn(dy, n, 1);
    x[0] = 0; x[1] = 1e-4f; x[2] = -1e-4f; x[3] = 20; x[4] = -20; x[5] = 5.5f;
    double *in[1] = {to_d(x, n)}, *yr = calloc(n, sizeof(double)), *R = to_d(dy, n);
    gelu_forward(y, x, n);
    ref_gelu(yr, in, &ctx);
    double worst = 0;
    for (int i = 0; i < n; i++) {   // elementwise relative error (values span many magnitudes)
        double e = fabs(y[i] - yr[i]) / (fabs(yr[i]) + 1e-30);
        if (fabs(yr[i]) > 1e-30 && e > worst) worst = e;
        if (fabs(yr[i]) <= 1e-30 && fabs(y[i]) > 1e-30) worst = INFINITY;
    }
    EXPECT(worst < 1e-5, "gelu fwd elementwise rel err %.2e", worst);
    gelu_backward(dx, x, dy, n);
    double e = fd_check(dx, ref_gelu, in, 0, n, R, n, &ctx);
    EXPECT(e < 1e-4, "gelu backward rel err %.2e", e);
    gelu_backward(dy, x, dy, n);   // in place
    EXPECT(memcmp(dx, dy, n * sizeof(float)) == 0, "gelu backward in place differs");
    free(x); free(y); free(dy); free(dx); free(in[0]); free(yr); free(R);
}

static void test_residual(void) {
    int N = 5, C = 9;
    float *x = fbuf(N * C), *y = fbuf(N * C), *b = fbuf(C), *o = fbuf(N * C);
    randn(x, N * C, 1); randn(y, N * C, 1); randn(b, C, 1);
    residual_forward(o, x, y, b, N, C);
    int bad = 0;
    for (int i = 0; i < N * C; i++) bad += o[i] != x[i] + y[i] + b[i % C];
    EXPECT(bad == 0, "%d wrong sums", bad);
    residual_forward(x, x, y, NULL, N, C);   // aliasing out == x
    bad = 0;
    for (int i = 0; i < N * C; i++) bad += fabsf(x[i] + b[i % C] - o[i]) > 1e-6f;
    EXPECT(bad == 0, "%d wrong aliased sums", bad);
    free(x); free(y); free(b); free(o);
}

// ---- attention ----
typedef struct { int B, T, NH, NKV, HS; } AttCtx;
static void ref_attention(double *out, double **in, const void *vctx) {
    const AttCtx *c = vctx;
    ref_attention_d(out, in[0], c->B, c->T, c->NH, c->NKV, c->HS);
}

static void check_attention(int B, int T, int NH, int NKV, int HS) {
    AttCtx ctx = {B, T, NH, NKV, HS};
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS;
    float *qkv = fbuf(nq), *out = fbuf(no), *lse = fbuf(B * NH * T), *dout = fbuf(no), *dqkv = fbuf(nq);
    float *scratch = fbuf(attention_scratch_floats(T, omp_get_max_threads()));
    randn(qkv, nq, 1); randn(dout, no, 1);
    for (size_t i = 0; i < nq; i++) dqkv[i] = 123.0f;    // must be overwritten
    double *in[1] = {to_d(qkv, nq)}, *ref = calloc(no, sizeof(double)), *R = to_d(dout, no);
    attention_forward(out, lse, qkv, NULL, scratch, B, T, NH, NKV, HS);
    ref_attention(ref, in, &ctx);
    double e = rel_err_fd(out, ref, no, 1e-6);
    EXPECT(e < 1e-5, "attention fwd B=%d T=%d NH=%d NKV=%d HS=%d rel err %.2e", B, T, NH, NKV, HS, e);
    attention_backward(dqkv, dout, qkv, NULL, out, lse, scratch, B, T, NH, NKV, HS);
    e = fd_check(dqkv, ref_attention, in, 0, nq, R, no, &ctx);
    EXPECT(e < 1e-4, "attention backward B=%d T=%d NH=%d NKV=%d HS=%d rel err %.2e", B, T, NH, NKV, HS, e);
    free(qkv); free(out); free(lse); free(dout); free(dqkv); free(scratch);
    free(in[0]); free(ref); free(R);
}

static void test_attention(void) {
    check_attention(2, 9, 3, 3, 4);
    check_attention(1, 1, 1, 1, 4);
    check_attention(1, 70, 1, 1, 5);      // crosses a query block, odd head size
    check_attention(2, 131, 2, 2, 4);     // three blocks, last partial
    check_attention(2, 9, 4, 2, 3);       // grouped-query: two query heads per key/value head
    check_attention(1, 70, 6, 1, 4);      // multi-query, across a block
    // incremental decoding: positions pos.. attending to the cached keys and
    // values give the rows of the attention over the whole sequence
    int cases[][5] = {{70, 60, 4, 2, 8}, {9, 0, 3, 3, 5}, {33, 32, 6, 1, 4}};   // T, pos, NH, NKV, HS
    for (int k = 0; k < 3; k++) {
        int T = cases[k][0], pos = cases[k][1], NH = cases[k][2], NKV = cases[k][3], HS = cases[k][4];
        int ld = (NH + 2 * NKV) * HS, C = NH * HS, KV = NKV * HS;
        float *qkv = fbuf((size_t)T * ld), *out = fbuf((size_t)T * C), *lse = fbuf((size_t)NH * T);
        float *kc = fbuf((size_t)T * KV), *vc = fbuf((size_t)T * KV), *dec = fbuf((size_t)T * C);
        float *scratch = fbuf(attention_scratch_floats(T, omp_get_max_threads()));
        randn(qkv, (size_t)T * ld, 3 + k);
        attention_forward(out, lse, qkv, NULL, scratch, 1, T, NH, NKV, HS);
        for (int t = 0; t < T; t++) {
            memcpy(kc + (size_t)t * KV, qkv + (size_t)t * ld + C, (size_t)KV * sizeof(float));
            memcpy(vc + (size_t)t * KV, qkv + (size_t)t * ld + C + KV, (size_t)KV * sizeof(float));
        }
        attention_decode(dec, qkv + (size_t)pos * ld, ld, kc, vc, NULL, T - pos, pos, NH, NKV, HS);
        double worst = 0;
        for (size_t i = 0; i < (size_t)(T - pos) * C; i++) {
            double d = fabs(dec[i] - out[(size_t)pos * C + i]);
            worst = d > worst ? d : worst;
        }
        EXPECT(worst < 1e-4, "attention_decode T=%d pos=%d NH=%d NKV=%d HS=%d: max diff %.2e", T, pos, NH, NKV, HS, worst);
        free(qkv); free(out); free(lse); free(kc); free(vc); free(dec); free(scratch);
    }
}

// Threads must not change results of the kernels with reductions: the
// norms' backward passes and the bias gradient's column sums, in 2 chunks
// of rows, in 32 and in the most, 64 (kernels/chunks), on 1, 2 and 3 threads.
static void thread_invariance(int N, int C) {
    size_t nc = (size_t)N * C;
    float *x = fbuf(nc), *dy = fbuf(nc), *w = fbuf(C), *mean = fbuf(N), *rstd = fbuf(N), *y = fbuf(nc);
    float *dx[3], *dw[3], *db[3], *rx[3], *rw[3], *cs[3];
    randn(x, nc, 1); randn(dy, nc, 1); randn(w, C, 1);
    int saved = kernels_threads();
    kernels_set_threads(1);
    layernorm_forward(y, mean, rstd, x, w, w, N, C);
    for (int t = 0; t < 3; t++) {
        dx[t] = fbuf(nc), dw[t] = fbuf(C), db[t] = fbuf(C), rx[t] = fbuf(nc), rw[t] = fbuf(C), cs[t] = fbuf(C);
        kernels_set_threads(t + 1);
        layernorm_backward(dx[t], dw[t], db[t], dy, x, w, mean, rstd, N, C);
        rmsnorm_backward(rx[t], rw[t], dy, x, w, rstd, N, C);
        colsum_add(cs[t], dy, N, C);
    }
    kernels_set_threads(saved);
    for (int t = 1; t < 3; t++) {
        EXPECT(memcmp(dw[0], dw[t], C * 4) == 0 && memcmp(db[0], db[t], C * 4) == 0 &&
                   memcmp(dx[0], dx[t], nc * 4) == 0,
               "layernorm backward N=%d differs between 1 and %d threads", N, t + 1);
        EXPECT(memcmp(rw[0], rw[t], C * 4) == 0 && memcmp(rx[0], rx[t], nc * 4) == 0,
               "rmsnorm backward N=%d differs between 1 and %d threads", N, t + 1);
        EXPECT(memcmp(cs[0], cs[t], C * 4) == 0, "colsum_add N=%d differs between 1 and %d threads", N, t + 1);
    }
    free(x); free(dy); free(w); free(mean); free(rstd); free(y);
    for (int t = 0; t < 3; t++) free(dx[t]), free(dw[t]), free(db[t]), free(rx[t]), free(rw[t]), free(cs[t]);
}

static void test_thread_invariance(void) {
    thread_invariance(37, 130);
    thread_invariance(1000, 130);
    thread_invariance(2500, 70);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_linear);
    RUN(test_gemm);
    RUN(test_transpose);
    RUN(test_linear_rows);
    RUN(test_dnnl);
    RUN(test_grad_fresh);
    RUN(test_layernorm);
    RUN(test_rmsnorm);
    RUN(test_swiglu);
    RUN(test_rope);
    RUN(test_gelu);
    RUN(test_residual);
    RUN(test_attention);
    RUN(test_thread_invariance);
    return test_finish();
}
