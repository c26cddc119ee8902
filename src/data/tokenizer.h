// data/tokenizer — text to token ids and back.
//
// The byte tokenizer maps each byte to its value (vocabulary 256).
#ifndef TSR_DATA_TOKENIZER_H
#define TSR_DATA_TOKENIZER_H

#include <stddef.h>

#include "core/check.h"

typedef enum { TOK_BYTE } TokenizerKind;

typedef struct Tokenizer {
    TokenizerKind kind;
    int vocab;        // ids are in [0, vocab)
    int eot;          // end-of-text id, -1 when the tokenizer has none
} Tokenizer;

// Parses a --tokenizer value ("byte"); the error names the flag.
int tokenizer_open(Tokenizer *t, const char *name, Err *err);
void tokenizer_close(Tokenizer *t);
// Encodes text[0..len) into ids (capacity cap); returns the count (which may
// exceed cap: then only cap were written).
size_t tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int *ids, size_t cap);
// Appends the bytes of id to out (capacity cap); returns bytes written.
size_t tokenizer_decode(const Tokenizer *t, int id, char *out, size_t cap);

#endif
