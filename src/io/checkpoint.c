// io/checkpoint.c — writing checkpoints: the run directory checked and
// locked, each rank's tensor file, meta.json, the rename into place,
// `latest` and pruning, every step durable; the crash-test hook. The
// reader is checkpoint_read.c.
#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/fileio.h"
#include "core/prof.h"
#include "io/checkpoint_impl.h"
#include "io/meta.h"

// ---- the crash-test hook ----

static long crash_after = -1, durable_events;

static void durable_point(void) {
    if (crash_after == -1) {
        const char *v = getenv("TESSERA_CKPT_CRASH_AFTER");
        crash_after = v ? atol(v) : 0;
    }
    if (crash_after > 0 && ++durable_events == crash_after) raise(SIGKILL);
}

// ---- small file helpers ----

// Removes a directory of plain files (a checkpoint step); missing is fine
// (0). A symbolic link (or anything not a directory) at path is not
// touched, nor followed: -1. Entries are unlinked relative to the opened
// directory, so a link inside is removed itself, never its target.
static int remove_flat_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    DIR *d = fdopendir(fd);
    if (!d) { close(fd); return -1; }
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(path);
    return 0;
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
    durable_point();
    return rc;
}

static int durable_rename(const char *from, const char *to) {
    int rc = rename(from, to);
    durable_point();
    return rc;
}

// Writes buf to path, then fsyncs it.
static int write_file(const char *path, const void *buf, size_t n, Err *err) {
    int fd = file_create_new(path, err);
    if (fd < 0) return -1;
    if (write_all(fd, buf, n)) {
        int e = errno;
        close(fd);
        return err_set(err, ERR_RUN, "%s: write failed: %s", path, strerror(e));
    }
    durable_point();
    if (fsync(fd)) { close(fd); return err_set(err, ERR_RUN, "%s: fsync failed", path); }
    durable_point();
    close(fd);
    return 0;
}

static void put_u32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put_u64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }

static void step_path(char *out, size_t cap, const char *dir, int64_t step, const char *suffix) {
    snprintf(out, cap, "%s/step_%08lld%s", dir, (long long)step, suffix);
}

// ---- writing ----

int ckpt_prepare_dir(const char *dir, Err *err) {
    if (strlen(dir) > 3000) return err_set(err, ERR_USAGE, "--ckpt-dir: path too long");
    if (mkdir(dir, 0755) && errno != EEXIST) return err_set(err, ERR_USAGE, "--ckpt-dir %s: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) return err_set(err, ERR_USAGE, "--ckpt-dir %s: not a directory", dir);
    if (access(dir, W_OK | X_OK)) return err_set(err, ERR_USAGE, "--ckpt-dir %s: not writable (%s)", dir, strerror(errno));
    // the entries a save creates, replaces or removes: none may be a symbolic link
    DIR *d = opendir(dir);
    if (!d) return err_set(err, ERR_USAGE, "--ckpt-dir %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (strncmp(e->d_name, "step_", 5) && strncmp(e->d_name, "latest", 6) && strcmp(e->d_name, ".lock")) continue;
        struct stat es;
        if (fstatat(dirfd(d), e->d_name, &es, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(es.st_mode))
            rc = err_set(err, ERR_USAGE, "--ckpt-dir %s: %s is a symbolic link; checkpoint entries must be tessera's own", dir,
                         e->d_name);
    }
    closedir(d);
    return rc;
}

int ckpt_lock(const char *dir, Err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(err, ERR_USAGE, "--ckpt-dir %s: cannot create its lock file: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        return err_set(err, ERR_USAGE, "--ckpt-dir %s: another run (pid %s) is using it", dir, pid[0] ? pid : "unknown");
    }
    char line[32];
    int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) || pwrite(fd, line, (size_t)n, 0) != n) {
        close(fd);
        return err_set(err, ERR_RUN, "%s: %s", path, strerror(errno));
    }
    return fd;
}

void ckpt_abort(const char *dir, int64_t step) {
    char tmp[4200];
    step_path(tmp, sizeof tmp, dir, step, ".tmp");
    remove_flat_dir(tmp);
}

// Each of the three steps below is one checkpoint I/O bracket (core/prof):
// file work only, no collective inside.
static int begin_step(const char *dir, int64_t step, Err *err) {
    if (strlen(dir) > 3000) return err_set(err, ERR_USAGE, "--ckpt-dir: path too long");
    if (mkdir(dir, 0755) && errno != EEXIST) return err_set(err, ERR_USAGE, "--ckpt-dir %s: %s", dir, strerror(errno));
    char tmp[4200];
    step_path(tmp, sizeof tmp, dir, step, ".tmp");
    if (remove_flat_dir(tmp))   // a leftover of an interrupted save is garbage by construction
        return err_set(err, ERR_USAGE, "%s: not a directory tessera made (a symbolic link?): it is left alone", tmp);
    if (mkdir(tmp, 0755)) return err_set(err, ERR_RUN, "%s: %s", tmp, strerror(errno));
    return 0;
}

int ckpt_begin(const char *dir, int64_t step, Err *err) {
    double p0 = prof_begin();
    int rc = begin_step(dir, step, err);
    prof_end(p0, PROF_CKPT, 0, 0);
    return rc;
}

// Writes one tensor's index entry: p's slice, or elements [b, e) of it.
static void index_entry(JsonBuf *idx, const char *name, const ParamInfo *p, size_t b, size_t e, uint64_t data_off,
                        const float *data) {
    uint64_t nbytes = (e - b) * sizeof(float);
    jb_obj_begin(idx);
    jb_key(idx, "name"); jb_str(idx, name);
    jb_key(idx, "dtype"); jb_str(idx, "f32");
    jb_key(idx, "shape"); jb_arr_begin(idx);
    for (int d = 0; d < p->ndim; d++) jb_int(idx, p->shape[d]);
    jb_arr_end(idx);
    jb_key(idx, "offset"); jb_arr_begin(idx);
    for (int d = 0; d < p->ndim; d++) jb_int(idx, d == p->shard_dim ? p->shard_off : 0);
    jb_arr_end(idx);
    jb_key(idx, "extent"); jb_arr_begin(idx);
    for (int d = 0; d < p->ndim; d++) jb_int(idx, p->lshape[d]);
    jb_arr_end(idx);
    if (b != 0 || e != p->numel) {
        jb_key(idx, "flat"); jb_arr_begin(idx);
        jb_int(idx, (int64_t)b);
        jb_int(idx, (int64_t)e);
        jb_arr_end(idx);
    }
    jb_key(idx, "data_offset"); jb_int(idx, (int64_t)data_off);
    jb_key(idx, "nbytes"); jb_int(idx, (int64_t)nbytes);
    jb_key(idx, "crc32c"); jb_int(idx, crc32c(0, data, nbytes));
    jb_obj_end(idx);
}

// One run of data in the file: nfloats at src.
typedef struct { const float *src; size_t n; } Run;

static int write_pieces(const char *dir, int64_t step, int rank, const ParamTable *t, const char *const *sections,
                        int nsec, const CkptPiece *pc, int npc, uint64_t *bytes, Err *err) {
    CHECK(nsec >= 1 && nsec <= CKPT_MAX_SECTIONS);
    for (int q = 0; q < npc; q++)
        for (int k = 0; k < nsec; k++) CHECKF(pc[q].data[k], "checkpoint piece %d has no data for section %d", q, k);
    Run *runs = malloc(((size_t)nsec * (size_t)t->n * (size_t)(npc > 0 ? npc : 1) + 1) * sizeof *runs);
    if (!runs) return err_set(err, ERR_RUN, "out of memory");
    int nrun = 0;
    JsonBuf idx;
    jb_init(&idx);
    jb_obj_begin(&idx);
    jb_key(&idx, "tensors");
    jb_arr_begin(&idx);
    uint64_t data_off = 0;
    for (int k = 0; k < nsec; k++)
        for (int q = 0; q < npc; q++) {
            const CkptPiece *c = &pc[q];
            const float *base = c->data[k];
            for (int i = 0; i < t->n; i++) {
                const ParamInfo *p = &t->p[i];
                size_t a = p->offset > c->lo ? p->offset : c->lo, z = p->offset + p->numel < c->hi ? p->offset + p->numel : c->hi;
                if (a >= z) continue;
                char name[160];
                snprintf(name, sizeof name, "%s%s", sections[k], p->name);
                const float *src = base + (a - c->lo);
                index_entry(&idx, name, p, a - p->offset, z - p->offset, data_off, src);
                runs[nrun++] = (Run){src, z - a};
                data_off += (z - a) * sizeof(float);
            }
        }
    jb_arr_end(&idx);
    jb_obj_end(&idx);
    unsigned char hdr[CKPT_HEADER_BYTES] = {0};
    memcpy(hdr, CKPT_MAGIC, 8);
    put_u32(hdr + 8, CKPT_FILE_VERSION);
    put_u32(hdr + 12, (uint32_t)idx.len);
    put_u32(hdr + 16, crc32c(0, idx.s, idx.len));
    put_u64(hdr + 24, data_off);
    size_t pad = (64 - (CKPT_HEADER_BYTES + idx.len) % 64) % 64;
    static const char zeros[64];
    char path[4300];
    step_path(path, sizeof path, dir, step, ".tmp");
    snprintf(path + strlen(path), sizeof path - strlen(path), "/rank_%05d.tsr", rank);
    int fd = file_create_new(path, err);
    if (fd < 0) { jb_free(&idx); free(runs); return -1; }
    int bad = write_all(fd, hdr, sizeof hdr) || write_all(fd, idx.s, idx.len) || write_all(fd, zeros, pad);
    for (int r = 0; r < nrun && !bad; r++) bad = write_all(fd, runs[r].src, runs[r].n * sizeof(float));
    if (!bad) durable_point();
    bad = bad || fsync(fd);
    int e = errno;
    close(fd);
    size_t idx_len = idx.len;
    jb_free(&idx);
    free(runs);
    if (bad) return err_set(err, ERR_RUN, "%s: write failed: %s", path, strerror(e));
    durable_point();
    *bytes = sizeof hdr + idx_len + pad + data_off;
    return 0;
}

int ckpt_write_pieces(const char *dir, int64_t step, int rank, const ParamTable *t, const char *const *sections,
                      int nsec, const CkptPiece *pc, int npc, Err *err) {
    double p0 = prof_begin();
    uint64_t bytes = 0;
    int rc = write_pieces(dir, step, rank, t, sections, nsec, pc, npc, &bytes, err);
    prof_end(p0, PROF_CKPT, 0, (double)bytes);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Removes all but the newest `keep` step directories of dir.
static void prune(const char *dir, int keep) {
    if (keep <= 0) return;
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        size_t l = strlen(e->d_name);
        if (!strncmp(e->d_name, "step_", 5) && l == 13 && strspn(e->d_name + 5, "0123456789") == 8)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        if (i < n - keep) {   // a step that is a symbolic link is left alone (remove_flat_dir refuses it)
            char p[4300];
            snprintf(p, sizeof p, "%s/%s", dir, names[i]);
            remove_flat_dir(p);
        }
        free(names[i]);
    }
}

static int commit_step(const char *dir, const CkptMeta *md, int keep, Err *err) {
    int64_t step = md->step;
    JsonBuf m;
    jb_init(&m);
    jb_obj_begin(&m);
    jb_key(&m, "format"); jb_str(&m, "tessera-checkpoint");
    jb_key(&m, "version"); jb_int(&m, META_VERSION);
    jb_key(&m, "step"); jb_int(&m, step);
    jb_key(&m, "model"); config_to_json(md->cfg, &m);
    jb_key(&m, "layout");
    jb_obj_begin(&m);
    jb_key(&m, "dp"); jb_int(&m, md->dp > 0 ? md->dp : 1);
    jb_key(&m, "tp"); jb_int(&m, md->tp > 0 ? md->tp : 1);
    jb_key(&m, "pp"); jb_int(&m, md->pp > 0 ? md->pp : 1);
    jb_key(&m, "zero"); jb_int(&m, md->zero);
    jb_obj_end(&m);
    jb_key(&m, "files"); jb_arr_begin(&m);
    for (int r = 0; r < md->nfiles; r++) {
        char f[32];
        snprintf(f, sizeof f, "rank_%05d.tsr", r);
        jb_str(&m, f);
    }
    jb_arr_end(&m);
    if (md->state && jb_members(&m, md->state)) {
        jb_free(&m);
        return err_set(err, ERR_RUN, "checkpoint state is not a JSON object");
    }
    if (md->train) { jb_key(&m, "train"); jb_raw(&m, md->train); }
    meta_seal(&m);   // "crc32c": of everything before it, and the closing brace
    char tmp[4200], final[4200], path[4300];
    step_path(tmp, sizeof tmp, dir, step, ".tmp");
    step_path(final, sizeof final, dir, step, "");
    snprintf(path, sizeof path, "%s/meta.json", tmp);
    int rc = write_file(path, m.s, m.len, err);
    jb_free(&m);
    if (rc) return -1;
    if (fsync_dir(tmp)) return err_set(err, ERR_RUN, "%s: fsync failed", tmp);
    char old[4300];
    snprintf(old, sizeof old, "%s.old", final);
    struct stat st;
    if (stat(final, &st) == 0) {   // re-saving a step: move the old one aside first
        remove_flat_dir(old);
        if (durable_rename(final, old)) return err_set(err, ERR_RUN, "%s: %s", final, strerror(errno));
    }
    if (durable_rename(tmp, final)) return err_set(err, ERR_RUN, "rename %s: %s", tmp, strerror(errno));
    remove_flat_dir(old);
    char line[64];
    int n = snprintf(line, sizeof line, "step_%08lld\n", (long long)step);
    snprintf(path, sizeof path, "%s/latest.tmp", dir);
    if (write_file(path, line, (size_t)n, err)) return -1;
    snprintf(tmp, sizeof tmp, "%s/latest", dir);
    if (durable_rename(path, tmp) || fsync_dir(dir)) return err_set(err, ERR_RUN, "%s: %s", tmp, strerror(errno));
    prune(dir, keep);
    return 0;
}

int ckpt_commit(const char *dir, const CkptMeta *md, int keep, Err *err) {
    double p0 = prof_begin();
    int rc = commit_step(dir, md, keep, err);
    prof_end(p0, PROF_CKPT, 0, 0);
    return rc;
}

int ckpt_save(const char *dir, const CkptMeta *m, const ParamTable *t, const float *params, int keep, Err *err) {
    static const char *const params_only[] = {""};
    CkptPiece all = {0, t->total, {params}};
    if (ckpt_begin(dir, m->step, err) || ckpt_write_pieces(dir, m->step, 0, t, params_only, 1, &all, 1, err)) return -1;
    CkptMeta one = *m;
    one.nfiles = 1;
    return ckpt_commit(dir, &one, keep, err);
}
