// The whole model: parameter table, deterministic init, and the gradient of
// the full forward pass against finite differences.
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "kernels/matmul.h"
#include "model/stage.h"
#include "ref.h"
#include "test.h"

static ModelConfig tiny_cfg(int L, int NH, int C, int F, int T, int V) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "test");
    c.n_layer = L; c.n_head = NH; c.d_model = C; c.d_ff = F; c.max_seq = T;
    config_set_vocab(&c, V);
    return c;
}

static void make_batch(int *tok, int *tgt, int B, int T, int V, uint64_t seed) {
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int)rng_below(seed, 11, i, V);
        tgt[i] = (int)rng_below(seed, 12, i, V);
    }
}

static void test_param_counts(void) {
    Err e;
    ModelConfig c;
    EXPECT(config_preset(&c, "gpt2-124m", &e) == 0, "%s", e.msg);
    EXPECT(config_param_count(&c, 0) == 124439808LL, "gpt2-124m has %lld", (long long)config_param_count(&c, 0));
    EXPECT(c.vocab_padded == 50304, "padded vocab %d", c.vocab_padded);
    ModelSlice s = slice_whole(&c);
    ParamTable t;
    EXPECT(ptable_build(&t, &c, &s, &e) == 0, "%s", e.msg);
    EXPECT((int64_t)t.total == config_param_count(&c, 1), "table %zu vs %lld", t.total,
           (long long)config_param_count(&c, 1));
    EXPECT(t.n == 2 + 12 * 12 + 2, "%d tensors", t.n);
    const ParamInfo *p = ptable_find(&t, "h.11.mlp.c_proj.weight");
    EXPECT(p && p->shape[0] == 768 && p->shape[1] == 3072 && (p->flags & PARAM_NO_DECAY) == 0, "c_proj entry");
    p = ptable_find(&t, "h.0.ln_1.bias");
    EXPECT(p && (p->flags & PARAM_NO_DECAY), "ln bias must not decay");
    ptable_free(&t);
    EXPECT(config_preset(&c, "gpt2-9b", &e) == -1 && strstr(e.msg, "gpt2-9b"), "unknown preset message: %s", e.msg);
}

static void test_init(void) {
    Err e;
    ModelConfig c = tiny_cfg(2, 2, 16, 64, 8, 300);
    ModelSlice s = slice_whole(&c);
    ParamTable t;
    EXPECT(ptable_build(&t, &c, &s, &e) == 0, "%s", e.msg);
    float *a = mem_alloc(MEM_PARAMS, t.total * 4), *b = mem_alloc(MEM_PARAMS, t.total * 4);
    ptable_init(&t, a, 42);
    ptable_init(&t, b, 42);
    EXPECT(memcmp(a, b, t.total * 4) == 0, "init is not repeatable");
    ptable_init(&t, b, 43);
    EXPECT(memcmp(a, b, t.total * 4) != 0, "seed does not change init");
    const ParamInfo *w = ptable_find(&t, "h.1.mlp.c_fc.weight");
    double m = 0, v = 0;
    for (size_t i = 0; i < w->numel; i++) { m += a[w->offset + i]; v += a[w->offset + i] * a[w->offset + i]; }
    m /= w->numel; v = v / w->numel - m * m;
    EXPECT(fabs(sqrt(v) - 0.02) < 0.002 && fabs(m) < 0.002, "c_fc std %.4f mean %.4f", sqrt(v), m);
    const ParamInfo *pr = ptable_find(&t, "h.0.attn.c_proj.weight");
    v = 0;
    for (size_t i = 0; i < pr->numel; i++) v += a[pr->offset + i] * a[pr->offset + i];
    double want = 0.02 / sqrt(2.0 * 2);
    EXPECT(fabs(sqrt(v / pr->numel) - want) < 0.15 * want, "c_proj std %.4f want %.4f", sqrt(v / pr->numel), want);
    const ParamInfo *wte = ptable_find(&t, "wte.weight");
    int pad_nonzero = 0;
    for (size_t i = 300 * 16; i < wte->numel; i++) pad_nonzero += a[wte->offset + i] != 0;
    EXPECT(pad_nonzero == 0, "%d padded vocabulary entries not zero", pad_nonzero);
    const ParamInfo *g = ptable_find(&t, "ln_f.weight");
    EXPECT(a[g->offset] == 1.0f && a[g->offset + 15] == 1.0f, "norm gains start at one");
    // A tensor-parallel slice draws exactly the global elements it holds.
    ModelSlice s2 = {0, 2, 1, 2, 1, 0, 1, 0};
    ParamTable t2;
    EXPECT(ptable_build(&t2, &c, &s2, &e) == 0, "%s", e.msg);
    float *h = mem_alloc(MEM_PARAMS, t2.total * 4);
    ptable_init(&t2, h, 42);
    const char *names[] = {"h.0.attn.c_attn.weight", "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.weight", "wte.weight"};
    for (int k = 0; k < 4; k++) {
        const ParamInfo *pg = ptable_find(&t, names[k]), *pl = ptable_find(&t2, names[k]);
        int bad = 0;
        for (size_t i = 0; i < pl->numel; i++) {
            // local (i0, i1, i2) -> global, with the shard offset on shard_dim
            int64_t idx[3] = {0, 0, 0}, r = (int64_t)i;
            for (int d = pl->ndim - 1; d >= 0; d--) { idx[d] = r % pl->lshape[d]; r /= pl->lshape[d]; }
            idx[pl->shard_dim] += pl->shard_off;
            int64_t gi = 0;
            for (int d = 0; d < pg->ndim; d++) gi = gi * pg->shape[d] + idx[d];
            bad += h[pl->offset + i] != a[pg->offset + gi];
        }
        EXPECT(bad == 0, "%s: %d elements of the tp slice differ from the whole model", names[k], bad);
    }
    mem_free(a); mem_free(b); mem_free(h);
    ptable_free(&t); ptable_free(&t2);
}

// The gradient of the whole model against central differences of the
// float64 reference model (tests/ref.h), one random direction per tensor
// and one over all of them: g·u vs (L(θ+hu) − L(θ−hu))/2h. The fp32 loss
// must also match the reference.
// Larger weights than GPT-2's init so every path carries signal; nonzero
// biases, gains off one.
static void signal_params(Stage *st) {
    ptable_init(&st->table, st->params, 5);
    for (size_t i = 0; i < st->table.total; i++) st->params[i] *= 4.0f;
    for (int k = 0; k < st->table.n; k++) {
        const ParamInfo *p = &st->table.p[k];
        if (p->init != INIT_NORMAL)
            for (size_t i = 0; i < p->numel; i++) st->params[p->offset + i] += (float)(0.3 * rng_normal(9, k, i));
    }
}

// The model's float64 loss over parameters P (the whole-model layout).
static double ref_loss_of(const ModelConfig *c, const double *P, const int *tok, const int *tgt, int B, int T) {
    if (c->arch != ARCH_GPT2) {   // the LLaMA family
        RefLlama g = {c->n_layer, c->n_head, config_kv_heads(c), c->d_model, c->d_ff, c->max_seq, c->vocab,
                      c->vocab_padded, config_rope_theta(c), config_norm_eps(c), c->arch == ARCH_QWEN2,
                      c->tie_embeddings};
        return ref_llama_loss(&g, P, tok, tgt, B, T);
    }
    RefGpt g = {c->n_layer, c->n_head, c->d_model, c->d_ff, c->max_seq, c->vocab, c->vocab_padded};
    return ref_gpt2_loss(&g, P, tok, tgt, B, T);
}

static void check_model_grad(ModelConfig c, int B, int T) {
    Err e;
    Stage st;
    ModelSlice s = slice_whole(&c);
    EXPECT(stage_init(&st, &c, &s, B, T, 1, 0, &e) == 0, "%s", e.msg);
    signal_params(&st);
    int *tok = malloc(B * T * sizeof(int)), *tgt = malloc(B * T * sizeof(int));
    make_batch(tok, tgt, B, T, c.vocab, 77);
    tgt[1] = -1;                                      // a skipped position
    memset(st.grads, 0, st.table.total * 4);
    double loss = stage_forward(&st, 0, tok, tgt, B, T, 1.0f / (B * T)) / (B * T);
    stage_backward(&st, 0, tok, B, T);
    size_t n = st.table.total;
    double *P = malloc(n * sizeof *P), *u = malloc(n * sizeof *u);
    for (size_t i = 0; i < n; i++) P[i] = st.params[i];
    double ref = ref_loss_of(&c, P, tok, tgt, B, T);
    EXPECT(fabs(loss - ref) < 1e-5 * fabs(ref), "loss %.9g vs reference %.9g", loss, ref);
    double worst = 0;
    const char *worst_name = "";
    for (int k = -1; k < st.table.n; k++) {
        size_t lo = k < 0 ? 0 : st.table.p[k].offset, hi = k < 0 ? n : lo + st.table.p[k].numel;
        memset(u, 0, n * sizeof *u);
        double gu = 0, un = 0, terms = 0;   // terms: the size of the sum's terms, sqrt(sum (g_i u_i)^2)
        for (size_t i = lo; i < hi; i++) {
            u[i] = rng_normal(13, (uint64_t)(k + 1), i);
            gu += (double)st.grads[i] * u[i];
            un += u[i] * u[i];
            terms += ((double)st.grads[i] * u[i]) * ((double)st.grads[i] * u[i]);
        }
        double h = 1e-5 / sqrt(un);
        for (size_t i = lo; i < hi; i++) P[i] = st.params[i] + h * u[i];
        double lp = ref_loss_of(&c, P, tok, tgt, B, T);
        for (size_t i = lo; i < hi; i++) P[i] = st.params[i] - h * u[i];
        double lm = ref_loss_of(&c, P, tok, tgt, B, T);
        for (size_t i = lo; i < hi; i++) P[i] = st.params[i];
        double fd = (lp - lm) / (2 * h);
        // relative to the derivative, or to its terms where they cancel (a random direction can
        // give a sum far below its terms, which fp32 gradients only hold to their own rounding)
        double err = fabs(fd - gu) / (fabs(fd) + 1e-2 * sqrt(terms) + 1e-4);
        if (getenv("GRAD_DEBUG"))
            fprintf(stderr, "%-28s g.u %+.8e fd %+.8e terms %.2e err %.2e\n", k < 0 ? "(all)" : st.table.p[k].name,
                    gu, fd, sqrt(terms), err);
        if (err > worst) { worst = err; worst_name = k < 0 ? "(all)" : st.table.p[k].name; }
    }
    EXPECT(worst < 1e-4, "L=%d NH=%d C=%d F=%d T=%d V=%d: worst directional derivative rel err %.2e in %s",
           c.n_layer, c.n_head, c.d_model, c.d_ff, T, c.vocab, worst, worst_name);
    free(P); free(u); free(tok); free(tgt);
    stage_free(&st);
}

// Mean loss of the batch with the current parameters.
static double loss_of(Stage *st, const int *tok, const int *tgt, int B, int T) {
    return stage_forward(st, 0, tok, tgt, B, T, 0.0f) / (B * T);
}

// The loss against the float64 reference model and, tensor by tensor, the
// gradient against the fp32 stage's (which check_model_grad holds to the
// reference's central differences) under 16-bit precision (flags): relative
// errors within tol_loss and tol_grad (the gradient's: ‖g16 − g32‖/‖g32‖).
static void check_half_model(ModelConfig c, int B, int T, unsigned flags, double tol_loss, double tol_grad) {
    Err e;
    Stage st[2];
    ModelSlice s = slice_whole(&c);
    int *tok = malloc(B * T * sizeof(int)), *tgt = malloc(B * T * sizeof(int));
    make_batch(tok, tgt, B, T, c.vocab, 77);
    tgt[1] = -1;
    double loss[2];
    for (int k = 0; k < 2; k++) {
        EXPECT(stage_init(&st[k], &c, &s, B, T, 1, k ? flags : 0, &e) == 0, "%s", e.msg);
        signal_params(&st[k]);
        loss[k] = stage_forward(&st[k], 0, tok, tgt, B, T, 1.0f / (B * T)) / (B * T);
        stage_backward(&st[k], 0, tok, B, T);
    }
    RefGpt g = {c.n_layer, c.n_head, c.d_model, c.d_ff, c.max_seq, c.vocab, c.vocab_padded};
    size_t n = st[0].table.total;
    double *P = malloc(n * sizeof *P);
    for (size_t i = 0; i < n; i++) P[i] = st[0].params[i];
    double ref = ref_gpt2_loss(&g, P, tok, tgt, B, T), worst = 0;
    const char *worst_name = "";
    for (int k = 0; k < st[0].table.n; k++) {
        const ParamInfo *p = &st[0].table.p[k];
        double d2 = 0, n2 = 0;
        for (size_t i = p->offset; i < p->offset + p->numel; i++) {
            double a = st[0].grads[i], b = st[1].grads[i];
            d2 += (a - b) * (a - b);
            n2 += a * a;
        }
        double err = n2 > 0 ? sqrt(d2 / n2) : sqrt(d2);
        if (err > worst) { worst = err; worst_name = p->name; }
    }
    const char *pn = prec_name(st[1].prec);
    if (getenv("GRAD_DEBUG"))
        fprintf(stderr, "%s: loss rel err %.2e, worst gradient %.2e (%s)\n", pn, fabs(loss[1] - ref) / fabs(ref), worst,
                worst_name);
    EXPECT(fabs(loss[1] - ref) < tol_loss * fabs(ref), "%s: loss %.9g vs reference %.9g", pn, loss[1], ref);
    EXPECT(worst < tol_grad, "%s: gradient of %s off by %.2e of its norm", pn, worst_name, worst);
    free(P); free(tok); free(tgt);
    for (int k = 0; k < 2; k++) stage_free(&st[k]);
}

// Every kernel as the 16-bit passes use it (weights and stored activations
// rounded, fp32 math): bf16 within ~1e-2, fp16 within ~1e-3 (unit
// roundoffs 2^-9 and 2^-12, a few roundings deep; fp16's gradient also
// leaves each block rounded).
static void test_half_precision(void) {
    check_half_model(tiny_cfg(2, 2, 8, 12, 9, 13), 2, 9, STAGE_BF16, 1e-2, 2e-2);
    check_half_model(tiny_cfg(3, 3, 12, 48, 70, 29), 1, 67, STAGE_BF16, 1e-2, 2e-2);
    check_half_model(tiny_cfg(2, 2, 8, 12, 9, 13), 2, 9, STAGE_FP16, 1e-3, 3e-3);
    check_half_model(tiny_cfg(3, 3, 12, 48, 70, 29), 1, 67, STAGE_FP16, 1e-3, 3e-3);
}

static void test_model_gradient(void) {
    check_model_grad(tiny_cfg(2, 2, 8, 12, 9, 13), 2, 9);
    check_model_grad(tiny_cfg(1, 1, 5, 7, 11, 7), 3, 11);
    check_model_grad(tiny_cfg(3, 3, 12, 48, 70, 29), 1, 67);
}

static ModelConfig llama_cfg(int L, int NH, int NKV, int C, int F, int T, int V) {
    ModelConfig c = tiny_cfg(L, NH, C, F, T, V);
    c.arch = ARCH_LLAMA;
    c.n_kv_head = NKV;
    return c;
}

// LLaMA against finite differences of a float64 LLaMA: grouped-query
// attention (4 heads on 2 key/value heads), an odd FFN width, RMSNorm's eps
// and the rotary base from the config, a sequence across attention blocks.
static void test_llama_gradient(void) {
    check_model_grad(llama_cfg(2, 4, 2, 16, 27, 9, 13), 2, 9);
    ModelConfig c = llama_cfg(1, 2, 1, 8, 11, 70, 7);
    c.rope_theta = 500;
    c.norm_eps = 1e-6f;
    check_model_grad(c, 1, 70);
    check_model_grad(llama_cfg(2, 3, 3, 12, 20, 11, 29), 2, 11);
}

// Qwen2 (q/k/v biases, θ 10⁶ and eps 10⁻⁶ by default) with its head tied
// to the token embedding and untied, and LLaMA tied (Llama 3.2's small
// models), against finite differences of the float64 model.
static void test_qwen2_gradient(void) {
    ModelConfig c = llama_cfg(2, 4, 2, 16, 27, 9, 13);
    c.arch = ARCH_QWEN2;
    c.tie_embeddings = 1;
    check_model_grad(c, 2, 9);
    c.tie_embeddings = 0;
    check_model_grad(c, 2, 9);
    c = llama_cfg(1, 2, 1, 8, 11, 70, 7);
    c.arch = ARCH_QWEN2;
    c.rope_theta = 500;
    check_model_grad(c, 1, 70);
    c = llama_cfg(2, 3, 3, 12, 20, 11, 29);
    c.tie_embeddings = 1;
    check_model_grad(c, 2, 11);
}

static void test_accumulate_and_repeat(void) {
    Err e;
    ModelConfig c = tiny_cfg(2, 2, 16, 32, 12, 50);
    Stage st;
    ModelSlice s = slice_whole(&c);
    EXPECT(stage_init(&st, &c, &s, 4, 12, 1, 0, &e) == 0, "%s", e.msg);
    ptable_init(&st.table, st.params, 1);
    int tok[48], tgt[48];
    make_batch(tok, tgt, 4, 12, 50, 3);
    double l0 = loss_of(&st, tok, tgt, 4, 12);
    EXPECT(fabs(l0 - log(50.0)) < 0.05, "initial loss %.4f vs ln V %.4f", l0, log(50.0));
    size_t n = st.table.total;
    float *g1 = malloc(n * 4);
    stage_forward(&st, 0, tok, tgt, 4, 12, 0.5f);
    stage_backward(&st, 0, tok, 4, 12);
    memcpy(g1, st.grads, n * 4);
    stage_forward(&st, 0, tok, tgt, 4, 12, 0.5f);
    stage_backward(&st, 0, tok, 4, 12);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += fabsf(st.grads[i] - 2 * g1[i]) > 1e-6f * (1 + fabsf(g1[i]));
    EXPECT(bad == 0, "%d gradients did not accumulate to twice", bad);
    // Repeat: same inputs, same bits.
    memset(st.grads, 0, n * 4);
    double la = stage_forward(&st, 0, tok, tgt, 4, 12, 0.5f);
    stage_backward(&st, 0, tok, 4, 12);
    memcpy(g1, st.grads, n * 4);
    memset(st.grads, 0, n * 4);
    double lb = stage_forward(&st, 0, tok, tgt, 4, 12, 0.5f);
    stage_backward(&st, 0, tok, 4, 12);
    EXPECT(la == lb && memcmp(g1, st.grads, n * 4) == 0, "forward/backward is not bitwise repeatable");
    // A smaller batch than the capacity equals the same rows run alone.
    double lsmall = stage_forward(&st, 0, tok, tgt, 2, 12, 0.0f);
    Stage st2;
    EXPECT(stage_init(&st2, &c, &s, 2, 12, 1, 0, &e) == 0, "%s", e.msg);
    memcpy(st2.params, st.params, n * 4);
    double lsmall2 = stage_forward(&st2, 0, tok, tgt, 2, 12, 0.0f);
    EXPECT(lsmall == lsmall2, "loss depends on activation capacity: %.9g vs %.9g", lsmall, lsmall2);
    stage_free(&st2);
    free(g1);
    stage_free(&st);
}

// stage_grads_begin leaves some gradients to be written (the linear
// layers', a tied head's embedding) and zeroes an untied embedding only in
// the rows the last step looked up: a step after another gives the bits of
// a first step on a zeroed buffer, tied and untied, and after gradients
// written outside the passes (stage_grads_touched).
static void check_grads_begin(ModelConfig c) {
    Err e;
    Stage st, fresh;
    ModelSlice s = slice_whole(&c);
    int B = 2, T = 12, V = c.vocab, x[24], y[24], tx[24], ty[24];
    EXPECT(stage_init(&st, &c, &s, B, T, 1, 0, &e) == 0 && stage_init(&fresh, &c, &s, B, T, 1, 0, &e) == 0, "%s", e.msg);
    ptable_init(&st.table, st.params, 1);
    size_t n = st.table.total;
    memcpy(fresh.params, st.params, n * 4);
    make_batch(x, tx, B, T, V / 2, 5);   // tokens of the first half of the vocabulary
    make_batch(y, ty, B, T, V, 6);
    for (int i = 0; i < B * T; i++) y[i] = V / 2 + y[i] % (V - V / 2);   // and of the second
    for (int round = 0; round < 2; round++) {
        stage_grads_begin(&st);
        stage_forward(&st, 0, x, tx, B, T, 0.5f);
        stage_backward(&st, 0, x, B, T);
        if (round) {   // an inf in a row no lookup adds to (a padded one), as the overflow test hook writes one
            for (int i = 0; i < st.table.n; i++)
                if (st.table.p[i].role == ROLE_TOK_EMB) st.grads[st.table.p[i].offset + (size_t)(V + 3) * c.d_model] = INFINITY;
            stage_grads_touched(&st);
        }
        stage_grads_begin(&st);
        stage_forward(&st, 0, y, ty, B, T, 0.5f);
        stage_backward(&st, 0, y, B, T);
        memset(fresh.grads, 0, n * 4);
        stage_grads_begin(&fresh);
        stage_forward(&fresh, 0, y, ty, B, T, 0.5f);
        stage_backward(&fresh, 0, y, B, T);
        EXPECT(memcmp(st.grads, fresh.grads, n * 4) == 0, "tied %d, round %d: the second step's gradients are not a "
               "first step's", c.tie_embeddings, round);
    }
    stage_free(&st);
    stage_free(&fresh);
}

static void test_grads_begin(void) {
    check_grads_begin(tiny_cfg(2, 2, 16, 32, 12, 50));   // GPT-2: the head tied
    ModelConfig c = llama_cfg(2, 2, 2, 16, 32, 12, 50);
    check_grads_begin(c);
    c.tie_embeddings = 1;
    check_grads_begin(c);
}

// Segments: a block, the embeddings, the final norm; each padded to the
// slice's pad_multiple with zeros, adjacent, covering the flat buffer; the
// tensors keep the values of the unpadded table.
static void test_segments(void) {
    Err e;
    ModelConfig c = tiny_cfg(3, 3, 15, 31, 9, 37);
    ModelSlice s = slice_whole(&c);
    ParamTable base;
    EXPECT(ptable_build(&base, &c, &s, &e) == 0, "%s", e.msg);
    float *pb = malloc(base.total * 4);
    ptable_init(&base, pb, 4);
    int pads[] = {1, 4, 7};
    for (int q = 0; q < 3; q++) {
        s.pad_multiple = pads[q];
        ParamTable t;
        EXPECT(ptable_build(&t, &c, &s, &e) == 0, "%s", e.msg);
        EXPECT(t.nseg == c.n_layer + 2, "pad %d: %d segments", pads[q], t.nseg);
        int bad = 0;
        for (int k = 0; k < t.nseg; k++) {
            const ParamSeg *g = &t.seg[k];
            bad += (g->hi - g->lo) % (size_t)pads[q] != 0;
            bad += k + 1 < t.nseg ? g->hi != t.seg[k + 1].lo : g->hi != t.total;
            bad += g->layer != (k == 0 || k == t.nseg - 1 ? -1 : k - 1);
            const ParamInfo *last = &t.p[g->first + g->n - 1];
            bad += t.p[g->first].offset != g->lo || last->offset + last->numel > g->hi ||
                   g->hi - (last->offset + last->numel) >= (size_t)pads[q];
            for (size_t o = g->lo; o < g->hi; o += 5) bad += ptable_seg_of(&t, o) != k;
        }
        EXPECT(bad == 0, "pad %d: %d segment invariants broken", pads[q], bad);
        float *pt = malloc(t.total * 4);
        memset(pt, 0x7f, t.total * 4);
        ptable_init(&t, pt, 4);
        bad = 0;
        for (int i = 0; i < t.n; i++) bad += memcmp(pt + t.p[i].offset, pb + base.p[i].offset, t.p[i].numel * 4) != 0;
        for (int k = 0; k < t.nseg; k++) {
            const ParamInfo *last = &t.p[t.seg[k].first + t.seg[k].n - 1];
            for (size_t o = last->offset + last->numel; o < t.seg[k].hi; o++) bad += pt[o] != 0.0f;
        }
        EXPECT(bad == 0, "pad %d: %d tensors or padding differ from the unpadded init", pads[q], bad);
        free(pt);
        ptable_free(&t);
    }
    free(pb);
    ptable_free(&base);
}

// The stage's hooks: parameters and gradients reached segment by segment
// through them give the same bits as the flat buffers, and are asked for in
// the documented order (embeddings and final norm once, blocks twice).
typedef struct {
    Stage *st;
    float *pcopy, *gbuf;
    int asked[16], done[16], gdone[16], in_use[16];
    int bad;
} HookLog;

static const float *log_params(void *ctx, int k, int next) {
    HookLog *h = ctx;
    (void)next;
    h->asked[k]++;
    h->bad += h->in_use[k]++ != 0;
    return h->pcopy + h->st->table.seg[k].lo;
}
static void log_params_done(void *ctx, int k) { HookLog *h = ctx; h->done[k]++; h->bad += h->in_use[k]-- != 1; }
static float *log_grads(void *ctx, int k) { HookLog *h = ctx; return h->gbuf + h->st->table.seg[k].lo; }
static void log_grads_done(void *ctx, int k) { HookLog *h = ctx; h->gdone[k]++; }

static void test_stage_hooks(void) {
    Err e;
    ModelConfig c = tiny_cfg(3, 2, 16, 32, 12, 50);
    ModelSlice s = slice_whole(&c);
    s.pad_multiple = 3;
    Stage a, b;
    EXPECT(stage_init(&a, &c, &s, 2, 12, 1, 0, &e) == 0 && stage_init(&b, &c, &s, 2, 12, 1, STAGE_NO_PARAMS | STAGE_NO_GRADS, &e) == 0,
           "%s", e.msg);
    EXPECT(b.params == NULL && b.grads == NULL, "STAGE_NO_* still allocated buffers");
    size_t n = a.table.total;
    ptable_init(&a.table, a.params, 2);
    HookLog h = {.st = &b, .pcopy = malloc(n * 4), .gbuf = calloc(n, 4)};
    memcpy(h.pcopy, a.params, n * 4);
    stage_set_hooks(&b, &(StageHooks){&h, log_params, log_params_done, log_grads, log_grads_done, NULL, NULL});
    int tok[24], tgt[24];
    make_batch(tok, tgt, 2, 12, 50, 5);
    double la = stage_forward(&a, 0, tok, tgt, 2, 12, 0.25f), lb = stage_forward(&b, 0, tok, tgt, 2, 12, 0.25f);
    stage_backward(&a, 0, tok, 2, 12);
    stage_backward(&b, 0, tok, 2, 12);
    EXPECT(la == lb && memcmp(a.grads, h.gbuf, n * 4) == 0, "hooks change the loss or the gradients");
    int L = c.n_layer, order = h.asked[0] == 1 && h.asked[L + 1] == 1 && h.gdone[0] == 1 && h.gdone[L + 1] == 1;
    for (int l = 1; l <= L; l++) order &= h.asked[l] == 2 && h.gdone[l] == 1;
    for (int k = 0; k < L + 2; k++) order &= h.done[k] == h.asked[k];
    EXPECT(order && h.bad == 0, "hook calls out of order (asked %d/%d/%d, bad %d)", h.asked[0], h.asked[1], h.asked[L + 1], h.bad);
    free(h.pcopy);
    free(h.gbuf);
    stage_free(&a);
    stage_free(&b);
}

// Activation slots: two micro-batches in flight (forward 0, forward 1,
// backward 1, backward 0, as a pipeline schedule runs them) give the same
// losses and gradient bits as running them one after another.
static void test_slots(void) {
    Err e;
    ModelConfig c = tiny_cfg(2, 2, 16, 32, 12, 50);
    ModelSlice s = slice_whole(&c);
    Stage one, two;
    EXPECT(stage_init(&one, &c, &s, 2, 12, 1, 0, &e) == 0 && stage_init(&two, &c, &s, 2, 12, 2, 0, &e) == 0, "%s", e.msg);
    size_t n = one.table.total;
    ptable_init(&one.table, one.params, 6);
    memcpy(two.params, one.params, n * 4);
    int tok[2][24], tgt[2][24];
    make_batch(tok[0], tgt[0], 2, 12, 50, 11);
    make_batch(tok[1], tgt[1], 2, 12, 50, 12);
    double a0 = stage_forward(&one, 0, tok[0], tgt[0], 2, 12, 0.25f);
    stage_backward(&one, 0, tok[0], 2, 12);
    double a1 = stage_forward(&one, 0, tok[1], tgt[1], 2, 12, 0.25f);
    stage_backward(&one, 0, tok[1], 2, 12);
    double b0 = stage_forward(&two, 0, tok[0], tgt[0], 2, 12, 0.25f);
    double b1 = stage_forward(&two, 1, tok[1], tgt[1], 2, 12, 0.25f);
    stage_backward(&two, 1, tok[1], 2, 12);
    stage_backward(&two, 0, tok[0], 2, 12);
    // the sums are the same bits in another order of addition: compare closely, not bitwise
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += fabsf(one.grads[i] - two.grads[i]) > 1e-6f * (1 + fabsf(one.grads[i]));
    EXPECT(a0 == b0 && a1 == b1 && bad == 0, "two slots differ from one after another (%d gradients)", bad);
    EXPECT(stage_input(&two, 0) != stage_input(&two, 1), "slots share activations");
    stage_free(&one);
    stage_free(&two);
}

// The gradients of n pipeline stages against the whole model's: each
// tensor from the stage that holds it, the embeddings' plus the last
// stage's copy of them (a tied head). Returns how many differ; *checked
// gets how many were compared.
static int stage_grads_differ(const Stage *whole, const Stage *st, int n, int *checked) {
    int bad = 0;
    *checked = 0;
    for (int i = 0; i < whole->table.n; i++) {
        const ParamInfo *p = &whole->table.p[i];
        for (int k = 0; k < n; k++) {
            const ParamInfo *q = ptable_find(&st[k].table, p->name);
            if (!q || (k == n - 1 && q->part == PART_EMBED)) continue;
            const ParamInfo *copy = q->part == PART_EMBED ? ptable_find(&st[n - 1].table, p->name) : NULL;
            for (size_t j = 0; j < p->numel; j++) {
                float g = st[k].grads[q->offset + j] + (copy ? st[n - 1].grads[copy->offset + j] : 0.0f);
                float want = whole->grads[p->offset + j];
                bad += fabsf(g - want) > 1e-5f * (1e-3f + fabsf(want));
                (*checked)++;
            }
        }
    }
    return bad;
}

// Pipeline stages stitched by hand: the model cut into stages of 1, 2 and
// 1 layers (activations and their gradients copied between them) gives
// the whole model's loss and every gradient; the tied embedding's gradient
// is the first stage's (lookup) plus the last stage's copy (head), whose
// position table's gradient stays zero.
static void test_pipeline_stages(void) {
    Err e;
    ModelConfig c = tiny_cfg(4, 2, 16, 32, 8, 40);
    ModelSlice w = slice_whole(&c);
    int cut[4] = {0, 1, 3, 4}, B = 2, T = 8, N = B * T, C = c.d_model;
    Stage whole, st[3];
    EXPECT(stage_init(&whole, &c, &w, B, T, 1, 0, &e) == 0, "%s", e.msg);
    ptable_init(&whole.table, whole.params, 9);
    for (int k = 0; k < 3; k++) {
        ModelSlice s = w;
        s.layer_begin = cut[k];
        s.layer_end = cut[k + 1];
        EXPECT(stage_init(&st[k], &c, &s, B, T, 2, 0, &e) == 0, "%s", e.msg);
        ptable_init(&st[k].table, st[k].params, 9);
    }
    EXPECT(ptable_role(&st[2].table, ROLE_TOK_EMB) && ptable_role(&st[2].table, ROLE_POS_EMB) &&
           st[2].table.seg[0].hi == st[0].table.seg[0].hi, "the last stage's copy of the embeddings is not laid out as the first's");
    int tok[16], tgt[16];
    make_batch(tok, tgt, B, T, c.vocab, 5);
    float sc = 1.0f / N;
    double lw = stage_forward(&whole, 0, tok, tgt, B, T, sc);
    stage_backward(&whole, 0, tok, B, T);
    stage_forward(&st[0], 1, tok, tgt, B, T, sc);
    memcpy(stage_input(&st[1], 1), stage_output(&st[0], 1), (size_t)N * C * 4);
    stage_forward(&st[1], 1, tok, tgt, B, T, sc);
    memcpy(stage_input(&st[2], 1), stage_output(&st[1], 1), (size_t)N * C * 4);
    double lp = stage_forward(&st[2], 1, tok, tgt, B, T, sc);
    stage_backward(&st[2], 1, tok, B, T);
    memcpy(stage_grad_output(&st[1], 1), stage_grad_input(&st[2], 1), (size_t)N * C * 4);
    stage_backward(&st[1], 1, tok, B, T);
    memcpy(stage_grad_output(&st[0], 1), stage_grad_input(&st[1], 1), (size_t)N * C * 4);
    stage_backward(&st[0], 1, tok, B, T);
    EXPECT(fabs(lw - lp) <= 1e-6 * fabs(lw), "pipeline loss %.9g, whole model %.9g", lp, lw);
    int checked, bad = stage_grads_differ(&whole, st, 3, &checked);
    const ParamInfo *pos = ptable_role(&st[2].table, ROLE_POS_EMB);   // the last stage's copy: no lookup, no gradient
    for (size_t j = 0; pos && j < pos->numel; j++) bad += st[2].grads[pos->offset + j] != 0.0f;
    EXPECT(bad == 0 && checked == (int)config_param_count(&c, 1), "%d of %d gradients differ from the whole model's", bad,
           checked);
    stage_free(&whole);
    for (int k = 0; k < 3; k++) stage_free(&st[k]);
}

// Interleaved chunks: two stages of two chunks each (layers 0 and 2 on
// one, 1 and 3 on the other), a micro-batch going round them twice, give
// the whole model's loss and gradients; slots are bound to either chunk.
static void test_interleaved_chunks(void) {
    Err e;
    ModelConfig c = tiny_cfg(4, 2, 16, 32, 8, 40);
    ModelSlice w = slice_whole(&c);
    int B = 2, T = 8, N = B * T, C = c.d_model;
    Stage whole, st[2];
    EXPECT(stage_init(&whole, &c, &w, B, T, 1, 0, &e) == 0, "%s", e.msg);
    ptable_init(&whole.table, whole.params, 9);
    for (int k = 0; k < 2; k++) {
        ModelSlice s = w;
        s.layer_begin = k;
        s.layer_end = k + 1;
        s.chunks = 2;
        s.chunk_stride = 2;
        EXPECT(stage_init(&st[k], &c, &s, B, T, 2, 0, &e) == 0, "%s", e.msg);
        EXPECT(st[k].chunks == 2 && ptable_find(&st[k].table, k ? "h.3.mlp.c_fc.weight" : "h.2.mlp.c_fc.weight") &&
               !ptable_find(&st[k].table, k ? "h.2.mlp.c_fc.weight" : "h.1.mlp.c_fc.weight"), "stage %d's chunks", k);
        ptable_init(&st[k].table, st[k].params, 9);
    }
    int tok[16], tgt[16];
    make_batch(tok, tgt, B, T, c.vocab, 5);
    float sc = 1.0f / N;
    size_t n = stage_boundary_floats(&st[0], B, T);
    EXPECT(n == (size_t)N * C, "boundary floats %zu", n);
    double lw = stage_forward(&whole, 0, tok, tgt, B, T, sc);
    stage_backward(&whole, 0, tok, B, T);
    // forward: virtual stages 0, 1, 2, 3 = (st0, chunk 0), (st1, 0), (st0, 1), (st1, 1); slots 1, 0, 0, 1
    int slot[4] = {1, 0, 0, 1};
    double lp = 0;
    for (int j = 0; j < 4; j++) {
        Stage *s = &st[j % 2];
        stage_bind(s, slot[j], j / 2);
        if (j) memcpy(stage_input(s, slot[j]), stage_output(&st[(j - 1) % 2], slot[j - 1]), n * 4);
        lp += stage_forward(s, slot[j], tok, tgt, B, T, sc);
    }
    for (int j = 3; j >= 0; j--) {
        Stage *s = &st[j % 2];
        if (j < 3) memcpy(stage_grad_output(s, slot[j]), stage_grad_input(&st[(j + 1) % 2], slot[j + 1]), n * 4);
        stage_backward(s, slot[j], tok, B, T);
    }
    EXPECT(fabs(lw - lp) <= 1e-6 * fabs(lw), "interleaved loss %.9g, whole model %.9g", lp, lw);
    int checked, bad = stage_grads_differ(&whole, st, 2, &checked);
    EXPECT(bad == 0 && checked == (int)config_param_count(&c, 1), "%d of %d gradients differ from the whole model's", bad,
           checked);
    stage_free(&whole);
    for (int k = 0; k < 2; k++) stage_free(&st[k]);
}

// Recomputation (selective: the attention core; full: every block) gives
// the gradients and losses of keeping everything, bit for bit, with two
// micro-batches in flight sharing the recomputed set, for less activation
// memory (full < selective < none) — in fp32, bf16 and fp16 (whose
// activations take less than 3/4 of fp32's).
static void test_recompute(void) {
    Err e;
    ModelConfig c = tiny_cfg(3, 2, 16, 32, 8, 40);
    ModelSlice w = slice_whole(&c);
    int B = 2, T = 8, tok[2][16], tgt[2][16];
    make_batch(tok[0], tgt[0], B, T, c.vocab, 5);
    make_batch(tok[1], tgt[1], B, T, c.vocab, 6);
    unsigned modes[3] = {0, STAGE_RECOMPUTE_SELECTIVE, STAGE_RECOMPUTE_FULL};
    size_t fp32_acts = 0;
    for (unsigned prec = 0; prec <= STAGE_FP16; prec += STAGE_BF16) {   // fp32, bf16, fp16
        Stage st[3];
        double loss[3];
        size_t acts[3];
        for (int k = 0; k < 3; k++) {
            size_t a0 = mem_current(MEM_ACTS);
            EXPECT(stage_init(&st[k], &c, &w, B, T, 2, modes[k] | prec, &e) == 0, "%s", e.msg);
            acts[k] = mem_current(MEM_ACTS) - a0;
            ptable_init(&st[k].table, st[k].params, 9);
            float sc = 1.0f / (2 * B * T);
            loss[k] = stage_forward(&st[k], 0, tok[0], tgt[0], B, T, sc) +
                      stage_forward(&st[k], 1, tok[1], tgt[1], B, T, sc);
            stage_backward(&st[k], 1, tok[1], B, T);
            stage_backward(&st[k], 0, tok[0], B, T);
        }
        const char *pn = prec_name(st[0].prec);
        for (int k = 1; k < 3; k++) {
            EXPECT(loss[k] == loss[0], "%s mode %u: loss %.9g vs %.9g", pn, modes[k], loss[k], loss[0]);
            EXPECT(!memcmp(st[k].grads, st[0].grads, st[0].table.total * sizeof(float)), "%s mode %u: gradients differ",
                   pn, modes[k]);
        }
        EXPECT(acts[2] < acts[1] && acts[1] < acts[0], "%s: activation bytes none %zu, selective %zu, full %zu", pn,
               acts[0], acts[1], acts[2]);
        if (!prec) fp32_acts = acts[0];
        else EXPECT(acts[0] < fp32_acts * 3 / 4, "%s: activations %zu bytes against fp32's %zu", pn, acts[0],
                    fp32_acts);
        for (int k = 0; k < 3; k++) stage_free(&st[k]);
    }
}

// The architecture's description is the one parameter count: the table
// built from it, whole or as tensor-parallel halves, has exactly the
// elements arch_part_params and config_param_count say, for GPT-2 and for
// LLaMA (whose stage builds the same table).
static void test_arch_description(void) {
    Err e;
    ModelConfig c = tiny_cfg(3, 4, 32, 64, 16, 300);
    ModelSlice s = slice_whole(&c);
    ParamTable t;
    EXPECT(ptable_build(&t, &c, &s, &e) == 0 && (int64_t)t.total == config_param_count(&c, 1), "whole table %zu vs %lld",
           t.total, (long long)config_param_count(&c, 1));
    ptable_free(&t);
    ModelSlice h = {0, c.n_layer, 1, 2, 1, 0, 1, 0};
    EXPECT(ptable_build(&t, &c, &h, &e) == 0, "%s", e.msg);
    int64_t want = arch_part_params(&c, PART_EMBED, 2, 1) + c.n_layer * arch_part_params(&c, PART_BLOCK, 2, 1) +
                   arch_part_params(&c, PART_FINAL, 2, 1);
    EXPECT((int64_t)t.total == want, "TP half %zu vs %lld", t.total, (long long)want);
    const ParamInfo *te = ptable_role(&t, ROLE_TOK_EMB), *pe = ptable_role(&t, ROLE_POS_EMB);
    EXPECT(te && pe && !strcmp(te->name, "wte.weight") && !strcmp(pe->name, "wpe.weight") && te->lshape[0] == 384 / 2,
           "roles find the embeddings");
    ptable_free(&t);
    ModelConfig l = c;
    l.arch = ARCH_LLAMA;
    l.n_kv_head = 2;
    EXPECT(ptable_build(&t, &l, &s, &e) == 0 && (int64_t)t.total == config_param_count(&l, 1) &&
           ptable_role(&t, ROLE_HEAD) && !ptable_role(&t, ROLE_POS_EMB), "LLaMA table");
    ptable_free(&t);
    Stage st;
    EXPECT(stage_init(&st, &l, &s, 1, 8, 1, 0, &e) == 0 && (int64_t)st.table.total == config_param_count(&l, 1),
           "LLaMA stage: %s", e.msg);
    stage_free(&st);
}

static void test_bad_configs(void) {
    Err e;
    Stage st;
    ModelConfig c = tiny_cfg(2, 3, 16, 32, 12, 50);
    ModelSlice s = slice_whole(&c);
    EXPECT(stage_init(&st, &c, &s, 1, 12, 1, 0, &e) == -1 && strstr(e.msg, "n_head"), "heads not dividing d_model: %s", e.msg);
    c = tiny_cfg(2, 2, 16, 32, 12, 50);
    EXPECT(stage_init(&st, &c, &s, 1, 13, 1, 0, &e) == -1 && strstr(e.msg, "max_seq"), "T above max_seq: %s", e.msg);
    mem_fail_after(2);
    EXPECT(stage_init(&st, &c, &s, 1, 12, 1, 0, &e) == -1 && strstr(e.msg, "out of memory"), "allocation failure: %s", e.msg);
    mem_fail_after(0);
    EXPECT(mem_current(MEM_PARAMS) == 0 && mem_current(MEM_ACTS) == 0, "failed init leaked memory");
    Json *j = json_parse("{\"preset\":\"gpt2-tiny\",\"n_layer\":2,\"bogus\":1}", 44, &e);
    EXPECT(j && config_from_json(&c, j, &e) == -1 && strstr(e.msg, "bogus"), "unknown field: %s", e.msg);
    json_free(j);
    j = json_parse("{\"preset\":\"gpt2-tiny\",\"n_layer\":2}", 34, &e);
    EXPECT(j && config_from_json(&c, j, &e) == 0 && c.n_layer == 2 && c.d_model == 128 && !strcmp(c.name, "custom"),
           "preset with override");
    json_free(j);
    // a field of another architecture: by key in a model object, by value in a config
    const char *foreign = "{\"preset\":\"gpt2-tiny\",\"rope_theta\":1e4}";
    j = json_parse(foreign, strlen(foreign), &e);
    EXPECT(j && config_from_json(&c, j, &e) == -1 && strstr(e.msg, "'rope_theta' is a llama, qwen2 field"), "%s", e.msg);
    json_free(j);
    const char *as_gpt2 = "{\"preset\":\"llama-tiny\",\"arch\":\"gpt2\"}";
    j = json_parse(as_gpt2, strlen(as_gpt2), &e);
    EXPECT(j && config_from_json(&c, j, &e) == 0 && c.arch == ARCH_GPT2 && c.n_kv_head == 0 && c.norm_eps == 0 &&
           config_validate(&c, &e) == 0, "llama-tiny as gpt2 keeps no LLaMA field: %s", e.msg);
    json_free(j);
    c.n_kv_head = 2;
    EXPECT(config_validate(&c, &e) == -1 && strstr(e.msg, "n_kv_head (2) is a llama, qwen2 field"), "%s", e.msg);
    // the rotary kernel's CHECK, as a rule: LLaMA's head size is even, GPT-2's need not be
    c = llama_cfg(1, 2, 0, 6, 8, 8, 50);
    EXPECT(config_validate(&c, &e) == -1 && strstr(e.msg, "= 3 is odd"), "llama head size 3: %s", e.msg);
    EXPECT(stage_init(&st, &c, &s, 1, 8, 1, 0, &e) == -1 && strstr(e.msg, "is odd"), "stage_init: %s", e.msg);
    c.arch = ARCH_GPT2;
    EXPECT(config_validate(&c, &e) == 0, "gpt2 head size 3: %s", e.msg);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_param_counts);
    RUN(test_init);
    RUN(test_model_gradient);
    RUN(test_llama_gradient);
    RUN(test_qwen2_gradient);
    RUN(test_half_precision);
    RUN(test_accumulate_and_repeat);
    RUN(test_grads_begin);
    RUN(test_segments);
    RUN(test_stage_hooks);
    RUN(test_slots);
    RUN(test_pipeline_stages);
    RUN(test_interleaved_chunks);
    RUN(test_recompute);
    RUN(test_arch_description);
    RUN(test_bad_configs);
    return test_finish();
}
