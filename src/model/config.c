#include "model/config.h"

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

static int get_int(const Json *j, const char *key, int *out, Err *err) {
    const Json *v = json_get(j, key);
    if (!v) return 0;
    int64_t x;
    if (json_int64(v, &x) || x < 1 || x > (1 << 30))
        return err_set(err, ERR_USAGE, "model field '%s' must be a positive integer", key);
    *out = (int)x;
    return 0;
}

static int get_float(const Json *j, const char *key, float *out, double lo, double hi, Err *err) {
    const Json *v = json_get(j, key);
    if (!v) return 0;
    if (v->type != JSON_NUM || !(v->num >= lo && v->num <= hi))
        return err_set(err, ERR_USAGE, "model field '%s' must be a number in [%g, %g]", key, lo, hi);
    *out = (float)v->num;
    return 0;
}

int config_from_json(ModelConfig *c, const Json *j, Err *err) {
    static const char *known[] = {"preset", "arch", "n_layer", "n_head", "n_kv_head", "d_model", "d_ff", "max_seq",
                                  "vocab", "rope_theta", "norm_eps"};
    if (!j || j->type != JSON_OBJ) return err_set(err, ERR_USAGE, "model must be a JSON object");
    for (const Json *m = j->child; m; m = m->next) {
        int ok = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= strcmp(m->key, known[i]) == 0;
        if (!ok) return err_set(err, ERR_USAGE, "unknown model field '%s'", m->key);
    }
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
    int vocab = c->vocab;
    if (get_int(j, "n_layer", &c->n_layer, err) || get_int(j, "n_head", &c->n_head, err) ||
        get_int(j, "n_kv_head", &c->n_kv_head, err) || get_int(j, "d_model", &c->d_model, err) ||
        get_int(j, "d_ff", &c->d_ff, err) || get_int(j, "max_seq", &c->max_seq, err) || get_int(j, "vocab", &vocab, err) ||
        get_float(j, "rope_theta", &c->rope_theta, 1, 1e12, err) || get_float(j, "norm_eps", &c->norm_eps, 1e-12, 1, err))
        return -1;
    config_set_vocab(c, vocab);
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
