// model/gpt2 — GPT-2 (Radford et al. 2019) as tessera runs it: learned
// token and position embeddings, pre-norm blocks of LayerNorm → fused causal
// attention → projection and LayerNorm → GELU MLP, each added to the
// residual stream, a final LayerNorm, and the output head tied to the token
// embedding. Names are Hugging Face GPT2LMHeadModel's without
// "transformer.".
#include <omp.h>
#include <stddef.h>
#include <string.h>

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
// Ns rows are the rank's rows of the residual stream (all N without
// sequence parallelism); the norms' outputs are kept gathered, all N rows,
// as the column-parallel linears read them.
enum {
    A_LN1, A_LN1_MEAN, A_LN1_RSTD,   // (N,C), (Ns), (Ns)
    A_QKV,                           // (N,3·Cl)
    A_ATTY,                          // (N,Cl)
    A_LSE,                           // (B,NHl,T)
    A_RES2,                          // (Ns,C) residual after attention
    A_LN2, A_LN2_MEAN, A_LN2_RSTD,   // (N,C), (Ns), (Ns)
    A_FCH, A_FCH_GELU,               // (N,Fl)
    A_RES3,                          // (Ns,C) block output
    NACT
};
// Scratch shared by the blocks (BlockRun.scr).
enum {
    S_DFCH,   // (N,Fl)
    S_DQKV,   // (N,3·Cl)
    S_ATT,    // the attention kernel's per-thread scratch
    S_DY,     // sequence parallel: (N,C) the gradient at a row-parallel output, gathered; else none
    S_NORMG,  // sequence parallel: (4,C) the norms' partial gain and bias gradients; else none
    NSCR
};

static size_t act_floats(const LocalDims *d, int i) {
    size_t N = (size_t)d->N, Ns = (size_t)d->Ns;
    switch (i) {
    case A_LN1: case A_LN2: return N * d->C;
    case A_RES2: case A_RES3: return Ns * d->C;
    case A_LN1_MEAN: case A_LN1_RSTD: case A_LN2_MEAN: case A_LN2_RSTD: return Ns;
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
    case S_DY: return d->sp ? (size_t)d->N * d->C : 0;
    case S_NORMG: return d->sp ? 4 * (size_t)d->C : 0;
    }
    return 0;
}

static void stored(const BlockRun *r, int j) { arch_stored(&arch_gpt2, r, j); }

static void block_forward(const BlockRun *r) {
    float *const *w = r->w, *const *a = r->act;
    const LocalDims *d = r->d;
    int N = d->N, Ns = d->Ns, C = d->C;
    // attention: res2 = x + attn(ln1(x)·Wqkv + bqkv)·Wo + bo, heads split over TP
    layernorm_forward(arch_own_rows(d, a[A_LN1]), a[A_LN1_MEAN], a[A_LN1_RSTD], r->x, w[LN1_W], w[LN1_B], Ns, C);
    tp_gather(r->tp, a[A_LN1], N, C);
    stored(r, A_LN1);
    if (!arch_linear16(&arch_gpt2, r, A_QKV, a[A_LN1], w[QKV_W], w[QKV_B], N, C, 3 * d->Cl)) {
        linear_forward(a[A_QKV], a[A_LN1], w[QKV_W], w[QKV_B], N, C, 3 * d->Cl);   // column parallel
        stored(r, A_QKV);
    }
    arch_attention(r, a[A_ATTY], a[A_LSE], a[A_QKV], r->scr[S_ATT], d->NHl, d->NHl, d->Cl / d->NHl);
    stored(r, A_ATTY);
    linear_forward(r->tmp, a[A_ATTY], w[ATT_W], NULL, N, d->Cl, C);            // row parallel: partial sums
    residual_forward(a[A_RES2], r->x, tp_reduce(r->tp, r->tmp, N, C), w[ATT_B], Ns, C);
    stored(r, A_RES2);
    // MLP: res3 = res2 + gelu(ln2(res2)·Wfc + bfc)·Wp + bp, columns split over TP
    layernorm_forward(arch_own_rows(d, a[A_LN2]), a[A_LN2_MEAN], a[A_LN2_RSTD], a[A_RES2], w[LN2_W], w[LN2_B], Ns, C);
    tp_gather(r->tp, a[A_LN2], N, C);
    stored(r, A_LN2);
    int fn16 = arch_fn16(&arch_gpt2, r, A_FCH, A_FCH_GELU);   // GELU from and into the 16-bit stores
    int in16 = fn16 && !linear_forward16(r->act16[A_FCH], a[A_FCH], a[A_LN2], w[FC_W], w[FC_B], N, C, d->Fl);
    if (!in16) linear_forward(a[A_FCH], a[A_LN2], w[FC_W], w[FC_B], N, C, d->Fl);   // column parallel
    if (fn16) {
        gelu_forward16(r->act16[A_FCH_GELU], r->act16[A_FCH], in16 ? NULL : a[A_FCH], (size_t)N * d->Fl);
    } else {
        stored(r, A_FCH);
        gelu_forward(a[A_FCH_GELU], a[A_FCH], (size_t)N * d->Fl);
        stored(r, A_FCH_GELU);
    }
    linear_forward(r->tmp, a[A_FCH_GELU], w[PROJ_W], NULL, N, d->Fl, C);       // row parallel: partial sums
    residual_forward(a[A_RES3], a[A_RES2], tp_reduce(r->tp, r->tmp, N, C), w[PROJ_B], Ns, C);
}

// The attention core again, from the saved q/k/v (selective recomputation).
static void core_forward(const BlockRun *r) {
    const LocalDims *d = r->d;
    attention_forward(r->act[A_ATTY], r->act[A_LSE], r->act[A_QKV], r->doc_start, r->scr[S_ATT], d->B, d->T, d->NHl,
                      d->NHl, d->Cl / d->NHl);
    stored(r, A_ATTY);
}

// dres holds d(block output) and leaves with d(block input).
static void block_backward(const BlockRun *r) {
    float *const *w = r->w, *const *g = r->g, *const *a = r->act;
    const LocalDims *d = r->d;
    int N = d->N, Ns = d->Ns, C = d->C, sp = d->sp;
    float *dfch = r->scr[S_DFCH], *dqkv = r->scr[S_DQKV], *dbtc = r->tmp;
    static const int norms[4] = {LN2_W, LN2_B, LN1_W, LN1_B};
    if (sp) memset(r->scr[S_NORMG], 0, 4 * (size_t)C * sizeof(float));
    float *gn[4];
    for (int k = 0; k < 4; k++) gn[k] = sp ? r->scr[S_NORMG] + (size_t)k * C : g[norms[k]];
    // MLP: res3 = res2 + gelu(ln2(res2)·Wfc + bfc)·Wp + bp
    linear_backward(dfch, g[PROJ_W], g[PROJ_B], arch_rows_of_dres(r, r->scr[S_DY]), a[A_FCH_GELU], w[PROJ_W], N,
                    d->Fl, C, 0);
    if (r->in16 && r->in16[A_FCH] && matmul_grad16() && d->Fl % 2 == 0) {
        // the bf16 units' packers round d(fc output) to bf16: it leaves GELU's pass in bf16, with the bias's sums
        gelu_backward16_rows(dfch, g[FC_B], r->in16[A_FCH], N, d->Fl);
        linear_backward16(dbtc, g[FC_W], (const uint16_t *)dfch, 2 * d->Fl, a[A_LN2], w[FC_W], N, C, d->Fl, 0);
    } else {
        if (r->in16 && r->in16[A_FCH]) gelu_backward16(dfch, r->in16[A_FCH], dfch, (size_t)N * d->Fl);
        else gelu_backward(dfch, a[A_FCH], dfch, (size_t)N * d->Fl);
        linear_backward(dbtc, g[FC_W], g[FC_B], dfch, a[A_LN2], w[FC_W], N, C, d->Fl, 0);   // partial over TP
    }
    layernorm_backward(r->dres, gn[0], gn[1], tp_reduce(r->tp, dbtc, N, C), a[A_RES2], w[LN2_W], a[A_LN2_MEAN],
                       a[A_LN2_RSTD], Ns, C);
    // Attention: res2 = x + attn(ln1(x)·Wqkv + bqkv)·Wo + bo
    linear_backward(dbtc, g[ATT_W], g[ATT_B], arch_rows_of_dres(r, r->scr[S_DY]), a[A_ATTY], w[ATT_W], N, d->Cl, C,
                    0);
    attention_backward(dqkv, dbtc, a[A_QKV], r->doc_start, a[A_ATTY], a[A_LSE], r->scr[S_ATT], d->B, d->T, d->NHl,
                       d->NHl, d->Cl / d->NHl);
    linear_backward(dbtc, g[QKV_W], g[QKV_B], dqkv, a[A_LN1], w[QKV_W], N, C, 3 * d->Cl, 0);   // partial over TP
    layernorm_backward(r->dres, gn[2], gn[3], tp_reduce(r->tp, dbtc, N, C), r->x, w[LN1_W], a[A_LN1_MEAN],
                       a[A_LN1_RSTD], Ns, C);
    arch_norm_grads_done(r, r->scr[S_NORMG], 4, norms);
}

static void final_forward(const BlockRun *r) {
    const LocalDims *d = r->d;
    layernorm_forward(arch_own_rows(d, r->act[0]), r->act[1], r->act[2], r->x, r->w[LNF_W], r->w[LNF_B], d->Ns, d->C);
    tp_gather(r->tp, r->act[0], d->N, d->C);   // the vocabulary-parallel head reads every row
}

// tmp holds d(output), partial sums over the vocabulary slices.
static void final_backward(const BlockRun *r) {
    const LocalDims *d = r->d;
    static const int norms[2] = {LNF_W, LNF_B};
    if (d->sp) memset(r->scr[S_NORMG], 0, 2 * (size_t)d->C * sizeof(float));
    float *gw = d->sp ? r->scr[S_NORMG] : r->g[LNF_W], *gb = d->sp ? r->scr[S_NORMG] + d->C : r->g[LNF_B];
    layernorm_backward(r->dres, gw, gb, tp_reduce(r->tp, r->tmp, d->N, d->C), r->x, r->w[LNF_W], r->act[1], r->act[2],
                       d->Ns, d->C);
    arch_norm_grads_done(r, r->scr[S_NORMG], 2, norms);
}

static const char *linear_name(const LocalDims *d, int in, int out) {
    if (in == d->C && out == 3 * d->Cl) return "qkv";
    if (in == d->Cl && out == d->C) return "attn.proj";
    if (in == d->C && out == d->Fl) return "fc";
    if (in == d->Fl && out == d->C) return "mlp.proj";
    return NULL;
}

// GPT-2's sizes (Radford et al. 2019), GPT-3's largest (Brown et al. 2020)
// and Megatron-LM's 1T (Narayanan et al. 2021, table 1), the last two for
// planning; gpt2-tiny for tests and demos.
static const ArchPreset presets[] = {
    {"gpt2-tiny", 4, 4, 0, 128, 512, 64, 50257, 0, 0, 0, 0},
    {"gpt2-124m", 12, 12, 0, 768, 3072, 1024, 50257, 0, 0, 0, 0},
    {"gpt2-350m", 24, 16, 0, 1024, 4096, 1024, 50257, 0, 0, 0, 0},
    {"gpt2-774m", 36, 20, 0, 1280, 5120, 1024, 50257, 0, 0, 0, 0},
    {"gpt2-1558m", 48, 25, 0, 1600, 6400, 1024, 50257, 0, 0, 0, 0},
    {"gpt3-175b", 96, 96, 0, 12288, 4 * 12288, 2048, 50257, 0, 0, 0, 1},
    {"megatron-1t", 128, 160, 0, 25600, 4 * 25600, 2048, 51200, 0, 0, 0, 1},
};

// GPT2LMHeadModel's config.json: the sizes read, the features fixed at
// what tessera's GPT-2 computes, and bookkeeping (dropout only regularizes
// training; summary_*: the double-heads model's).
static const HfKey hf_keys[] = {
    {"n_embd", HF_KEY_READ, "d_model"},               {"n_head", HF_KEY_READ, "n_head"},
    {"n_layer", HF_KEY_READ, "n_layer"},              {"n_inner", HF_KEY_READ, "d_ff"},
    {"n_positions", HF_KEY_READ, "max_seq"},          {"n_ctx", HF_KEY_READ, "max_seq"},
    {"vocab_size", HF_KEY_READ, "vocab"},             {"model_type", HF_KEY_FIXED, "\"gpt2\""},
    {"activation_function", HF_KEY_FIXED, "\"gelu_new\"|\"gelu_pytorch_tanh\""},
    {"layer_norm_epsilon", HF_KEY_FIXED, "1e-05"},     {"tie_word_embeddings", HF_KEY_FIXED, "true"},
    {"scale_attn_weights", HF_KEY_FIXED, "true"},     {"scale_attn_by_inverse_layer_idx", HF_KEY_FIXED, "false"},
    {"reorder_and_upcast_attn", HF_KEY_FIXED, "false"}, {"add_cross_attention", HF_KEY_FIXED, "false"},
    {"architectures", HF_KEY_IGNORED, NULL},          {"torch_dtype", HF_KEY_IGNORED, NULL},
    {"transformers_version", HF_KEY_IGNORED, NULL},   {"_name_or_path", HF_KEY_IGNORED, NULL},
    {"bos_token_id", HF_KEY_IGNORED, NULL},           {"eos_token_id", HF_KEY_IGNORED, NULL},
    {"pad_token_id", HF_KEY_IGNORED, NULL},           {"initializer_range", HF_KEY_IGNORED, NULL},
    {"use_cache", HF_KEY_IGNORED, NULL},              {"resid_pdrop", HF_KEY_IGNORED, NULL},
    {"embd_pdrop", HF_KEY_IGNORED, NULL},             {"attn_pdrop", HF_KEY_IGNORED, NULL},
    {"summary_type", HF_KEY_IGNORED, NULL},           {"summary_use_proj", HF_KEY_IGNORED, NULL},
    {"summary_activation", HF_KEY_IGNORED, NULL},     {"summary_proj_to_labels", HF_KEY_IGNORED, NULL},
    {"summary_first_dropout", HF_KEY_IGNORED, NULL},  {"task_specific_params", HF_KEY_IGNORED, NULL},
};

static const ArchHf hf = {
    .model_type = "gpt2",
    .architecture = "GPT2LMHeadModel",
    .prefix = "transformer.",
    .keys = hf_keys,
    .nkeys = sizeof hf_keys / sizeof hf_keys[0],
    .conv1d = 1,
};

const Arch arch_gpt2 = {
    .name = "gpt2", .label = "GPT-2",
    .summary = "GPT (learned positions, LayerNorm, GELU, tied head)",
    .presets = presets,
    .npresets = sizeof presets / sizeof presets[0],
    .hf = &hf,
    .block_prefix = "h.%d.",
    .part = {embed, block, final},
    .n = {2, NBLOCK, 2},
    .tied_head = 1,
    .has_train = 1,
    .nact = NACT,
    .act_out = A_RES3,
    .act_gemm16 = 1u << A_LN1 | 1u << A_QKV | 1u << A_LN2 | 1u << A_FCH_GELU,
    .act_fn16 = 1u << A_FCH,
    .act_keep32 = 1u << A_LN1_MEAN | 1u << A_LN1_RSTD | 1u << A_LN2_MEAN | 1u << A_LN2_RSTD | 1u << A_LSE | 1u << A_RES3,
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
