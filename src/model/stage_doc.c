// model/stage_doc — document masking on the stage (model/doc): the
// separator, and each pass's document starts and positions, computed from
// the micro-batch's tokens, which every stage of a pipeline reads, so every
// stage and every tensor-parallel rank (sequence parallel ones too: from
// the whole rows) has them. A backward pass computes them again from the
// same tokens (other slots' passes may run between a slot's forward and
// its backward).
#include <stdlib.h>

#include "model/doc.h"
#include "model/stage_impl.h"

int stage_set_doc_mask(Stage *s, int sep, Err *err) {
    StageActs *a = s->acts;
    stage_doc_free(a);
    a->doc_sep = sep;
    if (sep < 0) return 0;
    size_t n = (size_t)s->B * s->T;
    a->doc_start = malloc(n * sizeof *a->doc_start);
    a->doc_pos = malloc(n * sizeof *a->doc_pos);
    if (!a->doc_start || !a->doc_pos) {
        stage_doc_free(a);
        return err_set(err, ERR_RUN, "out of memory for document masking");
    }
    return 0;
}

int stage_doc_sep(const Stage *s) { return s->acts->doc_sep; }

void stage_doc_pass(StageActs *a, const int *tokens, int B, int T) {
    if (a->doc_sep < 0) return;
    KvCache *kv = a->kv;
    if (!kv) {
        doc_bounds(tokens, B, T, a->doc_sep, a->doc_start, a->doc_pos);
        return;
    }
    if (kv->pos == 0) kv->doc0 = 0;   // a pass from position 0 is a whole sequence
    for (int t = 0; t < T; t++) {
        if (tokens[t] == a->doc_sep) kv->doc0 = kv->pos + t;
        a->doc_start[t] = kv->doc0;
        a->doc_pos[t] = kv->pos + t - kv->doc0;
    }
}

void stage_doc_free(StageActs *a) {
    free(a->doc_start);
    free(a->doc_pos);
    a->doc_start = a->doc_pos = NULL;
    a->doc_sep = -1;
}
