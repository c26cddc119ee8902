#include "kernels/embedding.h"

#include <stddef.h>
#include <string.h>

#include "core/half.h"
#include "core/prof.h"

// The lookup from a table of floats (wte) or of bf16 values (wte16).
static void lookup(float *out, const int *tokens, const int *pos, const float *wte, const uint16_t *wte16,
                   const float *wpe, int B, int T, int C, int v0, int Vl) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        float *o = out + (size_t)bt * C;
        int tok = tokens[bt] - v0;
        const float *p = wpe ? wpe + (size_t)(pos ? pos[bt] : bt % T) * C : NULL;
        if (tok >= 0 && tok < Vl && wte16) {
            const uint16_t *e = wte16 + (size_t)tok * C;
            if (p) {
                #pragma omp simd
                for (int c = 0; c < C; c++) o[c] = bf16_to_f32(e[c]) + p[c];
            } else {
                #pragma omp simd
                for (int c = 0; c < C; c++) o[c] = bf16_to_f32(e[c]);
            }
        } else if (tok >= 0 && tok < Vl) {
            const float *e = wte + (size_t)tok * C;
            if (p) {
                #pragma omp simd
                for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
            } else {
                memcpy(o, e, (size_t)C * sizeof(float));
            }
        } else if (p) {
            memcpy(o, p, (size_t)C * sizeof(float));
        } else {
            memset(o, 0, (size_t)C * sizeof(float));
        }
    }
    prof_end(t0, PROF_EMBEDDING, 0, (wte16 ? 1.5 : 2.0) * B * T * (double)C * sizeof(float));
}

void embedding_forward(float *out, const int *tokens, const int *pos, const float *wte, const float *wpe,
                       int B, int T, int C, int v0, int Vl) {
    lookup(out, tokens, pos, wte, NULL, wpe, B, T, C, v0, Vl);
}

void embedding_forward16(float *out, const int *tokens, const int *pos, const uint16_t *wte16, const float *wpe,
                         int B, int T, int C, int v0, int Vl) {
    lookup(out, tokens, pos, NULL, wte16, wpe, B, T, C, v0, Vl);
}

void embedding_add_positions(float *out, const float *in, const float *wpe, const int *pos, int Ns, int s0, int T,
                             int C) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < Ns; i++) {
        float *o = out + (size_t)i * C;
        const float *x = in + (size_t)i * C;
        if (wpe) {
            const float *p = wpe + (size_t)(pos ? pos[s0 + i] : (s0 + i) % T) * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] = x[c] + p[c];
        } else if (o != x) {
            memcpy(o, x, (size_t)C * sizeof(float));
        }
    }
    prof_end(t0, PROF_EMBEDDING, 0, 3.0 * Ns * (double)C * sizeof(float));
}

void embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, const int *pos,
                        int B, int T, int C, int v0, int Vl) {
    double t0 = prof_begin();
    // Split channels into blocks; a thread owns a block of every row, so the
    // scatter by token needs no atomics and keeps (b,t) order.
    int nblk = (C + 63) / 64;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            int tok = tokens[bt] - v0;
            if (dwte && tok >= 0 && tok < Vl) {
                float *w = dwte + (size_t)tok * C;
                #pragma omp simd
                for (int c = c0; c < c1; c++) w[c] += d[c];
            }
            if (dwpe) {
                float *w = dwpe + (size_t)(pos ? pos[bt] : bt % T) * C;
                #pragma omp simd
                for (int c = c0; c < c1; c++) w[c] += d[c];
            }
        }
    }
    prof_end(t0, PROF_EMBEDDING, 0, 3.0 * B * T * (double)C * sizeof(float));
}
