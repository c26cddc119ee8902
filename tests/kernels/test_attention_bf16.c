// The attention on the bf16 units (kernels/attention_bf16) against the fp32
// kernel on the same bf16 values, on each unit the CPU has: every block
// edge, odd sizes, grouped and multi-query heads, the thread count, and q,
// k and v read from a bound 16-bit store alone (and widened from it by the
// fp32 kernel).
#include <math.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "test.h"
#include "units.h"

// ||a − b|| / ||b||
static double norm_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return sqrt(d / (r + 1e-300));
}

// Under bf16 the attention's products run on the bf16 units: its output and
// gradients against the fp32 kernel's on the same bf16 values (within what
// bf16 probabilities and score gradients allow), every input gradient
// written, the same bits for 1 and 2 threads, and the same bits again with
// q, k and v in a bound 16-bit store alone (their floats NaN).
static void check_attention_bf16(int B, int T, int NH, int NKV, int HS) {
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS;
    float *qkv = randn(nq, 1), *dout = randn(no, 1), *nan = malloc(nq * sizeof *nan);
    uint16_t *qkv16 = malloc(nq * sizeof *qkv16);
    for (size_t i = 0; i < nq; i++) qkv16[i] = f32_to_bf16(qkv[i]), qkv[i] = bf16_to_f32(qkv16[i]), nan[i] = NAN;
    float *o[4], *l[4], *d[4];
    float *scratch = calloc(attention_scratch_floats(T, 2), sizeof *scratch);
    for (int r = 0; r < 4; r++) {   // fp32; bf16 on 2 threads; bf16 on 1; bf16 from the store
        o[r] = calloc(no, sizeof **o), l[r] = calloc((size_t)B * NH * T, sizeof **l), d[r] = malloc(nq * sizeof **d);
        for (size_t i = 0; i < nq; i++) d[r][i] = 123.0f;
        kernels_set_threads(r == 2 ? 1 : 2);
        int prev = matmul_set_bf16(r > 0);
        const float *in = r == 3 ? nan : qkv;
        if (r == 3) matmul_bind_input16_only(nan, qkv16, nq);
        attention_forward(o[r], l[r], in, NULL, scratch, B, T, NH, NKV, HS);
        attention_backward(d[r], dout, in, NULL, o[r], l[r], scratch, B, T, NH, NKV, HS);
        matmul_unbind_inputs16();
        matmul_set_bf16(prev);
    }
    kernels_set_threads(2);
    double eo = norm_err(o[1], o[0], no), el = norm_err(l[1], l[0], (size_t)B * NH * T), ed = norm_err(d[1], d[0], nq);
    EXPECT(eo < 5e-3 && el < 1e-6 && ed < 1e-2, "attention bf16 B=%d T=%d NH=%d NKV=%d HS=%d: out %.2e, lse %.2e, "
           "dqkv %.2e against fp32", B, T, NH, NKV, HS, eo, el, ed);
    int written = 1;
    for (size_t i = 0; i < nq; i++) written &= d[1][i] != 123.0f;
    EXPECT(written, "attention bf16 B=%d T=%d: an input gradient not written", B, T);
    EXPECT(!memcmp(o[1], o[2], no * 4) && !memcmp(l[1], l[2], (size_t)B * NH * T * 4) && !memcmp(d[1], d[2], nq * 4),
           "attention bf16 B=%d T=%d NH=%d NKV=%d HS=%d differs between 1 and 2 threads", B, T, NH, NKV, HS);
    EXPECT(!memcmp(o[1], o[3], no * 4) && !memcmp(l[1], l[3], (size_t)B * NH * T * 4) && !memcmp(d[1], d[3], nq * 4),
           "attention bf16 B=%d T=%d NH=%d NKV=%d HS=%d from the bound 16-bit store differs", B, T, NH, NKV, HS);
    for (int r = 0; r < 4; r++) free(o[r]), free(l[r]), free(d[r]);
    free(qkv); free(qkv16); free(nan); free(dout); free(scratch);
}

static void test_attention_bf16(void) {
    check_attention_bf16(2, 9, 3, 3, 4);
    check_attention_bf16(1, 70, 1, 1, 5);      // crosses a query block, odd head size
    check_attention_bf16(2, 131, 2, 2, 4);     // three blocks, last partial, odd T
    check_attention_bf16(2, 9, 4, 2, 3);       // grouped-query
    check_attention_bf16(1, 70, 6, 1, 4);      // multi-query, across a block
    check_attention_bf16(2, 128, 2, 2, 64);    // a model's head size
}

// The fp32 kernel (bf16 off, or no bf16 units) on q, k and v held in a
// bound 16-bit store alone widens the store: the bits of the same values
// as floats.
static void test_attention_widened(void) {
    int B = 2, T = 70, NH = 4, NKV = 2, HS = 8;
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    float *qkv = randn(nq, 1), *dout = randn(no, 1), *nan = malloc(nq * sizeof *nan);
    uint16_t *qkv16 = malloc(nq * sizeof *qkv16);
    for (size_t i = 0; i < nq; i++) qkv16[i] = f32_to_bf16(qkv[i]), qkv[i] = bf16_to_f32(qkv16[i]), nan[i] = NAN;
    float *scratch = calloc(attention_scratch_floats(T, 2), sizeof *scratch), *o[2], *l[2], *d[2];
    int prev = matmul_set_bf16(0);
    for (int r = 0; r < 2; r++) {
        o[r] = calloc(no, sizeof **o), l[r] = calloc(nl, sizeof **l), d[r] = calloc(nq, sizeof **d);
        if (r) matmul_bind_input16_only(nan, qkv16, nq);
        attention_forward(o[r], l[r], r ? nan : qkv, NULL, scratch, B, T, NH, NKV, HS);
        attention_backward(d[r], dout, r ? nan : qkv, NULL, o[r], l[r], scratch, B, T, NH, NKV, HS);
        matmul_unbind_inputs16();
    }
    matmul_set_bf16(prev);
    EXPECT(!memcmp(o[0], o[1], no * 4) && !memcmp(l[0], l[1], nl * 4) && !memcmp(d[0], d[1], nq * 4),
           "fp32 attention from a bound 16-bit store: not the bits of its values as floats");
    for (int r = 0; r < 2; r++) free(o[r]), free(l[r]), free(d[r]);
    free(qkv); free(qkv16); free(nan); free(dout); free(scratch);
}

static void on_unit(void) { RUN(test_attention_bf16); }

int main(void) {
    kernels_set_threads(2);
    RUN(test_attention_widened);
    if (!gemm_bf16_own()) {
        printf("     the bf16 kernel is not built in (no AVX512_BF16): attention multiplies in fp32\n");
        return test_finish();
    }
    each_bf16_unit(on_unit);
    return test_finish();
}
