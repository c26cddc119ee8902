// io/meta — reading a checkpoint's meta.json: the format, version, step and
// rank files it must name, and the model config it records. Kept apart from
// the checkpoint writer so that it can be fuzzed on its own.
#ifndef TSR_IO_META_H
#define TSR_IO_META_H

#include <stddef.h>

#include "core/check.h"
#include "core/json.h"
#include "model/config.h"

enum { META_VERSION = 1 };

// Parses and checks meta.json text: "format" is "tessera-checkpoint",
// "version" is META_VERSION, "step" a non-negative integer, "files" a
// non-empty array of plain file names. Errors name `path` and the field.
int meta_parse(const char *text, size_t len, const char *path, Json **out, Err *err);

// The "model" object as a validated config.
int meta_model(const Json *meta, const char *path, ModelConfig *cfg, Err *err);

#endif
