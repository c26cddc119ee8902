// Token shards, the loader (order, data-parallel split, resumable state,
// prefetch) and `tessera prepare` against tiktoken's ids.
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/checksum.h"
#include "data/loader.h"
#include "data/shard.h"
#include "test.h"

static char tmpdir[] = "/tmp/tsr_loader_XXXXXX";

static const char *data_dir(void) {
    const char *d = getenv("TSR_DATA");
    return d ? d : "../shared/data";
}

static void test_shard_roundtrip(void) {
    Err e;
    char p[600];
    int ids[1000];
    for (int i = 0; i < 1000; i++) ids[i] = (i * 7919) % 70000;
    Shard s;
    snprintf(p, sizeof p, "%s/v2.bin", tmpdir);
    EXPECT(shard_write(p, ids, 1000, 70000, &e) == 0, "%s", e.msg);
    EXPECT(shard_open(&s, p, 70000, &e) == 0 && s.version == 2 && s.ntok == 1000, "v2: %s", e.msg);
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += shard_token(&s, i) != ids[i];
    EXPECT(bad == 0, "v2 tokens differ");
    shard_close(&s);
    for (int i = 0; i < 1000; i++) ids[i] %= 50257;
    snprintf(p, sizeof p, "%s/v1.bin", tmpdir);
    EXPECT(shard_write(p, ids, 1000, 50257, &e) == 0, "%s", e.msg);
    EXPECT(shard_open(&s, p, 50257, &e) == 0 && s.version == 1 && s.ntok == 1000, "v1: %s", e.msg);
    bad = 0;
    for (int i = 0; i < 1000; i++) bad += shard_token(&s, i) != ids[i];
    EXPECT(bad == 0, "v1 tokens differ");
    shard_close(&s);
    EXPECT(shard_open(&s, p, 100, &e) == -1 && strstr(e.msg, "outside the vocabulary") && strstr(e.msg, "v1.bin"),
           "token >= vocab: %s", e.msg);
}

// Writes a shard file with a given header and token bytes.
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count, size_t token_bytes) {
    FILE *f = fopen(path, "wb");
    int32_t h[256] = {magic, version, count};
    fwrite(h, sizeof h, 1, f);
    for (size_t i = 0; i < token_bytes; i++) fputc(1, f);
    fclose(f);
}

static void test_shard_errors(void) {
    Err e;
    Shard s;
    char p[600];
    snprintf(p, sizeof p, "%s/bad.bin", tmpdir);
    write_raw(p, 12345, 1, 10, 20);
    EXPECT(shard_open(&s, p, 50257, &e) == -1 && strstr(e.msg, "bad.bin") && strstr(e.msg, "magic"), "magic: %s", e.msg);
    write_raw(p, 20240520, 3, 10, 20);
    EXPECT(shard_open(&s, p, 50257, &e) == -1 && strstr(e.msg, "version 3"), "version: %s", e.msg);
    write_raw(p, 20240520, 1, 100, 20);
    EXPECT(shard_open(&s, p, 50257, &e) == -1 && strstr(e.msg, "header says 100 tokens"), "count past end: %s", e.msg);
    FILE *f = fopen(p, "wb");
    fputs("short", f);
    fclose(f);
    EXPECT(shard_open(&s, p, 50257, &e) == -1 && strstr(e.msg, "shorter than"), "truncated header: %s", e.msg);
    EXPECT(shard_open(&s, "/nonexistent.bin", 50257, &e) == -1 && strstr(e.msg, "/nonexistent.bin"), "missing: %s", e.msg);
}

static Loader *open_loader(const char *path, int B, int rank, int ranks, int prefetch, LoaderSplit split) {
    Err e;
    Tokenizer tok;
    tokenizer_open(&tok, "byte", &e);
    LoaderOptions o = {.T = 16, .B = B, .rank = rank, .ranks = ranks, .seed = 3, .split = split, .prefetch = prefetch};
    Loader *l = NULL;
    if (loader_open(&l, path, &tok, &o, &e)) fprintf(stderr, "  %s\n", e.msg);
    return l;
}

static void test_ranks_split_the_global_batch(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/shards", tmpdir);
    // Three shards of different lengths (windows never cross them).
    int *ids = malloc(5000 * sizeof *ids);
    for (int i = 0; i < 5000; i++) ids[i] = i % 251;
    char p[700];
    Err e;
    snprintf(p, sizeof p, "mkdir -p %s", dir);
    EXPECT(system(p) == 0, "mkdir");
    int lens[3] = {1000, 333, 2500};
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/train_%06d.bin", dir, k);
        for (int i = 0; i < lens[k]; i++) ids[i] = (i + 1000 * k) % 251;
        EXPECT(shard_write(p, ids, lens[k], 256, &e) == 0, "%s", e.msg);
    }
    free(ids);
    int G = 8, steps = 40;   // global batch 8, more steps than an epoch (238 samples / 8)
    Loader *one = open_loader(dir, G, 0, 1, 1, SPLIT_TRAIN);
    EXPECT(one && loader_samples(one) == 1000 / 16 + 332 / 16 + 2499 / 16, "samples %lld",
           one ? (long long)loader_samples(one) : -1LL);
    if (!one) return;
    int ref_in[8 * 16], ref_tg[8 * 16];
    int rank_counts[] = {2, 4};
    Loader *rl[2][4];
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < rank_counts[c]; r++) rl[c][r] = open_loader(dir, G / rank_counts[c], r, rank_counts[c], r % 2, SPLIT_TRAIN);
    int bad = 0;
    for (int s = 0; s < steps; s++) {
        loader_next(one, ref_in, ref_tg);
        for (int c = 0; c < 2; c++) {
            int R = rank_counts[c], Bl = G / R;
            for (int r = 0; r < R; r++) {
                int in[8 * 16], tg[8 * 16];
                loader_next(rl[c][r], in, tg);
                // rank r's rows are rows [r·Bl, (r+1)·Bl) of the global batch:
                // together disjoint and complete.
                bad += memcmp(in, ref_in + r * Bl * 16, (size_t)Bl * 16 * sizeof(int)) != 0;
                bad += memcmp(tg, ref_tg + r * Bl * 16, (size_t)Bl * 16 * sizeof(int)) != 0;
            }
        }
    }
    EXPECT(bad == 0, "%d rank batches differ from their part of the global batch", bad);
    EXPECT(loader_state(one).epoch[0] == 1, "after %d steps of 8 the loader is in epoch %lld", steps,
           (long long)loader_state(one).epoch[0]);
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < rank_counts[c]; r++) loader_free(rl[c][r]);

    // Resume: a loader restored to a saved state (with prefetch) continues
    // exactly as the uninterrupted one.
    Loader *a = open_loader(dir, G, 0, 1, 1, SPLIT_TRAIN), *b = open_loader(dir, G, 0, 1, 1, SPLIT_TRAIN);
    int ia[128], ta[128], ib[128], tb[128];
    for (int s = 0; s < 27; s++) loader_next(a, ia, ta);
    LoaderState saved = loader_state(a);
    loader_next(b, ib, tb);                // b is somewhere else with a batch prefetched
    loader_set_state(b, saved);
    bad = 0;
    for (int s = 0; s < 20; s++) {
        loader_next(a, ia, ta);
        loader_next(b, ib, tb);
        bad += memcmp(ia, ib, sizeof ia) != 0 || memcmp(ta, tb, sizeof ta) != 0;
    }
    EXPECT(bad == 0, "%d batches differ after restoring the state", bad);
    // Epochs are reshuffled.
    loader_set_state(a, (LoaderState){.epoch = {0}});
    loader_next(a, ia, ta);
    loader_set_state(a, (LoaderState){.epoch = {1}});
    loader_next(a, ib, tb);
    EXPECT(memcmp(ia, ib, sizeof ia) != 0, "epoch 1 starts like epoch 0");
    loader_free(a);
    loader_free(b);
    loader_free(one);

    // Validation: in order, a short last batch, then 0.
    snprintf(p, sizeof p, "%s/train_000001.bin", dir);
    Loader *v = open_loader(p, 8, 0, 1, 0, SPLIT_VAL);
    int got, total = 0, n = 0;
    int in[128], tg[128];
    while ((got = loader_next(v, in, tg)) > 0) { total += got; n++; }
    EXPECT(total == 332 / 16 && n == 3, "validation served %d samples in %d batches", total, n);
    loader_rewind(v);
    loader_next(v, in, tg);
    EXPECT(in[0] == 1000 % 251 && in[1] == 1001 % 251 && tg[0] == in[1], "validation starts at the first window");
    loader_free(v);
    // Validation over 2 ranks of 4: each round, rank r takes samples
    // [4r, 4r+4) of the next 8, as one rank of 8 reads them; a rank past
    // the end gets 0 while the other still has some, and both see the end.
    Loader *w = open_loader(p, 8, 0, 1, 0, SPLIT_VAL), *r0 = open_loader(p, 4, 0, 2, 0, SPLIT_VAL),
           *r1 = open_loader(p, 4, 1, 2, 0, SPLIT_VAL);
    int rounds = 0, split_bad = 0, g0 = -1, g1 = -1;
    while (!loader_done(w)) {
        int iw[128], i0[64], i1[64];
        int g = loader_next(w, iw, tg);
        g0 = loader_next(r0, i0, tg);
        g1 = loader_next(r1, i1, tg);
        split_bad += g0 + g1 != g || memcmp(iw, i0, (size_t)g0 * 16 * sizeof(int)) ||
                     memcmp(iw + 64, i1, (size_t)g1 * 16 * sizeof(int));
        rounds++;
    }
    EXPECT(split_bad == 0 && rounds == 3 && g0 == 4 && g1 == 0 && loader_done(r1),
           "2 ranks of 4 read validation as 1 of 8 (%d differ, %d rounds, last %d + %d)", split_bad, rounds, g0, g1);
    loader_free(w);
    loader_free(r0);
    loader_free(r1);
    Err e2;
    Tokenizer tok;
    tokenizer_open(&tok, "byte", &e2);
    LoaderOptions o = {.T = 16, .B = 8, .ranks = 1, .split = SPLIT_VAL};
    EXPECT(loader_open(&v, dir, &tok, &o, &e2) == -1 && strstr(e2.msg, "no validation shards"), "no val shards: %s", e2.msg);
}

// `tessera prepare` output equals tiktoken's ids of the whole text (after
// the document's end-of-text token), however it was split into shards and
// pieces, and whatever the thread count.
static void test_prepare_matches_tiktoken(void) {
    char cmd[8000], out1[600], out2[600];
    snprintf(out1, sizeof out1, "%s/p1", tmpdir);
    snprintf(out2, sizeof out2, "%s/p2", tmpdir);
    snprintf(cmd, sizeof cmd,
             "TESSERA_GPT2_DIR=%s/gpt2 ./tessera prepare --input %s/tinyshakespeare.txt --out %s --val-fraction 0.3 "
             "--shard-tokens 50000 --threads 2 >/dev/null && TESSERA_GPT2_DIR=%s/gpt2 ./tessera prepare --input "
             "%s/tinyshakespeare.txt --out %s --val-fraction 0.3 --shard-tokens 50000 --threads 1 >/dev/null && "
             "cmp -s %s/train_000003.bin %s/train_000003.bin && cmp -s %s/val_000001.bin %s/val_000001.bin",
             data_dir(), data_dir(), out1, data_dir(), data_dir(), out2, out1, out2, out1, out2);
    EXPECT(system(cmd) == 0, "prepare failed or depends on the thread count");
    uint32_t *all = malloc(400000 * sizeof *all);
    size_t n = 0;
    const char *kinds[] = {"val", "train"};
    for (int k = 0; k < 2; k++)
        for (int i = 0;; i++) {
            char p[700];
            snprintf(p, sizeof p, "%s/%s_%06d.bin", out1, kinds[k], i);
            if (access(p, F_OK)) break;
            Shard s;
            Err e;
            EXPECT(shard_open(&s, p, 50257, &e) == 0, "%s", e.msg);
            EXPECT(s.ntok <= 50000, "%s has %lld tokens", p, (long long)s.ntok);
            for (int64_t t = 0; t < s.ntok && n < 400000; t++) all[n++] = (uint32_t)shard_token(&s, t);
            shard_close(&s);
        }
    EXPECT(n == 338026 && all[0] == 50256, "%zu tokens, first %u", n, n ? all[0] : 0);
    EXPECT(crc32c(0, all + 1, (n - 1) * 4) == 3730974193u, "ids differ from tiktoken's");
    free(all);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_shard_roundtrip);
    RUN(test_shard_errors);
    RUN(test_ranks_split_the_global_batch);
    RUN(test_prepare_matches_tiktoken);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    return test_finish();
}
