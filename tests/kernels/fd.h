// tests/kernels/fd.h — what the kernel tests share: seeded normal draws,
// float64 copies, and a float gradient's check against central finite
// differences of a float64 reference. Header-only (static): each test
// binary has its own.
#ifndef TSR_TESTS_FD_H
#define TSR_TESTS_FD_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/rng.h"
#include "test.h"

static uint64_t draw_stream = 1;

static inline void randn(float *x, size_t n, float std) {
    uint64_t s = draw_stream++;
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * rng_normal(7, s, i));
}
static inline double *to_d(const float *x, size_t n) {
    double *d = malloc(n * sizeof *d + 1);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static inline float *fbuf(size_t n) { return calloc(n + 1, sizeof(float)); }

// ---- finite differences over a float64 reference ----
// A reference maps inputs in[0..nin) to out (nout); loss = sum(out · R).
typedef void (*RefFn)(double *out, double **in, const void *ctx);

static inline double ref_loss(RefFn f, double **in, const double *R, size_t nout, const void *ctx) {
    double *out = calloc(nout + 1, sizeof *out), L = 0;
    f(out, in, ctx);
    for (size_t i = 0; i < nout; i++) L += out[i] * R[i];
    free(out);
    return L;
}

// grad (n) = d loss / d in[k][i], central differences with step h·max(1,|x|).
static inline void fd_grad(double *grad, RefFn f, double **in, int k, size_t n, const double *R, size_t nout,
                    const void *ctx) {
    for (size_t i = 0; i < n; i++) {
        double x = in[k][i], h = 1e-6 * (fabs(x) > 1 ? fabs(x) : 1);
        in[k][i] = x + h;
        double lp = ref_loss(f, in, R, nout, ctx);
        in[k][i] = x - h;
        double lm = ref_loss(f, in, R, nout, ctx);
        in[k][i] = x;
        grad[i] = (lp - lm) / (2 * h);
    }
}

// Checks a float gradient against finite differences of the reference.
static inline double fd_check(const float *g, RefFn f, double **in, int k, size_t n, const double *R,
                       size_t nout, const void *ctx) {
    double *fd = malloc(n * sizeof *fd + 1);
    fd_grad(fd, f, in, k, n, R, nout, ctx);
    double e = rel_err_fd(g, fd, n, 1e-6);
    free(fd);
    return e;
}

#endif
