// parallel/dp_offload — the owned pieces' optimizer state on disk (dp.h's
// offload section): each segment's owned piece a unit of parallel/offload,
// streamed through its ring by the update.
#include <string.h>

#include "core/half.h"
#include "parallel/dp_impl.h"

static const char *const kind_names[3] = {"exp_avg", "exp_avg_sq", "masters"};   // OFF_M, OFF_V, OFF_MASTER

// The first float of segment k's owned piece in the flat buffers.
static size_t unit_lo(const Dp *d, int k) { return d->t->seg[k].lo + (d->zero ? (size_t)d->rank * d->sk[k] : 0); }

size_t dp_offload_ring_bytes(const ParamTable *t, const Layout *l) {
    if (l->offload != OFFLOAD_OPTIMIZER) return 0;
    size_t per = l->zero ? (size_t)l->dp : 1, maxn = 0;
    for (int k = 0; k < t->nseg; k++) {
        size_t n = (t->seg[k].hi - t->seg[k].lo) / per;
        if (n > maxn) maxn = n;
    }
    return offload_ring_bytes(layout_offloads_masters(l) ? 3 : 2, maxn);
}

int dp_offload_open(Dp *d, const char *base, const char *flag, int rank, int keep, Err *err) {
    CHECKF(!d->off, "the optimizer offload is already open");
    // a stage of 16-bit weights alone (STAGE_PARAMS16_ONLY): the masters go too
    d->masters = !d->st->params && d->zero < 3;
    for (int k = 0; k < d->t->nseg; k++)   // the units lie in the shard as in the flat buffer's order
        CHECKF(d->zero || d->soff[k] == d->t->seg[k].lo, "segment %d is not where the buffer has it", k);
    return offload_open(&d->off, base, flag, rank, d->masters ? 3 : 2, kind_names, d->soff, d->sk, d->t->nseg, keep,
                        err);
}

const Offload *dp_offload(const Dp *d) { return d->off; }

int dp_update_offloaded(Dp *d, AdamW *opt, float lr, const AdamWConfig *o, float grad_scale, Err *err) {
    Precision prec16 = PREC_FP32;
    uint16_t *p16 = stage_params16(d->st, &prec16);   // the stage's own copy: only where the masters are offloaded
    CHECKF(!p16 == !d->masters, "offloaded masters need the stage's own 16-bit copy, and only they");
    adamw_begin_step(opt);
    if (offload_pass_begin(d->off, err)) return -1;
    int rc = 0;
    // segment k is updated while k + 1 is read and k − 1 written; each
    // piece is the update's own range, so the elementwise kernel gives the
    // bits of one update over the whole shard
    for (int k = 0; k < d->t->nseg; k++) {
        float *b[OFFLOAD_MAX_KINDS];
        if (offload_unit(d->off, k, b, err)) { rc = -1; break; }
        size_t lo = unit_lo(d, k), n = d->sk[k];
        float *params = d->masters ? b[OFF_MASTER] : d->zero >= 3 ? d->pshard + d->soff[k] : d->st->params + lo;
        const float *g = d->zero ? dp_piece_grads(d, k) : d->st->grads + lo;
        OptPiece op = {lo, lo + n, params, g, 0, p16 ? p16 + lo : NULL, prec16, b[OFF_M], b[OFF_V]};
        adamw_update_pieces(opt, d->t, &op, 1, lr, o, grad_scale);
        offload_unit_done(d->off, k);
        // stages 1, 2: every rank gets the updated piece back in place — the
        // 16-bit copy where the masters are on disk (2-byte values only
        // copied, fp16's as well), else the fp32 parameters
        if (d->zero == 1 || d->zero == 2) {
            size_t at = d->t->seg[k].lo;
            d->ag[k] = p16 ? comm_iallgather(d->c, p16 + lo, p16 + at, n, DT_BF16)
                           : comm_iallgather(d->c, params, d->st->params + at, n, DT_F32);
        }
    }
    if (offload_pass_end(d->off, err)) rc = -1;
    if (p16) stage_params16_current(d->st);
    else stage_params_changed(d->st);
    return rc ? -1 : dp_skip(d, err);
}

int dp_fill_offloaded(Dp *d, int kind, DpFill fill, void *ctx, Err *err) {
    Precision prec16 = PREC_FP32;
    uint16_t *p16 = kind == OFF_MASTER ? stage_params16(d->st, &prec16) : NULL;
    int rc = 0;
    for (int k = 0; k < d->t->nseg && rc == 0; k++) {
        const ParamSeg *s = &d->t->seg[k];
        size_t n = s->hi - s->lo;
        float *buf = dp_scratch(d, k);
        memset(buf, 0, n * sizeof(float));
        rc = fill(ctx, k, buf);
        if (!rc && offload_write(d->off, kind, k, buf + (unit_lo(d, k) - s->lo), err)) rc = -1;
        if (!rc && p16) half_pack(prec16, p16 + s->lo, buf, n);   // the whole segment's 16-bit copy, as the update writes it
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
}
