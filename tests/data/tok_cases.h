// tests/data/tok_cases.h — what the tokenizer tests (test_bpe, test_spm)
// share: the test data's folder, a reference cases file run through a
// tokenizer, a whole file's ids and their checksum, decoding a whole
// sequence, and the random byte strings of the round-trip tests. These
// functions count; the tests' EXPECTs judge the counts.
#ifndef TSR_TEST_TOK_CASES_H
#define TSR_TEST_TOK_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"

// The shared test data's folder: $TSR_DATA, or ../shared/data.
const char *tok_data_dir(void);

// The text of ids[0..m) decoded one by one and joined, as decoding a whole
// sequence gives it (without the space the encoder put in front, when
// tokenizer_front_space). Returns its length; 0 with *ok = 0 when it would
// pass cap bytes.
size_t tok_decode_all(const Tokenizer *t, const int *ids, size_t m, char *out, size_t cap, int *ok);

// Whether a case's text[0..n) and its ids[0..m) pass a test's own check.
typedef int (*TokCheck)(const Tokenizer *t, const char *text, size_t n, const int *ids, size_t m);

typedef struct {
    int read;    // the file could be read
    int cases;   // lines with "hex" and "ids"
    int bad;     // cases whose ids differ from "ids" (the first three printed)
    int passed;  // cases that pass the check
} TokCases;

// Encodes the text of each line of a reference file (JSONL: {"hex": the
// text's bytes in hex, "ids": the reference's ids}), with room for
// n + extra ids, and compares with "ids"; check may be NULL.
TokCases tok_cases_run(const Tokenizer *t, const char *path, size_t extra, TokCheck check);

typedef struct {
    int read;        // the file could be read
    size_t ids;      // its ids
    uint32_t crc;    // crc32c of the ids as uint32, the references' checksum
    int roundtrip;   // tok_decode_all gives the file back
} TokFile;

// A whole file encoded as one text, with room for its length + extra ids.
TokFile tok_encode_file(const Tokenizer *t, const char *path, size_t extra);

// Encodes count random byte strings (mostly random bytes, with runs of
// spaces, letters and the UTF-8 lead byte 0xE2; min_len + [0, 200) bytes,
// stream seed of core/rng) with room for n + 2 ids and decodes them back;
// returns how many do not come back or fail check (the text is the bytes;
// check may be NULL).
int tok_roundtrip_random(const Tokenizer *t, uint64_t seed, size_t min_len, int count, TokCheck check);

#endif
