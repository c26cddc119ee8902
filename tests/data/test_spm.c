// LLaMA's tokenizer against the npm package llama-tokenizer-js@1.2.2: ids of
// hard cases and of all of tinyshakespeare (tests/data/llama_cases.jsonl,
// made by scripts/gen_llama_tests.mjs), round trips of any bytes (invalid
// UTF-8 through byte fallback), long runs, and malformed vocabulary files.
// The vocabulary is found as tessera finds it (scripts/deps.sh puts it in
// data/llama).
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "test.h"
#include "tok_cases.h"

static Tokenizer tok;

// A case decodes back to its text, but for a "▁" in the text, which is a
// space once decoded, as in the package.
static int decodes_back(const Tokenizer *t, const char *text, size_t n, const int *ids, size_t m) {
    if (memmem(text, n, "\xe2\x96\x81", 3)) return 1;
    char *back = malloc(n + 1);
    int ok;
    size_t b = tok_decode_all(t, ids, m, back, n, &ok);
    int same = ok && b == n && !memcmp(back, text, n);
    free(back);
    return same;
}

static void test_cases_match_the_package(void) {
    TokCases c = tok_cases_run(&tok, "tests/data/llama_cases.jsonl", 2, decodes_back);
    EXPECT(c.read, "tests/data/llama_cases.jsonl missing");
    if (!c.read) return;
    EXPECT(c.cases >= 90 && c.bad == 0, "%d of %d cases differ from llama-tokenizer-js", c.bad, c.cases);
    EXPECT(c.passed == c.cases, "%d of %d cases decode back to their text (but for ▁)", c.passed, c.cases);
}

static void test_tinyshakespeare_matches_the_package(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/tinyshakespeare.txt", tok_data_dir());
    TokFile f = tok_encode_file(&tok, path, 2);
    EXPECT(f.read, "%s missing", path);
    if (!f.read) return;
    // from llama_cases.jsonl's last line: the package's ids of the whole file
    EXPECT(f.ids == 368634, "%zu tokens, the package has 368634", f.ids);
    EXPECT(f.crc == 3862208198u, "ids differ from the package's (crc32c %u)", f.crc);
    EXPECT(f.roundtrip, "decode(encode(tinyshakespeare)) differs");
}

// LLaMA's ids: <s> first, at most two more than the text's bytes.
static int opens_with_bos(const Tokenizer *t, const char *text, size_t n, const int *ids, size_t m) {
    (void)t;
    (void)text;
    return m <= n + 2 && ids[0] == SPM_BOS;
}

// Any bytes, invalid UTF-8 included, come back from decoding their ids.
static void test_roundtrip_random_bytes(void) {
    int bad = tok_roundtrip_random(&tok, 23, 1, 300, opens_with_bos);
    EXPECT(bad == 0, "%d of 300 random byte strings do not round-trip", bad);
}

static void test_long_runs(void) {
    // 2 MB of one character and of a CJK run: must finish (no time
    // assertion), one sequence each
    size_t n = 2 << 20;
    char *s = malloc(n);
    memset(s, 'a', n);
    int *ids = malloc((n + 2) * sizeof *ids);
    size_t m = tokenizer_encode(&tok, s, n, ids, n + 2);
    EXPECT(m > 0 && m < n / 2 && ids[0] == SPM_BOS, "%zu ids for 2 MB of 'a'", m);
    for (size_t i = 0; i + 3 <= n; i += 3) memcpy(s + i, "\xe4\xb8\xad", 3);
    m = tokenizer_encode(&tok, s, n - n % 3, ids, n + 2);
    EXPECT(m > 0 && m <= n / 3 + 2, "%zu ids for 2 MB of 中", m);
    EXPECT(tokenizer_encode(&tok, s, 0, ids, 1) == 0, "the empty text encodes to nothing");
    free(s);
    free(ids);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static void test_malformed_vocab_files(void) {
    char dir[] = "/tmp/tsr_spm_XXXXXX", p[600];
    EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    Err e;
    Spm *s = NULL;
    EXPECT(spm_load(&s, dir, &e) == -1 && strstr(e.msg, "vocab.txt"), "missing vocab.txt: %s", e.msg);
    snprintf(p, sizeof p, "%s/vocab.txt", dir);
    write_bytes(p, "<unk>\n<s>\n</s>\na\nb", 17);
    snprintf(p, sizeof p, "%s/merges.bin", dir);
    write_bytes(p, "\x03\x00\x04\x00", 4);
    EXPECT(spm_load(&s, dir, &e) == -1 && strstr(e.msg, "vocab.txt") && strstr(e.msg, "not a LLaMA vocabulary"),
           "tiny vocabulary: %s", e.msg);
    EXPECT(setenv("TESSERA_LLAMA_DIR", dir, 1) == 0, "setenv");
    Tokenizer t2;
    EXPECT(tokenizer_open(&t2, "llama", &e) == -1 && strstr(e.msg, "vocab.txt"), "open: %s", e.msg);
    snprintf(p, sizeof p, "rm -rf %s", dir);
    EXPECT(system(p) == 0, "cleanup");
}

int main(void) {
    Err e;
    if (tokenizer_open(&tok, "llama", &e)) {
        fprintf(stderr, "%s\n", e.msg);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    RUN(test_cases_match_the_package);
    RUN(test_tinyshakespeare_matches_the_package);
    RUN(test_roundtrip_random_bytes);
    RUN(test_long_runs);
    RUN(test_malformed_vocab_files);
    tokenizer_close(&tok);
    return test_finish();
}
