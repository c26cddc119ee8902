// model/llama — LLaMA (Touvron et al. 2023) as tessera runs it: token
// embeddings only (no position table), pre-norm blocks of RMSNorm → causal
// attention with rotary positions and grouped-query heads → projection, and
// RMSNorm → SwiGLU MLP, each added to the residual stream, no biases, a
// final RMSNorm and an untied output head. Names are Hugging Face
// LlamaForCausalLM's without "model.".
#include <omp.h>
#include <stddef.h>
#include <string.h>

#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/pointwise.h"
#include "kernels/rope.h"
#include "model/arch.h"

static const TensorDesc embed[] = {
    {"embed_tokens.weight", ROLE_TOK_EMB, 2, {DIM_VP, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
};

// The block's tensors; the enum is their index in this table (BlockRun.w).
// q, k and v are one after another in the flat buffer (on a TP rank, its
// heads of each), and so are gate and up: each trio or pair is one GEMM.
enum { LN1_W, Q_W, K_W, V_W, O_W, LN2_W, GATE_W, UP_W, DOWN_W, NBLOCK };
static const TensorDesc block[NBLOCK] = {
    [LN1_W] = {"input_layernorm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    [Q_W] = {"self_attn.q_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    [K_W] = {"self_attn.k_proj.weight", ROLE_LINEAR, 2, {DIM_KV, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    [V_W] = {"self_attn.v_proj.weight", ROLE_LINEAR, 2, {DIM_KV, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    [O_W] = {"self_attn.o_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_C}, 1, 0, INIT_NORMAL, STD_RESID},
    [LN2_W] = {"post_attention_layernorm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    [GATE_W] = {"mlp.gate_proj.weight", ROLE_LINEAR, 2, {DIM_F, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    [UP_W] = {"mlp.up_proj.weight", ROLE_LINEAR, 2, {DIM_F, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    [DOWN_W] = {"mlp.down_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_F}, 1, 0, INIT_NORMAL, STD_RESID},
};

enum { NORM_W, HEAD_W };
static const TensorDesc final[] = {
    [NORM_W] = {"norm.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    [HEAD_W] = {"lm_head.weight", ROLE_HEAD, 2, {DIM_VP, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
};

// Saved activations of one block (BlockRun.act). Ns rows are the rank's
// rows of the residual stream; the norms' outputs are kept gathered.
enum {
    A_LN1, A_LN1_RSTD,   // (N,C), (Ns)
    A_QKV,               // (N,Cl + 2·KVl): q, k (both rotated) and v of the rank's heads
    A_ATTY,              // (N,Cl)
    A_LSE,               // (B,NHl,T)
    A_RES2,              // (Ns,C) residual after attention
    A_LN2, A_LN2_RSTD,   // (N,C), (Ns)
    A_GU,                // (N,2·Fl): gate then up
    A_H,                 // (N,Fl) silu(gate)·up
    A_RES3,              // (Ns,C) block output
    NACT
};
enum {
    S_DH,     // (N,Fl)
    S_DGU,    // (N,2·Fl)
    S_DQKV,   // (N,Cl + 2·KVl)
    S_ATT,    // the attention kernel's per-thread scratch
    S_DY,     // sequence parallel: (N,C) the gradient at a row-parallel output, gathered; else none
    S_NORMG,  // sequence parallel: (2,C) the norms' partial gain gradients; else none
    NSCR
};

static size_t qkv_width(const LocalDims *d) { return (size_t)d->Cl + 2 * (size_t)d->KVl; }

static size_t act_floats(const LocalDims *d, int i) {
    size_t N = (size_t)d->N, Ns = (size_t)d->Ns;
    switch (i) {
    case A_LN1: case A_LN2: return N * d->C;
    case A_RES2: case A_RES3: return Ns * d->C;
    case A_LN1_RSTD: case A_LN2_RSTD: return Ns;
    case A_QKV: return N * qkv_width(d);
    case A_ATTY: return N * d->Cl;
    case A_LSE: return N * d->NHl;
    case A_GU: return N * 2 * d->Fl;
    case A_H: return N * d->Fl;
    }
    return 0;
}

static size_t scratch_floats(const LocalDims *d, int i) {
    switch (i) {
    case S_DH: return (size_t)d->N * d->Fl;
    case S_DGU: return (size_t)d->N * 2 * d->Fl;
    case S_DQKV: return (size_t)d->N * qkv_width(d);
    case S_ATT: return attention_scratch_floats(d->T, omp_get_max_threads());
    case S_DY: return d->sp ? (size_t)d->N * d->C : 0;
    case S_NORMG: return d->sp ? 2 * (size_t)d->C : 0;
    }
    return 0;
}

static void stored(const BlockRun *r, int j) { arch_stored(&arch_llama, r, j); }

// q, k, v (and gate, up) are one matrix: checked, as the table's order
// promises.
static void check_fused(const BlockRun *r, float *const *t) {
    const LocalDims *d = r->d;
    size_t C = (size_t)d->C;
    CHECKF(t[K_W] == t[Q_W] + (size_t)d->Cl * C && t[V_W] == t[K_W] + (size_t)d->KVl * C &&
           t[UP_W] == t[GATE_W] + (size_t)d->Fl * C, "LLaMA's q/k/v or gate/up tensors are not adjacent");
}

static void block_forward(const BlockRun *r) {
    float *const *w = r->w, *const *a = r->act;
    const LocalDims *d = r->d;
    int N = d->N, Ns = d->Ns, C = d->C, HS = d->Cl / d->NHl;
    float eps = config_norm_eps(r->cfg);
    check_fused(r, w);
    // attention: res2 = x + attn(rope(rmsnorm(x)·[Wq;Wk;Wv]))·Wo, heads split over TP
    rmsnorm_forward(arch_own_rows(d, a[A_LN1]), a[A_LN1_RSTD], r->x, w[LN1_W], Ns, C, eps);
    tp_gather(r->tp, a[A_LN1], N, C);
    stored(r, A_LN1);
    linear_forward(a[A_QKV], a[A_LN1], w[Q_W], NULL, N, C, (int)qkv_width(d));   // column parallel
    rope_forward(a[A_QKV], d->B, d->T, r->kv ? r->kv->pos : 0, d->NHl + d->NKVl, HS, (int)qkv_width(d),
                 config_rope_theta(r->cfg));
    stored(r, A_QKV);
    arch_attention(r, a[A_ATTY], a[A_LSE], a[A_QKV], r->scr[S_ATT], d->NHl, d->NKVl, HS);
    stored(r, A_ATTY);
    linear_forward(r->tmp, a[A_ATTY], w[O_W], NULL, N, d->Cl, C);                // row parallel: partial sums
    residual_forward(a[A_RES2], r->x, tp_reduce(r->tp, r->tmp, N, C), NULL, Ns, C);
    stored(r, A_RES2);
    // MLP: res3 = res2 + swiglu(rmsnorm(res2)·[Wg;Wu])·Wd, columns split over TP
    rmsnorm_forward(arch_own_rows(d, a[A_LN2]), a[A_LN2_RSTD], a[A_RES2], w[LN2_W], Ns, C, eps);
    tp_gather(r->tp, a[A_LN2], N, C);
    stored(r, A_LN2);
    linear_forward(a[A_GU], a[A_LN2], w[GATE_W], NULL, N, C, 2 * d->Fl);       // column parallel
    stored(r, A_GU);
    swiglu_forward(a[A_H], a[A_GU], N, d->Fl);
    stored(r, A_H);
    linear_forward(r->tmp, a[A_H], w[DOWN_W], NULL, N, d->Fl, C);              // row parallel: partial sums
    residual_forward(a[A_RES3], a[A_RES2], tp_reduce(r->tp, r->tmp, N, C), NULL, Ns, C);
}

// The attention core again, from the saved (rotated) q/k/v.
static void core_forward(const BlockRun *r) {
    const LocalDims *d = r->d;
    attention_forward(r->act[A_ATTY], r->act[A_LSE], r->act[A_QKV], r->scr[S_ATT], d->B, d->T, d->NHl, d->NKVl,
                      d->Cl / d->NHl);
    stored(r, A_ATTY);
}

// dres holds d(block output) and leaves with d(block input).
static void block_backward(const BlockRun *r) {
    float *const *w = r->w, *const *g = r->g, *const *a = r->act;
    const LocalDims *d = r->d;
    int N = d->N, Ns = d->Ns, C = d->C, sp = d->sp, HS = d->Cl / d->NHl, qw = (int)qkv_width(d);
    float *dh = r->scr[S_DH], *dgu = r->scr[S_DGU], *dqkv = r->scr[S_DQKV], *dbtc = r->tmp;
    check_fused(r, w);
    check_fused(r, g);
    static const int norms[2] = {LN2_W, LN1_W};
    if (sp) memset(r->scr[S_NORMG], 0, 2 * (size_t)C * sizeof(float));
    float *gn[2];
    for (int k = 0; k < 2; k++) gn[k] = sp ? r->scr[S_NORMG] + (size_t)k * C : g[norms[k]];
    // MLP: res3 = res2 + swiglu(rmsnorm(res2)·[Wg;Wu])·Wd
    linear_backward(dh, g[DOWN_W], NULL, arch_rows_of_dres(r, r->scr[S_DY]), a[A_H], w[DOWN_W], N, d->Fl, C, 0);
    swiglu_backward(dgu, a[A_GU], dh, N, d->Fl);
    linear_backward(dbtc, g[GATE_W], NULL, dgu, a[A_LN2], w[GATE_W], N, C, 2 * d->Fl, 0);   // partial over TP
    rmsnorm_backward(r->dres, gn[0], tp_reduce(r->tp, dbtc, N, C), a[A_RES2], w[LN2_W], a[A_LN2_RSTD], Ns, C);
    // attention: res2 = x + attn(rope(rmsnorm(x)·[Wq;Wk;Wv]))·Wo
    linear_backward(dbtc, g[O_W], NULL, arch_rows_of_dres(r, r->scr[S_DY]), a[A_ATTY], w[O_W], N, d->Cl, C, 0);
    attention_backward(dqkv, dbtc, a[A_QKV], a[A_ATTY], a[A_LSE], r->scr[S_ATT], d->B, d->T, d->NHl, d->NKVl, HS);
    rope_backward(dqkv, d->B, d->T, 0, d->NHl + d->NKVl, HS, qw, config_rope_theta(r->cfg));
    linear_backward(dbtc, g[Q_W], NULL, dqkv, a[A_LN1], w[Q_W], N, C, qw, 0);   // partial over TP
    rmsnorm_backward(r->dres, gn[1], tp_reduce(r->tp, dbtc, N, C), r->x, w[LN1_W], a[A_LN1_RSTD], Ns, C);
    arch_norm_grads_done(r, r->scr[S_NORMG], 2, norms);
}

static void final_forward(const BlockRun *r) {
    const LocalDims *d = r->d;
    rmsnorm_forward(arch_own_rows(d, r->act[0]), r->act[2], r->x, r->w[NORM_W], d->Ns, d->C, config_norm_eps(r->cfg));
    tp_gather(r->tp, r->act[0], d->N, d->C);   // the vocabulary-parallel head reads every row
}

// tmp holds d(output), partial sums over the vocabulary slices.
static void final_backward(const BlockRun *r) {
    const LocalDims *d = r->d;
    static const int norms[1] = {NORM_W};
    if (d->sp) memset(r->scr[S_NORMG], 0, (size_t)d->C * sizeof(float));
    float *gw = d->sp ? r->scr[S_NORMG] : r->g[NORM_W];
    rmsnorm_backward(r->dres, gw, tp_reduce(r->tp, r->tmp, d->N, d->C), r->x, r->w[NORM_W], r->act[2], d->Ns, d->C);
    arch_norm_grads_done(r, r->scr[S_NORMG], 1, norms);
}

static const char *linear_name(const LocalDims *d, int in, int out) {
    if (in == d->C && out == (int)qkv_width(d)) return "qkv";
    if (in == d->Cl && out == d->C) return "o_proj";
    if (in == d->C && out == 2 * d->Fl) return "gate+up";
    if (in == d->Fl && out == d->C) return "down_proj";
    return NULL;
}

const Arch arch_llama = {
    .block_prefix = "layers.%d.",
    .part = {embed, block, final},
    .n = {1, NBLOCK, 2},
    .tied_head = 0,
    .has_train = 1,
    .nact = NACT,
    .act_out = A_RES3,
    .act_keep32 = 1u << A_LN1_RSTD | 1u << A_LN2_RSTD | 1u << A_LSE | 1u << A_RES3,
    .nscratch = NSCR,
    .ncore = 2,
    .core = {A_ATTY, A_LSE},
    .core_forward = core_forward,
    .act_floats = act_floats,
    .scratch_floats = scratch_floats,
    .block_forward = block_forward,
    .block_backward = block_backward,
    .final_forward = final_forward,
    .final_backward = final_backward,
    .linear_name = linear_name,
};
