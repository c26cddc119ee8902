// data/docs — the documents of one input file for `tessera prepare`, read
// as a stream: plain text (the file is one document) or JSONL (one document
// per line, its text in a string field), either of them plain, gzip- or
// zstd-compressed (zlib, libzstd; recognised by their magic bytes). Memory
// stays bounded by the largest piece, whatever the file's size.
//
// A text document comes in pieces of about `piece` bytes cut where the
// tokenizer is known to cut anyway (bpe_split_point), or whole when piece
// is 0 (a tokenizer without such points); a JSONL document comes whole.
// The pieces depend only on the file's content, so what is encoded from
// them does not depend on how many threads encode them.
#ifndef TSR_DATA_DOCS_H
#define TSR_DATA_DOCS_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

typedef enum { DOCS_AUTO, DOCS_TEXT, DOCS_JSONL } DocsFormat;

typedef struct DocsOptions {
    DocsFormat format;        // DOCS_AUTO: JSONL for names ending .jsonl or .ndjson (before .gz/.zst), else text
    const char *text_field;   // JSONL: the member holding a document's text ("text")
    size_t piece;             // text: bytes per piece, about (0: a document in one piece)
    int strict;               // JSONL: a malformed line (or one without the string field) is an error, not skipped
} DocsOptions;

typedef struct Docs Docs;

// Opens path. Fails naming the file when it cannot be read, or is
// compressed in a format this build cannot read (built without zlib or
// libzstd).
int docs_open(Docs **out, const char *path, const DocsOptions *o, Err *err);
void docs_close(Docs *d);

// The next piece: text[0..*n) valid until the next call, *doc_start set when
// it begins a document (a document may be empty: a piece of 0 bytes that
// begins one). Returns 1 with a piece, 0 at the end of the file, -1 with err
// (a read or decompression error, or under strict a bad line, naming
// FILE:LINE).
int docs_next(Docs *d, const char **text, size_t *n, int *doc_start, Err *err);

// The (decompressed) bytes of the file returned so far: where the stream
// is, for the validation split.
int64_t docs_consumed(const Docs *d);
// Text: the piece that reaches offset `at` (docs_consumed's units) ends at
// the first cut point from there on, as when a whole text is cut at its
// validation boundary (-1: no such offset).
void docs_cut_at(Docs *d, int64_t at);
// The decompressed size of path: a plain file's length, a compressed
// one's read through once (cheap next to tokenizing it). 0, or -1 with err.
int docs_measure(const char *path, int64_t *bytes, Err *err);
// JSONL lines skipped (malformed, or without a string text field), and the
// first one's line number (0: none).
int64_t docs_skipped(const Docs *d, int64_t *first_line);
// Whether the file is JSONL, and its compression ("gzip", "zstd" or "none").
int docs_is_jsonl(const Docs *d);
const char *docs_compression(const Docs *d);

#endif
