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

// The architectures tessera knows: indices into model/arch's registry,
// where each is described (model/<arch>.c); code elsewhere asks the
// registry, never compares these.
typedef enum { ARCH_GPT2, ARCH_LLAMA, ARCH_QWEN2, ARCH_COUNT } ArchId;

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
    float rope_theta;  // rotary base θ (LLaMA, Qwen2); 0: the architecture's default
    float norm_eps;    // RMSNorm's eps (LLaMA, Qwen2); 0: the architecture's default (GPT-2's LayerNorm: 1e-5)
    int tie_embeddings;   // LLaMA, Qwen2: the output head is the token embedding (GPT-2's always is)
} ModelConfig;

// Fills c from a preset name: each architecture's training presets
// (model/<arch>.c: gpt2-tiny … gpt2-1558m, llama-tiny … llama2-70b,
// qwen2-tiny, qwen2-0.5b …), with their tokenizer's vocabulary; the
// trainer sets the tokenizer's vocabulary with config_set_vocab. With
// plan_only, also the presets described for planning only (gpt3-175b, …).
int config_preset(ModelConfig *c, const char *name, Err *err);
int config_preset_any(ModelConfig *c, const char *name, int plan_only, Err *err);
// Comma-separated list of preset names (with plan_only: the planning-only
// ones too), for help and errors.
const char *config_preset_list(void);
const char *config_preset_list_all(void);
// Reads a model object: {"preset": "gpt2-tiny"} and/or explicit fields
// arch (a registry name: "gpt2", "llama", "qwen2"), n_layer, n_head,
// d_model, d_ff, max_seq, vocab, and the architecture's own keys
// (n_kv_head, rope_theta, norm_eps, tie_embeddings), each overriding the
// preset. Unknown keys, and keys the architecture does not have, are
// errors; an "arch" that changes a preset's architecture drops the
// preset's fields the new one lacks.
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
// The architecture's registry name ("gpt2", "llama", "qwen2"), and back
// (0, or -1 for an unknown name); the list of names for messages.
const char *config_arch_name(ArchId a);
int config_arch_parse(const char *name, ArchId *out);
const char *config_arch_list(void);
// One model field (a key of the model object: "n_layer", "rope_theta",
// "tie_embeddings", …) read from v with its range checked; -1 with a
// message naming the key (unknown keys included). The Hugging Face
// mappings (io/) read config.json through it.
int config_set_field(ModelConfig *c, const char *key, const Json *v, Err *err);
// Its value as a number, defaults filled in (n_kv_head: the key/value
// heads; rope_theta, norm_eps: the architecture's); 0 for an unknown key.
double config_field(const ModelConfig *c, const char *key);
// Its kind: CONFIG_INT, CONFIG_FLOAT, CONFIG_BOOL, or 0 for an unknown key.
enum { CONFIG_INT = 1, CONFIG_FLOAT, CONFIG_BOOL };
int config_field_kind(const char *key);
// Key/value heads: n_kv_head, or n_head when it is 0.
int config_kv_heads(const ModelConfig *c);
// The rotary base and RMSNorm eps, the architecture's defaults filled in.
float config_rope_theta(const ModelConfig *c);
float config_norm_eps(const ModelConfig *c);

#endif
