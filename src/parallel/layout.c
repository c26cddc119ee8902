#include "parallel/layout.h"

#include <string.h>

#include <stdlib.h>

#include "model/arch.h"
#include "model/stage.h"

int layout_devices(const Layout *l) { return l->dp * l->tp * l->pp; }

int layout_chunks(const Layout *l) { return l->vstages > 1 ? l->vstages : 1; }

void layout_coords(const Layout *l, int r, int *dp_rank, int *tp_rank, int *pp_rank) {
    *tp_rank = r % l->tp;
    *dp_rank = r / l->tp % l->dp;
    *pp_rank = r / (l->tp * l->dp);
}

void layout_place(Layout *l, int r) {
    l->rank = r;
    layout_coords(l, r, &l->dp_rank, &l->tp_rank, &l->pp_rank);
}

int layout_rank_at(const Layout *l, int dp_rank, int tp_rank, int pp_rank) {
    return (pp_rank * l->dp + dp_rank) * l->tp + tp_rank;
}

// ---- the model's slice ----

int layout_split_layers(const Layout *l, int n_layer, int *begin, Err *err) {
    int P = l->pp, V = layout_chunks(l);
    const int *layers = l->pp_layers;
    if (P > n_layer)
        return err_set(err, ERR_USAGE, "--pp %d: the model has only %d layers (at least one per stage)", P, n_layer);
    CHECKF(V == 1 || !layers, "an interleaved schedule with stages of given layers");
    begin[0] = 0;
    if (!layers) {
        if (V > 1 && n_layer % (P * V))
            return err_set(err, ERR_USAGE, "--virtual-stages %d × --pp %d = %d chunks do not divide the model's %d layers",
                           V, P, P * V, n_layer);
        if (n_layer % P)
            return err_set(err, ERR_USAGE, "--pp %d does not divide the model's %d layers: give each stage's layers with "
                           "--pp-layers a,b,…", P, n_layer);
        for (int k = 0; k < P * V; k++) begin[k + 1] = begin[k] + n_layer / (P * V);
        return 0;
    }
    for (int k = 0; k < P; k++) {
        if (layers[k] < 1) return err_set(err, ERR_USAGE, "--pp-layers: stage %d has %d layers (at least 1)", k, layers[k]);
        begin[k + 1] = begin[k] + layers[k];
    }
    if (begin[P] != n_layer)
        return err_set(err, ERR_USAGE, "--pp-layers: the stages' layers sum to %d, but the model has %d", begin[P], n_layer);
    return 0;
}

int layout_slice_of(const Layout *l, const ModelConfig *mc, int pp_rank, int tp_rank, ModelSlice *s, Err *err) {
    int P = l->pp, V = layout_chunks(l);
    int *begin = malloc(((size_t)P * V + 1) * sizeof *begin);
    CHECKF(begin, "out of memory");
    int rc = layout_split_layers(l, mc->n_layer, begin, err);
    if (!rc) {
        *s = slice_whole(mc);
        s->layer_begin = begin[pp_rank];   // chunk v is virtual stage v·P + pp_rank
        s->layer_end = begin[pp_rank + 1];
        s->chunks = V;
        s->chunk_stride = V > 1 ? begin[P] - begin[0] : 0;   // an even split: chunk v is P virtual stages on
        s->tp_rank = tp_rank;
        s->tp_size = l->tp;
        s->sp = l->sp && l->tp > 1;
        s->pad_multiple = l->zero >= 1 ? l->dp : 1;   // ZeRO: every segment splits into dp equal pieces
    }
    free(begin);
    return rc;
}

int layout_slice(const Layout *l, const ModelConfig *mc, ModelSlice *s, Err *err) {
    return layout_slice_of(l, mc, l->pp_rank, l->tp_rank, s, err);
}

unsigned layout_stage_flags(const Layout *l) {
    return (l->zero >= 2 ? STAGE_NO_GRADS : 0) | (l->zero >= 3 ? STAGE_NO_PARAMS : 0) |
           (l->recompute == RECOMPUTE_FULL ? STAGE_RECOMPUTE_FULL : 0) |
           (l->recompute == RECOMPUTE_SELECTIVE ? STAGE_RECOMPUTE_SELECTIVE : 0) | stage_prec_flag(l->precision) |
           (layout_offloads_masters(l) && l->zero < 3 ? STAGE_PARAMS16_ONLY : 0);
}

int layout_offloads_masters(const Layout *l) {
    return l->offload != OFFLOAD_NONE && l->precision != PREC_FP32;
}

int layout_offload_parse(const char *s, OffloadWhat *w) {
    for (int k = OFFLOAD_OPTIMIZER; k <= OFFLOAD_PARAMS; k++)
        if (!strcmp(s, layout_offload_name((OffloadWhat)k))) {
            *w = (OffloadWhat)k;
            return 0;
        }
    return -1;
}

const char *layout_offload_name(OffloadWhat w) {
    return w == OFFLOAD_PARAMS ? "params" : w == OFFLOAD_OPTIMIZER ? "optimizer" : "none";
}

int layout_params_file_bytes(const Layout *l) {
    return l->offload != OFFLOAD_PARAMS ? 0 : l->precision == PREC_FP32 ? 4 : 2;
}

int layout_in_flight(const Layout *l, int M, int stage) {
    int P = l->pp, V = layout_chunks(l);
    if (l->schedule == PIPE_GPIPE) return M;   // every forward, then every backward
    // 1F1B: the warm-up forwards, then one more before the first backward
    // frees a slot (parallel/pipe's schedule)
    long long total = (long long)M * V, warm = V == 1 ? P - stage - 1 : 2LL * (P - stage - 1) + (long long)(V - 1) * P;
    return (int)(warm + 1 < total ? warm + 1 : total);
}

// ---- counting once ----

int layout_counts_loss(const Layout *l, int last) { return last && l->tp_rank == 0; }

int layout_counts_tp_replicated(const Layout *l) { return l->tp_rank == 0; }

int layout_dp_owner(const Layout *l) { return l->zero >= 1 || l->dp_rank == 0; }

int layout_holds_tied_copy(const Layout *l, const ModelConfig *mc) {
    return l->pp > 1 && l->pp_rank == l->pp - 1 && arch_of(mc)->tied_head;
}

// ---- checkpoints ----

// Files per (stage, TP rank): its DP ranks' (ZeRO) or its first DP rank's.
static int files_per_dp(const Layout *l) { return l->zero >= 1 ? l->dp : 1; }

int layout_ckpt_files(const Layout *l) { return files_per_dp(l) * l->tp * l->pp; }

int layout_ckpt_file(const Layout *l) {
    int per = files_per_dp(l);
    return (l->pp_rank * l->tp + l->tp_rank) * per + (per > 1 ? l->dp_rank : 0);
}

// ---- denominators ----

double layout_tokens_per_step(const Layout *l, int B, int T, int M) { return (double)B * T * M * l->dp; }

// ---- communicators ----

int layout_comms(const Layout *l, int tied, LayoutComm *out) {
    int n = 0, P = l->pp, pipes = l->dp * l->tp;
    out[n++] = (LayoutComm){"world", layout_devices(l), 1};
    out[n++] = (LayoutComm){"statistics", layout_devices(l), 1};
    out[n++] = (LayoutComm){"tensor-parallel", l->tp, l->dp * l->pp};
    out[n++] = (LayoutComm){"data-parallel", l->dp, l->tp * l->pp};
    out[n++] = (LayoutComm){"pipeline", P, pipes};
    if (P == 1) return n;
    // parallel/pipe: pairs (2j, 2j+1) from two splits (activations,
    // gradients), pairs (2j+1, 2j+2) from two more; each pair of splits
    // leaves P − 1 pairs and two ranks alone
    out[n++] = (LayoutComm){"pipeline neighbour pairs", 2, pipes * 2 * (P - 1)};
    out[n++] = (LayoutComm){"pipeline ends alone", 1, pipes * 4};
    // the two ends against the middle stages, split once per use
    int ends_uses = 2 * (layout_chunks(l) > 1) + (tied != 0);
    if (ends_uses) out[n++] = (LayoutComm){"first and last stage", 2, pipes * ends_uses};
    if (ends_uses && P > 2) out[n++] = (LayoutComm){"middle stages", P - 2, pipes * ends_uses};
    return n;
}

size_t layout_comm_bytes(const Layout *l, int tied, size_t (*area)(int n)) {
    LayoutComm c[LAYOUT_MAX_COMMS];
    int k = layout_comms(l, tied, c);
    size_t b = 0;
    for (int i = 0; i < k; i++) b += (size_t)c[i].count * area(c[i].size);
    return b;
}
