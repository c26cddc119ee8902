#include "data/docs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/json.h"
#include "data/bpe.h"

#ifdef TSR_ZLIB
#include <zlib.h>
#endif
#ifdef TSR_ZSTD
#include <zstd.h>
#endif

enum { COMP_NONE, COMP_GZIP, COMP_ZSTD };
enum { READ_BYTES = 1 << 20 };

struct Docs {
    const char *path;
    DocsOptions o;
    int fd, comp, jsonl;
#ifdef TSR_ZLIB
    gzFile gz;
#endif
#ifdef TSR_ZSTD
    ZSTD_DStream *zs;
    size_t zret;                // the last ZSTD_decompressStream result: 0 at the end of a frame
#endif
    unsigned char *zin;         // compressed bytes read, [zpos, zlen) not yet decompressed
    size_t zpos, zlen;
    int raw_eof;                // the file is read to its end
    int64_t file_read;          // bytes read from the file
    char *buf;                  // decompressed bytes, [pos, len) not yet returned
    size_t pos, len, cap;
    int64_t base;               // decompressed bytes dropped before buf[0]
    int eof;                    // no more decompressed bytes
    int started;                // text: the document has begun
    int64_t cut_at;             // text: a piece ends at the first cut point from this offset on (-1: none)
    int64_t line, skipped, first_bad;
    char *doc;                  // JSONL: the current document's text
    size_t doc_cap;
};

static int ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

int docs_open(Docs **out, const char *path, const DocsOptions *o, Err *err) {
    *out = NULL;
    int fd = file_open_regular(path, err);
    if (fd < 0) return -1;
    unsigned char magic[4] = {0};
    ssize_t got = pread(fd, magic, sizeof magic, 0);
    int comp = got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b                                           ? COMP_GZIP
               : got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd ? COMP_ZSTD
                                                                                                        : COMP_NONE;
#ifndef TSR_ZLIB
    if (comp == COMP_GZIP) {
        close(fd);
        return err_set(err, ERR_USAGE, "%s: gzip-compressed, and this build has no zlib (install zlib1g-dev, rebuild)", path);
    }
#endif
#ifndef TSR_ZSTD
    if (comp == COMP_ZSTD) {
        close(fd);
        return err_set(err, ERR_USAGE, "%s: zstd-compressed, and this build has no libzstd (install libzstd-dev, rebuild)",
                       path);
    }
#endif
    Docs *d = calloc(1, sizeof *d);
    if (!d) { close(fd); return err_set(err, ERR_RUN, "out of memory"); }
    *d = (Docs){.path = path, .o = *o, .fd = fd, .comp = comp, .cut_at = -1};
    if (!d->o.text_field) d->o.text_field = "text";
    size_t n = strlen(path);
    if (ends_with(path, n, ".gz")) n -= 3;
    else if (ends_with(path, n, ".zst")) n -= 4;
    else if (ends_with(path, n, ".zstd")) n -= 5;
    d->jsonl = o->format == DOCS_JSONL || (o->format == DOCS_AUTO && (ends_with(path, n, ".jsonl") || ends_with(path, n, ".ndjson")));
    int rc = 0;
#ifdef TSR_ZLIB
    if (comp == COMP_GZIP) {
        int fd2 = dup(fd);
        if (fd2 < 0 || !(d->gz = gzdopen(fd2, "rb"))) {
            if (fd2 >= 0) close(fd2);
            rc = err_set(err, ERR_RUN, "%s: cannot start reading gzip", path);
        } else {
            gzbuffer(d->gz, READ_BYTES);
        }
    }
#endif
#ifdef TSR_ZSTD
    if (comp == COMP_ZSTD && (!(d->zs = ZSTD_createDStream()) || !(d->zin = malloc(READ_BYTES))))
        rc = err_set(err, ERR_RUN, "out of memory");
#endif
    if (rc) { docs_close(d); return -1; }
    *out = d;
    return 0;
}

void docs_close(Docs *d) {
    if (!d) return;
#ifdef TSR_ZLIB
    if (d->gz) gzclose(d->gz);
#endif
#ifdef TSR_ZSTD
    if (d->zs) ZSTD_freeDStream(d->zs);
#endif
    close(d->fd);
    free(d->zin);
    free(d->buf);
    free(d->doc);
    free(d);
}

// Up to n decompressed bytes into dst: their count, 0 at the end, -1 with err.
static long read_some(Docs *d, char *dst, size_t n, Err *err) {
    if (d->comp == COMP_NONE) {
        ssize_t r;
        do r = read(d->fd, dst, n); while (r < 0 && errno == EINTR);
        if (r < 0) return err_set(err, ERR_RUN, "%s: %s", d->path, strerror(errno));
        d->file_read += r;
        return (long)r;
    }
#ifdef TSR_ZLIB
    if (d->comp == COMP_GZIP) {
        int r = gzread(d->gz, dst, (unsigned)(n > (1u << 30) ? 1u << 30 : n));
        int zerr;
        const char *msg = gzerror(d->gz, &zerr);
        if (r < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR))
            return err_set(err, ERR_USAGE, "%s: not valid gzip (%s)", d->path, msg ? msg : "read error");
        if (r == 0 && zerr == Z_BUF_ERROR)
            return err_set(err, ERR_USAGE, "%s: the gzip stream is truncated", d->path);
        d->file_read = gzoffset(d->gz);
        return r;
    }
#endif
#ifdef TSR_ZSTD
    for (;;) {
        if (d->zpos == d->zlen && !d->raw_eof) {
            ssize_t r;
            do r = read(d->fd, d->zin, READ_BYTES); while (r < 0 && errno == EINTR);
            if (r < 0) return err_set(err, ERR_RUN, "%s: %s", d->path, strerror(errno));
            d->file_read += r;
            d->zpos = 0;
            d->zlen = (size_t)r;
            if (r == 0) d->raw_eof = 1;
        }
        ZSTD_inBuffer in = {d->zin, d->zlen, d->zpos};
        ZSTD_outBuffer o = {dst, n, 0};
        if (d->zpos < d->zlen || !d->raw_eof) {
            size_t ret = ZSTD_decompressStream(d->zs, &o, &in);
            if (ZSTD_isError(ret))
                return err_set(err, ERR_USAGE, "%s: not valid zstd (%s)", d->path, ZSTD_getErrorName(ret));
            d->zret = ret;
            d->zpos = in.pos;
        }
        if (o.pos > 0) return (long)o.pos;
        if (d->raw_eof && d->zpos == d->zlen) {
            if (d->zret != 0) return err_set(err, ERR_USAGE, "%s: the zstd stream is truncated", d->path);
            return 0;
        }
    }
#endif
    return err_set(err, ERR_RUN, "%s: unreadable compression", d->path);
}

// Makes buf hold at least `want` unreturned bytes, or all that is left.
// 0, or -1 with err.
static int fill(Docs *d, size_t want, Err *err) {
    while (!d->eof && d->len - d->pos < want) {
        if (d->pos > 0) {   // drop what was returned
            memmove(d->buf, d->buf + d->pos, d->len - d->pos);
            d->base += (int64_t)d->pos;
            d->len -= d->pos;
            d->pos = 0;
        }
        if (d->cap - d->len < READ_BYTES) {
            size_t cap = d->cap ? 2 * d->cap : 4 * (size_t)READ_BYTES;
            while (cap - d->len < READ_BYTES) cap *= 2;
            char *nb = realloc(d->buf, cap + 1);
            if (!nb) return err_set(err, ERR_RUN, "out of memory reading %s", d->path);
            d->buf = nb;
            d->cap = cap;
        }
        long r = read_some(d, d->buf + d->len, d->cap - d->len, err);
        if (r < 0) return -1;
        if (r == 0) d->eof = 1;
        d->len += (size_t)r;
    }
    return 0;
}

static int next_text(Docs *d, const char **text, size_t *n, int *doc_start, Err *err) {
    *doc_start = !d->started;
    // a cut point at or after the target (`piece` bytes on, or the whole
    // document, or sooner at cut_at), as bpe_split_point finds it in the
    // whole text: read on until there is one or the text ends
    size_t piece = d->o.piece, want = piece ? 2 * piece : (size_t)1 << 62;
    for (;;) {
        if (fill(d, want, err)) return -1;
        size_t avail = d->len - d->pos, target = piece ? piece : avail;
        if (avail == 0 && d->started) return 0;
        int64_t at = d->base + (int64_t)d->pos;
        if (d->cut_at > at && (uint64_t)(d->cut_at - at) < target) target = (size_t)(d->cut_at - at);
        const unsigned char *t = (const unsigned char *)d->buf + d->pos;
        size_t cut = target >= avail ? avail : bpe_split_point(t, target, avail);
        if (cut < avail || d->eof) {
            d->started = 1;
            *text = d->buf ? d->buf + d->pos : "";
            *n = cut;
            d->pos += cut;
            return 1;
        }
        want = 2 * avail;
    }
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

static int next_jsonl(Docs *d, const char **text, size_t *n, int *doc_start, Err *err) {
    for (;;) {
        if (fill(d, 1, err)) return -1;
        if (d->len == d->pos) return 0;
        char *nl;
        size_t from = 0;
        while (!(nl = memchr(d->buf + d->pos + from, '\n', d->len - d->pos - from)) && !d->eof) {
            from = d->len - d->pos;
            if (fill(d, from + READ_BYTES, err)) return -1;
        }
        size_t avail = d->len - d->pos;
        char *s = d->buf + d->pos;
        size_t len = nl ? (size_t)(nl - s) : avail;
        d->pos += nl ? len + 1 : len;
        d->line++;
        if (is_blank(s, len)) continue;
        Err je;
        Json *j = json_parse(s, len, &je);
        const Json *f = j && j->type == JSON_OBJ ? json_get(j, d->o.text_field) : NULL;
        if (!f || f->type != JSON_STR) {
            if (d->o.strict) {
                if (j && j->type == JSON_OBJ) {
                    err_set(err, ERR_USAGE, "%s:%lld: no string field \"%s\" (--strict)", d->path, (long long)d->line,
                            d->o.text_field);
                } else {   // the parser counts lines within the one line it was given
                    const char *why = j ? "not a JSON object" : je.msg, *at = strstr(why, "line 1 col");
                    err_set(err, ERR_USAGE, "%s:%lld: %s (--strict)", d->path, (long long)d->line, at ? at + 7 : why);
                }
                json_free(j);
                return -1;
            }
            if (!d->skipped) d->first_bad = d->line;
            d->skipped++;
            json_free(j);
            continue;
        }
        if (f->len + 1 > d->doc_cap) {
            char *nd = realloc(d->doc, f->len + 1);
            if (!nd) { json_free(j); return err_set(err, ERR_RUN, "out of memory"); }
            d->doc = nd;
            d->doc_cap = f->len + 1;
        }
        memcpy(d->doc, f->text, f->len);
        *text = d->doc;
        *n = f->len;
        *doc_start = 1;
        json_free(j);
        return 1;
    }
}

int docs_next(Docs *d, const char **text, size_t *n, int *doc_start, Err *err) {
    return d->jsonl ? next_jsonl(d, text, n, doc_start, err) : next_text(d, text, n, doc_start, err);
}

int64_t docs_consumed(const Docs *d) { return d->base + (int64_t)d->pos; }

void docs_cut_at(Docs *d, int64_t at) { d->cut_at = at; }

int docs_measure(const char *path, int64_t *bytes, Err *err) {
    DocsOptions o = {0};
    Docs *d;
    if (docs_open(&d, path, &o, err)) return -1;
    struct stat st;
    if (d->comp == COMP_NONE && fstat(d->fd, &st) == 0) {   // a plain file's size is its length: no pass needed
        *bytes = st.st_size;
        docs_close(d);
        return 0;
    }
    char *scratch = malloc(READ_BYTES);
    int64_t n = 0;
    long r = scratch ? 1 : err_set(err, ERR_RUN, "out of memory");
    while (r > 0)
        if ((r = read_some(d, scratch, READ_BYTES, err)) > 0) n += r;
    free(scratch);
    docs_close(d);
    *bytes = n;
    return r < 0 ? -1 : 0;
}

int64_t docs_skipped(const Docs *d, int64_t *first_line) {
    if (first_line) *first_line = d->first_bad;
    return d->skipped;
}

int docs_is_jsonl(const Docs *d) { return d->jsonl; }

const char *docs_compression(const Docs *d) { return d->comp == COMP_GZIP ? "gzip" : d->comp == COMP_ZSTD ? "zstd" : "none"; }
