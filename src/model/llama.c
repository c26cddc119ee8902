// model/llama — LLaMA (Touvron et al. 2023) as tessera runs it: token
// embeddings only (no position table), pre-norm blocks of RMSNorm → causal
// attention with rotary positions and grouped-query heads → projection, and
// RMSNorm → SwiGLU MLP, each added to the residual stream, no biases, a
// final RMSNorm and an output head, untied unless tie_embeddings says so
// (Llama 3.2's small models tie it). The block is the LLaMA family's
// (model/llama_family.h), which Qwen2 shares. Names are Hugging Face
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
#include "model/llama_family.h"

enum { LN1_W = LF_LN1_W, Q_W = LF_Q_W, K_W = LF_K_W, V_W = LF_V_W, O_W = LF_O_W, LN2_W = LF_LN2_W,
       GATE_W = LF_GATE_W, UP_W = LF_UP_W, DOWN_W = LF_DOWN_W, NBLOCK = LF_NBLOCK, Q_B = LF_Q_B,
       NORM_W = LF_NORM_W, HEAD_W = LF_HEAD_W };
enum { A_LN1 = LF_A_LN1, A_LN1_RSTD = LF_A_LN1_RSTD, A_QKV = LF_A_QKV, A_ATTY = LF_A_ATTY, A_LSE = LF_A_LSE,
       A_RES2 = LF_A_RES2, A_LN2 = LF_A_LN2, A_LN2_RSTD = LF_A_LN2_RSTD, A_GU = LF_A_GU, A_H = LF_A_H,
       A_RES3 = LF_A_RES3 };
static const TensorDesc embed[] = {LF_EMBED_TENSORS};
static const TensorDesc block[NBLOCK] = {LF_BLOCK_TENSORS};
static const TensorDesc final[] = {LF_FINAL_TENSORS};

enum {
    S_DH,     // (N,Fl)
    S_DGU,    // (N,2·Fl)
    S_DQKV,   // (N,Cl + 2·KVl)
    S_ATT,    // the attention kernel's per-thread scratch
    S_DY,     // sequence parallel: (N,C) the gradient at a row-parallel output, gathered; else none
    S_NORMG,  // sequence parallel: (2,C) the norms' partial gain gradients; else none
    NSCR
};
_Static_assert((int)NSCR == (int)LF_NSCR, "the family's scratch count");

static size_t qkv_width(const LocalDims *d) { return (size_t)d->Cl + 2 * (size_t)d->KVl; }

size_t llama_act_floats(const LocalDims *d, int i) {
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

size_t llama_scratch_floats(const LocalDims *d, int i) {
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

static void stored(const BlockRun *r, int j) { arch_stored(arch_of(r->cfg), r, j); }

// q, k and v's biases (Qwen2's), adjacent: NULL for an architecture without.
static float *qkv_bias(const BlockRun *r, float *const *t) {
    return arch_of(r->cfg)->n[PART_BLOCK] > NBLOCK ? t[Q_B] : NULL;
}

// q, k, v (and gate, up) are one matrix: checked, as the table's order
// promises.
static void check_fused(const BlockRun *r, float *const *t) {
    const LocalDims *d = r->d;
    size_t C = (size_t)d->C;
    CHECKF(t[K_W] == t[Q_W] + (size_t)d->Cl * C && t[V_W] == t[K_W] + (size_t)d->KVl * C &&
           t[UP_W] == t[GATE_W] + (size_t)d->Fl * C, "LLaMA's q/k/v or gate/up tensors are not adjacent");
    float *b = qkv_bias(r, t);
    CHECKF(!b || (t[Q_B + 1] == b + d->Cl && t[Q_B + 2] == t[Q_B + 1] + d->KVl), "the q/k/v biases are not adjacent");
}

void llama_block_forward(const BlockRun *r) {
    float *const *w = r->w, *const *a = r->act;
    const LocalDims *d = r->d;
    int N = d->N, Ns = d->Ns, C = d->C, HS = d->Cl / d->NHl;
    float eps = config_norm_eps(r->cfg);
    check_fused(r, w);
    // attention: res2 = x + attn(rope(rmsnorm(x)·[Wq;Wk;Wv]))·Wo, heads split over TP
    rmsnorm_forward(arch_own_rows(d, a[A_LN1]), a[A_LN1_RSTD], r->x, w[LN1_W], Ns, C, eps);
    tp_gather(r->tp, a[A_LN1], N, C);
    stored(r, A_LN1);
    linear_forward(a[A_QKV], a[A_LN1], w[Q_W], qkv_bias(r, w), N, C, (int)qkv_width(d));   // column parallel
    rope_forward(a[A_QKV], r->doc_pos, d->B, d->T, r->kv ? r->kv->pos : 0, d->NHl + d->NKVl, HS, (int)qkv_width(d),
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
    int fn16 = arch_fn16(arch_of(r->cfg), r, A_GU, A_H);   // SwiGLU from and into the 16-bit stores
    int in16 = fn16 && !linear_forward16(r->act16[A_GU], a[A_GU], a[A_LN2], w[GATE_W], NULL, N, C, 2 * d->Fl);
    if (!in16) linear_forward(a[A_GU], a[A_LN2], w[GATE_W], NULL, N, C, 2 * d->Fl);   // column parallel
    if (fn16) {
        swiglu_forward16(r->act16[A_H], r->act16[A_GU], in16 ? NULL : a[A_GU], N, d->Fl);
    } else {
        stored(r, A_GU);
        swiglu_forward(a[A_H], a[A_GU], N, d->Fl);
        stored(r, A_H);
    }
    linear_forward(r->tmp, a[A_H], w[DOWN_W], NULL, N, d->Fl, C);              // row parallel: partial sums
    residual_forward(a[A_RES3], a[A_RES2], tp_reduce(r->tp, r->tmp, N, C), NULL, Ns, C);
}

// The attention core again, from the saved (rotated) q/k/v.
void llama_core_forward(const BlockRun *r) {
    const LocalDims *d = r->d;
    attention_forward(r->act[A_ATTY], r->act[A_LSE], r->act[A_QKV], r->doc_start, r->scr[S_ATT], d->B, d->T, d->NHl,
                      d->NKVl, d->Cl / d->NHl);
    stored(r, A_ATTY);
}

// dres holds d(block output) and leaves with d(block input).
void llama_block_backward(const BlockRun *r) {
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
    if (r->in16 && r->in16[A_GU] && matmul_grad16()) {
        // the bf16 units' packers round d(gate, up) to bf16: it leaves SwiGLU's pass in bf16, in dgu's room
        uint16_t *dgu16 = (uint16_t *)dgu;
        swiglu_backward16_rows(dgu16, r->in16[A_GU], dh, N, d->Fl);
        linear_backward16(dbtc, g[GATE_W], dgu16, 2 * d->Fl, a[A_LN2], w[GATE_W], N, C, 2 * d->Fl, 0);
    } else {
        if (r->in16 && r->in16[A_GU]) swiglu_backward16(dgu, r->in16[A_GU], dh, N, d->Fl);
        else swiglu_backward(dgu, a[A_GU], dh, N, d->Fl);
        linear_backward(dbtc, g[GATE_W], NULL, dgu, a[A_LN2], w[GATE_W], N, C, 2 * d->Fl, 0);   // partial over TP
    }
    rmsnorm_backward(r->dres, gn[0], tp_reduce(r->tp, dbtc, N, C), a[A_RES2], w[LN2_W], a[A_LN2_RSTD], Ns, C);
    // attention: res2 = x + attn(rope(rmsnorm(x)·[Wq;Wk;Wv]))·Wo
    linear_backward(dbtc, g[O_W], NULL, arch_rows_of_dres(r, r->scr[S_DY]), a[A_ATTY], w[O_W], N, d->Cl, C, 0);
    attention_backward(dqkv, dbtc, a[A_QKV], r->doc_start, a[A_ATTY], a[A_LSE], r->scr[S_ATT], d->B, d->T, d->NHl,
                       d->NKVl, HS);
    rope_backward(dqkv, r->doc_pos, d->B, d->T, 0, d->NHl + d->NKVl, HS, qw, config_rope_theta(r->cfg));
    linear_backward(dbtc, g[Q_W], qkv_bias(r, g), dqkv, a[A_LN1], w[Q_W], N, C, qw, 0);   // partial over TP
    rmsnorm_backward(r->dres, gn[1], tp_reduce(r->tp, dbtc, N, C), r->x, w[LN1_W], a[A_LN1_RSTD], Ns, C);
    arch_norm_grads_done(r, r->scr[S_NORMG], 2, norms);
}

void llama_final_forward(const BlockRun *r) {
    const LocalDims *d = r->d;
    rmsnorm_forward(arch_own_rows(d, r->act[0]), r->act[2], r->x, r->w[NORM_W], d->Ns, d->C, config_norm_eps(r->cfg));
    tp_gather(r->tp, r->act[0], d->N, d->C);   // the vocabulary-parallel head reads every row
}

// tmp holds d(output), partial sums over the vocabulary slices.
void llama_final_backward(const BlockRun *r) {
    const LocalDims *d = r->d;
    static const int norms[1] = {NORM_W};
    if (d->sp) memset(r->scr[S_NORMG], 0, (size_t)d->C * sizeof(float));
    float *gw = d->sp ? r->scr[S_NORMG] : r->g[NORM_W];
    rmsnorm_backward(r->dres, gw, tp_reduce(r->tp, r->tmp, d->N, d->C), r->x, r->w[NORM_W], r->act[2], d->Ns, d->C);
    arch_norm_grads_done(r, r->scr[S_NORMG], 1, norms);
}

const char *llama_linear_name(const LocalDims *d, int in, int out) {
    if (in == d->C && out == (int)qkv_width(d)) return "qkv";
    if (in == d->Cl && out == d->C) return "o_proj";
    if (in == d->C && out == 2 * d->Fl) return "gate+up";
    if (in == d->Fl && out == d->C) return "down_proj";
    return NULL;
}

int llama_validate(const ModelConfig *c, Err *err) {
    if ((c->d_model / c->n_head) % 2)
        return err_set(err, ERR_USAGE, "the head size d_model/n_head = %d/%d = %d is odd: %s's rotary embedding turns "
                       "pairs of channels, so it must be even", c->d_model, c->n_head, c->d_model / c->n_head,
                       config_arch_name(c->arch));
    return 0;
}

// llama-120m is sized like gpt2-124m, for comparisons; the FFN widths are
// about 8/3·C, rounded as Meta rounds them.
static const ArchPreset presets[] = {
    {"llama-tiny", 4, 4, 2, 128, 352, 64, 32000, 0, 1e-5f, 0, 0},
    {"llama-120m", 12, 12, 0, 768, 2048, 1024, 32000, 0, 1e-5f, 0, 0},
    {"llama-7b", 32, 32, 0, 4096, 11008, 2048, 32000, 0, 1e-6f, 0, 0},
    {"llama2-7b", 32, 32, 0, 4096, 11008, 4096, 32000, 0, 1e-5f, 0, 0},
    {"llama2-13b", 40, 40, 0, 5120, 13824, 4096, 32000, 0, 1e-5f, 0, 0},
    {"llama2-70b", 80, 64, 8, 8192, 28672, 4096, 32000, 0, 1e-5f, 0, 0},
};

// LlamaForCausalLM's config.json: the sizes read, the features fixed at
// what tessera's LLaMA computes, and bookkeeping.
static const HfKey hf_keys[] = {
    {"hidden_size", HF_KEY_READ, "d_model"},           {"intermediate_size", HF_KEY_READ, "d_ff"},
    {"num_attention_heads", HF_KEY_READ, "n_head"},    {"num_hidden_layers", HF_KEY_READ, "n_layer"},
    {"num_key_value_heads", HF_KEY_READ, "n_kv_head"}, {"max_position_embeddings", HF_KEY_READ, "max_seq"},
    {"vocab_size", HF_KEY_READ, "vocab"},              {"rms_norm_eps", HF_KEY_READ, "norm_eps"},
    {"rope_theta", HF_KEY_READ, "rope_theta"},         {"head_dim", HF_KEY_READ, NULL},
    {"hidden_act", HF_KEY_FIXED, "\"silu\""},          {"tie_word_embeddings", HF_KEY_READ, "tie_embeddings"},
    {"model_type", HF_KEY_FIXED, "\"llama\""},         {"rope_scaling", HF_KEY_FIXED, "null"},
    {"attention_bias", HF_KEY_FIXED, "false"},         {"mlp_bias", HF_KEY_FIXED, "false"},
    {"bos_token_id", HF_KEY_IGNORED, "1"},             {"eos_token_id", HF_KEY_IGNORED, "2"},
    {"architectures", HF_KEY_IGNORED, NULL},           {"torch_dtype", HF_KEY_IGNORED, NULL},
    {"transformers_version", HF_KEY_IGNORED, NULL},    {"_name_or_path", HF_KEY_IGNORED, NULL},
    {"pad_token_id", HF_KEY_IGNORED, NULL},            {"initializer_range", HF_KEY_IGNORED, NULL},
    {"use_cache", HF_KEY_IGNORED, NULL},
    {"pretraining_tp", HF_KEY_IGNORED, NULL},          // splits the products, the same sums
    {"attention_dropout", HF_KEY_IGNORED, NULL},       // training-time only
};

static const ArchHf hf = {
    .model_type = "llama",
    .architecture = "LlamaForCausalLM",
    .prefix = "model.",
    .keys = hf_keys,
    .nkeys = sizeof hf_keys / sizeof hf_keys[0],
    .buffer = "model.layers.%d.self_attn.rotary_emb.inv_freq",
};

#define LLAMA_COMMON                                                                                                   \
    .name = "llama", .label = "LLaMA", .summary = "LLaMA (RoPE, RMSNorm, SwiGLU, grouped-query attention)",            \
    .presets = presets, .npresets = sizeof presets / sizeof presets[0],                                                \
    .keys = KEY_KV_HEADS | KEY_ROPE_THETA | KEY_NORM_EPS | KEY_TIE, .rope_theta = 10000.0f, .norm_eps = 1e-5f,         \
    .hf = &hf, .tied = &arch_llama_tied, .block_prefix = "layers.%d.",                                                 \
    .part = {embed, block, final}, LLAMA_FAMILY_RUN

const Arch arch_llama = {LLAMA_COMMON, .n = {1, NBLOCK, 2}, .tied_head = 0};
const Arch arch_llama_tied = {LLAMA_COMMON, .n = {1, NBLOCK, 1}, .tied_head = 1};
