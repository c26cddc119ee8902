#include "model/stage.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/pointwise.h"

// The output head runs over at most this many logits at once (rows × Vp),
// so the (B·T, Vp) logits matrix never exists whole.
enum { HEAD_CHUNK_FLOATS = 16 << 20 };

enum { BLOCK_TENSORS = 12 };
static const char *block_suffix[BLOCK_TENSORS] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias"};

// Pointers to one block's parameters (or gradients) in a flat buffer.
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} BlockW;

// Saved activations of one block for the backward pass. N = B·T rows.
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;   // (N,C), (N), (N)
    float *qkv;                         // (N,3·Cl)
    float *atty;                        // (N,Cl)
    float *lse;                         // (B,NHl,T)
    float *res2;                        // (N,C) residual after attention
    float *ln2, *ln2_mean, *ln2_rstd;   // (N,C), (N), (N)
    float *fch, *fch_gelu;              // (N,Fl)
    float *res3;                        // (N,C) block output
} BlockActs;

struct StageActs {
    int nl;                       // blocks on this stage
    int Cl, NHl, Fl, Vl, v0;      // local slice sizes
    BlockActs *blk;
    size_t (*blk_off)[BLOCK_TENSORS];   // flat-buffer offset of each block tensor
    int *blk_seg;                 // each block's segment
    int seg_emb, seg_lnf;         // segments of wte (and wpe) and of ln_f; -1 if absent
    float *x0;                    // (N,C) stage input / embeddings
    float *lnf, *lnf_mean, *lnf_rstd;
    float *losses;                // (N)
    // scratch
    float *proj;                  // (N,C) projection before the residual add
    float *logits;                // (head_rows, Vp)
    int head_rows;
    float *dres;                  // (N,C) gradient of the residual stream
    float *dbtc;                  // (N,C)
    float *dfch;                  // (N,Fl)
    float *dqkv;                  // (N,3Cl)
    float *att_scratch;
    void *act_block, *ws_block;
    size_t act_bytes, ws_bytes;
};

// Block i's tensors in buf, its segment's parameters or gradients.
static void block_weights(const Stage *s, const float *buf, int i, BlockW *w) {
    float **dst[BLOCK_TENSORS] = {&w->ln1w, &w->ln1b, &w->qkvw, &w->qkvb, &w->attprojw, &w->attprojb,
                                  &w->ln2w, &w->ln2b, &w->fcw, &w->fcb, &w->fcprojw, &w->fcprojb};
    size_t lo = s->table.seg[s->acts->blk_seg[i]].lo;
    for (int k = 0; k < BLOCK_TENSORS; k++) *dst[k] = (float *)buf + (s->acts->blk_off[i][k] - lo);
}

// Tensor `name` in buf, the parameters or gradients of the segment holding it.
static float *tensor(const Stage *s, const float *buf, const char *name) {
    const ParamInfo *p = ptable_find(&s->table, name);
    return p ? (float *)buf + (p->offset - s->table.seg[ptable_seg_of(&s->table, p->offset)].lo) : NULL;
}

// ---- parameters and gradients by segment: the hooks, or the flat buffers ----

static const float *seg_params(Stage *s, int seg, int next) {
    if (s->hooks.params) return s->hooks.params(s->hooks.ctx, seg, next);
    return s->params + s->table.seg[seg].lo;
}

static void seg_params_done(Stage *s, int seg) {
    if (s->hooks.params_done) s->hooks.params_done(s->hooks.ctx, seg);
}

static float *seg_grads(Stage *s, int seg) {
    if (s->hooks.grads) return s->hooks.grads(s->hooks.ctx, seg);
    return s->grads + s->table.seg[seg].lo;
}

static void seg_grads_done(Stage *s, int seg) {
    if (s->hooks.grads_done) s->hooks.grads_done(s->hooks.ctx, seg);
}

// Carves n floats at *off from base (64-byte steps); with base NULL only counts.
static float *carve(char *base, size_t *off, size_t n) {
    float *p = base ? (float *)(base + *off) : NULL;
    *off += (n * sizeof(float) + 63) & ~(size_t)63;
    return p;
}

// Lays out activations (acts=1) or scratch (acts=0) from base; returns bytes.
static size_t layout(StageActs *a, int B, int T, int C, int Vp, char *base, int acts) {
    size_t off = 0;
    size_t N = (size_t)B * T;
    if (acts) {
        a->x0 = carve(base, &off, N * C);
        for (int i = 0; i < a->nl; i++) {
            BlockActs *b = &a->blk[i];
            b->ln1 = carve(base, &off, N * C);
            b->ln1_mean = carve(base, &off, N);
            b->ln1_rstd = carve(base, &off, N);
            b->qkv = carve(base, &off, N * 3 * a->Cl);
            b->atty = carve(base, &off, N * a->Cl);
            b->lse = carve(base, &off, (size_t)B * a->NHl * T);
            b->res2 = carve(base, &off, N * C);
            b->ln2 = carve(base, &off, N * C);
            b->ln2_mean = carve(base, &off, N);
            b->ln2_rstd = carve(base, &off, N);
            b->fch = carve(base, &off, N * a->Fl);
            b->fch_gelu = carve(base, &off, N * a->Fl);
            b->res3 = carve(base, &off, N * C);
        }
        a->lnf = carve(base, &off, N * C);
        a->lnf_mean = carve(base, &off, N);
        a->lnf_rstd = carve(base, &off, N);
        a->losses = carve(base, &off, N);
    } else {
        a->proj = carve(base, &off, N * C);
        a->head_rows = (int)(HEAD_CHUNK_FLOATS / (size_t)Vp);
        if (a->head_rows < 64) a->head_rows = 64;
        if ((size_t)a->head_rows > N) a->head_rows = (int)N;
        a->logits = carve(base, &off, (size_t)a->head_rows * Vp);
        a->dres = carve(base, &off, N * C);
        a->dbtc = carve(base, &off, N * C);
        a->dfch = carve(base, &off, N * a->Fl);
        a->dqkv = carve(base, &off, N * 3 * a->Cl);
        a->att_scratch = carve(base, &off, attention_scratch_floats(T, omp_get_max_threads()));
    }
    return off;
}

int stage_init(Stage *s, const ModelConfig *cfg, const ModelSlice *slice, int B, int T, unsigned flags, Err *err) {
    memset(s, 0, sizeof *s);
    if (config_validate(cfg, err)) return -1;
    if (T > cfg->max_seq)
        return err_set(err, ERR_USAGE, "sequence length %d is above the model's max_seq %d", T, cfg->max_seq);
    if (B < 1 || T < 1) return err_set(err, ERR_USAGE, "batch and sequence length must be at least 1");
    int tp = slice->tp_size;
    if (cfg->n_head % tp) return err_set(err, ERR_USAGE, "tp=%d does not divide n_head=%d", tp, cfg->n_head);
    if (cfg->d_ff % tp) return err_set(err, ERR_USAGE, "tp=%d does not divide d_ff=%d", tp, cfg->d_ff);
    if (cfg->vocab_padded % tp) return err_set(err, ERR_USAGE, "tp=%d does not divide the padded vocabulary %d", tp, cfg->vocab_padded);
    s->cfg = *cfg;
    s->slice = *slice;
    s->B = B;
    s->T = T;
    if (ptable_build(&s->table, cfg, slice, err)) return -1;
    StageActs *a = calloc(1, sizeof *a);
    if (!a) { stage_free(s); return err_set(err, ERR_RUN, "out of memory"); }
    s->acts = a;
    a->nl = slice->layer_end - slice->layer_begin;
    a->Cl = cfg->d_model / tp;
    a->NHl = cfg->n_head / tp;
    a->Fl = cfg->d_ff / tp;
    a->Vl = cfg->vocab_padded / tp;
    a->v0 = a->Vl * slice->tp_rank;
    a->blk = calloc((size_t)a->nl + 1, sizeof *a->blk);
    a->blk_off = calloc((size_t)a->nl + 1, sizeof *a->blk_off);
    a->blk_seg = calloc((size_t)a->nl + 1, sizeof *a->blk_seg);
    for (int i = 0; a->blk_off && a->blk_seg && i < a->nl; i++)
        for (int k = 0; k < BLOCK_TENSORS; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "h.%d.%s", slice->layer_begin + i, block_suffix[k]);
            const ParamInfo *p = ptable_find(&s->table, nm);
            CHECKF(p, "missing %s", nm);
            a->blk_off[i][k] = p->offset;
            a->blk_seg[i] = ptable_seg_of(&s->table, p->offset);
        }
    const ParamInfo *pe = ptable_find(&s->table, "wte.weight"), *pf = ptable_find(&s->table, "ln_f.weight");
    a->seg_emb = pe ? ptable_seg_of(&s->table, pe->offset) : -1;
    a->seg_lnf = pf ? ptable_seg_of(&s->table, pf->offset) : -1;
    size_t pbytes = s->table.total * sizeof(float);
    a->act_bytes = layout(a, B, T, cfg->d_model, a->Vl, NULL, 1);
    a->ws_bytes = layout(a, B, T, cfg->d_model, a->Vl, NULL, 0);
    if (!(flags & STAGE_NO_PARAMS)) s->params = mem_alloc(MEM_PARAMS, pbytes);
    if (!(flags & STAGE_NO_GRADS)) s->grads = mem_alloc(MEM_GRADS, pbytes);
    a->act_block = mem_alloc(MEM_ACTS, a->act_bytes);
    a->ws_block = mem_alloc(MEM_WORKSPACE, a->ws_bytes);
    if (!a->blk || !a->blk_off || !a->blk_seg || (!s->params && !(flags & STAGE_NO_PARAMS)) ||
        (!s->grads && !(flags & STAGE_NO_GRADS)) || !a->act_block || !a->ws_block) {
        char b1[32], b2[32];
        err_set(err, ERR_RUN, "out of memory allocating the model (%s of parameters, %s of activations for B=%d T=%d)",
                mem_fmt(pbytes, b1, sizeof b1), mem_fmt(a->act_bytes, b2, sizeof b2), B, T);
        stage_free(s);
        return -1;
    }
    layout(a, B, T, cfg->d_model, a->Vl, a->act_block, 1);
    layout(a, B, T, cfg->d_model, a->Vl, a->ws_block, 0);
    return 0;
}

void stage_free(Stage *s) {
    if (s->acts) {
        mem_free(s->acts->act_block);
        mem_free(s->acts->ws_block);
        free(s->acts->blk);
        free(s->acts->blk_off);
        free(s->acts->blk_seg);
        free(s->acts);
    }
    mem_free(s->params);
    mem_free(s->grads);
    ptable_free(&s->table);
    memset(s, 0, sizeof *s);
}

float *stage_input(Stage *s) { return s->acts->x0; }
float *stage_output(Stage *s) { return s->acts->nl ? s->acts->blk[s->acts->nl - 1].res3 : s->acts->x0; }
float *stage_grad_output(Stage *s) { return s->acts->dres; }
float *stage_grad_input(Stage *s) { return s->acts->dres; }

static void block_forward(Stage *s, int i, const float *params, const float *xin, int B, int T) {
    StageActs *a = s->acts;
    BlockActs *b = &a->blk[i];
    BlockW w;
    block_weights(s, params, i, &w);
    int N = B * T, C = s->cfg.d_model;
    layernorm_forward(b->ln1, b->ln1_mean, b->ln1_rstd, xin, w.ln1w, w.ln1b, N, C);
    linear_forward(b->qkv, b->ln1, w.qkvw, w.qkvb, N, C, 3 * a->Cl);
    attention_forward(b->atty, b->lse, b->qkv, a->att_scratch, B, T, a->Cl, a->NHl);
    linear_forward(a->proj, b->atty, w.attprojw, NULL, N, a->Cl, C);
    residual_forward(b->res2, xin, a->proj, w.attprojb, N, C);
    layernorm_forward(b->ln2, b->ln2_mean, b->ln2_rstd, b->res2, w.ln2w, w.ln2b, N, C);
    linear_forward(b->fch, b->ln2, w.fcw, w.fcb, N, C, a->Fl);
    gelu_forward(b->fch_gelu, b->fch, (size_t)N * a->Fl);
    linear_forward(a->proj, b->fch_gelu, w.fcprojw, NULL, N, a->Fl, C);
    residual_forward(b->res3, b->res2, a->proj, w.fcprojb, N, C);
}

// dres holds d(block output) and leaves with d(block input).
static void block_backward(Stage *s, int i, const float *params, float *grads, const float *xin, int B, int T) {
    StageActs *a = s->acts;
    BlockActs *b = &a->blk[i];
    BlockW w, g;
    block_weights(s, params, i, &w);
    block_weights(s, grads, i, &g);
    int N = B * T, C = s->cfg.d_model;
    // MLP: res3 = res2 + gelu(ln2(res2)·Wfc + bfc)·Wp + bp
    linear_backward(a->dfch, g.fcprojw, g.fcprojb, a->dres, b->fch_gelu, w.fcprojw, N, a->Fl, C, 0);
    gelu_backward(a->dfch, b->fch, a->dfch, (size_t)N * a->Fl);
    linear_backward(a->dbtc, g.fcw, g.fcb, a->dfch, b->ln2, w.fcw, N, C, a->Fl, 0);
    layernorm_backward(a->dres, g.ln2w, g.ln2b, a->dbtc, b->res2, w.ln2w, b->ln2_mean, b->ln2_rstd, N, C);
    // Attention: res2 = x + attn(ln1(x)·Wqkv + bqkv)·Wo + bo
    linear_backward(a->dbtc, g.attprojw, g.attprojb, a->dres, b->atty, w.attprojw, N, a->Cl, C, 0);
    attention_backward(a->dqkv, a->dbtc, b->qkv, b->atty, b->lse, a->att_scratch, B, T, a->Cl, a->NHl);
    linear_backward(a->dbtc, g.qkvw, g.qkvb, a->dqkv, b->ln1, w.qkvw, N, C, 3 * a->Cl, 0);
    layernorm_backward(a->dres, g.ln1w, g.ln1b, a->dbtc, xin, w.ln1w, b->ln1_mean, b->ln1_rstd, N, C);
}

static const float *block_input(Stage *s, int i) { return i == 0 ? s->acts->x0 : s->acts->blk[i - 1].res3; }

double stage_forward(Stage *s, const int *tokens, const int *targets, int B, int T, float dscale) {
    CHECK(B >= 1 && B <= s->B && T >= 1 && T <= s->T);
    StageActs *a = s->acts;
    int N = B * T, C = s->cfg.d_model, first = slice_is_first(&s->slice), last = slice_is_last(&s->slice, &s->cfg);
    int se = a->seg_emb, sf = a->seg_lnf, nl = a->nl;
    int after_blocks = last ? sf : -1;
    const float *pe = NULL;
    if (first) {
        // the embeddings stay at hand for the tied output head
        pe = seg_params(s, se, nl ? a->blk_seg[0] : after_blocks);
        embedding_forward(a->x0, tokens, tensor(s, pe, "wte.weight"), tensor(s, pe, "wpe.weight"), B, T, C, a->v0,
                          a->Vl);
        if (!last) seg_params_done(s, se);
    }
    for (int i = 0; i < nl; i++) {
        const float *pb = seg_params(s, a->blk_seg[i], i + 1 < nl ? a->blk_seg[i + 1] : after_blocks);
        block_forward(s, i, pb, block_input(s, i), B, T);
        seg_params_done(s, a->blk_seg[i]);
    }
    if (!last) return 0.0;

    // backward starts with the last block: fetch it during the head
    const float *pf = seg_params(s, sf, dscale != 0.0f && nl ? a->blk_seg[nl - 1] : -1);
    if (!pe) pe = seg_params(s, se, -1);
    const float *x = block_input(s, nl);
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, tensor(s, pf, "ln_f.weight"), tensor(s, pf, "ln_f.bias"),
                      N, C);
    if (!targets) {
        seg_params_done(s, se);
        seg_params_done(s, sf);
        return 0.0;
    }
    const float *wte = tensor(s, pe, "wte.weight");
    float *dwte = dscale != 0.0f ? tensor(s, seg_grads(s, se), "wte.weight") : NULL;
    int V = s->cfg.vocab, Vp = a->Vl;
    // The head in chunks of rows: logits, loss and logits gradient, then the
    // gradient into ln_f's output and the embedding table, chunk by chunk.
    for (int r0 = 0; r0 < N; r0 += a->head_rows) {
        int nr = N - r0 < a->head_rows ? N - r0 : a->head_rows;
        linear_forward(a->logits, a->lnf + (size_t)r0 * C, wte, NULL, nr, C, Vp);
        crossentropy_forward(a->logits, a->losses + r0, targets + r0, nr, V, Vp, dscale);
        if (dscale != 0.0f)
            linear_backward(a->dbtc + (size_t)r0 * C, dwte, NULL, a->logits, a->lnf + (size_t)r0 * C, wte, nr,
                            C, Vp, 0);
    }
    seg_params_done(s, se);
    // a pipeline's last stage, or a deferred lookup: wte's gradient here is complete
    if (dscale != 0.0f && (!first || s->embed_grads)) seg_grads_done(s, se);
    double sum = 0.0;
    for (int n = 0; n < N; n++) sum += a->losses[n];
    if (dscale != 0.0f) {
        float *gf = seg_grads(s, sf);
        memset(a->dres, 0, (size_t)N * C * sizeof(float));
        layernorm_backward(a->dres, tensor(s, gf, "ln_f.weight"), tensor(s, gf, "ln_f.bias"), a->dbtc, x,
                           tensor(s, pf, "ln_f.weight"), a->lnf_mean, a->lnf_rstd, N, C);
        seg_grads_done(s, sf);
    }
    seg_params_done(s, sf);
    return sum;
}

void stage_backward(Stage *s, const int *tokens, int B, int T) {
    CHECK(B >= 1 && B <= s->B && T >= 1 && T <= s->T);
    StageActs *a = s->acts;
    for (int i = a->nl - 1; i >= 0; i--) {
        int sg = a->blk_seg[i];
        const float *pb = seg_params(s, sg, i > 0 ? a->blk_seg[i - 1] : -1);
        block_backward(s, i, pb, seg_grads(s, sg), block_input(s, i), B, T);
        seg_params_done(s, sg);
        seg_grads_done(s, sg);
    }
    if (slice_is_first(&s->slice) && s->embed_grads) {
        s->embed_grads(s->embed_grads_ctx, tokens, a->dres, B, T);
    } else if (slice_is_first(&s->slice)) {
        float *ge = seg_grads(s, a->seg_emb);
        embedding_backward(tensor(s, ge, "wte.weight"), tensor(s, ge, "wpe.weight"), a->dres, tokens, B, T,
                           s->cfg.d_model, a->v0, a->Vl);
        seg_grads_done(s, a->seg_emb);
    }
}

void stage_logits(Stage *s, int B, int T, int pos, float *logits) {
    CHECK(slice_is_last(&s->slice, &s->cfg) && pos >= 0 && pos < T);
    int C = s->cfg.d_model;
    const float *wte = tensor(s, seg_params(s, s->acts->seg_emb, -1), "wte.weight");
    for (int b = 0; b < B; b++)
        linear_forward(logits + (size_t)b * s->acts->Vl, s->acts->lnf + ((size_t)b * T + pos) * C, wte, NULL, 1, C,
                       s->acts->Vl);
    seg_params_done(s, s->acts->seg_emb);
}
