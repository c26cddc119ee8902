#include "data/spm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "data/heap.h"

// Open-addressing tables: pieces by their bytes, merges by their pair.
typedef struct { uint32_t key; int rank, out; } MergeSlot;   // key a·65536 + b + 1 (0: empty)

struct Spm {
    int n;                  // pieces
    char *text;             // vocab.txt's bytes, '\n' replaced by '\0'
    const char **piece;     // n
    int *len;               // n
    int *byte_id;           // 256: the id of <0xNN>
    int *slot;              // piece table: id + 1, 0 empty; cap entries
    size_t cap;
    MergeSlot *merge;       // mcap entries
    size_t mcap;
};

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

// The id of the piece with these bytes, or -1 (the last of equal pieces,
// as a Map filled in id order keeps).
static int piece_id(const Spm *s, const char *p, size_t n) {
    for (size_t i = hash_bytes(p, n) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        int id = s->slot[i] - 1;
        if (id < 0) return -1;
        if ((size_t)s->len[id] == n && !memcmp(s->piece[id], p, n)) return id;
    }
}

static void piece_put(Spm *s, int id) {
    size_t n = (size_t)s->len[id];
    for (size_t i = hash_bytes(s->piece[id], n) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        int old = s->slot[i] - 1;
        if (old < 0 || ((size_t)s->len[old] == n && !memcmp(s->piece[old], s->piece[id], n))) {
            s->slot[i] = id + 1;
            return;
        }
    }
}

static MergeSlot *merge_slot(const Spm *s, uint32_t key) {
    for (size_t i = (key * 2654435761u) & (s->mcap - 1);; i = (i + 1) & (s->mcap - 1))
        if (s->merge[i].key == key || s->merge[i].key == 0) return &s->merge[i];
}

void spm_free(Spm *s) {
    if (!s) return;
    free(s->text);
    free(s->piece);
    free(s->len);
    free(s->byte_id);
    free(s->slot);
    free(s->merge);
    free(s);
}

int spm_vocab(const Spm *s) { return s->n; }

int spm_load(Spm **out, const char *dir, Err *err) {
    *out = NULL;
    char path[4200];
    Spm *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, ERR_RUN, "out of memory");
    size_t vlen, mlen;
    char *mbuf = NULL;
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    if (file_read(path, &s->text, &vlen, 16 << 20, err)) goto fail;
    snprintf(path, sizeof path, "%s/merges.bin", dir);
    if (file_read(path, &mbuf, &mlen, 16 << 20, err)) goto fail;
    s->n = 1;
    for (size_t i = 0; i < vlen; i++) s->n += s->text[i] == '\n';
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    if (s->n < 259 || s->n > 65535 || mlen % 4) {
        err_set(err, ERR_USAGE, "%s: %d pieces and %zu bytes of merges: not a LLaMA vocabulary", path, s->n, mlen);
        goto fail;
    }
    s->piece = calloc((size_t)s->n, sizeof *s->piece);
    s->len = calloc((size_t)s->n, sizeof *s->len);
    s->byte_id = malloc(256 * sizeof *s->byte_id);
    for (s->cap = 1; s->cap < 2 * (size_t)s->n; s->cap *= 2) {}
    s->slot = calloc(s->cap, sizeof *s->slot);
    size_t nm = mlen / 4;
    for (s->mcap = 1; s->mcap < 2 * nm + 2; s->mcap *= 2) {}
    s->merge = calloc(s->mcap, sizeof *s->merge);
    if (!s->piece || !s->len || !s->byte_id || !s->slot || !s->merge) {
        err_set(err, ERR_RUN, "out of memory");
        goto fail;
    }
    char *p = s->text;
    for (int id = 0; id < s->n; id++) {
        char *e = memchr(p, '\n', vlen - (size_t)(p - s->text));
        if (!e) e = s->text + vlen;
        s->piece[id] = p;
        s->len[id] = (int)(e - p);
        if (e < s->text + vlen) *e = 0;
        p = e + 1;
        piece_put(s, id);
    }
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        if ((s->byte_id[b] = piece_id(s, hex, 6)) < 0) {
            err_set(err, ERR_USAGE, "%s: no byte piece %s", path, hex);
            goto fail;
        }
    }
    // merge m of pieces a, b: rank 2m + 1 (a later equal pair wins), the
    // result the piece spelled a·b
    snprintf(path, sizeof path, "%s/merges.bin", dir);
    for (size_t m = 0; m < nm; m++) {
        const unsigned char *q = (const unsigned char *)mbuf + 4 * m;
        int a = q[0] | q[1] << 8, b = q[2] | q[3] << 8;
        if (a >= s->n || b >= s->n) {
            err_set(err, ERR_USAGE, "%s: merge %zu names piece %d of %d", path, m, a > b ? a : b, s->n);
            goto fail;
        }
        char cat[512];
        size_t la = (size_t)s->len[a], lb = (size_t)s->len[b];
        int r = -1;
        if (la + lb <= sizeof cat) {
            memcpy(cat, s->piece[a], la);
            memcpy(cat + la, s->piece[b], lb);
            r = piece_id(s, cat, la + lb);
        }
        MergeSlot *ms = merge_slot(s, (uint32_t)a * 65536u + (uint32_t)b + 1);
        *ms = (MergeSlot){(uint32_t)a * 65536u + (uint32_t)b + 1, (int)(2 * m + 1), r};
    }
    free(mbuf);
    *out = s;
    return 0;
fail:
    free(mbuf);
    spm_free(s);
    return -1;
}

// ---- encoding ----

typedef struct { int id, pos, prev, next, version, dead; } Node;

// A merge's priority, rank + position / length, as a heap key: a positive
// double's bits, read as an integer, order as the double does.
static uint64_t prio_key(double prio) {
    uint64_t k;
    memcpy(&k, &prio, sizeof k);
    return k;
}

// Bytes of the UTF-8 character at p (1 for a byte that does not start a
// valid one) and its UTF-16 length in *units.
static size_t utf8_char(const unsigned char *p, size_t n, int *units) {
    *units = 1;
    unsigned c = p[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || k > n) return 1;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 1;
    uint32_t cp = k == 1 ? c : k == 2 ? (c & 31) << 6 | (p[1] & 63)
                : k == 3 ? (c & 15) << 12 | (p[1] & 63) << 6 | (p[2] & 63)
                         : (c & 7) << 18 | (p[1] & 63) << 12 | (p[2] & 63) << 6 | (p[3] & 63);
    int overlong = (k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 1;
    *units = cp >= 0x10000 ? 2 : 1;
    return k;
}

// The pair (node, its next) as a heap entry, when the vocabulary merges it.
static void consider(const Spm *s, Node *nd, int i, double len16, Heap *h) {
    if (nd[i].next < 0) return;
    const MergeSlot *m = merge_slot(s, (uint32_t)nd[i].id * 65536u + (uint32_t)nd[nd[i].next].id + 1);
    if (!m->key || m->out < 0) return;
    heap_push(h, (HeapItem){prio_key(m->rank + nd[i].pos / len16), i, nd[i].version});
}

size_t spm_encode(const Spm *s, const char *text, size_t len, int *ids, size_t cap) {
    if (len == 0) return 0;
    const unsigned char *t = (const unsigned char *)text;
    // initial pieces: <s>, "▁", then each character (a space is "▁")
    Node *nd = malloc((len + 2) * sizeof *nd);
    Heap h = {0};
    int heap_ok = heap_reserve(&h, 2 * (len + 2) + 1) == 0;
    CHECKF(nd && heap_ok, "out of memory encoding %zu bytes", len);
    size_t n = 0, u16 = 0;
    int space = piece_id(s, "\xe2\x96\x81", 3);
    nd[n++] = (Node){SPM_BOS, 0, -1, -1, 0, 0};
    nd[n++] = (Node){space, 1, -1, -1, 0, 0};
    for (size_t i = 0; i < len;) {
        int units;
        size_t k = utf8_char(t + i, len - i, &units);
        int id = t[i] == ' ' ? space : k > 1 || t[i] < 0x80 ? piece_id(s, text + i, k) : -1;
        if (id >= 0) {
            nd[n] = (Node){id, (int)n, -1, -1, 0, 0};
            n++;
        } else {
            for (size_t j = 0; j < k; j++, n++) nd[n] = (Node){s->byte_id[t[i + j]], (int)n, -1, -1, 0, 0};
        }
        u16 += (size_t)units;
        i += k;
    }
    double len16 = (double)u16;
    for (size_t i = 0; i < n; i++) {
        nd[i].prev = (int)i - 1;
        nd[i].next = i + 1 < n ? (int)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) consider(s, nd, (int)i, len16, &h);
    // merge the first pair in order; a merge changes its left node (which
    // becomes the merged piece) and the pair ending at it
    while (h.n) {
        HeapItem e = heap_pop(&h);
        Node *l = &nd[e.node];
        if (l->dead || l->version != e.tag || l->next < 0) continue;
        Node *r = &nd[l->next];
        const MergeSlot *m = merge_slot(s, (uint32_t)l->id * 65536u + (uint32_t)r->id + 1);
        r->dead = 1;
        l->id = m->out;
        l->next = r->next;
        l->version++;
        if (r->next >= 0) nd[r->next].prev = e.node;
        if (l->prev >= 0) {
            nd[l->prev].version++;
            consider(s, nd, l->prev, len16, &h);
        }
        consider(s, nd, e.node, len16, &h);
    }
    size_t out = 0;
    for (int i = 0; i >= 0; i = nd[i].next) {
        if (out < cap) ids[out] = nd[i].id;
        out++;
    }
    free(nd);
    heap_free(&h);
    return out;
}

size_t spm_decode(const Spm *s, int id, char *out, size_t cap) {
    if (id < 0 || id >= s->n) return 0;
    const char *p = s->piece[id];
    size_t n = (size_t)s->len[id];
    if (id == SPM_UNK || id == SPM_BOS || id == SPM_EOS) return 0;
    unsigned b;
    if (n == 6 && sscanf(p, "<0x%2X>", &b) == 1) {
        if (cap < 1) return 0;
        out[0] = (char)b;
        return 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int sp = i + 3 <= n && !memcmp(p + i, "\xe2\x96\x81", 3);
        if (k + 1 > cap) return 0;
        if (sp) { out[k++] = ' '; i += 3; }
        else out[k++] = p[i++];
    }
    return k;
}
