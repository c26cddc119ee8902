#include "model/arch.h"

#include <string.h>

#include "kernels/attention.h"
#include "kernels/matmul.h"

const Arch *const arch_registry[ARCH_COUNT] = {
    [ARCH_GPT2] = &arch_gpt2,
    [ARCH_LLAMA] = &arch_llama,
    [ARCH_QWEN2] = &arch_qwen2,
};

const Arch *arch_of(const ModelConfig *c) {
    CHECKF(c->arch >= 0 && c->arch < ARCH_COUNT, "architecture %d", (int)c->arch);
    const Arch *a = arch_registry[c->arch];
    return c->tie_embeddings && a->tied ? a->tied : a;
}

const Arch *arch_of_hf(const char *model_type, ArchId *id) {
    for (int a = 0; a < ARCH_COUNT; a++)
        if (arch_registry[a]->hf && !strcmp(arch_registry[a]->hf->model_type, model_type)) {
            if (id) *id = (ArchId)a;
            return arch_registry[a];
        }
    return NULL;
}

double arch_flops_token(const ModelConfig *c, int T) {
    double lookup = arch_of(c)->tied_head ? 0.0 : (double)c->vocab * c->d_model;
    return 6.0 * ((double)config_param_count(c, 0) - lookup) + 12.0 * c->n_layer * (double)T * c->d_model;
}

double arch_flops_token_pairs(const ModelConfig *c, int T, double pairs) {
    double attn = 12.0 * c->n_layer * (double)T * c->d_model;
    return arch_flops_token(c, T) - attn + attn * pairs / ((double)T * (T + 1) / 2);
}

int64_t arch_dim(const ModelConfig *c, Dim d, int padded) {
    switch (d) {
    case DIM_3: return 3;
    case DIM_C: return c->d_model;
    case DIM_F: return c->d_ff;
    case DIM_VP: return padded ? c->vocab_padded : c->vocab;
    case DIM_S: return c->max_seq;
    case DIM_KV: return (int64_t)config_kv_heads(c) * (c->d_model / c->n_head);
    }
    return 0;
}

int64_t arch_tensor_numel(const ModelConfig *c, const TensorDesc *t, int tp, int padded) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        int64_t x = arch_dim(c, t->dim[d], padded);
        n *= d == t->shard_dim ? x / tp : x;
    }
    return n;
}

int64_t arch_part_params(const ModelConfig *c, Part p, int tp, int padded) {
    const Arch *a = arch_of(c);
    int64_t n = 0;
    for (int i = 0; i < a->n[p]; i++) n += arch_tensor_numel(c, &a->part[p][i], tp, padded);
    return n;
}

int64_t arch_tied_copy(const ModelConfig *c, int tp, int padded) {
    const Arch *a = arch_of(c);
    return a->tied_head ? arch_part_params(c, PART_EMBED, tp, padded) : 0;
}

int64_t config_param_count(const ModelConfig *c, int padded) {
    return arch_part_params(c, PART_EMBED, 1, padded) + c->n_layer * arch_part_params(c, PART_BLOCK, 1, padded) +
           arch_part_params(c, PART_FINAL, 1, padded);
}

float *arch_own_rows(const LocalDims *d, float *full) { return full + (size_t)d->s0 * d->C; }

const float *arch_rows_of_dres(const BlockRun *r, float *dy) {
    const LocalDims *d = r->d;
    if (!d->sp) return r->dres;
    memcpy(arch_own_rows(d, dy), r->dres, (size_t)d->Ns * d->C * sizeof(float));
    tp_gather(r->tp, dy, d->N, d->C);
    return dy;
}

void arch_norm_grads_done(const BlockRun *r, float *partial, int k, const int *which) {
    if (!r->d->sp) return;
    size_t C = (size_t)r->d->C;
    tp_sum(r->tp, partial, (size_t)k * C);
    for (int i = 0; i < k; i++)
        for (size_t c = 0; c < C; c++) r->g[which[i]][c] += partial[(size_t)i * C + c];
}

// Whether activation j, in the arch's set mask, lives in its 16-bit store
// alone: its store given, under bf16 with the products on the bf16 units.
static int alone16(const BlockRun *r, unsigned mask, int j) {
    return r->act16 && r->act16[j] && r->prec == PREC_BF16 && matmul_bf16() && (mask >> j & 1u);
}

// Activation j (act_gemm16) counted as stored, its store bound for the products that read it.
static void bind_alone16(const Arch *ar, const BlockRun *r, int j) {
    *r->act16_done |= 1u << j;
    matmul_bind_input16_only(r->act[j], r->act16[j], ar->act_floats(r->d, j));
}

void arch_stored(const Arch *ar, const BlockRun *r, int j) {
    if (r->prec == PREC_FP32 || (ar->act_keep32 >> j & 1u)) return;
    size_t n = ar->act_floats(r->d, j);
    if (alone16(r, ar->act_gemm16, j)) {
        half_pack(r->prec, r->act16[j], r->act[j], n);   // the products read the 16-bit store alone
        bind_alone16(ar, r, j);
    } else if (r->act16 && r->act16[j]) {
        half_pack_widen(r->prec, r->act16[j], r->act[j], r->act[j], n);
        *r->act16_done |= 1u << j;
        // the products that read it in this forward take the bf16 values as they are
        if (r->prec == PREC_BF16) matmul_bind_input16(r->act[j], r->act16[j], n);
    } else {
        half_round(r->prec, r->act[j], r->act[j], n);
    }
}

int arch_fn16(const Arch *ar, const BlockRun *r, int jx, int jy) {
    if (!alone16(r, ar->act_fn16, jx) || !alone16(r, ar->act_gemm16, jy)) return 0;
    *r->act16_done |= 1u << jx;
    bind_alone16(ar, r, jy);
    return 1;
}

int arch_linear16(const Arch *ar, const BlockRun *r, int j, const float *x, const float *w, const float *b, int N,
                  int C, int OC) {
    if (!alone16(r, ar->act_gemm16, j) || linear_forward16(r->act16[j], r->act[j], x, w, b, N, C, OC)) return 0;
    bind_alone16(ar, r, j);
    return 1;
}

void arch_attention(const BlockRun *r, float *out, float *lse, const float *qkv, float *scratch, int NH, int NKV,
                    int HS) {
    const LocalDims *d = r->d;
    KvCache *kv = r->kv;
    if (!kv) {
        attention_forward(out, lse, qkv, r->doc_start, scratch, d->B, d->T, NH, NKV, HS);
        return;
    }
    CHECK(d->B == 1 && kv->pos + d->T <= kv->S);
    int C = NH * HS, KV = NKV * HS, ld = C + 2 * KV;
    qkv = matmul_input_fp32(qkv, (size_t)d->T * ld);   // the cache holds floats: a 16-bit store alone widened
    CHECKF(qkv, "out of memory widening the attention's input for the cache");
    size_t base = (size_t)r->layer * kv->S * KV;
    for (int t = 0; t < d->T; t++) {   // the new positions' keys and values join the cache
        memcpy(kv->k + base + (size_t)(kv->pos + t) * KV, qkv + (size_t)t * ld + C, (size_t)KV * sizeof(float));
        memcpy(kv->v + base + (size_t)(kv->pos + t) * KV, qkv + (size_t)t * ld + C + KV, (size_t)KV * sizeof(float));
    }
    // a pass from position 0 (the prompt, or a slid window) is the whole
    // sequence: the fused kernel, as without a cache; later ones attend to it
    if (kv->pos == 0) attention_forward(out, lse, qkv, r->doc_start, scratch, 1, d->T, NH, NKV, HS);
    else attention_decode(out, qkv, ld, kv->k + base, kv->v + base, r->doc_start, d->T, kv->pos, NH, NKV, HS);
}
