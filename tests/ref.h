// tests/ref.h — naive float64 reference implementations of the kernels and
// of the whole GPT-2 forward pass: the oracles for tests/. Written for
// clarity, not speed.
#ifndef TSR_TEST_REF_H
#define TSR_TEST_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

// out (N,OC) = inp (N,C) · w (OC,C)^T + b (OC or NULL)
static inline void ref_linear_d(double *out, const double *inp, const double *w, const double *b, int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < C; i++) s += inp[(size_t)n * C + i] * w[(size_t)o * C + i];
            out[(size_t)n * OC + o] = s;
        }
}

static inline void ref_layernorm_d(double *out, const double *inp, const double *w, const double *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= C;
        double r = 1 / sqrt(v + 1e-5);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = (x[i] - m) * r * w[i] + b[i];
    }
}

// RMSNorm: x / √(mean x² + eps) · w, per row.
static inline void ref_rmsnorm_d(double *out, const double *inp, const double *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C;
        double v = 0;
        for (int i = 0; i < C; i++) v += x[i] * x[i];
        double r = 1 / sqrt(v / C + eps);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = x[i] * r * w[i];
    }
}

// silu(gate) · up from rows of F gate then F up values.
static inline void ref_swiglu_d(double *out, const double *gu, int N, int F) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            double g = gu[(size_t)n * 2 * F + i], u = gu[(size_t)n * 2 * F + F + i];
            out[(size_t)n * F + i] = g / (1 + exp(-g)) * u;
        }
}

// Rotary embeddings in place on rows (position n mod T) of `heads` heads of
// HS values, ld apart: the pair (i, i + HS/2) turned by t·θ^(−2i/HS), the
// angle in fp32 as Hugging Face computes it, its cosine and sine in double.
static inline void ref_rope_d(double *x, int N, int T, int heads, int HS, int ld, double theta) {
    int h = HS / 2;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < heads; k++)
            for (int i = 0; i < h; i++) {
                float inv = 1.0f / powf((float)theta, (float)(2 * i) / (float)HS), ang = (float)(n % T) * inv;
                double c = cos((double)ang), s = sin((double)ang);
                double *a = x + (size_t)n * ld + (size_t)k * HS, x1 = a[i], x2 = a[i + h];
                a[i] = x1 * c - x2 * s;
                a[i + h] = x2 * c + x1 * s;
            }
}

// 0.5·x·(1 + tanh u) written as x·sigmoid(2u): equal, but without the
// cancellation of 1 + tanh u for very negative u in double.
static inline double ref_gelu1(double x) {
    double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1 + exp(-2 * u));
}

// out (B,T,NH·HS) from qkv (B,T,(NH + 2·NKV)·HS), causal: query head h
// reads key/value head h / (NH/NKV).
static inline void ref_attention_d(double *out, const double *qkv, int B, int T, int NH, int NKV, int HS) {
    int C = NH * HS, ld = (NH + 2 * NKV) * HS;
    double *p = malloc((size_t)T * sizeof *p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                int g = h / (NH / NKV);
                const double *q = qkv + ((size_t)b * T + t) * ld + h * HS;
                double m = -INFINITY, s = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * ld + C + g * HS;
                    double d = 0;
                    for (int i = 0; i < HS; i++) d += q[i] * k[i];
                    p[j] = d / sqrt(HS);
                    if (p[j] > m) m = p[j];
                }
                for (int j = 0; j <= t; j++) { p[j] = exp(p[j] - m); s += p[j]; }
                double *o = out + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += p[j] / s * qkv[((size_t)b * T + j) * ld + C + (NKV + g) * HS + i];
                    o[i] = a;
                }
            }
    free(p);
}

// -log softmax(x[0..V))[tgt]
static inline double ref_ce1(const double *x, int V, int tgt) {
    double m = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) if (x[v] > m) m = x[v];
    for (int v = 0; v < V; v++) s += exp(x[v] - m);
    return m + log(s) - x[tgt];
}

// The GPT-2 forward pass in float64 over parameters laid out as the
// whole-model flat buffer (model/params.c order); returns the mean loss.
typedef struct { int L, NH, C, F, T, V, Vp; } RefGpt;

static inline double ref_gpt2_loss(const RefGpt *g, const double *P, const int *tok, const int *tgt, int B, int T) {
    int C = g->C, F = g->F, N = B * T;
    const double *wte = P, *wpe = P + (size_t)g->Vp * C, *w = wpe + (size_t)g->T * C;
    double *x = malloc(sizeof(double) * N * C), *ln = malloc(sizeof(double) * N * C);
    double *qkv = malloc(sizeof(double) * N * 3 * C), *att = malloc(sizeof(double) * N * C);
    double *prj = malloc(sizeof(double) * N * C), *h = malloc(sizeof(double) * N * F);
    double *logit = malloc(sizeof(double) * g->Vp);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) x[n * C + c] = wte[(size_t)tok[n] * C + c] + wpe[(size_t)(n % T) * C + c];
    for (int l = 0; l < g->L; l++) {
        const double *ln1w = w, *ln1b = ln1w + C, *qw = ln1b + C, *qb = qw + 3 * C * C, *pw = qb + 3 * C;
        const double *pb = pw + C * C, *ln2w = pb + C, *ln2b = ln2w + C, *fw = ln2b + C, *fb = fw + (size_t)F * C;
        const double *fpw = fb + F, *fpb = fpw + (size_t)C * F;
        w = fpb + C;
        ref_layernorm_d(ln, x, ln1w, ln1b, N, C);
        ref_linear_d(qkv, ln, qw, qb, N, C, 3 * C);
        ref_attention_d(att, qkv, B, T, g->NH, g->NH, C / g->NH);
        ref_linear_d(prj, att, pw, pb, N, C, C);
        for (int i = 0; i < N * C; i++) x[i] += prj[i];
        ref_layernorm_d(ln, x, ln2w, ln2b, N, C);
        ref_linear_d(h, ln, fw, fb, N, C, F);
        for (int i = 0; i < N * F; i++) h[i] = ref_gelu1(h[i]);
        ref_linear_d(prj, h, fpw, fpb, N, F, C);
        for (int i = 0; i < N * C; i++) x[i] += prj[i];
    }
    ref_layernorm_d(ln, x, w, w + C, N, C);
    double loss = 0;
    int count = 0;
    for (int n = 0; n < N; n++) {
        if (tgt[n] < 0) continue;
        ref_linear_d(logit, ln + (size_t)n * C, wte, NULL, 1, C, g->V);
        loss += ref_ce1(logit, g->V, tgt[n]);
        count++;
    }
    free(x); free(ln); free(qkv); free(att); free(prj); free(h); free(logit);
    return loss / N;
}

// The LLaMA forward pass in float64 over the whole-model flat buffer
// (embed_tokens, then per layer input_layernorm, q, k, v, o,
// post_attention_layernorm, gate, up, down, then norm and lm_head); returns
// the mean loss over the N positions (tgt −1 skipped).
// LLaMA; with bias, Qwen2 (q/k/v biases after each block's LLaMA
// tensors); tied: the head is the token embedding.
typedef struct { int L, NH, NKV, C, F, T, V, Vp; double theta, eps; int bias, tied; } RefLlama;

static inline double ref_llama_loss(const RefLlama *g, const double *P, const int *tok, const int *tgt, int B, int T) {
    int C = g->C, F = g->F, N = B * T, HS = C / g->NH, KV = g->NKV * HS, QW = C + 2 * KV;
    const double *emb = P, *w = emb + (size_t)g->Vp * C;
    double *x = malloc(sizeof(double) * N * C), *ln = malloc(sizeof(double) * N * C);
    double *qkv = malloc(sizeof(double) * N * QW), *att = malloc(sizeof(double) * N * C);
    double *prj = malloc(sizeof(double) * N * C), *gu = malloc(sizeof(double) * N * 2 * F);
    double *h = malloc(sizeof(double) * N * F), *logit = malloc(sizeof(double) * g->Vp);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) x[n * C + c] = emb[(size_t)tok[n] * C + c];
    for (int l = 0; l < g->L; l++) {
        const double *n1 = w, *wqkv = n1 + C, *wo = wqkv + (size_t)QW * C, *n2 = wo + (size_t)C * C;
        const double *wgu = n2 + C, *wd = wgu + (size_t)2 * F * C, *bqkv = g->bias ? wd + (size_t)C * F : NULL;
        w = wd + (size_t)C * F + (g->bias ? QW : 0);
        ref_rmsnorm_d(ln, x, n1, N, C, g->eps);
        ref_linear_d(qkv, ln, wqkv, bqkv, N, C, QW);
        ref_rope_d(qkv, N, T, g->NH + g->NKV, HS, QW, g->theta);
        ref_attention_d(att, qkv, B, T, g->NH, g->NKV, HS);
        ref_linear_d(prj, att, wo, NULL, N, C, C);
        for (int i = 0; i < N * C; i++) x[i] += prj[i];
        ref_rmsnorm_d(ln, x, n2, N, C, g->eps);
        ref_linear_d(gu, ln, wgu, NULL, N, C, 2 * F);
        ref_swiglu_d(h, gu, N, F);
        ref_linear_d(prj, h, wd, NULL, N, F, C);
        for (int i = 0; i < N * C; i++) x[i] += prj[i];
    }
    ref_rmsnorm_d(ln, x, w, N, C, g->eps);
    const double *head = g->tied ? emb : w + C;
    double loss = 0;
    for (int n = 0; n < N; n++) {
        if (tgt[n] < 0) continue;
        ref_linear_d(logit, ln + (size_t)n * C, head, NULL, 1, C, g->V);
        loss += ref_ce1(logit, g->V, tgt[n]);
    }
    free(x); free(ln); free(qkv); free(att); free(prj); free(gu); free(h); free(logit);
    return loss / N;
}

#endif
