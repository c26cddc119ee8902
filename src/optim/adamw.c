#include "optim/adamw.h"

#include <stdint.h>

#include <math.h>
#include <stdlib.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/alloc.h"
#include "kernels/adamw.h"

const char *const adamw_sections[2] = {"exp_avg/", "exp_avg_sq/"};

char *adamw_state_json(const AdamW *a) {
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "optimizer"); jb_bool(&b, 1);
    jb_key(&b, "adam_t"); jb_int(&b, a->t);
    jb_obj_end(&b);
    return b.s;
}

int adamw_state_read(AdamW *a, const Json *meta, const char *dir, Err *err) {
    if (json_int64(json_get(meta, "adam_t"), &a->t) || a->t < 0 || a->t > INT32_MAX)
        return err_set(err, ERR_USAGE, "%s/meta.json: field 'adam_t' is missing or not an integer in [0, 2^31)", dir);
    return 0;
}

int adamw_init(AdamW *a, size_t n, Err *err) {
    a->n = n;
    a->t = 0;
    a->m = mem_alloc(MEM_OPTIM, n * sizeof(float));
    a->v = mem_alloc(MEM_OPTIM, n * sizeof(float));
    if (!a->m || !a->v) {
        adamw_free(a);
        return err_set(err, ERR_RUN, "out of memory allocating optimizer state (%zu floats)", 2 * n);
    }
    return 0;
}

void adamw_free(AdamW *a) {
    mem_free(a->m);
    mem_free(a->v);
    a->m = a->v = NULL;
}

void adamw_begin_step(AdamW *a) { a->t++; }

void adamw_update_pieces(const AdamW *a, const ParamTable *t, const OptPiece *pc, int npc, float lr,
                         const AdamWConfig *o, float grad_scale) {
    float beta1 = (float)o->beta1, beta2 = (float)o->beta2;
    AdamWArgs args = {
        .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = (float)o->eps,
        .bc1 = 1.0f - powf(beta1, (float)a->t), .bc2 = 1.0f - powf(beta2, (float)a->t),
        .grad_scale = grad_scale,
    };
    // Runs of neighbouring tensors with the same decay setting go in one
    // call, clipped to each piece (padding between segments included: its
    // gradients are zero, so it stays zero).
    for (int q = 0; q < npc; q++) {
        const OptPiece *c = &pc[q];
        int k = 0;
        while (k < t->n) {
            int decay = !(t->p[k].flags & PARAM_NO_DECAY), j = k + 1;
            while (j < t->n && (!(t->p[j].flags & PARAM_NO_DECAY)) == decay) j++;
            size_t r0 = t->p[k].offset, r1 = j < t->n ? t->p[j].offset : t->total;
            if (r0 < c->lo) r0 = c->lo;
            if (r1 > c->hi) r1 = c->hi;
            if (r0 < r1) {
                size_t i = r0 - c->lo;
                args.weight_decay = decay ? (float)o->weight_decay : 0.0f;
                args.prec16 = c->prec16;
                float *m = c->m ? c->m : a->m + c->opt_off, *v = c->v ? c->v : a->v + c->opt_off;
                adamw_update(c->params + i, c->grads + i, m + i, v + i,
                             c->params16 ? c->params16 + i : NULL, r1 - r0, &args);
            }
            k = j;
        }
    }
}

void adamw_step(AdamW *a, const ParamTable *t, float *params, const float *grads, float lr, const AdamWConfig *o,
                float grad_scale) {
    OptPiece all = {0, t->total, params, grads, 0, NULL, PREC_FP32, NULL, NULL};
    adamw_begin_step(a);
    adamw_update_pieces(a, t, &all, 1, lr, o, grad_scale);
}

// The squares of g[0, n) summed in float64 (each square exact). On AVX-512
// eight sums of 8 lanes, each fed every eighth vector, so that as many
// additions are in flight as the loads allow: the pass runs at memory speed
// (28 GB/s on 2 threads of a Xeon, where one chain of sums ran at 19).
static double block_squares(const float *g, size_t n) {
    size_t i = 0;
    double s = 0;
#if defined(__AVX512F__)
    __m512d acc[8];
    for (int j = 0; j < 8; j++) acc[j] = _mm512_setzero_pd();
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 8; j++) {
            __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(g + i + 8 * j));
            acc[j] = _mm512_fmadd_pd(x, x, acc[j]);
        }
    for (int j = 1; j < 8; j++) acc[0] = _mm512_add_pd(acc[0], acc[j]);
    s = _mm512_reduce_add_pd(acc[0]);
#endif
    #pragma omp simd reduction(+:s)
    for (size_t k = i; k < n; k++) s += (double)g[k] * g[k];
    return s;
}

// By blocks of 64K floats summed in block order: the same sum for every
// thread count.
double sum_squares(const float *g, size_t n) {
    enum { BLK = 1 << 16 };
    size_t nb = (n + BLK - 1) / BLK;
    if (nb <= 1) return n ? block_squares(g, n) : 0.0;   // one block: no threads woken (the same sum)
    double *part = malloc((nb + 1) * sizeof *part);
    CHECKF(part, "out of memory");
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * BLK, hi = lo + BLK < n ? lo + BLK : n;
        part[b] = block_squares(g + lo, hi - lo);
    }
    double s = 0;
    for (size_t b = 0; b < nb; b++) s += part[b];
    free(part);
    return s;
}

static double squares(const float *g, size_t n, size_t *nread) {
    *nread += n;
    return sum_squares(g, n);
}

double sum_squares_taken(const ParamTable *t, const float *g, size_t lo, size_t hi, const double *tsq, size_t *nread) {
    double s = 0;
    size_t at = lo;
    for (int i = 0; tsq && i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        if (tsq[i] < 0 || p->offset < at || p->offset + p->numel > hi) continue;
        if (p->offset > at) s += squares(g + (at - lo), p->offset - at, nread);
        s += tsq[i];
        at = p->offset + p->numel;
    }
    return at < hi ? s + squares(g + (at - lo), hi - at, nread) : s;
}
