#include "model/stage.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/trace.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "model/stage_impl.h"
#include "model/tp.h"


// ---- parameters and gradients by segment: the hooks, or the flat buffers ----

const float *stage_seg_params(Stage *s, int seg, int next) {
    const float *src = s->hooks.params ? s->hooks.params(s->hooks.ctx, seg, next)
                       : s->params       ? s->params + s->table.seg[seg].lo
                                         : NULL;   // STAGE_PARAMS16_ONLY: the 16-bit copy alone
    return s->acts->prec == PREC_FP32 ? src : stage16_params(s, seg, src);
}

void stage_seg_params_done(Stage *s, int seg) {
    if (s->hooks.params_done) s->hooks.params_done(s->hooks.ctx, seg);
}

int stage_linear_only(Role r) { return r == ROLE_QKV || r == ROLE_LINEAR || r == ROLE_HEAD; }

float *stage_seg_grads(Stage *s, int seg) {
    if (s->hooks.grads) return s->hooks.grads(s->hooks.ctx, seg);
    return s->grads + s->table.seg[seg].lo;
}

void stage_seg_grads_done(Stage *s, int seg) {
    if (s->hooks.grads_done) s->hooks.grads_done(s->hooks.ctx, seg);
}

int stage_take_rows(Stage *s) { return s->hooks.take_rows && s->hooks.take_rows(s->hooks.ctx); }

float *stage_at(const Stage *s, const float *buf, int seg, size_t off) {
    return (float *)buf + (off - s->table.seg[seg].lo);
}

void stage_set_hooks(Stage *s, const StageHooks *h) { s->hooks = h ? *h : (StageHooks){0}; }

// ---- layout ----

float *stage_carve(char *base, size_t *off, size_t n) {
    float *p = base ? (float *)(base + *off) : NULL;
    *off += (n * sizeof(float) + 63) & ~(size_t)63;
    return p;
}

// Carves n 16-bit values.
static uint16_t *carve16(char *base, size_t *off, size_t n) {
    uint16_t *p = base ? (uint16_t *)(base + *off) : NULL;
    *off += (n * sizeof(uint16_t) + 63) & ~(size_t)63;
    return p;
}

// Whether activation j of a block is stored in 16 bits.
static int half_act(const StageActs *a, int j) { return a->prec != PREC_FP32 && !(a->arch->act_keep32 >> j & 1u); }

// Whether recomputation leaves activation j of a block to the shared set.
static int shared_act(const StageActs *a, int j) {
    if (a->recompute == STAGE_RECOMPUTE_FULL) return j != a->arch->act_out;
    for (int c = 0; a->recompute == STAGE_RECOMPUTE_SELECTIVE && c < a->arch->ncore; c++)
        if (a->arch->core[c] == j) return 1;
    return 0;
}

// Lays out every slot's activations, then the shared set, from base;
// returns bytes.
static size_t layout_acts(StageActs *a, int slots, char *base) {
    const Arch *ar = a->arch;
    size_t off = 0, N = (size_t)a->dim.N, Ns = (size_t)a->dim.Ns, C = (size_t)a->dim.C;
    for (int j = 0; j < ar->nact; j++)   // full: one whole block's set (its output too, for the recomputation)
        a->rc[j] = a->recompute == STAGE_RECOMPUTE_FULL || shared_act(a, j) || half_act(a, j)
                       ? stage_carve(base, &off, ar->act_floats(&a->dim, j)) : NULL;
    for (int k = 0; k < slots; k++) {
        Slot *sl = &a->slot[k];
        sl->x0 = stage_carve(base, &off, Ns * C);
        for (int i = 0; i < a->cl; i++)
            for (int j = 0; j < ar->nact; j++) {
                size_t n = ar->act_floats(&a->dim, j);
                int shared = shared_act(a, j), half = !shared && half_act(a, j);
                sl->blk[i * ar->nact + j] = shared || half ? NULL : stage_carve(base, &off, n);
                sl->blk16[i * ar->nact + j] = half ? carve16(base, &off, n) : NULL;
            }
        sl->fin[0] = stage_carve(base, &off, N * C);
        sl->fin[1] = stage_carve(base, &off, Ns);
        sl->fin[2] = stage_carve(base, &off, Ns);
        sl->losses = stage_carve(base, &off, N);
    }
    return off;
}

// Lays out the scratch, and each slot's gradient of the residual stream,
// from base; returns bytes.
static size_t layout_scratch(StageActs *a, int slots, char *base) {
    size_t off = 0, N = (size_t)a->dim.N, C = (size_t)a->dim.C;
    a->tmp = stage_carve(base, &off, N * C);
    a->logits = stage_carve(base, &off, (size_t)a->head_rows * a->dim.Vl);
    for (int k = 0; k < slots; k++) a->slot[k].dres = stage_carve(base, &off, (size_t)a->dim.Ns * C);
    for (int j = 0; j < a->arch->nscratch; j++)
        a->scr[j] = stage_carve(base, &off, a->arch->scratch_floats(&a->dim, j));
    return off;
}

// Finds every tensor's place once, by part and position in the arch's
// table; the blocks are the table's block segments in order.
static void index_tensors(Stage *s) {
    StageActs *a = s->acts;
    const ParamTable *t = &s->table;
    a->seg_emb = a->seg_fin = a->seg_head = -1;
    a->off_tok = a->off_pos = a->off_head = SIZE_MAX;
    int b = -1;
    for (int k = 0; k < t->nseg; k++) {
        const ParamSeg *g = &t->seg[k];
        b += g->part == PART_BLOCK;
        for (int i = g->first; i < g->first + g->n; i++) {
            const ParamInfo *p = &t->p[i];
            if (p->part == PART_BLOCK) {
                a->blk_off[b][p->desc] = p->offset;
                a->blk_seg[b] = k;
            } else if (p->part == PART_EMBED) {
                a->seg_emb = k;
                if (p->role == ROLE_TOK_EMB) a->off_tok = p->offset;
                if (p->role == ROLE_POS_EMB) a->off_pos = p->offset;
            } else {
                a->seg_fin = k;
                a->off_fin[p->desc] = p->offset;
                if (p->role == ROLE_HEAD) { a->off_head = p->offset; a->seg_head = k; }
            }
        }
    }
    if (a->arch->tied_head) { a->off_head = a->off_tok; a->seg_head = a->seg_emb; }
}

int stage_check_split(const ModelConfig *c, int tp, int sp, int T, Err *err) {
    if (tp == 1) return 0;
    if (c->n_head % tp) return err_set(err, ERR_USAGE, "--tp %d does not divide the model's %d heads", tp, c->n_head);
    if (config_kv_heads(c) % tp)
        return err_set(err, ERR_USAGE, "--tp %d does not divide the model's %d key/value heads", tp, config_kv_heads(c));
    if (c->d_ff % tp) return err_set(err, ERR_USAGE, "--tp %d does not divide the model's FFN width d_ff %d", tp, c->d_ff);
    if (c->vocab_padded % tp)
        return err_set(err, ERR_USAGE, "--tp %d does not divide the padded vocabulary %d", tp, c->vocab_padded);
    if (sp && T % tp)
        return err_set(err, ERR_USAGE, "--sp splits each sequence's rows over the ranks: --seq %d is not a multiple of --tp %d",
                       T, tp);
    return 0;
}

// The activations' shape: the arch, each chunk's blocks, the local
// dimensions, recomputation and precision.
static void set_shape(StageActs *a, const ModelConfig *cfg, const ModelSlice *slice, int B, int T, unsigned flags) {
    const Arch *ar = arch_of(cfg);
    int tp = slice->tp_size;
    a->arch = ar;
    a->cl = slice->layer_end - slice->layer_begin;
    a->recompute = (int)(flags & (STAGE_RECOMPUTE_FULL | STAGE_RECOMPUTE_SELECTIVE));
    CHECKF(a->recompute != (STAGE_RECOMPUTE_FULL | STAGE_RECOMPUTE_SELECTIVE), "full and selective recomputation at once");
    CHECKF((flags & (STAGE_BF16 | STAGE_FP16)) != (STAGE_BF16 | STAGE_FP16), "bf16 and fp16 at once");
    a->prec = flags & STAGE_BF16 ? PREC_BF16 : flags & STAGE_FP16 ? PREC_FP16 : PREC_FP32;
    CHECKF(ar->act_keep32 >> ar->act_out & 1u, "a block's output (the next one's input) is kept in fp32");
    CHECKF(ar->nact <= ARCH_MAX_BUFS, "%d activations per block", ar->nact);
    a->dim = (LocalDims){.B = B, .T = T, .N = B * T, .C = cfg->d_model, .Cl = cfg->d_model / tp,
                         .NHl = cfg->n_head / tp, .Fl = cfg->d_ff / tp, .Vl = cfg->vocab_padded / tp};
    a->dim.NKVl = config_kv_heads(cfg) / tp;
    a->dim.KVl = a->dim.NKVl * (cfg->d_model / cfg->n_head);
    a->dim.v0 = a->dim.Vl * slice->tp_rank;
    a->dim.sp = slice->sp && tp > 1;
    a->dim.Ns = a->dim.sp ? a->dim.N / tp : a->dim.N;
    a->dim.s0 = a->dim.sp ? a->dim.Ns * slice->tp_rank : 0;
    a->head_rows = stage_head_rows(a->dim.Vl, a->dim.N);
}

size_t stage_act_bytes(const ModelConfig *cfg, const ModelSlice *slice, int B, int T, int slots, unsigned flags) {
    StageActs a = {0};
    set_shape(&a, cfg, slice, B, T, flags);
    size_t bytes = 0;
    if (!a.arch->has_train || !(a.slot = calloc((size_t)slots, sizeof *a.slot))) return 0;
    int ok = 1;
    for (int k = 0; ok && k < slots; k++)
        ok = (a.slot[k].blk = calloc((size_t)a.cl * a.arch->nact + 1, sizeof(float *))) &&
             (a.slot[k].blk16 = calloc((size_t)a.cl * a.arch->nact + 1, sizeof(uint16_t *)));
    if (ok) bytes = layout_acts(&a, slots, NULL);
    for (int k = 0; k < slots; k++) {
        free(a.slot[k].blk);
        free(a.slot[k].blk16);
    }
    free(a.slot);
    return bytes;
}

int stage_init(Stage *s, const ModelConfig *cfg, const ModelSlice *slice, int B, int T, int slots, unsigned flags,
               Err *err) {
    memset(s, 0, sizeof *s);
    if (config_validate(cfg, err)) return -1;
    const Arch *ar = arch_of(cfg);
    if (!ar->has_train)
        return err_set(err, ERR_USAGE, "the %s architecture is described for planning only: this build cannot train it",
                       config_arch_name(cfg->arch));
    if (T > cfg->max_seq)
        return err_set(err, ERR_USAGE, "sequence length %d is above the model's max_seq %d", T, cfg->max_seq);
    if (B < 1 || T < 1 || slots < 1) return err_set(err, ERR_USAGE, "batch, sequence length and slots must be at least 1");
    if ((int64_t)B * T > (1 << 30))
        return err_set(err, ERR_USAGE, "batch × sequence length = %lld tokens per micro-batch is above 2^30", (long long)B * T);
    int tp = slice->tp_size;
    if (stage_check_split(cfg, tp, slice->sp, T, err)) return -1;
    s->cfg = *cfg;
    s->slice = *slice;
    s->B = B;
    s->T = T;
    s->slots = slots;
    s->chunks = slice_chunks(slice);
    if (ptable_build(&s->table, cfg, slice, err)) return -1;

    StageActs *a = calloc(1, sizeof *a);
    if (!a) { stage_free(s); return err_set(err, ERR_RUN, "out of memory"); }
    s->acts = a;
    a->doc_sep = -1;
    set_shape(a, cfg, slice, B, T, flags);
    s->prec = a->prec;
    a->nl = a->cl * s->chunks;
    a->blk_off = calloc((size_t)a->nl + 1, sizeof *a->blk_off);
    a->blk_seg = calloc((size_t)a->nl + 1, sizeof *a->blk_seg);
    a->slot = calloc((size_t)slots, sizeof *a->slot);
    a->gfresh = calloc((size_t)s->table.nseg + 1, 1);
    int ok = a->blk_off && a->blk_seg && a->slot && a->gfresh;
    for (int k = 0; ok && k < slots; k++)
        ok = (a->slot[k].blk = calloc((size_t)a->cl * ar->nact + 1, sizeof(float *))) &&
             (a->slot[k].blk16 = calloc((size_t)a->cl * ar->nact + 1, sizeof(uint16_t *)));
    if (!ok) { stage_free(s); return err_set(err, ERR_RUN, "out of memory"); }
    index_tensors(s);
    size_t pbytes = s->table.total * sizeof(float);
    a->act_bytes = layout_acts(a, slots, NULL);
    a->ws_bytes = layout_scratch(a, slots, NULL);
    unsigned no_params = flags & (STAGE_NO_PARAMS | STAGE_PARAMS16_ONLY);
    CHECKF(!(flags & STAGE_PARAMS16_ONLY) || (a->prec != PREC_FP32 && !(flags & STAGE_NO_PARAMS)),
           "a stage of 16-bit weights alone needs bf16 or fp16 and a copy of its own");
    if (!no_params) s->params = mem_alloc(MEM_PARAMS, pbytes);
    if (!(flags & STAGE_NO_GRADS)) s->grads = mem_alloc(MEM_GRADS, pbytes);
    a->act_block = mem_alloc(MEM_ACTS, a->act_bytes);
    a->ws_block = mem_alloc(MEM_WORKSPACE, a->ws_bytes);
    if ((!s->params && !no_params) || (!s->grads && !(flags & STAGE_NO_GRADS)) || !a->act_block ||
        !a->ws_block) {
        char b1[32], b2[32];
        err_set(err, ERR_RUN, "out of memory allocating the model (%s of parameters, %s of activations for B=%d T=%d)",
                mem_fmt(pbytes, b1, sizeof b1), mem_fmt(a->act_bytes, b2, sizeof b2), B, T);
        stage_free(s);
        return -1;
    }
    layout_acts(a, slots, a->act_block);
    layout_scratch(a, slots, a->ws_block);
    if (a->prec != PREC_FP32 && stage16_alloc(s, !(flags & STAGE_NO_PARAMS), err)) { stage_free(s); return -1; }
    return 0;
}

void stage_free(Stage *s) {
    if (s->acts) {
        tp_free(s->acts->tp);
        mem_free(s->acts->act_block);
        mem_free(s->acts->ws_block);
        stage16_free(s->acts);
        stage_kv_free(s->acts);
        stage_doc_free(s->acts);
        for (int k = 0; s->acts->slot && k < s->slots; k++) {
            free(s->acts->slot[k].blk);
            free(s->acts->slot[k].blk16);
        }
        free(s->acts->slot);
        free(s->acts->blk_off);
        free(s->acts->blk_seg);
        free(s->acts->gfresh);
        free(s->acts->gsq);
        free(s->acts->emb_rows);
        free(s->acts);
    }
    mem_free(s->params);
    mem_free(s->grads);
    ptable_free(&s->table);
    memset(s, 0, sizeof *s);
}

size_t stage_boundary_floats_of(const ModelConfig *cfg, const ModelSlice *slice, int B, int T) {
    StageActs a = {0};
    set_shape(&a, cfg, slice, B, T, 0);
    return (size_t)a.dim.Ns * (size_t)a.dim.C;
}

static LocalDims call_dims(const Stage *s, int B, int T) {
    LocalDims d = s->acts->dim;
    d.B = B;
    d.T = T;
    d.N = B * T;
    d.Ns = d.sp ? d.N / s->slice.tp_size : d.N;
    d.s0 = d.sp ? d.Ns * s->slice.tp_rank : 0;
    return d;
}

Slot *stage_slot(Stage *s, int slot) {
    CHECKF(slot >= 0 && slot < s->slots, "stage slot %d of %d", slot, s->slots);
    return &s->acts->slot[slot];
}

// Whether the slot's chunk starts the model (embeds the tokens) and ends
// it (has the final norm, the head and the loss).
static int chunk_first(const Stage *s, const Slot *sl) { return sl->chunk == 0 && slice_is_first(&s->slice); }
int stage_chunk_last(const Stage *s, const Slot *sl) {
    return sl->chunk == s->chunks - 1 && slice_is_last(&s->slice, &s->cfg);
}

// The output of the slot's j-th block (the input of block j + 1; j = −1:
// the chunk's input).
static float *block_output(Stage *s, Slot *sl, int j) {
    return j < 0 ? sl->x0 : sl->blk[j * s->acts->arch->nact + s->acts->arch->act_out];
}

void stage_bind(Stage *s, int slot, int chunk) {
    CHECKF(chunk >= 0 && chunk < s->chunks, "chunk %d of %d", chunk, s->chunks);
    stage_slot(s, slot)->chunk = chunk;
}

float *stage_input(Stage *s, int slot) { return stage_slot(s, slot)->x0; }
float *stage_output(Stage *s, int slot) { return block_output(s, stage_slot(s, slot), s->acts->cl - 1); }
float *stage_grad_output(Stage *s, int slot) { return stage_slot(s, slot)->dres; }
float *stage_grad_input(Stage *s, int slot) { return stage_slot(s, slot)->dres; }

size_t stage_boundary_floats(const Stage *s, int B, int T) {
    LocalDims d = call_dims(s, B, T);
    return (size_t)d.Ns * (size_t)d.C;
}

// Points w (and g) at block i's tensors in its segment's buffers.
static void block_tensors(const Stage *s, int i, const float *params, const float *grads, float **w, float **g) {
    const StageActs *a = s->acts;
    size_t lo = s->table.seg[a->blk_seg[i]].lo;
    for (int k = 0; k < a->arch->n[PART_BLOCK]; k++) {
        w[k] = (float *)params + (a->blk_off[i][k] - lo);
        if (g) g[k] = (float *)grads + (a->blk_off[i][k] - lo);
    }
}

// The activation buffers of the slot's j-th block for a pass, into buf:
// the slot's, and the shared set's for those recomputation drops; for the
// recomputation before a backward (again) under full recomputation, the
// shared set's output too, so the saved one stays as it is.
static float *const *block_acts(const StageActs *a, Slot *sl, int j, int again, float **buf) {
    float **mine = sl->blk + j * a->arch->nact;
    if (!a->recompute && a->prec == PREC_FP32) return mine;
    for (int i = 0; i < a->arch->nact; i++) buf[i] = mine[i] ? mine[i] : a->rc[i];
    if (again && a->recompute == STAGE_RECOMPUTE_FULL) buf[a->arch->act_out] = a->rc[a->arch->act_out];
    return buf;
}

BlockRun stage_run(Stage *s, const LocalDims *d, Slot *sl, int j, float *const *act, float **w, float **g) {
    StageActs *a = s->acts;
    return (BlockRun){.cfg = &s->cfg, .d = d, .tp = a->tp, .w = w, .g = g, .act = act, .scr = a->scr,
                      .x = block_output(s, sl, j >= 0 ? j - 1 : a->cl - 1), .tmp = a->tmp, .dres = sl->dres,
                      .prec = a->prec, .doc_start = a->doc_sep >= 0 ? a->doc_start : NULL,
                      .doc_pos = a->doc_sep >= 0 ? a->doc_pos : NULL};
}

char *stage_linear_name(const Stage *s, int in, int out, char *buf, size_t n) {
    const LocalDims *d = &s->acts->dim;
    const char *name = s->acts->arch->linear_name(d, in, out);
    int head = in == d->C && out == d->Vl;
    snprintf(buf, n, "%s%s%s", name ? name : "", name && head ? "/" : "", head ? "head" : "");
    return buf;
}

int stage_set_tp(Stage *s, Comm *c, Err *err) {
    CHECKF(comm_size(c) == s->slice.tp_size && comm_rank(c) == s->slice.tp_rank,
           "the TP group (rank %d of %d) is not the slice's (%d of %d)", comm_rank(c), comm_size(c), s->slice.tp_rank,
           s->slice.tp_size);
    CHECK(!s->acts->tp);
    if (s->slice.tp_size == 1) return 0;
    return tp_init(&s->acts->tp, c, s->acts->dim.sp, s->acts->head_rows, err);
}

int stage_tp_status(const Stage *s, Err *err) { return tp_status(s->acts->tp, err); }

// Block j of the slot's chunk: the model's layer number (a trace's label).
static int global_layer(const Stage *s, const Slot *sl, int j) {
    return s->slice.layer_begin + sl->chunk * s->slice.chunk_stride + j;
}

// A forward pass: the embeddings on the first chunk, the chunk's blocks,
// and on the last chunk the rest (model/stage_head).
static double forward_pass(Stage *s, int slot, const int *tokens, const int *targets, int B, int T, float dscale) {
    CHECK(B >= 1 && B <= s->B && T >= 1 && T <= s->T);
    CHECKF(s->slice.tp_size == 1 || s->acts->tp, "a tensor-parallel stage runs after stage_set_tp");
    StageActs *a = s->acts;
    const Arch *ar = a->arch;
    Slot *sl = stage_slot(s, slot);
    LocalDims d = call_dims(s, B, T);
    int N = d.N, C = d.C, first = chunk_first(s, sl), last = stage_chunk_last(s, sl);
    int se = a->seg_emb, sf = a->seg_fin, nl = a->cl, tied = ar->tied_head;
    const int *bseg = a->blk_seg + sl->chunk * a->cl;   // the chunk's blocks' segments
    int after_blocks = last ? sf : -1;
    float *w[ARCH_MAX_TENSORS];
    const float *pe = NULL;
    stage_doc_pass(a, tokens, B, T);
    const int *dpos = a->doc_sep >= 0 ? a->doc_pos : NULL;   // document masking's positions
    if (first) {
        // a tied embedding stays at hand for the output head
        pe = stage_seg_params(s, se, nl ? bseg[0] : after_blocks);
        const float *wte = stage_at(s, pe, se, a->off_tok);
        const uint16_t *wte16 = matmul_bound16(wte, (size_t)d.Vl * C);   // bf16: its 16-bit copy, never widened
        const float *wpe = a->off_pos != SIZE_MAX ? stage_at(s, pe, se, a->off_pos) : NULL;
        if (!a->tp) {
            // decoding: the pass's positions start at the cache's (document masking's count from the document's)
            const float *pos = wpe && a->kv && !dpos ? wpe + (size_t)a->kv->pos * C : wpe;
            if (wte16) embedding_forward16(sl->x0, tokens, dpos, wte16, pos, B, T, C, d.v0, d.Vl);
            else embedding_forward(sl->x0, tokens, dpos, wte, pos, B, T, C, d.v0, d.Vl);
        } else {   // vocabulary parallel: this rank's rows of the table (zero for other tokens), summed over TP
            if (wte16) embedding_forward16(a->tmp, tokens, NULL, wte16, NULL, B, T, C, d.v0, d.Vl);
            else embedding_forward(a->tmp, tokens, NULL, wte, NULL, B, T, C, d.v0, d.Vl);
            embedding_add_positions(sl->x0, tp_reduce(a->tp, a->tmp, N, C), wpe, dpos, d.Ns, d.s0, T, C);
        }
        if (!last || !tied) stage_seg_params_done(s, se);
    }
    for (int j = 0; j < nl; j++) {
        const float *pb = stage_seg_params(s, bseg[j], j + 1 < nl ? bseg[j + 1] : after_blocks);
        block_tensors(s, sl->chunk * a->cl + j, pb, NULL, w, NULL);
        float *buf[ARCH_MAX_BUFS];
        BlockRun r = stage_run(s, &d, sl, j, block_acts(a, sl, j, 0, buf), w, NULL);
        r.kv = a->kv;
        r.layer = sl->chunk * a->cl + j;
        r.aux_loss = &a->aux;
        unsigned done = 0;
        r.act16 = sl->blk16 + j * ar->nact;
        r.act16_done = &done;
        trace_layer(global_layer(s, sl, j));
        ar->block_forward(&r);
        matmul_unbind_inputs16();   // the shared set's floats are the next block's from here
        stage16_move(a, sl, j, &d, 1, done);
        stage_seg_params_done(s, bseg[j]);
    }
    trace_layer(-1);
    if (!last) return 0.0;
    return stage_head_forward(s, sl, &d, first, pe, targets, dscale);
}

double stage_take_aux(Stage *s) {
    double v = s->acts->aux;
    s->acts->aux = 0.0;
    return v;
}

// Under bf16 the passes' products run on the bf16 units where the CPU has them.
double stage_forward(Stage *s, int slot, const int *tokens, const int *targets, int B, int T, float dscale) {
    int prev = matmul_set_bf16(s->acts->prec == PREC_BF16);
    double loss = forward_pass(s, slot, tokens, targets, B, T, dscale);
    CHECKF(!matmul_grads_unwritten(), "the head's gradient marked unwritten was not written");
    matmul_grad_sumsq_clear();
    matmul_unbind16(0);
    matmul_set_bf16(prev);
    return loss;
}

void stage_backward(Stage *s, int slot, const int *tokens, int B, int T) {
    int prev = matmul_set_bf16(s->acts->prec == PREC_BF16);
    CHECK(B >= 1 && B <= s->B && T >= 1 && T <= s->T);
    StageActs *a = s->acts;
    matmul_keep16(a->mb_count > 1 ? stage16_version(s) : 0);   // the step's micro-batches: the same weights
    Slot *sl = stage_slot(s, slot);
    LocalDims d = call_dims(s, B, T);
    stage_doc_pass(a, tokens, B, T);   // the forward's, again from the tokens
    // the slot's output head is the tied token embedding (its segment's
    // gradient was reported done right after the head)
    int first = chunk_first(s, sl), tied_head_here = a->arch->tied_head && stage_chunk_last(s, sl);
    if (first && !stage_chunk_last(s, sl)) sl->rows = stage_take_rows(s);
    float *w[ARCH_MAX_TENSORS], *g[ARCH_MAX_TENSORS];
    for (int j = a->cl - 1; j >= 0; j--) {
        int i = sl->chunk * a->cl + j, sg = a->blk_seg[i];
        const float *pb = stage_seg_params(s, sg, j > 0 ? a->blk_seg[i - 1] : -1);
        block_tensors(s, i, pb, stage_seg_grads(s, sg), w, g);
        stage_grads_fresh(s, sg, PART_BLOCK, g);
        stage_sumsq_mark(s, PART_BLOCK, g);
        float *buf[ARCH_MAX_BUFS];
        BlockRun r = stage_run(s, &d, sl, j, block_acts(a, sl, j, 1, buf), w, g);
        trace_layer(global_layer(s, sl, j));
        if (a->recompute == STAGE_RECOMPUTE_FULL) a->arch->block_forward(&r);   // the same bits as the first time
        else stage16_move(a, sl, j, &d, 0, 0), r.in16 = stage16_in(a, sl, j);
        if (a->recompute == STAGE_RECOMPUTE_SELECTIVE) a->arch->core_forward(&r);
        a->arch->block_backward(&r);
        matmul_unbind_inputs16();
        stage16_round_grad(a, sl, &d);
        stage_seg_params_done(s, sg);
        stage_seg_grads_done(s, sg);
        trace_layer(-1);
    }
    // the embeddings' gradient rows, all N of them (gathered under sequence parallelism)
    const float *dx = sl->dres;
    if (first && d.sp) {
        memcpy(a->tmp + (size_t)d.s0 * d.C, sl->dres, (size_t)d.Ns * d.C * sizeof(float));
        tp_gather(a->tp, a->tmp, d.N, d.C);
        dx = a->tmp;
    }
    if (first && sl->rows) {
        if (!tied_head_here) {   // no head wrote into the embeddings: their (zero) dense part is done now
            stage_seg_grads(s, a->seg_emb);
            stage_seg_grads_done(s, a->seg_emb);
        }
        s->hooks.rows(s->hooks.ctx, tokens, dx, B, T);
    } else if (first) {
        int se = a->seg_emb;
        float *ge = stage_seg_grads(s, se);
        float *gpe = a->off_pos != SIZE_MAX ? stage_at(s, ge, se, a->off_pos) : NULL;
        float *gtok = stage_at(s, ge, se, a->off_tok);
        stage_emb_sumsq(s, gtok, tokens, (size_t)B * T, -1.0);   // a tied head's sum: its rows the lookups add to
        embedding_backward(gtok, gpe, dx, tokens, a->doc_sep >= 0 ? a->doc_pos : NULL, B, T, d.C, d.v0, d.Vl);
        stage_note_emb_rows(s, tokens, (size_t)B * T);
        stage_emb_sumsq(s, gtok, tokens, (size_t)B * T, 1.0);
        stage_seg_grads_done(s, se);
    }
    sl->rows = 0;
    CHECKF(!matmul_grads_unwritten(), "a linear layer's gradient marked unwritten was not written");
    matmul_grad_sumsq_clear();
    matmul_unbind16(0);
    matmul_keep16(0);
    matmul_set_bf16(prev);
}
