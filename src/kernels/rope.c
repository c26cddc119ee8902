#include "kernels/rope.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/prof.h"

// cs (T, HS/2, 2): the cosine and sine of the angles of positions pos0 .. pos0+T-1.
static float *angles(int pos0, int T, int HS, float theta) {
    int h = HS / 2;
    float *cs = malloc((size_t)T * h * 2 * sizeof *cs + 1);
    CHECKF(cs, "out of memory for %d rotary angles", T * h);
    for (int i = 0; i < h; i++) {
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
        for (int t = 0; t < T; t++) {
            float a = (float)(pos0 + t) * inv;
            cs[((size_t)t * h + i) * 2] = cosf(a);
            cs[((size_t)t * h + i) * 2 + 1] = sinf(a);
        }
    }
    return cs;
}

// Turns every head by sign·angle: the angles of positions pos0 .. pos0+T-1,
// or with pos, of 0 .. the largest pos (the same values for a position).
static void rotate(float *x, const int *pos, int B, int T, int pos0, int heads, int HS, int ld, float theta,
                   float sign) {
    CHECKF(HS % 2 == 0, "rotary head size %d is odd", HS);
    int h = HS / 2, np = T;
    for (int n = 0; pos && n < B * T; n++) np = pos[n] >= np ? pos[n] + 1 : np;
    float *cs = angles(pos ? 0 : pos0, np, HS, theta);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float *c = cs + (size_t)(pos ? pos[n] : n % T) * h * 2;
        for (int k = 0; k < heads; k++) {
            float *a = x + (size_t)n * ld + (size_t)k * HS, *b = a + h;
            for (int i = 0; i < h; i++) {
                float co = c[2 * i], si = sign * c[2 * i + 1], x1 = a[i], x2 = b[i];
                a[i] = x1 * co - x2 * si;
                b[i] = x2 * co + x1 * si;
            }
        }
    }
    free(cs);
}

void rope_forward(float *x, const int *pos, int B, int T, int pos0, int heads, int HS, int ld, float theta) {
    double t0 = prof_begin();
    rotate(x, pos, B, T, pos0, heads, HS, ld, theta, 1.0f);
    prof_end(t0, PROF_POINTWISE, 0, 2.0 * B * T * (double)heads * HS * sizeof(float));
}

void rope_backward(float *dx, const int *pos, int B, int T, int pos0, int heads, int HS, int ld, float theta) {
    double t0 = prof_begin();
    rotate(dx, pos, B, T, pos0, heads, HS, ld, theta, -1.0f);
    prof_end(t0, PROF_POINTWISE, 0, 2.0 * B * T * (double)heads * HS * sizeof(float));
}
