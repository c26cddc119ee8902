#include "core/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { JSON_MAX_DEPTH = 64 };

typedef struct {
    const char *p, *start, *end;
    Err *err;
    int failed;
} Parser;

static Json *fail(Parser *ps, const char *what) {
    if (!ps->failed) {
        int line = 1, col = 1;
        for (const char *q = ps->start; q < ps->p && q < ps->end; q++) {
            if (*q == '\n') { line++; col = 1; } else col++;
        }
        err_set(ps->err, ERR_USAGE, "invalid JSON at line %d col %d: %s", line, col, what);
        ps->failed = 1;
    }
    return NULL;
}

static void skip_ws(Parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static Json *node(JsonType t) {
    Json *j = calloc(1, sizeof *j);
    if (j) j->type = t;
    return j;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63)); return 4;
}

// Length of the valid UTF-8 sequence at p (p < end), or 0 if invalid.
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t n;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return n;
}

// Parses a string literal at ps->p (which is at '"'); returns malloc'd UTF-8.
static char *parse_string(Parser *ps, size_t *out_len) {
    ps->p++;
    // The decoded form is never longer than the literal.
    const char *q = ps->p;
    while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end) { fail(ps, "unterminated string"); return NULL; }
    char *out = malloc((size_t)(q - ps->p) + 1), *o = out;
    if (!out) { fail(ps, "out of memory"); return NULL; }
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) { free(out); fail(ps, "control character in string"); return NULL; }
        if (c == '\\') {
            char e = ps->p[1];
            ps->p += 2;
            switch (e) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '/': *o++ = '/'; break;
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (ps->end - ps->p < 4 || hex4(ps->p, &cp)) { free(out); fail(ps, "bad \\u escape"); return NULL; }
                ps->p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) { free(out); fail(ps, "lone low surrogate"); return NULL; }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF) {
                        free(out); fail(ps, "lone high surrogate"); return NULL;
                    }
                    ps->p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                o += put_utf8(o, cp);
                break;
            }
            default: free(out); ps->p--; fail(ps, "bad escape"); return NULL;
            }
            continue;
        }
        size_t n = utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
        if (!n) { free(out); fail(ps, "invalid UTF-8 in string"); return NULL; }
        memcpy(o, ps->p, n);
        o += n;
        ps->p += n;
    }
    ps->p++;
    *o = 0;
    *out_len = (size_t)(o - out);
    return out;
}

static Json *parse_value(Parser *ps, int depth);

static Json *parse_number(Parser *ps) {
    const char *s = ps->p, *p = s;
    if (p < ps->end && *p == '-') p++;
    if (p >= ps->end) return fail(ps, "bad number");
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < ps->end && *p >= '0' && *p <= '9') p++;
    else return fail(ps, "bad number");
    if (p < ps->end && *p == '.') {
        p++;
        if (p >= ps->end || *p < '0' || *p > '9') { ps->p = p; return fail(ps, "bad fraction"); }
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || *p < '0' || *p > '9') { ps->p = p; return fail(ps, "bad exponent"); }
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    Json *j = node(JSON_NUM);
    if (!j) return fail(ps, "out of memory");
    size_t n = (size_t)(p - s);
    j->text = malloc(n + 1);
    if (!j->text) { free(j); return fail(ps, "out of memory"); }
    memcpy(j->text, s, n);
    j->text[n] = 0;
    j->num = strtod(j->text, NULL);
    if (!isfinite(j->num)) { ps->p = s; json_free(j); return fail(ps, "number out of range"); }
    ps->p = p;
    return j;
}

static int lit(Parser *ps, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) { ps->p += n; return 1; }
    return 0;
}

// The keys of one object being parsed, for the duplicate check: an
// open-addressing set of pointers to the keys (owned by the members).
typedef struct { const char **slot; size_t cap, n; } KeySet;

static uint64_t key_hash(const char *k) {
    uint64_t h = 1469598103934665603ull;
    for (; *k; k++) { h ^= (unsigned char)*k; h *= 1099511628211ull; }
    return h;
}

// Adds key; returns 1 if it was already there, -1 when out of memory.
static int keyset_add(KeySet *ks, const char *key) {
    if (2 * (ks->n + 1) > ks->cap) {
        size_t cap = ks->cap ? 2 * ks->cap : 16;
        const char **ns = calloc(cap, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < ks->cap; i++) {
            if (!ks->slot[i]) continue;
            size_t h = key_hash(ks->slot[i]) & (cap - 1);
            while (ns[h]) h = (h + 1) & (cap - 1);
            ns[h] = ks->slot[i];
        }
        free(ks->slot);
        ks->slot = ns;
        ks->cap = cap;
    }
    size_t h = key_hash(key) & (ks->cap - 1);
    for (; ks->slot[h]; h = (h + 1) & (ks->cap - 1))
        if (strcmp(ks->slot[h], key) == 0) return 1;
    ks->slot[h] = key;
    ks->n++;
    return 0;
}

static Json *parse_container(Parser *ps, int depth, int is_obj) {
    if (depth >= JSON_MAX_DEPTH) return fail(ps, "nesting too deep");
    Json *j = node(is_obj ? JSON_OBJ : JSON_ARR);
    if (!j) return fail(ps, "out of memory");
    char close = is_obj ? '}' : ']';
    ps->p++;
    skip_ws(ps);
    Json **tail = &j->child;
    KeySet ks = {0};
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return j; }
    for (;;) {
        char *key = NULL;
        if (is_obj) {
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') { json_free(j); free(ks.slot); return fail(ps, "expected a string key"); }
            size_t kl;
            key = parse_string(ps, &kl);
            if (!key) { json_free(j); free(ks.slot); return NULL; }
            if (strlen(key) != kl) { free(key); json_free(j); free(ks.slot); return fail(ps, "NUL in key"); }
            int dup = keyset_add(&ks, key);
            if (dup) {
                free(key); json_free(j); free(ks.slot);
                return fail(ps, dup < 0 ? "out of memory" : "duplicate key");
            }
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') { free(key); json_free(j); free(ks.slot); return fail(ps, "expected ':'"); }
            ps->p++;
        }
        Json *v = parse_value(ps, depth + 1);
        if (!v) { free(key); json_free(j); free(ks.slot); return NULL; }
        v->key = key;
        *tail = v;
        tail = &v->next;
        j->len++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        free(ks.slot);
        if (ps->p < ps->end && *ps->p == close) { ps->p++; return j; }
        json_free(j);
        return fail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static Json *parse_value(Parser *ps, int depth) {
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, "unexpected end of input");
    char c = *ps->p;
    if (c == '{') return parse_container(ps, depth, 1);
    if (c == '[') return parse_container(ps, depth, 0);
    if (c == '"') {
        Json *j = node(JSON_STR);
        if (!j) return fail(ps, "out of memory");
        j->text = parse_string(ps, &j->len);
        if (!j->text) { free(j); return NULL; }
        return j;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(ps);
    if (lit(ps, "true")) { Json *j = node(JSON_BOOL); if (j) j->boolean = 1; return j ? j : fail(ps, "out of memory"); }
    if (lit(ps, "false")) { Json *j = node(JSON_BOOL); return j ? j : fail(ps, "out of memory"); }
    if (lit(ps, "null")) { Json *j = node(JSON_NULL); return j ? j : fail(ps, "out of memory"); }
    return fail(ps, "unexpected character");
}

Json *json_parse(const char *text, size_t len, Err *err) {
    Parser ps = {text, text, text + len, err, 0};
    Json *j = parse_value(&ps, 0);
    if (!j) {
        if (!ps.failed) fail(&ps, "out of memory");
        return NULL;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        json_free(j);
        fail(&ps, "trailing characters after the value");
        return NULL;
    }
    return j;
}

void json_free(Json *j) {
    while (j) {
        Json *next = j->next;
        json_free(j->child);
        free(j->key);
        free(j->text);
        free(j);
        j = next;
    }
}

const Json *json_get(const Json *j, const char *key) {
    if (!j || j->type != JSON_OBJ) return NULL;
    for (const Json *c = j->child; c; c = c->next)
        if (strcmp(c->key, key) == 0) return c;
    return NULL;
}

const Json *json_at(const Json *j, size_t i) {
    if (!j || j->type != JSON_ARR) return NULL;
    const Json *c = j->child;
    while (c && i--) c = c->next;
    return c;
}

int json_int64(const Json *j, int64_t *out) {
    if (!j || j->type != JSON_NUM) return -1;
    for (const char *p = j->text; *p; p++)
        if (*p == '.' || *p == 'e' || *p == 'E') return -1;
    errno = 0;
    char *end;
    long long v = strtoll(j->text, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

const char *json_type_name(JsonType t) {
    static const char *n[] = {"null", "boolean", "number", "string", "array", "object"};
    return n[t];
}

// ---- writer ----

static void jb_put(JsonBuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *ns = realloc(b->s, cap);
        CHECKF(ns, "out of memory writing JSON");
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void jb_puts(JsonBuf *b, const char *s) { jb_put(b, s, strlen(s)); }

// Separator before a value (or a key) at the current depth.
static void jb_sep(JsonBuf *b) {
    if (b->after_key) { b->after_key = 0; return; }
    if (b->need_comma[b->depth]) jb_puts(b, ",");
    b->need_comma[b->depth] = 1;
}

void jb_init(JsonBuf *b) { memset(b, 0, sizeof *b); jb_put(b, "", 0); }
void jb_free(JsonBuf *b) { free(b->s); memset(b, 0, sizeof *b); }

static void jb_open(JsonBuf *b, const char *c) {
    jb_sep(b);
    jb_puts(b, c);
    CHECK(b->depth + 1 < (int)sizeof b->need_comma);
    b->need_comma[++b->depth] = 0;
}
static void jb_close(JsonBuf *b, const char *c) {
    CHECK(b->depth > 0);
    b->depth--;
    jb_puts(b, c);
}
void jb_obj_begin(JsonBuf *b) { jb_open(b, "{"); }
void jb_obj_end(JsonBuf *b) { jb_close(b, "}"); }
void jb_arr_begin(JsonBuf *b) { jb_open(b, "["); }
void jb_arr_end(JsonBuf *b) { jb_close(b, "]"); }

static void jb_quoted(JsonBuf *b, const char *s) {
    jb_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char tmp[8];
        switch (*p) {
        case '"': jb_puts(b, "\\\""); break;
        case '\\': jb_puts(b, "\\\\"); break;
        case '\n': jb_puts(b, "\\n"); break;
        case '\r': jb_puts(b, "\\r"); break;
        case '\t': jb_puts(b, "\\t"); break;
        default:
            if (*p < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", *p); jb_puts(b, tmp); }
            else jb_put(b, (const char *)p, 1);
        }
    }
    jb_puts(b, "\"");
}

void jb_key(JsonBuf *b, const char *key) {
    jb_sep(b);
    jb_quoted(b, key);
    jb_puts(b, ":");
    b->after_key = 1;
}
void jb_str(JsonBuf *b, const char *s) { jb_sep(b); jb_quoted(b, s); }
void jb_int(JsonBuf *b, int64_t v) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    jb_sep(b);
    jb_puts(b, tmp);
}
// v printed with a "%.*g" or "%.*f" format; non-finite values are null.
static void put_number(JsonBuf *b, const char *fmt, int prec, double v) {
    char tmp[400];
    jb_sep(b);
    if (!isfinite(v)) { jb_puts(b, "null"); return; }
    snprintf(tmp, sizeof tmp, fmt, prec, v);
    jb_puts(b, tmp);
}
void jb_numf(JsonBuf *b, double v, int sig) { put_number(b, "%.*g", sig, v); }
void jb_fixed(JsonBuf *b, double v, int decimals) { put_number(b, "%.*f", decimals, v); }
void jb_num(JsonBuf *b, double v) {
    // The shortest of %.15g..%.17g that reads back to the same double.
    char tmp[40];
    jb_sep(b);
    if (!isfinite(v)) { jb_puts(b, "null"); return; }
    for (int sig = 15; sig <= 17; sig++) {
        snprintf(tmp, sizeof tmp, "%.*g", sig, v);
        if (strtod(tmp, NULL) == v) break;
    }
    jb_puts(b, tmp);
}
void jb_bool(JsonBuf *b, int v) { jb_sep(b); jb_puts(b, v ? "true" : "false"); }
void jb_null(JsonBuf *b) { jb_sep(b); jb_puts(b, "null"); }

int jb_members(JsonBuf *b, const char *obj) {
    Err e;
    size_t n = strlen(obj);
    Json *j = json_parse(obj, n, &e);
    int ok = j && j->type == JSON_OBJ;
    size_t members = ok ? j->len : 0;
    json_free(j);
    if (!ok) return -1;
    if (!members) return 0;
    const char *lo = strchr(obj, '{') + 1, *hi = strrchr(obj, '}');   // the members lie between
    jb_sep(b);
    jb_put(b, lo, (size_t)(hi - lo));
    return 0;
}

void jb_raw(JsonBuf *b, const char *json) {
    if (strspn(json, " \t\r\n") != strlen(json)) jb_sep(b);   // white space is no value
    jb_puts(b, json);
}
