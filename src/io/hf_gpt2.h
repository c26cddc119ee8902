// io/hf_gpt2 — tessera's GPT-2 parameters <-> Hugging Face GPT2LMHeadModel
// tensors in safetensors files.
//
// Names gain "transformer." (h.0.attn.c_attn.weight ->
// transformer.h.0.attn.c_attn.weight). Hugging Face's Conv1D weights are
// stored (in, out), tessera's linear weights (out, in): the linear layers
// (attn.c_proj, mlp.c_fc, mlp.c_proj) are transposed, and tessera's (3, C, C) q/k/v
// stack becomes the (C, 3C) column blocks. The embedding loses its
// vocabulary padding; lm_head is tied to wte and not written. On import,
// names with or without "transformer.", an lm_head equal in shape to wte,
// and the attention-mask buffers (attn.bias, attn.masked_bias) are accepted.
#ifndef TSR_IO_HF_GPT2_H
#define TSR_IO_HF_GPT2_H

#include "core/check.h"
#include "io/safetensors.h"
#include "model/params.h"

// Writes the whole-model parameters (the table of a whole GPT-2 model) to path.
int hf_export(const ModelConfig *c, const ParamTable *t, const float *params, const char *path, StDtype dtype, Err *err);

// The same as dir/model.safetensors with dir/config.json (GPT2LMHeadModel's
// fields) beside it; dir is made if it does not exist.
int hf_export_dir(const ModelConfig *c, const ParamTable *t, const float *params, const char *dir, StDtype dtype,
                  Err *err);
// n_head of a GPT-2 model directory's config.json (0 when it has none).
int hf_config_heads(const char *dir, Err *err);

// (The reader takes the nfiles files of a model directory, its shards; a
// tensor is looked up in each.)
// Infers a model config from the file's shapes: layers, d_model, d_ff,
// max_seq, vocab; n_head from cfg->n_head when it is set, else d_model/64
// (the GPT-2 family's head size).
int hf_read_config(const StFile *f, int nfiles, ModelConfig *cfg, Err *err);

// Fills params (the flat buffer of table t: any slice of the model) from
// the file; padded vocabulary rows become zero. Errors name the missing or
// misshapen tensor.
int hf_load(const StFile *f, int nfiles, const ModelConfig *c, const ParamTable *t, float *params, Err *err);

#endif
