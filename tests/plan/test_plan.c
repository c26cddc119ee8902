// plan/: exact parameter counts, ZeRO model states, activation and FLOP
// formulas, the interleaved pipeline's bubble, activations and messages,
// the Megatron-LM training-time estimates, the planner's
// prediction against tessera's own allocator, and a sweep of inputs that
// must never crash.
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/matmul.h"
#include "model/stage.h"
#include "plan/plan.h"
#include "optim/adamw.h"
#include "test.h"

static PlanCluster cluster(int64_t n) { return (PlanCluster){n, 8, 80, 312, 0.5, 300, 25, 5, 2}; }

static void test_param_counts(void) {
    Err e;
    PlanModel m;
    struct { const char *name; int64_t want; } c[] = {
        {"gpt2-124m", 124439808LL}, {"gpt3-175b", 174604259328LL}, {"llama-7b", 6738415616LL}};
    for (int i = 0; i < 3; i++) {
        EXPECT(plan_model_preset(&m, c[i].name, &e) == 0, "%s", e.msg);
        EXPECT(plan_params(&m) == c[i].want, "%s: %lld, want %lld", c[i].name, (long long)plan_params(&m), (long long)c[i].want);
    }
    // GPT-3: 12Lh²+13Lh+(V+s)h leaves out the final norm's 2h
    plan_model_preset(&m, "gpt3-175b", &e);
    int64_t f = 12 * m.L * m.h * m.h + 13 * m.L * m.h + (m.V + m.s) * m.h;
    EXPECT(plan_params(&m) - f == 2 * m.h, "final norm");
    EXPECT(plan_model_preset(&m, "gpt9", &e) == -1 && strstr(e.msg, "gpt9"), "unknown preset: %s", e.msg);
    EXPECT(plan_model_preset(&m, "llama2-70b", &e) == 0 && m.kv == 8 && m.f == 28672, "llama2-70b GQA");
}

static void test_zero_states(void) {
    Err e;
    PlanModel m;
    plan_model_preset(&m, "llama-7b", &e);
    PlanCluster c = cluster(8);
    PlanJob j = {2048, 64, 1, 0, 0};
    for (int z = 0; z <= 3; z++) {
        Layout l = {.dp = 8, .tp = 1, .pp = 1, .zero = z, .precision = PREC_BF16};
        PlanResult r;
        EXPECT(plan_check(&m, &c, &j, &l, &e) == 0, "%s", e.msg);
        plan_eval(&m, &c, &j, &l, &r);
        double psi = (double)r.params_device, d = 8;
        double want = z == 0 ? 16 * psi : z == 1 ? 4 * psi + 12 * psi / d : z == 2 ? 2 * psi + 14 * psi / d : 16 * psi / d;
        EXPECT(fabs(r.model_states - want) < 1e-6 * want, "zero %d: %.6g, want %.6g", z, r.model_states, want);
    }
    Layout l = {.dp = 8, .tp = 1, .pp = 1, .precision = PREC_FP32};
    PlanResult r;
    plan_eval(&m, &c, &j, &l, &r);
    EXPECT(r.model_states == 16.0 * r.params_device, "fp32 Adam is 16 B per parameter");
}

static void test_activations_and_flops(void) {
    Err e;
    PlanModel m;
    plan_model_preset(&m, "gpt3-175b", &e);
    PlanCluster c = cluster(64);
    PlanJob j = {2048, 64, 1, 0, 0};
    Layout l = {.dp = 1, .tp = 8, .pp = 8, .precision = PREC_BF16};
    PlanResult r;
    EXPECT(plan_check(&m, &c, &j, &l, &e) == 0, "%s", e.msg);
    plan_eval(&m, &c, &j, &l, &r);
    double sbh = 2048.0 * 1 * m.h;
    EXPECT(r.act_korthikanti == sbh * (34 + 5.0 * m.a * 2048 / m.h), "Korthikanti expression");
    EXPECT(r.flops_token == 6.0 * r.params + 12.0 * m.L * m.h * 2048, "6N + 12Lhs");
    // fused attention: no s² term — activations linear in s; naive: more than linear
    PlanJob j2 = j;
    j2.seq = 4096;
    double a1 = plan_act_layer(&m, &j, &l), a2 = plan_act_layer(&m, &j2, &l);
    EXPECT(fabs(a2 / a1 - 2) < 1e-12, "fused attention activations scale with s (%.6f)", a2 / a1);
    l.naive_attention = 1;
    EXPECT(plan_act_layer(&m, &j2, &l) / plan_act_layer(&m, &j, &l) > 2.1, "naive attention has the s² term");
    l.naive_attention = 0;
    // sequence parallelism and tensor parallelism shrink activations; full recompute keeps only the input
    Layout sp = l;
    sp.sp = 1;
    EXPECT(plan_act_layer(&m, &j, &sp) < a1, "sequence parallel");
    Layout full = l;
    full.recompute = RECOMPUTE_FULL;
    EXPECT(plan_act_layer(&m, &j, &full) == 4.0 * sbh, "full recompute keeps the s·b·h layer input (fp32)");
    plan_eval(&m, &c, &j, &full, &r);
    EXPECT(r.hw_flops_token == 8.0 * r.params + 16.0 * m.L * m.h * 2048, "hardware FLOPs with full recompute");
}

// Narayanan et al. 2021, eq. 4: 8·T·P/(n·X).
static void test_megatron_estimates(void) {
    Err e;
    PlanModel m;
    PlanResult r;
    plan_model_preset(&m, "gpt3-175b", &e);
    PlanCluster c = cluster(1024);
    c.tflops = 140;
    c.mfu = 1;   // X is the achieved throughput
    PlanJob j = {2048, 1536, 1, 300e9, 0};
    Layout l = {.dp = 8, .tp = 8, .pp = 16, .precision = PREC_BF16, .recompute = RECOMPUTE_FULL};
    EXPECT(plan_check(&m, &c, &j, &l, &e) == 0, "%s", e.msg);
    plan_eval(&m, &c, &j, &l, &r);
    EXPECT(fabs(r.megatron_days - 34) < 0.5, "175B: %.2f days, paper ≈ 34", r.megatron_days);
    plan_model_preset(&m, "megatron-1t", &e);
    c = cluster(3072);
    c.tflops = 163;
    c.mfu = 1;
    j = (PlanJob){2048, 3072, 1, 450e9, 0};
    l = (Layout){.dp = 6, .tp = 8, .pp = 64, .precision = PREC_BF16, .recompute = RECOMPUTE_FULL};
    EXPECT(plan_check(&m, &c, &j, &l, &e) == 0, "%s", e.msg);
    plan_eval(&m, &c, &j, &l, &r);
    EXPECT(fabs(r.megatron_days - 84) < 1.0, "1T: %.2f days, paper ≈ 84", r.megatron_days);
}

// The planner against tessera's allocator, one process: the weights (fp32,
// or bf16/fp16's 16-bit copy), the optimizer (bf16/fp16: the fp32 masters
// with the moments) and the activations to the byte, for every
// recomputation mode and precision. The gradients: fp32's; under bf16/fp16
// the planner counts the ZeRO paper's 16-bit gradients, tessera keeps fp32
// ones (twice the bytes).
static void check_against_tessera(const char *preset, int vocab, int B, int T, Recompute rc, Precision prec) {
    Err e;
    ModelConfig mc;
    config_preset(&mc, preset, &e);
    config_set_vocab(&mc, vocab);
    size_t p0 = mem_current(MEM_PARAMS), g0 = mem_current(MEM_GRADS), o0 = mem_current(MEM_OPTIM), a0 = mem_current(MEM_ACTS);
    size_t h0 = mem_current(MEM_PARAMS16);
    Stage st;
    ModelSlice sl = slice_whole(&mc);
    AdamW opt;
    unsigned flags = rc == RECOMPUTE_FULL ? STAGE_RECOMPUTE_FULL : rc == RECOMPUTE_SELECTIVE ? STAGE_RECOMPUTE_SELECTIVE : 0;
    flags |= stage_prec_flag(prec);
    EXPECT(stage_init(&st, &mc, &sl, B, T, 1, flags, &e) == 0 && adamw_init(&opt, st.table.total, &e) == 0, "%s", e.msg);
    PlanModel m;
    plan_model_from_config(&m, &mc);
    PlanCluster c = cluster(1);
    PlanJob j = {T, B, B, 0, 0};
    Layout l = {.dp = 1, .tp = 1, .pp = 1, .precision = prec, .recompute = rc};
    PlanResult r;
    EXPECT(plan_check(&m, &c, &j, &l, &e) == 0, "%s", e.msg);
    plan_eval(&m, &c, &j, &l, &r);
    double params = (double)(mem_current(MEM_PARAMS) - p0), params16 = (double)(mem_current(MEM_PARAMS16) - h0);
    double grads = (double)(mem_current(MEM_GRADS) - g0), optim = (double)(mem_current(MEM_OPTIM) - o0);
    const char *pn = prec_name(prec);
    if (prec == PREC_FP32) {
        EXPECT(r.weights == params && params16 == 0, "%s weights %.0f vs allocator %.0f", preset, r.weights, params);
        EXPECT(r.grads == grads && r.optim == optim, "%s grads, optimizer", preset);
    } else {
        EXPECT(r.weights == params16, "%s %s weights %.0f vs the 16-bit copy's %.0f", preset, pn, r.weights, params16);
        EXPECT(r.optim == optim + params, "%s %s optimizer %.0f vs masters and moments %.0f", preset, pn, r.optim,
               optim + params);
        EXPECT(2 * r.grads == grads, "%s %s gradients %.0f vs fp32 %.0f", preset, pn, r.grads, grads);
    }
    double acts = (double)(mem_current(MEM_ACTS) - a0);
    EXPECT(r.act_exact && r.acts == acts, "%s %s recompute %d: activations %.0f predicted vs %.0f allocated", preset, pn,
           rc, r.acts, acts);
    EXPECT(fabs(r.act_formula - acts) < 0.10 * acts, "%s %s recompute %d: the formula's activations %.4g vs %.4g allocated",
           preset, pn, rc, r.act_formula, acts);
    EXPECT(r.bytes_dp == 0 && r.bytes_tp == 0 && r.bytes_pp == 0, "one process communicates nothing");
    adamw_free(&opt);
    stage_free(&st);
}

static void test_against_tessera(void) {
    for (int p = 0; p < PREC_COUNT; p++)
        for (int rc = 0; rc < 3; rc++) {
            check_against_tessera("gpt2-tiny", 256, 12, 64, (Recompute)rc, (Precision)p);
            check_against_tessera("gpt2-tiny", 50257, 4, 32, (Recompute)rc, (Precision)p);
            check_against_tessera("gpt2-124m", 50257, 4, 64, (Recompute)rc, (Precision)p);
            check_against_tessera("llama-tiny", 256, 6, 64, (Recompute)rc, (Precision)p);
            check_against_tessera("llama-120m", 32000, 2, 64, (Recompute)rc, (Precision)p);
        }
}

// The interleaved schedule (V chunks per stage): the bubble shrinks V-fold,
// stage 0 holds its warm-up chunks and one more, and each micro-batch
// crosses V times the boundaries; its rules are checked.
static void test_interleaved(void) {
    Err e;
    PlanModel m;
    plan_model_preset(&m, "gpt2-124m", &e);
    PlanCluster c = cluster(4);
    PlanJob j = {1024, 16, 1, 1e9, 0};
    Layout l = {.dp = 1, .tp = 1, .pp = 4, .precision = PREC_BF16};
    PlanResult one, three;
    EXPECT(plan_check(&m, &c, &j, &l, &e) == 0, "%s", e.msg);
    plan_eval(&m, &c, &j, &l, &one);
    l.vstages = 3;
    EXPECT(plan_check(&m, &c, &j, &l, &e) == 0, "%s", e.msg);
    plan_eval(&m, &c, &j, &l, &three);
    EXPECT(fabs(one.t_bubble / one.t_compute - 3.0 / 16) < 1e-12, "1F1B bubble %g of compute", one.t_bubble / one.t_compute);
    EXPECT(fabs(three.t_bubble / three.t_compute - 3.0 / 48) < 1e-12, "interleaved bubble %g of compute",
           three.t_bubble / three.t_compute);
    EXPECT(one.inflight == 4 && three.inflight == 2 * 3 + 2 * 4 + 1, "in flight: %lld micro-batches, %lld chunks",
           (long long)one.inflight, (long long)three.inflight);
    double sbh2 = 1024.0 * 768 * 2;   // one bf16 boundary message
    EXPECT(one.bytes_pp == 2 * 16 * sbh2 && three.bytes_pp == 2 * 3 * 16 * sbh2, "pp bytes %g and %g", one.bytes_pp,
           three.bytes_pp);
    // activations: 15 chunks of one layer against 4 micro-batches of 3
    EXPECT(fabs((three.act_formula - one.act_formula) - one.act_layer * (15 - 12)) < 1, "acts %g vs %g", three.act_formula,
           one.act_formula);
    EXPECT(one.act_exact && three.act_exact && three.acts > one.acts, "tessera's layout: %g and %g", one.acts, three.acts);
    l.vstages = 5;
    EXPECT(plan_check(&m, &c, &j, &l, &e) == -1 && strstr(e.msg, "do not divide the 12 layers"), "%s", e.msg);
    l.vstages = 3;
    j.global_batch = 6;
    EXPECT(plan_check(&m, &c, &j, &l, &e) == -1 && strstr(e.msg, "multiple of pp=4"), "%s", e.msg);
    j.global_batch = 16;
    l.schedule = PIPE_GPIPE;
    EXPECT(plan_check(&m, &c, &j, &l, &e) == -1 && strstr(e.msg, "1F1B"), "%s", e.msg);
}

static void test_invalid_and_sweep(void) {
    Err e;
    PlanModel m;
    plan_model_preset(&m, "gpt2-124m", &e);
    PlanCluster c = cluster(8);
    PlanJob j = {1024, 64, 1, 1e9, 0};
    Layout l = {.dp = 1, .tp = 8, .pp = 1, .precision = PREC_BF16};
    EXPECT(plan_check(&m, &c, &j, &l, &e) == -1 && strstr(e.msg, "heads"), "tp=8 with 12 heads: %s", e.msg);
    l = (Layout){.dp = 3, .tp = 1, .pp = 1};
    EXPECT(plan_check(&m, &c, &j, &l, &e) == -1 && strstr(e.msg, "devices"), "dp·tp·pp != devices: %s", e.msg);
    l = (Layout){.dp = 2, .tp = 1, .pp = 4, .schedule = PIPE_1F1B};
    j.global_batch = 4;
    EXPECT(plan_check(&m, &c, &j, &l, &e) == -1 && strstr(e.msg, "1F1B"), "too few micro-batches: %s", e.msg);
    // inputs that hold for no layout: the sequence beyond the positions, nodes of unequal size
    PlanJob jl = {2048, 64, 1, 1e9, 0};
    EXPECT(plan_check_inputs(&m, &c, &jl, &e) == -1 && strstr(e.msg, "--seq 2048 is above the model's 1024 positions"),
           "%s", e.msg);
    PlanCluster c12 = cluster(12), c4 = cluster(4);
    EXPECT(plan_check_inputs(&m, &c12, &j, &e) == -1 && strstr(e.msg, "does not divide --devices 12"), "%s", e.msg);
    EXPECT(plan_check_inputs(&m, &c4, &j, &e) == 0, "4 devices in one node of 8: %s", e.msg);
    // a grid of inputs, valid or not: check then evaluate; never crash, never NaN
    int evaluated = 0, bad = 0;
    int64_t devs[] = {1, 2, 3, 8, 64, 1024}, seqs[] = {1, 128, 2048}, gbs[] = {1, 7, 512};
    int tps[] = {1, 2, 3, 8}, pps[] = {1, 2, 4, 12}, zs[] = {0, 1, 2, 3};
    const char *models[] = {"gpt2-tiny", "gpt3-175b", "llama2-70b"};
    for (int mi = 0; mi < 3; mi++) {
        plan_model_preset(&m, models[mi], &e);
        for (int a = 0; a < 6; a++) for (int b = 0; b < 3; b++) for (int g = 0; g < 3; g++)
        for (int t = 0; t < 4; t++) for (int p = 0; p < 4; p++) for (int z = 0; z < 4; z++) {
            PlanCluster cc = cluster(devs[a]);
            PlanJob jj = {seqs[b], gbs[g], 1, 1e12, 0};
            int dp = (int)(devs[a] / (tps[t] * pps[p]));
            Layout ll = {.dp = dp > 0 ? dp : 1, .tp = tps[t], .pp = pps[p], .zero = zs[z], .recompute = (a + b) % 3,
                             .precision = (Precision)(g % 3), .sp = t % 2, .naive_attention = !(p % 2),
                             .schedule = (PipeSchedule)(z % 2), .vstages = 1 + (g + b) % 3};
            if (plan_check(&m, &cc, &jj, &ll, &e)) continue;
            PlanResult r;
            plan_eval(&m, &cc, &jj, &ll, &r);
            evaluated++;
            bad += !isfinite(r.total) || !isfinite(r.t_step) || r.t_step <= 0 || r.total <= 0 || !isfinite(r.mfu);
        }
    }
    EXPECT(evaluated > 100 && bad == 0, "%d layouts evaluated, %d with non-finite results", evaluated, bad);
}

// --ckpt-async's staging copy in the layout's memory model (and so in the
// planner's total): the parameters and both moments of the pieces a rank
// writes — all of them in one process, 1/dp under ZeRO >= 1, and on the
// last stage of a tied pipeline all but the embeddings' copy. (Each run of
// the trainer checks the figure against the buffer it allocates.)
static void test_ckpt_staging(void) {
    Err e;
    ModelConfig mc;
    config_preset(&mc, "gpt2-tiny", &e);
    config_set_vocab(&mc, 256);
    LayoutMemory off, on, last;
    Layout one = {.dp = 1, .tp = 1, .pp = 1}, async = one;
    async.ckpt_async = 1;
    EXPECT(layout_memory(&one, &mc, 0, 2, 64, 1, &off, &e) == 0 && layout_memory(&async, &mc, 0, 2, 64, 1, &on, &e) == 0,
           "%s", e.msg);
    EXPECT(off.ckpt == 0 && on.ckpt == 12.0 * on.floats && on.total == off.total + on.ckpt, "one process: %.0f of %lld floats",
           on.ckpt, (long long)on.floats);
    Layout z1 = {.dp = 2, .tp = 1, .pp = 1, .zero = 1, .ckpt_async = 1};
    EXPECT(layout_memory(&z1, &mc, 0, 2, 64, 1, &on, &e) == 0 && on.ckpt == 6.0 * on.floats, "ZeRO-1 dp=2: %.0f", on.ckpt);
    Layout pp = {.dp = 1, .tp = 1, .pp = 2, .ckpt_async = 1};
    ModelSlice sl;
    ParamTable pt;
    EXPECT(layout_memory(&pp, &mc, 1, 2, 64, 2, &last, &e) == 0 && layout_slice_of(&pp, &mc, 1, 0, &sl, &e) == 0 &&
           ptable_build(&pt, &mc, &sl, &e) == 0, "%s", e.msg);
    EXPECT(pt.seg[0].part == PART_EMBED && last.ckpt == 12.0 * (double)(pt.total - pt.seg[0].hi),
           "last stage: %.0f, its tied copy left out", last.ckpt);
    ptable_free(&pt);
    PlanModel m;
    plan_model_from_config(&m, &mc);
    PlanCluster c = {.devices = 1, .per_node = 1, .mem_gb = 80, .tflops = 1, .mfu = 0.5, .bw_intra = 1, .bw_inter = 1};
    PlanJob j = {64, 2, 2, 0, 0};
    PlanResult r0, r1;
    EXPECT(plan_check(&m, &c, &j, &one, &e) == 0, "%s", e.msg);
    plan_eval(&m, &c, &j, &one, &r0);
    plan_eval(&m, &c, &j, &async, &r1);
    EXPECT(r0.ckpt == 0 && r1.ckpt == 12.0 * r1.params_device && r1.total == r0.total + r1.ckpt, "planner: %.0f", r1.ckpt);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_param_counts);
    RUN(test_zero_states);
    RUN(test_activations_and_flops);
    RUN(test_megatron_estimates);
    RUN(test_against_tessera);
    RUN(test_interleaved);
    RUN(test_invalid_and_sweep);
    RUN(test_ckpt_staging);
    return test_finish();
}
