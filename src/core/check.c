#include "core/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int err_set(Err *e, int code, const char *fmt, ...) {
    if (!e) return -1;
    e->code = code;
    e->shown = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void err_prefix(Err *e, const char *prefix) {
    if (!e) return;
    char tmp[2 * sizeof e->msg];
    snprintf(tmp, sizeof tmp, "%s: %s", prefix, e->msg);
    size_t n = strlen(tmp);
    if (n >= sizeof e->msg) n = sizeof e->msg - 1;
    memcpy(e->msg, tmp, n);
    e->msg[n] = 0;
}

void check_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "tessera: internal error at %s:%d: check failed: %s", file, line, cond);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}
