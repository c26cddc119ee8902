// io/checkpoint — checkpoints on disk (DESIGN §6).
//
// A checkpoint is a directory RUN/step_NNNNNNNN/ holding meta.json and one
// tensor file per rank (rank_RRRRR.tsr). It is written as
// step_NNNNNNNN.tmp/, every file and the directory fsynced, then renamed;
// then RUN/latest (a one-line file naming the step directory) is replaced
// atomically the same way. A crash at any point leaves the previous
// checkpoint and `latest` intact.
//
// Tensor file: a 32-byte header
//   magic "TSRTENS\0" | u32 version (1) | u32 index bytes | u32 index CRC-32C
//   | u32 reserved | u64 data bytes
// then the index, a JSON object {"tensors": [{name, dtype, shape (global),
// offset (slice start per dimension), extent (slice size per dimension),
// data_offset, nbytes, crc32c}...]}, then zero padding to a multiple of 64
// and the data. Sizes are checked against the file length on load.
#ifndef TSR_IO_CHECKPOINT_H
#define TSR_IO_CHECKPOINT_H

#include <stdint.h>

#include "core/check.h"
#include "core/json.h"
#include "model/stage.h"
#include "train/optim.h"

enum { CKPT_VERSION = 1 };

// Saves the stage's parameters and (when opt is not NULL) the AdamW moments
// as step `step` under run directory dir, with meta.json holding the model
// config, step, and the JSON object text `train_meta` (may be NULL) under
// "train". Creates dir if needed.
int ckpt_save(const char *dir, int64_t step, const Stage *s, const AdamW *opt, const char *train_meta, Err *err);

// Resolves PATH to a step directory: PATH itself if it holds meta.json,
// else the step named by PATH/latest.
int ckpt_resolve(const char *path, char *stepdir, size_t cap, Err *err);

// Reads and checks stepdir/meta.json (format, version); caller frees.
int ckpt_read_meta(const char *stepdir, Json **meta, Err *err);

// Reads the model config recorded in the checkpoint.
int ckpt_read_config(const Json *meta, ModelConfig *cfg, Err *err);

// Loads parameters (and moments when opt is not NULL) into a stage built
// for the same model; every tensor's checksum is verified.
int ckpt_load(const char *stepdir, Stage *s, AdamW *opt, Err *err);

#endif
