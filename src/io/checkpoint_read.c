// io/checkpoint_read.c — reading checkpoints: the step directory found
// (a run's `latest`), meta.json read, every rank file mapped and its index
// checked against the file, and each tensor a stage needs assembled from
// the slices and pieces present. The writer is checkpoint.c.
#include "io/checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/fileio.h"
#include "io/checkpoint_impl.h"
#include "io/meta.h"

static uint32_t get_u32(const unsigned char *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get_u64(const unsigned char *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

typedef struct {
    CkptTensor t;
    const unsigned char *data;
    uint32_t crc;
    int verified;
} Entry;

typedef struct {
    char path[4300];
    void *map;
    size_t len;
} File;

struct Ckpt {
    char dir[4200];
    Json *meta;
    File *files;
    int nfiles;
    Json **index;     // per file
    Entry *e;
    int n;
};

static int resolve(const char *path, char *stepdir, size_t cap, Err *err) {
    char probe[4300];
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode))
        return err_set(err, ERR_USAGE, "%s: no such checkpoint directory", path);
    snprintf(probe, sizeof probe, "%s/meta.json", path);
    if (stat(probe, &st) == 0) { snprintf(stepdir, cap, "%s", path); return 0; }
    snprintf(probe, sizeof probe, "%s/latest", path);
    if (lstat(probe, &st))
        return err_set(err, ERR_USAGE, "%s: neither a checkpoint (no meta.json) nor a run directory (no latest)", path);
    char *line;
    size_t n;
    if (file_read(probe, &line, &n, 4096, err)) return -1;   // names the file and the reason (too large, not regular, …)
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    // one line "step_NNNNNNNN": a step of this directory, nothing else
    if (n != 13 || strncmp(line, "step_", 5) || strspn(line + 5, "0123456789") != 8) {
        free(line);
        return err_set(err, ERR_USAGE, "%s: does not name a step directory (one line step_NNNNNNNN)", probe);
    }
    snprintf(stepdir, cap, "%s/%s", path, line);
    free(line);
    return 0;
}

static int get_dims(const Json *a, int ndim, int64_t *out) {
    if (!a || a->type != JSON_ARR || (int)a->len != ndim) return -1;
    for (int d = 0; d < ndim; d++)
        if (json_int64(json_at(a, (size_t)d), &out[d]) || out[d] < 0) return -1;
    return 0;
}

// Maps, checks and indexes one rank file.
static int open_file(Ckpt *c, int fi, Err *err) {
    File *f = &c->files[fi];
    const char *path = f->path;
    int fd = file_open_regular(path, err);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st)) { close(fd); return err_set(err, ERR_USAGE, "%s: %s", path, strerror(errno)); }
    f->len = (size_t)st.st_size;
    f->map = f->len ? mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (f->len && f->map == MAP_FAILED) { f->map = NULL; return err_set(err, ERR_RUN, "%s: cannot map", path); }
    const unsigned char *u = f->map;
    size_t len = f->len;
    if (len < CKPT_HEADER_BYTES || memcmp(u, CKPT_MAGIC, 8)) return err_set(err, ERR_USAGE, "%s: not a tessera tensor file (bad magic)", path);
    if (get_u32(u + 8) != CKPT_FILE_VERSION) return err_set(err, ERR_USAGE, "%s: unsupported tensor file version %u", path, get_u32(u + 8));
    uint64_t ilen = get_u32(u + 12), dbytes = get_u64(u + 24);
    uint64_t dstart = (CKPT_HEADER_BYTES + ilen + 63) / 64 * 64;
    if (dstart > len || dbytes != len - dstart)
        return err_set(err, ERR_USAGE, "%s: truncated or oversized (header says %llu data bytes, file has %lld)", path,
                       (unsigned long long)dbytes, (long long)len - (long long)dstart);
    if (crc32c(0, u + CKPT_HEADER_BYTES, ilen) != get_u32(u + 16)) return err_set(err, ERR_USAGE, "%s: index checksum mismatch (file corrupt)", path);
    Json *idx = json_parse((const char *)u + CKPT_HEADER_BYTES, ilen, err);
    if (!idx) { err_prefix(err, path); return -1; }
    c->index[fi] = idx;
    const Json *ts = json_get(idx, "tensors");
    if (!ts || ts->type != JSON_ARR) return err_set(err, ERR_USAGE, "%s: index has no 'tensors' array", path);
    Entry *ne = realloc(c->e, (size_t)(c->n + (int)ts->len + 1) * sizeof *ne);
    if (!ne) return err_set(err, ERR_RUN, "out of memory");
    c->e = ne;
    for (const Json *t = ts->child; t; t = t->next) {
        Entry *e = &c->e[c->n];
        memset(e, 0, sizeof *e);
        const Json *nm = json_get(t, "name"), *dt = json_get(t, "dtype"), *sh = json_get(t, "shape");
        int64_t off, nb, crc;
        int nd = sh && sh->type == JSON_ARR ? (int)sh->len : -1;
        if (!nm || nm->type != JSON_STR || !dt || dt->type != JSON_STR || strcmp(dt->text, "f32") || nd < 1 || nd > 3 ||
            get_dims(sh, nd, e->t.shape) || get_dims(json_get(t, "offset"), nd, e->t.offset) ||
            get_dims(json_get(t, "extent"), nd, e->t.extent) || json_int64(json_get(t, "data_offset"), &off) ||
            json_int64(json_get(t, "nbytes"), &nb) || json_int64(json_get(t, "crc32c"), &crc) || off < 0 || nb < 0)
            return err_set(err, ERR_USAGE, "%s: malformed index entry %d", path, c->n);
        uint64_t numel = 1, shape_numel = 1;
        for (int d = 0; d < nd; d++) {   // every sum and product checked: the values are the file's
            if (e->t.offset[d] > e->t.shape[d] || e->t.extent[d] > e->t.shape[d] - e->t.offset[d])
                return err_set(err, ERR_USAGE, "%s: tensor %s: slice outside its shape", path, nm->text);
            if (__builtin_mul_overflow(numel, (uint64_t)e->t.extent[d], &numel) ||
                __builtin_mul_overflow(shape_numel, (uint64_t)e->t.shape[d], &shape_numel) || shape_numel > (1ull << 40))
                return err_set(err, ERR_USAGE, "%s: tensor %s: shape too large", path, nm->text);
        }
        e->t.flat_lo = 0;
        e->t.flat_hi = (int64_t)numel;
        const Json *fl = json_get(t, "flat");
        if (fl) {
            int64_t be[2];
            if (get_dims(fl, 2, be) || be[0] >= be[1] || (uint64_t)be[1] > numel)
                return err_set(err, ERR_USAGE, "%s: tensor %s: malformed 'flat' range", path, nm->text);
            e->t.flat_lo = be[0];
            e->t.flat_hi = be[1];
            numel = (uint64_t)(be[1] - be[0]);
        }
        if ((uint64_t)off > dbytes || (uint64_t)nb > dbytes - (uint64_t)off || (uint64_t)nb != 4 * numel)
            return err_set(err, ERR_USAGE, "%s: tensor %s: data range past the end of the file", path, nm->text);
        e->t.name = nm->text;
        e->t.ndim = nd;
        e->t.nbytes = (uint64_t)nb;
        e->t.file = fi;
        e->data = u + dstart + off;
        e->crc = (uint32_t)crc;
        c->n++;
    }
    return 0;
}

int ckpt_open(Ckpt **out, const char *path, Err *err) {
    *out = NULL;
    Ckpt *c = calloc(1, sizeof *c);
    if (!c) return err_set(err, ERR_RUN, "out of memory");
    char mpath[4300];
    char *text = NULL;
    size_t len;
    int rc_meta;
    if (resolve(path, c->dir, sizeof c->dir, err)) goto fail;
    snprintf(mpath, sizeof mpath, "%s/meta.json", c->dir);
    if (file_read(mpath, &text, &len, 1 << 20, err)) goto fail;
    rc_meta = meta_parse(text, len, mpath, &c->meta, err);
    free(text);
    if (rc_meta) goto fail;
    const Json *files = json_get(c->meta, "files");
    c->nfiles = (int)files->len;
    c->files = calloc((size_t)c->nfiles, sizeof *c->files);
    c->index = calloc((size_t)c->nfiles, sizeof *c->index);
    if (!c->files || !c->index) { err_set(err, ERR_RUN, "out of memory"); goto fail; }
    for (int i = 0; i < c->nfiles; i++) {
        const Json *fn = json_at(files, (size_t)i);
        snprintf(c->files[i].path, sizeof c->files[i].path, "%s/%s", c->dir, fn->text);
        if (open_file(c, i, err)) goto fail;
    }
    *out = c;
    return 0;
fail:
    ckpt_close(c);
    return -1;
}

void ckpt_close(Ckpt *c) {
    if (!c) return;
    for (int i = 0; c->files && i < c->nfiles; i++)
        if (c->files[i].map) munmap(c->files[i].map, c->files[i].len);
    for (int i = 0; c->index && i < c->nfiles; i++) json_free(c->index[i]);
    free(c->index);
    free(c->files);
    free(c->e);
    json_free(c->meta);
    free(c);
}

const char *ckpt_dir(const Ckpt *c) { return c->dir; }
const Json *ckpt_meta(const Ckpt *c) { return c->meta; }
int ckpt_ntensors(const Ckpt *c) { return c->n; }
const CkptTensor *ckpt_tensor(const Ckpt *c, int i) { return &c->e[i].t; }
const char *ckpt_file_name(const Ckpt *c, int file) {
    const char *s = strrchr(c->files[file].path, '/');
    return s ? s + 1 : c->files[file].path;
}

int64_t ckpt_step(const Ckpt *c) {
    int64_t s = 0;
    json_int64(json_get(c->meta, "step"), &s);
    return s;
}

int ckpt_has_section(const Ckpt *c, const char *prefix) {
    size_t n = strlen(prefix);
    for (int i = 0; i < c->n; i++)
        if (!strncmp(c->e[i].t.name, prefix, n)) return 1;
    return 0;
}

int ckpt_config(const Ckpt *c, ModelConfig *cfg, Err *err) {
    char path[4300];
    snprintf(path, sizeof path, "%s/meta.json", c->dir);
    return meta_model(c->meta, path, cfg, err);
}

static int verify_entry(Ckpt *c, Entry *e, Err *err) {
    if (e->verified) return 0;
    if (crc32c(0, e->data, e->t.nbytes) != e->crc)
        return err_set(err, ERR_USAGE, "%s: tensor %s: checksum mismatch (file corrupt)", c->files[e->t.file].path, e->t.name);
    e->verified = 1;
    return 0;
}

int ckpt_verify(Ckpt *c, Err *err) {
    for (int i = 0; i < c->n; i++)
        if (verify_entry(c, &c->e[i], err)) return -1;
    return 0;
}

// Marks elements [i, i + n) of a bitmap; returns how many were set already.
static int64_t mark(uint64_t *seen, int64_t i, int64_t n) {
    int64_t again = 0;
    for (int64_t k = i; k < i + n; k++) {
        uint64_t bit = 1ull << (k & 63);
        again += (seen[k >> 6] & bit) != 0;
        seen[k >> 6] |= bit;
    }
    return again;
}

// Copies the part of entry e that overlaps the slice of p this stage holds
// into dst (p's local buffer); returns the elements copied, and counts in
// *again those that an earlier entry had copied already (seen: a bitmap of
// dst's elements). The entry's elements are walked a row (last dimension)
// at a time.
static int64_t copy_overlap(const Entry *e, const ParamInfo *p, float *dst, uint64_t *seen, int64_t *again) {
    int nd = p->ndim;
    int64_t toff[3] = {0, 0, 0}, text[3] = {1, 1, 1}, soff[3] = {0, 0, 0}, sext[3] = {1, 1, 1};
    // right-align into 3 dimensions
    for (int d = 0; d < nd; d++) {
        int k = 3 - nd + d;
        toff[k] = d == p->shard_dim ? p->shard_off : 0;
        text[k] = p->lshape[d];
        soff[k] = e->t.offset[d];
        sext[k] = e->t.extent[d];
    }
    for (int k = 0; k < 3; k++)   // no overlap at all
        if (soff[k] >= toff[k] + text[k] || toff[k] >= soff[k] + sext[k]) return 0;
    const float *src = (const float *)e->data;
    int64_t copied = 0, f = e->t.flat_lo;
    while (f < e->t.flat_hi) {
        int64_t c = f % sext[2], row = f / sext[2], j = row % sext[1], i = row / sext[1];
        int64_t end = f - c + sext[2] < e->t.flat_hi ? f - c + sext[2] : e->t.flat_hi;   // this row's end
        int64_t gi = i + soff[0], gj = j + soff[1], g0 = c + soff[2], g1 = g0 + (end - f);
        int64_t lo = g0 > toff[2] ? g0 : toff[2], hi = g1 < toff[2] + text[2] ? g1 : toff[2] + text[2];
        if (gi >= toff[0] && gi < toff[0] + text[0] && gj >= toff[1] && gj < toff[1] + text[1] && lo < hi) {
            int64_t at = ((gi - toff[0]) * text[1] + (gj - toff[1])) * text[2] + (lo - toff[2]);
            memcpy(dst + at, src + (f - e->t.flat_lo) + (lo - g0), (size_t)(hi - lo) * sizeof(float));
            *again += mark(seen, at, hi - lo);
            copied += hi - lo;
        }
        f = end;
    }
    return copied;
}

// Elements of p's slice in global rows [0, rows) of dimension 0.
static int64_t slice_elems_below(const ParamInfo *p, int64_t rows) {
    int64_t r0 = p->shard_dim == 0 ? p->shard_off : 0, n = rows - r0;
    if (n <= 0) return 0;
    if (n > p->lshape[0]) n = p->lshape[0];
    return n * (int64_t)(p->numel / (size_t)p->lshape[0]);
}

// Assembles tensor `name` (p's slice) into dst from every file's slices.
// A vocabulary tensor may have another number of padding rows in the files
// (another tensor-parallel size pads it otherwise): its real rows are
// read, its padding rows are zero.
static int assemble(Ckpt *c, const char *name, const ParamInfo *p, float *dst, Err *err) {
    int64_t covered = 0, again = 0, rows = p->shape[0];
    int used[64], nused = 0, zeroed = 0, rc = -1;
    uint64_t *seen = calloc(p->numel / 64 + 1, sizeof *seen);   // each element exactly once
    if (!seen) return err_set(err, ERR_RUN, "out of memory loading %s", name);
    for (int i = 0; i < c->n; i++) {
        Entry *e = &c->e[i];
        if (strcmp(e->t.name, name)) continue;
        int same = e->t.ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++)
            same = e->t.shape[d] == p->shape[d] || (d == 0 && p->vocab_rows && e->t.shape[0] >= p->init_rows);
        if (!same) {
            err_set(err, ERR_USAGE, "%s: tensor %s has a different shape than this model's", c->files[e->t.file].path, name);
            goto done;
        }
        if (e->t.shape[0] != p->shape[0] && !zeroed) {   // padding rows of its own
            memset(dst, 0, p->numel * sizeof(float));
            zeroed = 1;
            rows = e->t.shape[0] < p->shape[0] ? e->t.shape[0] : p->shape[0];
        }
        // A replicated tensor appears in several files: use each slice once.
        int dup = 0;
        for (int k = 0; k < nused && !dup; k++) {
            const Entry *u = &c->e[used[k]];
            dup = !memcmp(u->t.offset, e->t.offset, sizeof e->t.offset) && !memcmp(u->t.extent, e->t.extent, sizeof e->t.extent) &&
                  u->t.flat_lo == e->t.flat_lo && u->t.flat_hi == e->t.flat_hi;
        }
        if (dup) continue;
        if (verify_entry(c, e, err)) goto done;
        covered += copy_overlap(e, p, dst, seen, &again);
        if (nused < 64) used[nused++] = i;
    }
    int64_t need = slice_elems_below(p, rows);
    if (covered == 0 && nused == 0) err_set(err, ERR_USAGE, "%s: tensor %s is missing", c->dir, name);
    else if (again)   // pieces that differ but overlap: some other element was never loaded
        err_set(err, ERR_USAGE, "%s: tensor %s: the files' slices overlap (%lld elements twice)", c->dir, name,
                (long long)again);
    else if (covered != need)
        err_set(err, ERR_USAGE, "%s: tensor %s: the files cover %lld of the %lld elements this layout needs", c->dir, name,
                (long long)covered, (long long)need);
    else
        rc = 0;
    for (size_t i = 0; rc == 0 && i < p->numel; i++)
        if (!isfinite(dst[i]))
            rc = err_set(err, ERR_USAGE, "%s: tensor %s holds a non-finite value (%g)", c->dir, name, dst[i]);
done:
    free(seen);
    return rc;
}

int ckpt_load_range(Ckpt *c, const ParamTable *t, const char *prefix, size_t lo, size_t hi, float *dst, Err *err) {
    for (int i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        if (p->offset < lo || p->offset >= hi) continue;
        CHECK(p->offset + p->numel <= hi);
        char name[96];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        if (assemble(c, name, p, dst + (p->offset - lo), err)) return -1;
    }
    return 0;
}

int ckpt_load_params(Ckpt *c, const ParamTable *t, float *params, Err *err) {
    return ckpt_load_range(c, t, "", 0, t->total, params, err);
}
