// io/weights — a model's starting weights from any source tessera reads:
// a tessera checkpoint (or run directory: its latest), a Hugging Face
// model directory (any architecture of the registry: GPT2LMHeadModel,
// LlamaForCausalLM, Qwen2ForCausalLM; config.json and model.safetensors
// or its shards), or a GPT-2 safetensors file. import and train
// --init-from read through it.
#ifndef TSR_IO_WEIGHTS_H
#define TSR_IO_WEIGHTS_H

#include "core/check.h"
#include "io/checkpoint.h"
#include "io/hf_dir.h"
#include "model/params.h"

typedef enum {
    WEIGHTS_CKPT,
    WEIGHTS_HF_CONV1D,   // GPT-2's Conv1D tensors (io/hf_gpt2): a file, or a directory
    WEIGHTS_HF,          // a model directory of another architecture (io/hf_model)
} WeightsKind;

typedef struct Weights {
    WeightsKind kind;
    Ckpt *ck;            // WEIGHTS_CKPT
    HfDir hd;            // the Hugging Face files
    int is_dir;          // a model directory (not one file)
    ModelConfig mc;      // the model they hold (vocabulary unpadded)
} Weights;

// Opens path and reads its model into w->mc. A GPT-2 file states no head
// count: hint's n_head is taken when hint's d_model is the file's (or 0),
// else d_model/64 (hint may be NULL). Errors name the file and what is wrong.
int weights_open(Weights *w, const char *path, const ModelConfig *hint, Err *err);
// Fills params (the flat buffer of table t, of model c: w->mc padded, any
// slice) from the source.
int weights_load(Weights *w, const ModelConfig *c, const ParamTable *t, float *params, Err *err);
void weights_close(Weights *w);

#endif
