#include "kernels/matmul.h"

#include "kernels/chunks.h"
#include "kernels/gemm.h"
#include "kernels/gemm_pack.h"
#include "kernels/gemm_bf16.h"
#include "kernels/dnnl.h"
#include "kernels/matmul_impl.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/half.h"
#include "core/prof.h"

#include "core/check.h"

// Per-thread scratch for the transposed operands, grown on demand and kept.
static _Thread_local void *g_scratch;
static _Thread_local size_t g_scratch_bytes;

static float *scratch(size_t floats) {
    return mem_grow(&g_scratch, &g_scratch_bytes, MEM_WORKSPACE, floats * sizeof(float));
}

// ---- products on the bf16 units ----

// Set around a bf16 stage's passes (matmul_set_bf16); the passes call the
// linear layers from one thread.
static _Thread_local int g_bf16;
static int g_units = 1;   // process-wide: bf16 stages may use the units at all

void matmul_bf16_allow(int on) { g_units = on; }

int matmul_set_bf16(int on) {
    int prev = g_bf16;
    g_bf16 = on && g_units && gemm_bf16_own();
    return prev;
}

int matmul_bf16(void) { return g_bf16; }

// Per-thread scratch for the packed bf16 operands, grown on demand and kept.
static _Thread_local void *g_scratch16;
static _Thread_local size_t g_scratch16_bytes;

static uint16_t *scratch16(size_t n) {
    return mem_grow(&g_scratch16, &g_scratch16_bytes, MEM_WORKSPACE, n * sizeof(uint16_t));
}

static int pairs(int K) { return (K + 1) / 2; }

// The fp32 values of a weight (OC,C) for the fp32 paths: in place, or a bound
// one's widened into per-thread scratch. NULL when the scratch is not to be had.
static _Thread_local void *g_wide;
static _Thread_local size_t g_wide_bytes;

static const float *weight_fp32(const float *w, size_t n) {
    const uint16_t *h = matmul_bound16(w, n);
    if (!h) return w;
    float *d = mem_grow(&g_wide, &g_wide_bytes, MEM_WORKSPACE, n * sizeof(float));
    if (d) half_unpack(PREC_BF16, d, h, n);
    return d;
}

// The two packed forms of a weight (OC,C): the forward's B operand, pairs
// of its transpose (kp(C), OC, 2), and the input gradient's, pairs of its
// rows (kp(OC), C, 2).
enum { FORM_FWD, FORM_DINP };

// A weight held across calls (matmul_hold): its packed forms, each made at
// its first use while the weight is held and reused by later calls.
typedef struct Held {
    const float *w;    // the held weight, NULL when none
    const float *last; // the weight the forms were packed from, and its version (0: none)
    uint64_t version;
    int OC, C;         // its shape when packed
    int panels;        // the forms are the tiles' panels (else gemm_bf16's pairs)
    void *buf[2];      // a form's bf16 values, by FORM_*, or NULL
    size_t bytes[2];   // their allocated bytes
    int have[2];       // the form is packed for this hold
} Held;
static _Thread_local Held g_held;

void matmul_hold(const float *weight, uint64_t version, int uses) {
    if (uses == 1 && gemm_bf16_unit() == BF16_AMX) {   // read as it lies: no pass of its own
        g_held.w = NULL;
        return;
    }
    if (!version || weight != g_held.last || version != g_held.version)
        g_held.have[FORM_FWD] = g_held.have[FORM_DINP] = 0;
    g_held.w = g_held.last = weight;
    g_held.version = version;
}

void matmul_release(void) { g_held.w = NULL; }

// Bound weights' input-gradient forms kept across calls (matmul_keep16),
// by their 16-bit values' address.
typedef struct Kept {
    const uint16_t *w16;
    uint64_t version;   // of the values the form was packed from
    int K, NC, panels;  // panels: the tiles' form, else the strips
    void *buf;
    size_t bytes;
} Kept;
enum { KEPT_MAX = 256, KEEP_ROWS = 256 };
static _Thread_local Kept g_kept[KEPT_MAX];
static _Thread_local int g_nkept;
static _Thread_local uint64_t g_keep;

void matmul_keep16(uint64_t version) { g_keep = version; }

// B (K,NC) from src packed into *buf (grown as needed) in the form the unit
// holds a weight in: the tiles' panels, else the vector units' strips. 0,
// or -1 where the memory is not to be had. held_op: the operand reading it.
static int pack_held(void **buf, size_t *bytes, int panels, int K, int NC, Bf16Op src) {
    size_t n = panels ? gemm_bf16_panels_len(K, NC) : (size_t)pairs(K) * NC * 2;
    uint16_t *d = mem_grow(buf, bytes, MEM_WORKSPACE, n * sizeof(uint16_t));
    if (!d) return -1;
    if (panels) gemm_bf16_panels(d, src, K, NC);
    else bf16_strips(d, src, K, NC);
    return 0;
}
static Bf16Op held_op(const void *buf, int panels, int K) {
    return panels ? gemm_bf16_panels_at(buf, K, 0, 0) : (Bf16Op){OP_STRIPS16, buf, 0};
}

// The kept form of the bound weight at w16, B (K,NC) in the form *op,
// packed where it is older than the version: 0, or -1 where there is no
// room for it (the product then packs the weight from its rows).
static int kept_form(const uint16_t *w16, int K, int NC, Bf16Op *op) {
    int e = 0, panels = gemm_bf16_unit() == BF16_AMX;
    while (e < g_nkept && g_kept[e].w16 != w16) e++;
    if (e == KEPT_MAX) return -1;
    Kept *k = &g_kept[e];
    if (e == g_nkept) g_nkept++, *k = (Kept){.w16 = w16};
    if (k->version != g_keep || k->K != K || k->NC != NC || k->panels != panels) {
        if (pack_held(&k->buf, &k->bytes, panels, K, NC, *op)) return -1;
        k->version = g_keep, k->K = K, k->NC = NC, k->panels = panels;
    }
    *op = held_op(k->buf, panels, K);
    return 0;
}

// The B operand a weight (OC,C) gives a product of N rows: the forward's,
// its transpose (C,OC); the input gradient's, itself (OC,C). A held
// weight's is packed once while held — the tiles' panels where they are the
// unit, else gemm_bf16's pairs — and reused, as a kept one's are
// (matmul_keep16); any other is read in its own form. Either comes from the
// weight's bf16 values where it is bound (no rounding, half the bytes
// read), else from its floats. -1 when the held form's memory is not to be
// had.
static int weight_op(const float *weight, int N, int C, int OC, int form, Bf16Op *op) {
    const uint16_t *w16 = matmul_bound16(weight, (size_t)OC * C);
    int fwd = form == FORM_FWD, K = fwd ? C : OC, NC = fwd ? OC : C;
    *op = (Bf16Op){fwd ? (w16 ? OP_COLS16 : OP_COLS32) : (w16 ? OP_ROWS16 : OP_ROWS32), w16 ? (const void *)w16 : weight, C};
    if (weight != g_held.w) {
        if (!fwd && w16 && g_keep && N <= KEEP_ROWS) kept_form(w16, K, NC, op);   // else *op as it lies
        return 0;
    }
    int panels = gemm_bf16_unit() == BF16_AMX;
    if (g_held.OC != OC || g_held.C != C || g_held.panels != panels) g_held.have[FORM_FWD] = g_held.have[FORM_DINP] = 0;
    if (!g_held.have[form]) {
        if (pack_held(&g_held.buf[form], &g_held.bytes[form], panels, K, NC, *op)) return -1;
        g_held.have[form] = 1, g_held.OC = OC, g_held.C = C, g_held.panels = panels;
    }
    *op = held_op(g_held.buf[form], panels, K);
    return 0;
}

// Room for n bf16 values of operands packed into gemm_bf16's layouts: none
// on the tiles, which pack their panels from the operands as they are.
// -1 when the room is not to be had.
static int room_for(size_t n, uint16_t **room) {
    *room = NULL;
    if (n == 0 || gemm_bf16_unit() == BF16_AMX) return 0;
    *room = scratch16(n);
    return *room ? 0 : -1;
}

// The forward of a bound weight of few rows (2N < C, C even), transposed:
// out^T (OC,N) = w16 (OC,C) · bf16(inp)^T (C,N), + bias per row, by blocks
// of output channels, each transposed into out. The weight is the A operand,
// read in place: no pass over it, where packing it would cost more than
// transposing the output. Each sum runs as the untransposed product's
// (from the bias, pairs in ascending order): the same bits.
static int forward_bf16_t(float *out, const float *inp, const uint16_t *x16, const uint16_t *w16, const float *bias,
                          int N, int C, int OC) {
    int kp = C / 2, ob = OC < OWN_OC_BLOCK ? OC : OWN_OC_BLOCK;
    uint16_t *b = scratch16((size_t)kp * N * 2);
    float *t = scratch((size_t)ob * N);
    if (!b || !t) return -1;
    // the vector units read x^T in strips; the tiles pack their panels from the pairs
    int strips = gemm_bf16_unit() != BF16_AMX;
    Bf16Op xt = x16 ? (Bf16Op){OP_COLS16, x16, C} : (Bf16Op){OP_COLS32, inp, C};
    if (strips) bf16_strips(b, xt, C, N);
    else if (x16) bf16_pairs_t16(b, x16, C, C, N);
    else bf16_pack_pairs_t(b, inp, C, C, N);
    Bf16Op bop = strips ? (Bf16Op){OP_STRIPS16, b, 0} : (Bf16Op){OP_PAIRS16, b, N};
    for (int o0 = 0; o0 < OC; o0 += ob) {
        int m = OC - o0 < ob ? OC - o0 : ob;
        if (bias) {
            #pragma omp parallel for schedule(static)
            for (int o = 0; o < m; o++)
                for (int n = 0; n < N; n++) t[(size_t)o * N + n] = bias[o0 + o];
        }
        gemm_bf16_op(m, N, C, (Bf16Op){OP_PAIRS16, w16 + (size_t)o0 * C, C}, bop, t, N, bias != NULL, NULL, NULL);
        transpose_add(out + o0, OC, t, N, NULL, m, N);
    }
    return 0;
}

// out (N,OC) = bf16(inp) (N,C) · bf16(weight)^T + bias: A the input's rows,
// B the weight's rows read as columns; with out16 given, its bf16 values
// there instead (gemm_bf16_op16). 0, or -1 when memory is not to be had (or
// out16 cannot be written so).
static int forward_bf16(float *out, uint16_t *out16, const float *inp, const float *weight, const float *bias, int N,
                        int C, int OC) {
    const uint16_t *w16 = weight == g_held.w ? NULL : matmul_bound16(weight, (size_t)OC * C);
    const uint16_t *x16 = C % 2 == 0 ? matmul_input16(inp, (size_t)N * C) : NULL;   // rows of 2·kp values already
    if (w16 && C % 2 == 0 && 2 * N < C) return out16 ? -1 : forward_bf16_t(out, inp, x16, w16, bias, N, C, OC);
    if (!x16 && !(inp = matmul_input_fp32(inp, (size_t)N * C))) return -1;
    Bf16Op a = x16 ? (Bf16Op){OP_PAIRS16, x16, C} : (Bf16Op){OP_ROWS32, inp, C}, b;
    uint16_t *room;
    if (weight_op(weight, N, C, OC, FORM_FWD, &b)) return -1;
    if (room_for(gemm_bf16_room(N, OC, C, a.form, b.form), &room)) return -1;
    if (out16) return gemm_bf16_op16(N, OC, C, a, b, out16, out, OC, bias, room);
    return gemm_bf16_op(N, OC, C, a, b, out, OC, 0, bias, room);
}

// dinp (N,C) (+)= bf16(dout) (N,OC) · bf16(weight) (OC,C).
static int dinp_bf16(float *dinp, const float *dout, const float *weight, int N, int C, int OC, int accumulate) {
    Bf16Op b;
    uint16_t *room;
    if (weight_op(weight, N, C, OC, FORM_DINP, &b)) return -1;
    if (room_for(gemm_bf16_room(N, C, OC, OP_ROWS32, b.form), &room)) return -1;
    return gemm_bf16_op(N, C, OC, (Bf16Op){OP_ROWS32, dout, OC}, b, dinp, C, accumulate, NULL, room);
}

// ---- weight gradients written by their first product of a step ----

enum { FRESH_MAX = 64 };
static _Thread_local float *g_fresh[FRESH_MAX];
static _Thread_local int g_nfresh;

void matmul_grad_fresh(float *dweight) {
    CHECKF(g_nfresh < FRESH_MAX, "more than %d weight gradients marked unwritten", FRESH_MAX);
    g_fresh[g_nfresh++] = dweight;
}

int matmul_grads_unwritten(void) {
    int n = 0;
    for (int i = 0; i < g_nfresh; i++) n += !defer_holds(g_fresh[i]);   // queued rows will write it
    return n;
}

// Whether the gradient of n floats at dweight is marked unwritten: the marks
// inside it are used up (one product may write neighbouring tensors at once,
// as LLaMA's q, k and v, marked together), its first one among them.
static int take_fresh(const float *dweight, size_t n) {
    int hit = 0;
    for (int i = 0; i < g_nfresh;)
        if (g_fresh[i] >= dweight && g_fresh[i] < dweight + n) {
            hit |= 1 + (g_fresh[i] == dweight);
            g_fresh[i] = g_fresh[--g_nfresh];
        } else {
            i++;
        }
    CHECKF(hit == 0 || (hit & 2), "a weight gradient (%zu floats) marked unwritten only in part", n);
    return hit != 0;
}

// ---- weight gradients whose last product sums their squares ----

enum { SUMSQ_MAX = 64 };
static _Thread_local float *g_sqw[SUMSQ_MAX];
static _Thread_local double *g_sqv[SUMSQ_MAX];
static _Thread_local int g_nsq;

void matmul_grad_sumsq(float *dweight, double *sq) {
    CHECKF(g_nsq < SUMSQ_MAX, "more than %d weight gradients marked for their sums of squares", SUMSQ_MAX);
    g_sqw[g_nsq] = dweight, g_sqv[g_nsq++] = sq;
}

void matmul_grad_sumsq_clear(void) {
    int n = 0;
    for (int i = 0; i < g_nsq; i++)   // kept: those of gradients with rows queued, for the product that takes them
        if (defer_holds(g_sqw[i])) g_sqw[n] = g_sqw[i], g_sqv[n++] = g_sqv[i];
    g_nsq = n;
}

// The marks inside a product's gradient, taken: at, the first tensor's
// (where the product's sum goes), and the others' (one product writes a
// few neighbouring tensors at most: LLaMA's q, k and v).
enum { SQ_PER_PRODUCT = 8 };
typedef struct {
    double *at;
    int n;
    float *w[SQ_PER_PRODUCT];
    double *v[SQ_PER_PRODUCT];
} SqMarks;

// The marks inside the gradient of n floats at dweight, used up.
static SqMarks take_sumsq(const float *dweight, size_t n) {
    SqMarks m = {0};
    for (int i = 0; i < g_nsq;)
        if (g_sqw[i] >= dweight && g_sqw[i] < dweight + n) {
            CHECKF(m.n < SQ_PER_PRODUCT, "more than %d marked weight gradients in one product", SQ_PER_PRODUCT);
            if (g_sqw[i] == dweight) m.at = g_sqv[i];
            m.w[m.n] = g_sqw[i], m.v[m.n++] = g_sqv[i];
            g_sqw[i] = g_sqw[--g_nsq], g_sqv[i] = g_sqv[g_nsq];
        } else {
            i++;
        }
    CHECKF(m.at || !m.n, "a weight gradient (%zu floats) marked for its sum of squares only in part", n);
    return m;
}

// After the product: where it stored its sum (the marks' sums are negative
// until stored: matmul_grad_sumsq), the other tensors' are 0, their squares
// counted in it.
static void sumsq_done(const SqMarks *m) {
    if (!m->at || *m->at < 0) return;
    for (int i = 0; i < m->n; i++)
        if (m->v[i] != m->at) *m->v[i] = 0.0;
}

// ---- the linear layers ----

int linear_forward16(uint16_t *out16, float *out, const float *inp, const float *weight, const float *bias, int N,
                     int C, int OC) {
    if (!g_bf16 || N < 2 || OC == 0 || !gemm_bf16_own()) return -1;
    double t0 = prof_begin();
    if (forward_bf16(out, out16, inp, weight, bias, N, C, OC)) return -1;
    prof_gemm(t0, PROF_GEMM_FWD, N, OC, C);
    return 0;
}

void linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                    int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    double t0 = prof_begin();
    if (g_bf16 && N > 1 && !forward_bf16(out, NULL, inp, weight, bias, N, C, OC)) {
        prof_gemm(t0, PROF_GEMM_FWD, N, OC, C);
        return;
    }
    weight = weight_fp32(weight, (size_t)OC * C);
    CHECKF(weight, "out of memory widening a 16-bit weight (%d×%d)", OC, C);
    inp = matmul_input_fp32(inp, (size_t)N * C);
    CHECKF(inp, "out of memory widening a 16-bit input (%d×%d)", N, C);
    int path = matmul_fp32_path(PROD_FWD, N, C, OC);
    float *s = path == PATH_OWN ? scratch((size_t)N * C + (size_t)N * OWN_OC_BLOCK) : NULL;
    if (s) {
        // out^T (OC,N) = weight (OC,C) · inp^T (C,N), by blocks of output channels:
        // the weight is read once, in place, as the broadcast operand, and each
        // block comes back transposed with its bias added.
        float *it = s, *ot = s + (size_t)N * C;
        transpose_add(it, N, inp, C, NULL, N, C);
        for (int o0 = 0; o0 < OC; o0 += OWN_OC_BLOCK) {
            int ob = OC - o0 < OWN_OC_BLOCK ? OC - o0 : OWN_OC_BLOCK;
            gemm_nn(ob, N, C, weight + (size_t)o0 * C, C, it, N, ot, N, 0);
            transpose_add(out + o0, OC, ot, N, bias ? bias + o0 : NULL, ob, N);
        }
        prof_gemm(t0, PROF_GEMM_FWD, N, OC, C);
        return;
    }
    if (path == PATH_DNNL && !dnnl_gemm_f32(N, OC, C, inp, C, 1, weight, 1, C, out, OC, 0, bias)) {
        prof_gemm(t0, PROF_GEMM_FWD, N, OC, C);
        return;
    }
    if (bias) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias[o];
    }
    if (N == 1)   // one row (a decoding step): a matrix-vector product reads the weight once, unpacked
        cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, weight, C, inp, 1, bias ? 1.0f : 0.0f, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C,
                    bias ? 1.0f : 0.0f, out, OC);
    prof_gemm(t0, PROF_GEMM_FWD, N, OC, C);
}

// By kernels/chunks: by blocks of 64 columns, each down all the rows, the
// bias gradients of gpt2-124m's layers at 2,048 rows read 30-40% slower.
void colsum_add(float *colsum, const float *a, int N, int M) {
    if (N <= 0 || M <= 0) return;
    int nc;
    float *part = chunk_room(N, (size_t)M, &nc);
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int c = 0; c < nc; c++) {
            int n0 = chunk_lo(N, nc, c), n1 = chunk_lo(N, nc, c + 1);
            float *p = part + (size_t)c * M;
            memcpy(p, a + (size_t)n0 * M, (size_t)M * sizeof *p);
            for (int n = n0 + 1; n < n1; n++) {
                const float *row = a + (size_t)n * M;
                #pragma omp simd
                for (int m = 0; m < M; m++) p[m] += row[m];
            }
        }
        chunks_add(colsum, part, nc, (size_t)M, M);
    }
}

// dinp (N,C) (+)= dout (N,OC) · weight (OC,C) in fp32.
static void dinp_fp32(float *dinp, const float *dout, const float *weight, int N, int C, int OC, int accumulate) {
    int path = matmul_fp32_path(PROD_DINP, N, C, OC);
    if (path == PATH_PACK && !gemm_pack(N, C, OC, dout, OC, 1, weight, C, 1, dinp, C, accumulate, NULL)) return;
    if (path == PATH_OWN)   // both operands read in place: the weight is the vector operand
        gemm_nn(N, C, OC, dout, OC, weight, C, dinp, C, accumulate);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                    accumulate ? 1.0f : 0.0f, dinp, C);
}

// dweight (OC,C) (+)= dout^T (OC,N) · inp (N,C) in fp32; on gemm_pack or the
// own kernel, with sq given, *sq = dweight's sum of squares as it is stored
// (the own kernel's blocks of output channels added in order; else left as
// it was).
static void dweight_fp32(float *dweight, const float *dout, const float *inp, int N, int C, int OC, int accumulate,
                         double *sq) {
    int path = matmul_fp32_path(PROD_DWEIGHT, N, C, OC);
    if (path == PATH_DNNL && !dnnl_gemm_f32(OC, C, N, dout, 1, OC, inp, C, 1, dweight, C, accumulate, NULL)) return;
    if (path == PATH_PACK && !gemm_pack(OC, C, N, dout, 1, OC, inp, C, 1, dweight, C, accumulate, sq)) return;
    float *s = path != PATH_BLAS ? scratch((size_t)N * OWN_OC_BLOCK) : NULL;
    if (!s) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, accumulate ? 1.0f : 0.0f,
                    dweight, C);
        return;
    }
    // by blocks of output channels, each block of dout transposed first so that it is the broadcast operand
    double total = 0;
    int summed = sq != NULL;
    for (int o0 = 0; o0 < OC; o0 += OWN_OC_BLOCK) {
        int ob = OC - o0 < OWN_OC_BLOCK ? OC - o0 : OWN_OC_BLOCK;
        double part = 0;
        float *dw = dweight + (size_t)o0 * C;
        transpose_add(s, N, dout + o0, OC, NULL, N, ob);
        if (!summed || gemm_nn_sq(ob, C, N, s, N, inp, C, dw, C, accumulate, &part)) {
            gemm_nn(ob, C, N, s, N, inp, C, dw, C, accumulate);
            summed = 0;
        }
        total += part;
    }
    if (summed) *sq = total;
}

static int g_defer_ok = 1;   // process-wide: matmul_defer_allow

void matmul_defer_allow(int on) { g_defer_ok = on; }

// The most rows one product of a weight gradient may gather over
// micro-batches (matmul_defer) with the arithmetic of the products it
// replaces (each element summed over the rows in order from the stored
// gradient): the bf16 vector units, or the own fp32 kernel at both N and
// OWN_MAX_ROWS rows; 0 elsewhere.
static int defer_limit(int N, int C, int OC) {
    if (!g_defer_ok) return 0;
    if (g_bf16) return gemm_bf16_unit() == BF16_DOT ? OWN_MAX_ROWS : 0;
    return matmul_fp32_path(PROD_DWEIGHT, N, C, OC) == PATH_OWN &&
                   matmul_fp32_path(PROD_DWEIGHT, OWN_MAX_ROWS, C, OC) == PATH_OWN
               ? OWN_MAX_ROWS
               : 0;
}

int matmul_defer_rows(int N, int C, int OC) { return defer_limit(N, C, OC); }

// rows (rows, cols) of bf16 ld apart widened into a new block (MEM_WORKSPACE,
// cols apart); NULL when it cannot be had.
static float *widened(const uint16_t *src, int ld, int rows, int cols) {
    float *f = mem_alloc(MEM_WORKSPACE, (size_t)rows * cols * sizeof(float));
    if (!f) return NULL;
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) f[(size_t)i * cols + c] = bf16_to_f32(src[(size_t)i * ld + c]);
    return f;
}

// dweight (OC,C) (+)= dout^T (OC,rows) · inp (rows,C) for r: on the bf16
// units where bf16, else (or where their room is wanting) in fp32, a bf16
// operand widened. sq: as dweight_fp32's.
static void dweight_rows(float *dweight, const WRows *r, int C, int OC, int bf16, int accumulate, double *sq) {
    uint16_t *room;
    if (bf16) {
        Bf16Op a = {r->dout16 ? OP_COLS16 : OP_COLS32, r->dout, r->ldo};
        Bf16Op b = {r->inp16 ? OP_ROWS16 : OP_ROWS32, r->inp, C};
        if (!room_for(gemm_bf16_room(OC, C, r->rows, a.form, b.form), &room) &&
            !gemm_bf16_op_sq(OC, C, r->rows, a, b, dweight, C, accumulate, NULL, room, sq))
            return;
    }
    float *d = r->dout16 ? widened(r->dout, r->ldo, r->rows, OC) : NULL;
    float *x = r->inp16 ? widened(r->inp, C, r->rows, C) : NULL;
    CHECKF((d || !r->dout16) && (x || !r->inp16), "out of memory widening a weight gradient's operands (%d rows)",
           r->rows);
    dweight_fp32(dweight, d ? d : r->dout, x ? x : r->inp, r->rows, C, OC, accumulate, sq);
    mem_free(d);
    mem_free(x);
}

// dweight (OC,C) (+)= r's dout^T · inp, written where marked unwritten.
static void weight_product(float *dweight, const WRows *r, int C, int OC, int bf16) {
    int fresh = take_fresh(dweight, (size_t)OC * C);
    CHECKF(r->rows > 0 || !fresh, "an unwritten weight gradient (%d×%d) met no rows", OC, C);
    if (r->rows == 0) return;
    double t0 = prof_begin();
    SqMarks sq = take_sumsq(dweight, (size_t)OC * C);   // *sq.at left as it was by the unfused products
    dweight_rows(dweight, r, C, OC, bf16, !fresh, sq.at);
    sumsq_done(&sq);
    prof_gemm(t0, PROF_GEMM_DW, OC, C, r->rows);
}

// dweight (OC,C) (+)= dout^T · inp over N rows, dout's rows ldo apart,
// bf16 where dout16; or the rows queued for a later product
// (matmul_defer), or the queued ones with these.
static void weight_grad(float *dweight, const void *dout, int ldo, int dout16, const float *inp, int N, int C,
                        int OC) {
    WRows r = {dout, inp, ldo, N, dout16, 0};
    if (g_bf16) {
        const uint16_t *x16 = matmul_input16(inp, (size_t)N * C);
        if (x16) r.inp = x16, r.inp16 = 1;
    } else if (N > 0) {
        r.inp = matmul_input_fp32(inp, (size_t)N * C);
        CHECKF(r.inp, "out of memory widening a 16-bit input (%d×%d)", N, C);
    }
    if (!defer_take(dweight, OC, C, defer_limit(N, C, OC), g_bf16, &r)) weight_product(dweight, &r, C, OC, g_bf16);
}

void matmul_defer_flush(void) {
    float *dweight;
    int OC, C, bf16;
    WRows r;
    while (defer_next(&dweight, &OC, &C, &bf16, &r)) weight_product(dweight, &r, C, OC, bf16);
}

void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int C, int OC, int accumulate) {
    if (dinp && N > 0) {
        double t0 = prof_begin();
        if (!g_bf16 || dinp_bf16(dinp, dout, weight, N, C, OC, accumulate)) {
            const float *w = weight_fp32(weight, (size_t)OC * C);
            CHECKF(w, "out of memory widening a 16-bit weight (%d×%d)", OC, C);
            dinp_fp32(dinp, dout, w, N, C, OC, accumulate);
        }
        prof_gemm(t0, PROF_GEMM_DX, N, C, OC);
    }
    if (dweight) weight_grad(dweight, dout, OC, 0, inp, N, C, OC);
    if (dbias && N > 0) {
        double t0 = prof_begin();
        colsum_add(dbias, dout, N, OC);
        prof_end(t0, PROF_POINTWISE, 0, (double)N * OC * sizeof(float));
    }
}

int matmul_grad16(void) { return g_bf16 && gemm_bf16_own(); }

// linear_backward on dout widened, where the tiles could not run a product.
static void backward_widened(float *dinp, float *dweight, const uint16_t *dout, int ld, const float *inp,
                             const float *weight, int N, int C, int OC, int accumulate) {
    float *f = widened(dout, ld, N, OC);
    CHECKF(f, "out of memory widening a bf16 output gradient (%d×%d)", N, OC);
    linear_backward(dinp, dweight, NULL, f, inp, weight, N, C, OC, accumulate);
    mem_free(f);
}

void linear_backward16(float *dinp, float *dweight, const uint16_t *dout, int ld, const float *inp,
                       const float *weight, int N, int C, int OC, int accumulate) {
    CHECKF(OC % 2 == 0, "a bf16 output gradient of odd width %d", OC);
    if (N == 0 || !matmul_grad16()) {
        backward_widened(dinp, dweight, dout, ld, inp, weight, N, C, OC, accumulate);
        return;
    }
    double t0 = prof_begin();
    Bf16Op b;
    uint16_t *room;
    if (dinp) {   // dinp (N,C) (+)= dout (N,OC) · weight (OC,C): A dout's rows as they lie
        if (weight_op(weight, N, C, OC, FORM_DINP, &b) ||
            room_for(gemm_bf16_room(N, C, OC, OP_PAIRS16, b.form), &room) ||
            gemm_bf16_op(N, C, OC, (Bf16Op){OP_PAIRS16, dout, ld}, b, dinp, C, accumulate, NULL, room)) {
            backward_widened(dinp, dweight, dout, ld, inp, weight, N, C, OC, accumulate);
            return;
        }
        prof_gemm(t0, PROF_GEMM_DX, N, C, OC);
    }
    if (dweight) weight_grad(dweight, dout, ld, 1, inp, N, C, OC);
}
