// The GPT-2 tokenizer against OpenAI's tiktoken: ids of hard cases and of
// all of tinyshakespeare (tests/data/bpe_cases.jsonl, made by
// scripts/gen_bpe_tests.js), byte round trips, and malformed vocabulary files.
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "data/tokenizer.h"
#include "test.h"
#include "tok_cases.h"

static Tokenizer tok;

static void test_cases_match_tiktoken(void) {
    TokCases c = tok_cases_run(&tok, "tests/data/bpe_cases.jsonl", 1, NULL);
    EXPECT(c.read, "tests/data/bpe_cases.jsonl missing");
    if (!c.read) return;
    EXPECT(c.cases >= 80 && c.bad == 0, "%d of %d cases differ from tiktoken", c.bad, c.cases);
}

static void test_tinyshakespeare_matches_tiktoken(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tinyshakespeare.txt", tok_data_dir());
    TokFile f = tok_encode_file(&tok, path, 0);
    EXPECT(f.read, "%s missing", path);
    if (!f.read) return;
    // From bpe_cases.jsonl's last line: tiktoken's ids of the whole file.
    EXPECT(f.ids == 338025, "%zu tokens, tiktoken has 338025", f.ids);
    EXPECT(f.crc == 3730974193u, "ids differ from tiktoken's (crc32c %u)", f.crc);
    // and decoding gives the text back
    EXPECT(f.roundtrip, "decode(encode(tinyshakespeare)) differs");
}

static void test_roundtrip_random_bytes(void) {
    int bad = tok_roundtrip_random(&tok, 21, 0, 300, NULL);
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
    snprintf(src, sizeof src, "cp %s/gpt2/encoder.json %s/", tok_data_dir(), dir);
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
    snprintf(dir, sizeof dir, "%s/gpt2", tok_data_dir());
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
