// model/config — model hyper-parameters, presets, and their validation.
//
// Glossary of dimension letters used across src/: B batch, T sequence,
// C channels (d_model), NH heads, HS head size (C/NH), F FFN width (d_ff),
// V vocabulary, Vp padded vocabulary, L layers, N rows (B·T).
#ifndef TSR_MODEL_CONFIG_H
#define TSR_MODEL_CONFIG_H

#include <stdint.h>

#include "core/check.h"
#include "core/json.h"

enum { VOCAB_PAD = 128 };   // Vp is V rounded up to a multiple of this times the tensor-parallel size

typedef enum { ARCH_GPT2, ARCH_LLAMA } ArchId;   // model/arch describes each

typedef struct ModelConfig {
    char name[32];     // preset name, or "custom"
    ArchId arch;
    int n_layer;       // L
    int n_head;        // NH
    int n_kv_head;     // key/value heads (grouped-query attention); 0: n_head
    int d_model;       // C
    int d_ff;          // F
    int max_seq;       // longest T (learned position table rows)
    int vocab;         // V: real tokens
    int vocab_padded;  // Vp: rows of the embedding table
    float rope_theta;  // LLaMA: the rotary base θ; 0: 10000
    float norm_eps;    // LLaMA: RMSNorm's eps; 0: 1e-5 (GPT-2's LayerNorm always uses 1e-5)
} ModelConfig;

// Fills c from a preset name (gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m,
// gpt2-1558m; llama-tiny, llama-120m, llama-7b, llama2-7b, llama2-13b,
// llama2-70b). GPT-2 presets carry its vocabulary (50257), LLaMA's 32000;
// the trainer sets the tokenizer's vocabulary with config_set_vocab.
int config_preset(ModelConfig *c, const char *name, Err *err);
// Comma-separated list of preset names, for help and errors.
const char *config_preset_list(void);
// Reads a model object: {"preset": "gpt2-tiny"} and/or explicit fields
// arch ("gpt2", "llama"), n_layer, n_head, d_model, d_ff, max_seq, vocab,
// and LLaMA's n_kv_head, rope_theta, norm_eps (each overriding the preset).
// Unknown keys, and keys the architecture does not have, are errors; an
// "arch" that changes a preset's architecture drops the preset's fields
// the new one lacks.
int config_from_json(ModelConfig *c, const Json *j, Err *err);
// Zeroes the fields c's architecture does not have (n_kv_head, rope_theta
// and norm_eps of a GPT-2), as after changing c->arch.
void config_clear_foreign(ModelConfig *c);
void config_to_json(const ModelConfig *c, JsonBuf *b);
// Sets V and Vp (padded for one tensor-parallel rank).
void config_set_vocab(ModelConfig *c, int vocab);
// Sets V and Vp padded as Megatron-LM pads it for tp tensor-parallel ranks:
// V rounded up to a multiple of VOCAB_PAD·tp, so every rank holds an equal
// slice of whole 128-row blocks. The padding rows start at zero and never
// receive a gradient (no token selects them, the loss masks their logits),
// so they stay zero: the padding changes no number, and a checkpoint moves
// between tensor-parallel sizes by its first V rows.
void config_pad_vocab(ModelConfig *c, int vocab, int tp);
// Checks ranges and divisibility, refuses a field the architecture does
// not have (set, i.e. nonzero), and holds every requirement a kernel
// CHECKs of the config (LLaMA's rotary embedding: an even head size), so
// that train, import, eval, sample and plan refuse such a model in one
// line; the message names the field.
int config_validate(const ModelConfig *c, Err *err);
// The architecture's name ("gpt2", "llama"), and back (0, or -1 for an
// unknown name).
const char *config_arch_name(ArchId a);
int config_arch_parse(const char *name, ArchId *out);
// Key/value heads: n_kv_head, or n_head when it is 0.
int config_kv_heads(const ModelConfig *c);
// LLaMA's rotary base and RMSNorm eps, defaults filled in.
float config_rope_theta(const ModelConfig *c);
float config_norm_eps(const ModelConfig *c);

#endif
