#include "data/loader.h"

#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/rng.h"
#include "data/shard.h"

typedef struct {
    Shard shard;         // mapped shard, or
    int *owned;          // tokens of a text file
    int64_t ntok, nsamples, first;   // first: global index of its sample 0
} Source;

struct Loader {
    LoaderOptions o;
    Source *src;
    int nsrc;
    int64_t ntok, nsamples;
    LoaderState st;                  // state after the last batch handed out
    uint32_t *perm[2];               // permutations of two consecutive epochs
    int64_t perm_epoch[2];
    // prefetch
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, stop, ready, want;  // want: a batch for `pending` is requested
    LoaderState pending;             // state the prefetched batch starts from
    int *buf_in, *buf_tg;
};

static int tok_at(const Source *s, int64_t i) { return s->owned ? s->owned[i] : shard_token(&s->shard, i); }

static const uint32_t *perm_for(Loader *l, int64_t epoch) {
    for (int k = 0; k < 2; k++)
        if (l->perm_epoch[k] == epoch) return l->perm[k];
    int k = l->perm_epoch[0] < l->perm_epoch[1] ? 0 : 1;   // replace the older
    uint32_t *p = l->perm[k];
    int64_t n = l->nsamples;
    for (int64_t i = 0; i < n; i++) p[i] = (uint32_t)i;
    uint64_t stream = rng_stream_of("loader.epoch") + (uint64_t)epoch;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(l->o.seed, stream, (uint64_t)i, (uint64_t)i + 1);
        uint32_t t = p[i]; p[i] = p[j]; p[j] = t;
    }
    l->perm_epoch[k] = epoch;
    return p;
}

// Copies global sample g into in/tg (T each).
static void fetch(const Loader *l, int64_t g, int *in, int *tg) {
    int lo = 0, hi = l->nsrc - 1;
    while (lo < hi) {   // last source with first <= g
        int mid = (lo + hi + 1) / 2;
        if (l->src[mid].first <= g) lo = mid; else hi = mid - 1;
    }
    const Source *s = &l->src[lo];
    int64_t base = (g - s->first) * l->o.T;
    for (int t = 0; t < l->o.T; t++) {
        in[t] = tok_at(s, base + t);
        tg[t] = tok_at(s, base + t + 1);
    }
}

// This rank's part of the training batch that starts at state st.
static void fill_train(Loader *l, LoaderState st, int *in, int *tg) {
    int B = l->o.B, T = l->o.T;
    for (int b = 0; b < B; b++) {
        int64_t k = st.pos + (int64_t)l->o.rank * B + b, e = st.epoch;
        e += k / l->nsamples;
        k %= l->nsamples;
        fetch(l, perm_for(l, e)[k], in + (size_t)b * T, tg + (size_t)b * T);
    }
}

static LoaderState advance(const Loader *l, LoaderState st) {
    st.pos += (int64_t)l->o.B * l->o.ranks;
    st.epoch += st.pos / l->nsamples;
    st.pos %= l->nsamples;
    return st;
}

static void *prefetch_main(void *arg) {
    Loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->want && !l->stop) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        LoaderState st = l->pending;
        l->want = 0;
        pthread_mutex_unlock(&l->mu);
        fill_train(l, st, l->buf_in, l->buf_tg);
        pthread_mutex_lock(&l->mu);
        l->ready = 1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

// Asks the thread for the batch at l->st (mutex held by the caller or not running).
static void request(Loader *l) {
    l->pending = l->st;
    l->ready = 0;
    l->want = 1;
    pthread_cond_broadcast(&l->cv);
}

static int add_source(Loader *l, Source *s) {
    Source *ns = realloc(l->src, (size_t)(l->nsrc + 1) * sizeof *ns);
    if (!ns) return -1;
    l->src = ns;
    l->src[l->nsrc++] = *s;
    return 0;
}

static int is_dir(const char *p) { struct stat st; return stat(p, &st) == 0 && S_ISDIR(st.st_mode); }

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int open_text(Loader *l, const char *path, const Tokenizer *tok, Err *err) {
    char *text;
    size_t len;
    if (file_read(path, &text, &len, 0, err)) return -1;
    Source s = {0};
    s.owned = malloc((len + 2) * sizeof *s.owned);
    if (!s.owned) { free(text); return err_set(err, ERR_RUN, "%s: out of memory", path); }
    s.ntok = (int64_t)tokenizer_encode(tok, text, len, s.owned, len + 2);
    free(text);
    if (add_source(l, &s)) { free(s.owned); return err_set(err, ERR_RUN, "out of memory"); }
    return 0;
}

static int open_shard(Loader *l, const char *path, int vocab, Err *err) {
    Source s = {0};
    if (shard_open(&s.shard, path, vocab, err)) return -1;
    s.ntok = s.shard.ntok;
    if (add_source(l, &s)) { shard_close(&s.shard); return err_set(err, ERR_RUN, "out of memory"); }
    return 0;
}

int loader_open(Loader **out, const char *path, const Tokenizer *tok, const LoaderOptions *o, Err *err) {
    *out = NULL;
    Loader *l = calloc(1, sizeof *l);
    if (!l) return err_set(err, ERR_RUN, "out of memory");
    l->o = *o;
    l->perm_epoch[0] = l->perm_epoch[1] = -1;
    char pattern[4200];
    int globbed = 0;
    if (is_dir(path)) {
        snprintf(pattern, sizeof pattern, "%s/%s_*.bin", path, o->split == SPLIT_VAL ? "val" : "train");
        globbed = 1;
    } else if (strpbrk(path, "*?[")) {
        snprintf(pattern, sizeof pattern, "%s", path);
        globbed = 1;
    }
    int rc = 0;
    if (globbed) {
        glob_t g;
        int gr = glob(pattern, 0, NULL, &g);
        if (gr != 0 || g.gl_pathc == 0) {
            if (gr == 0) globfree(&g);
            err_set(err, ERR_USAGE, "%s: no %s shards (%s)", path, o->split == SPLIT_VAL ? "validation" : "training",
                    pattern);
            loader_free(l);
            return -1;
        }
        for (size_t i = 0; i < g.gl_pathc && !rc; i++) rc = open_shard(l, g.gl_pathv[i], tok->vocab, err);
        globfree(&g);
    } else if (ends_with(path, ".bin")) {
        rc = open_shard(l, path, tok->vocab, err);
    } else {
        rc = open_text(l, path, tok, err);
    }
    if (rc) { loader_free(l); return -1; }
    for (int i = 0; i < l->nsrc; i++) {
        Source *s = &l->src[i];
        s->nsamples = s->ntok > 0 ? (s->ntok - 1) / o->T : 0;
        s->first = l->nsamples;
        l->nsamples += s->nsamples;
        l->ntok += s->ntok;
    }
    if (l->nsamples < 1 || l->nsamples > UINT32_MAX) {
        err_set(err, ERR_USAGE, "%s: %lld tokens is too short for one sequence of T=%d (+1 target)", path,
                (long long)l->ntok, o->T);
        loader_free(l);
        return -1;
    }
    if (o->split == SPLIT_TRAIN) {
        l->perm[0] = malloc((size_t)l->nsamples * sizeof(uint32_t));
        l->perm[1] = malloc((size_t)l->nsamples * sizeof(uint32_t));
        if (!l->perm[0] || !l->perm[1]) { loader_free(l); return err_set(err, ERR_RUN, "%s: out of memory", path); }
        if (o->prefetch) {
            l->buf_in = malloc((size_t)o->B * o->T * sizeof(int));
            l->buf_tg = malloc((size_t)o->B * o->T * sizeof(int));
            pthread_mutex_init(&l->mu, NULL);
            pthread_cond_init(&l->cv, NULL);
            if (!l->buf_in || !l->buf_tg || pthread_create(&l->thread, NULL, prefetch_main, l)) {
                loader_free(l);
                return err_set(err, ERR_RUN, "cannot start the data loader thread");
            }
            l->running = 1;
            pthread_mutex_lock(&l->mu);
            request(l);
            pthread_mutex_unlock(&l->mu);
        }
    }
    *out = l;
    return 0;
}

void loader_free(Loader *l) {
    if (!l) return;
    if (l->running) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
    }
    for (int i = 0; i < l->nsrc; i++) {
        if (l->src[i].owned) free(l->src[i].owned);
        else shard_close(&l->src[i].shard);
    }
    free(l->src);
    free(l->perm[0]);
    free(l->perm[1]);
    free(l->buf_in);
    free(l->buf_tg);
    free(l);
}

int64_t loader_tokens(const Loader *l) { return l->ntok; }
int64_t loader_samples(const Loader *l) { return l->nsamples; }
int loader_sources(const Loader *l) { return l->nsrc; }

int loader_next(Loader *l, int *inputs, int *targets) {
    int B = l->o.B, T = l->o.T;
    if (l->o.split == SPLIT_VAL) {   // this rank's B of the next B·ranks samples in order
        int64_t first = l->st.pos + (int64_t)l->o.rank * B;
        int n = 0;
        for (; n < B && first + n < l->nsamples; n++) fetch(l, first + n, inputs + (size_t)n * T, targets + (size_t)n * T);
        l->st.pos += (int64_t)B * l->o.ranks;
        if (l->st.pos > l->nsamples) l->st.pos = l->nsamples;
        return n;
    }
    if (!l->running) {
        fill_train(l, l->st, inputs, targets);
    } else {
        pthread_mutex_lock(&l->mu);
        while (!l->ready) pthread_cond_wait(&l->cv, &l->mu);
        memcpy(inputs, l->buf_in, (size_t)B * T * sizeof(int));
        memcpy(targets, l->buf_tg, (size_t)B * T * sizeof(int));
        l->st = advance(l, l->st);
        request(l);
        pthread_mutex_unlock(&l->mu);
        return B;
    }
    l->st = advance(l, l->st);
    return B;
}

LoaderState loader_state(const Loader *l) { return l->st; }

void loader_set_state(Loader *l, LoaderState s) {
    if (!l->running) { l->st = s; return; }
    pthread_mutex_lock(&l->mu);
    while (!l->ready) pthread_cond_wait(&l->cv, &l->mu);   // let the current fill finish
    l->st = s;
    request(l);
    pthread_mutex_unlock(&l->mu);
}

void loader_rewind(Loader *l) { l->st = (LoaderState){0, 0}; }
