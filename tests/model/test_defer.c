// Weight gradients gathered over micro-batches (kernels/matmul's
// matmul_defer, model/stage's stage_microbatch and stage_grads_hold): the
// gradients, their first write and their sums of squares bit for bit
// those of one product per micro-batch — a gradient's rows turned off in
// the last micro-batch, or held for matmul_defer_flush; from fp32 and bf16
// output gradients, inputs bound to their 16-bit store alone; rows queued
// where the product is the same arithmetic (matmul_defer_rows) and nothing
// left queued after; and whole models' steps of micro-batches (a tied head
// beside its lookup, an untied one, LLaMA's q, k and v in one product) the
// same with the queues as without, in fp32 and bf16.
#include <math.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "model/stage.h"
#include "test.h"
#include "kernels/units.h"
#include "model/configs.h"

enum { NG = 3, M = 7 };
static const int OCS[NG] = {24, 64, 10}, CS[NG] = {40, 48, 30};

// Every micro-batch's operands of NG gradients: dout (N, ld) fp32 and bf16, inp (N, C) fp32 and bf16.
typedef struct {
    float *dout[M][NG], *inp[M][NG], *w[NG];
    uint16_t *dout16[M][NG], *inp16[M][NG];
    int N, ld;
} Batches;

static Batches make_batches(int N) {
    Batches b = {.N = N, .ld = 64 + 2};
    for (int g = 0; g < NG; g++) {
        b.w[g] = randn((size_t)OCS[g] * CS[g], 1);
        for (int m = 0; m < M; m++) {
            b.dout[m][g] = randn((size_t)N * b.ld, 1);
            b.inp[m][g] = randn((size_t)N * CS[g], 1);
            b.dout16[m][g] = malloc((size_t)N * b.ld * sizeof(uint16_t));
            b.inp16[m][g] = malloc((size_t)N * CS[g] * sizeof(uint16_t));
            half_pack(PREC_BF16, b.dout16[m][g], b.dout[m][g], (size_t)N * b.ld);
            half_pack(PREC_BF16, b.inp16[m][g], b.inp[m][g], (size_t)N * CS[g]);
        }
    }
    return b;
}

static void free_batches(Batches *b) {
    for (int g = 0; g < NG; g++) {
        free(b->w[g]);
        for (int m = 0; m < M; m++) free(b->dout[m][g]), free(b->inp[m][g]), free(b->dout16[m][g]), free(b->inp16[m][g]);
    }
}

// One step: the gradients marked unwritten, their sums of squares taken
// by the last micro-batch's products. mode 0: every call multiplies; 1:
// queued, the last micro-batch's turned off; 2: queued, the last
// micro-batch's held and flushed. from16: bf16 output gradients (ld apart),
// bound16: the inputs' 16-bit store alone (their floats garbage); *queued:
// the gradients holding rows after each micro-batch but the last, summed.
static void step(const Batches *b, float **dw, double *sq, int mode, int from16, int bound16, int *queued) {
    *queued = 0;
    for (int g = 0; g < NG; g++) matmul_grad_fresh(dw[g]);
    float *junk = randn((size_t)b->N * 64, 1e6f);
    for (int m = 0; m < M; m++) {
        matmul_defer(mode == 0 ? -1 : m < M - 1 ? m : mode == 2 ? MATMUL_DEFER_ALL : -1);
        for (int g = 0; g < NG; g++) {
            if (m == M - 1) matmul_grad_sumsq(dw[g], &sq[g]);
            const float *inp = b->inp[m][g];
            if (bound16) {
                inp = junk;
                matmul_bind_input16_only(junk, b->inp16[m][g], (size_t)b->N * CS[g]);
            }
            if (from16) linear_backward16(NULL, dw[g], b->dout16[m][g], b->ld, inp, b->w[g], b->N, CS[g], OCS[g], 0);
            else linear_backward(NULL, dw[g], NULL, b->dout[m][g], inp, b->w[g], b->N, CS[g], OCS[g], 0);
            matmul_unbind_inputs16();
        }
        if (m < M - 1) *queued += matmul_deferred();
    }
    if (mode == 2) matmul_defer_flush();
    matmul_defer(-1);
    matmul_grad_sumsq_clear();
    free(junk);
}

static void check_kernel(int N, int bf16, int from16, int bound16) {
    int prev = matmul_set_bf16(bf16);
    Batches b = make_batches(N);
    float *ref[NG], *got[NG];
    for (int g = 0; g < NG; g++) ref[g] = randn((size_t)OCS[g] * CS[g], 1), got[g] = randn((size_t)OCS[g] * CS[g], 1);
    double sref[NG] = {-1, -1, -1}, sgot[NG];
    int q;
    step(&b, ref, sref, 0, from16, bound16, &q);
    for (int mode = 1; mode <= 2; mode++) {
        for (int g = 0; g < NG; g++) sgot[g] = -1;
        step(&b, got, sgot, mode, from16, bound16, &q);
        int same = 1, want = 0;
        for (int g = 0; g < NG; g++) {
            same &= memcmp(ref[g], got[g], (size_t)OCS[g] * CS[g] * sizeof(float)) == 0 && sref[g] == sgot[g];
            want += matmul_defer_rows(N, CS[g], OCS[g]) >= 2 * N;
        }
        EXPECT(same, "%s, %d rows, mode %d%s%s: gradients or sums not the products' one by one", bf16 ? "bf16" : "fp32",
               N, mode, from16 ? ", bf16 output gradients" : "", bound16 ? ", bound inputs" : "");
        EXPECT((q > 0) == (want > 0), "%s, %d rows: rows queued %d times, by %d gradients that can", bf16 ? "bf16" : "fp32",
               N, q, want);
        EXPECT(matmul_deferred() == 0 && matmul_grads_unwritten() == 0, "%s, %d rows, mode %d: rows or marks left over",
               bf16 ? "bf16" : "fp32", N, mode);
    }
    for (int g = 0; g < NG; g++) free(ref[g]), free(got[g]);
    free_batches(&b);
    matmul_set_bf16(prev);
}

static void test_kernel_fp32(void) {
    int rows[] = {1, 32, 48, 100, 129, 300};
    for (int i = 0; i < 6; i++) check_kernel(rows[i], 0, 0, 0);
    check_kernel(40, 0, 0, 1);
}

static void test_kernel_bf16(void) {
    int rows[] = {2, 32, 48, 100, 129, 300};
    for (int i = 0; i < 6; i++) {
        check_kernel(rows[i], 1, 0, 0);
        check_kernel(rows[i], 1, 1, 0);
        check_kernel(rows[i], 1, 1, 1);
    }
}

// ---- whole models ----

// Two steps of K micro-batches of B×T (each forward then its backward), the
// gradients left in g and the norm's taken sums in sq; with hold, the last
// micro-batch's products after its backward.
static void model_steps(ModelConfig c, unsigned flags, int B, int K, int allow, int hold, float *g, double *sq) {
    int T = c.max_seq, BT = B * T;
    Err e;
    Stage st;
    ModelSlice s = slice_whole(&c);
    matmul_defer_allow(allow);
    EXPECT(stage_init(&st, &c, &s, B, T, 1, flags, &e) == 0, "%s", e.msg);
    ptable_init(&st.table, st.params, 5);
    stage_fuse_norm(&st, 1);
    int *tok = malloc((size_t)K * BT * sizeof *tok), *tgt = malloc((size_t)K * BT * sizeof *tgt);
    for (int i = 0; i < K * BT; i++) tok[i] = (int)rng_below(3, 1, i, c.vocab), tgt[i] = (int)rng_below(3, 2, i, c.vocab);
    stage_grads_hold(&st, hold);
    for (int n = 0; n < 2; n++) {
        stage_grads_begin(&st);
        for (int k = 0; k < K; k++) {
            stage_microbatch(&st, k, K);
            stage_forward(&st, 0, tok + k * BT, tgt + k * BT, B, T, 0.1f);
            stage_backward(&st, 0, tok + k * BT, B, T);
        }
        if (hold) stage_grads_flush(&st);
        stage_microbatch(&st, 0, 0);
    }
    memcpy(g, st.grads, st.table.total * sizeof *g);
    memcpy(sq, stage_grad_sumsq(&st), (size_t)st.table.n * sizeof *sq);
    free(tok);
    free(tgt);
    stage_free(&st);
    matmul_defer_allow(1);
}

static void check_model(ModelConfig c, unsigned flags, const char *what) {
    enum { B = 2, K = 5 };
    Err e;
    ParamTable t;
    ModelSlice s = slice_whole(&c);
    EXPECT(ptable_build(&t, &c, &s, &e) == 0, "%s", e.msg);
    float *ref = malloc(t.total * sizeof *ref), *got = malloc(t.total * sizeof *got);
    double *sref = malloc((size_t)t.n * sizeof *sref), *sgot = malloc((size_t)t.n * sizeof *sgot);
    model_steps(c, flags, B, K, 0, 0, ref, sref);
    for (int hold = 0; hold < 2; hold++) {
        model_steps(c, flags, B, K, 1, hold, got, sgot);
        EXPECT(memcmp(ref, got, t.total * sizeof *ref) == 0, "%s%s: gradients differ with the queues", what,
               hold ? ", the last micro-batch held" : "");
        EXPECT(memcmp(sref, sgot, (size_t)t.n * sizeof *sref) == 0, "%s%s: the norm's sums differ with the queues", what,
               hold ? ", the last micro-batch held" : "");
    }
    free(ref); free(got); free(sref); free(sgot);
    ptable_free(&t);
}

static void each_model(unsigned flags, const char *prec) {
    char what[96];
    snprintf(what, sizeof what, "gpt2 (a tied head beside its lookup), %s", prec);
    check_model(small_config(ARCH_GPT2, 2, 2, 32, 64, 16, 50), flags, what);
    snprintf(what, sizeof what, "llama (an untied head, q k v in one product), %s", prec);
    check_model(small_config(ARCH_LLAMA, 2, 4, 32, 48, 16, 50), flags, what);
}

static void test_models_fp32(void) { each_model(0, "fp32"); }
static void test_models_bf16(void) { each_model(STAGE_BF16, "bf16"); }

static void on_unit(void) {
    RUN(test_kernel_bf16);
    RUN(test_models_bf16);
}

int main(void) {
    RUN(test_kernel_fp32);
    RUN(test_models_fp32);
    if (gemm_bf16_own()) each_bf16_unit(on_unit);
    else RUN(test_models_bf16);   // widened into fp32 products
    return test_finish();
}
