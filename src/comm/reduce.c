#include <math.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/half.h"

size_t comm_dtype_size(CommDtype t) {
    static const size_t s[DT_COUNT] = {4, 2, 2, 4, 8, 1, 8};
    return s[t];
}

const char *comm_dtype_name(CommDtype t) {
    static const char *n[DT_COUNT] = {"f32", "bf16", "f16", "i32", "i64", "u8", "f64"};
    return t >= 0 && t < DT_COUNT ? n[t] : "?";
}

void comm_reduce(void *out, const void *const *src, int n, size_t count, CommDtype t, CommRedOp op) {
    switch (t) {
    case DT_F32: {
        float *o = out;
        const float *s0 = src[0];
        if (o != s0) memcpy(o, s0, count * 4);
        for (int r = 1; r < n; r++) {
            const float *s = src[r];
            if (op == RED_SUM) for (size_t i = 0; i < count; i++) o[i] += s[i];
            else for (size_t i = 0; i < count; i++) o[i] = s[i] > o[i] || isnan(s[i]) ? s[i] : o[i];
        }
        break;
    }
    case DT_F64: {
        double *o = out;
        const double *s0 = src[0];
        if (o != s0) memcpy(o, s0, count * 8);
        for (int r = 1; r < n; r++) {
            const double *s = src[r];
            if (op == RED_SUM) for (size_t i = 0; i < count; i++) o[i] += s[i];
            else for (size_t i = 0; i < count; i++) o[i] = s[i] > o[i] || isnan(s[i]) ? s[i] : o[i];
        }
        break;
    }
    case DT_BF16:
    case DT_F16: {
        uint16_t *o = out;
        float (*to)(uint16_t) = t == DT_BF16 ? bf16_to_f32 : f16_to_f32;
        uint16_t (*from)(float) = t == DT_BF16 ? f32_to_bf16 : f32_to_f16;
        for (size_t i = 0; i < count; i++) {
            float acc = to(((const uint16_t *)src[0])[i]);
            for (int r = 1; r < n; r++) {
                float v = to(((const uint16_t *)src[r])[i]);
                acc = op == RED_SUM ? acc + v : (v > acc || isnan(v) ? v : acc);
            }
            o[i] = from(acc);
        }
        break;
    }
    case DT_I32: {
        int32_t *o = out;
        const int32_t *s0 = src[0];
        if (o != s0) memcpy(o, s0, count * 4);
        for (int r = 1; r < n; r++) {
            const int32_t *s = src[r];
            if (op == RED_SUM) for (size_t i = 0; i < count; i++) o[i] = (int32_t)((uint32_t)o[i] + (uint32_t)s[i]);
            else for (size_t i = 0; i < count; i++) o[i] = s[i] > o[i] ? s[i] : o[i];
        }
        break;
    }
    case DT_I64: {
        int64_t *o = out;
        const int64_t *s0 = src[0];
        if (o != s0) memcpy(o, s0, count * 8);
        for (int r = 1; r < n; r++) {
            const int64_t *s = src[r];
            if (op == RED_SUM) for (size_t i = 0; i < count; i++) o[i] = (int64_t)((uint64_t)o[i] + (uint64_t)s[i]);
            else for (size_t i = 0; i < count; i++) o[i] = s[i] > o[i] ? s[i] : o[i];
        }
        break;
    }
    case DT_U8: {
        uint8_t *o = out;
        const uint8_t *s0 = src[0];
        if (o != s0) memcpy(o, s0, count);
        for (int r = 1; r < n; r++) {
            const uint8_t *s = src[r];
            if (op == RED_SUM) for (size_t i = 0; i < count; i++) o[i] = (uint8_t)(o[i] + s[i]);
            else for (size_t i = 0; i < count; i++) o[i] = s[i] > o[i] ? s[i] : o[i];
        }
        break;
    }
    default: CHECKF(0, "bad dtype %d", t);
    }
}
