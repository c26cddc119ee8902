// io/hf_llama — tessera's LLaMA parameters <-> a Hugging Face
// LlamaForCausalLM model directory: config.json and model.safetensors, or
// shards that model.safetensors.index.json lists.
//
// Names gain "model." (layers.0.self_attn.q_proj.weight ->
// model.layers.0.self_attn.q_proj.weight; lm_head.weight stays as it is);
// shapes are tessera's, (out, in) — Hugging Face's q_proj and k_proj rows
// are already in the rotate_half order tessera's rotary embedding uses —
// and the embeddings and the head lose their vocabulary padding.
#ifndef TSR_IO_HF_LLAMA_H
#define TSR_IO_HF_LLAMA_H

#include "core/check.h"
#include "io/safetensors.h"
#include "model/params.h"

enum { HF_MAX_SHARDS = 64 };

typedef struct HfDir {
    StFile f[HF_MAX_SHARDS];
    int n;
} HfDir;

// Whether path is a model directory (it holds config.json).
int hf_is_dir(const char *path);
// Opens a model directory's weights: the shards model.safetensors.index.json
// lists, or model.safetensors (any architecture).
int hf_open_weights(HfDir *d, const char *dir, Err *err);
// Reads dir/config.json into cfg (LlamaForCausalLM: the architecture,
// sizes, key/value heads, rms_norm_eps, rope_theta; an untied head) and
// opens its safetensors. Errors name the file and field.
int hf_llama_open(HfDir *d, const char *dir, ModelConfig *cfg, Err *err);
// Closes the directory's files (of hf_llama_open or hf_open_weights).
void hf_dir_close(HfDir *d);
// Fills params (the flat buffer of table t: any slice of the model).
int hf_llama_load(const HfDir *d, const ModelConfig *c, const ParamTable *t, float *params, Err *err);
// Writes the whole model as dir/config.json and dir/model.safetensors (dir
// is made if it does not exist).
int hf_llama_export(const ModelConfig *c, const ParamTable *t, const float *params, const char *dir, StDtype dtype,
                    Err *err);

#endif
