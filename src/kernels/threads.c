#include "kernels/threads.h"

#include <omp.h>

#include "core/check.h"

#ifdef TSR_OPENBLAS
void openblas_set_num_threads(int num_threads);
#endif

static int g_threads = 0;   // 0: not yet set, OpenMP's default

void kernels_set_threads(int n) {
    CHECK(n >= 1);
    g_threads = n;
    omp_set_num_threads(n);
#ifdef TSR_OPENBLAS
    openblas_set_num_threads(n);
#endif
}

int kernels_threads(void) { return g_threads ? g_threads : omp_get_max_threads(); }

int threads_any_failed(int *failed, int ok) {
    if (!ok) {
        #pragma omp atomic write
        *failed = 1;
    }
    #pragma omp barrier
    int stop;
    #pragma omp atomic read
    stop = *failed;
    return stop;
}
