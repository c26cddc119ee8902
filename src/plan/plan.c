#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/volume.h"
#include "model/arch.h"
#include "model/stage.h"

void plan_model_from_config(PlanModel *m, const ModelConfig *c) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", c->name);
    m->cfg = *c;
    m->L = c->n_layer;
    m->h = c->d_model;
    m->a = c->n_head;
    m->kv = config_kv_heads(c);
    m->f = c->d_ff;
    m->V = c->vocab;
    m->vpad = c->vocab_padded;
    m->s = c->max_seq;
}

void plan_model_set_vocab(PlanModel *m, int64_t vocab) {
    ModelConfig c = m->cfg;
    char name[32];
    memcpy(name, m->name, sizeof name);
    config_set_vocab(&c, (int)vocab);
    plan_model_from_config(m, &c);
    memcpy(m->name, name, sizeof name);
}

int plan_model_preset(PlanModel *m, const char *name, Err *err) {
    ModelConfig c;
    if (config_preset_any(&c, name, 1, NULL) == 0) {
        plan_model_from_config(m, &c);
        return 0;
    }
    return err_set(err, ERR_USAGE, "--model: unknown preset '%s' (known: %s)", name, config_preset_list_all());
}

int64_t plan_params(const PlanModel *m) { return config_param_count(&m->cfg, 0); }

int plan_check_inputs(const PlanModel *m, const PlanCluster *c, const PlanJob *j, Err *err) {
    if (j->seq > m->s)
        return err_set(err, ERR_USAGE, "--seq %lld is above the model's %lld positions (max_seq)", (long long)j->seq,
                       (long long)m->s);
    if (c->per_node >= 1 && c->devices > c->per_node && c->devices % c->per_node)   // fewer: one node, partly used
        return err_set(err, ERR_USAGE, "--devices-per-node %lld does not divide --devices %lld (nodes of equal size)",
                       (long long)c->per_node, (long long)c->devices);
    return 0;
}

int plan_check(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l, Err *err) {
    if (plan_check_inputs(m, c, j, err)) return -1;
    if (m->L < 1 || m->h < 1 || m->a < 1 || m->kv < 1 || m->f < 1 || m->V < 1)
        return err_set(err, ERR_USAGE, "model sizes must be positive");
    if (m->h % m->a) return err_set(err, ERR_USAGE, "heads (%lld) must divide the width (%lld)", (long long)m->a, (long long)m->h);
    if (m->a % m->kv) return err_set(err, ERR_USAGE, "kv heads (%lld) must divide heads (%lld)", (long long)m->kv, (long long)m->a);
    if (c->devices < 1 || c->per_node < 1 || c->mem_gb <= 0 || c->tflops <= 0 || c->mfu <= 0 || c->mfu > 1 ||
        c->bw_intra <= 0 || c->bw_inter <= 0 || c->alpha_us < 0)
        return err_set(err, ERR_USAGE, "cluster figures must be positive (and --mfu at most 1)");
    if (j->seq < 1 || j->global_batch < 1 || j->micro_batch < 1 || j->tokens < 0)
        return err_set(err, ERR_USAGE, "--seq, --global-batch and --micro-batch must be positive, --tokens non-negative");
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->zero < 0 || l->zero > 3)
        return err_set(err, ERR_USAGE, "dp, tp and pp must be at least 1 and zero in 0..3");
    if (l->offload == OFFLOAD_PARAMS && l->zero != 3)
        return err_set(err, ERR_USAGE, "--offload params offloads the shard ZeRO-3 gathers from: it needs --zero 3");
    if ((int64_t)l->dp * l->tp * l->pp != c->devices)
        return err_set(err, ERR_USAGE, "dp·tp·pp = %lld but there are %lld devices",
                       (long long)l->dp * l->tp * l->pp, (long long)c->devices);
    if (m->a % l->tp) return err_set(err, ERR_USAGE, "tp=%d does not divide the %lld heads", l->tp, (long long)m->a);
    if (m->kv % l->tp) return err_set(err, ERR_USAGE, "tp=%d does not divide the %lld kv heads", l->tp, (long long)m->kv);
    if (m->f % l->tp) return err_set(err, ERR_USAGE, "tp=%d does not divide the FFN width %lld", l->tp, (long long)m->f);
    if (l->tp > c->per_node) return err_set(err, ERR_USAGE, "tp=%d spans nodes of %lld devices (keep TP inside a node)", l->tp, (long long)c->per_node);
    if (m->L % l->pp) return err_set(err, ERR_USAGE, "pp=%d does not divide the %lld layers", l->pp, (long long)m->L);
    if (j->global_batch % ((int64_t)l->dp * j->micro_batch))
        return err_set(err, ERR_USAGE, "the global batch %lld is not a multiple of dp·micro-batch = %lld",
                       (long long)j->global_batch, (long long)l->dp * j->micro_batch);
    int64_t M = j->global_batch / ((int64_t)l->dp * j->micro_batch);
    if (l->schedule == PIPE_1F1B && l->pp > 1 && M < l->pp)
        return err_set(err, ERR_USAGE, "1F1B needs at least pp=%d micro-batches per step (have %lld)", l->pp, (long long)M);
    int V = l->vstages > 1 ? l->vstages : 1;
    if (V > 1 && (l->pp < 2 || l->schedule != PIPE_1F1B))
        return err_set(err, ERR_USAGE, "virtual stages interleave the 1F1B schedule of pp ≥ 2 stages");
    if (V > 1 && m->L % ((int64_t)l->pp * V))
        return err_set(err, ERR_USAGE, "pp·V = %lld chunks do not divide the %lld layers", (long long)l->pp * V, (long long)m->L);
    if (V > 1 && M % l->pp)
        return err_set(err, ERR_USAGE, "the interleaved schedule needs micro-batches per step (%lld) a multiple of pp=%d",
                       (long long)M, l->pp);
    return 0;
}

// Bytes per token of the layer's saved activations ar->act_floats
// describes (those in which[] when n > 0, else all), on one of tp ranks: a
// micro-batch of N = tp tokens makes every slice whole, under sequence
// parallelism one row of the residual stream each.
static double act_per_token(const PlanModel *m, const Layout *l, const int *which, int n) {
    const Arch *ar = arch_of(&m->cfg);
    int tp = l->tp, hs = (int)(m->h / m->a);
    LocalDims d = {.B = 1, .T = tp, .N = tp, .C = (int)m->h, .Cl = (int)m->h / tp, .NHl = (int)m->a / tp,
                   .Fl = (int)m->f / tp, .NKVl = (int)m->kv / tp, .KVl = (int)m->kv * hs / tp, .Vl = 0,
                   .Ns = l->sp ? 1 : tp, .sp = l->sp};
    double bytes = 0;
    for (int k = 0; k < (n ? n : ar->nact); k++) {
        int a = n ? which[k] : k;
        int keep = l->precision == PREC_FP32 || (ar->act_keep32 >> a & 1u);
        bytes += (double)ar->act_floats(&d, a) * (keep ? 4 : 2);
    }
    return bytes / tp;
}

double plan_act_layer(const PlanModel *m, const PlanJob *j, const Layout *l) {
    // Elements kept per token, as tessera's layer saves them (the
    // architecture's act_floats: for GPT-2 the norms' outputs and
    // statistics, q/k/v, the attention output and log-sum-exp, the
    // residual after attention, the FFN's fc and GELU outputs and the
    // layer output; SwiGLU keeps gate, up and their product). Tensors
    // inside the tensor-parallel region are divided by tp; the residual
    // stream's (and the norms' statistics) too under sequence parallelism,
    // while the norms' outputs are kept gathered, every row, for the
    // column-parallel weight gradients. With a naive attention the a·s
    // probabilities per token are kept as well (the s² term). Under
    // bf16/fp16 all of them are 16-bit but what the architecture keeps in
    // fp32 (the statistics, the log-sum-exp, the layer output).
    double h = (double)m->h, t = l->tp, sp = l->sp ? t : 1, e = l->precision == PREC_FP32 ? 4 : 2;
    double per_token = act_per_token(m, l, NULL, 0);
    if (l->naive_attention) per_token += e * (double)m->a * (double)j->seq / t;
    double tokens = (double)j->seq * (double)j->micro_batch;
    if (l->recompute == RECOMPUTE_FULL) return tokens * 4 * h / sp;   // only the layer input
    if (l->recompute == RECOMPUTE_SELECTIVE) per_token -= plan_act_core(m, j, l) / tokens;   // the attention core's
    return tokens * per_token;
}

double plan_act_core(const PlanModel *m, const PlanJob *j, const Layout *l) {
    // the attention core's saved tensors (the output and its log-sum-exp),
    // and with a naive attention the probabilities (a·s/t per token)
    const Arch *ar = arch_of(&m->cfg);
    double t = l->tp, e = l->precision == PREC_FP32 ? 4 : 2;
    double per_token = act_per_token(m, l, ar->core, ar->ncore);
    if (l->naive_attention) per_token += e * (double)m->a * (double)j->seq / t;
    return (double)j->seq * (double)j->micro_batch * per_token;
}

void plan_tp_comm(const PlanModel *m, const PlanJob *j, const Layout *l, double *bytes, double *messages) {
    *bytes = *messages = 0;
    int n = l->tp;
    if (n == 1) return;
    // per micro-batch, on the busiest stage: its layers, and with pp = 1
    // both the embeddings and the head; else the larger of the two ends
    double layers = (double)(m->L / l->pp), N = (double)j->seq * (double)j->micro_batch;
    size_t act = (size_t)(N * (double)m->h);   // floats of one exchange (fp32)
    size_t tokens = (size_t)j->seq * (size_t)j->micro_batch;
    double ends = l->pp == 1 ? 2 : 1;   // loss statistics: allgathers of N and 2N floats
    double ce = (double)(volume_allgather(tokens, 4, n).sent + volume_allgather(2 * tokens, 4, n).sent);
    ModelConfig padded = m->cfg;
    config_pad_vocab(&padded, (int)m->V, n);
    int rows = stage_head_rows(padded.vocab_padded / n, (int)N);
    double chunks = ceil(N / rows);   // the head's chunks: two statistics exchanges each
    double per;
    if (!l->sp) {
        per = (4 * layers + ends) * (double)volume_allreduce(act, 4, n, 0).sent + ce;
        *messages = ((4 * layers + ends) * 2 + 2 * chunks) * (n - 1);
    } else {
        double half = (double)volume_reduce_scatter(act, 4, n).sent;   // a reduce-scatter, or an allgather of its result
        per = (4 * layers + ends) * 2 * half + ce + layers * (double)volume_allreduce(4 * (size_t)m->h, 4, n, 0).sent +
              (double)volume_allreduce(2 * (size_t)m->h, 4, n, 0).sent;
        *messages = ((4 * layers + ends) * 2 + 2 * chunks + 2 * (layers + 1)) * (n - 1);
    }
    double M = (double)(j->global_batch / ((int64_t)l->dp * j->micro_batch));
    *bytes = M * per;
    *messages *= M;
}

// The parts of the busiest device's parameters the communication model
// uses: a stage of L/pp layers plus the first stage's embeddings (with
// pp=1 also the last stage's final norm and head; a tied head is the first
// stage's embedding, held by the last stage too when pp > 1), every count
// from the architecture's tensor table with the vocabulary padded for tp
// ranks, as the trainer pads it.
typedef struct {
    ModelConfig padded;
    int64_t layers;   // the stage's
    int64_t layer;    // one layer's parameters
    int64_t emb;      // the embeddings'
    int64_t last;     // the last stage's beyond its layers: final norm, head, tied copy
} DeviceParams;

static void device_params(const PlanModel *m, const Layout *l, DeviceParams *dv) {
    dv->padded = m->cfg;
    config_pad_vocab(&dv->padded, (int)m->V, l->tp);
    const ModelConfig *mc = &dv->padded;
    dv->layers = m->L / l->pp;
    dv->layer = arch_part_params(mc, PART_BLOCK, l->tp, 1);
    dv->emb = arch_part_params(mc, PART_EMBED, l->tp, 1);
    dv->last = (l->pp > 1 ? arch_tied_copy(mc, l->tp, 1) : 0) + arch_part_params(mc, PART_FINAL, l->tp, 1);
}

// Weights, gradients and optimizer state on the busiest device (the first
// stage or the last) by the layout's memory model (parallel/layout, the
// trainer's own sizes: its parameter table, ZeRO padding included): in
// fp32 what tessera allocates, 4 + 4 + 8 bytes per parameter; under
// 16-bit the ZeRO paper's 2 + 2 + 12 of the same parameters (tessera keeps
// fp32 gradients, and its fp32 masters whole below ZeRO-3), the parts
// ZeRO's stage shards divided by dp; the communication buffers tessera's.
// *first gets the first stage's memory (the most activations in flight).
static void model_states(const Layout *l, const PlanJob *j, const DeviceParams *dv, PlanResult *r, LayoutMemory *first) {
    int M = r->micro_batches > (1 << 30) ? 1 << 30 : (int)r->micro_batches;
    int B = j->micro_batch > (1 << 30) ? 1 << 30 : (int)j->micro_batch, T = j->seq > (1 << 30) ? 1 << 30 : (int)j->seq;
    LayoutMemory last;
    Err err;
    CHECKF(layout_memory(l, &dv->padded, 0, B, T, M, first, &err) == 0 &&
           layout_memory(l, &dv->padded, l->pp - 1, B, T, M, &last, &err) == 0, "a checked layout: %s", err.msg);
    const LayoutMemory *busy = last.floats > first->floats ? &last : first;
    r->comm_buf = last.comm > first->comm ? last.comm : first->comm;   // the stages' larger
    r->ckpt = last.ckpt > first->ckpt ? last.ckpt : first->ckpt;
    r->params_device = busy->floats;
    double psi = (double)busy->floats;
    if (l->precision == PREC_FP32 || l->offload) {   // tessera's own figures (offloaded: what stays in memory)
        r->weights = busy->params + busy->params16;
        r->grads = busy->grads;
        r->optim = busy->optim;
    } else {
        r->weights = 2 * psi / busy->params_shards;
        r->grads = 2 * psi / busy->grads_shards;
        r->optim = 12 * psi / busy->optim_shards;
    }
    r->model_states = r->weights + r->grads + r->optim;
    r->disk = r->io_read = r->io_written = busy->disk;
    if (l->offload == OFFLOAD_PARAMS) {   // the shard's file is read at every gather: each micro-batch's forward and backward
        double pfile = layout_params_file_bytes(l) * psi / busy->params_shards;
        r->io_gather = pfile * 2.0 * (double)r->micro_batches;
        r->io_read += r->io_gather - pfile;   // disk counted the file once
    }
}

// Micro-batches per step, and how many (interleaved: micro-batch chunks)
// stage 0 holds in flight under the schedule: the layout's count, the
// trainer's slots.
static void in_flight(const PlanJob *j, const Layout *l, PlanResult *r) {
    r->micro_batches = j->global_batch / ((int64_t)l->dp * j->micro_batch);
    int M = r->micro_batches > (1 << 30) ? 1 << 30 : (int)r->micro_batches;
    r->inflight = layout_in_flight(l, M, 0);
}

// Activation bytes on the busiest device: the layers of a chunk for every
// micro-batch in flight by plan_act_layer's formula, with the shared sets
// of recomputation and 16-bit widening and the stage's input and final norm
// output; for an architecture tessera trains, the first stage's by the
// layout's memory model: the stage's own layout to the byte (the slots of
// the micro-batches in flight, each a chunk's layers).
static void activations(const PlanModel *m, const PlanJob *j, const Layout *l, const LayoutMemory *first, PlanResult *r) {
    int mixed = l->precision != PREC_FP32;
    int64_t V = l->vstages > 1 ? l->vstages : 1, chunk = m->L / l->pp / V;
    double t = l->tp, sbh = (double)j->seq * j->micro_batch * m->h;
    r->act_layer = plan_act_layer(m, j, l);
    r->act_korthikanti = sbh * (34 + 5.0 * m->a * j->seq / m->h);
    r->acts = r->act_layer * chunk * r->inflight;
    if (l->recompute == RECOMPUTE_FULL) {   // one layer's full activations while recomputing it
        Layout none = *l;   // in fp32
        none.recompute = RECOMPUTE_NONE;
        none.precision = PREC_FP32;
        r->acts += plan_act_layer(m, j, &none);
    }
    if (l->recompute == RECOMPUTE_SELECTIVE) r->acts += plan_act_core(m, j, l);   // one layer's attention core, shared
    if (mixed && l->recompute != RECOMPUTE_FULL) {   // one layer's 16-bit activations in fp32 while it runs
        Layout f32 = *l;
        f32.precision = PREC_FP32;
        r->acts += (plan_act_layer(m, j, &f32) - r->act_layer) * 2;
    }
    r->acts += sbh * 4 / (l->sp ? t : 1) + sbh * 4;   // stage input (rows split under SP) and final norm output (gathered), fp32
    r->act_formula = r->acts;
    if (!l->naive_attention && j->micro_batch * j->seq <= (1 << 30) && first->acts > 0) {
        r->acts = first->acts;
        r->act_exact = 1;
    }
}

// FLOPs per token (the architecture's: 6N + 12·L·h·s, an untied token
// embedding's lookup left out of N; and what recomputation adds), the
// compute time of a step and the pipeline bubble.
static void compute_time(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l, PlanResult *r) {
    double N = (double)r->params, Lhs = (double)m->L * m->h * j->seq, p = l->pp, s = (double)j->seq;
    int64_t V = l->vstages > 1 ? l->vstages : 1;
    r->flops_token = arch_flops_token(&m->cfg, (int)j->seq);
    if (j->doc_len > 0 && j->doc_len < s) {   // document masking: (D+1)/(s+1) of the causal pairs
        double f = (j->doc_len + 1) / (s + 1);
        r->flops_token = arch_flops_token_pairs(&m->cfg, (int)j->seq, f * s * (s + 1) / 2);
        Lhs *= f;
    }
    r->hw_flops_token = r->flops_token + (l->recompute == RECOMPUTE_FULL ? 2 * N + 4 * Lhs
                                         : l->recompute == RECOMPUTE_SELECTIVE ? 4 * Lhs : 0);
    double tokens_step = (double)j->global_batch * j->seq;
    double dev_flops = c->tflops * 1e12 * c->mfu;
    r->t_compute = tokens_step * r->hw_flops_token / ((double)c->devices * dev_flops);
    r->t_bubble = r->micro_batches > 0 ? r->t_compute * (p - 1) / ((double)V * r->micro_batches) : 0;
}

// Data-parallel bytes and time per device per step. Ranks are placed
// tensor-parallel neighbours first (rank = pp·dp·tp + dp·tp + tp): a
// data-parallel group fits in a node when tp·dp devices do.
static void dp_comm(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l,
                    const DeviceParams *dv, PlanResult *r) {
    double d = l->dp, psi = (double)r->params_device;
    int mixed = l->precision != PREC_FP32;
    double grad_bytes = (mixed && l->reduce_bf16 ? 2 : 4) * psi;
    int64_t tpdp = (int64_t)l->tp * l->dp;
    r->dp_inter = l->dp > 1 && tpdp > c->per_node;
    double bw_dp = (tpdp <= c->per_node ? c->bw_intra : c->bw_inter) * 1e9, alpha = c->alpha_us * 1e-6;
    double ring = d > 1 ? 2 * (d - 1) / d : 0;
    // ZeRO 0/1: one allreduce (or reduce-scatter + allgather) of the
    // gradients per step. ZeRO-2: a reduce-scatter per micro-batch and one
    // allgather of the parameters. ZeRO-3: per micro-batch, the parameters
    // are allgathered for the forward and the layers' again for the backward
    // (the embeddings and the final norm and head are held from forward
    // into the head's backward), and the gradients reduce-scattered.
    double M = (double)r->micro_batches, half = ring / 2;
    double held = (double)dv->emb + (l->pp == 1 ? (double)dv->last : 0);
    if (l->zero <= 1) r->bytes_dp = ring * grad_bytes;
    else if (l->zero == 2) r->bytes_dp = half * grad_bytes * (M + 1);
    else r->bytes_dp = half * M * ((mixed ? 2 : 4) * (2 * psi - held) + grad_bytes);
    // The embedding lookup's gradient goes as rows, allgathered at every
    // reduction (once per step, per micro-batch in ZeRO-2/3): the token id
    // and the gradient row of each of the micro-batch's s·b tokens.
    if (d > 1) {
        double rows = (double)j->seq * j->micro_batch, syncs = l->zero >= 2 ? M : 1;
        r->bytes_dp += syncs * (d - 1) * rows * (4 + (mixed && l->reduce_bf16 ? 2 : 4) * (double)m->h);
    }
    r->t_dp = r->bytes_dp / bw_dp + (d > 1 ? 2 * (d - 1) * alpha : 0);
    // overlapped with the backward pass (two thirds of compute)
    r->t_dp_exposed = r->t_dp > 2.0 / 3 * r->t_compute ? r->t_dp - 2.0 / 3 * r->t_compute : 0;
}

// Pipeline bytes and time per device per step: the busiest stage sends
// every micro-batch's output forward and its input's gradient back (the
// two ends only one of them), for each of its chunks (interleaved, the two
// ends hand V − 1 chunks on to each other); under SP each TP rank sends its
// rows. A pipeline fits in a node when all the devices do.
static void pp_comm(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l, PlanResult *r) {
    double t = l->tp, p = l->pp, alpha = c->alpha_us * 1e-6;
    int64_t V = l->vstages > 1 ? l->vstages : 1;
    double e = l->precision != PREC_FP32 ? 2 : 4, sbh = (double)j->seq * j->micro_batch * m->h;
    r->pp_inter = l->pp > 1 && (int64_t)l->tp * l->dp * l->pp > c->per_node;
    double bw_pp = ((int64_t)l->tp * l->dp * l->pp <= c->per_node ? c->bw_intra : c->bw_inter) * 1e9;
    double act_msg = sbh * e;
    double pp_msgs = p > 2 ? 2.0 * V * r->micro_batches : p > 1 ? (2.0 * V - 1) * r->micro_batches : 0;
    r->bytes_pp = pp_msgs * act_msg / (l->sp ? t : 1);
    r->t_pp = r->bytes_pp / bw_pp + pp_msgs * alpha;
}

void plan_eval(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l, PlanResult *r) {
    memset(r, 0, sizeof *r);
    r->params = plan_params(m);
    DeviceParams dv;
    device_params(m, l, &dv);
    in_flight(j, l, r);
    LayoutMemory first;
    model_states(l, j, &dv, r, &first);
    activations(m, j, l, &first, r);
    r->total = r->model_states + r->acts + r->comm_buf + r->ckpt;
    r->fits = r->total <= c->mem_gb * 1073741824.0;

    compute_time(m, c, j, l, r);
    dp_comm(m, c, j, l, &dv, r);
    plan_tp_comm(m, j, l, &r->bytes_tp, &r->tp_messages);
    double alpha = c->alpha_us * 1e-6;   // latency per message
    r->t_tp = r->bytes_tp / (c->bw_intra * 1e9) + r->tp_messages * alpha;
    pp_comm(m, c, j, l, r);
    // The I/O's exposed time. Reads during the forward and backward are
    // hidden up to the compute's time: the ring's first units of the
    // optimizer's files (offload_prefetch starts the next pass's reader
    // then; at most the ring, r->optim) and the parameters' reads at the
    // gathers, read ahead of the segments that compute. The rest of the
    // optimizer's reads and all its writes run around the update, whose
    // arithmetic is a small fraction of their time (the planner has no
    // update time to hide them behind), so all of it counts.
    double bw = c->disk_gbps * 1e9;
    double opt_read = r->io_read - r->io_gather;
    double ahead = r->disk > 0 ? (r->optim < opt_read ? r->optim : opt_read) : 0;
    double hidden_reads = (ahead + r->io_gather) / bw;
    r->t_io = r->disk > 0 ? (opt_read - ahead + r->io_written) / bw : 0;
    if (hidden_reads > r->t_compute) r->t_io += hidden_reads - r->t_compute;
    r->t_step = r->t_compute + r->t_bubble + r->t_dp_exposed + r->t_tp + r->t_pp + r->t_io;

    double tokens_step = (double)j->global_batch * j->seq, N = (double)r->params;
    r->tokens_per_s = tokens_step / r->t_step;
    r->mfu = r->tokens_per_s * r->flops_token / ((double)c->devices * c->tflops * 1e12);
    double seconds = j->tokens / tokens_step * r->t_step;
    r->days = seconds / 86400;
    r->device_hours = seconds * (double)c->devices / 3600;
    // Narayanan et al. 2021, eq. 4: 8·T·P / (n·X), X the achieved FLOP/s per device
    r->megatron_days = 8 * j->tokens * N / ((double)c->devices * c->tflops * 1e12 * c->mfu) / 86400;
}
