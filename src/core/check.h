// core/check — the two error tiers.
//
// Recoverable problems (a bad flag, file or config) are reported through an
// Err: the function fills it with one line that names the flag/file and says
// what is wrong, and returns -1. Only cli/ turns an Err into an exit status.
//
// Broken invariants (a bug, never bad user input) hit CHECK, which is always
// on, prints file:line and the failed condition, and aborts.
#ifndef TSR_CORE_CHECK_H
#define TSR_CORE_CHECK_H

#include <stddef.h>

enum { ERR_OK = 0, ERR_RUN = 1, ERR_USAGE = 2 };   // also the exit codes

typedef struct Err {
    int code;            // ERR_OK, ERR_RUN (failure while running), ERR_USAGE (bad input)
    int shown;           // already written to stderr, with its rank, by the layer that caught it
                         // (a failed collective): callers exit with it without writing it again
    char msg[512];       // one line, no trailing newline
} Err;

// Fills e (when not NULL) with code and a printf-formatted message; returns -1
// so callers can write `return err_set(e, ERR_USAGE, "...")`.
int err_set(Err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// Prefixes e->msg with "prefix: " (to add a file name as an error travels up).
void err_prefix(Err *e, const char *prefix);

_Noreturn void check_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define CHECK(cond) \
    do { if (!(cond)) check_fail(__FILE__, __LINE__, #cond, NULL); } while (0)
#define CHECKF(cond, ...) \
    do { if (!(cond)) check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__); } while (0)

#endif
