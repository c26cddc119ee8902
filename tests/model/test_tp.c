// Tensor parallelism inside the stage (model/tp): on 2 and 4 forked ranks,
// with and without sequence parallelism, every rank's slice of the model
// computes the loss of the whole model and the gradients of the whole
// model's tensors, element for element, at the global indices of its
// slice — on a vocabulary that the tensor-parallel padding splits into a
// slice of padding only. And the vocabulary-parallel loss kernels, cut
// into slices and combined in rank order, give crossentropy_forward's
// losses and gradients.
#include <string.h>

#include "comm/local.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "kernels/crossentropy.h"
#include "kernels/gemm_bf16.h"
#include "model/stage.h"
#include "test.h"

enum { B = 2, T = 8 };

static ModelConfig cfg_for(int tp) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "test");
    c.n_layer = 2; c.n_head = 4; c.d_model = 32; c.d_ff = 72; c.max_seq = T;
    config_pad_vocab(&c, 300, tp);   // Vp 384 for one rank, 512 for 2 or 4 (rows 384.. are a slice of padding)
    return c;
}

static void make_batch(int *tok, int *tgt) {
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int)rng_below(3, 11, i, 300);
        tgt[i] = i % 7 == 3 ? -1 : (int)rng_below(3, 12, i, 300);   // some skipped positions
    }
}

// The whole model's loss and gradients (one process).
static double whole_run(Stage *w, const int *tok, const int *tgt) {
    Err e;
    ModelConfig c = cfg_for(1);
    ModelSlice s = slice_whole(&c);
    CHECKF(stage_init(w, &c, &s, B, T, 1, 0, &e) == 0, "%s", e.msg);
    ptable_init(&w->table, w->params, 77);
    double l = stage_forward(w, 0, tok, tgt, B, T, 1.0f / (B * T));
    stage_backward(w, 0, tok, B, T);
    return l;
}

// Flat index, in the whole tensor q, of local element i of p.
static int64_t whole_index(const ParamInfo *p, const ParamInfo *q, size_t i) {
    int64_t g[PARAM_MAX_DIM] = {0};
    for (int d = p->ndim - 1; d >= 0; d--) {
        g[d] = (int64_t)(i % (size_t)p->lshape[d]);
        i /= (size_t)p->lshape[d];
    }
    if (p->shard_dim >= 0) g[p->shard_dim] += p->shard_off;
    if (g[0] >= q->shape[0]) return -1;   // a padding row the whole model has not
    int64_t f = 0;
    for (int d = 0; d < p->ndim; d++) f = f * q->shape[d] + g[d];
    return f;
}

typedef struct { int sp; } TpArgs;

// One rank: its slice against the whole model; returns the mismatches.
static int tp_main(Comm *world, void *arg) {
    const TpArgs *ta = arg;
    int n = comm_size(world), r = comm_rank(world), bad = 0;
    int tok[B * T], tgt[B * T];
    make_batch(tok, tgt);
    Stage w, st;
    double lw = whole_run(&w, tok, tgt);
    Err e;
    ModelConfig c = cfg_for(n);
    ModelSlice s = slice_whole(&c);
    s.tp_rank = r;
    s.tp_size = n;
    s.sp = ta->sp;
    if (stage_init(&st, &c, &s, B, T, 1, 0, &e) || stage_set_tp(&st, world, &e)) {
        fprintf(stderr, "rank %d: %s\n", r, e.msg);
        return 1;
    }
    ptable_init(&st.table, st.params, 77);
    double l = stage_forward(&st, 0, tok, tgt, B, T, 1.0f / (B * T));
    stage_backward(&st, 0, tok, B, T);
    if (stage_tp_status(&st, &e)) { fprintf(stderr, "rank %d: %s\n", r, e.msg); bad++; }
    if (fabs(l - lw) > 1e-5 * fabs(lw)) { fprintf(stderr, "rank %d: loss %.9g, whole model %.9g\n", r, l, lw); bad++; }
    for (int k = 0; k < st.table.n; k++) {
        const ParamInfo *p = &st.table.p[k], *q = ptable_find(&w.table, p->name);
        double worst = 0, scale = 1e-3;
        for (size_t i = 0; q && i < p->numel; i++) {
            int64_t f = whole_index(p, q, i);
            float got = st.grads[p->offset + i], want = f >= 0 ? w.grads[q->offset + (size_t)f] : 0.0f;
            if (fabs(want) > scale) scale = fabs(want);
            if (fabs(got - want) > worst) worst = fabs(got - want);
        }
        if (!q || worst > 2e-5 * scale) {
            fprintf(stderr, "rank %d of %d%s: gradient of %s differs by %.3g (scale %.3g)\n", r, n, ta->sp ? " sp" : "",
                    p->name, worst, scale);
            bad++;
        }
    }
    stage_free(&st);
    stage_free(&w);
    return bad;
}

static void test_stage_slices(void) {
    for (int n = 2; n <= 4; n += 2)
        for (int sp = 0; sp <= 1; sp++) {
            TpArgs a = {sp};
            Err e;
            EXPECT(comm_launch(n, tp_main, &a, 60, &e) == 0, "tp=%d sp=%d: %s", n, sp, e.msg);
        }
}

// The loss kernels over 3 vocabulary slices, combined in rank order as
// model/tp combines them, against the whole row.
static void test_sliced_loss(void) {
    enum { N = 5, V = 70, Vl = 32, S = 3 };   // slices of 32 columns: 32 real, 6 real + 26 padding, padding only
    float whole[N * S * Vl], part[S][N * Vl], lw[N], lp[N], mx[S][N], stats[S][N * 2], m[N], sum[N * 2];
    int tgt[N] = {3, 40, -1, 69, 0};
    for (int i = 0; i < N * S * Vl; i++) whole[i] = (float)rng_normal(5, 1, (uint64_t)i) * 3.0f;
    for (int k = 0; k < S; k++)
        for (int i = 0; i < N; i++) memcpy(part[k] + i * Vl, whole + i * S * Vl + k * Vl, Vl * sizeof(float));
    crossentropy_forward(whole, lw, tgt, N, V, S * Vl, 0.25f, 0);
    for (int k = 0; k < S; k++) {
        int Vr = V - k * Vl < 0 ? 0 : V - k * Vl > Vl ? Vl : V - k * Vl;
        crossentropy_local_max(part[k], mx[k], tgt, N, Vr, Vl);
    }
    for (int i = 0; i < N; i++) m[i] = fmaxf(fmaxf(mx[0][i], mx[1][i]), mx[2][i]);
    for (int k = 0; k < S; k++) {
        int Vr = V - k * Vl < 0 ? 0 : V - k * Vl > Vl ? Vl : V - k * Vl;
        crossentropy_local_sum(part[k], stats[k], m, tgt, N, Vr, Vl, k * Vl, 1);
    }
    for (int i = 0; i < 2 * N; i++) sum[i] = stats[0][i] + stats[1][i] + stats[2][i];
    double worst = 0;
    for (int k = 0; k < S; k++) {
        int Vr = V - k * Vl < 0 ? 0 : V - k * Vl > Vl ? Vl : V - k * Vl;
        float p16[N * Vl], lp16[N];
        memcpy(p16, part[k], sizeof p16);
        crossentropy_finish(part[k], lp, sum, m, tgt, N, Vr, Vl, k * Vl, 0.25f, 0);
        if (gemm_bf16_own()) {   // out16: the same rows rounded to bf16, each at its own row's start
            crossentropy_finish(p16, lp16, sum, m, tgt, N, Vr, Vl, k * Vl, 0.25f, 1);
            uint16_t want[Vl];
            int bad = memcmp(lp, lp16, sizeof lp) != 0;
            for (int i = 0; i < N; i++) {
                bf16_round_row(want, part[k] + i * Vl, Vl);
                bad += memcmp((uint16_t *)(p16 + i * Vl), want, sizeof want) != 0;
            }
            EXPECT(bad == 0, "slice %d in bf16: %d rows or losses not the floats' rounded", k, bad);
        }
        for (int i = 0; i < N; i++) {
            EXPECT(fabsf(lp[i] - lw[i]) <= 1e-5f * fmaxf(1.0f, fabsf(lw[i])), "row %d loss %g, whole %g", i, lp[i], lw[i]);
            for (int v = 0; v < Vl; v++) worst = fmax(worst, fabs(part[k][i * Vl + v] - whole[i * S * Vl + k * Vl + v]));
        }
    }
    EXPECT(worst < 1e-7, "gradients of the slices differ from the whole row's by %g", worst);
}

int main(void) {
    RUN(test_stage_slices);   // first: ranks are forked before this process starts OpenMP threads
    RUN(test_sliced_loss);
    return test_finish();
}
