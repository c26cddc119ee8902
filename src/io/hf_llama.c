#include "io/hf_llama.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/json.h"

int hf_is_dir(const char *path) {
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/config.json", path);
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && stat(p, &st) == 0;
}

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
    if (!v || v->type != JSON_NUM || !(v->num >= lo && v->num <= hi))
        return err_set(err, ERR_USAGE, "%s: field '%s' is missing or not a number in [%g, %g]", path, key, lo, hi);
    *out = v->num;
    return 0;
}

static int read_config(const char *dir, ModelConfig *cfg, Err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    size_t len;
    if (file_read(path, &text, &len, 1 << 20, err)) return -1;
    Json *j = json_parse(text, len, err);
    free(text);
    if (!j) { err_prefix(err, path); return -1; }
    int rc = 0;
    const Json *mt = json_get(j, "model_type"), *tie = json_get(j, "tie_word_embeddings");
    double L = 0, C = 0, NH = 0, F = 0, S = 0, V = 0, KV = 0, eps = 1e-6, theta = 10000;
    if (!mt || mt->type != JSON_STR || strcmp(mt->text, "llama"))
        rc = err_set(err, ERR_USAGE, "%s: model_type is not \"llama\" (tessera reads LlamaForCausalLM directories)", path);
    else if (tie && tie->type == JSON_BOOL && tie->boolean)
        rc = err_set(err, ERR_USAGE, "%s: tie_word_embeddings is true; tessera's LLaMA has an untied head", path);
    else if (get_num(j, "num_hidden_layers", 1, 4096, &L, path, err) || get_num(j, "hidden_size", 1, 65536, &C, path, err) ||
             get_num(j, "num_attention_heads", 1, 65536, &NH, path, err) ||
             get_num(j, "intermediate_size", 1, 1 << 20, &F, path, err) ||
             get_num(j, "max_position_embeddings", 1, 1 << 20, &S, path, err) ||
             get_num(j, "vocab_size", 2, 1 << 24, &V, path, err) ||
             (json_get(j, "num_key_value_heads") && get_num(j, "num_key_value_heads", 1, 65536, &KV, path, err)) ||
             (json_get(j, "rms_norm_eps") && get_num(j, "rms_norm_eps", 1e-12, 1, &eps, path, err)) ||
             (json_get(j, "rope_theta") && get_num(j, "rope_theta", 1, 1e12, &theta, path, err)))
        rc = -1;
    json_free(j);
    if (rc) return -1;
    *cfg = (ModelConfig){.arch = ARCH_LLAMA, .n_layer = (int)L, .n_head = (int)NH, .n_kv_head = (int)KV,
                         .d_model = (int)C, .d_ff = (int)F, .max_seq = (int)S, .rope_theta = (float)theta,
                         .norm_eps = (float)eps};
    snprintf(cfg->name, sizeof cfg->name, "imported");
    config_set_vocab(cfg, (int)V);
    if (config_validate(cfg, err)) { err_prefix(err, path); return -1; }
    return 0;
}

int hf_open_weights(HfDir *d, const char *dir, Err *err) {
    memset(d, 0, sizeof *d);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    struct stat st;
    if (stat(path, &st)) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (st_open(&d->f[0], path, err)) return -1;
        d->n = 1;
        return 0;
    }
    char *text;
    size_t len;
    if (file_read(path, &text, &len, 64 << 20, err)) return -1;
    Json *j = json_parse(text, len, err);
    free(text);
    if (!j) { err_prefix(err, path); return -1; }
    const Json *wm = json_get(j, "weight_map");
    int rc = !wm || wm->type != JSON_OBJ ? err_set(err, ERR_USAGE, "%s: no object 'weight_map'", path) : 0;
    const char *seen[HF_MAX_SHARDS];
    for (const Json *m = wm ? wm->child : NULL; !rc && m; m = m->next) {
        if (m->type != JSON_STR || strchr(m->text, '/')) {
            rc = err_set(err, ERR_USAGE, "%s: weight_map['%s'] is not a file name in the directory", path, m->key);
            break;
        }
        int known = 0;
        for (int i = 0; i < d->n; i++) known |= !strcmp(seen[i], m->text);
        if (known) continue;
        if (d->n == HF_MAX_SHARDS) { rc = err_set(err, ERR_USAGE, "%s: more than %d shards", path, HF_MAX_SHARDS); break; }
        char shard[4400];
        snprintf(shard, sizeof shard, "%s/%s", dir, m->text);
        if (st_open(&d->f[d->n], shard, err)) { rc = -1; break; }
        seen[d->n++] = m->text;
    }
    json_free(j);
    return rc;
}

int hf_llama_open(HfDir *d, const char *dir, ModelConfig *cfg, Err *err) {
    memset(d, 0, sizeof *d);
    if (read_config(dir, cfg, err) || hf_open_weights(d, dir, err)) {
        hf_dir_close(d);
        return -1;
    }
    return 0;
}

void hf_dir_close(HfDir *d) {
    for (int i = 0; i < d->n; i++) st_close(&d->f[i]);
    d->n = 0;
}

int hf_llama_load(const HfDir *d, const ModelConfig *c, const ParamTable *t, float *params, Err *err) {
    if (c->arch != ARCH_LLAMA)
        return err_set(err, ERR_USAGE, "a LlamaForCausalLM directory holds a LLaMA model, not %s", config_arch_name(c->arch));
    for (int i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        char name[160];
        hf_name(p, name, sizeof name);
        const StFile *f = NULL;
        const StTensor *h = NULL;
        for (int k = 0; k < d->n && !h; k++) h = st_find(f = &d->f[k], name);
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
    if (mkdir(dir, 0755) && errno != EEXIST) return err_set(err, ERR_USAGE, "--hf-dir %s: %s", dir, strerror(errno));
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
