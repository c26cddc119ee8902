#include "optim/scaler.h"

#include <math.h>

void scaler_init(LossScaler *s, const ScalerConfig *c) {
    *s = (LossScaler){.cfg = *c, .scale = c->init, .good = 0, .left = c->hysteresis};
}

int scaler_update(LossScaler *s, int overflow, int step, Err *err) {
    if (!overflow) {
        if (++s->good == s->cfg.window) {
            s->good = 0;
            s->left = s->cfg.hysteresis;
            s->scale *= 2;
        }
        return 0;
    }
    s->good = 0;
    if (--s->left > 0) return 0;
    s->left = 0;
    double was = s->scale;
    s->scale *= 0.5;
    if (s->scale < s->cfg.min)
        return err_set(err, ERR_RUN,
                       "fp16 gradients overflowed at step %d with the loss scale at %g: halved to %g, below "
                       "--loss-scale-min %g; the model diverges or fp16 cannot hold it (try a lower --lr, or "
                       "--precision bf16)", step, was, s->scale, s->cfg.min);
    return 0;
}

char *scaler_state_json(const LossScaler *s) {
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "scale"); jb_num(&b, s->scale);
    jb_key(&b, "good"); jb_int(&b, s->good);
    jb_key(&b, "left"); jb_int(&b, s->left);
    jb_obj_end(&b);
    return b.s;
}

int scaler_state_read(LossScaler *s, const Json *j, const char *where, Err *err) {
    int64_t good, left;
    const Json *sc = json_get(j, "scale");
    if (!sc || sc->type != JSON_NUM || !(sc->num > 0) || !isfinite(sc->num) || json_int64(json_get(j, "good"), &good) ||
        json_int64(json_get(j, "left"), &left) || good < 0 || good > 1 << 30 || left < 0 || left > 1 << 30)
        return err_set(err, ERR_USAGE, "%s: field 'loss_scaler' is not {scale > 0, good ≥ 0, left ≥ 0}", where);
    s->scale = sc->num;
    s->good = (int)good;
    s->left = (int)left;
    return 0;
}
