#include "model/config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "model/arch.h"

// A comma-separated list of the registry's preset names, the planning-only
// ones too or not, made once.
static const char *preset_list(int plan_only) {
    static char buf[2][1024];
    if (!buf[plan_only][0]) {
        size_t n = 0;
        for (int a = 0; a < ARCH_COUNT; a++)
            for (int i = 0; i < arch_registry[a]->npresets; i++) {
                const ArchPreset *p = &arch_registry[a]->presets[i];
                if (p->plan_only && !plan_only) continue;
                n += (size_t)snprintf(buf[plan_only] + n, sizeof buf[0] - n, "%s%s", n ? ", " : "", p->name);
                CHECK(n < sizeof buf[0]);
            }
    }
    return buf[plan_only];
}

const char *config_preset_list(void) { return preset_list(0); }
const char *config_preset_list_all(void) { return preset_list(1); }

float config_rope_theta(const ModelConfig *c) {
    float d = arch_registry[c->arch]->rope_theta;
    return c->rope_theta > 0 ? c->rope_theta : d > 0 ? d : 10000.0f;
}
float config_norm_eps(const ModelConfig *c) {
    float d = arch_registry[c->arch]->norm_eps;
    return c->norm_eps > 0 ? c->norm_eps : d > 0 ? d : 1e-5f;
}

void config_set_vocab(ModelConfig *c, int vocab) { config_pad_vocab(c, vocab, 1); }

void config_pad_vocab(ModelConfig *c, int vocab, int tp) {
    int m = VOCAB_PAD * (tp > 0 ? tp : 1);
    c->vocab = vocab;
    c->vocab_padded = (int)(((int64_t)vocab + m - 1) / m * m);
}

int config_preset_any(ModelConfig *c, const char *name, int plan_only, Err *err) {
    for (int a = 0; a < ARCH_COUNT; a++)
        for (int i = 0; i < arch_registry[a]->npresets; i++) {
            const ArchPreset *p = &arch_registry[a]->presets[i];
            if (strcmp(p->name, name) != 0 || (p->plan_only && !plan_only)) continue;
            *c = (ModelConfig){.arch = (ArchId)a, .n_layer = p->L, .n_head = p->NH, .n_kv_head = p->KV,
                               .d_model = p->C, .d_ff = p->F, .max_seq = p->S, .rope_theta = p->theta,
                               .norm_eps = p->eps, .tie_embeddings = p->tie};
            snprintf(c->name, sizeof c->name, "%s", p->name);
            config_set_vocab(c, p->V);
            return 0;
        }
    return err_set(err, ERR_USAGE, "unknown model preset '%s' (known: %s)", name, preset_list(plan_only));
}

int config_preset(ModelConfig *c, const char *name, Err *err) { return config_preset_any(c, name, 0, err); }

// The model object's fields: where each goes, its kind and range, and the
// config key bit (model/arch's KEY_*) of those only some architectures
// have (0: every one). A field the architecture lacks is refused
// (config_from_json by key, config_validate by a nonzero value), so every
// entry point sees the same rule.
enum { F_INT = CONFIG_INT, F_FLOAT = CONFIG_FLOAT, F_BOOL = CONFIG_BOOL };
typedef struct { const char *key; size_t off; int kind; double lo, hi; unsigned key_bit; } Field;

static const Field fields[] = {
    {"n_layer", offsetof(ModelConfig, n_layer), F_INT, 1, 1 << 30, 0},
    {"n_head", offsetof(ModelConfig, n_head), F_INT, 1, 1 << 30, 0},
    {"n_kv_head", offsetof(ModelConfig, n_kv_head), F_INT, 1, 1 << 30, KEY_KV_HEADS},
    {"d_model", offsetof(ModelConfig, d_model), F_INT, 1, 1 << 30, 0},
    {"d_ff", offsetof(ModelConfig, d_ff), F_INT, 1, 1 << 30, 0},
    {"max_seq", offsetof(ModelConfig, max_seq), F_INT, 1, 1 << 30, 0},
    {"vocab", offsetof(ModelConfig, vocab), F_INT, 1, 1 << 30, 0},
    {"rope_theta", offsetof(ModelConfig, rope_theta), F_FLOAT, 1, 1e12, KEY_ROPE_THETA},
    {"norm_eps", offsetof(ModelConfig, norm_eps), F_FLOAT, 1e-12, 1, KEY_NORM_EPS},
    {"tie_embeddings", offsetof(ModelConfig, tie_embeddings), F_BOOL, 0, 1, KEY_TIE},
};
enum { NFIELDS = sizeof fields / sizeof fields[0] };

static int field_has(const Field *f, ArchId a) { return !f->key_bit || (arch_registry[a]->keys & f->key_bit); }

static double field_value(const ModelConfig *c, const Field *f) {
    const char *p = (const char *)c + f->off;
    return f->kind == F_FLOAT ? *(const float *)p : *(const int *)p;
}

// The architectures that have a field, for messages ("llama, qwen2").
static const char *field_archs(const Field *f) {
    static char buf[128];
    size_t n = 0;
    for (int a = 0; a < ARCH_COUNT; a++)
        if (field_has(f, (ArchId)a) && n < sizeof buf)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? ", " : "", arch_registry[a]->name);
    return buf;
}

static int field_read(ModelConfig *c, const Field *f, const Json *v, Err *err) {
    char *p = (char *)c + f->off;
    if (f->kind == F_BOOL) {
        if (v->type != JSON_BOOL) return err_set(err, ERR_USAGE, "model field '%s' must be true or false", f->key);
        *(int *)p = v->boolean;
    } else if (f->kind == F_INT) {
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
            if (fields[i].kind == F_FLOAT) *(float *)p = 0;
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
        return err_set(err, ERR_USAGE, "model field 'arch' must be one of %s", config_arch_list());
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
    for (int i = 0; i < NFIELDS; i++) {
        const Field *f = &fields[i];
        if (!field_has(f, c->arch) || (f->off == offsetof(ModelConfig, n_kv_head) && !c->n_kv_head)) continue;
        jb_key(b, f->key);
        if (f->kind == F_FLOAT) jb_num(b, config_field(c, f->key));   // the architecture's default filled in
        else if (f->kind == F_BOOL) jb_bool(b, (int)field_value(c, f));
        else jb_int(b, (int64_t)field_value(c, f));   // n_kv_head as set: 0 stays absent
        if (f->off == offsetof(ModelConfig, vocab)) { jb_key(b, "vocab_padded"); jb_int(b, c->vocab_padded); }
    }
    jb_obj_end(b);
}

int config_set_field(ModelConfig *c, const char *key, const Json *v, Err *err) {
    const Field *f = field_find(key);
    if (!f) return err_set(err, ERR_USAGE, "unknown model field '%s'", key);
    return field_read(c, f, v, err);
}

double config_field(const ModelConfig *c, const char *key) {
    const Field *f = field_find(key);
    if (!f) return 0;
    if (f->off == offsetof(ModelConfig, n_kv_head)) return config_kv_heads(c);
    if (f->off == offsetof(ModelConfig, rope_theta)) return config_rope_theta(c);
    if (f->off == offsetof(ModelConfig, norm_eps)) return config_norm_eps(c);
    return field_value(c, f);
}

int config_field_kind(const char *key) {
    const Field *f = field_find(key);
    return f ? f->kind : 0;
}

int config_validate(const ModelConfig *c, Err *err) {
    if (c->arch < 0 || c->arch >= ARCH_COUNT) return err_set(err, ERR_USAGE, "unknown architecture %d", (int)c->arch);
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
    const Arch *a = arch_registry[c->arch];
    return a->validate ? a->validate(c, err) : 0;
}

const char *config_arch_name(ArchId a) { return a >= 0 && a < ARCH_COUNT ? arch_registry[a]->name : "?"; }

int config_arch_parse(const char *name, ArchId *out) {
    for (int a = 0; a < ARCH_COUNT; a++)
        if (!strcmp(name, arch_registry[a]->name)) {
            *out = (ArchId)a;
            return 0;
        }
    return -1;
}

const char *config_arch_list(void) {
    static char buf[256];
    if (!buf[0])
        for (int a = 0; a < ARCH_COUNT; a++) {
            size_t n = strlen(buf);
            snprintf(buf + n, sizeof buf - n, "%s\"%s\"", a ? ", " : "", arch_registry[a]->name);
        }
    return buf;
}

int config_kv_heads(const ModelConfig *c) { return c->n_kv_head > 0 ? c->n_kv_head : c->n_head; }
