// The bf16 products (kernels/gemm_bf16) against float64 products of the same
// bf16-rounded operands, on every tile edge, stride, odd reduction and
// blocked reduction; the packers exactly; the linear layers under bf16; and
// the arithmetic peak probe (kernels/peak) for sanity. The elementwise
// kernels on 16-bit stores: test_act16.
#include <math.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/peak.h"
#include "kernels/pointwise.h"
#include "test.h"
#include "units.h"

static double b16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// ---- the packers: each element where the layout says, rounded, the odd K's pad zero ----
static void pack_rows_case(int R, int K, int lds) {
    float *src = randn((size_t)(K > R ? K : R) * lds, 1);
    int kp = (K + 1) / 2, ldd = 2 * kp + 3;
    uint16_t *d = calloc((size_t)R * ldd + 64, sizeof *d);
    int ok = 1;
    bf16_pack_rows(d, ldd, src, lds, R, K);   // (R,K) rows
    for (int r = 0; r < R; r++) {
        for (int k = 0; k < K; k++) ok &= d[(size_t)r * ldd + k] == f32_to_bf16(src[(size_t)r * lds + k]);
        ok &= d[(size_t)r * ldd + K] == 0;
    }
    EXPECT(ok, "bf16_pack_rows R=%d K=%d", R, K);
    ok = 1;
    bf16_pack_rows_t(d, ldd, src, lds, R, K);   // src (K,R): dst[r][k] = src[k][r]
    for (int r = 0; r < R; r++) {
        for (int k = 0; k < K; k++) ok &= d[(size_t)r * ldd + k] == f32_to_bf16(src[(size_t)k * lds + r]);
        ok &= d[(size_t)r * ldd + K] == 0;
    }
    EXPECT(ok, "bf16_pack_rows_t R=%d K=%d", R, K);
    free(d);
    free(src);
}

static void test_pack(void) {
    // R, K past 16- and 32-blocks and odd; 83 rows are five 16-row strips (a group of four and one)
    pack_rows_case(19, 37, 41);
    pack_rows_case(83, 101, 107);
    int ok;
    for (int t = 0; t < 2; t++) {   // pairs from (K,NC) rows, and from the transpose (NC,K)
        int NC = 35, Ks[] = {37, 64};
        for (int ki = 0; ki < 2; ki++) {
            int KK = Ks[ki], kp2 = (KK + 1) / 2;
            float *s = randn((size_t)(KK > NC ? KK : NC) * 70, 1);
            uint16_t *p = calloc((size_t)kp2 * NC * 2 + 1, sizeof *p);
            if (t) bf16_pack_pairs_t(p, s, 70, KK, NC);
            else bf16_pack_pairs(p, s, 70, KK, NC);
            ok = 1;
            for (int q = 0; q < kp2; q++)
                for (int n = 0; n < NC; n++)
                    for (int j = 0; j < 2; j++) {
                        int k = 2 * q + j;
                        float v = k < KK ? (t ? s[(size_t)n * 70 + k] : s[(size_t)k * 70 + n]) : 0.0f;
                        ok &= p[2 * ((size_t)q * NC + n) + j] == (k < KK ? f32_to_bf16(v) : 0);
                    }
            EXPECT(ok, "bf16_pack_pairs%s K=%d NC=%d", t ? "_t" : "", KK, NC);
            free(s); free(p);
        }
    }
}

// C (R,NC) = A (R,K) · B (K,NC) [+ C], A and B packed from fp32 with row strides past the widths.
static void check_gemm(int R, int NC, int K, int accumulate) {
    int kp = (K + 1) / 2, lda = 2 * kp + 6, ldb = NC + 3, ldc = NC + 2;
    float *A = randn((size_t)R * K, 1), *B = randn((size_t)K * NC, 1), *C0 = randn((size_t)R * ldc, 1);
    float *C = calloc((size_t)R * ldc + 1, sizeof *C);
    uint16_t *a = calloc((size_t)R * lda + 1, sizeof *a), *b = calloc((size_t)kp * ldb * 2 + 1, sizeof *b);
    bf16_pack_rows(a, lda, A, K, R, K);
    // B packed with ldb > NC: pack each pair row into its strided place
    uint16_t *tmp = calloc((size_t)kp * NC * 2 + 1, sizeof *tmp);
    bf16_pack_pairs(tmp, B, NC, K, NC);
    for (int q = 0; q < kp; q++) memcpy(b + 2 * (size_t)q * ldb, tmp + 2 * (size_t)q * NC, (size_t)NC * 4);
    memcpy(C, C0, (size_t)R * ldc * sizeof *C);
    gemm_bf16(R, NC, kp, a, lda, b, ldb, C, ldc, accumulate);
    double worst = 0;
    int pad_ok = 1;
    for (int i = 0; i < R; i++) {
        for (int j = 0; j < NC; j++) {
            double ref = accumulate ? C0[(size_t)i * ldc + j] : 0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double p = b16(A[(size_t)i * K + k]) * b16(B[(size_t)k * NC + j]);
                ref += p, mag += fabs(p);
            }
            double e = fabs(C[(size_t)i * ldc + j] - ref) / (mag + 1e-30);
            if (e > worst) worst = e;
        }
        for (int j = NC; j < ldc; j++) pad_ok &= C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
    }
    // fp32 sums of exact products: each partial sum rounded once, a few ulps of the magnitude
    EXPECT(worst < 1e-6 * (1 + K / 64.0), "gemm_bf16 R=%d NC=%d K=%d acc=%d err %.2e (relative to sum |a·b|)", R, NC,
           K, accumulate, worst);
    EXPECT(pad_ok, "gemm_bf16 R=%d NC=%d K=%d wrote past the row's NC columns", R, NC, K);
    free(A); free(B); free(C0); free(C); free(a); free(b); free(tmp);
}

// A large C over a short reduction (on the tiles: one reduction block, not
// two) has the bits of the same product in column halves, whose C is small
// enough for blocks: summing in blocks through C is exact.
static void check_one_block(void) {
    int R = 1024, NC = 4096, K = 767, kp = (K + 1) / 2, h = NC / 2;
    float *A = randn((size_t)R * K, 1), *B = randn((size_t)K * NC, 1), *c1 = randn((size_t)R * NC, 1);
    float *c2 = malloc((size_t)R * NC * sizeof *c2);
    memcpy(c2, c1, (size_t)R * NC * sizeof *c2);
    uint16_t *a = calloc((size_t)R * 2 * kp, sizeof *a), *b = calloc((size_t)kp * NC * 2, sizeof *b);
    bf16_pack_rows(a, 2 * kp, A, K, R, K);
    bf16_pack_pairs(b, B, NC, K, NC);
    gemm_bf16(R, NC, kp, a, 2 * kp, b, NC, c1, NC, 1);
    for (int c0 = 0; c0 < NC; c0 += h) gemm_bf16(R, h, kp, a, 2 * kp, b + 2 * (size_t)c0, NC, c2 + c0, NC, 1);
    EXPECT(!memcmp(c1, c2, (size_t)R * NC * sizeof *c1), "gemm_bf16 %d×%d×%d: not the bits of its column halves", R,
           NC, K);
    free(A); free(B); free(c1); free(c2); free(a); free(b);
}

static void test_gemm_bf16(void) {
    check_one_block();
    for (int R = 1; R <= 13; R++) check_gemm(R, 37, 19, R & 1);   // partial row tiles, odd K, 48-column tile
    int widths[] = {1, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 100, 129, 200};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) check_gemm(25, widths[w], 40, 0);
    check_gemm(30, 70, 0, 0);     // an empty reduction: C = 0
    check_gemm(30, 70, 0, 1);     // ... or unchanged
    check_gemm(9, 1100, 601, 1);  // column blocks of B (six 64-column tiles each), odd K
    check_gemm(9, 300, 4101, 1);  // the reduction in two blocks of 1,026 pairs, the last shorter, odd K
    check_gemm(70, 64, 5001, 0);  // a narrow B, a long whole reduction
    check_gemm(300, 260, 96, 1);  // more rows than columns: row tiles outer
    check_gemm(40, 2100, 4200, 1);  // two column blocks of B at a reduction in two blocks
    // threads: tiles split differently, the same sums
    int R = 100, NC = 300, K = 400, kp = K / 2;
    float *A = randn((size_t)R * K, 1), *B = randn((size_t)K * NC, 1);
    float *c1 = calloc((size_t)R * NC, sizeof *c1), *c2 = calloc((size_t)R * NC, sizeof *c2);
    uint16_t *a = calloc((size_t)R * K, sizeof *a), *b = calloc((size_t)K * NC, sizeof *b);
    bf16_pack_rows(a, K, A, K, R, K);
    bf16_pack_pairs(b, B, NC, K, NC);
    int saved = kernels_threads();
    kernels_set_threads(1);
    gemm_bf16(R, NC, kp, a, K, b, NC, c1, NC, 0);
    kernels_set_threads(2);
    gemm_bf16(R, NC, kp, a, K, b, NC, c2, NC, 0);
    kernels_set_threads(saved);
    EXPECT(memcmp(c1, c2, (size_t)R * NC * sizeof(float)) == 0, "gemm_bf16 differs between 1 and 2 threads");
    free(A); free(B); free(c1); free(c2); free(a); free(b);
}

// Bit for bit: gemm_bf16_op on operands in each form the callers hold them
// — fp32 rows or transposed, bf16 rows or transposed, the tiles' panels —
// as on the same values packed into gemm_bf16's layouts first; with the
// bias and accumulating; with room and without it.
static void check_forms(int R, int NC, int K) {
    int kp = (K + 1) / 2, lda = K + 3, ldat = R + 5, ldb = NC + 2, ldbt = K + 4;
    float *A = randn((size_t)R * lda, 1), *At = calloc((size_t)K * ldat, sizeof *At);
    float *B = randn((size_t)K * ldb, 1), *Bt = calloc((size_t)NC * ldbt, sizeof *Bt), *bias = randn((size_t)NC, 1);
    uint16_t *B16 = calloc((size_t)K * ldb, sizeof *B16), *Bt16 = calloc((size_t)NC * ldbt, sizeof *Bt16);
    uint16_t *At16 = calloc((size_t)K * ldat, sizeof *At16);
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) {
            At[(size_t)k * ldat + r] = A[(size_t)r * lda + k];
            At16[(size_t)k * ldat + r] = f32_to_bf16(A[(size_t)r * lda + k]);
        }
    for (int k = 0; k < K; k++)
        for (int n = 0; n < NC; n++) {
            Bt[(size_t)n * ldbt + k] = B[(size_t)k * ldb + n];
            B16[(size_t)k * ldb + n] = Bt16[(size_t)n * ldbt + k] = f32_to_bf16(B[(size_t)k * ldb + n]);
        }
    uint16_t *a = calloc((size_t)R * 2 * kp, sizeof *a), *b = calloc((size_t)kp * NC * 2, sizeof *b);
    uint16_t *room = calloc(gemm_bf16_room(R, NC, K, OP_ROWS32, OP_ROWS32), sizeof *room);
    int amx = gemm_bf16_unit() == BF16_AMX;
    uint16_t *pan = amx ? calloc(gemm_bf16_panels_len(K, NC), sizeof *pan) : NULL;
    bf16_pack_rows(a, 2 * kp, A, lda, R, K);
    bf16_pack_pairs(b, B, ldb, K, NC);
    if (amx) gemm_bf16_panels(pan, (Bf16Op){OP_COLS16, Bt16, ldbt}, K, NC);
    Bf16Op as[] = {{OP_PAIRS16, a, 2 * kp}, {OP_ROWS32, A, lda}, {OP_COLS32, At, ldat}, {OP_COLS16, At16, ldat}};
    Bf16Op bs[] = {{OP_PAIRS16, b, NC}, {OP_ROWS16, B16, ldb}, {OP_COLS16, Bt16, ldbt}, {OP_ROWS32, B, ldb},
                   {OP_COLS32, Bt, ldbt}, {OP_PANELS, pan, kp}};
    size_t n = (size_t)R * NC;
    float *c0 = randn(n, 1), *ref = malloc(n * sizeof *ref), *c = malloc(n * sizeof *c);
    for (int acc = 0; acc < 2; acc++) {
        const float *bi = acc ? NULL : bias;
        memcpy(ref, c0, n * sizeof *ref);
        EXPECT(gemm_bf16_op(R, NC, K, as[0], bs[0], ref, NC, acc, bi, NULL) == 0, "gemm_bf16_op in pairs failed");
        int ok = 1, refused = 1;
        for (int ia = 0; ia < 4; ia++)
            for (int ib = 0; ib < (amx ? 6 : 5); ib++) {
                memcpy(c, c0, n * sizeof *c);
                ok &= gemm_bf16_op(R, NC, K, as[ia], bs[ib], c, NC, acc, bi, room) == 0 &&
                      memcmp(c, ref, n * sizeof *c) == 0;
                if (!amx && (ia || ib)) {   // the vector units need room for a form not in pairs
                    memcpy(c, c0, n * sizeof *c);
                    refused &= gemm_bf16_op(R, NC, K, as[ia], bs[ib], c, NC, acc, bi, NULL) == -1 &&
                                memcmp(c, c0, n * sizeof *c) == 0;
                }
            }
        EXPECT(ok, "gemm_bf16_op R=%d NC=%d K=%d acc=%d: a form's bits differ from the pairs'", R, NC, K, acc);
        EXPECT(refused, "gemm_bf16_op R=%d NC=%d K=%d: ran without room, or touched C", R, NC, K);
    }
    free(A); free(At); free(At16); free(B); free(Bt); free(bias); free(B16); free(Bt16); free(a); free(b); free(room);
    free(pan);
    free(c0); free(ref); free(c);
}

static void test_forms(void) {
    check_forms(1, 1, 1);
    check_forms(37, 45, 67);      // edges everywhere, odd K
    check_forms(70, 100, 801);    // three reduction blocks, odd K
    check_forms(64, 1100, 96);    // column blocks of B
    check_forms(40, 2100, 400);   // two column blocks of B, two reduction blocks
    check_forms(33, 17, 4101);    // a long reduction, rows past a tile
}

// Bit for bit: C = bias + A·B (gemm_bf16_bias) as the rows holding the bias
// with the product added; and a reduction cut in two calls (the second
// adding to the first's fp32 sums) as one call — so the kernel's own
// reduction blocks change no bits. The tile unit adds 16 pairs at a time in
// its own order, so there the cut falls between chunks of 16.
static void test_gemm_bias(void) {
    int shapes[][3] = {{13, 37, 19}, {25, 100, 40}, {7, 1100, 601}, {9, 300, 4101}, {300, 260, 96}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int R = shapes[s][0], NC = shapes[s][1], K = shapes[s][2], kp = (K + 1) / 2, h = kp / 2;
        if (gemm_bf16_unit() == BF16_AMX) h = h / 16 * 16;
        float *A = randn((size_t)R * K, 1), *B = randn((size_t)K * NC, 1), *bias = randn((size_t)NC, 1);
        float *c1 = calloc((size_t)R * NC, sizeof *c1), *c2 = calloc((size_t)R * NC, sizeof *c2);
        uint16_t *a = calloc((size_t)R * 2 * kp, sizeof *a), *b = calloc((size_t)2 * kp * NC, sizeof *b);
        bf16_pack_rows(a, 2 * kp, A, K, R, K);
        bf16_pack_pairs(b, B, NC, K, NC);
        gemm_bf16_bias(R, NC, kp, a, 2 * kp, b, NC, c1, NC, bias);
        for (int i = 0; i < R; i++) memcpy(c2 + (size_t)i * NC, bias, (size_t)NC * sizeof *c2);
        gemm_bf16(R, NC, kp, a, 2 * kp, b, NC, c2, NC, 1);
        EXPECT(memcmp(c1, c2, (size_t)R * NC * sizeof *c1) == 0, "gemm_bf16_bias R=%d NC=%d K=%d: not the bits of "
               "the product added to the bias", R, NC, K);
        gemm_bf16(R, NC, kp, a, 2 * kp, b, NC, c1, NC, 0);
        gemm_bf16(R, NC, h, a, 2 * kp, b, NC, c2, NC, 0);
        gemm_bf16(R, NC, kp - h, a + 2 * h, 2 * kp, b + 2 * (size_t)h * NC, NC, c2, NC, 1);
        EXPECT(memcmp(c1, c2, (size_t)R * NC * sizeof *c1) == 0, "gemm_bf16 R=%d NC=%d K=%d: a reduction cut at pair "
               "%d gives other bits", R, NC, K, h);
        free(A); free(B); free(bias); free(c1); free(c2); free(a); free(b);
    }
}

// The linear layers under matmul_set_bf16: forward, input and weight gradients
// against float64 products of the bf16-rounded operands, at row counts from 2
// to past the fp32 dispatch's 256, with an odd C and an odd N; the fp32
// setting restored afterwards.
// linear_forward16: the bits half_pack gives linear_forward's output —
// partial tiles, a reduction in blocks and in one, with and without a bias;
// -1 with nothing written for one row.
static void test_forward16(void) {
    // {N, C, OC}: the tiles' reduction in blocks past 384 pairs, the vector units' past 2,048
    int shapes[][3] = {{2, 41, 130}, {70, 800, 37}, {1100, 768, 4000}, {30, 4200, 70}, {1, 64, 64}};
    int prev = matmul_set_bf16(1);
    for (int si = 0; si < 5; si++) {
        int N = shapes[si][0], C = shapes[si][1], OC = shapes[si][2];
        size_t ny = (size_t)N * OC;
        float *x = randn((size_t)N * C, 1), *w = randn((size_t)OC * C, 1), *bias = si & 1 ? NULL : randn(OC, 1);
        float *y = calloc(ny, sizeof *y), *room = calloc(ny, sizeof *room);
        uint16_t *want = calloc(ny, sizeof *want), *got = malloc(ny * sizeof *got);
        memset(got, 0x7f, ny * sizeof *got);
        linear_forward(y, x, w, bias, N, C, OC);
        half_pack(PREC_BF16, want, y, ny);
        int rc = linear_forward16(got, room, x, w, bias, N, C, OC);
        EXPECT(rc == (N > 1 ? 0 : -1), "linear_forward16 N=%d C=%d OC=%d: %d", N, C, OC, rc);
        EXPECT(rc || !memcmp(got, want, ny * sizeof *got), "linear_forward16 N=%d C=%d OC=%d: not the packed bits", N,
               C, OC);
        free(x); free(w); free(bias); free(y); free(room); free(want); free(got);
    }
    matmul_set_bf16(prev);
}

static void test_linear_bf16(void) {
    int rows[] = {2, 7, 64, 257, 300}, C = 41, OC = 130;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int N = rows[r];
        float *x = randn((size_t)N * C, 1), *w = randn((size_t)OC * C, 1), *bias = randn(OC, 1);
        float *dy = randn((size_t)N * OC, 1), *y = calloc((size_t)N * OC, sizeof *y);
        float *dx = calloc((size_t)N * C, sizeof *dx), *dw = calloc((size_t)OC * C, sizeof *dw);
        for (size_t i = 0; i < (size_t)OC * C; i++) dw[i] = 0.5f;   // the weight gradient accumulates
        int prev = matmul_set_bf16(1);
        EXPECT(matmul_bf16() == 1, "matmul_set_bf16(1) took");
        linear_forward(y, x, w, bias, N, C, OC);
        linear_backward(dx, dw, NULL, dy, x, w, N, C, OC, 0);
        matmul_set_bf16(prev);
        EXPECT(matmul_bf16() == prev, "matmul_set_bf16 restored");
        double ey = 0, ex = 0, ew = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double ref = bias[o], mag = fabs(ref);
                for (int c = 0; c < C; c++) {
                    double p = b16(x[(size_t)n * C + c]) * b16(w[(size_t)o * C + c]);
                    ref += p, mag += fabs(p);
                }
                ey = fmax(ey, fabs(y[(size_t)n * OC + o] - ref) / mag);
            }
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double ref = 0, mag = 1e-30;
                for (int o = 0; o < OC; o++) {
                    double p = b16(dy[(size_t)n * OC + o]) * b16(w[(size_t)o * C + c]);
                    ref += p, mag += fabs(p);
                }
                ex = fmax(ex, fabs(dx[(size_t)n * C + c] - ref) / mag);
            }
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double ref = 0.5, mag = 0.5;
                for (int n = 0; n < N; n++) {
                    double p = b16(dy[(size_t)n * OC + o]) * b16(x[(size_t)n * C + c]);
                    ref += p, mag += fabs(p);
                }
                ew = fmax(ew, fabs(dw[(size_t)o * C + c] - ref) / mag);
            }
        EXPECT(ey < 1e-6 && ex < 1e-6 && ew < 1e-6, "linear bf16 N=%d: fwd %.2e, dinp %.2e, dweight %.2e", N, ey, ex,
               ew);
        free(x); free(w); free(bias); free(dy); free(y); free(dx); free(dw);
    }
}

// linear_backward16: from an output gradient already in bf16 (rows ld
// apart, as the head's logits' gradient lies in its float rows), the bits
// of linear_backward on the same values as floats, the input gradient
// written and added to, the weight gradient added to and written where
// marked unwritten — on the tiles read as they lie, elsewhere widened.
static void test_backward16(void) {
    int shapes[][3] = {{7, 41, 130}, {70, 64, 258}, {293, 96, 1024}};   // {N, C, OC}
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], C = shapes[si][1], OC = shapes[si][2], ld = 2 * OC;
        float *x = randn((size_t)N * C, 1), *w = randn((size_t)OC * C, 1), *dy = randn((size_t)N * OC, 1);
        uint16_t *d16 = calloc((size_t)N * ld, sizeof *d16);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                d16[(size_t)n * ld + o] = f32_to_bf16(dy[(size_t)n * OC + o]);
                dy[(size_t)n * OC + o] = bf16_to_f32(d16[(size_t)n * ld + o]);
            }
        size_t nx = (size_t)N * C, nw = (size_t)OC * C;
        float *dx1 = randn(nx, 2), *dx2 = malloc(nx * 4), *dw1 = randn(nw, 3), *dw2 = malloc(nw * 4);
        memcpy(dx2, dx1, nx * 4);
        memcpy(dw2, dw1, nw * 4);
        int prev = matmul_set_bf16(1), ok = 1;
        for (int round = 0; round < 2; round++) {   // added to, then written (accumulate 0, marked unwritten)
            if (round) matmul_grad_fresh(dw1);
            linear_backward(dx1, dw1, NULL, dy, x, w, N, C, OC, !round);
            if (round) matmul_grad_fresh(dw2);
            linear_backward16(dx2, dw2, d16, ld, x, w, N, C, OC, !round);
            ok &= memcmp(dx1, dx2, nx * 4) == 0 && memcmp(dw1, dw2, nw * 4) == 0;
        }
        EXPECT(matmul_grads_unwritten() == 0, "a mark left unused");
        matmul_set_bf16(prev);
        EXPECT(ok, "linear_backward16 N=%d C=%d OC=%d: not linear_backward's bits (tiles %d)", N, C, OC,
               gemm_bf16_unit() == BF16_AMX);
        free(x); free(w); free(dy); free(d16); free(dx1); free(dx2); free(dw1); free(dw2);
    }
}

// matmul_hold: a held weight's packed forms serve chunks of rows with the
// same bits as unheld calls; a new hold after the weight changed packs it
// again (version 0, or a new version); a hold of the same weight and
// version reuses the forms (the values under it are taken as unchanged).
static void held_chunks(float *y, float *d, const float *x, const float *w, const float *dy, int N, int C, int OC,
                        uint64_t version) {
    matmul_hold(w, version, 0);
    for (int r0 = 0; r0 < N; r0 += 33) {   // chunks of rows, as the head runs
        int nr = N - r0 < 33 ? N - r0 : 33;
        linear_forward(y + (size_t)r0 * OC, x + (size_t)r0 * C, w, NULL, nr, C, OC);
        linear_backward(d + (size_t)r0 * C, NULL, NULL, dy + (size_t)r0 * OC, x + (size_t)r0 * C, w, nr, C, OC, 0);
    }
    matmul_release();
}

static void test_hold(void) {
    int N = 70, C = 41, OC = 130;
    float *x = randn((size_t)N * C, 1), *w = randn((size_t)OC * C, 1), *dy = randn((size_t)N * OC, 1);
    float *y1 = calloc((size_t)N * OC, sizeof *y1), *y2 = calloc((size_t)N * OC, sizeof *y2);
    float *d1 = calloc((size_t)N * C, sizeof *d1), *d2 = calloc((size_t)N * C, sizeof *d2);
    size_t ny = (size_t)N * OC * sizeof *y1, nd = (size_t)N * C * sizeof *d1;
    int prev = matmul_set_bf16(1);
    for (int round = 0; round < 4; round++) {   // versions 0, 0, 7, 8
        uint64_t v = round < 2 ? 0 : 5 + (uint64_t)round;
        linear_forward(y1, x, w, NULL, N, C, OC);
        linear_backward(d1, NULL, NULL, dy, x, w, N, C, OC, 0);
        for (int hold = 0; hold < 2; hold++) {   // two micro-batches' holds
            memset(y2, 0, ny), memset(d2, 0, nd);
            held_chunks(y2, d2, x, w, dy, N, C, OC, v);
            EXPECT(!memcmp(y1, y2, ny) && !memcmp(d1, d2, nd),
                   "held weight, version %llu, hold %d: chunks differ from whole calls", (unsigned long long)v, hold);
        }
        for (size_t i = 0; i < (size_t)OC * C; i++) w[i] *= -0.5f;   // the next round: new values, same pointer
    }
    // the last version again over changed values: the forms of the old values are reused
    held_chunks(y2, d2, x, w, dy, N, C, OC, 8);
    EXPECT(!memcmp(y1, y2, ny) && !memcmp(d1, d2, nd), "a hold of the same version packs the weight again");
    held_chunks(y2, d2, x, w, dy, N, C, OC, 0);
    linear_forward(y1, x, w, NULL, N, C, OC);
    linear_backward(d1, NULL, NULL, dy, x, w, N, C, OC, 0);
    EXPECT(!memcmp(y1, y2, ny) && !memcmp(d1, d2, nd), "version 0 after a versioned hold: not packed again");
    matmul_set_bf16(prev);
    free(x); free(w); free(dy); free(y1); free(y2); free(d1); free(d2);
}

// The packers from bf16 values give the bits the fp32 packers give on the
// same values, across full vectors, edges and odd K.
static void test_pack16(void) {
    int Ks[] = {37, 64, 65}, NCs[] = {35, 64, 70, 150};   // 150: rows_t's groups of 8 strips, and a partial one
    for (int ki = 0; ki < 3; ki++)
        for (int ni = 0; ni < 4; ni++) {
            int K = Ks[ki], NC = NCs[ni], kp = (K + 1) / 2, ld = 152;
            size_t n = (size_t)(K > NC ? K : NC) * ld;
            float *f = randn(n, 1);
            uint16_t *h = malloc(n * sizeof *h);
            for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(f[i]), f[i] = bf16_to_f32(h[i]);
            size_t np = (size_t)kp * NC * 2;
            uint16_t *p1 = calloc(np, sizeof *p1), *p2 = calloc(np, sizeof *p2);
            bf16_pack_pairs(p1, f, ld, K, NC);
            bf16_pairs16(p2, h, ld, K, NC);
            EXPECT(!memcmp(p1, p2, np * sizeof *p1), "bf16_pairs16 K=%d NC=%d", K, NC);
            bf16_pack_pairs_t(p1, f, ld, K, NC);
            bf16_pairs_t16(p2, h, ld, K, NC);
            EXPECT(!memcmp(p1, p2, np * sizeof *p1), "bf16_pairs_t16 K=%d NC=%d", K, NC);
            bf16_pack_rows_t(p1, 2 * kp, f, ld, NC, K);   // A (NC, K) from src (K, NC): as many values
            bf16_rows_t16(p2, 2 * kp, h, ld, NC, K);
            EXPECT(!memcmp(p1, p2, np * sizeof *p1), "bf16_rows_t16 R=%d K=%d", NC, K);
            free(f); free(h); free(p1); free(p2);
        }
}

// A bound weight (matmul_bind16): its floats never read (NaN here), the
// same bits as the weight passed in floats, on the bf16 paths, the one-row
// fp32 path that widens it, and held.
// An input bound to its 16-bit store alone (its floats NaN here): every
// product reads the store — the bf16 products as their operand, one row's
// fp32 product and an odd width's widened copy — with the bits of the same
// values in floats.
static void test_bound_input(void) {
    int shapes[][3] = {{40, 70, 1}, {41, 70, 20}, {40, 70, 70}};   // {C, OC, N}
    int prev = matmul_set_bf16(1);
    for (int si = 0; si < 3; si++) {
        int C = shapes[si][0], OC = shapes[si][1], N = shapes[si][2];
        size_t nx = (size_t)N * C, nw = (size_t)OC * C;
        float *x = randn(nx, 1), *nan = malloc(nx * sizeof *nan), *w = randn(nw, 1), *dy = randn((size_t)N * OC, 1);
        uint16_t *x16 = malloc(nx * sizeof *x16);
        for (size_t i = 0; i < nx; i++) x16[i] = f32_to_bf16(x[i]), x[i] = bf16_to_f32(x16[i]), nan[i] = NAN;
        float *y[2], *dw[2];
        for (int b = 0; b < 2; b++) {
            y[b] = calloc((size_t)N * OC, sizeof **y), dw[b] = calloc(nw, sizeof **dw);
            if (b) matmul_bind_input16_only(nan, x16, nx);
            linear_forward(y[b], b ? nan : x, w, NULL, N, C, OC);
            linear_backward(NULL, dw[b], NULL, dy, b ? nan : x, w, N, C, OC, 0);
            matmul_unbind_inputs16();
        }
        EXPECT(!memcmp(y[0], y[1], (size_t)N * OC * sizeof *y[0]), "input bound alone: forward C=%d OC=%d N=%d", C, OC, N);
        EXPECT(!memcmp(dw[0], dw[1], nw * sizeof *dw[0]), "input bound alone: weight gradient C=%d OC=%d N=%d", C, OC, N);
        free(x); free(nan); free(w); free(dy); free(x16); free(y[0]); free(y[1]); free(dw[0]); free(dw[1]);
    }
    matmul_set_bf16(prev);
}

// matmul_keep16: a bound weight's input gradient of few rows reads the
// panels or strips kept per version with the bits of reading the weight in
// place; a new version packs them again, the same version keeps them, and
// many rows or version 0 read the weight in place.
static void kept_dinp(float *dx, const float *dy, const float *nan, const uint16_t *w16, int N, int C, int OC,
                      uint64_t version) {
    matmul_bind16(7, nan, w16, (size_t)OC * C);
    matmul_keep16(version);
    linear_backward(dx, NULL, NULL, dy, NULL, nan, N, C, OC, 0);
    matmul_keep16(0);
    matmul_unbind16(7);
}

static void test_keep(void) {
    int C = 40, OC = 130, prev = matmul_set_bf16(1);
    for (int N = 70; N <= 300; N += 230) {
        float *w = randn((size_t)OC * C, 1), *nan = malloc((size_t)OC * C * sizeof *nan), *dy = randn((size_t)N * OC, 1);
        uint16_t *w16 = malloc((size_t)OC * C * sizeof *w16);
        float *ref = calloc((size_t)N * C, sizeof *ref), *dx = calloc((size_t)N * C, sizeof *dx);
        size_t nd = (size_t)N * C * sizeof *dx;
        for (int round = 0; round < 2; round++) {   // versions 5 and 6 over new values
            for (size_t i = 0; i < (size_t)OC * C; i++) w16[i] = f32_to_bf16(w[i] * (1 - 3 * round)), nan[i] = NAN;
            kept_dinp(ref, dy, nan, w16, N, C, OC, 0);
            for (int mb = 0; mb < 2; mb++) {   // two micro-batches of the version
                memset(dx, 0, nd);
                kept_dinp(dx, dy, nan, w16, N, C, OC, 5 + (uint64_t)round);
                EXPECT(!memcmp(ref, dx, nd), "kept panels N=%d, version %d, micro-batch %d: not the bits of the weight "
                       "read in place", N, 5 + round, mb);
            }
        }
        for (size_t i = 0; i < (size_t)OC * C; i++) w16[i] = f32_to_bf16(-w[i]);
        memset(dx, 0, nd);
        kept_dinp(dx, dy, nan, w16, N, C, OC, 6);   // the same version over changed values
        if (N <= 256) EXPECT(!memcmp(ref, dx, nd), "kept form N=%d on %s: the same version packed again", N,
                             gemm_bf16_unit_name());
        kept_dinp(ref, dy, nan, w16, N, C, OC, 0);
        memset(dx, 0, nd);
        kept_dinp(dx, dy, nan, w16, N, C, OC, 7);
        EXPECT(!memcmp(ref, dx, nd), "kept panels N=%d: a new version not packed again", N);
        free(w); free(nan); free(dy); free(w16); free(ref); free(dx);
    }
    matmul_set_bf16(prev);
}

static void test_bound(void) {
    // {C, OC, N}: one row; few rows (the transposed forward, 2N < C), over two blocks of output channels; many
    int shapes[][3] = {{40, 70, 1}, {40, 70, 2}, {64, 1600, 20}, {40, 70, 70}};
    int prev = matmul_set_bf16(1);
    for (int si = 0; si < 4; si++) {
        int C = shapes[si][0], OC = shapes[si][1], N = shapes[si][2];
        float *w = randn((size_t)OC * C, 1), *nan = malloc((size_t)OC * C * sizeof *nan), *bias = randn(OC, 1);
        uint16_t *w16 = malloc((size_t)OC * C * sizeof *w16);
        for (size_t i = 0; i < (size_t)OC * C; i++) w16[i] = f32_to_bf16(w[i]), w[i] = bf16_to_f32(w16[i]), nan[i] = NAN;
        float *x = randn((size_t)N * C, 1), *dy = randn((size_t)N * OC, 1);
        float *y[2], *dx[2];
        for (int b = 0; b < 2; b++) {
            y[b] = calloc((size_t)N * OC, sizeof **y), dx[b] = calloc((size_t)N * C, sizeof **dx);
            const float *wb = b ? nan : w;
            if (b) matmul_bind16(7, nan, w16, (size_t)OC * C);
            if (b && N > 20) matmul_hold(nan, 0, 0);
            linear_forward(y[b], x, wb, bias, N, C, OC);
            linear_backward(dx[b], NULL, NULL, dy, x, wb, N, C, OC, 0);
            matmul_release();
            matmul_unbind16(7);
        }
        EXPECT(!memcmp(y[0], y[1], (size_t)N * OC * sizeof *y[0]), "bound weight forward C=%d OC=%d N=%d", C, OC, N);
        EXPECT(!memcmp(dx[0], dx[1], (size_t)N * C * sizeof *dx[0]), "bound weight input gradient C=%d OC=%d N=%d", C,
               OC, N);
        free(x); free(dy); free(y[0]); free(y[1]); free(dx[0]); free(dx[1]);
        free(w); free(nan); free(w16); free(bias);
    }
    matmul_set_bf16(prev);
}

// The peaks: positive where the CPU has the unit, ordered, and for the threads asked.
static void test_peak(void) {
    Peaks p;
    peak_probe(&p, 2);
    EXPECT(p.threads == 2, "peak threads %d", p.threads);
    EXPECT(!p.has_fma || p.fp32_256 > 1, "fp32 256-bit peak %.1f", p.fp32_256);
    EXPECT(!p.has_avx512 || p.fp32_512 > 1, "fp32 512-bit peak %.1f", p.fp32_512);
    EXPECT(!p.has_bf16 || p.bf16 > 1, "bf16 peak %.1f", p.bf16);
    EXPECT(p.has_avx512 || p.fp32_512 == 0, "a 512-bit peak without AVX-512");
    EXPECT(!p.has_amx || (p.has_bf16 && p.amx > 1), "AMX peak %.1f", p.amx);
    EXPECT(p.has_amx || p.amx == 0, "an AMX peak without the tiles");
    // a wider vector does no fewer FLOPs per instruction, and the tiles do many times an FMA's: allow the noise
    // of a shared machine. vdpbf16ps is not ordered: twice the FMAs' rate on AMD's cores, half on Intel's.
    EXPECT(!p.has_avx512 || p.fp32_512 >= 0.8 * p.fp32_256, "fp32 512-bit %.1f below 256-bit %.1f", p.fp32_512,
           p.fp32_256);
    EXPECT(!p.has_amx || p.amx >= 0.8 * peak_fp32(&p), "AMX %.1f below fp32 %.1f", p.amx, peak_fp32(&p));
    EXPECT(peak_fp32(&p) >= p.fp32_256 && peak_fp32(&p) >= p.fp32_512, "peak_fp32 is the widest");
    EXPECT(peak_for(&p, PREC_FP32) == peak_fp32(&p) && peak_for(&p, PREC_FP16) == peak_fp32(&p),
           "fp32 and fp16 quote the fp32 peak");
    // bf16 runs its products on the unit gemm_bf16 uses where that outruns the FMAs, else widened to fp32:
    // its peak is never below fp32's
    double unit = gemm_bf16_unit() == BF16_AMX ? p.amx : p.bf16;
    EXPECT(peak_bf16_pays(&p) == (gemm_bf16_own() && unit > peak_fp32(&p)), "peak_bf16_pays");
    EXPECT(peak_for(&p, PREC_BF16) == (peak_bf16_pays(&p) ? unit : peak_fp32(&p)),
           "bf16 quotes its unit's peak exactly when its products run on it");
    EXPECT(peak_for(&p, PREC_BF16) >= peak_fp32(&p), "bf16's peak %.1f below fp32's %.1f", peak_for(&p, PREC_BF16),
           peak_fp32(&p));
    printf("     %s; 2 threads: fp32 256-bit %.0f, 512-bit %.0f, bf16 dot %.0f, AMX %.0f GFLOP/s\n", peak_isa(&p),
           p.fp32_256, p.fp32_512, p.bf16, p.amx);
}

static void test_no_kernel(void) {
    EXPECT(matmul_set_bf16(1) == 0 && matmul_bf16() == 0, "matmul_set_bf16 is a no-op without the kernel");
}

static void on_unit(void) {
    RUN(test_gemm_bf16);
    RUN(test_gemm_bias);
    RUN(test_forms);
    RUN(test_linear_bf16);
    RUN(test_forward16);
    RUN(test_backward16);
    RUN(test_hold);
    RUN(test_keep);
    RUN(test_bound);
    RUN(test_bound_input);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_peak);
    if (!gemm_bf16_own()) {
        printf("     the bf16 kernel is not built in (no AVX512_BF16): linear layers multiply in fp32\n");
        RUN(test_no_kernel);
        return test_finish();
    }
    RUN(test_pack);
    RUN(test_pack16);
    each_bf16_unit(on_unit);   // every product on each unit the CPU has
    return test_finish();
}
