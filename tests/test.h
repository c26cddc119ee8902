// tests/test.h — the tiny harness every test binary uses.
//
// A test case is a function; EXPECT records failures with file:line and
// keeps going; RUN reports the case as ok or FAIL. test_finish prints the
// closing "N passed, N failed" line and gives the exit status.
#ifndef TSR_TEST_H
#define TSR_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_passed, test_failed, test_case_failed;

#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            test_case_failed = 1;                                           \
            fprintf(stderr, "  %s:%d: expected %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

#define RUN(fn)                                                             \
    do {                                                                    \
        test_case_failed = 0;                                               \
        fn();                                                               \
        if (test_case_failed) { test_failed++; printf("FAIL %s\n", #fn); }  \
        else { test_passed++; printf("ok   %s\n", #fn); }                  \
        fflush(stdout);                                                     \
    } while (0)

static inline int test_finish(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

// max |a - b| / max(max |b|, floor): the error of a relative to reference b.
static inline double rel_err_fd(const float *a, const double *b, size_t n, double floor_) {
    double num = 0, den = floor_;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

#endif
