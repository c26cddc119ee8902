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
#include "core/json.h"
#include "io/hf_dir.h"
#include "model/params.h"

// Writes the whole-model parameters (the table of a whole GPT-2 model) to path.
int hf_export(const ModelConfig *c, const ParamTable *t, const float *params, const char *path, StDtype dtype, Err *err);

// (A model directory: io/hf_model's hf_export_dir writes these tensors
// and config.json.)
// The keys of a GPT2LMHeadModel config.json (cfg, read from path, whose
// model_type is GPT-2's): each one tessera knows (model/gpt2's table), a
// feature's value the one it implements (gelu_new, a tied head, ...);
// n_head into *heads (0 when absent). Sizes must be integers. Errors name
// the file and the key.
int hf_gpt2_config(const Json *cfg, const char *path, int *heads, Err *err);
// The sizes config.json states (n_layer, n_embd, n_inner, n_positions,
// vocab_size) are those of c, the weights' model.
int hf_gpt2_config_match(const Json *cfg, const char *path, const ModelConfig *c, Err *err);

// Infers a model config from the files' shapes (one file, or a directory's
// shards): layers, d_model, d_ff, max_seq, vocab; n_head from cfg->n_head
// when it is set, else d_model/64 (the GPT-2 family's head size). Every
// tensor must be one the model reads (or an attention-mask buffer, or an
// lm_head equal in shape to wte).
int hf_read_config(const HfDir *d, ModelConfig *cfg, Err *err);

// Fills params (the flat buffer of table t: any slice of the model) from
// the files; padded vocabulary rows become zero. Errors name the missing
// or misshapen tensor.
int hf_load(const HfDir *d, const ModelConfig *c, const ParamTable *t, float *params, Err *err);

#endif
