#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checksum.h"

static const char MAGIC[8] = {'T', 'S', 'R', 'T', 'E', 'N', 'S', 0};
enum { HEADER_BYTES = 32 };

typedef struct {
    const char *prefix;     // "" for parameters, "exp_avg/" and "exp_avg_sq/" for AdamW moments
    const float *base;
} Section;

// Removes a directory of plain files (a checkpoint step); missing is fine.
static void remove_flat_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char f[4400];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(f, sizeof f, "%s/%s", path, e->d_name);
            unlink(f);
        }
    closedir(d);
    rmdir(path);
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

// Writes buf to path (created 0644), then fsyncs it.
static int write_file(const char *path, const void *buf, size_t n, Err *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return err_set(err, ERR_RUN, "%s: %s", path, strerror(errno));
    if (write_all(fd, buf, n) || fsync(fd)) {
        int e = errno;
        close(fd);
        return err_set(err, ERR_RUN, "%s: write failed: %s", path, strerror(e));
    }
    close(fd);
    return 0;
}

static void put_u32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put_u64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint32_t get_u32(const unsigned char *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get_u64(const unsigned char *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

static int write_tensor_file(const char *path, const Stage *s, const Section *sec, int nsec, Err *err) {
    const ParamTable *t = &s->table;
    JsonBuf idx;
    jb_init(&idx);
    jb_obj_begin(&idx);
    jb_key(&idx, "tensors");
    jb_arr_begin(&idx);
    uint64_t data_off = 0;
    for (int k = 0; k < nsec; k++)
        for (int i = 0; i < t->n; i++) {
            const ParamInfo *p = &t->p[i];
            char name[96];
            snprintf(name, sizeof name, "%s%s", sec[k].prefix, p->name);
            uint64_t nbytes = p->numel * sizeof(float);
            jb_obj_begin(&idx);
            jb_key(&idx, "name"); jb_str(&idx, name);
            jb_key(&idx, "dtype"); jb_str(&idx, "f32");
            jb_key(&idx, "shape"); jb_arr_begin(&idx);
            for (int d = 0; d < p->ndim; d++) jb_int(&idx, p->shape[d]);
            jb_arr_end(&idx);
            jb_key(&idx, "offset"); jb_arr_begin(&idx);
            for (int d = 0; d < p->ndim; d++) jb_int(&idx, d == p->shard_dim ? p->shard_off : 0);
            jb_arr_end(&idx);
            jb_key(&idx, "extent"); jb_arr_begin(&idx);
            for (int d = 0; d < p->ndim; d++) jb_int(&idx, p->lshape[d]);
            jb_arr_end(&idx);
            jb_key(&idx, "data_offset"); jb_int(&idx, (int64_t)data_off);
            jb_key(&idx, "nbytes"); jb_int(&idx, (int64_t)nbytes);
            jb_key(&idx, "crc32c"); jb_int(&idx, crc32c(0, sec[k].base + p->offset, nbytes));
            jb_obj_end(&idx);
            data_off += nbytes;
        }
    jb_arr_end(&idx);
    jb_obj_end(&idx);
    unsigned char hdr[HEADER_BYTES] = {0};
    memcpy(hdr, MAGIC, 8);
    put_u32(hdr + 8, CKPT_VERSION);
    put_u32(hdr + 12, (uint32_t)idx.len);
    put_u32(hdr + 16, crc32c(0, idx.s, idx.len));
    put_u64(hdr + 24, data_off);
    size_t pad = (64 - (HEADER_BYTES + idx.len) % 64) % 64;
    static const char zeros[64];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { jb_free(&idx); return err_set(err, ERR_RUN, "%s: %s", path, strerror(errno)); }
    int bad = write_all(fd, hdr, sizeof hdr) || write_all(fd, idx.s, idx.len) || write_all(fd, zeros, pad);
    for (int k = 0; k < nsec && !bad; k++)
        for (int i = 0; i < t->n && !bad; i++)
            bad = write_all(fd, sec[k].base + t->p[i].offset, t->p[i].numel * sizeof(float));
    bad = bad || fsync(fd);
    int e = errno;
    close(fd);
    jb_free(&idx);
    if (bad) return err_set(err, ERR_RUN, "%s: write failed: %s", path, strerror(e));
    return 0;
}

int ckpt_save(const char *dir, int64_t step, const Stage *s, const AdamW *opt, const char *train_meta, Err *err) {
    if (mkdir(dir, 0755) && errno != EEXIST) return err_set(err, ERR_USAGE, "--ckpt-dir %s: %s", dir, strerror(errno));
    if (strlen(dir) > 3000) return err_set(err, ERR_USAGE, "--ckpt-dir: path too long");
    char tmp[4096], final[4096], path[4200];
    snprintf(final, sizeof final, "%s/step_%08lld", dir, (long long)step);
    snprintf(tmp, sizeof tmp, "%s/step_%08lld.tmp", dir, (long long)step);
    // A leftover .tmp from an interrupted save is garbage by construction.
    struct stat st;
    remove_flat_dir(tmp);
    if (mkdir(tmp, 0755) && errno != EEXIST) return err_set(err, ERR_RUN, "%s: %s", tmp, strerror(errno));
    Section sec[3] = {{"", s->params}};
    int nsec = 1;
    if (opt) { sec[1] = (Section){"exp_avg/", opt->m}; sec[2] = (Section){"exp_avg_sq/", opt->v}; nsec = 3; }
    snprintf(path, sizeof path, "%s/rank_00000.tsr", tmp);
    if (write_tensor_file(path, s, sec, nsec, err)) return -1;
    JsonBuf m;
    jb_init(&m);
    jb_obj_begin(&m);
    jb_key(&m, "format"); jb_str(&m, "tessera-checkpoint");
    jb_key(&m, "version"); jb_int(&m, CKPT_VERSION);
    jb_key(&m, "step"); jb_int(&m, step);
    jb_key(&m, "model"); config_to_json(&s->cfg, &m);
    jb_key(&m, "layout");
    jb_obj_begin(&m);
    jb_key(&m, "dp"); jb_int(&m, 1);
    jb_key(&m, "tp"); jb_int(&m, s->slice.tp_size);
    jb_key(&m, "pp"); jb_int(&m, 1);
    jb_key(&m, "zero"); jb_int(&m, 0);
    jb_obj_end(&m);
    jb_key(&m, "files"); jb_arr_begin(&m); jb_str(&m, "rank_00000.tsr"); jb_arr_end(&m);
    jb_key(&m, "optimizer"); jb_bool(&m, opt != NULL);
    if (opt) { jb_key(&m, "adam_t"); jb_int(&m, opt->t); }
    if (train_meta) { jb_key(&m, "train"); jb_raw(&m, train_meta); }
    jb_obj_end(&m);
    jb_raw(&m, "\n");
    snprintf(path, sizeof path, "%s/meta.json", tmp);
    int rc = write_file(path, m.s, m.len, err);
    jb_free(&m);
    if (rc || fsync_dir(tmp)) return rc ? -1 : err_set(err, ERR_RUN, "%s: fsync failed", tmp);
    char old[4200];
    snprintf(old, sizeof old, "%s.old", final);
    if (stat(final, &st) == 0) {   // re-saving a step: move the old one aside first
        remove_flat_dir(old);
        if (rename(final, old)) return err_set(err, ERR_RUN, "%s: %s", final, strerror(errno));
    }
    if (rename(tmp, final)) return err_set(err, ERR_RUN, "rename %s: %s", tmp, strerror(errno));
    remove_flat_dir(old);
    // latest: one line naming the step directory, replaced atomically.
    char line[64];
    int n = snprintf(line, sizeof line, "step_%08lld\n", (long long)step);
    snprintf(path, sizeof path, "%s/latest.tmp", dir);
    if (write_file(path, line, (size_t)n, err)) return -1;
    snprintf(tmp, sizeof tmp, "%s/latest", dir);
    if (rename(path, tmp) || fsync_dir(dir)) return err_set(err, ERR_RUN, "%s: %s", tmp, strerror(errno));
    return 0;
}

// Reads a whole file into a malloc'd buffer (NUL-terminated).
static int read_file(const char *path, char **out, size_t *len, Err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ERR_USAGE, "%s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END)) { fclose(f); return err_set(err, ERR_USAGE, "%s: cannot seek", path); }
    long n = ftell(f);
    rewind(f);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return err_set(err, ERR_USAGE, "%s: read error", path);
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    *len = (size_t)n;
    return 0;
}

int ckpt_resolve(const char *path, char *stepdir, size_t cap, Err *err) {
    char probe[4200];
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode))
        return err_set(err, ERR_USAGE, "--ckpt %s: no such checkpoint directory", path);
    snprintf(probe, sizeof probe, "%s/meta.json", path);
    if (stat(probe, &st) == 0) {
        snprintf(stepdir, cap, "%s", path);
        return 0;
    }
    snprintf(probe, sizeof probe, "%s/latest", path);
    char *line;
    size_t n;
    if (read_file(probe, &line, &n, NULL))
        return err_set(err, ERR_USAGE, "--ckpt %s: neither a checkpoint (no meta.json) nor a run directory (no latest)", path);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    if (n == 0 || strchr(line, '/') || strncmp(line, "step_", 5)) {
        free(line);
        return err_set(err, ERR_USAGE, "%s: does not name a step directory", probe);
    }
    snprintf(stepdir, cap, "%s/%s", path, line);
    free(line);
    return 0;
}

int ckpt_read_meta(const char *stepdir, Json **meta, Err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", stepdir);
    char *text;
    size_t n;
    if (read_file(path, &text, &n, err)) return -1;
    Json *j = json_parse(text, n, err);
    free(text);
    if (!j) { err_prefix(err, path); return -1; }
    const Json *f = json_get(j, "format"), *v = json_get(j, "version");
    int64_t ver;
    if (!f || f->type != JSON_STR || strcmp(f->text, "tessera-checkpoint")) {
        json_free(j);
        return err_set(err, ERR_USAGE, "%s: not a tessera checkpoint (field 'format')", path);
    }
    if (json_int64(v, &ver) || ver != CKPT_VERSION) {
        json_free(j);
        return err_set(err, ERR_USAGE, "%s: unsupported checkpoint version (field 'version'; this build reads %d)", path,
                       CKPT_VERSION);
    }
    *meta = j;
    return 0;
}

int ckpt_read_config(const Json *meta, ModelConfig *cfg, Err *err) {
    const Json *m = json_get(meta, "model");
    if (!m || m->type != JSON_OBJ) return err_set(err, ERR_USAGE, "meta.json: missing field 'model'");
    static const char *keys[] = {"n_layer", "n_head", "d_model", "d_ff", "max_seq", "vocab"};
    int *dst[] = {&cfg->n_layer, &cfg->n_head, &cfg->d_model, &cfg->d_ff, &cfg->max_seq, &cfg->vocab};
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < 6; i++) {
        int64_t v;
        if (json_int64(json_get(m, keys[i]), &v) || v < 1 || v > (1 << 30))
            return err_set(err, ERR_USAGE, "meta.json: field 'model.%s' is missing or not a positive integer", keys[i]);
        *dst[i] = (int)v;
    }
    const Json *nm = json_get(m, "name");
    snprintf(cfg->name, sizeof cfg->name, "%s", nm && nm->type == JSON_STR ? nm->text : "custom");
    config_set_vocab(cfg, cfg->vocab);
    return config_validate(cfg, err);
}

// Finds the index entry of `name` and checks that it holds what the stage
// needs for tensor p; returns its data or NULL with err set.
static const unsigned char *find_tensor(const Json *tensors, const char *name, const ParamInfo *p,
                                        const unsigned char *data, uint64_t data_bytes, const char *path, Err *err) {
    for (const Json *t = tensors->child; t; t = t->next) {
        const Json *n = json_get(t, "name");
        if (!n || n->type != JSON_STR || strcmp(n->text, name)) continue;
        const Json *dt = json_get(t, "dtype"), *sh = json_get(t, "shape"), *of = json_get(t, "offset");
        const Json *ex = json_get(t, "extent");
        int64_t off, nb, crc;
        if (!dt || dt->type != JSON_STR || strcmp(dt->text, "f32") || !sh || !of || !ex ||
            json_int64(json_get(t, "data_offset"), &off) || json_int64(json_get(t, "nbytes"), &nb) ||
            json_int64(json_get(t, "crc32c"), &crc)) {
            err_set(err, ERR_USAGE, "%s: tensor %s: malformed index entry", path, name);
            return NULL;
        }
        if (off < 0 || nb < 0 || (uint64_t)off > data_bytes || (uint64_t)nb > data_bytes - (uint64_t)off) {
            err_set(err, ERR_USAGE, "%s: tensor %s: data range past the end of the file", path, name);
            return NULL;
        }
        int ok = sh->len == (size_t)p->ndim && of->len == (size_t)p->ndim && ex->len == (size_t)p->ndim;
        for (int d = 0; ok && d < p->ndim; d++) {
            int64_t a, b, c;
            ok = !json_int64(json_at(sh, d), &a) && !json_int64(json_at(of, d), &b) && !json_int64(json_at(ex, d), &c) &&
                 a == p->shape[d] && b == (d == p->shard_dim ? p->shard_off : 0) && c == p->lshape[d];
        }
        if (!ok || (uint64_t)nb != p->numel * sizeof(float)) {
            err_set(err, ERR_USAGE, "%s: tensor %s: shape or slice does not match this model", path, name);
            return NULL;
        }
        if (crc32c(0, data + off, (size_t)nb) != (uint32_t)crc) {
            err_set(err, ERR_USAGE, "%s: tensor %s: checksum mismatch (file corrupt)", path, name);
            return NULL;
        }
        return data + off;
    }
    err_set(err, ERR_USAGE, "%s: tensor %s is missing", path, name);
    return NULL;
}

int ckpt_load(const char *stepdir, Stage *s, AdamW *opt, Err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank_00000.tsr", stepdir);
    // Mapped, not read: a caller that wants only the parameters touches
    // only their pages.
    int fd = open(path, O_RDONLY);
    if (fd < 0) return err_set(err, ERR_USAGE, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) { close(fd); return err_set(err, ERR_USAGE, "%s: %s", path, strerror(errno)); }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED) return err_set(err, ERR_RUN, "%s: cannot map: %s", path, strerror(errno));
    const unsigned char *u = map;
    const char *buf = map;
    int rc = -1;
    Json *idx = NULL;
    if (len < HEADER_BYTES || memcmp(u, MAGIC, 8)) { err_set(err, ERR_USAGE, "%s: not a tessera tensor file (bad magic)", path); goto done; }
    if (get_u32(u + 8) != CKPT_VERSION) { err_set(err, ERR_USAGE, "%s: unsupported tensor file version %u", path, get_u32(u + 8)); goto done; }
    uint64_t ilen = get_u32(u + 12), dbytes = get_u64(u + 24);
    uint64_t dstart = (HEADER_BYTES + ilen + 63) / 64 * 64;
    if (dstart > len || dbytes != len - dstart) { err_set(err, ERR_USAGE, "%s: truncated or oversized (header says %llu data bytes, file has %lld)", path, (unsigned long long)dbytes, (long long)len - (long long)dstart); goto done; }
    if (crc32c(0, u + HEADER_BYTES, ilen) != get_u32(u + 16)) { err_set(err, ERR_USAGE, "%s: index checksum mismatch (file corrupt)", path); goto done; }
    idx = json_parse(buf + HEADER_BYTES, ilen, err);
    if (!idx) { err_prefix(err, path); goto done; }
    const Json *tensors = json_get(idx, "tensors");
    if (!tensors || tensors->type != JSON_ARR) { err_set(err, ERR_USAGE, "%s: index has no 'tensors' array", path); goto done; }
    const unsigned char *data = u + dstart;
    for (int k = 0; k < (opt ? 3 : 1); k++) {
        static const char *prefix[] = {"", "exp_avg/", "exp_avg_sq/"};
        float *dst = k == 0 ? s->params : k == 1 ? opt->m : opt->v;
        for (int i = 0; i < s->table.n; i++) {
            const ParamInfo *p = &s->table.p[i];
            char name[96];
            snprintf(name, sizeof name, "%s%s", prefix[k], p->name);
            const unsigned char *src = find_tensor(tensors, name, p, data, dbytes, path, err);
            if (!src) goto done;
            memcpy(dst + p->offset, src, p->numel * sizeof(float));
        }
    }
    rc = 0;
done:
    json_free(idx);
    if (len) munmap(map, len);
    return rc;
}
