// Document masking in the kernels (`train --doc-mask`): attention whose
// positions see only their own document's keys, forward against a float64
// reference and backward against its finite differences; each document of
// a packed row against the same document attended alone; the bf16 blocks
// against the fp32 ones; the decoding path; the rotary angles and the
// learned positions by position in the document; model/doc's starts.
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"
#include "kernels/threads.h"
#include "model/doc.h"
#include "ref.h"
#include "test.h"

#include <omp.h>

static uint64_t draw_stream = 1;

static void randn(float *x, size_t n, float std) {
    uint64_t s = draw_stream++;
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * rng_normal(11, s, i));
}
static double *to_d(const float *x, size_t n) {
    double *d = malloc(n * sizeof *d + 1);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float *fbuf(size_t n) { return calloc(n + 1, sizeof(float)); }

// ---- the float64 reference and its finite differences ----
typedef struct { int B, T, NH, NKV, HS; const int *start; } AttCtx;

// out (B,T,NH·HS): position t of row b attends to keys start[b·T+t] .. t.
static void ref_attention_doc(double *out, double **in, const void *vctx) {
    const AttCtx *c = vctx;
    const double *qkv = in[0];
    int T = c->T, NH = c->NH, NKV = c->NKV, HS = c->HS, C = NH * HS, ld = (NH + 2 * NKV) * HS;
    double *p = malloc((size_t)T * sizeof *p);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                int g = h / (NH / NKV), j0 = c->start[(size_t)b * T + t];
                const double *q = qkv + ((size_t)b * T + t) * ld + h * HS;
                double m = -INFINITY, s = 0;
                for (int j = j0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * ld + C + g * HS;
                    double d = 0;
                    for (int i = 0; i < HS; i++) d += q[i] * k[i];
                    p[j] = d / sqrt(HS);
                    if (p[j] > m) m = p[j];
                }
                for (int j = j0; j <= t; j++) { p[j] = exp(p[j] - m); s += p[j]; }
                double *o = out + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) {
                    double a = 0;
                    for (int j = j0; j <= t; j++) a += p[j] / s * qkv[((size_t)b * T + j) * ld + C + (NKV + g) * HS + i];
                    o[i] = a;
                }
            }
    free(p);
}

static double fd_check(const float *g, const double *R, double **in, size_t n, size_t nout, const AttCtx *c) {
    double *fd = malloc(n * sizeof *fd + 1), *out = calloc(nout + 1, sizeof *out);
    for (size_t i = 0; i < n; i++) {
        double x = in[0][i], h = 1e-6 * (fabs(x) > 1 ? fabs(x) : 1), l[2];
        for (int k = 0; k < 2; k++) {
            in[0][i] = k ? x - h : x + h;
            ref_attention_doc(out, in, c);
            l[k] = 0;
            for (size_t j = 0; j < nout; j++) l[k] += out[j] * R[j];
        }
        in[0][i] = x;
        fd[i] = (l[0] - l[1]) / (2 * h);
    }
    double e = rel_err_fd(g, fd, n, 1e-6);
    free(fd); free(out);
    return e;
}

// Token rows with the separator at the given row positions (every row the same).
static int *rows_with(int B, int T, int sep, const int *at, int nat, int *start, int *pos) {
    int *tok = malloc((size_t)B * T * sizeof *tok);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) tok[(size_t)b * T + t] = 1 + (b * 7 + t) % 5;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < nat; k++) tok[(size_t)b * T + (at[k] + b) % T] = sep;
    doc_bounds(tok, B, T, sep, start, pos);
    return tok;
}

static void check_attention(int B, int T, int NH, int NKV, int HS, const int *at, int nat) {
    int *start = malloc((size_t)B * T * sizeof *start), *pos = malloc((size_t)B * T * sizeof *pos);
    free(rows_with(B, T, 0, at, nat, start, pos));
    AttCtx ctx = {B, T, NH, NKV, HS, start};
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS;
    float *qkv = fbuf(nq), *out = fbuf(no), *lse = fbuf((size_t)B * NH * T), *dout = fbuf(no), *dqkv = fbuf(nq);
    float *scratch = fbuf(attention_scratch_floats(T, omp_get_max_threads()));
    randn(qkv, nq, 1); randn(dout, no, 1);
    for (size_t i = 0; i < nq; i++) dqkv[i] = 123.0f;   // must be overwritten
    double *in[1] = {to_d(qkv, nq)}, *ref = calloc(no, sizeof(double)), *R = to_d(dout, no);
    attention_forward(out, lse, qkv, start, scratch, B, T, NH, NKV, HS);
    ref_attention_doc(ref, in, &ctx);
    double e = rel_err_fd(out, ref, no, 1e-6);
    EXPECT(e < 1e-5, "masked attention fwd B=%d T=%d NH=%d NKV=%d HS=%d rel err %.2e", B, T, NH, NKV, HS, e);
    attention_backward(dqkv, dout, qkv, start, out, lse, scratch, B, T, NH, NKV, HS);
    e = fd_check(dqkv, R, in, nq, no, &ctx);
    EXPECT(e < 1e-4, "masked attention backward B=%d T=%d NH=%d NKV=%d HS=%d rel err %.2e", B, T, NH, NKV, HS, e);
    free(qkv); free(out); free(lse); free(dout); free(dqkv); free(scratch);
    free(in[0]); free(ref); free(R); free(start); free(pos);
}

static void test_attention_masked(void) {
    int a[] = {3, 5, 6}, b[] = {0, 40, 66, 100}, c[] = {1, 64, 65, 127}, d[] = {20};
    check_attention(2, 9, 3, 3, 4, a, 3);        // short documents, one of one token
    check_attention(1, 131, 2, 2, 4, b, 4);      // documents across query blocks
    check_attention(2, 130, 2, 1, 5, c, 4);      // starts at block edges, odd head size, multi-query
    check_attention(2, 70, 4, 2, 3, d, 1);       // grouped-query
    check_attention(1, 9, 1, 1, 4, NULL, 0);     // no separator: one document
}

// Each document of a packed row gives what it gives attended alone (a row
// of its own, causal), and the pairs counted are the documents' L(L+1)/2.
static void test_attention_alone(void) {
    int T = 150, NH = 2, NKV = 1, HS = 8, at[] = {0, 37, 38, 100, 149}, nat = 5;
    int ld = (NH + 2 * NKV) * HS, C = NH * HS;
    int *start = malloc(T * sizeof *start), *pos = malloc(T * sizeof *pos);
    free(rows_with(1, T, 0, at, nat, start, pos));
    float *qkv = fbuf((size_t)T * ld), *out = fbuf((size_t)T * C), *lse = fbuf((size_t)NH * T);
    float *one = fbuf((size_t)T * C), *lone = fbuf((size_t)NH * T);
    float *scratch = fbuf(attention_scratch_floats(T, omp_get_max_threads()));
    randn(qkv, (size_t)T * ld, 1);
    attention_forward(out, lse, qkv, start, scratch, 1, T, NH, NKV, HS);
    double worst = 0, pairs = 0;
    for (int k = 0; k < nat; k++) {
        int s = at[k], L = (k + 1 < nat ? at[k + 1] : T) - s;
        pairs += (double)L * (L + 1) / 2;
        attention_forward(one, lone, qkv + (size_t)s * ld, NULL, scratch, 1, L, NH, NKV, HS);
        for (size_t i = 0; i < (size_t)L * C; i++) {
            double dd = fabs(one[i] - out[(size_t)s * C + i]);
            worst = dd > worst ? dd : worst;
        }
    }
    EXPECT(worst < 1e-5, "a packed row's documents against each alone: max diff %.2e", worst);
    EXPECT(attention_pairs(start, 1, T) == pairs, "attention_pairs %.0f, documents' %.0f", attention_pairs(start, 1, T),
           pairs);
    int *tok = rows_with(1, T, 0, at, nat, start, pos);
    EXPECT(doc_pairs(tok, 1, T, 0) == pairs && attention_pairs(NULL, 2, T) == doc_pairs(tok, 2, T, -1),
           "doc_pairs %.0f, expected %.0f", doc_pairs(tok, 1, T, 0), pairs);
    free(tok); free(start); free(pos); free(qkv); free(out); free(lse); free(one); free(lone); free(scratch);
}

// Under bf16 on the bf16 units: masked blocks against the fp32 masked
// kernel on the same bf16 values, and the same bits for 1 and 2 threads.
static double norm_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return sqrt(d / (r + 1e-300));
}

static void test_attention_bf16(void) {
    if (!gemm_bf16_own()) { printf("     (no AVX512_BF16: the bf16 blocks are not built)\n"); return; }
    int B = 2, T = 131, NH = 2, NKV = 1, HS = 6, at[] = {0, 33, 67, 70, 128};
    int *start = malloc((size_t)B * T * sizeof *start), *pos = malloc((size_t)B * T * sizeof *pos);
    free(rows_with(B, T, 0, at, 5, start, pos));
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS;
    float *qkv = fbuf(nq), *dout = fbuf(no), *scratch = fbuf(attention_scratch_floats(T, 2));
    randn(qkv, nq, 1); randn(dout, no, 1);
    for (size_t i = 0; i < nq; i++) qkv[i] = bf16_to_f32(f32_to_bf16(qkv[i]));
    float *o[3], *l[3], *d[3];
    for (int r = 0; r < 3; r++) {   // fp32; bf16 on 2 threads; bf16 on 1
        o[r] = fbuf(no), l[r] = fbuf((size_t)B * NH * T), d[r] = fbuf(nq);
        kernels_set_threads(r == 2 ? 1 : 2);
        int prev = matmul_set_bf16(r > 0);
        attention_forward(o[r], l[r], qkv, start, scratch, B, T, NH, NKV, HS);
        attention_backward(d[r], dout, qkv, start, o[r], l[r], scratch, B, T, NH, NKV, HS);
        matmul_set_bf16(prev);
    }
    kernels_set_threads(2);
    double eo = norm_err(o[1], o[0], no), el = norm_err(l[1], l[0], (size_t)B * NH * T), ed = norm_err(d[1], d[0], nq);
    EXPECT(eo < 5e-3 && el < 1e-6 && ed < 1e-2, "masked attention bf16: out %.2e, lse %.2e, dqkv %.2e against fp32", eo,
           el, ed);
    EXPECT(!memcmp(o[1], o[2], no * 4) && !memcmp(d[1], d[2], nq * 4), "masked attention bf16 differs between 1 and 2 threads");
    for (int r = 0; r < 3; r++) free(o[r]), free(l[r]), free(d[r]);
    free(qkv); free(dout); free(scratch); free(start); free(pos);
}

// Decoding positions pos.. with their documents' starts (in the cache's
// positions) gives the masked attention's rows.
static void test_decode(void) {
    int T = 70, NH = 4, NKV = 2, HS = 8, at[] = {10, 50, 61}, ld = (NH + 2 * NKV) * HS, C = NH * HS, KV = NKV * HS;
    int *start = malloc(T * sizeof *start), *dpos = malloc(T * sizeof *dpos);
    free(rows_with(1, T, 0, at, 3, start, dpos));
    float *qkv = fbuf((size_t)T * ld), *out = fbuf((size_t)T * C), *lse = fbuf((size_t)NH * T);
    float *kc = fbuf((size_t)T * KV), *vc = fbuf((size_t)T * KV), *dec = fbuf((size_t)T * C);
    float *scratch = fbuf(attention_scratch_floats(T, omp_get_max_threads()));
    randn(qkv, (size_t)T * ld, 3);
    attention_forward(out, lse, qkv, start, scratch, 1, T, NH, NKV, HS);
    for (int t = 0; t < T; t++) {
        memcpy(kc + (size_t)t * KV, qkv + (size_t)t * ld + C, (size_t)KV * sizeof(float));
        memcpy(vc + (size_t)t * KV, qkv + (size_t)t * ld + C + KV, (size_t)KV * sizeof(float));
    }
    int from[] = {60, 55, 69};
    for (int k = 0; k < 3; k++) {
        int p = from[k];
        attention_decode(dec, qkv + (size_t)p * ld, ld, kc, vc, start + p, T - p, p, NH, NKV, HS);
        double worst = 0;
        for (size_t i = 0; i < (size_t)(T - p) * C; i++) {
            double dd = fabs(dec[i] - out[(size_t)p * C + i]);
            worst = dd > worst ? dd : worst;
        }
        EXPECT(worst < 1e-5, "masked attention_decode from %d: max diff %.2e", p, worst);
    }
    free(start); free(dpos); free(qkv); free(out); free(lse); free(kc); free(vc); free(dec); free(scratch);
}

// Rotary angles by position in the document: each row turned as the
// reference turns a row at that position (its gradient the transpose), and
// positions t mod T the same bits as none given.
static void test_rope_positions(void) {
    int B = 2, T = 40, heads = 3, HS = 8, ld = 30, at[] = {7, 20, 21};
    size_t n = (size_t)B * T * ld;
    int *start = malloc((size_t)B * T * sizeof *start), *pos = malloc((size_t)B * T * sizeof *pos);
    free(rows_with(B, T, 0, at, 3, start, pos));
    float *x = fbuf(n), *y = fbuf(n), *z = fbuf(n);
    randn(x, n, 1);
    memcpy(y, x, n * sizeof *x);
    rope_forward(y, pos, B, T, 0, heads, HS, ld, 10000.0f);
    int bad = 0;
    for (int r = 0; r < B * T; r++) {   // row r as the first row of a sequence at position pos[r]
        double *xr = calloc((size_t)(pos[r] + 1) * ld, sizeof *xr);
        for (int i = 0; i < ld; i++) xr[(size_t)pos[r] * ld + i] = x[(size_t)r * ld + i];
        ref_rope_d(xr, pos[r] + 1, pos[r] + 1, heads, HS, ld, 10000.0);
        for (int i = 0; i < ld; i++) bad += fabs(xr[(size_t)pos[r] * ld + i] - y[(size_t)r * ld + i]) > 1e-5;
        free(xr);
    }
    EXPECT(bad == 0, "rope by document position: %d values off", bad);
    rope_backward(y, pos, B, T, 0, heads, HS, ld, 10000.0f);
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fabs(y[i] - x[i]) > worst ? fabs(y[i] - x[i]) : worst;
    EXPECT(worst < 1e-5, "rope backward by document position is not the rotation back: %.2e", worst);
    for (int r = 0; r < B * T; r++) pos[r] = r % T;
    memcpy(y, x, n * sizeof *x);
    memcpy(z, x, n * sizeof *x);
    rope_forward(y, pos, B, T, 0, heads, HS, ld, 10000.0f);
    rope_forward(z, NULL, B, T, 0, heads, HS, ld, 10000.0f);
    EXPECT(!memcmp(y, z, n * sizeof *y), "rope with positions t mod T differs from none");
    free(start); free(pos); free(x); free(y); free(z);
}

// The learned positions by position in the document, forward, after a
// vocabulary-parallel lookup, and their gradient rows.
static void test_embedding_positions(void) {
    int B = 2, T = 9, C = 5, V = 7, at[] = {3, 4};
    int *start = malloc((size_t)B * T * sizeof *start), *pos = malloc((size_t)B * T * sizeof *pos);
    int *tok = rows_with(B, T, 6, at, 2, start, pos);
    float *wte = fbuf((size_t)V * C), *wpe = fbuf((size_t)T * C), *out = fbuf((size_t)B * T * C);
    float *add = fbuf((size_t)B * T * C), *dout = fbuf((size_t)B * T * C), *dwpe = fbuf((size_t)T * C);
    randn(wte, (size_t)V * C, 1); randn(wpe, (size_t)T * C, 1); randn(dout, (size_t)B * T * C, 1);
    embedding_forward(out, tok, pos, wte, wpe, B, T, C, 0, V);
    embedding_add_positions(add, out + 4 * C, wpe, pos, B * T - 4, 4, T, C);   // rows 4.. again, plus positions
    int bad = 0;
    for (int r = 0; r < B * T; r++)
        for (int c = 0; c < C; c++) {
            float want = wte[(size_t)tok[r] * C + c] + wpe[(size_t)pos[r] * C + c];
            bad += out[(size_t)r * C + c] != want;
            if (r >= 4) bad += add[(size_t)(r - 4) * C + c] != out[(size_t)r * C + c] + wpe[(size_t)pos[r] * C + c];
        }
    EXPECT(bad == 0, "embedding by document position: %d values off", bad);
    embedding_backward(NULL, dwpe, dout, tok, pos, B, T, C, 0, V);
    double worst = 0;
    for (int p = 0; p < T; p++)
        for (int c = 0; c < C; c++) {
            double want = 0;
            for (int r = 0; r < B * T; r++) want += pos[r] == p ? dout[(size_t)r * C + c] : 0;
            worst = fabs(want - dwpe[(size_t)p * C + c]) > worst ? fabs(want - dwpe[(size_t)p * C + c]) : worst;
        }
    EXPECT(worst < 1e-5, "position gradient by document position: max diff %.2e", worst);
    free(start); free(pos); free(tok); free(wte); free(wpe); free(out); free(add); free(dout); free(dwpe);
}

// model/doc: a document opens at a row's start and at each separator.
static void test_bounds(void) {
    int tok[] = {5, 0, 3, 0, 0, 4, 4, 2}, start[8], pos[8];
    int want_s[] = {0, 1, 1, 3, 0, 0, 0, 0}, want_p[] = {0, 0, 1, 0, 0, 1, 2, 3};
    doc_bounds(tok, 2, 4, 0, start, pos);   // two rows of 4, the second opening with a separator
    int bad = 0;
    for (int i = 0; i < 8; i++) bad += start[i] != want_s[i] || pos[i] != want_p[i];
    EXPECT(bad == 0, "doc_bounds: %d positions off", bad);
    EXPECT(doc_pairs(tok, 2, 4, 0) == 1 + 3 + 1 + 10, "doc_pairs %.0f", doc_pairs(tok, 2, 4, 0));
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_bounds);
    RUN(test_attention_masked);
    RUN(test_attention_alone);
    RUN(test_attention_bf16);
    RUN(test_decode);
    RUN(test_rope_positions);
    RUN(test_embedding_positions);
    return test_finish();
}
