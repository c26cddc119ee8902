// data/shard — llm.c-compatible token shards (DESIGN §6).
//
// A shard is a 256 × int32 header — magic 20240520, version, token count,
// the rest zero — followed by the tokens: uint16 (version 1) or uint32
// (version 2, for vocabularies above 65,535). Opening maps the file and
// checks the header against the file length and every token against the
// vocabulary.
#ifndef TSR_DATA_SHARD_H
#define TSR_DATA_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/check.h"

enum { SHARD_MAGIC = 20240520, SHARD_HEADER_BYTES = 256 * 4 };

typedef struct Shard {
    int version;          // 1: uint16 tokens, 2: uint32
    int64_t ntok;
    const void *tokens;   // into the mapping
    void *map;
    size_t map_len;
} Shard;

// Maps and validates path; tokens must be < vocab. Errors name the file.
int shard_open(Shard *s, const char *path, int vocab, Err *err);
void shard_close(Shard *s);

static inline uint32_t shard_token_u(const Shard *s, int64_t i) {
    return s->version == 1 ? ((const uint16_t *)s->tokens)[i] : ((const uint32_t *)s->tokens)[i];
}
static inline int shard_token(const Shard *s, int64_t i) {
    return s->version == 1 ? ((const uint16_t *)s->tokens)[i] : (int)((const uint32_t *)s->tokens)[i];
}

// Writes ids[0..n) as a shard (version 1 when vocab <= 65536, else 2), to a
// temporary name, fsynced, then renamed.
int shard_write(const char *path, const int *ids, int64_t n, int vocab, Err *err);

// The same, a piece at a time: open writes the header to PATH.tmp, append
// adds tokens, close sets the header's count, fsyncs and renames to PATH;
// abort removes the temporary file (and is a no-op after close).
typedef struct ShardWriter {
    FILE *f;
    int version;
    int64_t n;             // tokens appended
    char path[4200], tmp[4216];
} ShardWriter;
int shard_writer_open(ShardWriter *w, const char *path, int vocab, Err *err);
int shard_writer_append(ShardWriter *w, const int *ids, int64_t n, Err *err);
int shard_writer_close(ShardWriter *w, Err *err);
void shard_writer_abort(ShardWriter *w);

// A directory of shards written by `tessera prepare` records their
// tokenizer in DIR/shards.json: {"tokenizer": NAME, "vocab": V}, written
// after the shards (durably). The shards themselves keep llm.c's header.
#define SHARD_INFO_FILE "shards.json"
int shard_info_write(const char *dir, const char *tokenizer, int vocab, Err *err);
// dir's recorded tokenizer name into name (cap bytes): 1, or 0 when dir
// holds no record, or -1 with err (ERR_USAGE) when the record is malformed.
int shard_info_read(const char *dir, char *name, size_t cap, Err *err);

#endif
