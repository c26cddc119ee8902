#include "model/config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct { const char *name; ArchId arch; int L, NH, KV, C, F, T, V; float eps; } Preset;

// GPT-2's FFN is 4·C; LLaMA's about 8/3·C, rounded as Meta rounds it.
// llama-120m is sized like gpt2-124m, for comparisons.
static const Preset presets[] = {
    {"gpt2-tiny", ARCH_GPT2, 4, 4, 0, 128, 512, 64, 50257, 0},
    {"gpt2-124m", ARCH_GPT2, 12, 12, 0, 768, 3072, 1024, 50257, 0},
    {"gpt2-350m", ARCH_GPT2, 24, 16, 0, 1024, 4096, 1024, 50257, 0},
    {"gpt2-774m", ARCH_GPT2, 36, 20, 0, 1280, 5120, 1024, 50257, 0},
    {"gpt2-1558m", ARCH_GPT2, 48, 25, 0, 1600, 6400, 1024, 50257, 0},
    {"llama-tiny", ARCH_LLAMA, 4, 4, 2, 128, 352, 64, 32000, 1e-5f},
    {"llama-120m", ARCH_LLAMA, 12, 12, 0, 768, 2048, 1024, 32000, 1e-5f},
    {"llama-7b", ARCH_LLAMA, 32, 32, 0, 4096, 11008, 2048, 32000, 1e-6f},
    {"llama2-7b", ARCH_LLAMA, 32, 32, 0, 4096, 11008, 4096, 32000, 1e-5f},
    {"llama2-13b", ARCH_LLAMA, 40, 40, 0, 5120, 13824, 4096, 32000, 1e-5f},
    {"llama2-70b", ARCH_LLAMA, 80, 64, 8, 8192, 28672, 4096, 32000, 1e-5f},
};

const char *config_preset_list(void) {
    return "gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, llama-tiny, llama-120m, llama-7b, llama2-7b, "
           "llama2-13b, llama2-70b";
}

float config_rope_theta(const ModelConfig *c) { return c->rope_theta > 0 ? c->rope_theta : 10000.0f; }
float config_norm_eps(const ModelConfig *c) { return c->norm_eps > 0 ? c->norm_eps : 1e-5f; }

void config_set_vocab(ModelConfig *c, int vocab) { config_pad_vocab(c, vocab, 1); }

void config_pad_vocab(ModelConfig *c, int vocab, int tp) {
    int m = VOCAB_PAD * (tp > 0 ? tp : 1);
    c->vocab = vocab;
    c->vocab_padded = (int)(((int64_t)vocab + m - 1) / m * m);
}

int config_preset(ModelConfig *c, const char *name, Err *err) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const Preset *p = &presets[i];
        if (strcmp(p->name, name) != 0) continue;
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", p->name);
        c->arch = p->arch;
        c->n_layer = p->L;
        c->n_head = p->NH;
        c->n_kv_head = p->KV;
        c->d_model = p->C;
        c->d_ff = p->F;
        c->max_seq = p->T;
        c->norm_eps = p->eps;
        config_set_vocab(c, p->V);
        return 0;
    }
    return err_set(err, ERR_USAGE, "unknown model preset '%s' (known: %s)", name, config_preset_list());
}

// The model object's fields: where each goes, its range, and the
// architectures that have it. A field of another architecture is refused
// (config_from_json by key, config_validate by a nonzero value), so every
// entry point sees the same rule.
enum { ARCHS_ALL = 1u << ARCH_GPT2 | 1u << ARCH_LLAMA, ARCHS_LLAMA = 1u << ARCH_LLAMA };
typedef struct { const char *key; size_t off; int is_float; double lo, hi; unsigned archs; } Field;

static const Field fields[] = {
    {"n_layer", offsetof(ModelConfig, n_layer), 0, 1, 1 << 30, ARCHS_ALL},
    {"n_head", offsetof(ModelConfig, n_head), 0, 1, 1 << 30, ARCHS_ALL},
    {"n_kv_head", offsetof(ModelConfig, n_kv_head), 0, 1, 1 << 30, ARCHS_LLAMA},
    {"d_model", offsetof(ModelConfig, d_model), 0, 1, 1 << 30, ARCHS_ALL},
    {"d_ff", offsetof(ModelConfig, d_ff), 0, 1, 1 << 30, ARCHS_ALL},
    {"max_seq", offsetof(ModelConfig, max_seq), 0, 1, 1 << 30, ARCHS_ALL},
    {"vocab", offsetof(ModelConfig, vocab), 0, 1, 1 << 30, ARCHS_ALL},
    {"rope_theta", offsetof(ModelConfig, rope_theta), 1, 1, 1e12, ARCHS_LLAMA},
    {"norm_eps", offsetof(ModelConfig, norm_eps), 1, 1e-12, 1, ARCHS_LLAMA},
};
enum { NFIELDS = sizeof fields / sizeof fields[0] };

static int field_has(const Field *f, ArchId a) { return f->archs >> a & 1u; }

static double field_value(const ModelConfig *c, const Field *f) {
    const char *p = (const char *)c + f->off;
    return f->is_float ? *(const float *)p : *(const int *)p;
}

// The architecture that has a field of one architecture only, for messages.
static const char *field_archs(const Field *f) { return config_arch_name(f->archs == ARCHS_LLAMA ? ARCH_LLAMA : ARCH_GPT2); }

static int field_read(ModelConfig *c, const Field *f, const Json *v, Err *err) {
    char *p = (char *)c + f->off;
    if (!f->is_float) {
        int64_t x;
        if (json_int64(v, &x) || x < f->lo || x > f->hi)
            return err_set(err, ERR_USAGE, "model field '%s' must be a positive integer", f->key);
        *(int *)p = (int)x;
    } else {
        if (v->type != JSON_NUM || !(v->num >= f->lo && v->num <= f->hi))
            return err_set(err, ERR_USAGE, "model field '%s' must be a number in [%g, %g]", f->key, f->lo, f->hi);
        *(float *)p = (float)v->num;
    }
    return 0;
}

void config_clear_foreign(ModelConfig *c) {
    for (int i = 0; i < NFIELDS; i++)
        if (!field_has(&fields[i], c->arch)) {
            char *p = (char *)c + fields[i].off;
            if (fields[i].is_float) *(float *)p = 0;
            else *(int *)p = 0;
        }
}

static const Field *field_find(const char *key) {
    for (int i = 0; i < NFIELDS; i++)
        if (!strcmp(fields[i].key, key)) return &fields[i];
    return NULL;
}

int config_from_json(ModelConfig *c, const Json *j, Err *err) {
    if (!j || j->type != JSON_OBJ) return err_set(err, ERR_USAGE, "model must be a JSON object");
    for (const Json *m = j->child; m; m = m->next)
        if (strcmp(m->key, "preset") && strcmp(m->key, "arch") && !field_find(m->key))
            return err_set(err, ERR_USAGE, "unknown model field '%s'", m->key);
    const Json *p = json_get(j, "preset");
    if (p) {
        if (p->type != JSON_STR) return err_set(err, ERR_USAGE, "model field 'preset' must be a string");
        if (config_preset(c, p->text, err)) return -1;
    } else {
        memset(c, 0, sizeof *c);
        config_set_vocab(c, 50257);
    }
    const Json *ar = json_get(j, "arch");
    if (ar && (ar->type != JSON_STR || config_arch_parse(ar->text, &c->arch)))
        return err_set(err, ERR_USAGE, "model field 'arch' must be \"gpt2\" or \"llama\"");
    config_clear_foreign(c);   // a preset of another architecture keeps only the fields this one has
    for (const Json *m = j->child; m; m = m->next) {
        const Field *f = field_find(m->key);
        if (!f) continue;
        if (!field_has(f, c->arch))
            return err_set(err, ERR_USAGE, "model field '%s' is a %s field: a %s model has none", f->key, field_archs(f),
                           config_arch_name(c->arch));
        if (field_read(c, f, m, err)) return -1;
    }
    config_set_vocab(c, c->vocab);
    if (!json_get(j, "d_ff") && !p) c->d_ff = 4 * c->d_model;
    if (!p || j->len > 1) snprintf(c->name, sizeof c->name, "custom");
    return 0;
}

void config_to_json(const ModelConfig *c, JsonBuf *b) {
    jb_obj_begin(b);
    jb_key(b, "arch"); jb_str(b, config_arch_name(c->arch));
    jb_key(b, "name"); jb_str(b, c->name);
    jb_key(b, "n_layer"); jb_int(b, c->n_layer);
    jb_key(b, "n_head"); jb_int(b, c->n_head);
    if (c->n_kv_head) { jb_key(b, "n_kv_head"); jb_int(b, c->n_kv_head); }
    jb_key(b, "d_model"); jb_int(b, c->d_model);
    jb_key(b, "d_ff"); jb_int(b, c->d_ff);
    jb_key(b, "max_seq"); jb_int(b, c->max_seq);
    jb_key(b, "vocab"); jb_int(b, c->vocab);
    jb_key(b, "vocab_padded"); jb_int(b, c->vocab_padded);
    if (c->arch == ARCH_LLAMA) {
        jb_key(b, "rope_theta"); jb_num(b, config_rope_theta(c));
        jb_key(b, "norm_eps"); jb_num(b, config_norm_eps(c));
    }
    jb_obj_end(b);
}

int config_validate(const ModelConfig *c, Err *err) {
    if (c->n_layer < 1 || c->n_layer > 4096) return err_set(err, ERR_USAGE, "n_layer must be in 1..4096 (got %d)", c->n_layer);
    if (c->n_head < 1) return err_set(err, ERR_USAGE, "n_head must be at least 1 (got %d)", c->n_head);
    if (c->d_model < 1 || c->d_model > 65536) return err_set(err, ERR_USAGE, "d_model must be in 1..65536 (got %d)", c->d_model);
    if (c->d_model % c->n_head)
        return err_set(err, ERR_USAGE, "n_head (%d) must divide d_model (%d)", c->n_head, c->d_model);
    if (c->n_kv_head < 0 || c->n_head % config_kv_heads(c))
        return err_set(err, ERR_USAGE, "n_kv_head (%d) must divide n_head (%d)", c->n_kv_head, c->n_head);
    if (c->d_ff < 1 || c->d_ff > 1 << 20) return err_set(err, ERR_USAGE, "d_ff must be in 1..1048576 (got %d)", c->d_ff);
    if (c->max_seq < 1 || c->max_seq > 1 << 20) return err_set(err, ERR_USAGE, "max_seq must be in 1..1048576 (got %d)", c->max_seq);
    if (c->vocab < 2 || c->vocab > 1 << 24) return err_set(err, ERR_USAGE, "vocab must be in 2..16777216 (got %d)", c->vocab);
    for (int i = 0; i < NFIELDS; i++)
        if (!field_has(&fields[i], c->arch) && field_value(c, &fields[i]) != 0)
            return err_set(err, ERR_USAGE, "%s (%g) is a %s field: a %s model has none", fields[i].key,
                           field_value(c, &fields[i]), field_archs(&fields[i]), config_arch_name(c->arch));
    // the kernels' own requirements, so that no entry point reaches their CHECKs
    if (c->arch == ARCH_LLAMA && (c->d_model / c->n_head) % 2)
        return err_set(err, ERR_USAGE, "the head size d_model/n_head = %d/%d = %d is odd: LLaMA's rotary embedding turns "
                       "pairs of channels, so it must be even", c->d_model, c->n_head, c->d_model / c->n_head);
    return 0;
}

const char *config_arch_name(ArchId a) { return a == ARCH_LLAMA ? "llama" : "gpt2"; }

int config_arch_parse(const char *name, ArchId *out) {
    if (!strcmp(name, "gpt2")) *out = ARCH_GPT2;
    else if (!strcmp(name, "llama")) *out = ARCH_LLAMA;
    else return -1;
    return 0;
}

int config_kv_heads(const ModelConfig *c) { return c->n_kv_head > 0 ? c->n_kv_head : c->n_head; }
