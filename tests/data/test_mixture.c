// Data mixtures: the interleaving rule (each source within one sequence of
// its weight's share of any first N), the spec's parsing and refusals, and
// the mixture loader (its sources' own epochs, the global batch split over
// ranks, its state resumed on another number of ranks, bit for bit).
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "data/shard.h"
#include "test.h"

static char tmpdir[] = "/tmp/tsr_mixture_XXXXXX";

// Every prefix of the first n sequences holds source s within one of w_s·N.
static double worst_prefix(const double *w, int k, int n) {
    int64_t c[MIX_MAX_SOURCES] = {0};
    double worst = 0;
    for (int i = 0; i < n; i++) {
        c[mix_pick(w, c, k)]++;
        for (int s = 0; s < k; s++) {
            double d = fabs((double)c[s] - w[s] * (i + 1));
            if (d > worst) worst = d;
        }
    }
    return worst;
}

static void test_pick_shares(void) {
    double a[] = {0.7, 0.2, 0.1}, b[] = {0.5, 0.5}, c[] = {0.01, 0.99}, d[] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
    EXPECT(worst_prefix(a, 3, 1000) <= 1, "0.7/0.2/0.1: %g", worst_prefix(a, 3, 1000));
    EXPECT(worst_prefix(b, 2, 1000) <= 1, "0.5/0.5: %g", worst_prefix(b, 2, 1000));
    EXPECT(worst_prefix(c, 2, 1000) <= 1, "0.01/0.99: %g", worst_prefix(c, 2, 1000));
    EXPECT(worst_prefix(d, 3, 1000) <= 1, "thirds: %g", worst_prefix(d, 3, 1000));
    // ties go to the lowest index: equal weights alternate from source 0
    int64_t cnt[2] = {0, 0};
    int first = mix_pick(b, cnt, 2);
    cnt[first]++;
    EXPECT(first == 0 && mix_pick(b, cnt, 2) == 1, "equal weights start with source 0, then 1");
    // random mixtures: of 2 or 3 sources every prefix within one sequence of
    // each share; of up to 16, within 1.5 (BlendedDataset's rule is not
    // Tijdeman's: with 4 or more sources a prefix can stray a little past
    // one, about 1.06 at most in these draws)
    double worst3 = 0, worst = 0;
    for (int t = 0; t < 400; t++) {
        int k = t < 200 ? 2 + t % 2 : 4 + (int)rng_below(5, 1, (uint64_t)t, 13);
        double w[MIX_MAX_SOURCES], sum = 0;
        for (int s = 0; s < k; s++) sum += w[s] = 0.001 + rng_uniform(5, 2, (uint64_t)(t * 16 + s));
        for (int s = 0; s < k; s++) w[s] /= sum;
        double x = worst_prefix(w, k, 1000);
        if (k <= 3 && x > worst3) worst3 = x;
        if (x > worst) worst = x;
    }
    EXPECT(worst3 <= 1, "200 random mixtures of 2 or 3 sources: a source %g sequences off its share of a prefix", worst3);
    EXPECT(worst < 1.5, "200 random mixtures of 4 to 16 sources: a source %g sequences off its share of a prefix", worst);
}

// A directory of one training shard: source k's tokens k·10000 + i, so a
// window tells its source and place.
static void make_source(const char *dir, int k, int ntok) {
    char p[700];
    Err e;
    snprintf(p, sizeof p, "mkdir -p %s", dir);
    EXPECT(system(p) == 0, "mkdir");
    int *ids = malloc((size_t)ntok * sizeof *ids);
    for (int i = 0; i < ntok; i++) ids[i] = k * 10000 + i;
    snprintf(p, sizeof p, "%s/train_000000.bin", dir);
    EXPECT(shard_write(p, ids, ntok, 50257, &e) == 0, "%s", e.msg);
    free(ids);
}

static void test_parse(void) {
    char a[600], b[600], spec[2000], f[700];
    Mixture m;
    Err e;
    snprintf(a, sizeof a, "%s/pa", tmpdir);
    snprintf(b, sizeof b, "%s/pb", tmpdir);
    make_source(a, 0, 100);
    make_source(b, 1, 100);
    snprintf(spec, sizeof spec, "web=%s:0.7,books=%s:0.3", a, b);
    EXPECT(mix_parse(&m, spec, "--data", &e) == 0 && m.n == 2 && !m.plain && !strcmp(m.src[1].name, "books") &&
           !strcmp(m.src[1].path, b) && m.src[0].weight == 0.7, "list: %s", e.msg);
    mix_free(&m);
    snprintf(spec, sizeof spec, "web=%s:7,books=%s:3", a, b);
    EXPECT(mix_parse(&m, spec, "--data", &e) == 0 && m.src[0].weight == 0.7 && m.src[1].weight == 0.3,
           "weights are normalized: %g %g", m.src[0].weight, m.src[1].weight);
    mix_free(&m);
    EXPECT(mix_parse(&m, a, "--data", &e) == 0 && m.plain && m.n == 1 && m.src[0].weight == 1, "a path is plain");
    mix_free(&m);
    snprintf(f, sizeof f, "%s/mix.json", tmpdir);
    FILE *fp = fopen(f, "w");
    fprintf(fp, "{\"sources\": [{\"name\": \"web\", \"path\": \"%s\", \"weight\": 2}, {\"name\": \"b\", \"path\": \"%s\", "
            "\"weight\": 1}]}", a, b);
    fclose(fp);
    EXPECT(mix_parse(&m, f, "--data", &e) == 0 && m.n == 2 && fabs(m.src[0].weight - 2.0 / 3) < 1e-12, "json: %g", m.src[0].weight);
    mix_free(&m);
    struct { const char *fmt, *want; } bad[] = {
        {"web=%s:0,books=%s:1", "weight 0"},
        {"web=%s:0.5,books=%s/nope:0.5", "No such file"},
        {"web=%s:abc,books=%s:1", "the weight 'abc' is not a number"},
        {"web=%s:1,web=%s:1", "given to two sources"},
        {"=%s:1,b=%s:1", "name is 1 to 47"},
        {"w b=%s:1,b=%s:1", "letters, digits"},
        {"web=%s,b=%s:1", "expected NAME=PATH:WEIGHT"},
        {"web=%s:-1,b=%s:1", "positive"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(spec, sizeof spec, bad[i].fmt, a, b);
        e.msg[0] = 0;
        int rc = mix_parse(&m, spec, "--data", &e);
        EXPECT(rc == -1 && e.code == ERR_USAGE && strstr(e.msg, "--data") && strstr(e.msg, bad[i].want), "'%s': %s", spec,
               e.msg);
    }
    fp = fopen(f, "w");
    fprintf(fp, "{\"sources\": [{\"name\": \"web\", \"path\": \"%s\", \"weight\": 1, \"extra\": 1}]}", a);
    fclose(fp);
    EXPECT(mix_parse(&m, f, "--data", &e) == -1 && strstr(e.msg, "nothing else"), "json extra key: %s", e.msg);
}

static Loader *open_mix(const char *spec, int B, int rank, int ranks, int prefetch, const Tokenizer *tok) {
    Mixture m;
    Err e;
    Loader *l = NULL;
    LoaderOptions o = {.T = 8, .B = B, .rank = rank, .ranks = ranks, .seed = 11, .split = SPLIT_TRAIN, .prefetch = prefetch};
    if (mix_parse(&m, spec, "--data", &e) || loader_open_mix(&l, &m, tok, &o, &e)) fprintf(stderr, "  %s\n", e.msg);
    mix_free(&m);
    return l;
}

static void test_mixture_loader(void) {
    Tokenizer tok;
    Err e;
    EXPECT(tokenizer_open(&tok, "gpt2", &e) == 0, "%s", e.msg);
    char d[3][600], spec[2000], one[2000];
    int lens[3] = {4001, 2401, 241};   // 500, 300 and 30 windows of 8+1
    for (int k = 0; k < 3; k++) {
        snprintf(d[k], sizeof d[k], "%s/s%d", tmpdir, k);
        make_source(d[k], k, lens[k]);
    }
    snprintf(spec, sizeof spec, "a=%s:0.5,b=%s:0.3,c=%s:0.2", d[0], d[1], d[2]);
    enum { G = 8, STEPS = 125 };   // 1000 sequences: source c goes through 6+ epochs
    Loader *l = open_mix(spec, G, 0, 1, 1, &tok);
    EXPECT(l && loader_nsources(l) == 3 && loader_is_mixture(l), "opened");
    if (!l) return;
    int in[G * 8], tg[G * 8], count[3] = {0}, seen_c[30] = {0}, epoch_bad = 0, c_seen = 0, share_bad = 0;
    for (int s = 0; s < STEPS; s++) {
        loader_next(l, in, tg);
        for (int b = 0; b < G; b++) {
            int k = in[b * 8] / 10000, i = in[b * 8] % 10000;
            count[k]++;
            if (k == 2) {   // source c: each of its 30 samples once per epoch of its own
                if (c_seen % 30 == 0) memset(seen_c, 0, sizeof seen_c);
                epoch_bad += seen_c[i / 8]++ != 0;
                c_seen++;
            }
            int n = s * G + b + 1;
            double w[3] = {0.5, 0.3, 0.2};
            for (int q = 0; q < 3; q++) share_bad += fabs(count[q] - w[q] * n) > 1;
        }
    }
    EXPECT(abs(count[0] - 500) <= 1 && abs(count[1] - 300) <= 1 && abs(count[2] - 200) <= 1 && share_bad == 0,
           "the first 1000 sequences hold %d, %d, %d (weights 0.5/0.3/0.2; %d prefixes off by more than one)", count[0],
           count[1], count[2], share_bad);
    EXPECT(epoch_bad == 0, "source c repeated %d samples within one of its epochs", epoch_bad);
    EXPECT(loader_source(l, 2).served == count[2] && loader_source(l, 0).served == count[0],
           "served counts %lld %lld", (long long)loader_source(l, 2).served, (long long)loader_source(l, 0).served);
    loader_free(l);

    // the global batch split over 2 and 4 ranks (prefetch on and off), and
    // a state saved by one rank continued by 2 and 4 ranks, through the
    // checkpoint's JSON: the exact batches of the uninterrupted loader
    Loader *ref = open_mix(spec, G, 0, 1, 1, &tok), *a = open_mix(spec, G, 0, 1, 0, &tok);
    int R[2] = {2, 4}, split_bad = 0, resume_bad = 0;
    Loader *rl[2][4], *rr[2][4];
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < R[c]; r++) {
            rl[c][r] = open_mix(spec, G / R[c], r, R[c], r % 2, &tok);
            rr[c][r] = open_mix(spec, G / R[c], r, R[c], (r + 1) % 2, &tok);
        }
    for (int s = 0; s < 40; s++) loader_next(a, in, tg);
    char *js = loader_state_json(a);
    Json *j = json_parse(js, strlen(js), &e);
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < R[c]; r++)
            EXPECT(loader_state_read(rr[c][r], j, "meta.json", &e) == 0, "read the state: %s", e.msg);
    EXPECT(strstr(js, "\"count\":320") && strstr(js, "\"name\":\"c\""), "state json %s", js);
    for (int s = 0; s < 80; s++) {
        int ri[G * 8], rt[G * 8], ai[G * 8], at[G * 8];
        loader_next(ref, ri, rt);
        if (s >= 40) loader_next(a, ai, at);
        for (int c = 0; c < 2; c++)
            for (int r = 0; r < R[c]; r++) {
                int B = G / R[c], xi[G * 8], xt[G * 8];
                loader_next(rl[c][r], xi, xt);
                split_bad += memcmp(xi, ri + r * B * 8, (size_t)B * 8 * sizeof(int)) || memcmp(xt, rt + r * B * 8, (size_t)B * 8 * sizeof(int));
                if (s < 40) continue;
                loader_next(rr[c][r], xi, xt);
                resume_bad += memcmp(xi, ai + r * B * 8, (size_t)B * 8 * sizeof(int)) || memcmp(xt, at + r * B * 8, (size_t)B * 8 * sizeof(int));
                resume_bad += memcmp(xi, ri + r * B * 8, (size_t)B * 8 * sizeof(int)) != 0;
            }
    }
    EXPECT(split_bad == 0, "%d rank batches differ from their part of the global batch", split_bad);
    EXPECT(resume_bad == 0, "%d rank batches after the resume differ from the uninterrupted loader's", resume_bad);
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < R[c]; r++) { loader_free(rl[c][r]); loader_free(rr[c][r]); }

    // another mixture, or a plain path, does not continue the state
    snprintf(one, sizeof one, "a=%s:0.4,b=%s:0.4,c=%s:0.2", d[0], d[1], d[2]);
    Loader *other = open_mix(one, G, 0, 1, 0, &tok), *plain = open_mix(d[0], G, 0, 1, 0, &tok);
    EXPECT(loader_state_read(other, j, "meta.json", &e) == -1 && strstr(e.msg, "a 0.5, b 0.3, c 0.2") &&
           strstr(e.msg, "a 0.4, b 0.4, c 0.2"), "changed weights: %s", e.msg);
    EXPECT(loader_state_read(plain, j, "meta.json", &e) == -1 && strstr(e.msg, "mixture"), "plain: %s", e.msg);
    json_free(j);
    free(js);
    js = loader_state_json(plain);
    j = json_parse(js, strlen(js), &e);
    EXPECT(!strcmp(js, "{\"epoch\":0,\"pos\":0}"), "a plain loader's state: %s", js);
    EXPECT(loader_state_read(other, j, "meta.json", &e) == -1 && strstr(e.msg, "one plain --data path"), "from plain: %s",
           e.msg);
    json_free(j);
    free(js);

    // one source named: the order of the plain path
    snprintf(one, sizeof one, "only=%s:1", d[0]);
    Loader *named = open_mix(one, G, 0, 1, 1, &tok);
    int same = 1;
    for (int s = 0; s < 70; s++) {
        int xi[G * 8], xt[G * 8];
        loader_next(named, in, tg);
        loader_next(plain, xi, xt);
        same &= !memcmp(in, xi, sizeof in) && !memcmp(tg, xt, sizeof tg);
    }
    EXPECT(same, "a mixture of one source reads as its plain path");
    loader_free(named);
    loader_free(other);
    loader_free(plain);
    loader_free(ref);
    loader_free(a);

    // sources of another tokenizer are refused
    EXPECT(shard_info_write(d[1], "llama", 32000, &e) == 0, "%s", e.msg);
    Mixture m;
    Loader *x = NULL;
    LoaderOptions o = {.T = 8, .B = 2, .ranks = 1, .split = SPLIT_TRAIN};
    EXPECT(mix_parse(&m, spec, "--data", &e) == 0, "%s", e.msg);
    EXPECT(loader_open_mix(&x, &m, &tok, &o, &e) == -1 && e.code == ERR_USAGE && strstr(e.msg, "source b") &&
           strstr(e.msg, "llama tokenizer, not gpt2"), "another tokenizer: %s", e.msg);
    mix_free(&m);
    tokenizer_close(&tok);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    RUN(test_pick_shares);
    RUN(test_parse);
    RUN(test_mixture_loader);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    return test_finish();
}
