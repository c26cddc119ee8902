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
// "version" is META_VERSION, "step" an integer in [0, 2^31), "files" a
// non-empty array of plain file names; and its checksum: the writer ends
// the object with "crc32c": N, N the CRC-32C of every byte before that key
// (a meta.json without one, from before checksums, is read unchecked).
// Errors name `path` and the field.
int meta_parse(const char *text, size_t len, const char *path, Json **out, Err *err);

// The checksum member meta.json ends with: appends `,"crc32c": N}` (and a
// newline) to text, which holds the object so far, its members written and
// the object not closed.
void meta_seal(JsonBuf *text);

// The "model" object as a validated config.
int meta_model(const Json *meta, const char *path, ModelConfig *cfg, Err *err);

#endif
