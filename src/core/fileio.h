// core/fileio — reading a whole file, and writing one durably: a
// temporary of this process's own beside it, fsync, rename, fsync the
// directory.
#ifndef TSR_CORE_FILEIO_H
#define TSR_CORE_FILEIO_H

#include <stddef.h>

#include "core/check.h"

// Reads path into a malloc'd, NUL-terminated buffer (*out, *len bytes).
// Fails with "PATH: reason" when the file cannot be read or is larger than
// max bytes (0: no limit).
int file_read(const char *path, char **out, size_t *len, size_t max, Err *err);
// Opens path for reading if it is a regular file (never blocking on a FIFO
// or reading a device without end); the descriptor, or -1 with err
// ("PATH: reason", ERR_USAGE).
int file_open_regular(const char *path, Err *err);
// Creates path afresh for writing (a temporary): whatever is at path — a
// leftover, or a symbolic link planted there — is unlinked first (a link
// itself, never its target), then the file is created with O_EXCL and
// O_NOFOLLOW. The descriptor, or -1 with err ("PATH: reason", ERR_RUN).
int file_create_new(const char *path, Err *err);
// Creates a temporary beside path for writing it: "PATH.tmp.XXXXXX" with a
// suffix no existing file has (O_EXCL, O_NOFOLLOW: made afresh by this
// call, never a file or link already there, which is left alone). Its name
// goes to tmp (cap bytes). The descriptor, or -1 with err ("PATH: reason",
// ERR_RUN).
int file_temp_create(const char *path, char *tmp, size_t cap, Err *err);
// Makes the temporary tmp (of file_temp_create, written through fd) path:
// fsync, close, rename over path, fsync the directory. fd is closed either
// way; on failure tmp, which this process made, is removed. 0, or -1 with
// err ("PATH: write failed: reason", ERR_RUN).
int file_temp_commit(int fd, const char *tmp, const char *path, Err *err);
// Writes s[0..n) as path, whole, by the two calls above. 0, or -1 with err.
int file_write_whole(const char *path, const char *s, size_t n, Err *err);

#endif
