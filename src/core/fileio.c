#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int file_write_whole(const char *path, const char *s, size_t n, Err *err) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = file_create_new(tmp, err);
    if (fd < 0) return -1;
    int bad = write(fd, s, n) != (ssize_t)n;
    int e = errno;
    bad = close(fd) || bad;
    if (bad || rename(tmp, path)) {
        if (!bad) e = errno;
        unlink(tmp);
        return err_set(err, ERR_USAGE, "%s: %s", path, strerror(e));
    }
    return 0;
}
