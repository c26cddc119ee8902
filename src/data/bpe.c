#include "data/bpe.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/json.h"
#include "data/heap.h"
#include "data/unicode.h"

// ---- pre-tokenizer ----

typedef struct { int cls; int len; } Ch;

static Ch char_at(const unsigned char *s, size_t n, size_t i) {
    uint32_t cp;
    Ch c;
    c.len = utf8_next(s + i, n - i, &cp);
    c.cls = cp == 0xFFFFFFFFu ? UC_OTHER : unicode_class(cp);
    return c;
}

// End of a run of characters of class cls (or, with cls < 0, of characters
// that are neither letters, numbers nor space) starting at i.
static size_t run_end(const unsigned char *s, size_t n, size_t i, int cls) {
    while (i < n) {
        Ch c = char_at(s, n, i);
        if (cls >= 0 ? c.cls != cls : c.cls != UC_OTHER) break;
        i += (size_t)c.len;
    }
    return i;
}

size_t bpe_piece_end(const unsigned char *s, size_t n, size_t i) {
    // 's 't 're 've 'm 'll 'd
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
    Ch c = char_at(s, n, i);
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
    size_t j = i;
    Ch d = c;
    if (s[i] == ' ' && i + 1 < n) {
        d = char_at(s, n, i + 1);
        j = i + 1;
    }
    if (d.cls != UC_SPACE) return run_end(s, n, j, d.cls == UC_OTHER ? -1 : d.cls);
    // '\s+(?!\S)' then '\s+': the white-space run, minus its last character
    // when a non-space follows and the run is longer than one.
    size_t k = i, last = i;
    while (k < n) {
        Ch e = char_at(s, n, k);
        if (e.cls != UC_SPACE) break;
        last = k;
        k += (size_t)e.len;
    }
    if (k == i) return i + (size_t)c.len;   // unreachable for well-formed classes
    if (k < n && last > i) return last;
    return k;
}

static int printable(unsigned char c) { return c > 0x20 && c < 0x7F; }

size_t bpe_split_point(const unsigned char *t, size_t from, size_t limit) {
    for (size_t p = from < 2 ? 2 : from; p < limit; p++) {
        unsigned char a = t[p - 2], b = t[p - 1], c = t[p];
        if ((b == '\n' || b == '\r') && printable(a) && printable(c)) return p;   // x\n|y, x\r|y
        if (b == '\r' && c == '\n' && printable(a) && p + 1 < limit && printable(t[p + 1])) return p;   // x\r|\ny
    }
    return limit;
}

// ---- vocabulary ----

typedef struct { uint64_t key; int rank, merged; } PairSlot;   // key 0 = empty

struct Bpe {
    int vocab, eot;
    unsigned char *bytes;      // all token bytes
    size_t *off;               // token i is bytes[off[i] .. off[i+1])
    int byte_id[256];          // id of each single byte
    PairSlot *pairs;           // (left id, right id) -> rank, merged id
    size_t pair_mask;
};

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static const PairSlot *pair_find(const Bpe *b, int l, int r) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    for (size_t h = mix64(key) & b->pair_mask;; h = (h + 1) & b->pair_mask) {
        if (b->pairs[h].key == key) return &b->pairs[h];
        if (b->pairs[h].key == 0) return NULL;
    }
}

static int pair_insert(Bpe *b, int l, int r, int rank, int merged) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    for (size_t h = mix64(key) & b->pair_mask;; h = (h + 1) & b->pair_mask) {
        if (b->pairs[h].key == key) return -1;   // duplicate merge
        if (b->pairs[h].key == 0) {
            b->pairs[h] = (PairSlot){key, rank, merged};
            return 0;
        }
    }
}

// GPT-2 stores bytes as printable code points: the printable ones as
// themselves, the rest as 256, 257, ... in byte order. Inverse map:
static void unicode_to_byte_table(int16_t inv[512]) {
    for (int i = 0; i < 512; i++) inv[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        inv[printable ? b : 256 + n++] = (int16_t)b;
    }
}

// Converts a token string in GPT-2's printable form into raw bytes (out has
// room for len bytes); returns the byte count or -1.
static int to_bytes(const char *s, size_t len, const int16_t inv[512], unsigned char *out) {
    int n = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int l = utf8_next((const unsigned char *)s + i, len - i, &cp);
        if (cp >= 512 || inv[cp] < 0) return -1;
        out[n++] = (unsigned char)inv[cp];
        i += (size_t)l;
    }
    return n;
}

// A temporary byte-string -> id map used while reading vocab.bpe.
typedef struct { uint64_t h; int id; } StrSlot;

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull ^ n;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ull; }
    return mix64(h) | 1;
}

static int str_lookup(const Bpe *b, const StrSlot *t, size_t mask, const unsigned char *p, size_t n) {
    uint64_t h = hash_bytes(p, n);
    for (size_t k = h & mask;; k = (k + 1) & mask) {
        if (t[k].h == 0) return -1;
        if (t[k].h == h) {
            int id = t[k].id;
            if (b->off[id + 1] - b->off[id] == n && memcmp(b->bytes + b->off[id], p, n) == 0) return id;
        }
    }
}

// Reads encoder.json (token in GPT-2's printable form: id) into b's vocab,
// eot and token bytes.
static int read_encoder(Bpe *b, const char *path, const int16_t inv[512], Err *err) {
    size_t len;
    char *text;
    if (file_read(path, &text, &len, 0, err)) return -1;
    Json *j = json_parse(text, len, err);
    free(text);
    if (!j) { err_prefix(err, path); return -1; }
    int rc = -1;
    size_t *blen = NULL, *bstart = NULL;
    int *seen = NULL;
    unsigned char *tmp = NULL;
    if (j->type != JSON_OBJ || j->len < 256 || j->len > (1u << 24)) {
        err_set(err, ERR_USAGE, "%s: expected an object of at least 256 token: id entries", path);
        goto done;
    }
    b->vocab = (int)j->len;
    size_t total = 0;
    for (const Json *m = j->child; m; m = m->next) total += strlen(m->key);
    b->bytes = malloc(total + 1);
    b->off = calloc((size_t)b->vocab + 1, sizeof *b->off);
    blen = calloc((size_t)b->vocab, sizeof *blen);
    bstart = calloc((size_t)b->vocab, sizeof *bstart);
    seen = calloc((size_t)b->vocab, sizeof *seen);
    tmp = malloc(total + 1);
    if (!b->bytes || !b->off || !blen || !bstart || !seen || !tmp) {
        err_set(err, ERR_RUN, "out of memory");
        goto done;
    }
    // Token bytes go in the order of the file, then are re-laid by id.
    size_t pos = 0;
    for (const Json *m = j->child; m; m = m->next) {
        int64_t id;
        if (json_int64(m, &id) || id < 0 || id >= b->vocab || seen[id]) {
            err_set(err, ERR_USAGE, "%s: token '%s' has a missing, duplicate or out-of-range id", path, m->key);
            goto done;
        }
        seen[id] = 1;
        int n;
        if (!strcmp(m->key, "<|endoftext|>")) {
            b->eot = (int)id;
            memcpy(tmp + pos, m->key, 13);
            n = 13;
        } else if ((n = to_bytes(m->key, strlen(m->key), inv, tmp + pos)) <= 0) {
            err_set(err, ERR_USAGE, "%s: token '%s' is not in GPT-2's byte encoding", path, m->key);
            goto done;
        }
        bstart[id] = pos;
        blen[id] = (size_t)n;
        pos += (size_t)n;
    }
    for (int i = 0; i < b->vocab; i++) {
        b->off[i + 1] = b->off[i] + blen[i];
        memcpy(b->bytes + b->off[i], tmp + bstart[i], blen[i]);
    }
    rc = 0;
done:
    free(tmp); free(blen); free(bstart); free(seen);
    json_free(j);
    return rc;
}

// b's byte_id: the token of each single byte (every byte has one, or an
// error naming path).
static int find_byte_ids(Bpe *b, const char *path, Err *err) {
    for (int c = 0; c < 256; c++) b->byte_id[c] = -1;
    for (int i = 0; i < b->vocab; i++)
        if (i != b->eot && b->off[i + 1] - b->off[i] == 1) b->byte_id[b->bytes[b->off[i]]] = i;
    for (int c = 0; c < 256; c++)
        if (b->byte_id[c] < 0) return err_set(err, ERR_USAGE, "%s: byte 0x%02x has no token", path, c);
    return 0;
}

// The byte-string -> id table of b's tokens but end-of-text (*mask + 1
// slots), which reading vocab.bpe looks tokens up in; NULL when out of memory.
static StrSlot *str_table_new(const Bpe *b, size_t *mask) {
    size_t m = 1;
    while (m < 2 * (size_t)b->vocab) m <<= 1;
    StrSlot *tab = calloc(m, sizeof *tab);
    if (!tab) return NULL;
    m--;
    for (int i = 0; i < b->vocab; i++) {
        if (i == b->eot) continue;
        uint64_t h = hash_bytes(b->bytes + b->off[i], b->off[i + 1] - b->off[i]);
        size_t k = h & m;
        while (tab[k].h) k = (k + 1) & m;
        tab[k] = (StrSlot){h, i};
    }
    *mask = m;
    return tab;
}

// One line of vocab.bpe, "a b" in GPT-2's printable form (ll bytes, no line
// end), into b's pair table as the merge of this rank. buf has room for ll
// bytes. Returns NULL, or what is wrong with the line.
static const char *add_merge(Bpe *b, const char *p, size_t ll, int rank, const StrSlot *tab, size_t mask,
                             const int16_t inv[512], unsigned char *buf) {
    const char *sp = memchr(p, ' ', ll);
    if (!sp || sp == p || sp == p + ll - 1 || memchr(sp + 1, ' ', (size_t)(p + ll - sp - 1)))
        return "expected two tokens separated by one space";
    // a's bytes, then b's right after them: buf[0, na + nb) is the merged token
    int na = to_bytes(p, (size_t)(sp - p), inv, buf);
    if (na <= 0) return "not in GPT-2's byte encoding";
    int nb = to_bytes(sp + 1, (size_t)(p + ll - sp - 1), inv, buf + na);
    if (nb <= 0) return "not in GPT-2's byte encoding";
    int ia = str_lookup(b, tab, mask, buf, (size_t)na), ib = str_lookup(b, tab, mask, buf + na, (size_t)nb);
    int ic = str_lookup(b, tab, mask, buf, (size_t)(na + nb));
    if (ia < 0 || ib < 0 || ic < 0) return "merge of tokens not in encoder.json";
    if (pair_insert(b, ia, ib, rank, ic)) return "duplicate merge";
    return NULL;
}

// Reads vocab.bpe (an optional #version line, then one merge a line, ranked
// in file order) into b's pair table. Errors name the file and line.
static int read_merges(Bpe *b, const char *path, const StrSlot *tab, size_t mask, const int16_t inv[512], Err *err) {
    char *merges;
    size_t len;
    if (file_read(path, &merges, &len, 0, err)) return -1;
    b->pair_mask = 1;
    while (b->pair_mask < 2 * (size_t)b->vocab) b->pair_mask <<= 1;
    b->pairs = calloc(b->pair_mask, sizeof *b->pairs);
    b->pair_mask--;
    unsigned char *buf = malloc(len + 1);
    int line = 0, rank = 0, bad = !b->pairs || !buf;
    if (bad) err_set(err, ERR_RUN, "out of memory");
    for (char *p = merges; !bad && p < merges + len;) {
        char *e = memchr(p, '\n', (size_t)(merges + len - p));
        if (!e) e = merges + len;
        line++;
        size_t ll = (size_t)(e - p);
        if (ll && p[ll - 1] == '\r') ll--;
        int header = line == 1 && ll >= 8 && !memcmp(p, "#version", 8);
        if (ll > 0 && !header) {
            const char *why = add_merge(b, p, ll, rank++, tab, mask, inv, buf);
            if (why) {
                err_set(err, ERR_USAGE, "%s line %d: %s", path, line, why);
                bad = 1;
            } else if ((size_t)rank >= b->pair_mask / 2) {
                err_set(err, ERR_USAGE, "%s: more merges than tokens", path);
                bad = 1;
            }
        }
        p = e + 1;
    }
    free(buf);
    free(merges);
    return bad ? -1 : 0;
}

int bpe_load(Bpe **out, const char *dir, Err *err) {
    *out = NULL;
    char path[4200];
    Bpe *b = calloc(1, sizeof *b);
    if (!b) return err_set(err, ERR_RUN, "out of memory");
    b->eot = -1;
    int16_t inv[512];
    unicode_to_byte_table(inv);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    if (read_encoder(b, path, inv, err) || find_byte_ids(b, path, err)) {
        bpe_free(b);
        return -1;
    }
    size_t mask;
    StrSlot *tab = str_table_new(b, &mask);
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    int rc = tab ? read_merges(b, path, tab, mask, inv, err) : err_set(err, ERR_RUN, "out of memory");
    free(tab);
    if (rc) {
        bpe_free(b);
        return -1;
    }
    *out = b;
    return 0;
}

void bpe_free(Bpe *b) {
    if (!b) return;
    free(b->bytes);
    free(b->off);
    free(b->pairs);
    free(b);
}

int bpe_vocab(const Bpe *b) { return b->vocab; }
int bpe_eot(const Bpe *b) { return b->eot; }

const unsigned char *bpe_token(const Bpe *b, int id, size_t *len) {
    if (id < 0 || id >= b->vocab) return NULL;
    *len = b->off[id + 1] - b->off[id];
    return b->bytes + b->off[id];
}

// ---- encoding state: merge scratch and the piece cache ----

enum { CACHE_SLOTS = 1 << 16, CACHE_MAX_PIECE = 64 };

typedef struct { uint64_t h; uint32_t off; uint16_t nbytes, nids; } CacheSlot;

struct BpeState {
    const Bpe *b;
    CacheSlot *slots;
    unsigned char *keys;      // cached piece bytes
    int *ids;                 // cached ids
    size_t keys_used, ids_used, cap, used_slots;
    // merge scratch, grown as needed
    int *sym, *prev, *next;
    Heap heap;                // candidate merges by (rank, position)
    size_t scratch;
};

BpeState *bpe_state_new(const Bpe *b) {
    BpeState *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->b = b;
    s->cap = (size_t)CACHE_SLOTS * 8;
    s->slots = calloc(CACHE_SLOTS, sizeof *s->slots);
    s->keys = malloc(s->cap);
    s->ids = malloc(s->cap * sizeof *s->ids);
    if (!s->slots || !s->keys || !s->ids) { bpe_state_free(s); return NULL; }
    return s;
}

void bpe_state_free(BpeState *s) {
    if (!s) return;
    free(s->slots); free(s->keys); free(s->ids);
    free(s->sym); free(s->prev); free(s->next);
    heap_free(&s->heap);
    free(s);
}

// The pair starting at position pos, merged by the merge of this rank: the
// heap takes the lowest rank first, the leftmost pair among equal ranks.
static HeapItem merge_item(int rank, int pos) {
    return (HeapItem){(uint64_t)(uint32_t)rank << 32 | (uint32_t)pos, pos, rank};
}

// Merges the bytes p[0..n) into ids; returns the count written to out (n at most).
static size_t merge_piece(BpeState *s, const unsigned char *p, size_t n, int *out) {
    const Bpe *b = s->b;
    if (n > s->scratch) {
        size_t cap = n * 2;
        free(s->sym); free(s->prev); free(s->next);
        s->sym = malloc(cap * sizeof *s->sym);
        s->prev = malloc(cap * sizeof *s->prev);
        s->next = malloc(cap * sizeof *s->next);
        int heap_ok = heap_reserve(&s->heap, 3 * cap) == 0;
        CHECKF(s->sym && s->prev && s->next && heap_ok, "out of memory in the tokenizer");
        s->scratch = cap;
    }
    int *sym = s->sym, *prv = s->prev, *nxt = s->next;
    Heap *heap = &s->heap;
    heap_clear(heap);
    for (size_t i = 0; i < n; i++) {
        sym[i] = b->byte_id[p[i]];
        prv[i] = (int)i - 1;
        nxt[i] = i + 1 < n ? (int)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const PairSlot *ps = pair_find(b, sym[i], sym[i + 1]);
        if (ps) heap_push(heap, merge_item(ps->rank, (int)i));
    }
    while (heap->n) {
        HeapItem it = heap_pop(heap);
        int i = it.node, j = nxt[i];
        if (sym[i] < 0 || j < 0) continue;                  // merged away, or now last
        const PairSlot *ps = pair_find(b, sym[i], sym[j]);
        if (!ps || ps->rank != it.tag) continue;             // stale entry
        sym[i] = ps->merged;
        sym[j] = -1;
        nxt[i] = nxt[j];
        if (nxt[j] >= 0) prv[nxt[j]] = i;
        if (prv[i] >= 0) {
            const PairSlot *q = pair_find(b, sym[prv[i]], sym[i]);
            if (q) heap_push(heap, merge_item(q->rank, prv[i]));
        }
        if (nxt[i] >= 0) {
            const PairSlot *q = pair_find(b, sym[i], sym[nxt[i]]);
            if (q) heap_push(heap, merge_item(q->rank, i));
        }
    }
    size_t k = 0;
    for (int i = 0; i >= 0; i = nxt[i]) out[k++] = sym[i];
    return k;
}

// ids of one piece, from the cache or merged (and cached when short).
static size_t encode_piece(BpeState *s, const unsigned char *p, size_t n, int *tmp) {
    if (n == 1) { tmp[0] = s->b->byte_id[p[0]]; return 1; }
    if (n > CACHE_MAX_PIECE) return merge_piece(s, p, n, tmp);
    uint64_t h = hash_bytes(p, n);
    size_t k = h & (CACHE_SLOTS - 1);
    for (;; k = (k + 1) & (CACHE_SLOTS - 1)) {
        CacheSlot *c = &s->slots[k];
        if (c->h == 0) break;
        if (c->h == h && c->nbytes == n && !memcmp(s->keys + c->off, p, n)) {
            memcpy(tmp, s->ids + c->off, c->nids * sizeof *tmp);
            return c->nids;
        }
    }
    size_t m = merge_piece(s, p, n, tmp);
    if (s->used_slots * 2 > CACHE_SLOTS || s->keys_used + n > s->cap) {   // full: start over
        memset(s->slots, 0, CACHE_SLOTS * sizeof *s->slots);
        s->used_slots = s->keys_used = 0;
        k = h & (CACHE_SLOTS - 1);
    }
    // keys and ids share an offset (ids never outnumber bytes)
    s->slots[k] = (CacheSlot){h, (uint32_t)s->keys_used, (uint16_t)n, (uint16_t)m};
    memcpy(s->keys + s->keys_used, p, n);
    memcpy(s->ids + s->keys_used, tmp, m * sizeof *tmp);
    s->keys_used += n;
    s->used_slots++;
    return m;
}

size_t bpe_encode(BpeState *s, const char *text, size_t len, int *ids, size_t cap) {
    const unsigned char *t = (const unsigned char *)text;
    size_t count = 0, i = 0;
    int small[CACHE_MAX_PIECE];
    while (i < len) {
        size_t e = bpe_piece_end(t, len, i), n = e - i;
        if (n <= CACHE_MAX_PIECE) {
            size_t m = encode_piece(s, t + i, n, small);
            for (size_t k = 0; k < m; k++, count++) if (count < cap) ids[count] = small[k];
        } else {
            int *big = malloc(n * sizeof *big);
            CHECKF(big, "out of memory in the tokenizer");
            size_t m = merge_piece(s, t + i, n, big);
            for (size_t k = 0; k < m; k++, count++) if (count < cap) ids[count] = big[k];
            free(big);
        }
        i = e;
    }
    return count;
}
