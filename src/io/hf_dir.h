// io/hf_dir — a Hugging Face model directory, read strictly: its weights
// (model.safetensors, or the shards model.safetensors.index.json's
// weight_map names) and its config.json, whose keys are checked against a
// table of what tessera implements; and the directory an export writes.
//
// A directory's weights are what tessera loads, exactly: every tensor lies
// in the one shard weight_map names for it (a tensor in two shards, or in a
// shard the map does not name for it, is an error), a model.safetensors
// beside an index must hold the same tensors byte for byte (one of them is
// stale), and a tensor the model does not read is an error (an extra
// layer, a bias the architecture lacks: not the model the files describe).
#ifndef TSR_IO_HF_DIR_H
#define TSR_IO_HF_DIR_H

#include <stddef.h>

#include "core/check.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/arch.h"

enum { HF_MAX_SHARDS = 64 };

// The safetensors files of a model: a directory's shards, or one file.
typedef struct HfDir {
    StFile f[HF_MAX_SHARDS];
    char *fname[HF_MAX_SHARDS];   // each file's name, for errors
    int n;
} HfDir;

// Whether path is a model directory (it holds config.json).
int hf_is_dir(const char *path);
// Opens dir's weights (checked as above); errors name the file.
int hf_open_weights(HfDir *d, const char *dir, Err *err);
// Opens one safetensors file as the model's only file.
int hf_open_file(HfDir *d, const char *path, Err *err);
void hf_dir_close(HfDir *d);
// The tensor called name and (in *f) the file that holds it; NULL if none.
const StTensor *hf_dir_find(const HfDir *d, const char *name, const StFile **f);
// Fails naming the first tensor for which reads(t, ctx) is 0: a tensor the
// model does not read. what names the model ("a 4-layer LLaMA").
int hf_dir_check_read(const HfDir *d, int (*reads)(const StTensor *t, void *ctx), void *ctx, const char *what,
                      Err *err);

// ---- config.json (its keys: model/arch's HfKey) ----
// Reads dir/config.json (its path into path) as a JSON object.
Json *hf_config_read(const char *dir, char *path, size_t cap, Err *err);
// Every key of cfg is in keys[0..n); a HF_KEY_FIXED key has its value.
// Errors name the file and the key.
int hf_config_check(const Json *cfg, const HfKey *keys, int n, const char *path, Err *err);
// Field key as an integer in [lo, hi] (a JSON integer: not 4.5, not "4");
// an absent key leaves *out alone unless required.
int hf_config_int(const Json *cfg, const char *key, int required, int lo, int hi, int *out, const char *path, Err *err);

// Makes dir for an export (if it does not exist) and checks it is a
// directory holding no safetensors weights but model.safetensors: an
// index or shards beside the file written would be read instead of it.
// Errors name --hf-dir and the files.
int hf_dir_prepare(const char *dir, Err *err);

#endif
