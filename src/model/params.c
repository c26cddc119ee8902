#include "model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

ModelSlice slice_whole(const ModelConfig *c) { return (ModelSlice){0, c->n_layer, 0, 1, 1}; }
int slice_is_first(const ModelSlice *s) { return s->layer_begin == 0; }
int slice_is_last(const ModelSlice *s, const ModelConfig *c) { return s->layer_end == c->n_layer; }

typedef struct {
    ParamTable *t;
    int cap;
    const ModelSlice *s;
    Err *err;
} Builder;

// Adds a tensor of global shape dims[0..ndim) split along shard_dim (-1: not
// split), whose first init_rows rows (along dimension 0) are drawn at init.
static int add_rows(Builder *bd, const char *name, int layer, int ndim, const int64_t *dims, int shard_dim,
                    int flags, int init, float std, int64_t init_rows) {
    ParamTable *t = bd->t;
    if (t->n == bd->cap) {
        bd->cap = bd->cap ? 2 * bd->cap : 64;
        ParamInfo *np = realloc(t->p, (size_t)bd->cap * sizeof *np);
        if (!np) return err_set(bd->err, ERR_RUN, "out of memory building the parameter table");
        t->p = np;
    }
    ParamInfo *p = &t->p[t->n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    p->init_rows = init_rows;
    p->shard_dim = bd->s->tp_size > 1 ? shard_dim : -1;
    for (int d = 0; d < ndim; d++) {
        p->shape[d] = p->lshape[d] = dims[d];
        if (d == p->shard_dim) {
            int tp = bd->s->tp_size;
            if (dims[d] % tp)
                return err_set(bd->err, ERR_USAGE, "tensor-parallel size %d does not divide dimension %d (%lld) of %s",
                               tp, d, (long long)dims[d], name);
            p->lshape[d] = dims[d] / tp;
            p->shard_off = p->lshape[d] * bd->s->tp_rank;
        }
        p->numel *= (size_t)p->lshape[d];
    }
    size_t pm = bd->s->pad_multiple > 1 ? (size_t)bd->s->pad_multiple : 1;
    if (t->n && t->p[t->n - 1].layer != layer) t->total = (t->total + pm - 1) / pm * pm;   // a new segment
    p->offset = t->total;
    p->layer = layer;
    p->flags = flags;
    p->init = init;
    p->std = std;
    t->total += p->numel;
    t->n++;
    return 0;
}

// Adds a tensor of global shape dims[0..ndim) split along shard_dim (-1: not split).
static int add(Builder *bd, const char *name, int layer, int ndim, const int64_t *dims, int shard_dim,
               int flags, int init, float std) {
    return add_rows(bd, name, layer, ndim, dims, shard_dim, flags, init, std, dims[0]);
}

// Adds tensor "h.<layer>.<suffix>" of shape (d0[, d1[, d2]]).
static int add_block(Builder *bd, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1,
                     int64_t d2, int shard_dim, int flags, int init, float std) {
    char nm[64];
    snprintf(nm, sizeof nm, "h.%d.%s", layer, suffix);
    int64_t dims[3] = {d0, d1, d2};
    return add(bd, nm, layer, ndim, dims, shard_dim, flags, init, std);
}

int ptable_build(ParamTable *t, const ModelConfig *c, const ModelSlice *s, Err *err) {
    memset(t, 0, sizeof *t);
    Builder bd = {t, 0, s, err};
    int64_t C = c->d_model, F = c->d_ff, Vp = c->vocab_padded;
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * c->n_layer);
    int rc = 0;
    // The token embedding is tied to the output head; the last stage of a
    // pipeline holds it too (see stage.h).
    if (slice_is_first(s) || slice_is_last(s, c))
        rc |= add_rows(&bd, "wte.weight", -1, 2, (int64_t[]){Vp, C}, 0, 0, INIT_NORMAL, std, c->vocab);
    if (slice_is_first(s))
        rc |= add(&bd, "wpe.weight", -1, 2, (int64_t[]){c->max_seq, C}, -1, 0, INIT_NORMAL, std);
    for (int l = s->layer_begin; l < s->layer_end && !rc; l++) {
        rc |= add_block(&bd, l, "ln_1.weight", 1, C, 0, 0, -1, PARAM_NO_DECAY, INIT_ONE, 0);
        rc |= add_block(&bd, l, "ln_1.bias", 1, C, 0, 0, -1, PARAM_NO_DECAY, INIT_ZERO, 0);
        // q, k and v stacked on a leading dimension of 3, so a head slice is
        // one range of dimension 1.
        rc |= add_block(&bd, l, "attn.c_attn.weight", 3, 3, C, C, 1, 0, INIT_NORMAL, std);
        rc |= add_block(&bd, l, "attn.c_attn.bias", 2, 3, C, 0, 1, PARAM_NO_DECAY, INIT_ZERO, 0);
        rc |= add_block(&bd, l, "attn.c_proj.weight", 2, C, C, 0, 1, 0, INIT_NORMAL, proj_std);
        rc |= add_block(&bd, l, "attn.c_proj.bias", 1, C, 0, 0, -1, PARAM_NO_DECAY, INIT_ZERO, 0);
        rc |= add_block(&bd, l, "ln_2.weight", 1, C, 0, 0, -1, PARAM_NO_DECAY, INIT_ONE, 0);
        rc |= add_block(&bd, l, "ln_2.bias", 1, C, 0, 0, -1, PARAM_NO_DECAY, INIT_ZERO, 0);
        rc |= add_block(&bd, l, "mlp.c_fc.weight", 2, F, C, 0, 0, 0, INIT_NORMAL, std);
        rc |= add_block(&bd, l, "mlp.c_fc.bias", 1, F, 0, 0, 0, PARAM_NO_DECAY, INIT_ZERO, 0);
        rc |= add_block(&bd, l, "mlp.c_proj.weight", 2, C, F, 0, 1, 0, INIT_NORMAL, proj_std);
        rc |= add_block(&bd, l, "mlp.c_proj.bias", 1, C, 0, 0, -1, PARAM_NO_DECAY, INIT_ZERO, 0);
    }
    if (!rc && slice_is_last(s, c)) {
        rc |= add(&bd, "ln_f.weight", -1, 1, (int64_t[]){C}, -1, PARAM_NO_DECAY, INIT_ONE, 0);
        rc |= add(&bd, "ln_f.bias", -1, 1, (int64_t[]){C}, -1, PARAM_NO_DECAY, INIT_ZERO, 0);
    }
    if (rc) { ptable_free(t); return -1; }
    size_t pm = s->pad_multiple > 1 ? (size_t)s->pad_multiple : 1;
    t->total = (t->total + pm - 1) / pm * pm;
    if (!(t->seg = calloc((size_t)t->n + 1, sizeof *t->seg))) {
        ptable_free(t);
        return err_set(err, ERR_RUN, "out of memory building the parameter table");
    }
    for (int i = 0; i < t->n; i++) {
        if (i == 0 || t->p[i].layer != t->p[i - 1].layer) {
            if (t->nseg) t->seg[t->nseg - 1].hi = t->p[i].offset;
            t->seg[t->nseg++] = (ParamSeg){t->p[i].offset, 0, i, 0, t->p[i].layer};
        }
        t->seg[t->nseg - 1].n++;
    }
    if (t->nseg) t->seg[t->nseg - 1].hi = t->total;
    return 0;
}

int ptable_seg_of(const ParamTable *t, size_t off) {
    int lo = 0, hi = t->nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t->seg[mid].lo <= off) lo = mid; else hi = mid - 1;
    }
    return lo;
}

void ptable_free(ParamTable *t) {
    free(t->seg);
    free(t->p);
    memset(t, 0, sizeof *t);
}

const ParamInfo *ptable_find(const ParamTable *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->p[i].name, name) == 0) return &t->p[i];
    return NULL;
}

// Global flat index of local element i of p (row-major over the global shape).
static uint64_t global_index(const ParamInfo *p, size_t i) {
    int64_t idx[PARAM_MAX_DIM];
    for (int d = p->ndim - 1; d >= 0; d--) {
        idx[d] = (int64_t)(i % (size_t)p->lshape[d]);
        i /= (size_t)p->lshape[d];
    }
    if (p->shard_dim >= 0) idx[p->shard_dim] += p->shard_off;
    uint64_t g = 0;
    for (int d = 0; d < p->ndim; d++) g = g * (uint64_t)p->shape[d] + (uint64_t)idx[d];
    return g;
}

// Writes p's initial values into w (p->numel floats).
static void init_tensor(const ParamInfo *p, float *w, uint64_t seed) {
    if (p->init != INIT_NORMAL) {
        float v = p->init == INIT_ONE ? 1.0f : 0.0f;
        for (size_t i = 0; i < p->numel; i++) w[i] = v;
        return;
    }
    uint64_t stream = rng_stream_of(p->name);
    size_t row = p->numel / (size_t)p->lshape[0];   // local elements per dim-0 row
    if (p->shard_dim <= 0) {
        // The local elements are one range [g0, g0+numel) of global
        // indices: draw them a Box-Muller pair at a time.
        uint64_t g0 = p->shard_dim == 0 ? (uint64_t)p->shard_off * row : 0;
        uint64_t k0 = g0 / 2, k1 = (g0 + p->numel + 1) / 2;
        #pragma omp parallel for schedule(static)
        for (uint64_t kk = k0; kk < k1; kk++) {
            double z[2];
            rng_normal_pair(seed, stream, kk, z);
            for (int h = 0; h < 2; h++) {
                uint64_t g = 2 * kk + (uint64_t)h;
                if (g >= g0 && g < g0 + p->numel) w[g - g0] = (float)(p->std * z[h]);
            }
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < p->numel; i++)
            w[i] = (float)(p->std * rng_normal(seed, stream, global_index(p, i)));
    }
    // Rows past init_rows (the vocabulary padding of wte) start at zero,
    // so a model's values do not depend on the padding.
    for (int64_t r = 0; r < p->lshape[0]; r++) {
        int64_t gr = r + (p->shard_dim == 0 ? p->shard_off : 0);
        if (gr >= p->init_rows) memset(w + (size_t)r * row, 0, row * sizeof(float));
    }
}

void ptable_init_seg(const ParamTable *t, int k, float *buf, uint64_t seed) {
    const ParamSeg *g = &t->seg[k];
    memset(buf, 0, (g->hi - g->lo) * sizeof(float));
    for (int i = g->first; i < g->first + g->n; i++) init_tensor(&t->p[i], buf + (t->p[i].offset - g->lo), seed);
}

void ptable_init(const ParamTable *t, float *params, uint64_t seed) {
    for (int k = 0; k < t->nseg; k++) ptable_init_seg(t, k, params + t->seg[k].lo, seed);
}
