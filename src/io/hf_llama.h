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
#include "io/hf_dir.h"
#include "model/params.h"

// Reads dir/config.json into cfg (LlamaForCausalLM: the architecture,
// sizes, key/value heads, rms_norm_eps, rope_theta) and opens its weights.
// A key whose feature tessera lacks (hidden_act other than silu,
// rope_scaling, attention or MLP biases, a tied head) is refused by name,
// sizes must be integers, and every tensor must be one the model reads.
// Errors name the file and field.
int hf_llama_open(HfDir *d, const char *dir, ModelConfig *cfg, Err *err);
// Fills params (the flat buffer of table t: any slice of the model).
int hf_llama_load(const HfDir *d, const ModelConfig *c, const ParamTable *t, float *params, Err *err);
// Writes the whole model as dir/config.json and dir/model.safetensors (dir
// is made if it does not exist).
int hf_llama_export(const ModelConfig *c, const ParamTable *t, const float *params, const char *dir, StDtype dtype,
                    Err *err);

#endif
