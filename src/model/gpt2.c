// model/gpt2 — GPT-2 (Radford et al. 2019) as tessera runs it: learned
// token and position embeddings, pre-norm blocks of LayerNorm → fused causal
// attention → projection and LayerNorm → GELU MLP, each added to the
// residual stream, a final LayerNorm, and the output head tied to the token
// embedding. Names are Hugging Face GPT2LMHeadModel's without
// "transformer.".
#include <omp.h>
#include <stddef.h>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/pointwise.h"
#include "model/arch.h"

static const TensorDesc embed[] = {
    {"wte.weight", ROLE_TOK_EMB, 2, {DIM_VP, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},
    {"wpe.weight", ROLE_POS_EMB, 2, {DIM_S, DIM_C}, -1, 0, INIT_NORMAL, STD_BASE},
};

// The block's tensors; the enum is their index in this table (BlockRun.w).
enum { LN1_W, LN1_B, QKV_W, QKV_B, ATT_W, ATT_B, LN2_W, LN2_B, FC_W, FC_B, PROJ_W, PROJ_B, NBLOCK };
static const TensorDesc block[NBLOCK] = {
    [LN1_W] = {"ln_1.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    [LN1_B] = {"ln_1.bias", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
    // q, k and v stacked on a leading dimension of 3, so a head slice is one
    // range of dimension 1 (column parallel)
    [QKV_W] = {"attn.c_attn.weight", ROLE_QKV, 3, {DIM_3, DIM_C, DIM_C}, 1, 0, INIT_NORMAL, STD_BASE},
    [QKV_B] = {"attn.c_attn.bias", ROLE_QKV_BIAS, 2, {DIM_3, DIM_C}, 1, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
    [ATT_W] = {"attn.c_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_C}, 1, 0, INIT_NORMAL, STD_RESID},   // row parallel
    [ATT_B] = {"attn.c_proj.bias", ROLE_BIAS, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
    [LN2_W] = {"ln_2.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    [LN2_B] = {"ln_2.bias", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
    [FC_W] = {"mlp.c_fc.weight", ROLE_LINEAR, 2, {DIM_F, DIM_C}, 0, 0, INIT_NORMAL, STD_BASE},          // column parallel
    [FC_B] = {"mlp.c_fc.bias", ROLE_BIAS, 1, {DIM_F}, 0, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
    [PROJ_W] = {"mlp.c_proj.weight", ROLE_LINEAR, 2, {DIM_C, DIM_F}, 1, 0, INIT_NORMAL, STD_RESID},     // row parallel
    [PROJ_B] = {"mlp.c_proj.bias", ROLE_BIAS, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
};

enum { LNF_W, LNF_B };
static const TensorDesc final[] = {
    [LNF_W] = {"ln_f.weight", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ONE, STD_BASE},
    [LNF_B] = {"ln_f.bias", ROLE_NORM, 1, {DIM_C}, -1, PARAM_NO_DECAY, INIT_ZERO, STD_BASE},
};

// Saved activations of one block for the backward pass (BlockRun.act).
enum {
    A_LN1, A_LN1_MEAN, A_LN1_RSTD,   // (N,C), (N), (N)
    A_QKV,                           // (N,3·Cl)
    A_ATTY,                          // (N,Cl)
    A_LSE,                           // (B,NHl,T)
    A_RES2,                          // (N,C) residual after attention
    A_LN2, A_LN2_MEAN, A_LN2_RSTD,   // (N,C), (N), (N)
    A_FCH, A_FCH_GELU,               // (N,Fl)
    A_RES3,                          // (N,C) block output
    NACT
};
// Scratch shared by the blocks (BlockRun.scr).
enum {
    S_DFCH,   // (N,Fl)
    S_DQKV,   // (N,3·Cl)
    S_ATT,    // the attention kernel's per-thread scratch
    NSCR
};

static size_t act_floats(const LocalDims *d, int i) {
    size_t N = (size_t)d->N;
    switch (i) {
    case A_LN1: case A_RES2: case A_LN2: case A_RES3: return N * d->C;
    case A_LN1_MEAN: case A_LN1_RSTD: case A_LN2_MEAN: case A_LN2_RSTD: return N;
    case A_QKV: return N * 3 * d->Cl;
    case A_ATTY: return N * d->Cl;
    case A_LSE: return N * d->NHl;
    case A_FCH: case A_FCH_GELU: return N * d->Fl;
    }
    return 0;
}

static size_t scratch_floats(const LocalDims *d, int i) {
    switch (i) {
    case S_DFCH: return (size_t)d->N * d->Fl;
    case S_DQKV: return (size_t)d->N * 3 * d->Cl;
    case S_ATT: return attention_scratch_floats(d->T, omp_get_max_threads());
    }
    return 0;
}

static void block_forward(const BlockRun *r) {
    float *const *w = r->w, *const *a = r->act;
    const LocalDims *d = r->d;
    int N = d->N, C = d->C;
    layernorm_forward(a[A_LN1], a[A_LN1_MEAN], a[A_LN1_RSTD], r->x, w[LN1_W], w[LN1_B], N, C);
    linear_forward(a[A_QKV], a[A_LN1], w[QKV_W], w[QKV_B], N, C, 3 * d->Cl);
    attention_forward(a[A_ATTY], a[A_LSE], a[A_QKV], r->scr[S_ATT], d->B, d->T, d->Cl, d->NHl);
    linear_forward(r->tmp, a[A_ATTY], w[ATT_W], NULL, N, d->Cl, C);
    residual_forward(a[A_RES2], r->x, r->tmp, w[ATT_B], N, C);
    layernorm_forward(a[A_LN2], a[A_LN2_MEAN], a[A_LN2_RSTD], a[A_RES2], w[LN2_W], w[LN2_B], N, C);
    linear_forward(a[A_FCH], a[A_LN2], w[FC_W], w[FC_B], N, C, d->Fl);
    gelu_forward(a[A_FCH_GELU], a[A_FCH], (size_t)N * d->Fl);
    linear_forward(r->tmp, a[A_FCH_GELU], w[PROJ_W], NULL, N, d->Fl, C);
    residual_forward(a[A_RES3], a[A_RES2], r->tmp, w[PROJ_B], N, C);
}

// dres holds d(block output) and leaves with d(block input).
static void block_backward(const BlockRun *r) {
    float *const *w = r->w, *const *g = r->g, *const *a = r->act;
    const LocalDims *d = r->d;
    int N = d->N, C = d->C;
    float *dfch = r->scr[S_DFCH], *dqkv = r->scr[S_DQKV], *dbtc = r->tmp;
    // MLP: res3 = res2 + gelu(ln2(res2)·Wfc + bfc)·Wp + bp
    linear_backward(dfch, g[PROJ_W], g[PROJ_B], r->dres, a[A_FCH_GELU], w[PROJ_W], N, d->Fl, C, 0);
    gelu_backward(dfch, a[A_FCH], dfch, (size_t)N * d->Fl);
    linear_backward(dbtc, g[FC_W], g[FC_B], dfch, a[A_LN2], w[FC_W], N, C, d->Fl, 0);
    layernorm_backward(r->dres, g[LN2_W], g[LN2_B], dbtc, a[A_RES2], w[LN2_W], a[A_LN2_MEAN], a[A_LN2_RSTD], N, C);
    // Attention: res2 = x + attn(ln1(x)·Wqkv + bqkv)·Wo + bo
    linear_backward(dbtc, g[ATT_W], g[ATT_B], r->dres, a[A_ATTY], w[ATT_W], N, d->Cl, C, 0);
    attention_backward(dqkv, dbtc, a[A_QKV], a[A_ATTY], a[A_LSE], r->scr[S_ATT], d->B, d->T, d->Cl, d->NHl);
    linear_backward(dbtc, g[QKV_W], g[QKV_B], dqkv, a[A_LN1], w[QKV_W], N, C, 3 * d->Cl, 0);
    layernorm_backward(r->dres, g[LN1_W], g[LN1_B], dbtc, r->x, w[LN1_W], a[A_LN1_MEAN], a[A_LN1_RSTD], N, C);
}

static void final_forward(const BlockRun *r) {
    layernorm_forward(r->act[0], r->act[1], r->act[2], r->x, r->w[LNF_W], r->w[LNF_B], r->d->N, r->d->C);
}

static void final_backward(const BlockRun *r) {
    layernorm_backward(r->dres, r->g[LNF_W], r->g[LNF_B], r->tmp, r->x, r->w[LNF_W], r->act[1], r->act[2], r->d->N,
                       r->d->C);
}

const Arch arch_gpt2 = {
    .block_prefix = "h.%d.",
    .part = {embed, block, final},
    .n = {2, NBLOCK, 2},
    .tied_head = 1,
    .has_train = 1,
    .nact = NACT,
    .act_out = A_RES3,
    .nscratch = NSCR,
    .act_floats = act_floats,
    .scratch_floats = scratch_floats,
    .block_forward = block_forward,
    .block_backward = block_backward,
    .final_forward = final_forward,
    .final_backward = final_backward,
};
