// model/stage_kv — incremental decoding (tessera sample): the key/value
// cache the blocks' attention reads and extends (model/arch's KvCache),
// and where the next pass starts. The passes use it through StageActs.kv.
#include <stdlib.h>

#include "core/alloc.h"
#include "model/stage_impl.h"

int stage_kv_init(Stage *s, Err *err) {
    StageActs *a = s->acts;
    CHECKF(slice_is_first(&s->slice) && s->slice.tp_size == 1 && s->B == 1 && s->chunks == 1,
           "incremental decoding runs a whole model on one rank, one sequence");
    if (a->kv) return 0;
    int L = s->cfg.n_layer, S = s->T;
    size_t kv = (size_t)a->dim.KVl, n = (size_t)L * S * kv;
    KvCache *c = calloc(1, sizeof *c);
    float *buf = c ? mem_alloc(MEM_ACTS, 2 * n * sizeof(float)) : NULL;
    if (!buf) {
        free(c);
        return err_set(err, ERR_RUN, "out of memory for the key/value cache (%zu MiB)", (2 * n * sizeof(float)) >> 20);
    }
    *c = (KvCache){.k = buf, .v = buf + n, .S = S};
    a->kv = c;
    return 0;
}

void stage_kv_reset(Stage *s) {
    if (s->acts->kv) s->acts->kv->pos = 0;
}

int stage_kv_pos(const Stage *s) { return s->acts->kv ? s->acts->kv->pos : 0; }

void stage_kv_free(StageActs *a) {
    if (a->kv) mem_free(a->kv->k);
    free(a->kv);
}
