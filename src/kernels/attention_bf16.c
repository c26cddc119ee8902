// kernels/attention_bf16 — the attention products on the bf16 units: the
// same blocks as kernels/attention, with every product's operands rounded
// to bf16 as they are packed (kernels/gemm_bf16) and summed in fp32. The
// scores, softmax, log-sum-exp and gradients of the scores stay fp32; the
// probabilities are rounded to bf16 as they enter the product with the
// values, as flash attention does under bf16.
//
// One thread runs one (batch, head) in forward and one (batch, key/value
// head) in backward, its products single-threaded, so results do not
// depend on the thread count. Each thread packs the key and value forms of
// its head once and reuses them for every block of queries. Where a bf16
// pass holds q, k and v in their 16-bit store alone (a bound input,
// kernels/matmul), the forms are packed from it: no widening pass.
#include "kernels/attention.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/prof.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"

static int kp(int k) { return (k + 1) / 2; }

// A B operand of one head, prepared once and read by every block of
// queries: the tiles' panels where they are the unit, else gemm_bf16's
// pairs. B (K, NC): K the reduction (HS, or T keys), NC the columns.
typedef struct {
    uint16_t *p;
    int K, NC, panels;
} HeadB;

static size_t head_b_len(int K, int NC) {
    size_t pairs = (size_t)kp(K) * NC * 2, pan = gemm_bf16_panels_len(K, NC);
    return ((pairs > pan ? pairs : pan) + 31) & ~(size_t)31;
}

// src (rows or columns, fp32 or bf16) packed at dst.
static HeadB head_b(uint16_t *dst, Bf16Op src, int K, int NC) {
    HeadB h = {dst, K, NC, gemm_bf16_unit() == BF16_AMX};
    if (h.panels) gemm_bf16_panels(dst, src, K, NC);
    else if (src.form == OP_COLS32) bf16_pack_pairs_t(dst, src.p, src.ld, K, NC);
    else if (src.form == OP_ROWS32) bf16_pack_pairs(dst, src.p, src.ld, K, NC);
    else if (src.form == OP_COLS16) bf16_pairs_t16(dst, src.p, src.ld, K, NC);
    else bf16_pairs16(dst, src.p, src.ld, K, NC);
    return h;
}

// q, k and v as the products read them: the floats, or (h) their bf16
// values in the same layout, where a bf16 forward left them in their 16-bit
// store alone (matmul_bind_input16_only) and the head size is even (a pair
// never straddles two heads).
typedef struct {
    const float *f;
    const uint16_t *h;
    int ld;
} Qkv;

// qkv's n values as the products read them; f and h both NULL when the
// floats a bound store stands for cannot be had.
static Qkv qkv_source(const float *qkv, size_t n, int ld, int HS) {
    Qkv s = {NULL, HS % 2 == 0 ? matmul_input16(qkv, n) : NULL, ld};
    if (!s.h) s.f = matmul_input_fp32(qkv, n);
    return s;
}

// The operand from value `at` on: rows as A (the queries), rows as B, or
// columns as B (a head's keys or values transposed).
static Bf16Op qkv_op(Qkv s, size_t at, Bf16Form f16, Bf16Form f32) {
    return s.h ? (Bf16Op){f16, s.h + at, s.ld} : (Bf16Op){f32, s.f + at, s.ld};
}
static Bf16Op rows_a(Qkv s, size_t at) { return qkv_op(s, at, OP_PAIRS16, OP_ROWS32); }
static Bf16Op rows_b(Qkv s, size_t at) { return qkv_op(s, at, OP_ROWS16, OP_ROWS32); }
static Bf16Op cols_b(Qkv s, size_t at) { return qkv_op(s, at, OP_COLS16, OP_COLS32); }

// The operand from row k0 and column c0 on: multiples of 32 on the tiles, even on the vector units.
static Bf16Op head_b_at(const HeadB *h, int k0, int c0) {
    if (h->panels) return gemm_bf16_panels_at(h->p, h->K, k0, c0);
    return (Bf16Op){OP_PAIRS16, h->p + 2 * ((size_t)(k0 / 2) * h->NC + c0), h->NC};
}

// The first key of a block: the panels are read from multiples of 32.
static int key_align(const HeadB *h) { return h->panels ? 32 : 2; }

// Room gemm_bf16_op packs a block's other operands into on the vector units:
// the largest A (a block's queries, probabilities or dS rows; dS^T and P^T
// over the keys), then a block's queries or output gradients as B.
static size_t room_len(int T, int HS) {
    size_t a = gemm_bf16_room(ATT_BQ, 0, T > HS ? T : HS, OP_ROWS32, OP_PAIRS16);
    size_t at = gemm_bf16_room(T, 0, ATT_BQ, OP_ROWS32, OP_PAIRS16);
    return (a > at ? a : at) + gemm_bf16_room(0, HS, ATT_BQ, OP_PAIRS16, OP_ROWS32) + 32;
}

// Per-thread bf16 scratch (in values) for head size HS and T positions:
// three prepared operands of a head and the room.
static size_t thread_values(int T, int HS) {
    return 2 * head_b_len(HS, T) + head_b_len(T, HS) + room_len(T, HS);
}

// The scratch of every thread, kept on the calling thread and grown on demand.
static _Thread_local void *g_buf;
static _Thread_local size_t g_bytes;

static uint16_t *thread_scratch(int T, int HS, int threads) {
    return mem_grow(&g_buf, &g_bytes, MEM_WORKSPACE, (size_t)threads * thread_values(T, HS) * sizeof(uint16_t));
}

// C (+)= A · B on the bf16 units; the operands always fit the room.
static void product(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate, uint16_t *room) {
    int rc = gemm_bf16_op(R, NC, K, a, b, C, ldc, accumulate, NULL, room);
    CHECKF(rc == 0, "attention's bf16 product (%d×%d×%d) failed", R, NC, K);
}

// S (nq, nk) = scale · q (nq,HS) · k^T for the keys from k0, then the causal
// softmax rows (kernels/attention's, the scale applied there: row i sees
// columns lo[i] .. q0 + i).
static void scores(float *S, Bf16Op q, const HeadB *kb, int nq, int k0, int nk, int HS, float scale, int q0,
                   const int *lo, float *lse_out, const float *lse_in, uint16_t *room) {
    product(nq, nk, HS, q, head_b_at(kb, 0, k0), S, nk, 0, room);
    attention_softmax_rows(S, nq, nk, q0, lo, scale, lse_out, lse_in);
}

// Under document masking a block's keys start where the prepared operands
// may be read from (key_align), the masked columns before its first
// document zero.
int attention_forward_bf16(float *out, float *lse, const float *qkv, const int *start, float *scratch, int B, int T,
                           int NH, int NKV, int HS) {
    int nth = omp_get_max_threads();
    int C = NH * HS, ld = (NH + 2 * NKV) * HS, group = NH / NKV;
    uint16_t *buf = thread_scratch(T, HS, nth);
    Qkv src = qkv_source(qkv, (size_t)B * T * ld, ld, HS);
    if (!buf || (!src.f && !src.h)) return -1;
    double t0 = prof_begin();
    float scale = 1.0f / sqrtf((float)HS);
    size_t per = thread_values(T, HS);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, g = h / group, th = omp_get_thread_num(), lo[ATT_BQ];
        const int *st = start ? start + (size_t)b * T : NULL;
        float *S = scratch + (size_t)th * 2 * ATT_BQ * T;
        size_t row = (size_t)b * T * ld, q = row + (size_t)h * HS, k = row + C + (size_t)g * HS, v = k + NKV * HS;
        float *o = out + (size_t)b * T * C + h * HS;
        float *l = lse + ((size_t)b * NH + h) * T;
        uint16_t *f = buf + (size_t)th * per, *room = f + 2 * head_b_len(HS, T) + head_b_len(T, HS);
        HeadB kb = head_b(f, cols_b(src, k), HS, T);                    // k^T (HS, T)
        HeadB vb = head_b(f + head_b_len(HS, T), rows_b(src, v), T, HS);   // v (T, HS)
        for (int q0 = 0; q0 < T; q0 += ATT_BQ) {
            int nq = T - q0 < ATT_BQ ? T - q0 : ATT_BQ, k0 = attention_block_keys(st, q0, nq, key_align(&kb), lo);
            int nk = q0 + nq - k0;
            scores(S, rows_a(src, q + (size_t)q0 * ld), &kb, nq, k0, nk, HS, scale, q0 - k0, st ? lo : NULL, l + q0,
                   NULL, room);
            product(nq, HS, nk, (Bf16Op){OP_ROWS32, S, nk}, head_b_at(&vb, k0, 0), o + (size_t)q0 * C, C, 0, room);
        }
    }
    prof_end(t0, PROF_ATTENTION, 4.0 * NH * attention_pairs(start, B, T) * HS, 0);
    return 0;
}

// The prepared operands of one key/value head for backward (per thread).
typedef struct Forms {
    HeadB kt, vt;   // k^T and v^T (HS, T): the scores, dP = dO · v^T
    HeadB kr;       // k (T, HS): dq = dS · k
    uint16_t *room;
} Forms;

// d (nk, HS) += a (nk, nq) · b (nq, HS) on rows [0, had), d := the product on
// the rest: the key rows a head's diagonal block reaches first are written,
// no zeroing pass before (the same bits: the sums start from 0 either way).
// a is dS^T or P^T, read transposed from its (nq, nk) rows.
static void kv_rows(float *d, int ldd, const float *a, int nq, Bf16Op b, int nk, int had, int HS, uint16_t *room) {
    if (had > 0) product(had, HS, nq, (Bf16Op){OP_COLS32, a, nk}, b, d, ldd, 1, room);
    product(nk - had, HS, nq, (Bf16Op){OP_COLS32, a + had, nk}, b, d + (size_t)had * ldd, ldd, 0, room);
}

// One block of nq queries from q0 of query head h: dq written, dk and dv
// added to (the group's first head writes the block's own key rows); st the
// row's document starts or NULL.
static void backward_block(const Forms *f, float *P, float *dP, Qkv src, size_t q, float *dq, int ld, const float *o,
                           const float *dO, int C, float *dk, float *dv, const float *l, int HS, float scale,
                           const int *st, int q0, int nq, int first) {
    int lo[ATT_BQ], k0 = attention_block_keys(st, q0, nq, key_align(&f->kt), lo), nk = q0 + nq - k0;
    int had = first ? q0 - k0 : nk;   // key rows [k0, k0 + had) hold earlier blocks' sums, the rest none yet
    size_t qb = q + (size_t)q0 * ld;
    const float *dOb = dO + (size_t)q0 * C;
    scores(P, rows_a(src, qb), &f->kt, nq, k0, nk, HS, scale, q0 - k0, st ? lo : NULL, NULL, l + q0, f->room);
    product(nq, nk, HS, (Bf16Op){OP_ROWS32, dOb, C}, head_b_at(&f->vt, 0, k0), dP, nk, 0, f->room);
    // dS with the scale of both its products in it
    attention_ds_rows(dP, P, o + (size_t)q0 * C, dOb, C, nq, nk, HS, scale);
    // dq = dS · k
    product(nq, HS, nk, (Bf16Op){OP_ROWS32, dP, nk}, head_b_at(&f->kr, k0, 0), dq + (size_t)q0 * ld, ld, 0, f->room);
    // dk += dS^T · q, dv += P^T · dO
    kv_rows(dk + (size_t)k0 * ld, ld, dP, nq, rows_b(src, qb), nk, had, HS, f->room);
    kv_rows(dv + (size_t)k0 * ld, ld, P, nq, (Bf16Op){OP_ROWS32, dOb, C}, nk, had, HS, f->room);
}

int attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const int *start, const float *out,
                            const float *lse, float *scratch, int B, int T, int NH, int NKV, int HS) {
    int nth = omp_get_max_threads();
    int C = NH * HS, ld = (NH + 2 * NKV) * HS, group = NH / NKV;
    uint16_t *buf = thread_scratch(T, HS, nth);
    Qkv src = qkv_source(qkv, (size_t)B * T * ld, ld, HS);
    if (!buf || (!src.f && !src.h)) return -1;
    double t0 = prof_begin();
    float scale = 1.0f / sqrtf((float)HS);
    size_t per = thread_values(T, HS), lt = head_b_len(HS, T);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bg = 0; bg < B * NKV; bg++) {
        int b = bg / NKV, g = bg % NKV, th = omp_get_thread_num();
        float *P = scratch + (size_t)th * 2 * ATT_BQ * T, *dP = P + (size_t)ATT_BQ * T;
        size_t row = (size_t)b * T * ld, k = row + C + (size_t)g * HS, v = k + NKV * HS;
        float *dk = dqkv + k, *dv = dk + NKV * HS;
        const int *st = start ? start + (size_t)b * T : NULL;
        uint16_t *base = buf + (size_t)th * per;
        Forms f = {.kt = head_b(base, cols_b(src, k), HS, T),
                   .vt = head_b(base + lt, cols_b(src, v), HS, T),
                   .kr = head_b(base + 2 * lt, rows_b(src, k), T, HS),
                   .room = base + 2 * lt + head_b_len(T, HS)};
        for (int h = g * group; h < (g + 1) * group; h++) {
            const float *o = out + (size_t)b * T * C + h * HS;
            const float *dO = dout + (size_t)b * T * C + h * HS, *l = lse + ((size_t)b * NH + h) * T;
            float *dq = dqkv + row + h * HS;
            for (int q0 = 0; q0 < T; q0 += ATT_BQ)
                backward_block(&f, P, dP, src, row + (size_t)h * HS, dq, ld, o, dO, C, dk, dv, l, HS, scale, st, q0,
                               T - q0 < ATT_BQ ? T - q0 : ATT_BQ, h == g * group);
        }
    }
    prof_end(t0, PROF_ATTENTION, 8.0 * NH * attention_pairs(start, B, T) * HS, 0);
    return 0;
}
