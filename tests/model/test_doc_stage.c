// Document masking through the whole stage (`train --doc-mask`): a packed
// batch of several documents gives the summed losses and the gradients of
// each document run alone (GPT-2's learned positions and LLaMA's rotary
// ones restarting per document; under full recomputation and bf16 too),
// and incremental decoding across a separator gives the logits of the
// last document run alone.
#include <string.h>

#include "core/rng.h"
#include "kernels/gemm_bf16.h"
#include "model/stage.h"
#include "test.h"

enum { SEP = 0 };

static ModelConfig cfg_of(ArchId arch, int T) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "test");
    c.arch = arch;
    c.n_layer = 2; c.n_head = 4; c.d_model = 16; c.d_ff = 24; c.max_seq = T;
    if (arch != ARCH_GPT2) c.n_kv_head = 2;
    config_set_vocab(&c, 29);
    return c;
}

static void params_of(Stage *st) {
    ptable_init(&st->table, st->params, 5);
    for (size_t i = 0; i < st->table.total; i++) st->params[i] *= 4.0f;   // attention far from uniform
}

// Tokens (B,T) in 1..V-1 with separators at the given places of each row (-1 ends a row's list).
static void make_rows(int *tok, int *tgt, int B, int T, int V, const int (*sep)[6]) {
    for (int i = 0; i < B * T; i++) {
        tok[i] = 1 + (int)rng_below(3, 11, i, V - 1);
        tgt[i] = (int)rng_below(3, 12, i, V);
    }
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 6 && sep[b][k] >= 0; k++) tok[b * T + sep[b][k]] = SEP;
}

static double rel_max(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fabs((double)a[i] - b[i]) > d ? fabs((double)a[i] - b[i]) : d;
        m = fabs((double)b[i]) > m ? fabs((double)b[i]) : m;
    }
    return d / (m > 0 ? m : 1);
}

static void check_packed(ArchId arch, unsigned flags, double tol) {
    enum { B = 2, T = 80 };
    static const int sep[B][6] = {{0, 30, 31, 70, -1}, {5, 66, -1}};
    ModelConfig c = cfg_of(arch, T);
    ModelSlice s = slice_whole(&c);
    Stage pk, one;
    Err e;
    EXPECT(stage_init(&pk, &c, &s, B, T, 1, flags, &e) == 0 && stage_init(&one, &c, &s, 1, T, 1, flags, &e) == 0,
           "%s", e.msg);
    EXPECT(stage_set_doc_mask(&pk, SEP, &e) == 0 && stage_doc_sep(&pk) == SEP, "%s", e.msg);
    params_of(&pk);
    memcpy(one.params, pk.params, pk.table.total * sizeof(float));
    stage_params_changed(&one);
    int tok[B * T], tgt[B * T];
    make_rows(tok, tgt, B, T, c.vocab, sep);
    memset(pk.grads, 0, pk.table.total * 4);
    memset(one.grads, 0, one.table.total * 4);
    double packed = stage_forward(&pk, 0, tok, tgt, B, T, 1.0f);
    stage_backward(&pk, 0, tok, B, T);
    double alone = 0;
    int docs = 0;
    for (int b = 0; b < B; b++)   // each document: from a row's start or a separator to the next
        for (int t = 0; t < T; t++) {
            if (t && tok[b * T + t] != SEP) continue;
            int L = 1;
            while (t + L < T && tok[b * T + t + L] != SEP) L++;
            alone += stage_forward(&one, 0, tok + b * T + t, tgt + b * T + t, 1, L, 1.0f);
            stage_backward(&one, 0, tok + b * T + t, 1, L);
            docs++;
        }
    const char *an = arch == ARCH_GPT2 ? "gpt2" : "llama";
    EXPECT(docs == 7, "%d documents", docs);
    EXPECT(fabs(packed - alone) <= tol * fabs(alone), "%s flags %u: packed loss sum %.9g, documents alone %.9g", an,
           flags, packed, alone);
    double g = rel_max(pk.grads, one.grads, pk.table.total);
    EXPECT(g < 100 * tol, "%s flags %u: packed gradients against the documents' sum: rel err %.2e", an, flags, g);
    stage_free(&pk);
    stage_free(&one);
}

static void test_packed_gpt2(void) {
    check_packed(ARCH_GPT2, 0, 1e-6);
    check_packed(ARCH_GPT2, STAGE_RECOMPUTE_FULL, 1e-6);
    check_packed(ARCH_GPT2, STAGE_RECOMPUTE_SELECTIVE, 1e-6);
}

static void test_packed_llama(void) {
    check_packed(ARCH_LLAMA, 0, 1e-6);
    check_packed(ARCH_LLAMA, STAGE_RECOMPUTE_FULL, 1e-6);
}

// bf16 (the attention blocks on the bf16 units where the CPU has them):
// packed against alone within what bf16 products allow.
static void test_packed_bf16(void) {
    check_packed(ARCH_GPT2, STAGE_BF16, 1e-4);
    check_packed(ARCH_LLAMA, STAGE_BF16, 1e-4);
}

// Decoding with the cache, a separator in the prompt and one among the new
// tokens: the last position's logits are those of its document run alone,
// and those of the whole context run at once (no cache) with masking.
static void check_decode(ArchId arch) {
    enum { S = 40, N = 11 };
    int tok[N] = {5, 7, SEP, 3, 9, 2, 6, SEP, 4, 8, 2};
    ModelConfig c = cfg_of(arch, S);
    ModelSlice s = slice_whole(&c);
    Stage kv, all, one;
    Err e;
    EXPECT(stage_init(&kv, &c, &s, 1, S, 1, 0, &e) == 0 && stage_init(&all, &c, &s, 1, S, 1, 0, &e) == 0 &&
           stage_init(&one, &c, &s, 1, S, 1, 0, &e) == 0, "%s", e.msg);
    EXPECT(stage_kv_init(&kv, &e) == 0 && stage_set_doc_mask(&kv, SEP, &e) == 0 &&
           stage_set_doc_mask(&all, SEP, &e) == 0, "%s", e.msg);
    params_of(&kv);
    memcpy(all.params, kv.params, kv.table.total * sizeof(float));
    memcpy(one.params, kv.params, kv.table.total * sizeof(float));
    int Vp = c.vocab_padded;
    float *lk = calloc(Vp, sizeof *lk), *la = calloc(Vp, sizeof *la), *lo = calloc(Vp, sizeof *lo);
    stage_forward(&kv, 0, tok, NULL, 1, 5, 0.0f);   // the prompt, across the first separator
    for (int n = 5; n < N; n++) stage_forward(&kv, 0, tok + n, NULL, 1, 1, 0.0f);
    stage_logits(&kv, 0, 1, 1, 0, lk);
    stage_forward(&all, 0, tok, NULL, 1, N, 0.0f);
    stage_logits(&all, 0, 1, N, N - 1, la);
    stage_forward(&one, 0, tok + 7, NULL, 1, N - 7, 0.0f);
    stage_logits(&one, 0, 1, N - 7, N - 8, lo);
    const char *an = arch == ARCH_GPT2 ? "gpt2" : "llama";
    EXPECT(rel_max(lk, lo, c.vocab) < 1e-5, "%s: cached decoding against the document alone: %.2e", an,
           rel_max(lk, lo, c.vocab));
    EXPECT(rel_max(la, lo, c.vocab) < 1e-5, "%s: the masked context against the document alone: %.2e", an,
           rel_max(la, lo, c.vocab));
    stage_kv_reset(&kv);   // a new sequence from position 0: its first document starts there
    stage_forward(&kv, 0, tok + 8, NULL, 1, N - 8, 0.0f);
    stage_logits(&kv, 0, 1, N - 8, N - 9, lk);
    stage_forward(&one, 0, tok + 8, NULL, 1, N - 8, 0.0f);
    stage_logits(&one, 0, 1, N - 8, N - 9, lo);
    EXPECT(rel_max(lk, lo, c.vocab) < 1e-5, "%s: after a reset: %.2e", an, rel_max(lk, lo, c.vocab));
    free(lk); free(la); free(lo);
    stage_free(&kv); stage_free(&all); stage_free(&one);
}

static void test_decode(void) {
    check_decode(ARCH_GPT2);
    check_decode(ARCH_LLAMA);
}

int main(void) {
    RUN(test_packed_gpt2);
    RUN(test_packed_llama);
    RUN(test_packed_bf16);
    RUN(test_decode);
    return test_finish();
}
