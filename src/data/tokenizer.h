// data/tokenizer — text to token ids and back: "gpt2" (GPT-2's byte-level
// BPE, vocabulary 50257, end-of-text 50256), "llama" (LLaMA's SentencePiece
// BPE, data/spm: vocabulary 32000, each text one sequence opening with <s>)
// or "byte" (each byte its own id, vocabulary 256, no end-of-text token).
//
// The GPT-2 vocabulary files (encoder.json, vocab.bpe) are looked up in
// $TESSERA_GPT2_DIR, then ./data/gpt2, then ../shared/data/gpt2 (relative
// to the working directory and to the executable's directory); LLaMA's
// (vocab.txt, merges.bin) likewise in $TESSERA_LLAMA_DIR, data/llama and
// ../shared/data/llama.
#ifndef TSR_DATA_TOKENIZER_H
#define TSR_DATA_TOKENIZER_H

#include <stddef.h>

#include "core/check.h"
#include "data/bpe.h"
#include "data/spm.h"

typedef enum { TOK_BYTE, TOK_GPT2, TOK_LLAMA } TokenizerKind;

typedef struct Tokenizer {
    TokenizerKind kind;
    int vocab;        // ids are in [0, vocab)
    int eot;          // end-of-text id, -1 when the tokenizer has none
    int doc_sep;      // the id `tessera prepare` writes at the head of every document (GPT-2: end-of-text; LLaMA:
                      // <s>, which opens every text), -1 when nothing marks where a document starts (byte)
    Bpe *bpe;         // TOK_GPT2
    BpeState *state;  // TOK_GPT2: the encoding state of the calling thread
    Spm *spm;         // TOK_LLAMA
    char name[8];
} Tokenizer;

// Opens a tokenizer by name ("gpt2", "llama" or "byte"); errors name --tokenizer or the file.
int tokenizer_open(Tokenizer *t, const char *name, Err *err);
// The vocabulary of the tokenizer named name without opening it, or -1
// for a name that is not a tokenizer's.
int tokenizer_vocab_of(const char *name);
void tokenizer_close(Tokenizer *t);
// The doc_sep of the tokenizer named name without opening it (-1: none,
// or a name that is not a tokenizer's).
int tokenizer_doc_sep_of(const char *name);
// Encodes text[0..len) into ids (capacity cap); returns the count (which may
// exceed cap: then only cap were written; at most len + 2). Not thread-safe for one Tokenizer:
// threads use tokenizer_encode_with with their own BpeState.
size_t tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int *ids, size_t cap);
size_t tokenizer_encode_with(const Tokenizer *t, BpeState *st, const char *text, size_t len, int *ids, size_t cap);
// Writes the bytes of id to out (capacity cap); returns bytes written (0 for
// an unknown id, and for LLaMA's control pieces).
size_t tokenizer_decode(const Tokenizer *t, int id, char *out, size_t cap);
// Whether a sequence's text starts with a space the encoder put there
// (LLaMA's), which decoding a whole sequence drops.
int tokenizer_front_space(const Tokenizer *t);

#endif
