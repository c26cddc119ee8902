#include "io/hf_llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/json.h"

// Hugging Face's name of tessera's tensor.
static void hf_name(const ParamInfo *p, char *buf, size_t cap) {
    snprintf(buf, cap, p->role == ROLE_HEAD ? "%s" : "model.%s", p->name);
}

// Rows of the Hugging Face tensor (the vocabulary without padding).
static int64_t hf_rows(const ParamInfo *p, const ModelConfig *c) {
    return p->role == ROLE_TOK_EMB || p->role == ROLE_HEAD ? c->vocab : p->shape[0];
}

static int get_num(const Json *j, const char *key, double lo, double hi, double *out, const char *path, Err *err) {
    const Json *v = json_get(j, key);
    if (!v) return 0;
    if (v->type != JSON_NUM || !(v->num >= lo && v->num <= hi))
        return err_set(err, ERR_USAGE, "%s: field '%s' is not a number in [%g, %g]", path, key, lo, hi);
    *out = v->num;
    return 0;
}

// config.json's keys: the sizes read, the features fixed at what tessera's
// LLaMA computes, and bookkeeping.
static const HfKey llama_keys[] = {
    {"hidden_size", HF_KEY_READ, NULL},           {"intermediate_size", HF_KEY_READ, NULL},
    {"num_attention_heads", HF_KEY_READ, NULL},   {"num_hidden_layers", HF_KEY_READ, NULL},
    {"num_key_value_heads", HF_KEY_READ, NULL},   {"max_position_embeddings", HF_KEY_READ, NULL},
    {"vocab_size", HF_KEY_READ, NULL},            {"rms_norm_eps", HF_KEY_READ, NULL},
    {"rope_theta", HF_KEY_READ, NULL},            {"head_dim", HF_KEY_READ, NULL},
    {"model_type", HF_KEY_FIXED, "\"llama\""},    {"hidden_act", HF_KEY_FIXED, "\"silu\""},
    {"rope_scaling", HF_KEY_FIXED, "null"},       {"attention_bias", HF_KEY_FIXED, "false"},
    {"mlp_bias", HF_KEY_FIXED, "false"},          {"tie_word_embeddings", HF_KEY_FIXED, "false"},
    {"architectures", HF_KEY_IGNORED, NULL},      {"torch_dtype", HF_KEY_IGNORED, NULL},
    {"transformers_version", HF_KEY_IGNORED, NULL}, {"_name_or_path", HF_KEY_IGNORED, NULL},
    {"bos_token_id", HF_KEY_IGNORED, NULL},       {"eos_token_id", HF_KEY_IGNORED, NULL},
    {"pad_token_id", HF_KEY_IGNORED, NULL},       {"initializer_range", HF_KEY_IGNORED, NULL},
    {"use_cache", HF_KEY_IGNORED, NULL},          {"pretraining_tp", HF_KEY_IGNORED, NULL},   // splits matmuls, same sums
    {"attention_dropout", HF_KEY_IGNORED, NULL},   // training-time only
};

static int read_config(const char *dir, ModelConfig *cfg, Err *err) {
    char path[4200];
    Json *j = hf_config_read(dir, path, sizeof path, err);
    if (!j) return -1;
    int L = 0, C = 0, NH = 0, F = 0, S = 0, V = 0, KV = 0, HS = 0;
    double eps = 1e-6, theta = 10000;
    const Json *mt = json_get(j, "model_type");
    int rc = 0;
    if (!mt || mt->type != JSON_STR || strcmp(mt->text, "llama"))
        rc = err_set(err, ERR_USAGE, "%s: model_type is not \"llama\" (tessera reads LlamaForCausalLM directories)", path);
    else if (hf_config_check(j, llama_keys, (int)(sizeof llama_keys / sizeof llama_keys[0]), path, err) ||
             hf_config_int(j, "num_hidden_layers", 1, 1, 4096, &L, path, err) ||
             hf_config_int(j, "hidden_size", 1, 1, 65536, &C, path, err) ||
             hf_config_int(j, "num_attention_heads", 1, 1, 65536, &NH, path, err) ||
             hf_config_int(j, "intermediate_size", 1, 1, 1 << 20, &F, path, err) ||
             hf_config_int(j, "max_position_embeddings", 1, 1, 1 << 20, &S, path, err) ||
             hf_config_int(j, "vocab_size", 1, 2, 1 << 24, &V, path, err) ||
             hf_config_int(j, "num_key_value_heads", 0, 1, 65536, &KV, path, err) ||
             hf_config_int(j, "head_dim", 0, 1, 65536, &HS, path, err) ||
             get_num(j, "rms_norm_eps", 1e-12, 1, &eps, path, err) || get_num(j, "rope_theta", 1, 1e12, &theta, path, err))
        rc = -1;
    else if (HS && (int64_t)HS * NH != C)
        rc = err_set(err, ERR_USAGE, "%s: head_dim %d is not hidden_size / num_attention_heads (%d / %d): tessera's heads "
                     "split hidden_size", path, HS, C, NH);
    json_free(j);
    if (rc) return -1;
    *cfg = (ModelConfig){.arch = ARCH_LLAMA, .n_layer = L, .n_head = NH, .n_kv_head = KV, .d_model = C, .d_ff = F,
                         .max_seq = S, .rope_theta = (float)theta, .norm_eps = (float)eps};
    snprintf(cfg->name, sizeof cfg->name, "imported");
    config_set_vocab(cfg, V);
    if (config_validate(cfg, err)) { err_prefix(err, path); return -1; }
    return 0;
}

// Whether the model c reads tensor t: one of its parameters, or the rotary
// inverse frequencies older exports keep as a buffer of each layer.
typedef struct { const ParamTable *t; const ModelConfig *c; } Reads;
static int llama_reads(const StTensor *h, void *ctx) {
    const Reads *r = ctx;
    char name[160];
    for (int i = 0; i < r->t->n; i++) {
        hf_name(&r->t->p[i], name, sizeof name);
        if (!strcmp(name, h->name)) return 1;
    }
    int layer, end = 0;
    return sscanf(h->name, "model.layers.%d.self_attn.rotary_emb.inv_freq%n", &layer, &end) == 1 && !h->name[end] &&
           layer >= 0 && layer < r->c->n_layer;
}

int hf_llama_open(HfDir *d, const char *dir, ModelConfig *cfg, Err *err) {
    memset(d, 0, sizeof *d);
    if (read_config(dir, cfg, err) || hf_open_weights(d, dir, err)) {
        hf_dir_close(d);
        return -1;
    }
    ModelSlice sl = slice_whole(cfg);
    ParamTable t = {0};
    char what[64];
    snprintf(what, sizeof what, "a %d-layer LLaMA", cfg->n_layer);
    Reads r = {&t, cfg};
    int rc = ptable_build(&t, cfg, &sl, err) || hf_dir_check_read(d, llama_reads, &r, what, err) ? -1 : 0;
    ptable_free(&t);
    if (rc) {
        err_prefix(err, dir);
        hf_dir_close(d);
    }
    return rc;
}

int hf_llama_load(const HfDir *d, const ModelConfig *c, const ParamTable *t, float *params, Err *err) {
    if (c->arch != ARCH_LLAMA)
        return err_set(err, ERR_USAGE, "a LlamaForCausalLM directory holds a LLaMA model, not %s", config_arch_name(c->arch));
    for (int i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        char name[160];
        hf_name(p, name, sizeof name);
        const StFile *f = NULL;
        const StTensor *h = hf_dir_find(d, name, &f);
        if (!h) return err_set(err, ERR_USAGE, "tensor %s is missing", name);
        int ok = h->ndim == p->ndim && (h->dtype == ST_F32 || h->dtype == ST_F16 || h->dtype == ST_BF16) &&
                 h->shape[0] == hf_rows(p, c);
        for (int k = 1; ok && k < p->ndim; k++) ok = h->shape[k] == p->shape[k];
        if (!ok) return err_set(err, ERR_USAGE, "tensor %s: shape or dtype does not fit this model", name);
        // local element e of p: global index along its shard dimension, the rest as they are
        float *dst = params + p->offset;
        for (size_t e = 0; e < p->numel; e++) {
            int64_t g[PARAM_MAX_DIM];
            size_t r = e;
            for (int k = p->ndim - 1; k >= 0; k--) {
                g[k] = (int64_t)(r % (size_t)p->lshape[k]);
                r /= (size_t)p->lshape[k];
            }
            if (p->shard_dim >= 0) g[p->shard_dim] += p->shard_off;
            if (g[0] >= hf_rows(p, c)) { dst[e] = 0.0f; continue; }   // vocabulary padding
            int64_t fi = 0;
            for (int k = 0; k < p->ndim; k++) fi = fi * (k ? p->shape[k] : 1) + g[k];
            dst[e] = st_get(f, h, fi);
            if (!isfinite(dst[e]))
                return err_set(err, ERR_USAGE, "tensor %s holds a non-finite value at element %lld", name, (long long)fi);
        }
    }
    return 0;
}

int hf_llama_export(const ModelConfig *c, const ParamTable *t, const float *params, const char *dir, StDtype dtype,
                    Err *err) {
    if (c->arch != ARCH_LLAMA) return err_set(err, ERR_USAGE, "--hf-dir writes LLaMA models here, not %s", config_arch_name(c->arch));
    if (hf_dir_prepare(dir, err)) return -1;
    StWrite *w = calloc((size_t)t->n + 1, sizeof *w);
    char (*names)[160] = calloc((size_t)t->n + 1, sizeof *names);
    if (!w || !names) { free(w); free(names); return err_set(err, ERR_RUN, "out of memory"); }
    int rc = 0;
    for (int i = 0; i < t->n && !rc; i++) {
        const ParamInfo *p = &t->p[i];
        if (p->shard_dim >= 0 && p->lshape[p->shard_dim] != p->shape[p->shard_dim])
            rc = err_set(err, ERR_USAGE, "export needs the whole model (got a slice of %s)", p->name);
        hf_name(p, names[i], sizeof names[i]);
        w[i] = (StWrite){.name = names[i], .ndim = p->ndim, .data = params + p->offset, .dtype = dtype};
        for (int k = 0; k < p->ndim; k++) w[i].shape[k] = k ? p->shape[k] : hf_rows(p, c);   // padding rows are last
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!rc) rc = st_write(path, w, t->n, err);
    free(w);
    free(names);
    if (rc) return -1;
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "architectures"); jb_arr_begin(&b); jb_str(&b, "LlamaForCausalLM"); jb_arr_end(&b);
    jb_key(&b, "model_type"); jb_str(&b, "llama");
    jb_key(&b, "hidden_size"); jb_int(&b, c->d_model);
    jb_key(&b, "intermediate_size"); jb_int(&b, c->d_ff);
    jb_key(&b, "num_attention_heads"); jb_int(&b, c->n_head);
    jb_key(&b, "num_hidden_layers"); jb_int(&b, c->n_layer);
    jb_key(&b, "num_key_value_heads"); jb_int(&b, config_kv_heads(c));
    jb_key(&b, "max_position_embeddings"); jb_int(&b, c->max_seq);
    jb_key(&b, "vocab_size"); jb_int(&b, c->vocab);
    jb_key(&b, "rms_norm_eps"); jb_num(&b, config_norm_eps(c));
    jb_key(&b, "rope_theta"); jb_num(&b, config_rope_theta(c));
    jb_key(&b, "hidden_act"); jb_str(&b, "silu");
    jb_key(&b, "tie_word_embeddings"); jb_bool(&b, 0);
    jb_key(&b, "bos_token_id"); jb_int(&b, 1);
    jb_key(&b, "eos_token_id"); jb_int(&b, 2);
    jb_key(&b, "torch_dtype"); jb_str(&b, dtype == ST_BF16 ? "bfloat16" : dtype == ST_F16 ? "float16" : "float32");
    jb_obj_end(&b);
    jb_raw(&b, "\n");
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = file_write_whole(path, b.s, b.len, err);
    jb_free(&b);
    return rc;
}
