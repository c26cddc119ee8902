// The cache-blocked fp32 SGEMM (kernels/gemm_pack) against a float64
// product of the same operands: every edge of the 8 × 48 tile, the A and B
// blocks' edges, a reduction split into blocks, both operands row-major,
// transposed, or strided both ways, with and without accumulation; C's
// sum of squares as stored; the bits of both alike on 1 and 2 threads.
#include <float.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/gemm_pack.h"
#include "kernels/threads.h"
#include "test.h"

static unsigned g_seed = 12345;
static float rnd(void) {
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((g_seed >> 9) & 0xFFFF) / 32768.0f - 1.0f;
}

// A (R,K) laid out as pattern says: 0 row-major, 1 column-major, 2 every
// element two apart along both (a view of a larger array). Fills *buf and
// returns the element strides.
static float *layout(int pattern, int R, int K, long *rs, long *cs) {
    size_t n = (size_t)R * K * (pattern == 2 ? 4 : 1) + 1;
    float *b = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) b[i] = rnd();
    if (pattern == 0) *rs = K, *cs = 1;
    else if (pattern == 1) *rs = 1, *cs = R;
    else *rs = 4L * K, *cs = 2;
    return b;
}

static int check(int M, int N, int K, int pa, int pb, int accumulate) {
    long ars, acs, brs, bcs;
    float *A = layout(pa, M, K, &ars, &acs), *B = layout(pb, K, N, &brs, &bcs);
    long ldc = N + 3;
    float *C = malloc((size_t)M * ldc * sizeof(float)), *C2 = malloc((size_t)M * ldc * sizeof(float));
    for (long i = 0; i < M * ldc; i++) C[i] = rnd();
    memcpy(C2, C, (size_t)M * ldc * sizeof(float));
    double *want = malloc((size_t)M * N * sizeof(double)), *bound = malloc((size_t)M * N * sizeof(double));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = accumulate ? C[i * ldc + j] : 0, mag = fabs(s);
            for (int k = 0; k < K; k++) {
                double p = (double)A[i * ars + k * acs] * B[k * brs + j * bcs];
                s += p, mag += fabs(p);
            }
            want[(size_t)i * N + j] = s, bound[(size_t)i * N + j] = (K + 2) * FLT_EPSILON * mag + 1e-30;
        }
    int bad = 0;
    double sq = -1, sq1 = -1;
    kernels_set_threads(2);
    EXPECT(gemm_pack(M, N, K, A, ars, acs, B, brs, bcs, C, ldc, accumulate, &sq) == 0, "M=%d N=%d K=%d: refused", M,
           N, K);
    for (int i = 0; i < M && !bad; i++)
        for (int j = 0; j < N && !bad; j++) {
            double d = fabs(C[i * ldc + j] - want[(size_t)i * N + j]);
            if (!(d <= bound[(size_t)i * N + j])) {
                bad = 1;
                EXPECT(0, "M=%d N=%d K=%d A %d B %d acc %d: C[%d][%d] %.9g, want %.9g", M, N, K, pa, pb, accumulate, i, j,
                       C[i * ldc + j], want[(size_t)i * N + j]);
            }
        }
    for (int i = 0; i < M && !bad; i++)   // the padding past N in each row of C untouched
        for (int j = N; j < ldc && !bad; j++)
            if (C[i * ldc + j] != C2[i * ldc + j]) {
                bad = 1;
                EXPECT(0, "M=%d N=%d K=%d: C[%d][%d] past N written", M, N, K, i, j);
            }
    double want_sq = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) want_sq += (double)C[i * ldc + j] * C[i * ldc + j];
    if (!(fabs(sq - want_sq) <= 1e-12 * want_sq)) {
        bad = 1;
        EXPECT(0, "M=%d N=%d K=%d: sum of squares %.17g, want %.17g", M, N, K, sq, want_sq);
    }
    // one thread: the same bits
    float *C1 = C2;
    kernels_set_threads(1);
    gemm_pack(M, N, K, A, ars, acs, B, brs, bcs, C1, ldc, accumulate, &sq1);
    kernels_set_threads(2);
    if (memcmp(C, C1, (size_t)M * ldc * sizeof(float)) || memcmp(&sq, &sq1, sizeof sq)) {
        bad = 1;
        EXPECT(0, "M=%d N=%d K=%d: 1 and 2 threads differ", M, N, K);
    }
    free(A), free(B), free(C), free(C2), free(want), free(bound);
    return bad;
}

// The tile's edges (8 rows, 48 columns), the A block's (64 rows), the reduction's blocks (384 steps).
static void test_edges(void) {
    int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {8, 48, 16}, {9, 49, 17}, {63, 47, 15}, {64, 96, 383},
                       {65, 97, 384}, {130, 50, 385}, {3, 200, 800}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int pa = 0; pa < 3; pa++)
            for (int pb = 0; pb < 3; pb++)
                for (int acc = 0; acc < 2; acc++)
                    if (check(shapes[s][0], shapes[s][1], shapes[s][2], pa, pb, acc)) return;
}

// Products large enough for two threads, split by rows (C taller than wide)
// and by columns, with more columns than one B block holds.
static void test_threads(void) {
    int shapes[][3] = {{300, 40, 400}, {40, 1000, 800}, {200, 130, 64}, {17, 2000, 272}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int p = 0; p < 3; p++)
            if (check(shapes[s][0], shapes[s][1], shapes[s][2], p, p == 2 ? 0 : 1 - p, p & 1)) return;
}

// An empty product is refused, C and the sum of squares untouched (the caller's path runs it).
static void test_empty(void) {
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {0}, B[1] = {0};
    double sq = -1;
    EXPECT(gemm_pack(2, 3, 0, A, 0, 1, B, 3, 1, C, 3, 0, &sq) == -1 && C[0] == 1 && C[5] == 6 && sq == -1, "K=0");
    EXPECT(gemm_pack(0, 3, 2, A, 2, 1, B, 3, 1, C, 3, 0, NULL) == -1 && C[0] == 1, "M=0");
}

// A thread whose packing buffers cannot be had (the process's first
// product, the second thread's allocation failing): the product refused on
// every thread, C untouched; then, with memory, run.
static void test_no_room(void) {
    enum { M = 64, N = 200, K = 400 };   // 5.1M multiply-adds: two threads
    float *A = malloc(M * K * sizeof(float)), *B = malloc(K * N * sizeof(float)), *C = malloc(M * N * sizeof(float));
    for (int i = 0; i < M * K; i++) A[i] = rnd();
    for (int i = 0; i < K * N; i++) B[i] = rnd();
    for (int i = 0; i < M * N; i++) C[i] = 7.0f;
    kernels_set_threads(2);
    mem_fail_after(2);
    int r = gemm_pack(M, N, K, A, K, 1, B, N, 1, C, N, 0, NULL), untouched = 1;
    mem_fail_after(0);
    for (int i = 0; i < M * N; i++) untouched &= C[i] == 7.0f;
    EXPECT(r == -1 && untouched, "no room: %d, C %s", r, untouched ? "untouched" : "written");
    EXPECT(gemm_pack(M, N, K, A, K, 1, B, N, 1, C, N, 0, NULL) == 0 && C[0] != 7.0f, "with room: run");
    free(A), free(B), free(C);
}

// Built without AVX-512: every product refused, C untouched (kernels/matmul runs another path).
static void test_refused(void) {
    float C[1] = {5}, A[1] = {1}, B[1] = {1};
    double sq = -1;
    EXPECT(gemm_pack(1, 1, 1, A, 1, 1, B, 1, 1, C, 1, 0, &sq) == -1 && C[0] == 5 && sq == -1, "refused, C untouched");
}

int main(void) {
    if (!gemm_pack_own()) {
        RUN(test_refused);
        return test_finish();
    }
    RUN(test_no_room);   // first: no thread has its buffers yet
    RUN(test_edges);
    RUN(test_threads);
    RUN(test_empty);
    return test_finish();
}
