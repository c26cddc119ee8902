#include "data/zread.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"

#ifdef TSR_ZLIB
#include <zlib.h>
#endif
#ifdef TSR_ZSTD
#include <zstd.h>
#endif

enum { COMP_NONE, COMP_GZIP, COMP_ZSTD };
enum { IN_BYTES = 1 << 20 };

struct Zread {
    const char *path;
    int fd, comp;
    unsigned char *in;   // compressed bytes read, [pos, len) not yet decompressed
    size_t pos, len;
    int raw_eof;         // the file is read to its end
    int ended;           // the last gzip member or zstd frame is complete
#ifdef TSR_ZLIB
    z_stream gz;
    int gz_live;
    long members;        // gzip members complete
#endif
#ifdef TSR_ZSTD
    ZSTD_DStream *zs;
#endif
};

static int magic_comp(const unsigned char *m, ssize_t got) {
    if (got >= 2 && m[0] == 0x1f && m[1] == 0x8b) return COMP_GZIP;
    if (got < 4) return COMP_NONE;
    uint32_t v = (uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 | (uint32_t)m[3] << 24;
    return v == 0xFD2FB528u || (v & 0xFFFFFFF0u) == 0x184D2A50u ? COMP_ZSTD : COMP_NONE;
}

int zread_open(Zread **out, const char *path, Err *err) {
    *out = NULL;
    int fd = file_open_regular(path, err);
    if (fd < 0) return -1;
    unsigned char magic[4] = {0};
    ssize_t got = pread(fd, magic, sizeof magic, 0);
    int comp = magic_comp(magic, got);
    const char *missing = NULL;
#ifndef TSR_ZLIB
    if (comp == COMP_GZIP) missing = "gzip-compressed, and this build has no zlib (install zlib1g-dev, rebuild)";
#endif
#ifndef TSR_ZSTD
    if (comp == COMP_ZSTD) missing = "zstd-compressed, and this build has no libzstd (install libzstd-dev, rebuild)";
#endif
    if (missing) { close(fd); return err_set(err, ERR_USAGE, "%s: %s", path, missing); }
    Zread *z = calloc(1, sizeof *z);
    if (!z) { close(fd); return err_set(err, ERR_RUN, "out of memory"); }
    z->path = path;
    z->fd = fd;
    z->comp = comp;
    z->ended = 1;   // nothing begun yet: an empty input is a complete one
    int bad = comp != COMP_NONE && !(z->in = malloc(IN_BYTES));
#ifdef TSR_ZLIB
    if (!bad && comp == COMP_GZIP) bad = !(z->gz_live = inflateInit2(&z->gz, 16 + MAX_WBITS) == Z_OK);
#endif
#ifdef TSR_ZSTD
    if (!bad && comp == COMP_ZSTD) bad = !(z->zs = ZSTD_createDStream());
#endif
    if (bad) { zread_close(z); return err_set(err, ERR_RUN, "out of memory"); }
    *out = z;
    return 0;
}

void zread_close(Zread *z) {
    if (!z) return;
#ifdef TSR_ZLIB
    if (z->gz_live) inflateEnd(&z->gz);
#endif
#ifdef TSR_ZSTD
    if (z->zs) ZSTD_freeDStream(z->zs);
#endif
    close(z->fd);
    free(z->in);
    free(z);
}

static long read_fd(Zread *z, void *dst, size_t n, Err *err) {
    ssize_t r;
    do r = read(z->fd, dst, n); while (r < 0 && errno == EINTR);
    if (r < 0) return err_set(err, ERR_RUN, "%s: %s", z->path, strerror(errno));
    return (long)r;
}

#if defined(TSR_ZLIB) || defined(TSR_ZSTD)
// Makes compressed input available: 1 with some, 0 at the end of the file,
// -1 with err.
static int refill(Zread *z, Err *err) {
    if (z->pos < z->len) return 1;
    if (z->raw_eof) return 0;
    long r = read_fd(z, z->in, IN_BYTES, err);
    if (r < 0) return -1;
    z->pos = 0;
    z->len = (size_t)r;
    z->raw_eof = r == 0;
    return r > 0;
}
#endif

#ifdef TSR_ZLIB
// Members one after another; bytes after the last that do not begin
// another member fail inflate's header check.
static long read_gzip(Zread *z, char *dst, size_t n, Err *err) {
    if (n > UINT_MAX) n = UINT_MAX;
    for (;;) {
        int more = refill(z, err);
        if (more < 0) return -1;
        if (!more) return z->ended ? 0 : err_set(err, ERR_USAGE, "%s: the gzip stream is truncated", z->path);
        if (z->ended && z->pos < z->len && inflateReset(&z->gz) != Z_OK)
            return err_set(err, ERR_RUN, "%s: cannot restart gzip", z->path);
        z->ended = 0;
        z->gz.next_in = z->in + z->pos;
        z->gz.avail_in = (uInt)(z->len - z->pos);
        z->gz.next_out = (Bytef *)dst;
        z->gz.avail_out = (uInt)n;
        int r = inflate(&z->gz, Z_NO_FLUSH);
        z->pos = z->len - z->gz.avail_in;
        size_t made = n - z->gz.avail_out;
        if (r == Z_STREAM_END) { z->ended = 1; z->members++; }
        else if (r == Z_MEM_ERROR) return err_set(err, ERR_RUN, "out of memory reading %s", z->path);
        else if (r != Z_OK && r != Z_BUF_ERROR && z->members && z->gz.total_out == 0)
            return err_set(err, ERR_USAGE, "%s: not valid gzip (bytes after the end of the gzip stream: %s)", z->path,
                           z->gz.msg ? z->gz.msg : "not a gzip member");
        else if (r != Z_OK && r != Z_BUF_ERROR)
            return err_set(err, ERR_USAGE, "%s: not valid gzip (%s)", z->path,
                           z->gz.msg ? z->gz.msg : "a preset dictionary is needed");
        if (made) return (long)made;
    }
}
#endif

#ifdef TSR_ZSTD
// Frames (skippable ones included) one after another; anything else after
// them is not a frame and fails.
static long read_zstd(Zread *z, char *dst, size_t n, Err *err) {
    for (;;) {
        int more = refill(z, err);
        if (more < 0) return -1;
        if (!more) return z->ended ? 0 : err_set(err, ERR_USAGE, "%s: the zstd stream is truncated", z->path);
        ZSTD_inBuffer in = {z->in, z->len, z->pos};
        ZSTD_outBuffer o = {dst, n, 0};
        size_t ret = ZSTD_decompressStream(z->zs, &o, &in);
        if (ZSTD_isError(ret)) return err_set(err, ERR_USAGE, "%s: not valid zstd (%s)", z->path, ZSTD_getErrorName(ret));
        z->pos = in.pos;
        z->ended = ret == 0;
        if (o.pos > 0) return (long)o.pos;
    }
}
#endif

long zread_read(Zread *z, char *dst, size_t n, Err *err) {
    if (n == 0) return 0;
    if (z->comp == COMP_NONE) return read_fd(z, dst, n, err);
#ifdef TSR_ZLIB
    if (z->comp == COMP_GZIP) return read_gzip(z, dst, n, err);
#endif
#ifdef TSR_ZSTD
    if (z->comp == COMP_ZSTD) return read_zstd(z, dst, n, err);
#endif
    return err_set(err, ERR_RUN, "%s: unreadable compression", z->path);
}

const char *zread_compression(const Zread *z) {
    return z->comp == COMP_GZIP ? "gzip" : z->comp == COMP_ZSTD ? "zstd" : "none";
}

long long zread_plain_size(const Zread *z) {
    struct stat st;
    return z->comp == COMP_NONE && fstat(z->fd, &st) == 0 ? (long long)st.st_size : -1;
}
