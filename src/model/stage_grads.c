// model/stage_grads — the stage's gradient buffer at the start of a step:
// zeroed but where one product writes a gradient whole first (the linear
// layers', a tied head's embedding), and an untied token embedding's table
// zeroed only in the rows the lookups added to; and at its end the
// gradient norm's sums of squares taken by the products that write the
// linear layers' gradients last.
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "kernels/matmul.h"
#include "model/stage_impl.h"

// x[lo, hi) = 0, split over the threads when it is large; its floats.
static size_t zero_range(float *x, size_t lo, size_t hi) {
    size_t n = hi - lo;
    int nt = n < ((size_t)1 << 20) ? 1 : omp_get_max_threads();
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t k = (size_t)omp_get_thread_num(), m = (size_t)omp_get_num_threads();
        memset(x + lo + n * k / m, 0, (n * (k + 1) / m - n * k / m) * sizeof *x);
    }
    return n;
}

// Whether the stage has no hooks at all: its gradients are its passes' alone.
static int no_hooks(const Stage *s) {
    const StageHooks *h = &s->hooks;
    return !h->params && !h->params_done && !h->grads && !h->grads_done && !h->take_rows && !h->rows;
}

// An untied token embedding's table, zeroed only in the rows the lookups
// added to since the last call (all of it when they are not all listed); its floats.
static size_t zero_emb_rows(Stage *s, const ParamInfo *t) {
    StageActs *a = s->acts;
    int v0 = a->dim.v0, Vl = a->dim.Vl, C = s->cfg.d_model;
    CHECK(t->numel == (size_t)Vl * C);
    if (a->emb_all) return zero_range(s->grads, t->offset, t->offset + t->numel);
    size_t n = 0;
    for (size_t i = 0; i < a->emb_n; i++) {
        int r = a->emb_rows[i] - v0;
        if (r >= 0 && r < Vl) memset(s->grads + t->offset + (size_t)r * C, 0, (size_t)C * sizeof(float)), n += C;
    }
    return n;
}

// The gradients of a step are zeroed but where one product writes them
// whole first: the linear layers' (their first backward), and a tied token
// embedding's where this stage runs the head, whose first chunk's product
// writes every row before the embeddings' backward adds the lookups' rows.
// Without hooks an untied token embedding's rows are zeroed where the last
// step added to them.
size_t stage_grads_begin(Stage *s) {
    if (!s->grads) return 0;
    size_t n = 0;
    StageActs *a = s->acts;
    int fresh = !s->hooks.grads && a && a->gfresh;
    int tied_here = fresh && a->arch->tied_head && a->seg_fin >= 0;
    int rows = fresh && !a->arch->tied_head && no_hooks(s);
    for (int k = 0; k < s->table.nseg; k++) {
        const ParamSeg *g = &s->table.seg[k];
        size_t at = g->lo;
        for (int i = g->first; fresh && i < g->first + g->n; i++) {
            const ParamInfo *t = &s->table.p[i];
            int emb = t->role == ROLE_TOK_EMB;
            if (!stage_linear_only(t->role) && !(emb && (tied_here || rows))) continue;
            n += zero_range(s->grads, at, t->offset);
            if (emb && rows) n += zero_emb_rows(s, t);
            at = t->offset + t->numel;
        }
        n += zero_range(s->grads, at, g->hi);
        if (fresh) a->gfresh[k] = k != a->seg_emb || tied_here;
    }
    if (a) a->emb_n = 0, a->emb_all = 0;   // every row is zero again
    for (int i = 0; a && a->gsq && i < s->table.n; i++) a->gsq[i] = -1.0;
    return n * sizeof(float);
}

void stage_grads_touched(Stage *s) {
    if (s->acts) s->acts->emb_all = 1;
}

void stage_note_emb_rows(Stage *s, const int *tokens, size_t n) {
    StageActs *a = s->acts;
    if (a->arch->tied_head || !no_hooks(s) || a->emb_all) return;
    if (a->emb_n + n > a->emb_cap) {
        size_t cap = 2 * (a->emb_n + n);
        int *p = realloc(a->emb_rows, cap * sizeof *p);
        if (!p) {
            a->emb_all = 1;
            return;
        }
        a->emb_rows = p, a->emb_cap = cap;
    }
    memcpy(a->emb_rows + a->emb_n, tokens, n * sizeof *tokens);
    a->emb_n += n;
}

void stage_grads_fresh(Stage *s, int seg, Part part, float *const *g) {
    StageActs *a = s->acts;
    if (!a->gfresh || !a->gfresh[seg]) return;
    a->gfresh[seg] = 0;
    for (int j = 0; j < a->arch->n[part]; j++)
        if (stage_linear_only(a->arch->part[part][j].role)) matmul_grad_fresh(g[j]);
}

// ---- the norm's sums, taken by the last products ----

void stage_fuse_norm(Stage *s, int on) {
    StageActs *a = s->acts;
    if (!a) return;
    free(a->gsq);
    a->gsq = NULL;
    if (!on || !s->grads || !no_hooks(s) || !(a->gsq = malloc((size_t)s->table.n * sizeof *a->gsq))) return;
    for (int i = 0; i < s->table.n; i++) a->gsq[i] = -1.0;
}

void stage_microbatch(Stage *s, int mb, int M) {
    if (!s->acts) return;
    s->acts->mb_last = M > 0 && mb == M - 1;
    s->acts->mb_count = M;
    // The weight gradients of micro-batches before the last in fewer, larger
    // products, where the stage adds into its own buffers (not hooks'
    // pools); the last one's too where the caller multiplies them after
    // (stage_grads_hold) and no hook reads them as its passes finish them.
    int own = M > 1 && s->grads && !s->hooks.grads;
    int hold = s->acts->hold_last && no_hooks(s);
    matmul_defer(!own ? -1 : mb < M - 1 ? mb : hold ? MATMUL_DEFER_ALL : -1);
    CHECKF(M > 0 || !matmul_deferred(), "weight gradients still queued after a step's passes");
}

void stage_grads_hold(Stage *s, int on) {
    if (s->acts) s->acts->hold_last = on;
}

void stage_grads_flush(Stage *s) {
    (void)s;
    matmul_defer_flush();
}

const double *stage_grad_sumsq(const Stage *s) { return s->acts ? s->acts->gsq : NULL; }

// The table's tensor at flat offset off.
static int tensor_at(const Stage *s, size_t off) {
    for (int i = 0; i < s->table.n; i++)
        if (s->table.p[i].offset == off) return i;
    CHECKF(0, "no tensor at flat offset %zu", off);
    return -1;
}

void stage_sumsq_mark(Stage *s, Part part, float *const *g) {
    StageActs *a = s->acts;
    if (!a->gsq) return;
    for (int j = 0; j < a->arch->n[part]; j++) {
        if (!stage_linear_only(a->arch->part[part][j].role)) continue;
        int i = tensor_at(s, (size_t)(g[j] - s->grads));
        if (a->mb_last) matmul_grad_sumsq(g[j], &a->gsq[i]);
        else CHECKF(a->gsq[i] < 0, "a weight gradient written after its last product of the step");
    }
}

void stage_sumsq_head(Stage *s, float *dhead) {
    StageActs *a = s->acts;
    if (!a->gsq || !a->mb_last) return;
    if (a->arch->tied_head && !(slice_is_first(&s->slice) && slice_is_last(&s->slice, &s->cfg))) return;
    matmul_grad_sumsq(dhead, &a->gsq[tensor_at(s, a->off_head)]);
}

// The sum of squares of the distinct rows of the token embedding's
// gradient gtok (Vl rows of C) that the n tokens name, in row order: the
// same sum for every order of the tokens.
static double rows_sumsq(const Stage *s, const float *gtok, const int *tokens, size_t n) {
    const StageActs *a = s->acts;
    int v0 = a->dim.v0, Vl = a->dim.Vl, C = s->cfg.d_model;
    unsigned char *seen = calloc((size_t)Vl, 1);
    CHECKF(seen, "out of memory");
    for (size_t k = 0; k < n; k++)
        if (tokens[k] >= v0 && tokens[k] < v0 + Vl) seen[tokens[k] - v0] = 1;
    double sq = 0;
    for (int r = 0; r < Vl; r++)
        for (int c = 0; seen[r] && c < C; c++) sq += (double)gtok[(size_t)r * C + c] * gtok[(size_t)r * C + c];
    free(seen);
    return sq;
}

void stage_emb_sumsq(Stage *s, const float *gtok, const int *tokens, size_t n, double sign) {
    StageActs *a = s->acts;
    if (!a->gsq) return;
    int t = tensor_at(s, a->off_tok);
    if (a->arch->tied_head) {
        if (a->gsq[t] >= 0) a->gsq[t] += sign * rows_sumsq(s, gtok, tokens, n);
        return;
    }
    // untied, after the last micro-batch's lookups: the table is zero but in
    // the rows the step's lookups added to (stage_grads_begin zeroed the last
    // step's), all listed where the list is whole
    if (sign > 0 && a->mb_last && no_hooks(s) && !a->emb_all) a->gsq[t] = rows_sumsq(s, gtok, a->emb_rows, a->emb_n);
}
