#include "io/hf_gpt2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/json.h"

// Hugging Face shape of tensor p (whole model), and whether p is stored
// transposed there; returns ndim.
static int hf_shape(const ParamInfo *p, const ModelConfig *c, int64_t *shape, int *transposed) {
    *transposed = 0;
    if (p->role == ROLE_TOK_EMB) { shape[0] = c->vocab; shape[1] = c->d_model; return 2; }
    if (p->role == ROLE_QKV) { shape[0] = c->d_model; shape[1] = 3 * (int64_t)c->d_model; *transposed = 1; return 2; }
    if (p->role == ROLE_QKV_BIAS) { shape[0] = 3 * (int64_t)c->d_model; return 1; }
    if (p->role == ROLE_LINEAR) {
        shape[0] = p->shape[1];
        shape[1] = p->shape[0];
        *transposed = 1;
        return 2;
    }
    for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
    return p->ndim;
}

// Flat index in the Hugging Face tensor of global element g of p, or -1
// for vocabulary padding.
static int64_t hf_index(const ParamInfo *p, const ModelConfig *c, const int64_t *g) {
    int64_t C = c->d_model;
    if (p->role == ROLE_TOK_EMB) return g[0] < c->vocab ? g[0] * C + g[1] : -1;
    if (p->role == ROLE_QKV) return g[2] * 3 * C + g[0] * C + g[1];   // (which, out, in) -> (in, which·C+out)
    if (p->role == ROLE_LINEAR) return g[1] * p->shape[0] + g[0];     // (out, in) -> (in, out)
    int64_t f = 0;
    for (int d = 0; d < p->ndim; d++) f = f * p->shape[d] + g[d];
    return f;
}

// Global multi-index of local element i of p.
static void global_of(const ParamInfo *p, size_t i, int64_t *g) {
    for (int d = p->ndim - 1; d >= 0; d--) {
        g[d] = (int64_t)(i % (size_t)p->lshape[d]);
        i /= (size_t)p->lshape[d];
    }
    if (p->shard_dim >= 0) g[p->shard_dim] += p->shard_off;
}

// This mapping is GPT2LMHeadModel's.
static int check_arch(const ModelConfig *c, Err *err) {
    if (c->arch != ARCH_GPT2)
        return err_set(err, ERR_USAGE, "a single safetensors file holds GPT-2 (GPT2LMHeadModel names), not %s: write a "
                       "model directory with --hf-dir", config_arch_name(c->arch));
    return 0;
}

int hf_export(const ModelConfig *c, const ParamTable *t, const float *params, const char *path, StDtype dtype, Err *err) {
    if (check_arch(c, err)) return -1;
    StWrite *w = calloc((size_t)t->n, sizeof *w);
    char (*names)[96] = calloc((size_t)t->n, sizeof *names);
    float **bufs = calloc((size_t)t->n, sizeof *bufs);
    int rc = -1, k = 0;
    if (!w || !names || !bufs) { err_set(err, ERR_RUN, "out of memory"); goto done; }
    for (int i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        if (p->shard_dim >= 0) { err_set(err, ERR_USAGE, "export needs the whole model (got a slice of %s)", p->name); goto done; }
        int tr;
        w[k].ndim = hf_shape(p, c, w[k].shape, &tr);
        int64_t numel = 1;
        for (int d = 0; d < w[k].ndim; d++) numel *= w[k].shape[d];
        bufs[k] = malloc((size_t)numel * sizeof(float) + 1);
        if (!bufs[k]) { err_set(err, ERR_RUN, "out of memory"); goto done; }
        const float *src = params + p->offset;
        for (size_t e = 0; e < p->numel; e++) {
            int64_t g[PARAM_MAX_DIM];
            global_of(p, e, g);
            int64_t f = hf_index(p, c, g);
            if (f >= 0) bufs[k][f] = src[e];
        }
        snprintf(names[k], sizeof names[k], "transformer.%s", p->name);
        w[k].name = names[k];
        w[k].data = bufs[k];
        w[k].dtype = dtype;
        k++;
    }
    rc = st_write(path, w, k, err);
done:
    for (int i = 0; bufs && i < t->n; i++) free(bufs[i]);
    free(bufs);
    free(names);
    free(w);
    return rc;
}

// The files' tensor for tessera name `name` (with or without
// "transformer."), and in *which the file that holds it.
static const StTensor *find(const HfDir *d, const char *name, const StFile **which) {
    char full[128];
    snprintf(full, sizeof full, "transformer.%s", name);
    const StTensor *t = hf_dir_find(d, full, which);
    return t ? t : hf_dir_find(d, name, which);
}

// The name of GPT-2's tensor with this role (in the block: the first whose
// leading dimension is dim0), with the block prefix of layer `layer`.
static const char *gpt2_name(Part part, Role role, int has_dim0, Dim dim0, int layer, char *buf, size_t cap) {
    const Arch *a = &arch_gpt2;
    for (int i = 0; i < a->n[part]; i++) {
        const TensorDesc *d = &a->part[part][i];
        if (d->role != role || (has_dim0 && d->dim[0] != dim0)) continue;
        int k = part == PART_BLOCK ? snprintf(buf, cap, a->block_prefix, layer) : 0;
        snprintf(buf + k, cap - (size_t)k, "%s", d->name);
        return buf;
    }
    CHECKF(0, "GPT-2 has no tensor of role %d in part %d", (int)role, (int)part);
    return NULL;
}

// Whether the GPT-2 model c reads tensor h: a parameter (with or without
// "transformer.", not both), an attention-mask buffer of one of its layers,
// or an lm_head of wte's shape (the tied head).
typedef struct { const HfDir *d; const ParamTable *t; const ModelConfig *c; } Reads;
static int gpt2_reads(const StTensor *h, void *ctx) {
    const Reads *r = ctx;
    const char *n = h->name;
    int prefixed = !strncmp(n, "transformer.", 12);
    if (prefixed) n += 12;
    else {   // a bare name beside the prefixed one: only one of them is read
        char full[200];
        snprintf(full, sizeof full, "transformer.%s", n);
        if (hf_dir_find(r->d, full, NULL)) return 0;
    }
    for (int i = 0; i < r->t->n; i++)
        if (!strcmp(r->t->p[i].name, n)) return 1;
    if (!prefixed && !strcmp(n, "lm_head.weight"))
        return h->ndim == 2 && h->shape[0] == r->c->vocab && h->shape[1] == r->c->d_model;
    int layer, end = 0;
    return (sscanf(n, "h.%d.attn.bias%n", &layer, &end) == 1 || sscanf(n, "h.%d.attn.masked_bias%n", &layer, &end) == 1) &&
           end && !n[end] && layer >= 0 && layer < r->c->n_layer;
}

int hf_read_config(const HfDir *d, ModelConfig *cfg, Err *err) {
    char nt[64], np[64], nf[64], nl[64];
    gpt2_name(PART_EMBED, ROLE_TOK_EMB, 0, 0, 0, nt, sizeof nt);
    gpt2_name(PART_EMBED, ROLE_POS_EMB, 0, 0, 0, np, sizeof np);
    gpt2_name(PART_BLOCK, ROLE_LINEAR, 1, DIM_F, 0, nf, sizeof nf);   // the MLP's first linear: (F, C)
    const StTensor *wte = find(d, nt, NULL), *wpe = find(d, np, NULL), *fc = find(d, nf, NULL);
    if (!wte || wte->ndim != 2) return err_set(err, ERR_USAGE, "no 2-d %s: not a GPT-2 model", nt);
    if (!wpe || wpe->ndim != 2) return err_set(err, ERR_USAGE, "no 2-d %s: not a GPT-2 model", np);
    if (!fc || fc->ndim != 2) return err_set(err, ERR_USAGE, "no 2-d %s: not a GPT-2 model", nf);
    int L = 0;
    for (;; L++) {   // layers: as many as have the block's first tensor
        int k = snprintf(nl, sizeof nl, arch_gpt2.block_prefix, L);
        snprintf(nl + k, sizeof nl - (size_t)k, "%s", arch_gpt2.part[PART_BLOCK][0].name);
        if (!find(d, nl, NULL)) break;
    }
    int heads = cfg->n_head;
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->name, sizeof cfg->name, "imported");
    cfg->arch = ARCH_GPT2;
    cfg->n_layer = L;
    cfg->d_model = (int)wte->shape[1];
    cfg->d_ff = (int)fc->shape[1];   // stored (in, out): Conv1D
    cfg->max_seq = (int)wpe->shape[0];
    cfg->n_head = heads > 0 ? heads : cfg->d_model / 64 > 0 ? cfg->d_model / 64 : 1;
    config_set_vocab(cfg, (int)wte->shape[0]);
    if (config_validate(cfg, err)) return -1;
    ModelSlice sl = slice_whole(cfg);
    ParamTable t = {0};
    char what[64];
    snprintf(what, sizeof what, "a %d-layer GPT-2", L);
    Reads r = {d, &t, cfg};
    int rc = ptable_build(&t, cfg, &sl, err) || hf_dir_check_read(d, gpt2_reads, &r, what, err) ? -1 : 0;
    ptable_free(&t);
    return rc;
}

int hf_load(const HfDir *d, const ModelConfig *c, const ParamTable *t, float *params, Err *err) {
    if (check_arch(c, err)) return -1;
    for (int i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        const StFile *f = NULL;
        const StTensor *h = find(d, p->name, &f);
        if (!h) return err_set(err, ERR_USAGE, "tensor transformer.%s is missing", p->name);
        int64_t shape[PARAM_MAX_DIM];
        int tr, nd = hf_shape(p, c, shape, &tr);
        int ok = h->ndim == nd && (h->dtype == ST_F32 || h->dtype == ST_F16 || h->dtype == ST_BF16);
        for (int k = 0; ok && k < nd; k++) ok = h->shape[k] == shape[k];
        if (!ok)
            return err_set(err, ERR_USAGE, "tensor %s: shape or dtype does not fit this model (want %d-d float)", h->name, nd);
        float *dst = params + p->offset;
        for (size_t e = 0; e < p->numel; e++) {
            int64_t g[PARAM_MAX_DIM];
            global_of(p, e, g);
            int64_t fi = hf_index(p, c, g);
            dst[e] = fi >= 0 ? st_get(f, h, fi) : 0.0f;
            if (!isfinite(dst[e]))
                return err_set(err, ERR_USAGE, "tensor %s holds a non-finite value (%g at element %lld)", h->name, dst[e],
                               (long long)fi);
        }
    }
    return 0;
}

int hf_gpt2_config(const Json *cfg, const char *path, int *heads, Err *err) {
    *heads = 0;
    const ArchHf *hf = arch_gpt2.hf;
    int x = 0;
    if (hf_config_check(cfg, hf->keys, hf->nkeys, path, err) || hf_config_int(cfg, "n_head", 0, 1, 65536, heads, path, err))
        return -1;
    for (int k = 0; k < hf->nkeys; k++) {   // every size an integer (n_inner: or null)
        const Json *v = json_get(cfg, hf->keys[k].name);
        if (hf->keys[k].kind == HF_KEY_READ && v && !(v->type == JSON_NULL && !strcmp(v->key, "n_inner")) &&
            hf_config_int(cfg, hf->keys[k].name, 1, 1, 1 << 24, &x, path, err))
            return -1;
    }
    return 0;
}

int hf_gpt2_config_match(const Json *cfg, const char *path, const ModelConfig *c, Err *err) {
    const struct { const char *key; int have; } sz[] = {
        {"n_layer", c->n_layer}, {"n_embd", c->d_model}, {"n_inner", c->d_ff}, {"n_positions", c->max_seq},
        {"n_ctx", c->max_seq},   {"vocab_size", c->vocab}, {"n_head", c->n_head},
    };
    for (size_t k = 0; k < sizeof sz / sizeof sz[0]; k++) {
        const Json *v = json_get(cfg, sz[k].key);
        int64_t x;
        if (!v) continue;
        if (v->type == JSON_NULL) {   // n_inner null: 4·n_embd
            if (c->d_ff != 4 * c->d_model)
                return err_set(err, ERR_USAGE, "%s: n_inner is null (4·n_embd) but the weights hold %d", path, c->d_ff);
            continue;
        }
        if (json_int64(v, &x) || x != sz[k].have)
            return err_set(err, ERR_USAGE, "%s: %s is %s but the weights hold %d", path, sz[k].key, v->text, sz[k].have);
    }
    return 0;
}
