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

void threads_chunks(int nt, long n, long chunk, ChunkFn fn, const void *arg) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    long nch = (n + chunk - 1) / chunk;
    if (nt <= 1 || nch == 1) {
        fn(arg, 0, n);
        return;
    }
    #pragma omp parallel for num_threads(nt < nch ? nt : (int)nch) schedule(dynamic, 1)
    for (long c = 0; c < nch; c++) fn(arg, c * chunk, (c + 1) * chunk < n ? (c + 1) * chunk : n);
}

long threads_chunk(long n, int nt, long unit, double flops) {
    if (unit < 1) unit = 1;
    long runs = flops * unit >= CHUNK_FLOPS ? 1 : (long)(CHUNK_FLOPS / (flops * unit + 1)) + 1;
    long chunk = runs * unit, most = n / (8L * (nt > 1 ? nt : 1));
    if (chunk > most) chunk = most;
    return chunk < 1 ? 1 : chunk;
}

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
