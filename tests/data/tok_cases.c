#include "tok_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checksum.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/rng.h"

const char *tok_data_dir(void) {
    const char *d = getenv("TSR_DATA");
    return d ? d : "../shared/data";
}

size_t tok_decode_all(const Tokenizer *t, const int *ids, size_t m, char *out, size_t cap, int *ok) {
    char buf[256];
    size_t pos = 0;
    int front = tokenizer_front_space(t);
    *ok = 1;
    for (size_t i = 0; i < m; i++) {
        size_t b = tokenizer_decode(t, ids[i], buf, sizeof buf), skip = front && b && buf[0] == ' ';
        if (b) front = 0;
        if (pos + b - skip > cap) { *ok = 0; return 0; }
        memcpy(out + pos, buf + skip, b - skip);
        pos += b - skip;
    }
    return pos;
}

// The bytes a case's "hex" spells, NUL-terminated; *n of them.
static char *unhex(const Json *hex, size_t *n) {
    *n = hex->len / 2;
    char *text = malloc(*n + 1);
    for (size_t i = 0; i < *n; i++) {
        unsigned v;
        sscanf(hex->text + 2 * i, "%2x", &v);
        text[i] = (char)v;
    }
    text[*n] = 0;
    return text;
}

static int same_ids(const int *got, size_t m, const Json *want) {
    if (m != want->len) return 0;
    for (size_t i = 0; i < m; i++) {
        int64_t w;
        json_int64(json_at(want, i), &w);
        if (got[i] != w) return 0;
    }
    return 1;
}

TokCases tok_cases_run(const Tokenizer *t, const char *path, size_t extra, TokCheck check) {
    TokCases r = {0};
    size_t len;
    char *all = NULL;
    Err fe;
    if (file_read(path, &all, &len, 0, &fe)) return r;
    r.read = 1;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        Err e;
        Json *j = json_parse(line, strlen(line), &e);
        const Json *hex = json_get(j, "hex"), *ids = json_get(j, "ids");
        if (!hex || !ids) { json_free(j); continue; }
        size_t n;
        char *text = unhex(hex, &n);
        int *got = malloc((n + extra) * sizeof *got);
        size_t m = tokenizer_encode(t, text, n, got, n + extra);
        if (!same_ids(got, m, ids) && r.bad++ < 3)
            fprintf(stderr, "  mismatch on %.60s (%zu ids, want %zu)\n", text, m, ids->len);
        r.passed += check && check(t, text, n, got, m);
        r.cases++;
        free(text);
        free(got);
        json_free(j);
    }
    free(all);
    return r;
}

TokFile tok_encode_file(const Tokenizer *t, const char *path, size_t extra) {
    TokFile f = {0};
    size_t len;
    char *text = NULL;
    Err fe;
    if (file_read(path, &text, &len, 0, &fe)) return f;
    f.read = 1;
    int *ids = malloc((len + extra) * sizeof *ids);
    char *back = malloc(len + 1);
    f.ids = tokenizer_encode(t, text, len, ids, len + extra);
    f.crc = crc32c(0, ids, f.ids * sizeof *ids);
    int ok;
    size_t b = tok_decode_all(t, ids, f.ids, back, len, &ok);
    f.roundtrip = ok && b == len && !memcmp(back, text, len);
    free(back);
    free(ids);
    free(text);
    return f;
}

// Case c's bytes into s (room for min_len + 200); returns their count.
static size_t random_bytes(uint64_t seed, int c, size_t min_len, unsigned char *s) {
    size_t n = min_len + (size_t)rng_below(seed, 1, (uint64_t)c, 200);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)c * 1000 + i, r = rng_below(seed, 2, k, 10);
        s[i] = r < 5 ? (unsigned char)rng_below(seed, 3, k, 256) : r < 7 ? ' ' : r < 9 ? (unsigned char)('a' + i % 26) : 0xE2;
    }
    return n;
}

int tok_roundtrip_random(const Tokenizer *t, uint64_t seed, size_t min_len, int count, TokCheck check) {
    int bad = 0;
    unsigned char *s = malloc(min_len + 200);
    char *back = malloc(min_len + 200);
    int *ids = malloc((min_len + 202) * sizeof *ids);
    for (int c = 0; c < count; c++) {
        size_t n = random_bytes(seed, c, min_len, s);
        size_t m = tokenizer_encode(t, (char *)s, n, ids, n + 2);
        int ok;
        size_t b = tok_decode_all(t, ids, m, back, n, &ok);
        bad += !ok || b != n || memcmp(back, s, n) != 0 || (check && !check(t, (char *)s, n, ids, m));
    }
    free(s);
    free(back);
    free(ids);
    return bad;
}
