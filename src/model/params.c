#include "model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

ModelSlice slice_whole(const ModelConfig *c) { return (ModelSlice){0, c->n_layer, 0, 1, 1, 0, 1, 0}; }
int slice_chunks(const ModelSlice *s) { return s->chunks > 1 ? s->chunks : 1; }
int slice_is_first(const ModelSlice *s) { return s->layer_begin == 0; }

int slice_is_last(const ModelSlice *s, const ModelConfig *c) {
    int b, e;
    slice_chunk_layers(s, slice_chunks(s) - 1, &b, &e);
    return e == c->n_layer;
}

void slice_chunk_layers(const ModelSlice *s, int v, int *begin, int *end) {
    CHECKF(v >= 0 && v < slice_chunks(s), "chunk %d of %d", v, slice_chunks(s));
    *begin = s->layer_begin + v * s->chunk_stride;
    *end = s->layer_end + v * s->chunk_stride;
}

typedef struct {
    ParamTable *t;
    int cap;
    const ModelConfig *c;
    const ModelSlice *s;
    Err *err;
} Builder;

// Adds tensor d of part `part` (block `layer`, or -1) under `name`.
static int add(Builder *bd, const char *name, Part part, int desc, const TensorDesc *d, int layer) {
    ParamTable *t = bd->t;
    const ModelConfig *c = bd->c;
    if (t->n == bd->cap) {
        bd->cap = bd->cap ? 2 * bd->cap : 64;
        ParamInfo *np = realloc(t->p, (size_t)bd->cap * sizeof *np);
        if (!np) return err_set(bd->err, ERR_RUN, "out of memory building the parameter table");
        t->p = np;
    }
    ParamInfo *p = &t->p[t->n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->role = d->role;
    p->part = part;
    p->desc = desc;
    p->ndim = d->ndim;
    p->numel = 1;
    p->shard_dim = bd->s->tp_size > 1 ? d->shard_dim : -1;
    for (int k = 0; k < d->ndim; k++) {
        int64_t n = arch_dim(c, d->dim[k], 1);
        p->shape[k] = p->lshape[k] = n;
        if (k == p->shard_dim) {
            int tp = bd->s->tp_size;
            if (n % tp)
                return err_set(bd->err, ERR_USAGE, "tensor-parallel size %d does not divide dimension %d (%lld) of %s",
                               tp, k, (long long)n, name);
            p->lshape[k] = n / tp;
            p->shard_off = p->lshape[k] * bd->s->tp_rank;
        }
        p->numel *= (size_t)p->lshape[k];
    }
    // Vocabulary rows past V (the padding) start at zero, so a model's
    // values do not depend on the padding.
    p->init_rows = d->dim[0] == DIM_VP ? c->vocab : p->shape[0];
    p->vocab_rows = d->dim[0] == DIM_VP;
    size_t pm = bd->s->pad_multiple > 1 ? (size_t)bd->s->pad_multiple : 1;
    if (t->n && (t->p[t->n - 1].layer != layer || t->p[t->n - 1].part != part))
        t->total = (t->total + pm - 1) / pm * pm;   // a new segment
    p->offset = t->total;
    p->layer = layer;
    p->flags = d->flags;
    p->init = d->init;
    p->std = d->std == STD_RESID ? 0.02f / sqrtf(2.0f * c->n_layer) : 0.02f;
    t->total += p->numel;
    t->n++;
    return 0;
}

int ptable_build(ParamTable *t, const ModelConfig *c, const ModelSlice *s, Err *err) {
    memset(t, 0, sizeof *t);
    Builder bd = {t, 0, c, s, err};
    const Arch *a = arch_of(c);
    int first = slice_is_first(s), last = slice_is_last(s, c), rc = 0;
    // A tied token embedding is the output head too: the last stage of a
    // pipeline holds a copy of the whole embeddings part, laid out as the
    // first stage's so that both split into the same ZeRO pieces and their
    // gradients can be summed piece by piece (parallel/pipe).
    for (int i = 0; i < a->n[PART_EMBED] && !rc; i++) {
        const TensorDesc *d = &a->part[PART_EMBED][i];
        if (first || (last && a->tied_head)) rc = add(&bd, d->name, PART_EMBED, i, d, -1);
    }
    for (int v = 0; v < slice_chunks(s) && !rc; v++) {   // the blocks, chunk by chunk
        int lb, le;
        slice_chunk_layers(s, v, &lb, &le);
        for (int l = lb; l < le && !rc; l++)
            for (int i = 0; i < a->n[PART_BLOCK] && !rc; i++) {
                const TensorDesc *d = &a->part[PART_BLOCK][i];
                char nm[64];
                int k = snprintf(nm, sizeof nm, a->block_prefix, l);
                snprintf(nm + k, sizeof nm - (size_t)k, "%s", d->name);
                rc = add(&bd, nm, PART_BLOCK, i, d, l);
            }
    }
    for (int i = 0; last && i < a->n[PART_FINAL] && !rc; i++)
        rc = add(&bd, a->part[PART_FINAL][i].name, PART_FINAL, i, &a->part[PART_FINAL][i], -1);
    if (rc) { ptable_free(t); return -1; }
    size_t pm = s->pad_multiple > 1 ? (size_t)s->pad_multiple : 1;
    t->total = (t->total + pm - 1) / pm * pm;
    if (!(t->seg = calloc((size_t)t->n + 1, sizeof *t->seg))) {
        ptable_free(t);
        return err_set(err, ERR_RUN, "out of memory building the parameter table");
    }
    for (int i = 0; i < t->n; i++) {
        if (i == 0 || t->p[i].layer != t->p[i - 1].layer || t->p[i].part != t->p[i - 1].part) {
            if (t->nseg) t->seg[t->nseg - 1].hi = t->p[i].offset;
            t->seg[t->nseg++] = (ParamSeg){t->p[i].offset, 0, i, 0, t->p[i].layer, t->p[i].part};
        }
        t->seg[t->nseg - 1].n++;
    }
    if (t->nseg) t->seg[t->nseg - 1].hi = t->total;
    return 0;
}

const ParamInfo *ptable_role(const ParamTable *t, Role role) {
    for (int i = 0; i < t->n; i++)
        if (t->p[i].layer < 0 && t->p[i].role == role) return &t->p[i];
    return NULL;
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
    // Rows past init_rows (the padding of DIM_VP, the vocabulary rows) start at zero,
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
