// data/spm — LLaMA's tokenizer (LLaMA 1 and 2): SentencePiece BPE over a
// 32000-piece vocabulary with byte fallback, as the npm package
// llama-tokenizer-js@1.2.2 encodes — id for id, its merge order included.
//
// Encoding: <s> (id 1), then the text with a space in front and every space
// written "▁"; each character becomes its piece, or, when the vocabulary
// has none, the pieces <0xNN> of its UTF-8 bytes (a byte that is not valid
// UTF-8 is one such piece on its own). Then adjacent pairs merge, always the
// pair whose merge comes first in the merge list, and among equal merges
// the leftmost — ordered as that package orders them: by rank + position /
// the text's length in UTF-16 units, the position counted in the initial
// pieces (with <s> and the front space). The whole text is one sequence:
// there is no pre-tokenizer, so a text cannot be cut and encoded in parts.
//
// Files (scripts/deps.sh extracts them from the package into data/llama):
// vocab.txt, the pieces by id separated by '\n'; merges.bin, each merge two
// little-endian uint16 piece ids, in merge order.
#ifndef TSR_DATA_SPM_H
#define TSR_DATA_SPM_H

#include <stddef.h>

#include "core/check.h"

enum { SPM_UNK = 0, SPM_BOS = 1, SPM_EOS = 2 };

typedef struct Spm Spm;

// Loads dir/vocab.txt and dir/merges.bin; errors name the file.
int spm_load(Spm **out, const char *dir, Err *err);
void spm_free(Spm *s);
int spm_vocab(const Spm *s);

// Encodes text[0..len) as above (nothing for an empty text); writes at most
// cap ids and returns the number it encodes to (at most len + 2).
size_t spm_encode(const Spm *s, const char *text, size_t len, int *ids, size_t cap);

// The bytes of piece id as text ("▁" as a space, <0xNN> as its byte, the
// control pieces as nothing) into out (capacity cap); returns the bytes
// written, or 0 for an id out of range.
size_t spm_decode(const Spm *s, int id, char *out, size_t cap);

#endif
