#include "io/weights.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/hf_gpt2.h"
#include "io/hf_model.h"

// GPT-2 weights (Conv1D): one file, or a directory whose config.json (cfg,
// at cpath) states the head count and the sizes the weights must have.
static int open_gpt2(Weights *w, const char *path, const Json *cfg, const char *cpath, const ModelConfig *hint,
                     Err *err) {
    int heads = 0;
    if (cfg && hf_gpt2_config(cfg, cpath, &heads, err)) return -1;
    if (cfg ? hf_open_weights(&w->hd, path, err) : hf_open_file(&w->hd, path, err)) return -1;
    ModelConfig fc = {.n_head = heads ? heads : hint ? hint->n_head : 0};
    if (hf_read_config(&w->hd, &fc, err)) { err_prefix(err, path); return -1; }
    if (!heads && hint && hint->d_model && fc.d_model != hint->d_model) {   // the hint does not describe this file: infer the heads too
        fc.n_head = 0;
        if (hf_read_config(&w->hd, &fc, err)) { err_prefix(err, path); return -1; }
    }
    if (cfg && hf_gpt2_config_match(cfg, cpath, &fc, err)) return -1;
    w->mc = fc;
    return 0;
}

static int open_any(Weights *w, const char *path, const ModelConfig *hint, Err *err) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && !hf_is_dir(path)) {   // tessera's own
        w->kind = WEIGHTS_CKPT;
        return ckpt_open(&w->ck, path, err) || ckpt_config(w->ck, &w->mc, err) ? -1 : 0;
    }
    if (!hf_is_dir(path)) {
        w->kind = WEIGHTS_HF_CONV1D;
        return open_gpt2(w, path, NULL, NULL, hint, err);
    }
    w->is_dir = 1;
    char cpath[4200];
    Json *cfg = hf_config_read(path, cpath, sizeof cpath, err);
    if (!cfg) return -1;
    // the architecture model_type names: a Conv1D one's sizes come from its
    // weights (config.json must agree), any other's from config.json
    ModelConfig mc;
    int rc = hf_model_config(cfg, cpath, &mc, err);
    if (!rc && arch_of(&mc)->hf->conv1d) {
        w->kind = WEIGHTS_HF_CONV1D;
        rc = open_gpt2(w, path, cfg, cpath, hint, err);
    } else if (!rc) {
        w->kind = WEIGHTS_HF;
        rc = hf_model_open(&w->hd, path, &w->mc, err);
    }
    json_free(cfg);
    return rc;
}

int weights_open(Weights *w, const char *path, const ModelConfig *hint, Err *err) {
    memset(w, 0, sizeof *w);
    if (!open_any(w, path, hint, err)) return 0;
    weights_close(w);
    return -1;
}

int weights_load(Weights *w, const ModelConfig *c, const ParamTable *t, float *params, Err *err) {
    switch (w->kind) {
    case WEIGHTS_CKPT: return ckpt_load_params(w->ck, t, params, err);
    case WEIGHTS_HF: return hf_model_load(&w->hd, c, t, params, err);
    case WEIGHTS_HF_CONV1D: return hf_load(&w->hd, c, t, params, err);
    }
    return -1;
}

void weights_close(Weights *w) {
    ckpt_close(w->ck);
    w->ck = NULL;
    hf_dir_close(&w->hd);
}
