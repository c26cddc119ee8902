#include "data/loader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

struct Loader {
    int *tokens;
    int64_t ntok, nsamples;
    int T;
    uint64_t seed;
    LoaderState st;
    uint32_t *order;       // permutation of the current epoch
    int64_t order_epoch;   // epoch `order` was drawn for
};

static void draw_order(Loader *l, int64_t epoch) {
    int64_t n = l->nsamples;
    for (int64_t i = 0; i < n; i++) l->order[i] = (uint32_t)i;
    uint64_t stream = rng_stream_of("loader.epoch") + (uint64_t)epoch;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(l->seed, stream, (uint64_t)i, (uint64_t)i + 1);
        uint32_t t = l->order[i];
        l->order[i] = l->order[j];
        l->order[j] = t;
    }
    l->order_epoch = epoch;
}

int loader_open_text(Loader **out, const char *path, const Tokenizer *tok, int T, uint64_t seed, Err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ERR_USAGE, "--data %s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            char *nt = realloc(text, cap);
            if (!nt) { free(text); fclose(f); return err_set(err, ERR_RUN, "--data %s: out of memory", path); }
            text = nt;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) { free(text); return err_set(err, ERR_USAGE, "--data %s: read error", path); }
    Loader *l = calloc(1, sizeof *l);
    int *ids = malloc((len + 1) * sizeof *ids);
    if (!l || !ids) { free(text); free(l); free(ids); return err_set(err, ERR_RUN, "--data %s: out of memory", path); }
    l->ntok = (int64_t)tokenizer_encode(tok, text, len, ids, len);
    free(text);
    l->tokens = ids;
    l->T = T;
    l->seed = seed;
    l->nsamples = l->ntok > 0 ? (l->ntok - 1) / T : 0;
    if (l->nsamples < 1 || l->nsamples > UINT32_MAX) {
        int64_t n = l->ntok;
        loader_free(l);
        return err_set(err, ERR_USAGE, "--data %s: %lld tokens is too short for one sequence of T=%d (+1 target)",
                       path, (long long)n, T);
    }
    l->order = malloc((size_t)l->nsamples * sizeof *l->order);
    if (!l->order) { loader_free(l); return err_set(err, ERR_RUN, "--data %s: out of memory", path); }
    draw_order(l, 0);
    *out = l;
    return 0;
}

void loader_free(Loader *l) {
    if (!l) return;
    free(l->tokens);
    free(l->order);
    free(l);
}

int64_t loader_tokens(const Loader *l) { return l->ntok; }
int64_t loader_samples(const Loader *l) { return l->nsamples; }

void loader_next(Loader *l, int *inputs, int *targets, int B) {
    int T = l->T;
    for (int b = 0; b < B; b++) {
        if (l->st.pos >= l->nsamples) { l->st.epoch++; l->st.pos = 0; }
        if (l->order_epoch != l->st.epoch) draw_order(l, l->st.epoch);
        const int *w = l->tokens + (int64_t)l->order[l->st.pos++] * T;
        memcpy(inputs + (size_t)b * T, w, (size_t)T * sizeof(int));
        memcpy(targets + (size_t)b * T, w + 1, (size_t)T * sizeof(int));
    }
}

LoaderState loader_state(const Loader *l) { return l->st; }

void loader_set_state(Loader *l, LoaderState s) {
    l->st = s;
    if (l->order_epoch != s.epoch) draw_order(l, s.epoch);
}
