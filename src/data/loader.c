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
} File;

typedef struct {         // one source: the files of one path, its own order
    char name[MIX_NAME_MAX];
    double w;                        // normalized weight
    int files;
    int64_t ntok, nsamples, first;   // first: global index of its sample 0
    uint32_t *perm[2];               // permutations of two consecutive epochs
    int64_t perm_epoch[2];
} Src;

struct Loader {
    LoaderOptions o;
    File *file;
    int nfile;
    Src src[MIX_MAX_SOURCES];
    double w[MIX_MAX_SOURCES];       // the sources' weights, for mix_pick
    int nsrc, mix;                   // mix: opened from a mixture spec
    int64_t ntok, nsamples;
    LoaderState st;                  // state after the last batch handed out
    // prefetch
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, stop, ready, want;  // want: a batch for `pending` is requested
    LoaderState pending;             // state the prefetched batch starts from
    int *buf_in, *buf_tg;
};

static int tok_at(const File *f, int64_t i) { return f->owned ? f->owned[i] : shard_token(&f->shard, i); }

// Source s's order of epoch e (source 0's stream is a plain loader's, as
// it always was).
static const uint32_t *perm_for(Loader *l, int s, int64_t epoch) {
    Src *c = &l->src[s];
    for (int k = 0; k < 2; k++)
        if (c->perm_epoch[k] == epoch) return c->perm[k];
    int k = c->perm_epoch[0] < c->perm_epoch[1] ? 0 : 1;   // replace the older
    uint32_t *p = c->perm[k];
    int64_t n = c->nsamples;
    for (int64_t i = 0; i < n; i++) p[i] = (uint32_t)i;
    uint64_t stream = rng_stream_of("loader.epoch") + (uint64_t)epoch + ((uint64_t)s << 40);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(l->o.seed, stream, (uint64_t)i, (uint64_t)i + 1);
        uint32_t t = p[i]; p[i] = p[j]; p[j] = t;
    }
    c->perm_epoch[k] = epoch;
    return p;
}

// Copies global sample g into in/tg (T each).
static void fetch(const Loader *l, int64_t g, int *in, int *tg) {
    int lo = 0, hi = l->nfile - 1;
    while (lo < hi) {   // last file with first <= g
        int mid = (lo + hi + 1) / 2;
        if (l->file[mid].first <= g) lo = mid; else hi = mid - 1;
    }
    const File *f = &l->file[lo];
    int64_t base = (g - f->first) * l->o.T;
    for (int t = 0; t < l->o.T; t++) {
        in[t] = tok_at(f, base + t);
        tg[t] = tok_at(f, base + t + 1);
    }
}

static int64_t served(const Loader *l, const LoaderState *st, int s) { return st->epoch[s] * l->src[s].nsamples + st->pos[s]; }

// The source of the next sequence after st.
static int pick(const Loader *l, const LoaderState *st) {
    if (l->nsrc == 1) return 0;
    int64_t c[MIX_MAX_SOURCES];
    for (int s = 0; s < l->nsrc; s++) c[s] = served(l, st, s);
    return mix_pick(l->w, c, l->nsrc);
}

// st past one sequence of source s.
static void step(const Loader *l, LoaderState *st, int s) {
    if (++st->pos[s] == l->src[s].nsamples) {
        st->pos[s] = 0;
        st->epoch[s]++;
    }
}

// This rank's part of the training batch that starts at state st.
static void fill_train(Loader *l, LoaderState st, int *in, int *tg) {
    int B = l->o.B, T = l->o.T;
    for (int64_t i = 0; i < (int64_t)l->o.rank * B; i++) step(l, &st, pick(l, &st));   // the lower ranks' sequences
    for (int b = 0; b < B; b++) {
        int s = pick(l, &st);
        int64_t g = l->src[s].first + perm_for(l, s, st.epoch[s])[st.pos[s]];
        fetch(l, g, in + (size_t)b * T, tg + (size_t)b * T);
        step(l, &st, s);
    }
}

static LoaderState advance(const Loader *l, LoaderState st) {
    if (l->nsrc == 1) {   // one source: the arithmetic of B·ranks steps
        st.pos[0] += (int64_t)l->o.B * l->o.ranks;
        st.epoch[0] += st.pos[0] / l->nsamples;
        st.pos[0] %= l->nsamples;
        return st;
    }
    for (int64_t i = 0; i < (int64_t)l->o.B * l->o.ranks; i++) step(l, &st, pick(l, &st));
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

static int add_file(Loader *l, File *f) {
    File *nf = realloc(l->file, (size_t)(l->nfile + 1) * sizeof *nf);
    if (!nf) return -1;
    l->file = nf;
    l->file[l->nfile++] = *f;
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
    File f = {0};
    f.owned = malloc((len + 2) * sizeof *f.owned);
    if (!f.owned) { free(text); return err_set(err, ERR_RUN, "%s: out of memory", path); }
    f.ntok = (int64_t)tokenizer_encode(tok, text, len, f.owned, len + 2);
    free(text);
    if (add_file(l, &f)) { free(f.owned); return err_set(err, ERR_RUN, "out of memory"); }
    return 0;
}

static int open_shard(Loader *l, const char *path, int vocab, Err *err) {
    File f = {0};
    if (shard_open(&f.shard, path, vocab, err)) return -1;
    f.ntok = f.shard.ntok;
    if (add_file(l, &f)) { shard_close(&f.shard); return err_set(err, ERR_RUN, "out of memory"); }
    return 0;
}

// The files of path, appended.
static int open_path(Loader *l, const char *path, const Tokenizer *tok, Err *err) {
    const LoaderOptions *o = &l->o;
    char pattern[4200];
    int globbed = 0;
    if (is_dir(path)) {
        snprintf(pattern, sizeof pattern, "%s/%s_*.bin", path, o->split == SPLIT_VAL ? "val" : "train");
        globbed = 1;
    } else if (strpbrk(path, "*?[")) {
        snprintf(pattern, sizeof pattern, "%s", path);
        globbed = 1;
    }
    if (!globbed) return ends_with(path, ".bin") ? open_shard(l, path, tok->vocab, err) : open_text(l, path, tok, err);
    glob_t g;
    int gr = glob(pattern, 0, NULL, &g), rc = 0;
    if (gr != 0 || g.gl_pathc == 0) {
        if (gr == 0) globfree(&g);
        return err_set(err, ERR_USAGE, "%s: no %s shards (%s)", path, o->split == SPLIT_VAL ? "validation" : "training",
                       pattern);
    }
    for (size_t i = 0; i < g.gl_pathc && !rc; i++) rc = open_shard(l, g.gl_pathv[i], tok->vocab, err);
    globfree(&g);
    return rc;
}

// Source s: the files of path, cut into windows.
static int open_source(Loader *l, int s, const MixSource *ms, const Tokenizer *tok, Err *err) {
    Src *c = &l->src[s];
    int f0 = l->nfile;
    if (open_path(l, ms->path, tok, err)) return -1;
    snprintf(c->name, sizeof c->name, "%s", ms->name);
    c->w = l->w[s] = ms->weight;
    c->files = l->nfile - f0;
    c->first = l->nsamples;
    c->perm_epoch[0] = c->perm_epoch[1] = -1;
    for (int i = f0; i < l->nfile; i++) {
        File *f = &l->file[i];
        f->nsamples = f->ntok > 0 ? (f->ntok - 1) / l->o.T : 0;
        f->first = l->nsamples;
        l->nsamples += f->nsamples;
        c->nsamples += f->nsamples;
        c->ntok += f->ntok;
    }
    l->ntok += c->ntok;
    if (c->nsamples < 1 || c->nsamples > UINT32_MAX)
        return err_set(err, ERR_USAGE, "%s: %lld tokens is too short for one sequence of T=%d (+1 target)", ms->path,
                       (long long)c->ntok, l->o.T);
    if (l->o.split == SPLIT_TRAIN) {
        c->perm[0] = malloc((size_t)c->nsamples * sizeof(uint32_t));
        c->perm[1] = malloc((size_t)c->nsamples * sizeof(uint32_t));
        if (!c->perm[0] || !c->perm[1]) return err_set(err, ERR_RUN, "%s: out of memory", ms->path);
    }
    return 0;
}

static int start_prefetch(Loader *l, Err *err) {
    const LoaderOptions *o = &l->o;
    l->buf_in = malloc((size_t)o->B * o->T * sizeof(int));
    l->buf_tg = malloc((size_t)o->B * o->T * sizeof(int));
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (!l->buf_in || !l->buf_tg || pthread_create(&l->thread, NULL, prefetch_main, l)) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        return err_set(err, ERR_RUN, "cannot start the data loader thread");
    }
    l->running = 1;
    pthread_mutex_lock(&l->mu);
    request(l);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int loader_open_mix(Loader **out, const Mixture *m, const Tokenizer *tok, const LoaderOptions *o, Err *err) {
    *out = NULL;
    CHECK(m->n >= 1 && m->n <= MIX_MAX_SOURCES);
    if (!m->plain && mix_check_tokenizer(m, tok->name, err)) return -1;
    Loader *l = calloc(1, sizeof *l);
    if (!l) return err_set(err, ERR_RUN, "out of memory");
    l->o = *o;
    l->nsrc = m->n;
    l->mix = !m->plain;
    for (int s = 0; s < m->n; s++)
        if (open_source(l, s, &m->src[s], tok, err)) {
            if (l->mix) err_prefix(err, m->src[s].name);
            loader_free(l);
            return -1;
        }
    if (o->split == SPLIT_TRAIN && o->prefetch && start_prefetch(l, err)) {
        loader_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

int loader_open(Loader **out, const char *path, const Tokenizer *tok, const LoaderOptions *o, Err *err) {
    Mixture m = {.n = 1, .plain = 1, .src = {{.path = (char *)path, .weight = 1}}};
    return loader_open_mix(out, &m, tok, o, err);
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
    for (int i = 0; i < l->nfile; i++) {
        if (l->file[i].owned) free(l->file[i].owned);
        else shard_close(&l->file[i].shard);
    }
    for (int s = 0; s < l->nsrc; s++) {
        free(l->src[s].perm[0]);
        free(l->src[s].perm[1]);
    }
    free(l->file);
    free(l->buf_in);
    free(l->buf_tg);
    free(l);
}

int64_t loader_tokens(const Loader *l) { return l->ntok; }
int64_t loader_samples(const Loader *l) { return l->nsamples; }
int loader_files(const Loader *l) { return l->nfile; }
int loader_nsources(const Loader *l) { return l->nsrc; }
int loader_is_mixture(const Loader *l) { return l->mix; }

LoaderSource loader_source(const Loader *l, int s) {
    const Src *c = &l->src[s];
    return (LoaderSource){.name = c->name, .weight = c->w, .files = c->files, .tokens = c->ntok,
                          .samples = c->nsamples, .served = served(l, &l->st, s)};
}

int loader_next(Loader *l, int *inputs, int *targets) {
    int B = l->o.B, T = l->o.T;
    if (l->o.split == SPLIT_VAL) {   // this rank's B of the next B·ranks samples in order
        int64_t first = l->st.pos[0] + (int64_t)l->o.rank * B;
        int n = 0;
        for (; n < B && first + n < l->nsamples; n++) fetch(l, first + n, inputs + (size_t)n * T, targets + (size_t)n * T);
        l->st.pos[0] += (int64_t)B * l->o.ranks;
        if (l->st.pos[0] > l->nsamples) l->st.pos[0] = l->nsamples;
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

void loader_rewind(Loader *l) { memset(&l->st, 0, sizeof l->st); }
int loader_done(const Loader *l) { return l->st.pos[0] >= l->nsamples; }

char *loader_state_json(const Loader *l) {
    const LoaderState *st = &l->st;
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    if (!l->mix) {
        jb_key(&b, "epoch"); jb_int(&b, st->epoch[0]);
        jb_key(&b, "pos"); jb_int(&b, st->pos[0]);
    } else {
        int64_t count = 0;
        for (int s = 0; s < l->nsrc; s++) count += served(l, st, s);
        jb_key(&b, "count"); jb_int(&b, count);
        jb_key(&b, "sources"); jb_arr_begin(&b);
        for (int s = 0; s < l->nsrc; s++) {
            jb_obj_begin(&b);
            jb_key(&b, "name"); jb_str(&b, l->src[s].name);
            jb_key(&b, "weight"); jb_num(&b, l->src[s].w);
            jb_key(&b, "epoch"); jb_int(&b, st->epoch[s]);
            jb_key(&b, "pos"); jb_int(&b, st->pos[s]);
            jb_obj_end(&b);
        }
        jb_arr_end(&b);
    }
    jb_obj_end(&b);
    return b.s;
}

// "name weight, ..." of a checkpoint's sources (j: its array) into buf.
static void saved_mix(const Json *j, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (const Json *e = j ? j->child : NULL; e && k < cap; e = e->next) {
        const Json *n = json_get(e, "name"), *w = json_get(e, "weight");
        k += (size_t)snprintf(buf + k, cap - k, "%s%s %.4g", k ? ", " : "", n && n->type == JSON_STR ? n->text : "?",
                              w && w->type == JSON_NUM ? w->num : 0.0);
    }
}

int loader_state_read(Loader *l, const Json *j, const char *where, Err *err) {
    const Json *srcs = json_get(j, "sources");
    LoaderState st;
    memset(&st, 0, sizeof st);
    char mine[600], theirs[600];
    Mixture m = {.n = l->nsrc};
    for (int s = 0; s < l->nsrc; s++) {
        snprintf(m.src[s].name, sizeof m.src[s].name, "%s", l->src[s].name);
        m.src[s].weight = l->src[s].w;
    }
    mix_describe(&m, mine, sizeof mine);
    saved_mix(srcs, theirs, sizeof theirs);
    if (!l->mix && srcs)
        return err_set(err, ERR_USAGE, "%s: the run read the mixture %s; give --data that mixture to continue it", where,
                       theirs);
    if (l->mix && !srcs)
        return err_set(err, ERR_USAGE, "%s: the run read one plain --data path, not a mixture: a mixture (%s) cannot "
                       "continue its order", where, mine);
    if (!l->mix) {
        int64_t e = 0, p = 0;
        if (json_int64(json_get(j, "epoch"), &e) || json_int64(json_get(j, "pos"), &p) || e < 0 || p < 0 ||
            e > INT32_MAX || p > l->nsamples)
            return err_set(err, ERR_USAGE, "%s: field 'train.loader' is missing or out of range (epoch %lld, position "
                           "%lld of %lld samples)", where, (long long)e, (long long)p, (long long)l->nsamples);
        st.epoch[0] = e;
        st.pos[0] = p % l->nsamples;
        loader_set_state(l, st);
        return 0;
    }
    int same = srcs->type == JSON_ARR && (int)srcs->len == l->nsrc;
    for (int s = 0; same && s < l->nsrc; s++) {
        const Json *e = json_at(srcs, (size_t)s), *n = json_get(e, "name"), *w = json_get(e, "weight");
        same = n && n->type == JSON_STR && !strcmp(n->text, l->src[s].name) && w && w->type == JSON_NUM &&
               w->num == l->src[s].w;
    }
    if (!same)
        return err_set(err, ERR_USAGE, "%s: the run read the mixture %s, and --data gives %s: another mixture would not "
                       "continue its order (start a new run, e.g. with --init-from)", where, theirs, mine);
    int64_t count = -1, sum = 0;
    for (int s = 0; s < l->nsrc; s++) {
        const Json *e = json_at(srcs, (size_t)s);
        int64_t ep = -1, p = -1;
        // (each count, and their sum, within int64)
        if (json_int64(json_get(e, "epoch"), &ep) || json_int64(json_get(e, "pos"), &p) || ep < 0 || ep > INT32_MAX ||
            ep >= INT64_MAX / MIX_MAX_SOURCES / l->src[s].nsamples || p < 0 || p >= l->src[s].nsamples)
            return err_set(err, ERR_USAGE, "%s: source %s's place in 'train.loader' is missing or out of range (epoch %lld, "
                           "position %lld of its %lld samples)", where, l->src[s].name, (long long)ep, (long long)p,
                           (long long)l->src[s].nsamples);
        st.epoch[s] = ep;
        st.pos[s] = p;
        sum += served(l, &st, s);
    }
    if (json_int64(json_get(j, "count"), &count) || count != sum)
        return err_set(err, ERR_USAGE, "%s: 'train.loader.count' (%lld) is not the sources' sequences (%lld): the sources "
                       "hold other data than the run read", where, (long long)count, (long long)sum);
    loader_set_state(l, st);
    return 0;
}
