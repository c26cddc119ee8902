// data/unicode — the code point classes of GPT-2's pre-tokenizer: letters
// (\p{L}), numbers (\p{N}) and white space (\s, the White_Space property).
// Tables are generated from the Unicode Character Database by
// scripts/gen_unicode.py into unicode_tables.c.
#ifndef TSR_DATA_UNICODE_H
#define TSR_DATA_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum { UC_OTHER = 0, UC_LETTER = 1, UC_NUMBER = 2, UC_SPACE = 3 };

extern const uint32_t unicode_letter_ranges[][2];
extern const int unicode_letter_count;
extern const uint32_t unicode_number_ranges[][2];
extern const int unicode_number_count;
extern const uint32_t unicode_space_ranges[][2];
extern const int unicode_space_count;

// Class of code point cp (UC_*).
int unicode_class(uint32_t cp);

// Decodes one UTF-8 sequence at s[0..n), n > 0. Returns its length and sets
// *cp; an invalid or truncated sequence is one byte long with *cp = 0xFFFFFFFF
// (a byte that is no letter, number or space).
int utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

#endif
