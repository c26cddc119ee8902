// tessera prepare — tokenizes text files into llm.c-compatible shards.
//
// A text file is a document; a JSONL file (.jsonl, .ndjson) holds one
// document per line, its text in --text-field; either may be gzip- or
// zstd-compressed (data/docs streams them). Each document starts with the
// end-of-text token (gpt2). The first --val-fraction of the input bytes
// become the validation shard(s), the rest the training shards, each at
// most --shard-tokens long: OUT/val_000000.bin, OUT/train_000000.bin, ...
// Text is cut into pieces of about 1 MiB at points where the GPT-2 pattern
// is known to split (after a newline between two printable characters), and
// the pieces are encoded on all threads; the output does not depend on the
// thread count.
#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "core/fileio.h"
#include "core/timer.h"
#include "data/docs.h"
#include "data/shard.h"
#include "data/tokenizer.h"

enum { PIECE_BYTES = 1 << 20 };

typedef struct {
    char **v;
    int n, cap;
} Paths;

static int paths_add(Paths *p, const char *s) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        char **nv = realloc(p->v, (size_t)p->cap * sizeof *nv);
        if (!nv) return -1;
        p->v = nv;
    }
    p->v[p->n] = strdup(s);
    return p->v[p->n++] ? 0 : -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Adds a file, or every regular file under a directory (sorted, recursive,
// hidden names skipped).
static int collect(Paths *out, const char *path, Err *err) {
    struct stat st;
    if (stat(path, &st)) return err_set(err, ERR_USAGE, "--input %s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) return paths_add(out, path) ? err_set(err, ERR_RUN, "out of memory") : 0;
    if (!S_ISDIR(st.st_mode)) return err_set(err, ERR_USAGE, "--input %s: not a file or directory", path);
    DIR *d = opendir(path);
    if (!d) return err_set(err, ERR_USAGE, "--input %s: %s", path, strerror(errno));
    Paths here = {0};
    struct dirent *e;
    char full[4200];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(full, sizeof full, "%s/%s", path, e->d_name);
            paths_add(&here, full);
        }
    closedir(d);
    qsort(here.v, (size_t)here.n, sizeof *here.v, cmp_str);
    int rc = 0;
    for (int i = 0; i < here.n && !rc; i++) rc = collect(out, here.v[i], err);
    for (int i = 0; i < here.n; i++) free(here.v[i]);
    free(here.v);
    return rc;
}

typedef struct {
    const char *out_dir;
    int vocab;
    int64_t shard_tokens;
    int *buf[2];            // pending tokens of the val (0) and train (1) streams
    int64_t len[2], cap[2];
    int nshards[2];
    int64_t written[2];
} Writer;

static int flush_shard(Writer *w, int which, Err *err) {
    if (w->len[which] == 0) return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s_%06d.bin", w->out_dir, which ? "train" : "val", w->nshards[which]);
    if (shard_write(path, w->buf[which], w->len[which], w->vocab, err)) return -1;
    w->nshards[which]++;
    w->written[which] += w->len[which];
    w->len[which] = 0;
    return 0;
}

static int emit(Writer *w, int which, const int *ids, int64_t n, Err *err) {
    while (n > 0) {
        int64_t room = w->shard_tokens - w->len[which], m = n < room ? n : room;
        if (w->len[which] + m > w->cap[which]) {
            int64_t cap = w->cap[which] ? w->cap[which] : 1 << 20;
            while (cap < w->len[which] + m) cap *= 2;
            int *nb = realloc(w->buf[which], (size_t)cap * sizeof *nb);
            if (!nb) return err_set(err, ERR_RUN, "out of memory");
            w->buf[which] = nb;
            w->cap[which] = cap;
        }
        memcpy(w->buf[which] + w->len[which], ids, (size_t)m * sizeof *ids);
        w->len[which] += m;
        ids += m;
        n -= m;
        if (w->len[which] == w->shard_tokens && flush_shard(w, which, err)) return -1;
    }
    return 0;
}


// A file read as a stream of pieces (data/docs): JSONL documents, or a
// compressed text. The pieces are batched, encoded on every thread and
// emitted in order, so the output does not depend on the thread count. A
// piece goes to validation while it starts within the first val_bytes of
// the input (decompressed bytes); a text is cut there as a plain one is, a
// JSONL document is not.
static int prepare_stream(Writer *w, Docs *d, const Tokenizer *tok, BpeState **states, int64_t done_before,
                          int64_t val_bytes, Err *err) {
    enum { BATCH_PIECES = 64, BATCH_BYTES = 64 << 20 };
    typedef struct {
        char *text;
        size_t n;
        int start, which;
        int *ids;
        int64_t nids;
    } Piece;
    Piece *b = calloc(BATCH_PIECES, sizeof *b);
    if (!b) return err_set(err, ERR_RUN, "out of memory");
    int rc = 0, more = 1;
    while (!rc && more) {
        int np = 0;
        size_t bytes = 0;
        while (np < BATCH_PIECES && bytes < BATCH_BYTES) {
            int64_t at = done_before + docs_consumed(d);
            docs_cut_at(d, val_bytes - done_before);
            const char *t;
            size_t n;
            int start, r = docs_next(d, &t, &n, &start, err);
            if (r <= 0) { rc = r < 0 ? -1 : 0; more = 0; break; }
            char *copy = malloc(n + 1);
            if (!copy) { rc = err_set(err, ERR_RUN, "out of memory"); more = 0; break; }
            memcpy(copy, t, n);
            b[np++] = (Piece){.text = copy, .n = n, .start = start, .which = at < val_bytes ? 0 : 1};
            bytes += n;
        }
        int oom = 0;
        #pragma omp parallel for schedule(dynamic, 1) reduction(| : oom)
        for (int k = 0; k < np; k++) {
            b[k].ids = malloc((b[k].n + 2) * sizeof *b[k].ids);
            if (!b[k].ids) { oom = 1; continue; }
            b[k].nids = (int64_t)tokenizer_encode_with(tok, states[omp_get_thread_num()], b[k].text, b[k].n, b[k].ids,
                                                       b[k].n + 2);
        }
        if (!rc && oom) rc = err_set(err, ERR_RUN, "out of memory");
        for (int k = 0; k < np; k++) {
            if (!rc && b[k].start && tok->eot >= 0) rc = emit(w, b[k].which, &tok->eot, 1, err);
            if (!rc) rc = emit(w, b[k].which, b[k].ids, b[k].nids, err);
            free(b[k].text);
            free(b[k].ids);
        }
    }
    free(b);
    return rc;
}

int cmd_prepare(int argc, char **argv) {
    const char *out = NULL, *name = "gpt2";
    double val_fraction = 0.1;
    int64_t shard_tokens = 100000000;
    uint64_t shard_u = (uint64_t)shard_tokens;
    int threads = 0, strict = 0;
    const char *text_field = "text", *format = "auto";
    Flag f[] = {
        {"input", FLAG_STR, NULL, 0, 0, "PATH...", "text files or directories (every file in them, recursively) (required)", 0, NULL},   // parsed above, listed for --help
        {"out", FLAG_STR, &out, 0, 0, "DIR", "output directory for val_*.bin and train_*.bin (required)", 0, NULL},
        {"tokenizer", FLAG_STR, &name, 0, 0, "gpt2|llama|byte", "gpt2 (default), llama or byte", 0, NULL},
        {"val-fraction", FLAG_FLOAT, &val_fraction, 0, 0.9, "F", "fraction of the input bytes for validation, taken first (default 0.1)", 0, NULL},
        {"shard-tokens", FLAG_U64, &shard_u, 1024, 2147483647.0, "N", "tokens per shard at most (default 100000000)", 0, NULL},
        {"threads", FLAG_INT, &threads, 1, 1024, "N", "threads (default: all cores)", 0, NULL},
        {"format", FLAG_STR, &format, 0, 0, "auto|text|jsonl", "auto (default): JSONL for names ending .jsonl or .ndjson (before .gz/.zst), else text", 0, NULL},
        {"text-field", FLAG_STR, &text_field, 0, 0, "NAME", "JSONL: the string member holding each document (default text)", 0, NULL},
        {"strict", FLAG_BOOL, &strict, 0, 0, "", "JSONL: refuse a malformed line or one without the text field (default: skip it, count it)", 0, NULL},
    };
    int nf = (int)(sizeof f / sizeof f[0]), help;
    // --input takes every following argument up to the next flag.
    Paths inputs = {0};
    char **rest = malloc((size_t)(argc + 1) * sizeof *rest);
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--input")) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) paths_add(&inputs, argv[++i]);
        } else if (!strncmp(argv[i], "--input=", 8)) {
            paths_add(&inputs, argv[i] + 8);
        } else {
            rest[nrest++] = argv[i];
        }
    }
    Json *unused = NULL;
    Err e = {0};
    int rc = 2;
    Paths files = {0};
    Tokenizer tok;
    memset(&tok, 0, sizeof tok);
    Writer w = {0};
    int64_t *sizes = NULL;   // each input file's bytes, decompressed
    if (flags_parse(f + 1, nf - 1, nrest, rest, "prepare", &help, &unused, &e)) goto fail;
    if (help) {
        printf("usage: tessera prepare --input PATH... --out DIR [flags]\n\n"
               "Tokenizes text into llm.c-compatible token shards (uint16; uint32 for vocabularies over 65535).\n"
               "A text file is one document; a JSONL file (.jsonl, .ndjson) one document per line, its text in\n"
               "--text-field. Files may be gzip- or zstd-compressed (read as streams). Each document is preceded\n"
               "by the end-of-text token (gpt2). The output does not depend on --threads.\n\n");
        flags_print(f, nf);
        rc = 0;
        goto done;
    }
    shard_tokens = (int64_t)shard_u;
    if (!inputs.n) { err_set(&e, ERR_USAGE, "--input PATH... is required"); goto fail; }
    if (!out) { err_set(&e, ERR_USAGE, "--out DIR is required"); goto fail; }
    for (int i = 0; i < inputs.n; i++)
        if (collect(&files, inputs.v[i], &e)) goto fail;
    if (!files.n) { err_set(&e, ERR_USAGE, "--input: no files found"); goto fail; }
    DocsFormat fmt = !strcmp(format, "auto") ? DOCS_AUTO : !strcmp(format, "text") ? DOCS_TEXT
                     : !strcmp(format, "jsonl") ? DOCS_JSONL : (DocsFormat)-1;
    if ((int)fmt < 0) { err_set(&e, ERR_USAGE, "--format: '%s' is not auto, text or jsonl", format); goto fail; }
    if (!text_field[0]) { err_set(&e, ERR_USAGE, "--text-field: empty"); goto fail; }
    if (mkdir(out, 0755) && errno != EEXIST) { err_set(&e, ERR_USAGE, "--out %s: %s", out, strerror(errno)); goto fail; }
    if (tokenizer_open(&tok, name, &e)) goto fail;
    if (threads) omp_set_num_threads(threads);
    int nth = omp_get_max_threads();
    BpeState **states = calloc((size_t)nth, sizeof *states);
    for (int t = 0; tok.kind == TOK_GPT2 && t < nth; t++) states[t] = bpe_state_new(tok.bpe);
    w = (Writer){.out_dir = out, .vocab = tok.vocab, .shard_tokens = shard_tokens};

    // the input's bytes, decompressed: what --val-fraction is a fraction of
    int64_t total_bytes = 0, done_bytes = 0;
    sizes = calloc((size_t)files.n, sizeof *sizes);
    if (!sizes) { err_set(&e, ERR_RUN, "out of memory"); goto fail_states; }
    for (int i = 0; i < files.n; i++) {
        if (docs_measure(files.v[i], &sizes[i], &e)) { err_prefix(&e, "--input"); goto fail_states; }
        total_bytes += sizes[i];
    }
    int64_t val_bytes = (int64_t)(val_fraction * (double)total_bytes);
    int tty = isatty(STDOUT_FILENO);
    double t0 = timer_now();
    printf("prepare: %d file%s, %.1f MB, %s tokenizer, %d threads -> %s\n", files.n, files.n == 1 ? "" : "s",
           total_bytes / 1e6, name, nth, out);
    int64_t skipped = 0, first_bad = 0;
    const char *bad_file = NULL;
    for (int fi2 = 0; fi2 < files.n; fi2++) {
        // JSONL and compressed files stream through data/docs; a plain text
        // file is read whole and cut below
        Docs *d;
        DocsOptions dopt = {.format = fmt, .text_field = text_field, .piece = tok.kind == TOK_LLAMA ? 0 : PIECE_BYTES,
                            .strict = strict};
        if (docs_open(&d, files.v[fi2], &dopt, &e)) { err_prefix(&e, "--input"); goto fail_states; }
        if (docs_is_jsonl(d) || strcmp(docs_compression(d), "none")) {
            int src = prepare_stream(&w, d, &tok, states, done_bytes, val_bytes, &e);
            int64_t first, n = docs_skipped(d, &first);
            if (n && !skipped) { first_bad = first; bad_file = files.v[fi2]; }
            skipped += n;
            docs_close(d);
            if (src) { err_prefix(&e, "--input"); goto fail_states; }
            done_bytes += sizes[fi2];
            continue;
        }
        docs_close(d);
        size_t len;
        char *text;
        if (file_read(files.v[fi2], &text, &len, 0, &e)) { err_prefix(&e, "--input"); goto fail_states; }
        if (tok.eot >= 0 && emit(&w, done_bytes < val_bytes ? 0 : 1, &tok.eot, 1, &e)) { free(text); goto fail_states; }
        // Pieces: cut at safe points, and at the val/train boundary.
        size_t np = 0, capp = 16;
        size_t *cut = malloc((capp + 1) * sizeof *cut);
        cut[0] = 0;
        while (cut[np] < len) {
            // LLaMA's tokenizer has no safe cut points: a file (or its val and
            // train parts) is one sequence
            size_t start = cut[np], target = tok.kind == TOK_LLAMA ? len : start + PIECE_BYTES;
            int64_t vb = val_bytes - done_bytes;
            if (vb > (int64_t)start && (size_t)vb < target) target = (size_t)vb;
            size_t p = target >= len ? len : bpe_split_point((const unsigned char *)text, target, len);
            if (np + 1 == capp) { capp *= 2; cut = realloc(cut, (capp + 1) * sizeof *cut); }
            cut[++np] = p;
        }
        int **ids = calloc(np + 1, sizeof *ids);
        int64_t *nids = calloc(np + 1, sizeof *nids);
        #pragma omp parallel for schedule(dynamic, 1)
        for (size_t k = 0; k < np; k++) {
            size_t n = cut[k + 1] - cut[k];
            ids[k] = malloc((n + 2) * sizeof **ids);
            nids[k] = (int64_t)tokenizer_encode_with(&tok, states[omp_get_thread_num()], text + cut[k], n, ids[k], n + 2);
        }
        int bad = 0;
        for (size_t k = 0; k < np; k++) {
            int which = done_bytes + (int64_t)cut[k] < val_bytes ? 0 : 1;
            if (!bad && emit(&w, which, ids[k], nids[k], &e)) bad = 1;
            free(ids[k]);
        }
        free(ids);
        free(nids);
        free(cut);
        free(text);
        if (bad) goto fail_states;
        done_bytes += (int64_t)len;
        if (tty) {
            double el = timer_now() - t0;
            printf("\r  %5.1f%%  %.1f MB  %.1f MB/s ", 100.0 * done_bytes / (total_bytes ? total_bytes : 1),
                   done_bytes / 1e6, done_bytes / 1e6 / (el > 0 ? el : 1e-9));
            fflush(stdout);
        }
    }
    if (flush_shard(&w, 0, &e) || flush_shard(&w, 1, &e)) goto fail_states;
    double el = timer_now() - t0;
    if (tty) printf("\r\033[K");
    printf("done: %d files, %.2f MB, %lld tokens (val %lld in %d shard%s, train %lld in %d shard%s), %.1f s, %.1f MB/s\n",
           files.n, total_bytes / 1e6, (long long)(w.written[0] + w.written[1]), (long long)w.written[0], w.nshards[0],
           w.nshards[0] == 1 ? "" : "s", (long long)w.written[1], w.nshards[1], w.nshards[1] == 1 ? "" : "s", el,
           total_bytes / 1e6 / (el > 0 ? el : 1e-9));
    if (!w.nshards[1]) printf("note: no training tokens: lower --val-fraction\n");
    if (skipped)
        printf("note: skipped %lld JSONL line%s without a string \"%s\" (malformed, or another shape); the first: %s:%lld "
               "(--strict refuses them)\n", (long long)skipped, skipped == 1 ? "" : "s", text_field, bad_file,
               (long long)first_bad);
    rc = 0;
fail_states:
    free(sizes);
    for (int t = 0; t < nth; t++) bpe_state_free(states[t]);
    free(states);
    goto done;
fail:
    rc = 2;
done:
    if (rc && e.msg[0]) rc = cli_fail("prepare", &e);
    free(w.buf[0]);
    free(w.buf[1]);
    tokenizer_close(&tok);
    for (int i = 0; i < inputs.n; i++) free(inputs.v[i]);
    for (int i = 0; i < files.n; i++) free(files.v[i]);
    free(inputs.v);
    free(files.v);
    free(rest);
    return rc;
}
