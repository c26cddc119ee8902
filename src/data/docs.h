// data/docs — the documents of one input file for `tessera prepare`, read
// as a stream: plain text (the file is one document) or JSONL (one document
// per line, its text in a string field), either of them plain, gzip- or
// zstd-compressed (data/zread).
//
// A document comes in pieces of about `piece` bytes, cut where the GPT-2
// tokenizer is known to cut anyway (bpe_split_point: a line end between
// two printable characters; LF, CR or CRLF); where the window of `piece`
// bytes after the target holds no such point (a single line, a run of one
// byte), the piece is cut at the target, at a UTF-8 character boundary.
// So no piece exceeds 2 * piece bytes, and memory stays bounded whatever
// the file's size: a text needs about 2 * piece bytes of buffer, a JSONL
// file its longest line twice over. The pieces depend only on the file's
// content, so what is encoded from them does not depend on how many
// threads encode them.
#ifndef TSR_DATA_DOCS_H
#define TSR_DATA_DOCS_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

enum { DOCS_PIECE = 1 << 20 };   // the default piece size

typedef enum { DOCS_AUTO, DOCS_TEXT, DOCS_JSONL } DocsFormat;

typedef struct DocsOptions {
    DocsFormat format;        // DOCS_AUTO: JSONL for names ending .jsonl or .ndjson (before .gz/.zst), else text
    const char *text_field;   // JSONL: the member holding a document's text ("text")
    size_t piece;             // bytes per piece, about; at most twice this (0: DOCS_PIECE)
    int strict;               // JSONL: a malformed line (or one without the string field) is an error, not skipped
} DocsOptions;

typedef struct Docs Docs;

// Opens path. Fails naming the file as zread_open does.
int docs_open(Docs **out, const char *path, const DocsOptions *o, Err *err);
void docs_close(Docs *d);

// The next piece: text[0..*n) valid until the next call, *doc_start set when
// it begins a document (a document may be empty: a piece of 0 bytes that
// begins one). Returns 1 with a piece, 0 at the end of the file, -1 with err
// (a read or decompression error, or under strict a bad line, naming
// FILE:LINE). A JSONL file may begin with a UTF-8 byte order mark.
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
// JSONL documents read so far.
int64_t docs_documents(const Docs *d);
// JSONL lines skipped (malformed, or without a string text field), and the
// first one's line number (0: none).
int64_t docs_skipped(const Docs *d, int64_t *first_line);
// Whether the file is JSONL, and its compression ("gzip", "zstd" or "none").
int docs_is_jsonl(const Docs *d);
const char *docs_compression(const Docs *d);

#endif
