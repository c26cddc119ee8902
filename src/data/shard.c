#include "core/fileio.h"
#include "core/json.h"
#include "data/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int shard_open(Shard *s, const char *path, int vocab, Err *err) {
    memset(s, 0, sizeof *s);
    int fd = file_open_regular(path, err);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st)) { close(fd); return err_set(err, ERR_USAGE, "%s: %s", path, strerror(errno)); }
    size_t len = (size_t)st.st_size;
    if (len < SHARD_HEADER_BYTES) {
        close(fd);
        return err_set(err, ERR_USAGE, "%s: %zu bytes is shorter than the 1024-byte shard header", path, len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return err_set(err, ERR_RUN, "%s: cannot map: %s", path, strerror(errno));
    const int32_t *h = map;
    int rc = -1;
    if (h[0] != SHARD_MAGIC) {
        err_set(err, ERR_USAGE, "%s: not a token shard (magic %d, want %d)", path, h[0], SHARD_MAGIC);
    } else if (h[1] != 1 && h[1] != 2) {
        err_set(err, ERR_USAGE, "%s: unsupported shard version %d (1: uint16 tokens, 2: uint32)", path, h[1]);
    } else if (h[2] < 0 || (uint64_t)h[2] * (h[1] == 1 ? 2u : 4u) != len - SHARD_HEADER_BYTES) {
        err_set(err, ERR_USAGE, "%s: header says %d tokens but the file holds %zu bytes of tokens", path, h[2],
                len - SHARD_HEADER_BYTES);
    } else {
        s->version = h[1];
        s->ntok = h[2];
        s->tokens = (const char *)map + SHARD_HEADER_BYTES;
        s->map = map;
        s->map_len = len;
        int64_t bad = -1;
        for (int64_t i = 0; i < s->ntok && bad < 0; i++)
            if (shard_token_u(s, i) >= (uint32_t)vocab) bad = i;   // unsigned: a uint32 token ≥ 2^31 is out too
        if (bad >= 0)
            err_set(err, ERR_USAGE, "%s: token %llu at position %lld is outside the vocabulary (%d)", path,
                    (unsigned long long)shard_token_u(s, bad), (long long)bad, vocab);
        else
            rc = 0;
    }
    if (rc) { munmap(map, len); memset(s, 0, sizeof *s); }
    return rc;
}

void shard_close(Shard *s) {
    if (s->map) munmap(s->map, s->map_len);
    memset(s, 0, sizeof *s);
}

int shard_writer_open(ShardWriter *w, const char *path, int vocab, Err *err) {
    memset(w, 0, sizeof *w);
    w->version = vocab <= 65536 ? 1 : 2;
    snprintf(w->path, sizeof w->path, "%s", path);
    int fd = file_temp_create(path, w->tmp, sizeof w->tmp, err);   // path.tmp.XXXXXX, this process's own
    if (fd < 0) return -1;
    if (!(w->f = fdopen(fd, "wb"))) {
        close(fd);
        unlink(w->tmp);
        return err_set(err, ERR_RUN, "%s: %s", w->tmp, strerror(errno));
    }
    int32_t h[256] = {SHARD_MAGIC, w->version, 0};   // the count is written at the end
    if (fwrite(h, sizeof h, 1, w->f) != 1) {
        shard_writer_abort(w);
        return err_set(err, ERR_RUN, "%s: write failed: %s", path, strerror(errno));
    }
    return 0;
}

int shard_writer_append(ShardWriter *w, const int *ids, int64_t n, Err *err) {
    if (n > INT32_MAX - w->n) return err_set(err, ERR_USAGE, "%s: more tokens than one shard holds", w->path);
    enum { CHUNK = 1 << 14 };
    unsigned char buf[CHUNK * 4];
    size_t width = w->version == 1 ? 2 : 4;
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t m = n - i < CHUNK ? n - i : CHUNK;
        for (int64_t k = 0; k < m; k++) {
            uint32_t v = (uint32_t)ids[i + k];
            if (w->version == 1) { uint16_t x = (uint16_t)v; memcpy(buf + 2 * k, &x, 2); }
            else memcpy(buf + 4 * k, &v, 4);
        }
        if (fwrite(buf, width, (size_t)m, w->f) != (size_t)m)
            return err_set(err, ERR_RUN, "%s: write failed: %s", w->path, strerror(errno));
    }
    w->n += n;
    return 0;
}

int shard_writer_close(ShardWriter *w, Err *err) {
    int32_t count = (int32_t)w->n;
    int bad = fflush(w->f) || pwrite(fileno(w->f), &count, sizeof count, 2 * sizeof(int32_t)) != sizeof count;
    int e = bad ? (errno ? errno : EIO) : 0;
    int fd = dup(fileno(w->f));   // the descriptor file_temp_commit syncs and closes
    if (fclose(w->f) && !e) e = errno;
    w->f = NULL;
    if (e || fd < 0) {
        if (!e) e = errno;
        if (fd >= 0) close(fd);
        unlink(w->tmp);
        return err_set(err, ERR_RUN, "%s: write failed: %s", w->path, strerror(e));
    }
    return file_temp_commit(fd, w->tmp, w->path, err);
}

void shard_writer_abort(ShardWriter *w) {
    if (!w->f) return;
    fclose(w->f);
    w->f = NULL;
    unlink(w->tmp);
}

int shard_write(const char *path, const int *ids, int64_t n, int vocab, Err *err) {
    if (n > INT32_MAX) return err_set(err, ERR_USAGE, "%s: %lld tokens do not fit one shard", path, (long long)n);
    ShardWriter w;
    if (shard_writer_open(&w, path, vocab, err)) return -1;
    if (shard_writer_append(&w, ids, n, err)) { shard_writer_abort(&w); return -1; }
    return shard_writer_close(&w, err);
}

int shard_info_write(const char *dir, const char *tokenizer, int vocab, Err *err) {
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "tokenizer"); jb_str(&b, tokenizer);
    jb_key(&b, "vocab"); jb_int(&b, vocab);
    jb_obj_end(&b);
    jb_raw(&b, "\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, SHARD_INFO_FILE);
    int rc = b.s ? file_write_whole(path, b.s, b.len, err) : err_set(err, ERR_RUN, "out of memory");
    jb_free(&b);
    return rc;
}

int shard_info_read(const char *dir, char *name, size_t cap, Err *err) {
    char path[4200], *text;
    size_t len;
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, SHARD_INFO_FILE);
    if (stat(path, &st)) return 0;
    if (file_read(path, &text, &len, 1 << 16, err)) return -1;
    Json *j = json_parse(text, len, err);
    free(text);
    if (!j) { err_prefix(err, path); return -1; }
    const Json *t = json_get(j, "tokenizer");
    int rc = 1;
    if (!t || t->type != JSON_STR || !t->text[0] || strlen(t->text) >= cap)
        rc = err_set(err, ERR_USAGE, "%s: no tokenizer name in it (rewrite the directory with tessera prepare)", path);
    else
        snprintf(name, cap, "%s", t->text);
    json_free(j);
    return rc;
}
