// data/bpe — the GPT-2 byte-level BPE tokenizer.
//
// Text is first cut into pieces by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (implemented as a hand-written matcher with the same leftmost-first
// semantics; bytes that are not valid UTF-8 count as "other" characters),
// then each piece's bytes are merged by rank (vocab.bpe order) into ids of
// encoder.json. Merging uses a heap over adjacent pairs, so a piece of n
// bytes costs O(n log n), and a per-state cache remembers recent pieces.
//
// A Bpe (the vocabulary) is read-only after loading and may be shared by
// threads; each thread encodes with its own BpeState.
#ifndef TSR_DATA_BPE_H
#define TSR_DATA_BPE_H

#include <stddef.h>

#include "core/check.h"

typedef struct Bpe Bpe;
typedef struct BpeState BpeState;

// Loads dir/encoder.json and dir/vocab.bpe. Errors name the file and line.
int bpe_load(Bpe **out, const char *dir, Err *err);
void bpe_free(Bpe *b);
int bpe_vocab(const Bpe *b);   // 50257 for GPT-2
int bpe_eot(const Bpe *b);     // id of <|endoftext|>, or -1

BpeState *bpe_state_new(const Bpe *b);
void bpe_state_free(BpeState *s);

// Encodes text[0..len) (the special token is ordinary text here); writes at
// most cap ids and returns the number the text encodes to.
size_t bpe_encode(BpeState *s, const char *text, size_t len, int *ids, size_t cap);

// The bytes of token id (NULL for an id out of range), length in *len.
const unsigned char *bpe_token(const Bpe *b, int id, size_t *len);

// A place at or after `from` (and before `limit`) where text can be cut and
// its halves encoded separately with the same result: after a line end (LF
// or CR) that sits between two printable ASCII characters, or between the
// CR and LF of a CRLF so placed (the pattern makes "\r" and "\n" pieces of
// their own there). Returns limit when there is none.
size_t bpe_split_point(const unsigned char *text, size_t from, size_t limit);

// End of the pre-tokenizer piece that starts at text[i] (i < len).
size_t bpe_piece_end(const unsigned char *text, size_t len, size_t i);

#endif
