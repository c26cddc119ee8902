// model/stage_head — the end of the model on the last stage: the arch's
// final part (its norm), the output head (its own weight, or the token
// embedding when tied) and the loss, vocabulary-parallel over TP; the
// head's and the final norm's backward; the logits of one position.
#include <stddef.h>
#include <string.h>

#include "kernels/matmul.h"
#include "model/stage_impl.h"
#include "model/tp.h"

// The output head runs over at most this many logits at once (rows × Vl,
// 256 MiB), so the (B·T, Vl) logits matrix never exists whole. Fewer,
// longer chunks stream the head's weight and its gradient fewer times:
// gpt2-124m at B=8 T=256 under bf16 runs the head's products in 2 chunks of
// 1,024 rows in 268-270 ms a step against 338-341 in 7 of 293 (64 MiB).
enum { HEAD_CHUNK_FLOATS = 64 << 20 };

int stage_head_rows(int Vl, int N) {
    int rows = (int)(HEAD_CHUNK_FLOATS / (size_t)Vl);
    if (rows < 64) rows = 64;
    return rows < N ? rows : N;
}

// The final part's tensors in its segment's buffer.
static void final_tensors(const Stage *s, const float *buf, float **w) {
    const StageActs *a = s->acts;
    for (int k = 0; k < a->arch->n[PART_FINAL]; k++) w[k] = stage_at(s, buf, a->seg_fin, a->off_fin[k]);
}

double stage_head_forward(Stage *s, Slot *sl, const LocalDims *d, int first, const float *pe, const int *targets,
                          float dscale) {
    StageActs *a = s->acts;
    const Arch *ar = a->arch;
    int N = d->N, C = d->C, T = d->T;
    int se = a->seg_emb, sf = a->seg_fin, nl = a->cl, tied = ar->tied_head;
    const int *bseg = a->blk_seg + sl->chunk * a->cl;   // the chunk's blocks' segments
    float *w[ARCH_MAX_TENSORS], *g[ARCH_MAX_TENSORS];

    // backward starts with the last block: fetch it during the head
    const float *pf = stage_seg_params(s, sf, dscale != 0.0f && nl ? bseg[nl - 1] : -1);
    if (tied && !pe) pe = stage_seg_params(s, se, -1);
    final_tensors(s, pf, w);
    BlockRun fr = stage_run(s, d, sl, -1, sl->fin, w, NULL);
    ar->final_forward(&fr);
    if (a->kv) a->kv->pos += T;   // the pass's positions are cached
    if (!targets) {
        if (tied) stage_seg_params_done(s, se);
        stage_seg_params_done(s, sf);
        return 0.0;
    }
    int sh = a->seg_head;
    const float *head = stage_at(s, tied ? pe : pf, sh, a->off_head);
    float *dhead = dscale != 0.0f ? stage_at(s, stage_seg_grads(s, sh), sh, a->off_head) : NULL;
    if (dhead && !tied && a->gfresh[sf]) {   // an untied head: its first chunk's product writes its gradient
        final_tensors(s, stage_seg_grads(s, sf), g);
        stage_grads_fresh(s, sf, PART_FINAL, g);
    }
    if (dhead && tied && a->gfresh[se]) {   // a tied one: the token embedding's, before the lookups' rows are added
        a->gfresh[se] = 0;
        matmul_grad_fresh(dhead);
    }
    sl->rows = first && dscale != 0.0f && stage_take_rows(s);
    int V = s->cfg.vocab, Vl = d->Vl;
    const float *lnf = sl->fin[0];
    // The head in chunks of rows: logits, loss and logits gradient, then the
    // gradient into the final norm's output and the head, chunk by chunk.
    // The chunks are as even as the logits buffer allows (2048 rows in 7
    // chunks of 293 or fewer, not 6 of 333 and a GEMM of 50 rows).
    // On the bf16 units the logits' gradient is written in bf16, each row in the
    // first half of its own (half the bytes written and read twice, the
    // products' operands as they would round the floats).
    int nchunk = (N + a->head_rows - 1) / a->head_rows, per = (N + nchunk - 1) / nchunk;
    int g16 = dscale != 0.0f && matmul_grad16();
    // every chunk, every micro-batch of a step: the same weight (the step's micro-batches: stage_microbatch)
    matmul_hold(head, stage16_version(s), dscale != 0.0f && a->mb_count > 0 ? nchunk * a->mb_count : 0);
    // a tied head beside its lookup: the lookup's rows join its gradient every micro-batch, after it (not queued)
    int here = tied && first, defer = here ? matmul_defer(-1) : -1;
    for (int r0 = 0; r0 < N; r0 += per) {
        int nr = N - r0 < per ? N - r0 : per;
        const float *x = lnf + (size_t)r0 * C;
        linear_forward(a->logits, x, head, NULL, nr, C, Vl);
        tp_crossentropy(a->tp, a->logits, sl->losses + r0, targets + r0, nr, V, Vl, d->v0, dscale, g16);
        float *dx = a->tmp + (size_t)r0 * C;
        if (dhead && r0 + nr >= N) stage_sumsq_head(s, dhead);   // its last product of the micro-batch
        if (g16) linear_backward16(dx, dhead, (const uint16_t *)a->logits, 2 * Vl, x, head, nr, C, Vl, 0);
        else if (dscale != 0.0f) linear_backward(dx, dhead, NULL, a->logits, x, head, nr, C, Vl, 0);
    }
    matmul_release();
    if (here) matmul_defer(defer);
    if (tied) stage_seg_params_done(s, se);
    // a tied head on a pipeline's last stage, or a deferred lookup: the
    // embeddings' gradient here is complete
    if (dscale != 0.0f && tied && se >= 0 && (!first || sl->rows)) stage_seg_grads_done(s, se);
    double sum = 0.0;
    for (int n = 0; n < N; n++) sum += sl->losses[n];
    if (dscale != 0.0f) {
        final_tensors(s, stage_seg_grads(s, sf), g);
        memset(sl->dres, 0, (size_t)d->Ns * C * sizeof(float));
        fr.g = g;
        ar->final_backward(&fr);
        stage16_round_grad(a, sl, d);
        stage_seg_grads_done(s, sf);
    }
    stage_seg_params_done(s, sf);
    return sum;
}

void stage_logits(Stage *s, int slot, int B, int T, int pos, float *logits) {
    int prev = matmul_set_bf16(s->acts->prec == PREC_BF16);
    StageActs *a = s->acts;
    Slot *sl = stage_slot(s, slot);
    CHECK(stage_chunk_last(s, sl) && pos >= 0 && pos < T);
    int C = s->cfg.d_model, sh = a->seg_head;
    const float *head = stage_at(s, stage_seg_params(s, sh, -1), sh, a->off_head);
    for (int b = 0; b < B; b++)
        linear_forward(logits + (size_t)b * a->dim.Vl, sl->fin[0] + ((size_t)b * T + pos) * C, head, NULL, 1, C,
                       a->dim.Vl);
    stage_seg_params_done(s, sh);
    matmul_unbind16(0);
    matmul_set_bf16(prev);
}
