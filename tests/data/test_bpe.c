// The GPT-2 tokenizer against OpenAI's tiktoken: ids of hard cases and of
// all of tinyshakespeare (tests/data/bpe_cases.jsonl, made by
// scripts/gen_bpe_tests.js), byte round trips, and malformed vocabulary files.
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/json.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "test.h"

static const char *data_dir(void) {
    const char *d = getenv("TSR_DATA");
    return d ? d : "../shared/data";
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); fclose(f); return NULL; }
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

static Tokenizer tok;

static void test_cases_match_tiktoken(void) {
    size_t len;
    char *all = read_file("tests/data/bpe_cases.jsonl", &len);
    EXPECT(all != NULL, "tests/data/bpe_cases.jsonl missing");
    if (!all) return;
    int cases = 0, bad = 0;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        Err e;
        Json *j = json_parse(line, strlen(line), &e);
        const Json *hex = json_get(j, "hex"), *ids = json_get(j, "ids");
        if (!hex || !ids) { json_free(j); continue; }
        size_t n = hex->len / 2;
        char *text = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            unsigned v;
            sscanf(hex->text + 2 * i, "%2x", &v);
            text[i] = (char)v;
        }
        int *got = malloc((n + 1) * sizeof *got);
        size_t m = tokenizer_encode(&tok, text, n, got, n + 1);
        int same = m == ids->len;
        for (size_t i = 0; same && i < m; i++) {
            int64_t want;
            json_int64(json_at(ids, i), &want);
            same = got[i] == want;
        }
        if (!same && bad++ < 3) fprintf(stderr, "  mismatch on %.60s (%zu ids, want %zu)\n", text, m, ids->len);
        cases++;
        free(text);
        free(got);
        json_free(j);
    }
    free(all);
    EXPECT(cases >= 80 && bad == 0, "%d of %d cases differ from tiktoken", bad, cases);
}

static void test_tinyshakespeare_matches_tiktoken(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tinyshakespeare.txt", data_dir());
    size_t len;
    char *text = read_file(path, &len);
    EXPECT(text != NULL, "%s missing", path);
    if (!text) return;
    int *ids = malloc(len * sizeof *ids);
    size_t n = tokenizer_encode(&tok, text, len, ids, len);
    uint32_t *u = malloc(n * sizeof *u);
    for (size_t i = 0; i < n; i++) u[i] = (uint32_t)ids[i];
    // From bpe_cases.jsonl's last line: tiktoken's ids of the whole file.
    EXPECT(n == 338025, "%zu tokens, tiktoken has 338025", n);
    EXPECT(crc32c(0, u, n * 4) == 3730974193u, "ids differ from tiktoken's (crc32c %u)", crc32c(0, u, n * 4));
    // and decoding gives the text back
    char buf[256];
    size_t pos = 0;
    int same = 1;
    for (size_t i = 0; i < n && same; i++) {
        size_t b = tokenizer_decode(&tok, ids[i], buf, sizeof buf);
        same = pos + b <= len && !memcmp(text + pos, buf, b);
        pos += b;
    }
    EXPECT(same && pos == len, "decode(encode(tinyshakespeare)) differs");
    free(u);
    free(ids);
    free(text);
}

static void test_roundtrip_random_bytes(void) {
    int bad = 0;
    for (int c = 0; c < 300; c++) {
        size_t n = (size_t)rng_below(21, 1, c, 200);
        unsigned char *s = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_below(21, 2, (uint64_t)c * 1000 + i, 10);
            // mostly random bytes, with runs of spaces, letters and UTF-8 lead bytes
            s[i] = r < 5 ? (unsigned char)rng_below(21, 3, (uint64_t)c * 1000 + i, 256)
                 : r < 7 ? ' ' : r < 9 ? (unsigned char)('a' + i % 26) : 0xE2;
        }
        int *ids = malloc((n + 1) * sizeof *ids);
        size_t m = tokenizer_encode(&tok, (char *)s, n, ids, n + 1);
        char *back = malloc(n + 64), buf[256];
        size_t pos = 0;
        for (size_t i = 0; i < m; i++) {
            size_t b = tokenizer_decode(&tok, ids[i], buf, sizeof buf);
            if (pos + b > n) { pos = n + 1; break; }
            memcpy(back + pos, buf, b);
            pos += b;
        }
        bad += pos != n || memcmp(back, s, n) != 0;
        free(s); free(ids); free(back);
    }
    EXPECT(bad == 0, "%d of 300 random byte strings do not round-trip", bad);
}

static void test_long_runs_are_not_quadratic(void) {
    // 2 MB of one character and of alternating pairs: must finish (no time
    // assertion; a quadratic merge would take hours here).
    size_t n = 2 << 20;
    char *s = malloc(n);
    memset(s, 'a', n);
    int *ids = malloc(n * sizeof *ids);
    size_t m = tokenizer_encode(&tok, s, n, ids, n);
    EXPECT(m > 0 && m < n / 2, "%zu ids for 2 MB of 'a'", m);
    for (size_t i = 0; i < n; i++) s[i] = "ab"[i & 1];
    m = tokenizer_encode(&tok, s, n, ids, n);
    EXPECT(m > 0 && m <= n / 2, "%zu ids for 2 MB of 'ab'", m);
    free(s);
    free(ids);
}

static void test_split_points_keep_the_encoding(void) {
    // Every cut point bpe_split_point finds (after LF, after CR, between
    // CR and LF) splits a text into halves whose ids, concatenated, are the
    // whole text's; random lines of letters, spaces and punctuation joined by
    // LF, CR, CRLF and blank lines.
    const char *ends[] = {"\n", "\r", "\r\n", "\r\n\r\n", "\n\n", " \r\n", "\r\r\n"};
    const char *chunks[] = {"To be", " or not", ", that", "'s", " 42", "!", "  ", "\t", "\xc3\xa9t\xc3\xa9"};
    char s[4096];
    int bad = 0, cuts = 0;
    int *whole = malloc(sizeof s * sizeof *whole), *half = malloc(sizeof s * sizeof *half);
    for (int c = 0; c < 300; c++) {
        size_t n = 0;
        for (int k = 0; k < 40 && n < sizeof s - 64; k++) {
            uint64_t r = rng_below(23, 1, (uint64_t)c * 100 + (uint64_t)k, 16);
            const char *piece = r < 9 ? chunks[r] : ends[r - 9];
            memcpy(s + n, piece, strlen(piece));
            n += strlen(piece);
        }
        size_t m = tokenizer_encode(&tok, s, n, whole, sizeof s);
        for (size_t p = bpe_split_point((const unsigned char *)s, 0, n); p < n;
             p = bpe_split_point((const unsigned char *)s, p + 1, n)) {
            size_t a = tokenizer_encode(&tok, s, p, half, sizeof s);
            size_t b = tokenizer_encode(&tok, s + p, n - p, half + a, sizeof s - a);
            bad += a + b != m || memcmp(whole, half, m * sizeof *half) != 0;
            cuts++;
        }
    }
    free(whole);
    free(half);
    EXPECT(bad == 0 && cuts > 150, "%d of %d cuts change the encoding", bad, cuts);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static void test_malformed_vocab_files(void) {
    char dir[] = "/tmp/tsr_bpe_XXXXXX", p[600], src[600];
    EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    Err e;
    Bpe *b = NULL;
    EXPECT(bpe_load(&b, dir, &e) == -1 && strstr(e.msg, "encoder.json"), "missing encoder.json: %s", e.msg);
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    write_text(p, "{\"a\": 0, ");
    EXPECT(bpe_load(&b, dir, &e) == -1 && strstr(e.msg, "encoder.json") && strstr(e.msg, "invalid JSON"),
           "truncated encoder.json: %s", e.msg);
    write_text(p, "{\"a\": 0}");
    EXPECT(bpe_load(&b, dir, &e) == -1 && strstr(e.msg, "encoder.json"), "tiny encoder.json: %s", e.msg);
    // a real encoder.json with a broken vocab.bpe
    snprintf(src, sizeof src, "cp %s/gpt2/encoder.json %s/", data_dir(), dir);
    EXPECT(system(src) == 0, "copy");
    snprintf(p, sizeof p, "%s/vocab.bpe", dir);
    write_text(p, "#version: 0.2\n\xc4\xa0 t\nnot-a-pair\n");
    EXPECT(bpe_load(&b, dir, &e) == -1 && strstr(e.msg, "vocab.bpe line 3"), "bad merge line: %s", e.msg);
    write_text(p, "#version: 0.2\nzzzzqqq xxyyzz\n");
    EXPECT(bpe_load(&b, dir, &e) == -1 && strstr(e.msg, "vocab.bpe line 2") && strstr(e.msg, "not in encoder.json"),
           "unknown tokens: %s", e.msg);
    write_text(p, "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0 t\n");
    EXPECT(bpe_load(&b, dir, &e) == -1 && strstr(e.msg, "duplicate"), "duplicate merge: %s", e.msg);
    snprintf(src, sizeof src, "rm -rf %s", dir);
    EXPECT(system(src) == 0, "cleanup");
}

int main(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/gpt2", data_dir());
    setenv("TESSERA_GPT2_DIR", dir, 0);
    Err e;
    if (tokenizer_open(&tok, "gpt2", &e)) {
        fprintf(stderr, "%s\n", e.msg);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(test_cases_match_tiktoken);
    RUN(test_tinyshakespeare_matches_tiktoken);
    RUN(test_roundtrip_random_bytes);
    RUN(test_long_runs_are_not_quadratic);
    RUN(test_split_points_keep_the_encoding);
    RUN(test_malformed_vocab_files);
    tokenizer_close(&tok);
    return test_finish();
}
