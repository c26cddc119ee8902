// data/zread — a file's bytes, decompressed: plain, gzip (zlib) or zstd
// (libzstd), recognised by their magic bytes (zstd's frame magic, or a
// skippable frame's, 0x184D2A50..5F). A compressed file may hold several
// frames or members one after another; anything else after them, or a
// stream that ends inside one, is an error naming the file.
#ifndef TSR_DATA_ZREAD_H
#define TSR_DATA_ZREAD_H

#include <stddef.h>

#include "core/check.h"

typedef struct Zread Zread;

// Opens path (a regular file). Fails naming the file when it cannot be
// read, or is compressed in a format this build cannot read (built without
// zlib or libzstd).
int zread_open(Zread **out, const char *path, Err *err);
void zread_close(Zread *z);

// Up to n decompressed bytes into dst: their count, 0 at the end of the
// file, -1 with err (a read error, a corrupt, truncated or trailing part).
long zread_read(Zread *z, char *dst, size_t n, Err *err);

// "gzip", "zstd" or "none".
const char *zread_compression(const Zread *z);
// The file's length when it is not compressed (its decompressed size
// without reading it), else -1.
long long zread_plain_size(const Zread *z);

#endif
