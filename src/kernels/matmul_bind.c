// kernels/matmul_bind — the 16-bit values a bf16 stage binds to its
// weights and activations (kernels/matmul.h): what the linear layers read
// in place of the floats, looked up by the floats' address.
#include <stddef.h>
#include <stdint.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/half.h"
#include "kernels/matmul.h"

// ---- 16-bit weights the passes bind ----

// n floats at w whose bf16 values are at src16: a weight the passes address
// through w, whose floats may not hold them (matmul_bind16), or an input
// (key 1: its floats hold them, matmul_bind_input16; 2: they do not,
// matmul_bind_input16_only).
typedef struct Bound {
    int key;               // the caller's key, 0 for a free entry
    const float *w;
    const uint16_t *src16;
    size_t n;
} Bound;
enum { BOUND_MAX = 32 };
static _Thread_local Bound g_bound[BOUND_MAX];

void matmul_bind16(int key, const float *w, const uint16_t *src16, size_t n) {
    CHECK(key > 0);
    for (int i = 0; i < BOUND_MAX; i++)
        if (!g_bound[i].key) {
            g_bound[i] = (Bound){key, w, src16, n};
            return;
        }
    CHECKF(0, "more than %d bound 16-bit weights", BOUND_MAX);
}

void matmul_unbind16(int key) {
    for (int i = 0; i < BOUND_MAX; i++)
        if (g_bound[i].key == key || key == 0) g_bound[i].key = 0;
}

const uint16_t *matmul_bound16(const float *w, size_t n) {
    for (int i = 0; i < BOUND_MAX; i++) {
        const Bound *b = &g_bound[i];
        if (b->key && w >= b->w && w + n <= b->w + b->n) return b->src16 + (w - b->w);
    }
    return NULL;
}

// ---- 16-bit inputs the passes bind ----

enum { INPUTS_MAX = 16 };
static _Thread_local Bound g_inputs[INPUTS_MAX];
static _Thread_local int g_ninputs;

void matmul_bind_input16(const float *x, const uint16_t *x16, size_t n) {
    CHECKF(g_ninputs < INPUTS_MAX, "more than %d bound 16-bit inputs", INPUTS_MAX);
    g_inputs[g_ninputs++] = (Bound){1, x, x16, n};
}

void matmul_bind_input16_only(const float *x, const uint16_t *x16, size_t n) {
    CHECKF(g_ninputs < INPUTS_MAX, "more than %d bound 16-bit inputs", INPUTS_MAX);
    g_inputs[g_ninputs++] = (Bound){2, x, x16, n};
}

void matmul_unbind_inputs16(void) { g_ninputs = 0; }

// The binding an input of n floats at x lies in, or NULL.
static const Bound *input_bound(const float *x, size_t n) {
    for (int i = 0; i < g_ninputs; i++) {
        const Bound *b = &g_inputs[i];
        if (x >= b->w && x + n <= b->w + b->n) return b;
    }
    return NULL;
}

// The bf16 values of an input of n floats at x, or NULL when it is not bound.
const uint16_t *matmul_input16(const float *x, size_t n) {
    const Bound *b = input_bound(x, n);
    return b ? b->src16 + (x - b->w) : NULL;
}

// The fp32 values of an input for the fp32 paths: in place, or a bound
// one's whose floats do not hold them widened into per-thread scratch. NULL
// when the scratch is not to be had.
static _Thread_local void *g_wide_in;
static _Thread_local size_t g_wide_in_bytes;

const float *matmul_input_fp32(const float *x, size_t n) {
    const Bound *b = input_bound(x, n);
    if (!b || b->key == 1) return x;
    float *d = mem_grow(&g_wide_in, &g_wide_in_bytes, MEM_WORKSPACE, n * sizeof(float));
    if (d) half_unpack(PREC_BF16, d, b->src16 + (x - b->w), n);
    return d;
}
