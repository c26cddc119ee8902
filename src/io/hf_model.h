// io/hf_model — any architecture of the registry (model/arch) <-> a Hugging
// Face model directory: config.json and model.safetensors, or shards that
// model.safetensors.index.json lists. The architecture's ArchHf says
// everything that differs: config.json's model_type and keys (each read
// into a model field, fixed at the value tessera implements, or ignored)
// and the tensor names' prefix.
//
// Names gain the prefix ("model.": layers.0.self_attn.q_proj.weight ->
// model.layers.0.self_attn.q_proj.weight; an untied lm_head.weight stays
// as it is); shapes are tessera's, (out, in) — Hugging Face's q_proj and
// k_proj rows are already in the rotate_half order tessera's rotary
// embedding uses — and the embeddings and the head lose their vocabulary
// padding. An architecture with Conv1D weights (GPT-2: ArchHf.conv1d)
// keeps its own tensor mapping (io/hf_gpt2) and shares the config.json
// reader and writer here.
#ifndef TSR_IO_HF_MODEL_H
#define TSR_IO_HF_MODEL_H

#include "core/check.h"
#include "core/json.h"
#include "io/hf_dir.h"
#include "model/params.h"

// The architecture config.json (cfg, read from path) names by model_type,
// and the model its keys describe: every key must be one the architecture
// knows, a fixed feature must have the value tessera implements, sizes
// must be integers and every value in range. A key left out keeps the
// model field's default (d_ff: 4·d_model). Errors name the file and key.
int hf_model_config(const Json *cfg, const char *path, ModelConfig *mc, Err *err);
// Reads dir/config.json into cfg and opens its weights: every tensor must
// be one the model reads (a buffer the architecture names, and an lm_head
// of the embedding's shape beside a tied head, are let be). Not for a
// Conv1D architecture (weights_open reads those). Errors name the file.
int hf_model_open(HfDir *d, const char *dir, ModelConfig *cfg, Err *err);
// Fills params (the flat buffer of table t: any slice of the model).
int hf_model_load(const HfDir *d, const ModelConfig *c, const ParamTable *t, float *params, Err *err);
// Writes the whole model as dir/config.json and dir/model.safetensors (dir
// is made if it does not exist, and must hold no other safetensors
// weights: hf_dir_prepare), for every architecture.
int hf_export_dir(const ModelConfig *c, const ParamTable *t, const float *params, const char *dir, StDtype dtype,
                  Err *err);

#endif
