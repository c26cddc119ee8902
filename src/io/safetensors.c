#include "core/fileio.h"
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/half.h"
#include "core/json.h"

static const struct { const char *name; int size; } DT[] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4}, [ST_I16] = {"I16", 2},  [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1}, [ST_U16] = {"U16", 2}, [ST_U32] = {"U32", 4},
    [ST_U64] = {"U64", 8},
};
enum { NDT = sizeof DT / sizeof DT[0], MAX_HEADER = 100 << 20 };

int64_t st_numel(const StTensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static int cmp_begin(const void *a, const void *b) {
    const StTensor *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

void st_close(StFile *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    if (f->map) munmap(f->map, f->map_len);
    memset(f, 0, sizeof *f);
}

int st_parse(StFile *f, const unsigned char *buf, size_t len, Err *err) {
    f->t = NULL;
    f->n = 0;
    if (len < 8) return err_set(err, ERR_USAGE, "%zu bytes is too short for a safetensors header", len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
    if (hl > len - 8 || hl > MAX_HEADER)
        return err_set(err, ERR_USAGE, "header length %llu runs past the end of the file (%zu bytes)",
                       (unsigned long long)hl, len);
    Json *j = json_parse((const char *)buf + 8, (size_t)hl, err);
    if (!j) return -1;
    int rc = -1;
    if (j->type != JSON_OBJ) { err_set(err, ERR_USAGE, "header is not a JSON object"); goto done; }
    f->data = buf + 8 + hl;
    f->data_len = len - 8 - (size_t)hl;
    f->t = calloc(j->len + 1, sizeof *f->t);
    if (!f->t) { err_set(err, ERR_RUN, "out of memory"); goto done; }
    for (const Json *m = j->child; m; m = m->next) {
        if (!strcmp(m->key, "__metadata__")) {
            if (m->type != JSON_OBJ) { err_set(err, ERR_USAGE, "__metadata__ is not an object"); goto done; }
            for (const Json *k = m->child; k; k = k->next)
                if (k->type != JSON_STR) { err_set(err, ERR_USAGE, "__metadata__ values must be strings"); goto done; }
            continue;
        }
        StTensor *t = &f->t[f->n];
        const Json *dt = json_get(m, "dtype"), *sh = json_get(m, "shape"), *off = json_get(m, "data_offsets");
        if (m->type != JSON_OBJ || !dt || dt->type != JSON_STR || !sh || sh->type != JSON_ARR || !off ||
            off->type != JSON_ARR || off->len != 2 || m->len != 3) {
            err_set(err, ERR_USAGE, "tensor '%s': expected exactly dtype, shape and data_offsets", m->key);
            goto done;
        }
        int d = 0;
        while (d < (int)NDT && strcmp(DT[d].name, dt->text)) d++;
        if (d == (int)NDT) { err_set(err, ERR_USAGE, "tensor '%s': unknown dtype '%s'", m->key, dt->text); goto done; }
        if (sh->len > ST_MAX_DIM) { err_set(err, ERR_USAGE, "tensor '%s': more than %d dimensions", m->key, ST_MAX_DIM); goto done; }
        t->dtype = (StDtype)d;
        t->ndim = (int)sh->len;
        uint64_t bytes = (uint64_t)DT[d].size;
        for (int k = 0; k < t->ndim; k++) {
            int64_t v;
            if (json_int64(json_at(sh, (size_t)k), &v) || v < 0 || v > (1LL << 40)) {
                err_set(err, ERR_USAGE, "tensor '%s': bad shape", m->key);
                goto done;
            }
            t->shape[k] = v;
            if (v && bytes > UINT64_MAX / (uint64_t)v) { err_set(err, ERR_USAGE, "tensor '%s': shape too large", m->key); goto done; }
            bytes *= (uint64_t)v;
        }
        int64_t b0, b1;
        if (json_int64(json_at(off, 0), &b0) || json_int64(json_at(off, 1), &b1) || b0 < 0 || b1 < b0 ||
            (uint64_t)b1 > f->data_len) {
            err_set(err, ERR_USAGE, "tensor '%s': data_offsets lie outside the data (%zu bytes)", m->key, f->data_len);
            goto done;
        }
        if ((uint64_t)(b1 - b0) != bytes) {
            err_set(err, ERR_USAGE, "tensor '%s': shape needs %llu bytes but data_offsets give %lld", m->key,
                    (unsigned long long)bytes, (long long)(b1 - b0));
            goto done;
        }
        t->begin = (uint64_t)b0;
        t->end = (uint64_t)b1;
        t->name = strdup(m->key);
        if (!t->name) { err_set(err, ERR_RUN, "out of memory"); goto done; }
        f->n++;
    }
    // Ranges, sorted, must tile the data exactly.
    StTensor *s = malloc((size_t)(f->n + 1) * sizeof *s);
    if (!s) { err_set(err, ERR_RUN, "out of memory"); goto done; }
    memcpy(s, f->t, (size_t)f->n * sizeof *s);
    qsort(s, (size_t)f->n, sizeof *s, cmp_begin);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        if (s[i].begin < at) { err_set(err, ERR_USAGE, "tensor '%s' overlaps another tensor's data", s[i].name); free(s); goto done; }
        if (s[i].begin > at) { err_set(err, ERR_USAGE, "a gap in the data before tensor '%s'", s[i].name); free(s); goto done; }
        at = s[i].end;
    }
    free(s);
    if (at != f->data_len) { err_set(err, ERR_USAGE, "%zu bytes of data after the last tensor", f->data_len - (size_t)at); goto done; }
    rc = 0;
done:
    json_free(j);
    if (rc) {
        for (int i = 0; i < f->n; i++) free(f->t[i].name);
        free(f->t);
        f->t = NULL;
        f->n = 0;
    }
    return rc;
}

int st_open(StFile *f, const char *path, Err *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_NONBLOCK);   // a FIFO is refused below, not waited on
    if (fd < 0) return err_set(err, ERR_USAGE, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { close(fd); return err_set(err, ERR_USAGE, "%s: not a regular file", path); }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED) return err_set(err, ERR_RUN, "%s: cannot map: %s", path, strerror(errno));
    if (st_parse(f, map, len, err)) {
        if (len) munmap(map, len);
        err_prefix(err, path);
        return -1;
    }
    f->map = map;
    f->map_len = len;
    return 0;
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

float st_get(const StFile *f, const StTensor *t, int64_t i) {
    const unsigned char *p = f->data + t->begin;
    uint32_t bits;
    float v;
    switch (t->dtype) {
    case ST_F32: memcpy(&v, p + 4 * i, 4); return v;
    case ST_BF16: bits = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8) << 16; memcpy(&v, &bits, 4); return v;
    case ST_F16: {
        uint32_t h = (uint32_t)(p[2 * i] | p[2 * i + 1] << 8), s = (h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023;
        if (e == 0) {   // zero or subnormal
            v = (float)m * 5.9604644775390625e-8f;
            return s ? -v : v;
        }
        bits = e == 31 ? s | 0x7F800000u | m << 13 : s | (e + 112) << 23 | m << 13;
        memcpy(&v, &bits, 4);
        return v;
    }
    default: CHECKF(0, "st_get on a non-float tensor");
    }
    return 0;
}

int st_write(const char *path, const StWrite *t, int n, Err *err) {
    JsonBuf h;
    jb_init(&h);
    jb_obj_begin(&h);
    jb_key(&h, "__metadata__");
    jb_obj_begin(&h);
    jb_key(&h, "format"); jb_str(&h, "pt");
    jb_obj_end(&h);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= t[i].shape[d];
        jb_key(&h, t[i].name);
        jb_obj_begin(&h);
        CHECKF(t[i].dtype == ST_F32 || t[i].dtype == ST_BF16 || t[i].dtype == ST_F16, "writing %s as dtype %d",
               t[i].name, t[i].dtype);
        uint64_t es = t[i].dtype == ST_F32 ? 4 : 2;
        jb_key(&h, "dtype"); jb_str(&h, DT[t[i].dtype].name);
        jb_key(&h, "shape"); jb_arr_begin(&h);
        for (int d = 0; d < t[i].ndim; d++) jb_int(&h, t[i].shape[d]);
        jb_arr_end(&h);
        jb_key(&h, "data_offsets"); jb_arr_begin(&h);
        jb_int(&h, (int64_t)off); jb_int(&h, (int64_t)(off + es * (uint64_t)numel));
        jb_arr_end(&h);
        jb_obj_end(&h);
        off += es * (uint64_t)numel;
    }
    jb_obj_end(&h);
    while (h.len % 8) jb_raw(&h, " ");   // data starts 8-byte aligned
    char tmp[4300];
    int fd = file_temp_create(path, tmp, sizeof tmp, err);
    FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!fp) {
        if (fd >= 0) { close(fd); unlink(tmp); }
        jb_free(&h);
        return fd >= 0 ? err_set(err, ERR_RUN, "%s: %s", path, strerror(errno)) : -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    int bad = fwrite(len8, 8, 1, fp) != 1 || fwrite(h.s, 1, h.len, fp) != h.len;
    for (int i = 0; i < n && !bad; i++) {
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= t[i].shape[d];
        if (t[i].dtype == ST_F32) {
            bad = fwrite(t[i].data, 4, (size_t)numel, fp) != (size_t)numel;
            continue;
        }
        uint16_t buf[4096];
        for (int64_t j = 0; j < numel && !bad; j += 4096) {
            size_t k = numel - j < 4096 ? (size_t)(numel - j) : 4096;
            half_pack(t[i].dtype == ST_BF16 ? PREC_BF16 : PREC_FP16, buf, t[i].data + j, k);
            bad = fwrite(buf, 2, k, fp) != k;
        }
    }
    int e = bad || fflush(fp) ? (errno ? errno : EIO) : 0;
    int fd2 = dup(fileno(fp));   // the descriptor file_temp_commit syncs and closes
    if (fclose(fp) && !e) e = errno;
    jb_free(&h);
    if (e || fd2 < 0) {
        if (!e) e = errno;
        if (fd2 >= 0) close(fd2);
        unlink(tmp);
        return err_set(err, ERR_RUN, "%s: write failed: %s", path, strerror(e));
    }
    return file_temp_commit(fd2, tmp, path, err);
}
