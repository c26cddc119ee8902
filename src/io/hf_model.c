#include "io/hf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "io/hf_gpt2.h"

// Hugging Face's name of tessera's tensor.
static void hf_name(const Arch *ar, const ParamInfo *p, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", p->role == ROLE_HEAD ? "" : ar->hf->prefix, p->name);
}

// Rows of the Hugging Face tensor (the vocabulary without padding).
static int64_t hf_rows(const ParamInfo *p, const ModelConfig *c) {
    return p->role == ROLE_TOK_EMB || p->role == ROLE_HEAD ? c->vocab : p->shape[0];
}

// A READ key's value into its model field, checked as config.json's
// (absent or null: the field's default).
static int read_key(ModelConfig *mc, const HfKey *k, const Json *cfg, const char *path, Err *err) {
    const Json *v = json_get(cfg, k->name);
    if (!v || v->type == JSON_NULL) return 0;
    int kind = config_field_kind(k->want), x;
    if (kind == CONFIG_INT && hf_config_int(cfg, k->name, 1, 1, 1 << 30, &x, path, err)) return -1;
    if (kind == CONFIG_BOOL && v->type != JSON_BOOL)
        return err_set(err, ERR_USAGE, "%s: field '%s' is %s, not true or false", path, k->name,
                       v->type == JSON_STR ? "a string" : json_type_name(v->type));
    Err e = {0};
    if (config_set_field(mc, k->want, v, &e)) return err_set(err, ERR_USAGE, "%s: field '%s': %s", path, k->name, e.msg);
    return 0;
}

int hf_model_config(const Json *cfg, const char *path, ModelConfig *mc, Err *err) {
    const Json *mt = json_get(cfg, "model_type");
    ArchId id;
    const Arch *ar = mt && mt->type == JSON_STR ? arch_of_hf(mt->text, &id) : NULL;
    if (!ar) {
        char known[160] = "";
        for (int a = 0, n = 0; a < ARCH_COUNT && n < (int)sizeof known; a++)
            if (arch_registry[a]->hf)
                n += snprintf(known + n, sizeof known - (size_t)n, "%s\"%s\"", n ? ", " : "", arch_registry[a]->hf->model_type);
        return err_set(err, ERR_USAGE, "%s: model_type is %s%s%s, not one tessera reads (%s)", path,
                       mt && mt->type == JSON_STR ? "\"" : "", mt ? (mt->type == JSON_STR ? mt->text : json_type_name(mt->type)) : "missing",
                       mt && mt->type == JSON_STR ? "\"" : "", known);
    }
    const ArchHf *hf = ar->hf;
    if (hf_config_check(cfg, hf->keys, hf->nkeys, path, err)) return -1;
    memset(mc, 0, sizeof *mc);
    mc->arch = id;
    snprintf(mc->name, sizeof mc->name, "imported");
    int HS = 0;
    for (int k = 0; k < hf->nkeys; k++) {
        const Json *v = json_get(cfg, hf->keys[k].name);
        if (!v || hf->keys[k].kind != HF_KEY_READ) continue;
        if (!hf->keys[k].want) {   // head_dim: checked against the heads below
            if (hf_config_int(cfg, hf->keys[k].name, 0, 1, 65536, &HS, path, err)) return -1;
            continue;
        }
        if (read_key(mc, &hf->keys[k], cfg, path, err)) return -1;
    }
    if (!mc->d_ff) mc->d_ff = 4 * mc->d_model;
    if (mc->vocab < 2) return err_set(err, ERR_USAGE, "%s: the vocabulary size is missing or below 2", path);
    config_set_vocab(mc, mc->vocab);
    if (HS && (int64_t)HS * mc->n_head != mc->d_model)
        return err_set(err, ERR_USAGE, "%s: head_dim %d is not hidden_size / num_attention_heads (%d / %d): tessera's heads "
                       "split hidden_size", path, HS, mc->d_model, mc->n_head);
    if (config_validate(mc, err)) { err_prefix(err, path); return -1; }
    return 0;
}

// Whether the model reads tensor h: one of its parameters, a buffer the
// architecture names (LLaMA's rotary inverse frequencies in older
// exports), or beside a tied head an lm_head of the embedding's shape.
typedef struct { const ParamTable *t; const ModelConfig *c; const Arch *ar; } Reads;
static int model_reads(const StTensor *h, void *ctx) {
    const Reads *r = ctx;
    char name[160];
    for (int i = 0; i < r->t->n; i++) {
        hf_name(r->ar, &r->t->p[i], name, sizeof name);
        if (!strcmp(name, h->name)) return 1;
    }
    if (r->ar->tied_head && !strcmp(h->name, "lm_head.weight"))
        return h->ndim == 2 && h->shape[0] == r->c->vocab && h->shape[1] == r->c->d_model;
    int layer, end = 0;
    const char *buf = r->ar->hf->buffer;
    return buf && sscanf(h->name, buf, &layer, &end) == 1 && end && !h->name[end] && layer >= 0 &&
           layer < r->c->n_layer;
}

int hf_model_open(HfDir *d, const char *dir, ModelConfig *cfg, Err *err) {
    memset(d, 0, sizeof *d);
    char path[4200];
    Json *j = hf_config_read(dir, path, sizeof path, err);
    int rc = j ? hf_model_config(j, path, cfg, err) : -1;
    json_free(j);
    if (rc || hf_open_weights(d, dir, err)) {
        hf_dir_close(d);
        return -1;
    }
    const Arch *ar = arch_of(cfg);
    if (ar->hf->conv1d) {   // its sizes come from the weights: weights_open reads it
        err_set(err, ERR_USAGE, "%s: a %s directory (Conv1D weights): open it with weights_open", dir, ar->label);
        hf_dir_close(d);
        return -1;
    }
    ModelSlice sl = slice_whole(cfg);
    ParamTable t = {0};
    char what[64];
    snprintf(what, sizeof what, "a %d-layer %s", cfg->n_layer, ar->label);
    Reads r = {&t, cfg, ar};
    rc = ptable_build(&t, cfg, &sl, err) || hf_dir_check_read(d, model_reads, &r, what, err) ? -1 : 0;
    ptable_free(&t);
    if (rc) {
        err_prefix(err, dir);
        hf_dir_close(d);
    }
    return rc;
}

int hf_model_load(const HfDir *d, const ModelConfig *c, const ParamTable *t, float *params, Err *err) {
    const Arch *ar = arch_of(c);
    for (int i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        char name[160];
        hf_name(ar, p, name, sizeof name);
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

// The tensors of a whole model under their Hugging Face names, written to
// path (the padding rows are last: left out by the shape).
static int write_tensors(const ModelConfig *c, const ParamTable *t, const float *params, const char *path,
                         StDtype dtype, Err *err) {
    const Arch *ar = arch_of(c);
    StWrite *w = calloc((size_t)t->n + 1, sizeof *w);
    char (*names)[160] = calloc((size_t)t->n + 1, sizeof *names);
    if (!w || !names) { free(w); free(names); return err_set(err, ERR_RUN, "out of memory"); }
    int rc = 0;
    for (int i = 0; i < t->n && !rc; i++) {
        const ParamInfo *p = &t->p[i];
        if (p->shard_dim >= 0 && p->lshape[p->shard_dim] != p->shape[p->shard_dim])
            rc = err_set(err, ERR_USAGE, "export needs the whole model (got a slice of %s)", p->name);
        hf_name(ar, p, names[i], sizeof names[i]);
        w[i] = (StWrite){.name = names[i], .ndim = p->ndim, .data = params + p->offset, .dtype = dtype};
        for (int k = 0; k < p->ndim; k++) w[i].shape[k] = k ? p->shape[k] : hf_rows(p, c);
    }
    if (!rc) rc = st_write(path, w, t->n, err);
    free(w);
    free(names);
    return rc;
}

// config.json for c: its architecture's keys in their order — each read
// key from its model field, each fixed feature at the value tessera
// implements, a bookkeeping key where the architecture names its value —
// then the dtype.
static void write_config(const ModelConfig *c, StDtype dtype, JsonBuf *b) {
    const ArchHf *hf = arch_of(c)->hf;
    jb_obj_begin(b);
    jb_key(b, "architectures"); jb_arr_begin(b); jb_str(b, hf->architecture); jb_arr_end(b);
    for (int k = 0; k < hf->nkeys; k++) {
        const HfKey *key = &hf->keys[k];
        if (key->kind == HF_KEY_READ && key->want) {
            int kind = config_field_kind(key->want);
            double v = config_field(c, key->want);
            jb_key(b, key->name);
            if (kind == CONFIG_BOOL) jb_bool(b, v != 0);
            else if (kind == CONFIG_INT) jb_int(b, (int64_t)v);
            else {   // a float field: the shortest text that reads back to the same float
                char num[40];
                for (int sig = 6; sig <= 9 && !(v == floor(v) && fabs(v) < 1e15); sig++) {
                    snprintf(num, sizeof num, "%.*g", sig, v);
                    if ((float)strtod(num, NULL) == (float)v) break;
                }
                if (v == floor(v) && fabs(v) < 1e15) snprintf(num, sizeof num, "%.1f", v);   // 1000000.0, as Python writes it
                jb_raw(b, num);
            }
        } else if (key->kind != HF_KEY_READ && key->want) {
            char first[64];
            snprintf(first, sizeof first, "%.*s", (int)strcspn(key->want, "|"), key->want);
            jb_key(b, key->name);
            jb_raw(b, first);
        }
    }
    jb_key(b, "torch_dtype"); jb_str(b, dtype == ST_BF16 ? "bfloat16" : dtype == ST_F16 ? "float16" : "float32");
    jb_obj_end(b);
    jb_raw(b, "\n");
}

int hf_export_dir(const ModelConfig *c, const ParamTable *t, const float *params, const char *dir, StDtype dtype,
                  Err *err) {
    if (!arch_of(c)->hf) return err_set(err, ERR_USAGE, "%s has no Hugging Face form", config_arch_name(c->arch));
    if (hf_dir_prepare(dir, err)) return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (arch_of(c)->hf->conv1d ? hf_export(c, t, params, path, dtype, err) : write_tensors(c, t, params, path, dtype, err))
        return -1;
    JsonBuf b;
    jb_init(&b);
    write_config(c, dtype, &b);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = file_write_whole(path, b.s, b.len, err);
    jb_free(&b);
    return rc;
}
