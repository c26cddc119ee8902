// LLaMA's tokenizer against the npm package llama-tokenizer-js@1.2.2: ids of
// hard cases and of all of tinyshakespeare (tests/data/llama_cases.jsonl,
// made by scripts/gen_llama_tests.mjs), round trips of any bytes (invalid
// UTF-8 through byte fallback), long runs, and malformed vocabulary files.
// The vocabulary is found as tessera finds it (scripts/deps.sh puts it in
// data/llama).
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/fileio.h"
#include "core/json.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "test.h"

static Tokenizer tok;

// The text of ids as decoding a whole sequence gives it: <s> and the front
// space dropped. Returns its length (0 with *ok = 0 past cap).
static size_t decode_all(const int *ids, size_t m, char *out, size_t cap, int *ok) {
    char buf[256];
    size_t pos = 0;
    int front = 1;
    *ok = 1;
    for (size_t i = 0; i < m; i++) {
        size_t b = tokenizer_decode(&tok, ids[i], buf, sizeof buf), skip = front && b && buf[0] == ' ';
        if (b) front = 0;
        if (pos + b - skip > cap) { *ok = 0; return 0; }
        memcpy(out + pos, buf + skip, b - skip);
        pos += b - skip;
    }
    return pos;
}

static void test_cases_match_the_package(void) {
    size_t len;
    char *all = NULL;
    Err fe;
    file_read("tests/data/llama_cases.jsonl", &all, &len, 0, &fe);
    EXPECT(all != NULL, "tests/data/llama_cases.jsonl missing");
    if (!all) return;
    int cases = 0, bad = 0, trips = 0;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        Err e;
        Json *j = json_parse(line, strlen(line), &e);
        const Json *hex = json_get(j, "hex"), *ids = json_get(j, "ids");
        if (!hex || !ids) { json_free(j); continue; }
        size_t n = hex->len / 2;
        char *text = malloc(n + 1), *back = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            unsigned v;
            sscanf(hex->text + 2 * i, "%2x", &v);
            text[i] = (char)v;
        }
        int *got = malloc((n + 2) * sizeof *got);
        size_t m = tokenizer_encode(&tok, text, n, got, n + 2);
        int same = m == ids->len;
        for (size_t i = 0; same && i < m; i++) {
            int64_t want;
            json_int64(json_at(ids, i), &want);
            same = got[i] == want;
        }
        if (!same && bad++ < 3) fprintf(stderr, "  mismatch on %.60s (%zu ids, want %zu)\n", text, m, ids->len);
        int ok;
        size_t b = decode_all(got, m, back, n, &ok);
        // a "▁" in the text is a space once decoded, as in the package
        int lossy = memmem(text, n, "\xe2\x96\x81", 3) != NULL;
        trips += lossy || (ok && b == n && !memcmp(back, text, n));
        cases++;
        free(text);
        free(back);
        free(got);
        json_free(j);
    }
    free(all);
    EXPECT(cases >= 90 && bad == 0, "%d of %d cases differ from llama-tokenizer-js", bad, cases);
    EXPECT(trips == cases, "%d of %d cases decode back to their text (but for ▁)", trips, cases);
}

static void test_tinyshakespeare_matches_the_package(void) {
    const char *d = getenv("TSR_DATA");
    char path[512];
    snprintf(path, sizeof path, "%s/tinyshakespeare.txt", d ? d : "../shared/data");
    size_t len;
    char *text = NULL;
    Err fe;
    file_read(path, &text, &len, 0, &fe);
    EXPECT(text != NULL, "%s missing", path);
    if (!text) return;
    int *ids = malloc((len + 2) * sizeof *ids);
    size_t n = tokenizer_encode(&tok, text, len, ids, len + 2);
    uint32_t *u = malloc(n * sizeof *u);
    for (size_t i = 0; i < n; i++) u[i] = (uint32_t)ids[i];
    // from llama_cases.jsonl's last line: the package's ids of the whole file
    EXPECT(n == 368634, "%zu tokens, the package has 368634", n);
    EXPECT(crc32c(0, u, n * 4) == 3862208198u, "ids differ from the package's (crc32c %u)", crc32c(0, u, n * 4));
    char *back = malloc(len + 1);
    int ok;
    size_t b = decode_all(ids, n, back, len, &ok);
    EXPECT(ok && b == len && !memcmp(back, text, len), "decode(encode(tinyshakespeare)) differs");
    free(back);
    free(u);
    free(ids);
    free(text);
}

// Any bytes, invalid UTF-8 included, come back from decoding their ids.
static void test_roundtrip_random_bytes(void) {
    int bad = 0;
    for (int c = 0; c < 300; c++) {
        size_t n = 1 + (size_t)rng_below(23, 1, c, 200);
        unsigned char *s = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_below(23, 2, (uint64_t)c * 1000 + i, 10);
            s[i] = r < 5 ? (unsigned char)rng_below(23, 3, (uint64_t)c * 1000 + i, 256)
                 : r < 7 ? ' ' : r < 9 ? (unsigned char)('a' + i % 26) : 0xE2;
        }
        int *ids = malloc((n + 2) * sizeof *ids);
        size_t m = tokenizer_encode(&tok, (char *)s, n, ids, n + 2);
        char *back = malloc(n + 1);
        int ok;
        size_t b = decode_all(ids, m, back, n, &ok);
        bad += !ok || b != n || memcmp(back, s, n) != 0 || m > n + 2 || ids[0] != SPM_BOS;
        free(s); free(ids); free(back);
    }
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
