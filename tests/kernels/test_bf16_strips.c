// The vector units' strips of B (kernels/gemm_bf16's bf16_strips): every
// pair where the layout puts it, from each form an operand comes in, and
// nothing written past kp(K)·NC·2 values; and a product reading B in strips
// (OP_STRIPS16, or any other form gemm_bf16_op packs on the vector units)
// equal bit for bit to the same product on the pairs, with the bias,
// accumulating and with a sum of squares, on 1 and 2 threads, on each unit
// the CPU has (the tiles leave strips to the vector units).
#include <string.h>

#include "core/half.h"
#include "kernels/gemm_bf16.h"
#include "kernels/threads.h"
#include "test.h"
#include "units.h"

enum { SENTINEL = 0x7777 };

// B (K,NC) as fp32 rows ld apart, and the same values in the other three forms.
typedef struct {
    float *rows, *cols;
    uint16_t *rows16, *cols16;
    int ld, ldt;
} Forms;

static Forms forms_of(int K, int NC) {
    Forms f = {.ld = NC + 3, .ldt = K + 5};
    f.rows = randn((size_t)K * f.ld, 1);
    f.cols = calloc((size_t)NC * f.ldt, sizeof *f.cols);
    f.rows16 = calloc((size_t)K * f.ld, sizeof *f.rows16);
    f.cols16 = calloc((size_t)NC * f.ldt, sizeof *f.cols16);
    for (int k = 0; k < K; k++)
        for (int n = 0; n < NC; n++) {
            float v = f.rows[(size_t)k * f.ld + n];
            f.cols[(size_t)n * f.ldt + k] = v;
            f.rows16[(size_t)k * f.ld + n] = f.cols16[(size_t)n * f.ldt + k] = f32_to_bf16(v);
        }
    return f;
}

static void forms_free(Forms *f) {
    free(f->rows); free(f->cols); free(f->rows16); free(f->cols16);
}

static void check_layout(int K, int NC) {
    int kp = (K + 1) / 2, W = bf16_strip_width(NC);
    size_t len = (size_t)kp * NC * 2;
    Forms f = forms_of(K, NC);
    Bf16Op ops[] = {{OP_ROWS32, f.rows, f.ld}, {OP_COLS32, f.cols, f.ldt}, {OP_ROWS16, f.rows16, f.ld},
                    {OP_COLS16, f.cols16, f.ldt}};
    const char *names[] = {"fp32 rows", "fp32 columns", "bf16 rows", "bf16 columns"};
    uint16_t *d = malloc((len + 64) * sizeof *d);
    EXPECT(W == 32 || W == 48 || W == 64, "bf16_strip_width(%d) = %d", NC, W);
    for (int o = 0; o < 4; o++) {
        for (size_t i = 0; i < len + 64; i++) d[i] = SENTINEL;
        bf16_strips(d, ops[o], K, NC);
        int ok = 1;
        for (int p = 0; p < kp; p++)
            for (int n = 0; n < NC; n++) {
                int c0 = n - n % W, w = NC - c0 < W ? NC - c0 : W;
                const uint16_t *at = d + 2 * ((size_t)c0 * kp + (size_t)p * w + (n - c0));
                for (int j = 0; j < 2; j++) {
                    int k = 2 * p + j;
                    ok &= at[j] == (k < K ? f.rows16[(size_t)k * f.ld + n] : 0);
                }
            }
        for (size_t i = len; i < len + 64; i++) ok &= d[i] == SENTINEL;
        EXPECT(ok, "bf16_strips from %s K=%d NC=%d: a pair out of place, or written past the end", names[o], K, NC);
    }
    free(d);
    forms_free(&f);
}

static void test_layout(void) {
    int Ks[] = {1, 37, 64}, NCs[] = {1, 17, 45, 64, 100, 130, 200};
    for (int ki = 0; ki < 3; ki++)
        for (int ni = 0; ni < 7; ni++) check_layout(Ks[ki], NCs[ni]);
}

// C (R,NC) (+)= [bias +] A · B: on the pairs (the vector units), then with B
// in strips — given as strips, and given in a form the product packs — on
// 1 and 2 threads; the bits and the sums of squares the same.
static void check_product(int R, int NC, int K) {
    int kp = (K + 1) / 2, ldc = NC + 2, saved = kernels_threads();
    Bf16Unit unit = gemm_bf16_unit();
    Forms f = forms_of(K, NC);
    float *A = randn((size_t)R * K, 1), *bias = randn((size_t)NC, 1), *c0 = randn((size_t)R * ldc, 1);
    size_t n = (size_t)R * ldc;
    float *ref = malloc(n * sizeof *ref), *c = malloc(n * sizeof *c);
    uint16_t *pairs = calloc((size_t)kp * NC * 2, sizeof *pairs), *strips = calloc((size_t)kp * NC * 2, sizeof *strips);
    uint16_t *room = calloc(gemm_bf16_room(R, NC, K, OP_ROWS32, OP_ROWS32), sizeof *room);
    bf16_pack_pairs(pairs, f.rows, f.ld, K, NC);
    bf16_strips(strips, (Bf16Op){OP_COLS16, f.cols16, f.ldt}, K, NC);
    Bf16Op a = {OP_ROWS32, A, K};
    for (int acc = 0; acc < 2; acc++) {
        const float *bi = acc ? NULL : bias;
        double want = -1, sq = -1;
        memcpy(ref, c0, n * sizeof *ref);
        gemm_bf16_use(BF16_DOT);
        int ok = gemm_bf16_op_sq(R, NC, K, a, (Bf16Op){OP_PAIRS16, pairs, NC}, ref, ldc, acc, bi, room, &want) == 0;
        gemm_bf16_use(unit);
        for (int t = 1; t <= 2; t++) {
            kernels_set_threads(t);
            memcpy(c, c0, n * sizeof *c);
            ok &= gemm_bf16_op_sq(R, NC, K, a, (Bf16Op){OP_STRIPS16, strips, 0}, c, ldc, acc, bi, room, &sq) == 0 &&
                  memcmp(c, ref, n * sizeof *c) == 0 && sq == want;
            if (unit == BF16_DOT) {   // B packed into strips by the product itself
                memcpy(c, c0, n * sizeof *c);
                ok &= gemm_bf16_op(R, NC, K, a, (Bf16Op){OP_ROWS16, f.rows16, f.ld}, c, ldc, acc, bi, room) == 0 &&
                      memcmp(c, ref, n * sizeof *c) == 0;
            }
        }
        kernels_set_threads(saved);
        EXPECT(ok, "strips R=%d NC=%d K=%d acc=%d on %s: not the pairs' bits or sum of squares", R, NC, K, acc,
               gemm_bf16_unit_name());
    }
    free(A); free(bias); free(c0); free(ref); free(c); free(pairs); free(strips); free(room);
    forms_free(&f);
}

static void test_products(void) {
    check_product(1, 1, 1);
    check_product(37, 45, 67);      // edges everywhere, odd K
    check_product(70, 100, 801);    // a narrow last strip, odd K
    check_product(40, 2100, 400);   // column blocks
    check_product(20, 100, 4200);   // two reduction blocks, a narrow last strip
    check_product(600, 96, 300);    // many rows (B fetched ahead in strips at any row count)
}

static void product_cases(void) { RUN(test_products); }

int main(void) {
    kernels_set_threads(2);
    if (!gemm_bf16_own()) {
        printf("     the bf16 kernel is not built in (no AVX512_BF16): nothing to lay out\n");
        return test_finish();
    }
    RUN(test_layout);
    each_bf16_unit(product_cases);
    return test_finish();
}
