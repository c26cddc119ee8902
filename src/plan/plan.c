#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct { const char *name; PlanArch arch; int64_t L, h, a, kv, f, V, s; } Preset;

static const Preset presets[] = {
    {"gpt3-175b", PLAN_GPT, 96, 12288, 96, 96, 4 * 12288, 50257, 2048},
    {"llama-7b", PLAN_LLAMA, 32, 4096, 32, 32, 11008, 32000, 2048},
    {"llama2-13b", PLAN_LLAMA, 40, 5120, 40, 40, 13824, 32000, 4096},
    {"llama2-70b", PLAN_LLAMA, 80, 8192, 64, 8, 28672, 32000, 4096},
    {"megatron-1t", PLAN_GPT, 128, 25600, 160, 160, 4 * 25600, 51200, 2048},   // Narayanan et al. 2021, table 1
};

const char *plan_preset_list(void) {
    return "gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, gpt3-175b, megatron-1t, llama-7b, llama2-13b, llama2-70b";
}

void plan_model_from_config(PlanModel *m, const ModelConfig *c) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", c->name);
    m->arch = PLAN_GPT;
    m->L = c->n_layer;
    m->h = c->d_model;
    m->a = m->kv = c->n_head;
    m->f = c->d_ff;
    m->V = c->vocab;
    m->vpad = c->vocab_padded;
    m->s = c->max_seq;
}

int plan_model_preset(PlanModel *m, const char *name, Err *err) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const Preset *p = &presets[i];
        if (strcmp(p->name, name)) continue;
        memset(m, 0, sizeof *m);
        snprintf(m->name, sizeof m->name, "%s", name);
        m->arch = p->arch;
        m->L = p->L; m->h = p->h; m->a = p->a; m->kv = p->kv; m->f = p->f; m->V = p->V; m->s = p->s;
        m->vpad = (m->V + 127) / 128 * 128;
        return 0;
    }
    ModelConfig c;
    if (config_preset(&c, name, NULL) == 0) {
        plan_model_from_config(m, &c);
        return 0;
    }
    return err_set(err, ERR_USAGE, "--model: unknown preset '%s' (known: %s)", name, plan_preset_list());
}

// Parameters of one layer: the part split by tensor parallelism and the part
// every TP rank holds.
static void layer_params(const PlanModel *m, int64_t *split, int64_t *repl) {
    int64_t h = m->h, f = m->f, hs = m->h / m->a, kvw = m->kv * hs;
    if (m->arch == PLAN_GPT) {
        *split = h * (h + 2 * kvw) + (h + 2 * kvw)   // qkv weight + bias (column parallel)
               + h * h                               // attention output (row parallel)
               + h * f + f + f * h;                  // fc weight + bias, projection
        *repl = 2 * h + h + 2 * h + h;               // ln_1, attn.c_proj bias, ln_2, mlp.c_proj bias
    } else {
        *split = h * (h + 2 * kvw) + h * h + 3 * h * f;   // q, k, v, o; gate, up, down (no biases)
        *repl = 2 * h;                                      // two RMSNorm gains
    }
}

int64_t plan_params(const PlanModel *m) {
    int64_t split, repl;
    layer_params(m, &split, &repl);
    int64_t emb = m->V * m->h + (m->arch == PLAN_GPT ? m->s * m->h : 0);
    int64_t head = m->arch == PLAN_LLAMA ? m->V * m->h : 0;   // GPT ties the head to wte
    int64_t final_norm = m->arch == PLAN_GPT ? 2 * m->h : m->h;
    return emb + head + m->L * (split + repl) + final_norm;
}

int plan_check(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const PlanLayout *l, Err *err) {
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
    if (l->schedule == SCHED_1F1B && l->pp > 1 && M < l->pp)
        return err_set(err, ERR_USAGE, "1F1B needs at least pp=%d micro-batches per step (have %lld)", l->pp, (long long)M);
    return 0;
}

double plan_act_layer(const PlanModel *m, const PlanJob *j, const PlanLayout *l) {
    // Elements kept per token, as tessera's layer saves them: the layer
    // input's norm output (h) and its statistics, q/k/v (h + 2·kv·hs), the
    // attention output (h) and log-sum-exp (a), the residual after
    // attention (h), the second norm's output (h) and statistics, the FFN's
    // inputs to its nonlinearity (GPT: fc output and GELU output, 2f;
    // SwiGLU: gate, up and their product, 3f), and the layer output (h).
    // Tensors inside the tensor-parallel region are divided by tp; the
    // h-wide ones too under sequence parallelism. With a naive attention the
    // a·s probabilities per token are kept as well (the s² term).
    double h = (double)m->h, hs = h / (double)m->a, t = l->tp, sp = l->sp ? t : 1;
    double e = l->precision == PREC_FP32 ? 4 : 2, stats = m->arch == PLAN_GPT ? 2 : 1;
    double inside = (h + 2 * m->kv * hs) + h + (m->arch == PLAN_GPT ? 2 : 3) * (double)m->f;
    double outside = 4 * h;   // norm output ×2, residual, layer output
    double per_token = e * (inside / t + outside / sp) + 4 * (2 * stats / sp + (double)m->a / t);
    if (!l->fused_attention) per_token += e * (double)m->a * (double)j->seq / t;
    double tokens = (double)j->seq * (double)j->micro_batch;
    if (l->recompute == RECOMPUTE_FULL) return tokens * e * h / sp;   // only the layer input
    return tokens * per_token;
}

void plan_eval(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const PlanLayout *l, PlanResult *r) {
    memset(r, 0, sizeof *r);
    int64_t split, repl;
    layer_params(m, &split, &repl);
    double t = l->tp, d = l->dp, p = l->pp;
    r->params = plan_params(m);
    // the busiest device: a stage of L/pp layers plus the first stage's
    // embeddings (with pp=1 also the last stage's head and final norm)
    int64_t layers = m->L / l->pp;
    int64_t emb = m->vpad * m->h / l->tp + (m->arch == PLAN_GPT ? m->s * m->h : 0);
    int64_t last = (m->arch == PLAN_LLAMA ? m->vpad * m->h / l->tp : (l->pp > 1 ? m->vpad * m->h / l->tp : 0)) +
                   (m->arch == PLAN_GPT ? 2 * m->h : m->h);
    int64_t body = layers * (split / l->tp + repl);
    int64_t first_stage = emb + body + (l->pp == 1 ? last : 0), last_stage = body + last;
    r->params_device = first_stage > last_stage ? first_stage : last_stage;
    double psi = (double)r->params_device;
    int mixed = l->precision != PREC_FP32;
    r->weights = (mixed ? 2 : 4) * psi;
    r->grads = (mixed ? 2 : 4) * psi;
    r->optim = (mixed ? 12 : 8) * psi;
    if (l->zero >= 1) r->optim /= d;
    if (l->zero >= 2) r->grads /= d;
    if (l->zero >= 3) r->weights /= d;
    r->model_states = r->weights + r->grads + r->optim;

    r->micro_batches = j->global_batch / ((int64_t)l->dp * j->micro_batch);
    r->inflight = l->schedule == SCHED_GPIPE ? r->micro_batches : (r->micro_batches < l->pp ? r->micro_batches : l->pp);
    if (l->pp == 1) r->inflight = 1;   // micro-batches run one after another
    r->act_layer = plan_act_layer(m, j, l);
    double e = mixed ? 2 : 4, sbh = (double)j->seq * j->micro_batch * m->h;
    r->act_korthikanti = sbh * (34 + 5.0 * m->a * j->seq / m->h);
    r->acts = r->act_layer * layers * r->inflight;
    if (l->recompute == RECOMPUTE_FULL) {   // one layer's full activations while recomputing it
        PlanLayout none = *l;
        none.recompute = RECOMPUTE_NONE;
        r->acts += plan_act_layer(m, j, &none);
    }
    r->acts += 2 * sbh * 4 / (l->sp ? t : 1);   // stage input and final norm output (fp32)
    double grad_bytes = (mixed && !l->reduce_fp32 ? 2 : 4) * psi;
    r->comm_buf = l->dp > 1 ? (l->zero == 3 ? 2 * (double)(split / l->tp + repl) * e : 2 * 25e6) : 0;
    r->total = r->model_states + r->acts + r->comm_buf;
    r->fits = r->total <= c->mem_gb * 1073741824.0;

    // FLOPs
    double N = (double)r->params, Lhs = (double)m->L * m->h * j->seq;
    r->flops_token = 6 * N + 12 * Lhs;
    r->hw_flops_token = r->flops_token + (l->recompute == RECOMPUTE_FULL ? 2 * N + 4 * Lhs
                                         : l->recompute == RECOMPUTE_SELECTIVE ? 4 * Lhs : 0);
    double tokens_step = (double)j->global_batch * j->seq;
    double dev_flops = c->tflops * 1e12 * c->mfu;
    r->t_compute = tokens_step * r->hw_flops_token / ((double)c->devices * dev_flops);
    r->t_bubble = r->micro_batches > 0 ? r->t_compute * (p - 1) / (double)r->micro_batches : 0;

    // communication per device per step
    int64_t tpdp = (int64_t)l->tp * l->dp;
    double bw_dp = (tpdp <= c->per_node ? c->bw_intra : c->bw_inter) * 1e9, alpha = c->alpha_us * 1e-6;
    double ring = d > 1 ? 2 * (d - 1) / d : 0;
    // ZeRO 0/1: one allreduce (or reduce-scatter + allgather) of the
    // gradients per step. ZeRO-2: a reduce-scatter per micro-batch and one
    // allgather of the parameters. ZeRO-3: per micro-batch, the parameters
    // are allgathered for the forward and the layers' again for the backward
    // (the embeddings and the final norm and head are held from forward
    // into the head's backward), and the gradients reduce-scattered.
    double M = (double)r->micro_batches, half = ring / 2;
    double held = (double)emb + (l->pp == 1 ? (double)last : 0);
    if (l->zero <= 1) r->bytes_dp = ring * grad_bytes;
    else if (l->zero == 2) r->bytes_dp = half * grad_bytes * (M + 1);
    else r->bytes_dp = half * M * ((mixed ? 2 : 4) * (2 * psi - held) + grad_bytes);
    // The embedding lookup's gradient goes as rows, allgathered at every
    // reduction (once per step, per micro-batch in ZeRO-2/3): the token id
    // and the gradient row of each of the micro-batch's s·b tokens.
    if (d > 1) {
        double rows = (double)j->seq * j->micro_batch, syncs = l->zero >= 2 ? M : 1;
        r->bytes_dp += syncs * (d - 1) * rows * (4 + (mixed && !l->reduce_fp32 ? 2 : 4) * (double)m->h / l->tp);
    }
    r->t_dp = r->bytes_dp / bw_dp + (d > 1 ? 2 * (d - 1) * alpha : 0);
    // overlapped with the backward pass (two thirds of compute)
    r->t_dp_exposed = r->t_dp > 2.0 / 3 * r->t_compute ? r->t_dp - 2.0 / 3 * r->t_compute : 0;
    double act_msg = sbh * e;
    r->bytes_tp = t > 1 ? 4.0 * layers * r->micro_batches * 2 * (t - 1) / t * act_msg : 0;
    r->t_tp = r->bytes_tp / (c->bw_intra * 1e9) + (t > 1 ? 4.0 * layers * r->micro_batches * 2 * (t - 1) * alpha : 0);
    double bw_pp = ((int64_t)l->tp * l->dp * l->pp <= c->per_node ? c->bw_intra : c->bw_inter) * 1e9;
    r->bytes_pp = p > 1 ? 2.0 * r->micro_batches * act_msg / (l->sp ? t : 1) : 0;
    r->t_pp = r->bytes_pp / bw_pp + (p > 1 ? 2.0 * r->micro_batches * alpha : 0);
    r->t_step = r->t_compute + r->t_bubble + r->t_dp_exposed + r->t_tp + r->t_pp;
    r->tokens_per_s = tokens_step / r->t_step;
    r->mfu = r->tokens_per_s * r->flops_token / ((double)c->devices * c->tflops * 1e12);
    double seconds = j->tokens / tokens_step * r->t_step;
    r->days = seconds / 86400;
    r->device_hours = seconds * (double)c->devices / 3600;
    // Narayanan et al. 2021, eq. 4: 8·T·P / (n·X), X the achieved FLOP/s per device
    r->megatron_days = 8 * j->tokens * N / ((double)c->devices * c->tflops * 1e12 * c->mfu) / 86400;
}
