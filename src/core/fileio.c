#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int file_open_regular(const char *path, Err *err) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);   // O_NONBLOCK: a FIFO does not wait for a writer
    if (fd < 0) return err_set(err, ERR_USAGE, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, ERR_USAGE, "%s: not a regular file", path);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

int file_create_new(const char *path, Err *err) {
    if (unlink(path) && errno != ENOENT) return err_set(err, ERR_RUN, "%s: %s", path, strerror(errno));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(err, ERR_RUN, "%s: %s", path, strerror(errno));
    return fd;
}

int file_read(const char *path, char **out, size_t *len, size_t max, Err *err) {
    *out = NULL;
    *len = 0;
    int fd = file_open_regular(path, err);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "rb");
    if (!f) { close(fd); return err_set(err, ERR_RUN, "%s: %s", path, strerror(errno)); }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); return err_set(err, ERR_RUN, "%s: out of memory", path); }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (max && n > max) {
            free(buf);
            fclose(f);
            return err_set(err, ERR_USAGE, "%s: larger than %zu bytes", path, max);
        }
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return err_set(err, ERR_USAGE, "%s: read error", path); }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

int file_temp_create(const char *path, char *tmp, size_t cap, Err *err) {
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 20 ^ (uint64_t)getpid() << 32;
    for (int attempt = 0; attempt < 100; attempt++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull + counter++;   // a fresh suffix each try
        char suf[7];
        for (int i = 0; i < 6; i++) suf[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[(x >> (6 * i + 16)) % 36];
        suf[6] = 0;
        if (snprintf(tmp, cap, "%s.tmp.%s", path, suf) >= (int)cap) return err_set(err, ERR_RUN, "%s: path too long", path);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        if (errno != EEXIST) return err_set(err, ERR_RUN, "%s: %s", tmp, strerror(errno));
    }
    return err_set(err, ERR_RUN, "%s: no free temporary name beside it", path);
}

// fsyncs the directory that holds path (its entry made by a rename).
static int sync_parent(const char *path) {
    char dir[4300];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int file_temp_commit(int fd, const char *tmp, const char *path, Err *err) {
    int e = fsync(fd) ? errno : 0;
    if (close(fd) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    if (e) {
        unlink(tmp);
        return err_set(err, ERR_RUN, "%s: write failed: %s", path, strerror(e));
    }
    if (sync_parent(path)) return err_set(err, ERR_RUN, "%s: fsync of its directory failed: %s", path, strerror(errno));
    return 0;
}

int file_write_whole(const char *path, const char *s, size_t n, Err *err) {
    char tmp[4300];
    int fd = file_temp_create(path, tmp, sizeof tmp, err);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, s + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            close(fd);
            unlink(tmp);
            return err_set(err, ERR_RUN, "%s: write failed: %s", path, strerror(e));
        }
        done += (size_t)w;
    }
    return file_temp_commit(fd, tmp, path, err);
}
