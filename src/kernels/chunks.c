#include "kernels/chunks.h"

#include <string.h>

#include "core/alloc.h"
#include "core/check.h"

enum { MIN_ROWS = 32, MAX_CHUNKS = 64 };

int chunks_of(int N) {
    int nc = (N + MIN_ROWS - 1) / MIN_ROWS;
    return nc < 1 ? 1 : nc > MAX_CHUNKS ? MAX_CHUNKS : nc;
}

int chunk_lo(int N, int nc, int c) { return (int)((long)N * c / nc); }

static _Thread_local void *g_parts;
static _Thread_local size_t g_parts_bytes;

float *chunk_room(int N, size_t per, int *nc) {
    *nc = chunks_of(N);
    float *p = mem_grow(&g_parts, &g_parts_bytes, MEM_WORKSPACE, (size_t)*nc * per * sizeof(float));
    CHECKF(p, "out of memory for %d chunks of %zu partial sums", *nc, per);
    return p;
}

void chunks_add(float *dst, const float *part, int nc, size_t stride, int M) {
    #pragma omp for schedule(static)
    for (int m0 = 0; m0 < M; m0 += 64) {   // 64 columns at a time, down the chunks
        int w = M - m0 < 64 ? M - m0 : 64;
        float acc[64];
        memcpy(acc, part + m0, (size_t)w * sizeof *acc);
        for (int c = 1; c < nc; c++) {
            const float *p = part + (size_t)c * stride + m0;
            #pragma omp simd
            for (int m = 0; m < w; m++) acc[m] += p[m];
        }
        for (int m = 0; m < w; m++) dst[m0 + m] += acc[m];
    }
}
