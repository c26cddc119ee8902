// tessera prepare — tokenizes text files into llm.c-compatible shards.
//
// A text file is a document; a JSONL file (.jsonl, .ndjson) holds one
// document per line, its text in --text-field; either may be gzip- or
// zstd-compressed. Every file is read as a stream of pieces (data/docs) of
// at most 2 MiB (4 MiB with the llama tokenizer), and the shards are written
// as the tokens come, so memory does not grow with the input. Each document
// starts with the end-of-text token (gpt2). The first --val-fraction of the
// input bytes become the validation shard(s), the rest the training shards,
// each at most --shard-tokens long: OUT/val_000000.bin,
// OUT/train_000000.bin, ... The pieces are encoded on all threads; the
// output does not depend on the thread count.
//
// --out is empty or new (--force: its shards are replaced), and its shards
// are never read as input. A failed run removes the shards it wrote. The
// shards' tokenizer is recorded in OUT/shards.json (data/shard), so that a
// mixture of directories can tell that its sources share one.
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "core/timer.h"
#include "data/docs.h"
#include "data/shard.h"
#include "data/tokenizer.h"

// Bytes per piece, about: GPT-2's pieces are cut where its pattern cuts
// anyway; LLaMA's tokenizer has no such points (a piece is a sequence of
// its own), so its pieces are larger, and a text under 2 MiB stays whole.
enum { PIECE_GPT2 = 1 << 20, PIECE_LLAMA = 2 << 20 };


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

typedef struct {
    int set;
    dev_t dev;
    ino_t ino;
} DirId;

static int same_dir(const DirId *o, const struct stat *st) {
    return o->set && S_ISDIR(st->st_mode) && st->st_dev == o->dev && st->st_ino == o->ino;
}

// A name prepare writes in --out: val_NNNNNN.bin, train_NNNNNN.bin, or the
// temporary of one (.bin.tmp.XXXXXX; .bin.tmp from earlier versions).
static int is_shard_name(const char *s) {
    size_t k = !strncmp(s, "val_", 4) ? 4 : !strncmp(s, "train_", 6) ? 6 : 0;
    if (!k) return 0;
    for (int i = 0; i < 6; i++)
        if (s[k + i] < '0' || s[k + i] > '9') return 0;
    const char *t = s + k + 6;
    return !strcmp(t, ".bin") || !strcmp(t, ".bin.tmp") || (!strncmp(t, ".bin.tmp.", 9) && strlen(t) == 15);
}

// Adds a file, or every regular file under a directory (sorted, recursive,
// hidden names skipped). A shard (or the shards' record) in the --out
// directory (outdir) is an output, never an input: skipped in a walk,
// refused when named.
static int collect(Paths *out, const char *path, int walked, const DirId *outdir, const char *out_name, Err *err) {
    struct stat st;
    if (stat(path, &st)) return err_set(err, ERR_USAGE, "--input %s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        char *dir = strdup(path), *base = strdup(path);
        struct stat pst;
        const char *b = base ? basename(base) : "";
        int shard = dir && base && (is_shard_name(b) || !strcmp(b, SHARD_INFO_FILE)) && stat(dirname(dir), &pst) == 0 &&
                    same_dir(outdir, &pst);
        free(dir);
        free(base);
        if (shard && walked) return 0;
        if (shard) return err_set(err, ERR_USAGE, "--input %s: a shard of --out %s (an output is never read as input)", path, out_name);
        return paths_add(out, path) ? err_set(err, ERR_RUN, "out of memory") : 0;
    }
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
    for (int i = 0; i < here.n && !rc; i++) rc = collect(out, here.v[i], 1, outdir, out_name, err);
    for (int i = 0; i < here.n; i++) free(here.v[i]);
    free(here.v);
    return rc;
}

static int is_shard_temp(const char *s) { return is_shard_name(s) && strstr(s, ".bin.tmp"); }

// --out: missing, or an empty directory (a shard temporary left by an
// interrupted run aside: writing replaces it), or with force a directory
// whose shards will be replaced (other files are kept). Sets *id when it
// exists. Removes nothing.
static int out_check(const char *out, int force, DirId *id, Err *err) {
    struct stat st;
    if (stat(out, &st)) {
        if (errno == ENOENT) return 0;
        return err_set(err, ERR_USAGE, "--out %s: %s", out, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return err_set(err, ERR_USAGE, "--out %s: not a directory", out);
    *id = (DirId){1, st.st_dev, st.st_ino};
    DIR *d = opendir(out);
    if (!d) return err_set(err, ERR_USAGE, "--out %s: %s", out, strerror(errno));
    struct dirent *e;
    int n = 0;
    char first[256] = "";
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !is_shard_temp(e->d_name) && !n++)
            snprintf(first, sizeof first, "%s", e->d_name);
    closedir(d);
    if (n && !force)
        return err_set(err, ERR_USAGE, "--out %s: not empty (%d entr%s, e.g. %s): choose a new directory, or --force "
                       "to replace the shards in it", out, n, n == 1 ? "y" : "ies", first);
    return 0;
}

// Removes the shards (and shard temporaries, and their record) in an existing --out.
static int out_clear(const char *out, Err *err) {
    DIR *d = opendir(out);
    if (!d) return err_set(err, ERR_USAGE, "--out %s: %s", out, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d)))
        if ((is_shard_name(e->d_name) || !strcmp(e->d_name, SHARD_INFO_FILE)) && unlinkat(dirfd(d), e->d_name, 0) &&
            errno != ENOENT)
            rc = err_set(err, ERR_RUN, "--out %s/%s: cannot remove: %s", out, e->d_name, strerror(errno));
    closedir(d);
    return rc;
}

// The shard streams: val (0) and train (1), each written a piece at a time
// into shards of at most shard_tokens.
typedef struct {
    const char *out_dir;
    int vocab;
    int64_t shard_tokens;
    ShardWriter sw[2];
    int open[2];            // sw[which] is being written
    int nshards[2];         // shards begun
    int64_t written[2];
} Writer;

static int emit(Writer *w, int which, const int *ids, int64_t n, Err *err) {
    while (n > 0) {
        if (!w->open[which]) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s_%06d.bin", w->out_dir, which ? "train" : "val", w->nshards[which]);
            if (shard_writer_open(&w->sw[which], path, w->vocab, err)) return -1;
            w->open[which] = 1;
            w->nshards[which]++;
        }
        int64_t room = w->shard_tokens - w->sw[which].n, m = n < room ? n : room;
        if (shard_writer_append(&w->sw[which], ids, m, err)) return -1;
        w->written[which] += m;
        ids += m;
        n -= m;
        if (w->sw[which].n == w->shard_tokens) {
            w->open[which] = 0;
            if (shard_writer_close(&w->sw[which], err)) return -1;
        }
    }
    return 0;
}

static int writer_finish(Writer *w, Err *err) {
    for (int k = 0; k < 2; k++)
        if (w->open[k]) {
            w->open[k] = 0;
            if (shard_writer_close(&w->sw[k], err)) return -1;
        }
    return 0;
}

// After a failure: the shards this run wrote, and the one being written.
static void writer_remove(Writer *w) {
    char path[4200];
    for (int k = 0; k < 2; k++) {
        if (w->open[k]) shard_writer_abort(&w->sw[k]);
        w->open[k] = 0;
        for (int i = 0; i < w->nshards[k]; i++) {
            snprintf(path, sizeof path, "%s/%s_%06d.bin", w->out_dir, k ? "train" : "val", i);
            unlink(path);
        }
    }
}

typedef struct {
    Writer w;
    const Tokenizer *tok;
    BpeState **states;      // one per thread (gpt2)
    int64_t val_bytes, total_bytes, done_bytes;
    double t0;
    int tty;
} Run;

static void run_progress(const Run *r, int64_t done) {
    if (!r->tty) return;
    double el = timer_now() - r->t0;
    printf("\r  %5.1f%%  %.1f MB  %.1f MB/s ", 100.0 * done / (r->total_bytes ? r->total_bytes : 1), done / 1e6,
           done / 1e6 / (el > 0 ? el : 1e-9));
    fflush(stdout);
}

// A file read as a stream of pieces (data/docs), batched, encoded on every
// thread and emitted in order, so the output does not depend on the thread
// count. A piece goes to validation while it starts within the first
// val_bytes of the input (decompressed bytes); a text is cut there, a JSONL
// document is not (its later pieces follow its first). A batch holds at
// most BATCH_BYTES of text and 4 bytes of ids per byte.
static int prepare_stream(Run *r, Docs *d, Err *err) {
    enum { BATCH_PIECES = 64, BATCH_BYTES = 16 << 20 };
    typedef struct {
        char *text;
        size_t n;
        int start, which;
        int *ids;
        int64_t nids;
    } Piece;
    Piece *b = calloc(BATCH_PIECES, sizeof *b);
    if (!b) return err_set(err, ERR_RUN, "out of memory");
    const Tokenizer *tok = r->tok;
    int rc = 0, more = 1, which = 0;
    while (!rc && more) {
        int np = 0;
        size_t bytes = 0;
        while (np < BATCH_PIECES && bytes < BATCH_BYTES) {
            int64_t at = r->done_bytes + docs_consumed(d);
            docs_cut_at(d, r->val_bytes - r->done_bytes);
            const char *t;
            size_t n;
            int start, got = docs_next(d, &t, &n, &start, err);
            if (got < 0) err_prefix(err, "--input");
            if (got <= 0) { rc = got < 0 ? -1 : 0; more = 0; break; }
            char *copy = malloc(n + 1);
            if (!copy) { rc = err_set(err, ERR_RUN, "out of memory"); more = 0; break; }
            memcpy(copy, t, n);
            if (start || !docs_is_jsonl(d)) which = at < r->val_bytes ? 0 : 1;
            b[np++] = (Piece){.text = copy, .n = n, .start = start, .which = which};
            bytes += n;
        }
        int oom = 0;
        #pragma omp parallel for schedule(dynamic, 1) reduction(| : oom)
        for (int k = 0; k < np; k++) {
            b[k].ids = malloc((b[k].n + 2) * sizeof *b[k].ids);
            if (!b[k].ids) { oom = 1; continue; }
            b[k].nids = (int64_t)tokenizer_encode_with(tok, r->states[omp_get_thread_num()], b[k].text, b[k].n, b[k].ids,
                                                       b[k].n + 2);
        }
        if (!rc && oom) rc = err_set(err, ERR_RUN, "out of memory");
        for (int k = 0; k < np; k++) {
            if (!rc && b[k].start && tok->eot >= 0) rc = emit(&r->w, b[k].which, &tok->eot, 1, err);
            if (!rc) rc = emit(&r->w, b[k].which, b[k].ids, b[k].nids, err);
            free(b[k].text);
            free(b[k].ids);
        }
        run_progress(r, r->done_bytes + docs_consumed(d));
    }
    free(b);
    return rc;
}

// Tokenizes every file into r's shards. A JSONL file none of whose lines
// holds a document is refused; skipped lines are counted into *skipped
// (the first one's file and line kept).
static int prepare_files(Run *r, const Paths *files, const int64_t *sizes, const DocsOptions *dopt, int64_t *skipped,
                         const char **bad_file, int64_t *first_bad, Err *err) {
    for (int i = 0; i < files->n; i++) {
        Docs *d;
        if (docs_open(&d, files->v[i], dopt, err)) { err_prefix(err, "--input"); return -1; }
        int rc = prepare_stream(r, d, err);
        int64_t first, n = docs_skipped(d, &first);
        if (!rc && n && docs_documents(d) == 0)
            rc = err_set(err, ERR_USAGE, "--input %s: none of its %lld JSONL line%s holds a string \"%s\" (the first: line %lld); "
                         "see --text-field", files->v[i], (long long)n, n == 1 ? "" : "s", dopt->text_field,
                         (long long)first);
        if (n && !*skipped) { *first_bad = first; *bad_file = files->v[i]; }
        *skipped += n;
        docs_close(d);
        if (rc) return -1;
        r->done_bytes += sizes[i];
    }
    return 0;
}

// After the files: both parts must hold tokens when a validation part was
// asked for, and the input some.
static int check_split(const Writer *w, double val_fraction, Err *err) {
    if (w->written[0] + w->written[1] == 0)
        return err_set(err, ERR_USAGE, "--input: no text to tokenize (the files are empty)");
    if (val_fraction > 0 && w->written[1] == 0)
        return err_set(err, ERR_USAGE, "--val-fraction %g: nothing is left for training (a JSONL document is never cut); "
                       "lower it, or add input", val_fraction);
    if (val_fraction > 0 && w->written[0] == 0)
        return err_set(err, ERR_USAGE, "--val-fraction %g: the validation part is empty (too little input); raise it, "
                       "or pass --val-fraction 0", val_fraction);
    return 0;
}

// --input takes every following argument up to the next flag: the paths
// go to inputs, the other arguments to rest (their count returned).
static int split_inputs(int argc, char **argv, Paths *inputs, char **rest) {
    int nrest = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--input")) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) paths_add(inputs, argv[++i]);
        } else if (!strncmp(argv[i], "--input=", 8)) {
            paths_add(inputs, argv[i] + 8);
        } else {
            rest[nrest++] = argv[i];
        }
    }
    return nrest;
}

int cmd_prepare(int argc, char **argv) {
    const char *out = NULL, *name = "gpt2";
    double val_fraction = 0.1;
    uint64_t shard_u = 100000000;
    int threads = 0, strict = 0, force = 0;
    const char *text_field = "text", *format = "auto";
    Flag f[] = {
        {"input", FLAG_STR, NULL, 0, 0, "PATH...", "text files or directories (every file in them, recursively; --out's shards skipped) (required)", 0, NULL},   // parsed above, listed for --help
        {"out", FLAG_STR, &out, 0, 0, "DIR", "output directory for val_*.bin and train_*.bin: new or empty (required)", 0, NULL},
        {"force", FLAG_BOOL, &force, 0, 0, "", "write into a non-empty --out, replacing the shards there (other files are kept)", 0, NULL},
        {"tokenizer", FLAG_STR, &name, 0, 0, "gpt2|llama|byte", "gpt2 (default), llama or byte", 0, NULL},
        {"val-fraction", FLAG_FLOAT, &val_fraction, 0, 0.9, "F", "fraction of the input bytes for validation, taken first (default 0.1)", 0, NULL},
        {"shard-tokens", FLAG_U64, &shard_u, 1024, 2147483647.0, "N", "tokens per shard at most (default 100000000)", 0, NULL},
        {"threads", FLAG_INT, &threads, 1, 1024, "N", "threads (default: all cores)", 0, NULL},
        {"format", FLAG_STR, &format, 0, 0, "auto|text|jsonl", "auto (default): JSONL for names ending .jsonl or .ndjson (before .gz/.zst), else text", 0, NULL},
        {"text-field", FLAG_STR, &text_field, 0, 0, "NAME", "JSONL: the string member holding each document (default text)", 0, NULL},
        {"strict", FLAG_BOOL, &strict, 0, 0, "", "JSONL: refuse a malformed line or one without the text field (default: skip it, count it)", 0, NULL},
    };
    int nf = (int)(sizeof f / sizeof f[0]), help;
    Paths inputs = {0};
    char **rest = malloc((size_t)(argc + 1) * sizeof *rest);
    int nrest = split_inputs(argc, argv, &inputs, rest);
    Json *unused = NULL;
    Err e = {0};
    int rc = 2, made_out = 0, nth = 0;
    Paths files = {0};
    Tokenizer tok;
    memset(&tok, 0, sizeof tok);
    Run r = {0};
    int64_t *sizes = NULL;   // each input file's bytes, decompressed
    DirId outdir = {0};
    if (flags_parse(f + 1, nf - 1, nrest, rest, "prepare", &help, &unused, &e)) goto done;
    if (help) {
        printf("usage: tessera prepare --input PATH... --out DIR [flags]\n\n"
               "Tokenizes text into llm.c-compatible token shards (uint16; uint32 for vocabularies over 65535).\n"
               "A text file is one document; a JSONL file (.jsonl, .ndjson) one document per line, its text in\n"
               "--text-field. Files may be gzip- or zstd-compressed. Every file is read as a stream, in pieces of\n"
               "at most 2 MiB (4 MiB with llama; a piece without a line end near its end is cut at a UTF-8\n"
               "boundary), so memory does not grow with the input. Each document is preceded by the end-of-text\n"
               "token (gpt2). The output does not depend on --threads.\n\n");
        flags_print(f, nf);
        rc = 0;
        goto done;
    }
    if (!inputs.n) { err_set(&e, ERR_USAGE, "--input PATH... is required"); goto done; }
    if (!out) { err_set(&e, ERR_USAGE, "--out DIR is required"); goto done; }
    DocsFormat fmt = !strcmp(format, "auto") ? DOCS_AUTO : !strcmp(format, "text") ? DOCS_TEXT
                     : !strcmp(format, "jsonl") ? DOCS_JSONL : (DocsFormat)-1;
    if ((int)fmt < 0) { err_set(&e, ERR_USAGE, "--format: '%s' is not auto, text or jsonl", format); goto done; }
    if (!text_field[0]) { err_set(&e, ERR_USAGE, "--text-field: empty"); goto done; }
    if (out_check(out, force, &outdir, &e)) goto done;
    for (int i = 0; i < inputs.n; i++)
        if (collect(&files, inputs.v[i], 0, &outdir, out, &e)) goto done;
    if (!files.n) { err_set(&e, ERR_USAGE, "--input: no files found"); goto done; }
    if (tokenizer_open(&tok, name, &e)) goto done;
    if (threads) omp_set_num_threads(threads);
    nth = omp_get_max_threads();
    r.tok = &tok;
    r.states = calloc((size_t)nth, sizeof *r.states);
    for (int t = 0; tok.kind == TOK_GPT2 && t < nth; t++) r.states[t] = bpe_state_new(tok.bpe);

    // the input's bytes, decompressed: what --val-fraction is a fraction of
    sizes = calloc((size_t)files.n, sizeof *sizes);
    if (!sizes) { err_set(&e, ERR_RUN, "out of memory"); goto done; }
    for (int i = 0; i < files.n; i++) {
        if (docs_measure(files.v[i], &sizes[i], &e)) { err_prefix(&e, "--input"); goto done; }
        r.total_bytes += sizes[i];
    }
    // every check passed: --out's old shards go, or --out is made
    if (outdir.set && force && out_clear(out, &e)) goto done;
    if (!outdir.set) {
        if (mkdir(out, 0755)) { err_set(&e, ERR_USAGE, "--out %s: %s", out, strerror(errno)); goto done; }
        made_out = 1;
    }
    r.w = (Writer){.out_dir = out, .vocab = tok.vocab, .shard_tokens = (int64_t)shard_u};
    r.val_bytes = (int64_t)(val_fraction * (double)r.total_bytes);
    r.tty = isatty(STDOUT_FILENO);
    r.t0 = timer_now();
    printf("prepare: %d file%s, %.1f MB, %s tokenizer, %d threads -> %s\n", files.n, files.n == 1 ? "" : "s",
           r.total_bytes / 1e6, name, nth, out);
    int64_t skipped = 0, first_bad = 0;
    const char *bad_file = NULL;
    DocsOptions dopt = {.format = fmt, .text_field = text_field, .piece = tok.kind == TOK_LLAMA ? PIECE_LLAMA : PIECE_GPT2,
                        .strict = strict};
    if (prepare_files(&r, &files, sizes, &dopt, &skipped, &bad_file, &first_bad, &e)) goto written;
    if (writer_finish(&r.w, &e) || check_split(&r.w, val_fraction, &e) || shard_info_write(out, name, tok.vocab, &e))
        goto written;
    double el = timer_now() - r.t0;
    if (r.tty) printf("\r\033[K");
    const Writer *w = &r.w;
    printf("done: %d files, %.2f MB, %lld tokens (val %lld in %d shard%s, train %lld in %d shard%s), %.1f s, %.1f MB/s\n",
           files.n, r.total_bytes / 1e6, (long long)(w->written[0] + w->written[1]), (long long)w->written[0], w->nshards[0],
           w->nshards[0] == 1 ? "" : "s", (long long)w->written[1], w->nshards[1], w->nshards[1] == 1 ? "" : "s", el,
           r.total_bytes / 1e6 / (el > 0 ? el : 1e-9));
    if (skipped)
        printf("note: skipped %lld JSONL line%s without a string \"%s\" (malformed, or another shape); the first: %s:%lld "
               "(--strict refuses them)\n", (long long)skipped, skipped == 1 ? "" : "s", text_field, bad_file,
               (long long)first_bad);
    rc = 0;
    goto done;
written:   // a failure after --out was written to: the shards of this run go
    if (r.tty) printf("\r\033[K");
    writer_remove(&r.w);
    if (made_out) rmdir(out);
done:
    if (rc && e.msg[0]) rc = cli_fail("prepare", &e);
    free(sizes);
    for (int t = 0; r.states && t < nth; t++) bpe_state_free(r.states[t]);
    free(r.states);
    tokenizer_close(&tok);
    for (int i = 0; i < inputs.n; i++) free(inputs.v[i]);
    for (int i = 0; i < files.n; i++) free(files.v[i]);
    free(inputs.v);
    free(files.v);
    free(rest);
    return rc;
}
