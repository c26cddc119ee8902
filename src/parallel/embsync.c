#include "parallel/embsync.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/timer.h"

struct EmbSync {
    Comm *c;
    int n, C, v0, Vl;
    size_t rows;                 // B·T per rank
    size_t wte, wpe;             // flat offsets (wpe: SIZE_MAX when absent)
    int T;
    int sep;                     // document masking's separator (positions count from it), or -1
    int32_t *tok, *all_tok;      // rows, n·rows
    float *rows_out, *all_rows;  // rows×C, n·rows×C
    CommRequest *req_tok, *req_rows;
    int pending;                 // rows gathered or on their way, not yet applied
    size_t bytes;
};

int embsync_init(EmbSync **out, Comm *c, const Stage *st, Err *err) {
    *out = NULL;
    const ParamInfo *pe = ptable_role(&st->table, ROLE_TOK_EMB), *pp = ptable_role(&st->table, ROLE_POS_EMB);
    CHECKF(pe, "embsync: the stage holds no token embedding");
    EmbSync *e = calloc(1, sizeof *e);
    if (!e) return err_set(err, ERR_RUN, "out of memory");
    e->c = c;
    e->n = comm_size(c);
    e->C = st->cfg.d_model;
    e->Vl = (int)pe->lshape[0];
    e->v0 = (int)(pe->shard_dim == 0 ? pe->shard_off : 0);
    e->wte = pe->offset;
    e->wpe = pp ? pp->offset : (size_t)-1;
    e->T = st->T;
    e->sep = stage_doc_sep(st);
    e->rows = (size_t)st->B * st->T;
    size_t n = (size_t)e->n;
    e->bytes = embsync_size(e->n, e->rows, e->C);
    e->tok = mem_alloc(MEM_COMM, e->rows * sizeof(int32_t));
    e->all_tok = mem_alloc(MEM_COMM, n * e->rows * sizeof(int32_t));
    e->rows_out = mem_alloc(MEM_COMM, e->rows * (size_t)e->C * sizeof(float));
    e->all_rows = mem_alloc(MEM_COMM, n * e->rows * (size_t)e->C * sizeof(float));
    if (!e->tok || !e->all_tok || !e->rows_out || !e->all_rows) {
        embsync_free(e);
        return err_set(err, ERR_RUN, "out of memory for the embedding-gradient rows");
    }
    *out = e;
    return 0;
}

void embsync_free(EmbSync *e) {
    if (!e) return;
    if (e->req_tok) comm_wait(e->req_tok, NULL);
    if (e->req_rows) comm_wait(e->req_rows, NULL);
    mem_free(e->tok);
    mem_free(e->all_tok);
    mem_free(e->rows_out);
    mem_free(e->all_rows);
    free(e);
}

size_t embsync_bytes(const EmbSync *e) { return e->bytes; }

size_t embsync_size(int ranks, size_t rows, int C) {
    return ((size_t)ranks + 1) * rows * (sizeof(int32_t) + (size_t)C * sizeof(float));
}

void embsync_hook(void *ctx, const int *tokens, const float *dres, int B, int T) {
    EmbSync *e = ctx;
    CHECKF((size_t)B * T == e->rows && T == e->T, "embsync: micro-batch %d×%d, expected %zu rows", B, T, e->rows);
    CHECKF(!e->pending, "embsync: the previous rows were not applied");
    e->pending = 1;
    for (size_t i = 0; i < e->rows; i++) e->tok[i] = tokens[i];
    memcpy(e->rows_out, dres, e->rows * (size_t)e->C * sizeof(float));
    e->req_tok = comm_iallgather(e->c, e->tok, e->all_tok, e->rows, DT_I32);
    e->req_rows = comm_iallgather(e->c, e->rows_out, e->all_rows, e->rows * (size_t)e->C, DT_F32);
}

// Adds src (C floats, the row at flat offset row) to the part of it inside
// [lo, hi).
static void add_row(float *g, size_t lo, size_t hi, size_t row, const float *src, int C) {
    size_t a = row > lo ? row : lo, b = row + (size_t)C < hi ? row + (size_t)C : hi;
    for (size_t i = a; i < b; i++) g[i - lo] += src[i - row];
}

int embsync_apply(EmbSync *e, float *g, size_t lo, size_t hi, double *waited, Err *err) {
    if (!e->pending) return 0;
    e->pending = 0;
    double t0 = timer_now();
    Err e1, e2;
    int bad = e->req_tok && comm_wait(e->req_tok, &e1);
    int bad2 = e->req_rows && comm_wait(e->req_rows, &e2);
    e->req_tok = e->req_rows = NULL;
    if (waited) *waited += timer_now() - t0;
    if (bad || bad2) {
        if (err) *err = bad ? e1 : e2;
        return -1;
    }
    size_t C = (size_t)e->C;
    // rank by rank, row by row: the order embedding_backward adds in
    for (int r = 0; r < e->n; r++) {
        const int32_t *tok = e->all_tok + (size_t)r * e->rows;
        const float *rows = e->all_rows + (size_t)r * e->rows * C;
        size_t doc = 0;   // the row's document's first position (model/doc's, from the same tokens)
        for (size_t i = 0; i < e->rows; i++) {
            int t = tok[i] - e->v0;
            if (i % (size_t)e->T == 0 || (e->sep >= 0 && tok[i] == e->sep)) doc = i;
            size_t pos = e->sep >= 0 ? i - doc : i % (size_t)e->T;
            if (t >= 0 && t < e->Vl) add_row(g, lo, hi, e->wte + (size_t)t * C, rows + i * C, e->C);
            if (e->wpe != (size_t)-1) add_row(g, lo, hi, e->wpe + pos * C, rows + i * C, e->C);
        }
    }
    return 0;
}
