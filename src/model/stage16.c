// model/stage16 — bf16/fp16 in the stage: the 16-bit copy of the weights
// the passes read (made from the fp32 parameters, segment by segment, or
// written by the optimizer) and the 16-bit store of the blocks'
// activations (model/stage.h's precision flags).
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/half.h"
#include "kernels/matmul.h"
#include "model/stage_impl.h"

// Whether the part's buffer already holds segment seg as the 16-bit copy's
// current values (bound: its linear weights bound, not widened); and the
// record that it does, once filled. A tied head fetches the embeddings again
// after the lookup, and every micro-batch fetches them: widened once a step.
static int wbuf_holds(const StageActs *a, int part, int seg, int bound) {
    return a->wbuf_seg[part] == seg && a->wbuf_version[part] == a->w16_version && a->wbuf_bound[part] == bound &&
           !a->w16_stale[seg];
}

static void wbuf_filled(StageActs *a, int part, int seg, int bound) {
    a->wbuf_seg[part] = seg;
    a->wbuf_version[part] = a->w16_version;
    a->wbuf_bound[part] = bound;
}

// Under bf16 on the bf16 units, the linear layers' weights of the stage's
// own segment and its token embedding (a tied head's weight; the lookup
// reads its rows from the 16-bit copy, embedding_forward16): the 16-bit
// copy made again where it is older than the parameters, and bound for the
// products to read in place of the floats (matmul_bind16); the segment's
// other tensors widened into dst.
// Neighbouring linear weights are bound as one run: an arch may multiply
// by several at once (LLaMA's q, k and v, its gate and up projections).
static void seg_params_bound(Stage *s, int seg, const float *src, float *dst) {
    StageActs *a = s->acts;
    const ParamSeg *g = &s->table.seg[seg];
    int stale = a->w16_stale[seg], have = wbuf_holds(a, g->part, seg, 1);
    size_t run = 0, end = 0;   // the run of linear weights being gathered: flat [run, end)
    matmul_unbind16(1 + g->part);
    for (int i = g->first; i <= g->first + g->n; i++) {
        const ParamInfo *t = i < g->first + g->n ? &s->table.p[i] : NULL;
        int bind = t && (stage_linear_only(t->role) || t->role == ROLE_TOK_EMB);
        if (end > run && !(bind && t->offset == end)) {   // the run ends: bound whole
            matmul_bind16(1 + g->part, dst + (run - g->lo), a->w16 + run, end - run);
            run = end = 0;
        }
        if (!t) break;
        size_t o = t->offset - g->lo;
        if (bind) {
            if (stale) half_pack(a->prec, a->w16 + t->offset, src + o, t->numel);
            if (end == run) run = t->offset;
            end = t->offset + t->numel;
        } else if (stale) {
            half_pack_widen(a->prec, a->w16 + t->offset, dst + o, src + o, t->numel);
        } else if (!have) {
            half_unpack(a->prec, dst + o, a->w16 + t->offset, t->numel);
        }
    }
    a->w16_stale[seg] = 0;
    wbuf_filled(a, g->part, seg, 1);
}

// Under bf16/fp16 the 16-bit weights, in fp32 for the kernels: the stage's
// own parameters through their 16-bit copy, gathered ones rounded as they
// come (the same values).
const float *stage16_params(Stage *s, int seg, const float *src) {
    StageActs *a = s->acts;
    const ParamSeg *g = &s->table.seg[seg];
    size_t n = g->hi - g->lo;
    float *dst = a->wbuf[g->part];
    CHECKF(src || (a->w16 && !a->w16_stale[seg]), "segment %d's 16-bit copy is stale and there are no fp32 weights", seg);
    if (a->w16 && matmul_bf16()) {
        seg_params_bound(s, seg, src, dst);
        return dst;
    }
    matmul_unbind16(1 + g->part);
    if (a->w16 && a->w16_stale[seg]) {   // the copy made again, and widened in the same pass
        half_pack_widen(a->prec, a->w16 + g->lo, dst, src, n);
        a->w16_stale[seg] = 0;
    } else if (a->w16) {
        if (!wbuf_holds(a, g->part, seg, 0)) half_unpack(a->prec, dst, a->w16 + g->lo, n);
    } else {
        half_round(a->prec, dst, src, n);
        a->wbuf_seg[g->part] = -1;   // gathered weights: no version names them
        return dst;
    }
    wbuf_filled(a, g->part, seg, 0);
    return dst;
}

unsigned stage_prec_flag(Precision p) { return p == PREC_BF16 ? STAGE_BF16 : p == PREC_FP16 ? STAGE_FP16 : 0; }

// Versions of the 16-bit copies, one sequence for every stage of the process.
static _Atomic uint64_t g_versions;

static void new_version(StageActs *a) { a->w16_version = atomic_fetch_add(&g_versions, 1) + 1; }

void stage_params_changed(Stage *s) {
    if (!s->acts || !s->acts->w16) return;
    memset(s->acts->w16_stale, 1, (size_t)s->table.nseg);
    new_version(s->acts);
}

uint64_t stage16_version(const Stage *s) {
    return s->acts && s->acts->w16 && matmul_bf16() ? s->acts->w16_version : 0;
}

uint16_t *stage_params16(Stage *s, Precision *prec) {
    if (!s->acts || !s->acts->w16) return NULL;
    *prec = s->acts->prec;
    return s->acts->w16;
}

void stage_params16_current(Stage *s) {
    if (!s->acts || !s->acts->w16) return;
    memset(s->acts->w16_stale, 0, (size_t)s->table.nseg);
    new_version(s->acts);
}

// The fp32 buffers are each the size of their part's largest segment.
int stage16_alloc(Stage *s, int own, Err *err) {
    StageActs *a = s->acts;
    size_t most[PART_COUNT] = {0}, off[PART_COUNT] = {0}, bytes = 0;
    for (int k = 0; k < s->table.nseg; k++) {
        const ParamSeg *g = &s->table.seg[k];
        if (g->hi - g->lo > most[g->part]) most[g->part] = g->hi - g->lo;
    }
    for (int p = 0; p < PART_COUNT; p++) {
        off[p] = bytes;
        stage_carve(NULL, &bytes, most[p]);
    }
    a->wbuf_block = mem_alloc(MEM_WORKSPACE, bytes);
    if (own) {
        a->w16 = mem_alloc(MEM_PARAMS16, s->table.total * sizeof(uint16_t));
        a->w16_stale = malloc((size_t)s->table.nseg + 1);
    }
    if (!a->wbuf_block || (own && (!a->w16 || !a->w16_stale))) {
        char b[32];
        return err_set(err, ERR_RUN, "out of memory allocating the 16-bit weights (%s)",
                       mem_fmt(s->table.total * sizeof(uint16_t) + bytes, b, sizeof b));
    }
    for (int p = 0; p < PART_COUNT; p++) {
        a->wbuf[p] = (float *)((char *)a->wbuf_block + off[p]);
        a->wbuf_seg[p] = -1;
    }
    stage_params_changed(s);
    return 0;
}

void stage16_free(StageActs *a) {
    mem_free(a->wbuf_block);
    mem_free(a->w16);
    free(a->w16_stale);
}

void stage16_move(StageActs *a, Slot *sl, int j, const LocalDims *d, int out, unsigned done) {
    uint16_t **h = sl->blk16 + j * a->arch->nact;
    const Arch *ar = a->arch;
    int in16 = stage16_in(a, sl, j) != NULL;
    unsigned only16 = in16 ? ar->act_gemm16 : 0, fn16 = in16 ? ar->act_fn16 : 0;
    for (int i = 0; i < ar->nact; i++) {
        size_t n = ar->act_floats(d, i);
        if (!h[i] || (out && (done >> i & 1u))) continue;
        if (out) half_pack(a->prec, h[i], a->rc[i], n);
        else if (only16 >> i & 1u) matmul_bind_input16_only(a->rc[i], h[i], n);   // the products read it as it is
        else if (!(fn16 >> i & 1u)) half_unpack(a->prec, a->rc[i], h[i], n);       // (fn16: BlockRun.in16)
    }
}

const uint16_t *const *stage16_in(const StageActs *a, Slot *sl, int j) {
    return a->prec == PREC_BF16 && matmul_bf16() ? (const uint16_t *const *)(sl->blk16 + j * a->arch->nact) : NULL;
}

void stage16_round_grad(const StageActs *a, Slot *sl, const LocalDims *d) {
    if (a->prec == PREC_FP16) half_round(a->prec, sl->dres, sl->dres, (size_t)d->Ns * d->C);
}
