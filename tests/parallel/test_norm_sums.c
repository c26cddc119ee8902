// The gradient norm's sums taken by the products that write the linear
// layers' gradients last (model/stage's stage_fuse_norm, turned on by
// parallel/dp for one rank without sharding): after steps of micro-batches
// in the pipeline schedules' orders (each forward then its backward, and
// every forward first), each taken sum is the float64 sum of squares of
// what its product left — a tied head's with the lookups' rows added after
// it, LLaMA's q, k and v in one — every linear layer's is taken on the
// bf16 units, and in fp32 where kernels/gemm_pack runs the weight gradients
// (matmul_fp32_sumsq: Intel's cores, but the head's past 512 rows); an untied token
// embedding's is taken from
// the rows the step's lookups added to; and dp_grad_sumsq, reading the
// rest and only the rest, is the float64 sum of squares of every gradient.
#include <math.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "model/stage.h"
#include "parallel/dp.h"
#include "test.h"
#include "kernels/units.h"
#include "model/configs.h"

static double squares64(const float *g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

static int linear_role(Role r) { return r == ROLE_QKV || r == ROLE_LINEAR || r == ROLE_HEAD; }

// Two steps of M = 3 micro-batches of B×T, forwards and backwards
// interleaved (gpipe 0) or every forward first, then the checks on the
// second step's sums.
static void check_model(ModelConfig c, unsigned flags, int gpipe, int B, const char *what) {
    enum { M = 3 };
    int T = c.max_seq, BT = B * T;
    Err e;
    Stage st;
    ModelSlice s = slice_whole(&c);
    EXPECT(stage_init(&st, &c, &s, B, T, gpipe ? M : 1, flags, &e) == 0, "%s", e.msg);
    ptable_init(&st.table, st.params, 5);
    Layout l = {.dp = 1, .tp = 1, .pp = 1, .precision = st.prec};
    Dp *d = NULL;
    EXPECT(dp_init(&d, &l, 25.0, &st, &e) == 0, "%s", e.msg);
    int tok[M * 128], tgt[M * 128];
    for (int i = 0; i < M * BT; i++) {
        tok[i] = (int)rng_below(3, 1, i, c.vocab);
        tgt[i] = (int)rng_below(3, 2, i, c.vocab);
    }
    for (int step = 0; step < 2; step++) {
        stage_grads_begin(&st);
        for (int k = 0; k < M; k++) {
            stage_microbatch(&st, k, M);
            stage_forward(&st, gpipe ? k : 0, tok + k * BT, tgt + k * BT, B, T, 0.1f);
            if (!gpipe) stage_backward(&st, 0, tok + k * BT, B, T);
        }
        for (int k = 0; gpipe && k < M; k++) {
            stage_microbatch(&st, k, M);
            stage_backward(&st, k, tok + k * BT, B, T);
        }
    }
    const double *sq = stage_grad_sumsq(&st);
    EXPECT(sq != NULL, "%s: no sums taken with one rank", what);
    int bf16 = st.prec == PREC_BF16 && gemm_bf16_own(), untaken = 0, bad = 0, tied = arch_of(&c)->tied_head;
    double all = 0;
    size_t unread = 0;
    for (int i = 0; sq && i < st.table.n; i++) {
        const ParamInfo *p = &st.table.p[i];
        double own = squares64(st.grads + p->offset, p->numel);
        all += own;
        // the product writing it takes its sum (a tied embedding's: the head's); its input width the last dimension
        int in = (int)p->shape[p->ndim - 1];
        int fused = bf16 || (p->ndim >= 2 && matmul_fp32_sumsq(BT, in, (int)(p->numel / (size_t)in)));
        int want = (fused && linear_role(p->role)) || (p->role == ROLE_TOK_EMB && (fused || !tied));
        untaken += want != (sq[i] >= 0);
        unread += sq[i] >= 0 ? p->numel : 0;
        if (sq[i] <= 0) continue;
        // a product's sum: its tensor's and those after it the same product wrote (their sums 0)
        size_t end = p->offset + p->numel;
        for (int j = i + 1; j < st.table.n && sq[j] == 0 && st.table.p[j].offset == end; j++) {
            own += squares64(st.grads + end, st.table.p[j].numel);
            end += st.table.p[j].numel;
        }
        if (fabs(sq[i] - own) > 1e-12 * own) {
            bad++;
            fprintf(stderr, "     %s: %s's sum %.17g, float64 %.17g\n", what, p->name, sq[i], own);
        }
    }
    EXPECT(!untaken, "%s: %d tensors' sums taken where they should not be, or not where they should", what, untaken);
    EXPECT(!bad, "%s: %d sums off their gradients'", what, bad);
    size_t nread = 0;
    double got = dp_grad_sumsq(d, &nread);
    EXPECT(fabs(got - all) <= 1e-12 * all, "%s: dp_grad_sumsq %.17g, float64 %.17g", what, got, all);
    EXPECT(nread == st.table.total - unread, "%s: the norm read %zu of %zu gradients, %zu of them taken", what, nread,
           st.table.total, unread);
    dp_free(d);
    stage_free(&st);
}

// Micro-batches of B sequences of 16.
static void each_model(unsigned flags, int B) {
    for (int gpipe = 0; gpipe < 2; gpipe++) {
        const char *order = gpipe ? "every forward first" : "forward, backward";
        char what[96];
        snprintf(what, sizeof what, "gpt2 (tied head), %d rows, %s", 16 * B, order);
        check_model(small_config(ARCH_GPT2, 2, 2, 32, 64, 16, 50), flags, gpipe, B, what);
        snprintf(what, sizeof what, "llama (untied head, q k v in one product), %d rows, %s", 16 * B, order);
        check_model(small_config(ARCH_LLAMA, 2, 4, 32, 48, 16, 50), flags, gpipe, B, what);
    }
}

static void test_bf16(void) { each_model(STAGE_BF16, 2); }

static void on_unit(void) { RUN(test_bf16); }

// fp32 at 32 rows: no product takes a sum, the norm reads every gradient;
// at 128 rows the weight gradients' products take theirs where they run on
// kernels/gemm_pack.
static void test_fp32(void) {
    each_model(0, 2);
    each_model(0, 8);
}

int main(void) {
    RUN(test_fp32);
    if (gemm_bf16_own()) each_bf16_unit(on_unit);
    else RUN(test_bf16);   // widened into fp32 products: none taken
    return test_finish();
}
