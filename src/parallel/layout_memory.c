// parallel/layout — a rank's memory, the one model of it (layout.h).
#include "parallel/layout.h"

#include "model/stage.h"
#include "parallel/dp.h"
#include "parallel/pipe.h"

int layout_memory(const Layout *l, const ModelConfig *mc, int stage, int B, int T, int M, LayoutMemory *out, Err *err) {
    *out = (LayoutMemory){0};
    ModelSlice sl;
    ParamTable pt;
    if (layout_slice_of(l, mc, stage, 0, &sl, err) || ptable_build(&pt, mc, &sl, err)) return -1;
    double n = (double)pt.total;
    out->floats = (int64_t)pt.total;
    int slots = layout_in_flight(l, M, stage);
    out->comm = (double)dp_comm_bytes(&pt, &sl, l, B, T, mc->d_model);
    double ring = (double)dp_offload_ring_bytes(&pt, l);
    // the pipeline's send buffers are counted by running every stage's
    // schedule: past 2^22 operations (a planner's what-if, never a run of
    // this machine) they are left out
    if ((int64_t)l->pp * 2 * M * layout_chunks(l) <= (1 << 22))
        out->comm += (double)pipe_comm_bytes(l, M, stage, stage_boundary_floats_of(mc, &sl, B, T));
    // --ckpt-async: the parameters and both moments of the pieces a rank
    // writes (its owned 1/dp of every segment under ZeRO >= 1; the whole
    // buffer on DP rank 0 under ZeRO-0), past the last stage's tied copy of
    // the embeddings (segment 0), which the first stage writes
    double staged = 0;
    if (l->ckpt_async) {
        Layout at = *l;
        at.pp_rank = stage;
        staged = n - (layout_holds_tied_copy(&at, mc) ? (double)pt.seg[0].hi : 0);
    }
    ptable_free(&pt);
    // ZeRO's stages shard the moments, then the gradients, then the
    // parameters; every segment is padded to split evenly (layout_slice)
    out->optim_shards = l->zero >= 1 ? l->dp : 1;
    out->grads_shards = l->zero >= 2 ? l->dp : 1;
    out->params_shards = l->zero >= 3 ? l->dp : 1;
    out->params = 4 * n / out->params_shards;
    out->params16 = l->precision != PREC_FP32 && l->zero < 3 ? 2 * n : 0;   // ZeRO-3 rounds what it gathers
    out->grads = 4 * n / out->grads_shards;
    out->optim = 8 * n / out->optim_shards;
    out->ckpt = 12 * staged / out->optim_shards;
    if (l->offload) {   // to disk; the ring of buffers they stream through stays
        out->disk = out->optim;
        out->optim = ring;
        if (layout_offloads_masters(l)) {
            out->disk += 4 * n / out->optim_shards;   // the owned pieces' masters
            out->params = 0;
            if (l->zero >= 3) out->params16 = 2 * n / out->params_shards;   // the owned shard's 16-bit copy
        }
        if (l->offload == OFFLOAD_PARAMS) {   // that shard (fp32: the parameters) in a file of its own
            out->disk += layout_params_file_bytes(l) * n / out->params_shards;
            out->params = out->params16 = 0;
        }
    }
    Err ignored;   // sizes stage_init would refuse lay out nothing
    if ((int64_t)B * T <= (1 << 30) && slots <= (1 << 20) && T <= mc->max_seq &&
        stage_check_split(mc, l->tp, l->sp, T, &ignored) == 0)
        out->acts = (double)stage_act_bytes(mc, &sl, B, T, slots, layout_stage_flags(l));
    out->total = out->params + out->params16 + out->grads + out->optim + out->acts + out->comm + out->ckpt;
    return 0;
}
