#include "data/docs.h"

#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "data/bpe.h"
#include "data/zread.h"

// JSONL_LINE_MAX: a JSONL line is parsed whole (about three times its size
// in memory), so a longer one is refused rather than let memory follow the input.
enum { READ_BYTES = 1 << 20, JSONL_LINE_MAX = 64 << 20 };

struct Docs {
    const char *path;
    DocsOptions o;
    Zread *z;
    int jsonl;
    char *buf;                  // decompressed bytes, [pos, len) not yet returned
    size_t pos, len, cap;
    int64_t base;               // decompressed bytes dropped before buf[0]
    int eof;                    // no more decompressed bytes
    int started;                // text: the document has begun
    int64_t cut_at;             // text: a piece ends at the first cut point from this offset on (-1: none)
    int64_t line, skipped, first_bad, ndocs;
    Json *json;                 // JSONL: the current line, parsed
    const char *doc;            // JSONL: the current document's text (in json), [doc_pos, doc_len) not yet returned
    size_t doc_len, doc_pos;
};

static int ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

int docs_open(Docs **out, const char *path, const DocsOptions *o, Err *err) {
    *out = NULL;
    Zread *z;
    if (zread_open(&z, path, err)) return -1;
    Docs *d = calloc(1, sizeof *d);
    if (!d) { zread_close(z); return err_set(err, ERR_RUN, "out of memory"); }
    *d = (Docs){.path = path, .o = *o, .z = z, .cut_at = -1};
    if (!d->o.text_field) d->o.text_field = "text";
    if (!d->o.piece) d->o.piece = DOCS_PIECE;
    size_t n = strlen(path);
    if (ends_with(path, n, ".gz")) n -= 3;
    else if (ends_with(path, n, ".zst")) n -= 4;
    else if (ends_with(path, n, ".zstd")) n -= 5;
    d->jsonl = o->format == DOCS_JSONL || (o->format == DOCS_AUTO && (ends_with(path, n, ".jsonl") || ends_with(path, n, ".ndjson")));
    *out = d;
    return 0;
}

void docs_close(Docs *d) {
    if (!d) return;
    zread_close(d->z);
    free(d->buf);
    json_free(d->json);
    free(d);
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
        long r = zread_read(d->z, d->buf + d->len, d->cap - d->len, err);
        if (r < 0) return -1;
        if (r == 0) d->eof = 1;
        d->len += (size_t)r;
    }
    return 0;
}

// Where a piece that starts at t[0] ends: at the first cut point
// (bpe_split_point) in [target, target + window), or, with none there, at
// target itself backed off to the start of a UTF-8 character, so that no
// piece exceeds target + window bytes whatever the text. avail: the bytes
// known from t on; when target >= avail they are the rest of the text.
static size_t piece_end(const unsigned char *t, size_t avail, size_t target, size_t window) {
    if (target >= avail) return avail;
    size_t limit = avail - target > window ? target + window : avail;
    size_t p = bpe_split_point(t, target, limit);
    if (p < limit) return p;
    size_t q = target;
    while (q > 0 && target - q < 3 && (t[q] & 0xC0) == 0x80) q--;
    return q > 0 && (t[q] & 0xC0) != 0x80 ? q : target;
}

static int next_text(Docs *d, const char **text, size_t *n, int *doc_start, Err *err) {
    *doc_start = !d->started;
    // a piece needs at most 2 * piece bytes: its target and the window
    // after it; fewer means the text ends within them
    size_t piece = d->o.piece;
    if (fill(d, 2 * piece, err)) return -1;
    size_t avail = d->len - d->pos, target = piece;
    if (avail == 0 && d->started) return 0;
    int64_t at = d->base + (int64_t)d->pos;
    if (d->cut_at > at && (uint64_t)(d->cut_at - at) < target) target = (size_t)(d->cut_at - at);
    size_t cut = piece_end((const unsigned char *)d->buf + d->pos, avail, target, piece);
    d->started = 1;
    *text = d->buf ? d->buf + d->pos : "";
    *n = cut;
    d->pos += cut;
    return 1;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

// The next piece of the current JSONL document, cut as a text's.
static void doc_piece(Docs *d, const char **text, size_t *n, int *doc_start) {
    *doc_start = d->doc_pos == 0;
    *text = d->doc + d->doc_pos;
    *n = piece_end((const unsigned char *)*text, d->doc_len - d->doc_pos, d->o.piece, d->o.piece);
    d->doc_pos += *n;
}

static int next_jsonl(Docs *d, const char **text, size_t *n, int *doc_start, Err *err) {
    if (d->doc_pos < d->doc_len) { doc_piece(d, text, n, doc_start); return 1; }
    for (;;) {
        if (fill(d, 1, err)) return -1;
        if (d->len == d->pos) return 0;
        char *nl;
        size_t from = 0;
        while (!(nl = memchr(d->buf + d->pos + from, '\n', d->len - d->pos - from)) && !d->eof) {
            from = d->len - d->pos;
            if (from > JSONL_LINE_MAX)
                return err_set(err, ERR_USAGE, "%s:%lld: a JSONL line longer than %d MiB (split the document, or give "
                               "it as plain text, which is read in pieces)", d->path, (long long)d->line + 1,
                               JSONL_LINE_MAX >> 20);
            if (fill(d, from + READ_BYTES, err)) return -1;
        }
        if ((nl ? (size_t)(nl - (d->buf + d->pos)) : d->len - d->pos) > JSONL_LINE_MAX)
            return err_set(err, ERR_USAGE, "%s:%lld: a JSONL line longer than %d MiB (split the document, or give it "
                           "as plain text, which is read in pieces)", d->path, (long long)d->line + 1, JSONL_LINE_MAX >> 20);
        size_t avail = d->len - d->pos;
        char *s = d->buf + d->pos;
        size_t len = nl ? (size_t)(nl - s) : avail;
        d->pos += nl ? len + 1 : len;
        if (d->line++ == 0 && len >= 3 && !memcmp(s, "\xef\xbb\xbf", 3)) { s += 3; len -= 3; }   // a UTF-8 BOM
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
        json_free(d->json);   // the previous document's
        d->json = j;
        d->doc = f->text;
        d->doc_len = f->len;
        d->doc_pos = 0;
        d->ndocs++;
        doc_piece(d, text, n, doc_start);
        return 1;
    }
}

int docs_next(Docs *d, const char **text, size_t *n, int *doc_start, Err *err) {
    return d->jsonl ? next_jsonl(d, text, n, doc_start, err) : next_text(d, text, n, doc_start, err);
}

int64_t docs_consumed(const Docs *d) { return d->base + (int64_t)d->pos; }

void docs_cut_at(Docs *d, int64_t at) { d->cut_at = at; }

int docs_measure(const char *path, int64_t *bytes, Err *err) {
    Zread *z;
    if (zread_open(&z, path, err)) return -1;
    long long plain = zread_plain_size(z);   // a plain file's size is its length: no pass needed
    char *scratch = plain >= 0 ? NULL : malloc(READ_BYTES);
    int64_t n = plain >= 0 ? plain : 0;
    long r = plain >= 0 ? 0 : scratch ? 1 : err_set(err, ERR_RUN, "out of memory");
    while (r > 0)
        if ((r = zread_read(z, scratch, READ_BYTES, err)) > 0) n += r;
    free(scratch);
    zread_close(z);
    *bytes = n;
    return r < 0 ? -1 : 0;
}

int64_t docs_documents(const Docs *d) { return d->ndocs; }

int64_t docs_skipped(const Docs *d, int64_t *first_line) {
    if (first_line) *first_line = d->first_bad;
    return d->skipped;
}

int docs_is_jsonl(const Docs *d) { return d->jsonl; }

const char *docs_compression(const Docs *d) { return zread_compression(d->z); }
