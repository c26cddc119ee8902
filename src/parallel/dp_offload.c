// parallel/dp_offload — the owned pieces' optimizer state on disk (dp.h's
// offload section): each segment's owned piece a unit of parallel/offload,
// streamed through its ring by the update.
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "parallel/dp_impl.h"

static const char *const kind_names[3] = {"exp_avg", "exp_avg_sq", "masters"};   // OFF_M, OFF_V, OFF_MASTER

// The first float of segment k's owned piece in the flat buffers.
static size_t piece_lo(const Dp *d, int k) { return d->t->seg[k].lo + (d->zero ? (size_t)d->rank * d->sk[k] : 0); }


size_t dp_offload_ring_bytes(const ParamTable *t, const Layout *l) {
    if (!l->offload) return 0;
    size_t per = l->zero ? (size_t)l->dp : 1, maxn = 0;
    for (int k = 0; k < t->nseg; k++) {
        size_t n = (t->seg[k].hi - t->seg[k].lo) / per;
        if (n > maxn) maxn = n;
    }
    return offload_ring_bytes(layout_offloads_masters(l) ? 3 : 2, maxn < DP_UNIT_FLOATS ? maxn : DP_UNIT_FLOATS);
}

int dp_offload_open(Dp *d, const char *base, const char *flag, int rank, size_t unit, int keep, Err *err) {
    if (!unit) unit = DP_UNIT_FLOATS;
    CHECKF(!d->off, "the optimizer offload is already open");
    CHECKF(!d->masters || d->zero >= 3 || !d->st->params, "offloaded masters beside the stage's own fp32 parameters");
    int nu = 0;
    for (int k = 0; k < d->t->nseg; k++) {   // the pieces lie in the shard in the flat buffer's order
        CHECKF((d->zero || d->soff[k] == d->t->seg[k].lo) && d->sk[k] > 0, "segment %d is not where the buffer has it", k);
        nu += (int)((d->sk[k] + unit - 1) / unit);
    }
    d->useg = calloc((size_t)nu + 1, sizeof *d->useg);
    d->uoff = calloc((size_t)nu + 1, sizeof *d->uoff);
    d->un = calloc((size_t)nu + 1, sizeof *d->un);
    if (!d->useg || !d->uoff || !d->un) return err_set(err, ERR_RUN, "out of memory");
    for (int k = 0; k < d->t->nseg; k++)
        for (size_t at = 0; at < d->sk[k]; at += unit) {
            size_t n = d->sk[k] - at < unit ? d->sk[k] - at : unit;
            d->useg[d->nunit] = k;
            d->uoff[d->nunit] = d->soff[k] + at;
            d->un[d->nunit++] = n;
        }
    CHECK(d->nunit == nu);
    if (offload_open(&d->off, base, flag, rank, d->masters ? 3 : 2, kind_names, d->uoff, d->un, d->nunit, keep, err))
        return -1;
    return d->poff ? dp_pfile_open(d, err) : 0;
}

const Offload *dp_offload(const Dp *d) { return d->off; }
void dp_set_prefetch(Dp *d, int segments) { d->prefetch = segments; }

int dp_update_offloaded(Dp *d, AdamW *opt, float lr, const AdamWConfig *o, float grad_scale, Err *err) {
    // the 16-bit copy the update writes, where the masters are offloaded:
    // the stage's own (below ZeRO-3), or the owned shard's (ZeRO-3)
    Precision prec16 = d->st->prec;
    uint16_t *p16 = d->zero < 3 ? stage_params16(d->st, &prec16) : NULL;
    CHECKF(!(p16 || d->hshard) == !d->masters, "offloaded masters need a 16-bit copy, and only they");
    adamw_begin_step(opt);
    if (offload_pass_begin(d->off, err)) return -1;
    int rc = 0;
    // unit u is updated while u + 1 is read and u − 1 written; each is the
    // update's own range, so the elementwise kernel gives the bits of one
    // update over the whole shard
    // (after an I/O failure the rest is not updated, but the collectives
    // go on as on every other rank, which then all stop at the same step)
    for (int u = 0; u < d->nunit; u++) {
        float *b[OFFLOAD_MAX_KINDS];
        int k = d->useg[u];
        if (!rc && offload_unit(d->off, u, b, err)) rc = -1;
        // fp32's masters are the parameters' file: checked before they are updated
        if (!rc && d->poff && !d->masters && (offload_params_intact(d->off, err) || dp_pfile_check_unit(d, u, err))) rc = -1;
        if (!rc) {
            size_t in = d->uoff[u] - d->soff[k], lo = piece_lo(d, k) + in, n = d->un[u];   // in: its place in the piece
            float *params = d->masters ? b[OFF_MASTER] : d->zero >= 3 ? d->pshard + d->uoff[u] : d->st->params + lo;
            const float *g = (d->zero ? dp_piece_grads(d, k) : d->st->grads + d->t->seg[k].lo) + in;
            uint16_t *h = p16 ? p16 + lo : d->hshard ? d->hshard + d->uoff[u] : NULL;
            OptPiece op = {lo, lo + n, params, g, 0, h, prec16, b[OFF_M], b[OFF_V]};
            adamw_update_pieces(opt, d->t, &op, 1, lr, o, grad_scale);
            offload_unit_done(d->off, u);
            if (d->poff) dp_pfile_unit_written(d, u);
        }
        // stages 1, 2: once its last unit is updated every rank gets the
        // segment's piece back in place — the 16-bit copy where the masters
        // are on disk (2-byte values only copied, fp16's as well), else the
        // fp32 parameters
        if ((d->zero == 1 || d->zero == 2) && (u + 1 == d->nunit || d->useg[u + 1] != k)) {
            size_t at = d->t->seg[k].lo, mine = piece_lo(d, k);
            d->ag[k] = p16 ? comm_iallgather(d->c, p16 + mine, p16 + at, d->sk[k], DT_BF16)
                           : comm_iallgather(d->c, d->st->params + mine, d->st->params + at, d->sk[k], DT_F32);
        }
    }
    if (offload_pass_end(d->off, rc ? NULL : err)) rc = -1;
    // the next update's first units are read during the next forward and backward
    if (!rc && offload_prefetch(d->off, err)) rc = -1;
    if (p16) stage_params16_current(d->st);
    else stage_params_changed(d->st);
    int sk = dp_skip(d, rc ? NULL : err);   // ZeRO-3's next gather starts on every rank alike
    return rc || sk ? -1 : 0;
}

int dp_fill_offloaded(Dp *d, int kind, DpFill fill, void *ctx, Err *err) {
    CHECKF(d->off, "the optimizer offload is not open (dp_offload_open)");
    Precision prec16 = d->st->prec;
    uint16_t *p16 = kind == OFF_MASTER && d->zero < 3 ? stage_params16(d->st, &prec16) : NULL;
    uint16_t *h16 = kind == OFF_MASTER ? d->hshard : NULL;   // ZeRO-3: the owned piece's 16-bit copy
    int rc = 0, u = 0;
    for (int k = 0; k < d->t->nseg && rc == 0; k++) {
        const ParamSeg *s = &d->t->seg[k];
        size_t n = s->hi - s->lo;
        float *buf = dp_scratch(d, k), *mine = buf + (piece_lo(d, k) - s->lo);
        memset(buf, 0, n * sizeof(float));
        rc = fill(ctx, k, buf);
        for (; !rc && u < d->nunit && d->useg[u] == k; u++)
            if (offload_write(d->off, kind, u, mine + (d->uoff[u] - d->soff[k]), err)) rc = -1;
        if (!rc && p16) half_pack(prec16, p16 + s->lo, buf, n);   // the whole segment's 16-bit copy, as the update writes it
        if (!rc && h16) half_pack(prec16, h16 + d->soff[k], mine, d->sk[k]);
        if (!rc && h16 && d->poff) dp_pfile_seg_written(d, k);
        memset(buf, 0, n * sizeof(float));
    }
    if (p16) stage_params16_current(d->st);
    return rc;
}

int dp_state(Dp *d, const AdamW *opt, DpState *s, Err *err) {
    *s = (DpState){opt->m, opt->v, NULL};
    if (!d->off) return 0;
    if (!(s->m = offload_map(d->off, OFF_M, err)) || !(s->v = offload_map(d->off, OFF_V, err))) return -1;
    if (d->masters && !(s->masters = offload_map(d->off, OFF_MASTER, err))) return -1;
    return 0;
}

void dp_state_release(Dp *d) {
    if (d->off) offload_unmap(d->off);
    if (d->poff) dp_pfile_drop_all(d);   // the pages a checkpoint's read of the shard brought in
}
