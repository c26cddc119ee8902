// The step's two ends against float64 references: the embedding lookup
// (from floats and from a bf16 table) and its gradients by finite
// differences, the fused cross-entropy, and AdamW with its 16-bit copy.
#include <string.h>

#include "core/alloc.h"
#include "core/half.h"
#include "core/rng.h"
#include "kernels/adamw.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gemm_bf16.h"
#include "kernels/threads.h"
#include "fd.h"
#include "ref.h"

// ---- embedding ----
typedef struct { int B, T, C, v0, Vl; const int *tok; } EmbCtx;
static void ref_embedding(double *out, double **in, const void *vctx) {
    const EmbCtx *c = vctx;
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int i = 0; i < c->C; i++) {
            int tok = c->tok[bt] - c->v0;
            double e = (tok >= 0 && tok < c->Vl) ? in[0][tok * c->C + i] : 0;
            out[bt * c->C + i] = e + in[1][(bt % c->T) * c->C + i];
        }
}

static void test_embedding(void) {
    for (int v0 = 0; v0 <= 4; v0 += 4) {    // whole table, then a vocabulary slice
        int B = 3, T = 5, C = 7, V = 11, Vl = v0 ? 4 : V;
        int tok[15];
        for (int i = 0; i < B * T; i++) tok[i] = (int)rng_below(3, 3, i, V);
        tok[0] = tok[1] = 5;   // a repeated token accumulates twice
        EmbCtx ctx = {B, T, C, v0, Vl, tok};
        float *wte = fbuf(Vl * C), *wpe = fbuf(T * C), *out = fbuf(B * T * C), *dout = fbuf(B * T * C);
        float *dwte = fbuf(Vl * C), *dwpe = fbuf(T * C);
        randn(wte, Vl * C, 1); randn(wpe, T * C, 1); randn(dout, B * T * C, 1);
        double *in[2] = {to_d(wte, Vl * C), to_d(wpe, T * C)}, *ref = calloc(B * T * C, sizeof(double));
        double *R = to_d(dout, B * T * C);
        embedding_forward(out, tok, NULL, wte, wpe, B, T, C, v0, Vl);
        ref_embedding(ref, in, &ctx);
        double e = rel_err_fd(out, ref, B * T * C, 1e-6);
        EXPECT(e < 1e-6, "embedding fwd v0=%d rel err %.2e", v0, e);
        embedding_backward(dwte, dwpe, dout, tok, NULL, B, T, C, v0, Vl);
        e = fd_check(dwte, ref_embedding, in, 0, Vl * C, R, B * T * C, &ctx);
        EXPECT(e < 1e-4, "embedding dwte v0=%d rel err %.2e", v0, e);
        e = fd_check(dwpe, ref_embedding, in, 1, T * C, R, B * T * C, &ctx);
        EXPECT(e < 1e-4, "embedding dwpe v0=%d rel err %.2e", v0, e);
        // from the table's bf16 copy: the bits of the lookup in the widened table, with and without positions
        uint16_t *w16 = malloc((size_t)Vl * C * sizeof *w16);
        float *out16 = fbuf(B * T * C);
        half_pack(PREC_BF16, w16, wte, (size_t)Vl * C);
        half_unpack(PREC_BF16, wte, w16, (size_t)Vl * C);
        for (int pos = 0; pos < 2; pos++) {
            embedding_forward(out, tok, NULL, wte, pos ? wpe : NULL, B, T, C, v0, Vl);
            embedding_forward16(out16, tok, NULL, w16, pos ? wpe : NULL, B, T, C, v0, Vl);
            EXPECT(!memcmp(out, out16, (size_t)B * T * C * sizeof *out), "embedding fwd from bf16 v0=%d wpe %d: the same bits",
                   v0, pos);
        }
        free(w16); free(out16);
        free(wte); free(wpe); free(out); free(dout); free(dwte); free(dwpe);
        free(in[0]); free(in[1]); free(ref); free(R);
    }
}

// ---- cross-entropy ----
typedef struct { int N, V, Vp; const int *tgt; } CeCtx;
static void ref_ce(double *out, double **in, const void *vctx) {
    const CeCtx *c = vctx;
    for (int n = 0; n < c->N; n++) {
        const double *x = in[0] + n * c->Vp;
        if (c->tgt[n] < 0) { out[n] = 0; continue; }
        double m = -INFINITY, s = 0;
        for (int v = 0; v < c->V; v++) if (x[v] > m) m = x[v];
        for (int v = 0; v < c->V; v++) s += exp(x[v] - m);
        out[n] = m + log(s) - x[c->tgt[n]];
    }
}

static void check_ce(int N, int V, int Vp) {
    int *tgt = malloc(N * sizeof *tgt);
    for (int n = 0; n < N; n++) tgt[n] = (int)rng_below(5, 5, n, V);
    if (N > 2) tgt[1] = -1;
    CeCtx ctx = {N, V, Vp, tgt};
    float *x = fbuf(N * Vp), *loss = fbuf(N), *g = fbuf(N * Vp);
    randn(x, N * Vp, 3);
    double *in[1] = {to_d(x, N * Vp)}, *ref = calloc(N, sizeof(double)), *R = calloc(N, sizeof(double));
    memcpy(g, x, N * Vp * sizeof(float));
    crossentropy_forward(g, loss, tgt, N, V, Vp, 0.0f, 0);   // forward only: logits untouched
    EXPECT(memcmp(g, x, N * Vp * sizeof(float)) == 0, "forward-only call changed the logits");
    ref_ce(ref, in, &ctx);
    double e = rel_err_fd(loss, ref, N, 1e-6);
    EXPECT(e < 1e-5, "cross-entropy loss N=%d V=%d rel err %.2e", N, V, e);
    for (int n = 0; n < N; n++) R[n] = 0.25;      // dscale
    float *g16 = fbuf(N * Vp), *loss16 = fbuf(N);
    memcpy(g16, x, N * Vp * sizeof(float));
    crossentropy_forward(g, loss, tgt, N, V, Vp, 0.25f, 0);
    e = fd_check(g, ref_ce, in, 0, N * Vp, R, N, &ctx);
    EXPECT(e < 1e-4, "cross-entropy gradient N=%d V=%d Vp=%d rel err %.2e", N, V, Vp, e);
    if (gemm_bf16_own() && Vp % 2 == 0) {   // out16: each row's gradient rounded at its own row's start
        crossentropy_forward(g16, loss16, tgt, N, V, Vp, 0.25f, 1);
        uint16_t *want = malloc((size_t)Vp * sizeof *want);
        int bad = memcmp(loss, loss16, N * sizeof(float)) != 0;
        for (int n = 0; n < N; n++) {
            bf16_round_row(want, g + (size_t)n * Vp, (size_t)Vp);
            bad += memcmp((uint16_t *)(g16 + (size_t)n * Vp), want, (size_t)Vp * sizeof *want) != 0;
        }
        EXPECT(bad == 0, "cross-entropy N=%d Vp=%d in bf16: %d rows or losses not the floats' rounded", N, Vp, bad);
        free(want);
    }
    free(g16); free(loss16);
    free(tgt); free(x); free(loss); free(g); free(in[0]); free(ref); free(R);
}

static void test_crossentropy(void) {
    check_ce(4, 7, 7);
    check_ce(9, 13, 16);     // padded vocabulary
    check_ce(3, 300, 384);
    check_ce(2, 1000, 1030);  // rows past 32 floats with a masked end, in bf16
}

// ---- adamw ----
static void test_adamw(void) {
    size_t n = 1001;
    float *p = fbuf(n), *g = fbuf(n), *m = fbuf(n), *v = fbuf(n);
    randn(p, n, 1); randn(g, n, 1);
    double *pd = to_d(p, n), *md = calloc(n, sizeof(double)), *vd = calloc(n, sizeof(double));
    AdamWArgs a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                   .grad_scale = 0.5f};
    double worst = 0;
    for (int step = 1; step <= 3; step++) {
        a.bc1 = 1.0f - powf(a.beta1, step);
        a.bc2 = 1.0f - powf(a.beta2, step);
        adamw_update(p, g, m, v, NULL, n, &a);
        for (size_t i = 0; i < n; i++) {
            double gg = 0.5 * g[i];
            md[i] = 0.9 * md[i] + 0.1 * gg;
            vd[i] = 0.95 * vd[i] + 0.05 * gg * gg;
            double mh = md[i] / (1 - pow(0.9, step)), vh = vd[i] / (1 - pow(0.95, step));
            pd[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.1 * pd[i]);
        }
    }
    worst = rel_err_fd(p, pd, n, 1e-6);
    EXPECT(worst < 1e-5, "adamw params after 3 steps rel err %.2e", worst);
    free(p); free(g); free(m); free(v); free(pd); free(md); free(vd);
}

// AdamW writing the 16-bit copy as it goes: the same update, and the copy
// the packers make of its result, over several blocks.
static void test_adamw16(void) {
    size_t n = 10001;
    for (int f = 0; f < 2; f++) {
        Precision prec = f ? PREC_FP16 : PREC_BF16;
        float *p = fbuf(n), *g = fbuf(n), *m = fbuf(n), *v = fbuf(n), *p2 = fbuf(n), *m2 = fbuf(n), *v2 = fbuf(n);
        uint16_t *h = calloc(n, sizeof *h), *ref = calloc(n, sizeof *ref);
        randn(p, n, 1); randn(g, n, 1);
        memcpy(p2, p, n * sizeof *p);
        AdamWArgs a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                       .grad_scale = 0.5f, .bc1 = 0.1f, .bc2 = 0.05f, .prec16 = prec};
        adamw_update(p, g, m, v, NULL, n, &a);
        adamw_update(p2, g, m2, v2, h, n, &a);
        half_pack(prec, ref, p, n);
        EXPECT(!memcmp(p, p2, n * 4) && !memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4), "adamw %s: the update changed",
               prec_name(prec));
        EXPECT(!memcmp(h, ref, n * 2), "adamw %s: the 16-bit copy is not the packed update", prec_name(prec));
        free(p); free(g); free(m); free(v); free(p2); free(m2); free(v2); free(h); free(ref);
    }
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_embedding);
    RUN(test_crossentropy);
    RUN(test_adamw);
    RUN(test_adamw16);
    return test_finish();
}
