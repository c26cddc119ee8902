#include "data/unicode.h"

static int in_ranges(const uint32_t (*r)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int unicode_class(uint32_t cp) {
    if (cp < 128) {
        if ((cp | 32) - 'a' < 26) return UC_LETTER;
        if (cp - '0' < 10) return UC_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return UC_SPACE;
        return UC_OTHER;
    }
    if (in_ranges(unicode_letter_ranges, unicode_letter_count, cp)) return UC_LETTER;
    if (in_ranges(unicode_number_ranges, unicode_number_count, cp)) return UC_NUMBER;
    if (in_ranges(unicode_space_ranges, unicode_space_count, cp)) return UC_SPACE;
    return UC_OTHER;
}

int utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; }
    else goto bad;
    if ((size_t)len > n) goto bad;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) goto bad;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
        goto bad;
    *cp = v;
    return len;
bad:
    *cp = 0xFFFFFFFFu;
    return 1;
}
