#include "data/tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// The files each tokenizer reads, and where: {env, directory under data/,
// the two files}.
typedef struct { const char *env, *sub, *files[2]; } VocabPlace;
static const VocabPlace gpt2_place = {"TESSERA_GPT2_DIR", "gpt2", {"encoder.json", "vocab.bpe"}};
static const VocabPlace llama_place = {"TESSERA_LLAMA_DIR", "llama", {"vocab.txt", "merges.bin"}};

static int has_vocab(const char *dir, const VocabPlace *v) {
    char p[PATH_MAX + 32];
    struct stat st;
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, v->files[i]);
        if (stat(p, &st)) return 0;
    }
    return 1;
}

// Finds a vocabulary directory (see tokenizer.h) into dir.
static int find_vocab_dir(const VocabPlace *v, char *dir, size_t cap) {
    const char *env = getenv(v->env);
    if (env && *env) { snprintf(dir, cap, "%s", env); return 1; }
    char rel[2][64];
    snprintf(rel[0], sizeof rel[0], "data/%s", v->sub);
    snprintf(rel[1], sizeof rel[1], "../shared/data/%s", v->sub);
    for (int i = 0; i < 2; i++)
        if (has_vocab(rel[i], v)) { snprintf(dir, cap, "%s", rel[i]); return 1; }
    char exe[PATH_MAX / 2];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        for (int i = 0; i < 2; i++) {
            snprintf(dir, cap, "%s/%s", exe, rel[i]);
            if (has_vocab(dir, v)) return 1;
        }
    }
    return 0;
}

int tokenizer_open(Tokenizer *t, const char *name, Err *err) {
    memset(t, 0, sizeof *t);
    if (strcmp(name, "byte") == 0) {
        t->kind = TOK_BYTE;
        t->vocab = 256;
        t->eot = t->doc_sep = -1;
        snprintf(t->name, sizeof t->name, "byte");
        return 0;
    }
    if (strcmp(name, "gpt2") == 0) {
        char dir[PATH_MAX];
        if (!find_vocab_dir(&gpt2_place, dir, sizeof dir))
            return err_set(err, ERR_USAGE, "--tokenizer gpt2: encoder.json and vocab.bpe not found "
                                           "(set TESSERA_GPT2_DIR, or run scripts/deps.sh to fetch them into data/gpt2)");
        if (bpe_load(&t->bpe, dir, err)) return -1;
        t->state = bpe_state_new(t->bpe);
        if (!t->state) { tokenizer_close(t); return err_set(err, ERR_RUN, "out of memory"); }
        t->kind = TOK_GPT2;
        t->vocab = bpe_vocab(t->bpe);
        t->eot = t->doc_sep = bpe_eot(t->bpe);
        snprintf(t->name, sizeof t->name, "gpt2");
        return 0;
    }
    if (strcmp(name, "llama") == 0) {
        char dir[PATH_MAX];
        if (!find_vocab_dir(&llama_place, dir, sizeof dir))
            return err_set(err, ERR_USAGE, "--tokenizer llama: vocab.txt and merges.bin not found (set TESSERA_LLAMA_DIR, "
                                           "or run scripts/deps.sh to extract them from llama-tokenizer-js into data/llama)");
        if (spm_load(&t->spm, dir, err)) return -1;
        t->kind = TOK_LLAMA;
        t->vocab = spm_vocab(t->spm);
        t->eot = -1;   // every text is a sequence of its own, opened by <s>
        t->doc_sep = tokenizer_doc_sep_of("llama");
        snprintf(t->name, sizeof t->name, "llama");
        return 0;
    }
    return err_set(err, ERR_USAGE, "--tokenizer: unknown tokenizer '%s' (known: gpt2, llama, byte)", name);
}

void tokenizer_close(Tokenizer *t) {
    bpe_state_free(t->state);
    bpe_free(t->bpe);
    spm_free(t->spm);
    memset(t, 0, sizeof *t);
}

size_t tokenizer_encode_with(const Tokenizer *t, BpeState *st, const char *text, size_t len, int *ids, size_t cap) {
    if (t->kind == TOK_GPT2) return bpe_encode(st, text, len, ids, cap);
    if (t->kind == TOK_LLAMA) return spm_encode(t->spm, text, len, ids, cap);
    for (size_t i = 0; i < len && i < cap; i++) ids[i] = (unsigned char)text[i];
    return len;
}

size_t tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int *ids, size_t cap) {
    return tokenizer_encode_with(t, t->state, text, len, ids, cap);
}

int tokenizer_front_space(const Tokenizer *t) { return t->kind == TOK_LLAMA; }

size_t tokenizer_decode(const Tokenizer *t, int id, char *out, size_t cap) {
    if (t->kind == TOK_LLAMA) return spm_decode(t->spm, id, out, cap);
    if (t->kind == TOK_GPT2) {
        size_t n;
        const unsigned char *p = bpe_token(t->bpe, id, &n);
        if (!p || n > cap) return 0;
        memcpy(out, p, n);
        return n;
    }
    if (cap < 1 || id < 0 || id > 255) return 0;
    out[0] = (char)id;
    return 1;
}

int tokenizer_doc_sep_of(const char *name) {
    if (!strcmp(name, "gpt2")) return 50256;   // <|endoftext|>
    if (!strcmp(name, "llama")) return 1;      // <s>
    return -1;
}

int tokenizer_vocab_of(const char *name) {
    if (!strcmp(name, "gpt2")) return 50257;
    if (!strcmp(name, "byte")) return 256;
    if (!strcmp(name, "llama")) return 32000;
    return -1;
}
