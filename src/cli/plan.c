// tessera plan — memory, FLOPs, communication and time for a model on a
// cluster, for one layout or the best ones.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "core/json.h"
#include "kernels/peak.h"
#include "model/arch.h"
#include "plan/plan.h"

// Where --disk-gbps's figure came from, for the offload's line
// (disk_default).
static char disk_src[320];

static const double GiB = 1073741824.0;

static const char *sched_name[] = {"1f1b", "gpipe"}, *rec_name[] = {"none", "selective", "full"};

static int pick(const char *v, const char *const *names, int n, const char *flag, int *out, Err *err) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) { *out = i; return 0; }
    return err_set(err, ERR_USAGE, "--%s: unknown value '%s'", flag, v);
}

static void commas(int64_t v, char *buf, size_t cap) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", (long long)(v < 0 ? -v : v));
    size_t n = strlen(tmp), o = 0;
    if (v < 0 && o + 1 < cap) buf[o++] = '-';
    for (size_t i = 0; i < n && o + 2 < cap; i++) {
        buf[o++] = tmp[i];
        if ((n - i - 1) % 3 == 0 && i + 1 < n) buf[o++] = ',';
    }
    buf[o] = 0;
}

static void print_layout(const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l,
                         const PlanResult *r, int explain) {
    char p[32], pd[32], f12[32];
    commas(r->params, p, sizeof p);
    commas(r->params_device, pd, sizeof pd);
    commas(r->params - arch_part_params(&m->cfg, PART_FINAL, 1, 0), f12, sizeof f12);   // the textbook count
    printf("model      %s: %s, %lld layers, width %lld, %lld heads (%lld kv), FFN %lld, vocabulary %lld, positions %lld\n",
           m->name, arch_of(&m->cfg)->summary,
           (long long)m->L, (long long)m->h, (long long)m->a, (long long)m->kv, (long long)m->f, (long long)m->V, (long long)m->s);
    printf("params     %s, final norm included (%s without it)", p, f12);
    printf("; busiest device holds %s\n", pd);
    int V = l->vstages > 1 ? l->vstages : 1;
    char sched[64];
    if (V > 1) snprintf(sched, sizeof sched, "interleaved 1f1b (%d virtual stages)", V);
    else snprintf(sched, sizeof sched, "%s", sched_name[l->schedule]);
    printf("layout     dp %d × tp %d × pp %d = %lld devices, ZeRO-%d, %s, recompute %s, %s%s, micro-batch %lld × %lld per step (%lld %sin flight)\n",
           l->dp, l->tp, l->pp, (long long)c->devices, l->zero, sched, rec_name[l->recompute],
           prec_name(l->precision), l->sp ? ", sequence parallel" : "", (long long)j->micro_batch,
           (long long)r->micro_batches, (long long)r->inflight, V > 1 ? "chunks " : "");
    printf("memory     weights %.2f + gradients %.2f + optimizer %.2f = model states %.2f GiB; activations %.2f; comm buffers %.2f\n",
           r->weights / GiB, r->grads / GiB, r->optim / GiB, r->model_states / GiB, r->acts / GiB, r->comm_buf / GiB);
    if (r->ckpt > 0) printf("           checkpoint staging (--ckpt-async) %.2f GiB\n", r->ckpt / GiB);
    printf("           total %.2f GiB per device of %.0f GiB: %s\n", r->total / GiB, c->mem_gb, r->fits ? "fits" : "DOES NOT FIT");
    if (l->offload)
        printf("offload    %s: %.3f GiB on disk per device (the AdamW moments%s%s), its ring of buffers in the optimizer's\n"
               "           figure; per step %.4g GB read and %.4g GB written, %.4g s exposed at %.3g GB/s (%s)\n",
               layout_offload_name(l->offload), r->disk / GiB,
               layout_offloads_masters(l) ? " and the fp32 masters" : "",
               l->offload == OFFLOAD_PARAMS ? ", and the owned parameter shard, read at each gather" : "", r->io_read / 1e9,
               r->io_written / 1e9, r->t_io, c->disk_gbps, disk_src);
    if (explain) {
        int mixed = l->precision != PREC_FP32;
        printf("  = states: (%s) × Ψ=%s%s\n", mixed ? "2 weights + 2 gradients + 12 fp32 master/m/v" : "4 + 4 + 8 (m, v)", pd,
               l->zero ? (l->zero == 1 ? ", optimizer / dp" : l->zero == 2 ? ", gradients and optimizer / dp" : ", all / dp") : "");
        printf("  = activations: %.3g B per layer per micro-batch × %lld layers × %lld %sin flight (+ stage input and final norm)"
               "%s\n", r->act_layer, (long long)(m->L / l->pp / V), (long long)r->inflight, V > 1 ? "chunks " : "",
               r->act_exact ? "" : " = the figure above");
        if (r->act_exact)
            printf("    = %.4g B by this formula; the figure above is tessera's own stage layout, to the byte (64-byte\n"
                   "    aligned buffers, norm statistics, losses, the fp32 set of the layer being recomputed or widened)\n",
                   r->act_formula);
        printf("    per layer: tensors tessera keeps for backward (norm outputs, q/k/v, attention output and log-sum-exp,\n"
               "    residual, FFN pre- and post-activation, output); Korthikanti et al. s·b·h·(34+5as/h) for a 16-bit\n"
               "    Megatron layer = %.3g B%s\n", r->act_korthikanti,
               !l->naive_attention ? " (its 5as/h term is the s² attention matrix, which fused attention does not keep)" : "");
        if (r->ckpt > 0)
            printf("  = checkpoint staging: 12 B (fp32 parameters, AdamW m and v) × the parameters a device writes%s\n",
                   l->zero ? " (its 1/dp)" : "");
    }
    printf("flops      %.4g per token (6N + 12·L·h·s, PaLM convention%s); hardware %.4g with recompute %s\n",
           r->flops_token, j->doc_len > 0 && j->doc_len < j->seq ? "; attention × (D+1)/(s+1), documents of D tokens" : "",
           r->hw_flops_token, rec_name[l->recompute]);
    printf("step       compute %.4g s, pipeline bubble %.4g s, tensor-parallel comm %.4g s, pipeline comm %.4g s,\n"
           "           data-parallel comm %.4g s (%.4g exposed after overlap with backward) -> step %.4g s\n",
           r->t_compute, r->t_bubble, r->t_tp, r->t_pp, r->t_dp, r->t_dp_exposed, r->t_step);
    if (l->offload)
        printf("           (the step includes the offload's disk I/O not hidden, %.4g s: the reads during forward and backward\n"
               "           (the optimizer ring's first units, the parameters' gathers) beyond the compute's time, and the rest\n"
               "           of the optimizer's files, read and written around the update, whole)\n", r->t_io);
    printf("comm       per device per step: dp %.4g GB, tp %.4g GB, pp %.4g GB\n", r->bytes_dp / 1e9, r->bytes_tp / 1e9, r->bytes_pp / 1e9);
    if (c->devices > c->per_node) {   // which groups the network carries
        char in[48] = "", out[48] = "";
        const char *name[3] = {"tp", "dp", "pp"};
        int size[3] = {l->tp, l->dp, l->pp}, inter[3] = {0, r->dp_inter, r->pp_inter};
        for (int k = 0; k < 3; k++) {
            if (size[k] == 1) continue;
            char *d = inter[k] ? out : in;
            size_t n = strlen(d);
            snprintf(d + n, sizeof in - n, "%s%s", n ? ", " : "", name[k]);
        }
        printf("placement  inside a node: %s; across nodes: %s\n", in[0] ? in : "none", out[0] ? out : "none");
    }
    if (explain) {
        printf("  = compute: %lld tokens × %.4g FLOPs / (%lld devices × %.4g TFLOP/s × MFU %.2f)\n",
               (long long)(j->global_batch * j->seq), r->hw_flops_token, (long long)c->devices, c->tflops, c->mfu);
        static const char *dpw[] = {"ring 2(d−1)/d × gradient bytes", "ring 2(d−1)/d × gradient bytes",
                                    "(d−1)/d × gradient bytes × (micro-batches + 1): a reduce-scatter per micro-batch, "
                                    "one allgather",
                                    "(d−1)/d × (2 × parameter bytes − embeddings/head + gradient bytes) per micro-batch: "
                                    "parameters gathered for forward and backward (≈1.5× DDP)"};
        printf("  = bubble: compute × (pp−1)/(%smicro-batches); dp: %s;\n    tp: per micro-batch 4 allreduces of s·b·h per layer"
               " (2(t−1)/t each; with --sp a reduce-scatter and an allgather, (t−1)/t each) + 1 for the\n"
               "    vocabulary-parallel embedding + 1 for the output head + (t−1)·3·s·b floats of loss statistics%s;\n"
               "    pp: 2·s·b·h per micro-batch per boundary%s; latency α per message (%.0f tensor-parallel messages per step)\n",
               V > 1 ? "V × " : "", dpw[l->zero], l->sp ? " + the norms' gradient sums (4h per layer, 2h final)" : "",
               V > 1 ? " of each of a stage's V chunks" : "", r->tp_messages);
    }
    printf("speed      %.4g tokens/s, MFU %.1f%%\n", r->tokens_per_s, 100 * r->mfu);
    if (j->tokens > 0)
        printf("training   %.4g tokens: %.4g days, %.4g device-hours (Megatron-LM eq. 4, 8·T·P/(n·X): %.4g days)\n", j->tokens,
               r->days, r->device_hours, r->megatron_days);
}

static void json_layout(const PlanModel *m, const PlanCluster *c, const Layout *l, const PlanResult *r) {
    JsonBuf b;
    jb_init(&b);
    jb_obj_begin(&b);
    jb_key(&b, "model"); jb_str(&b, m->name);
    jb_key(&b, "params"); jb_int(&b, r->params);
    jb_key(&b, "params_device"); jb_int(&b, r->params_device);
    jb_key(&b, "layout"); jb_obj_begin(&b);
    jb_key(&b, "dp"); jb_int(&b, l->dp); jb_key(&b, "tp"); jb_int(&b, l->tp); jb_key(&b, "pp"); jb_int(&b, l->pp);
    jb_key(&b, "zero"); jb_int(&b, l->zero); jb_key(&b, "schedule"); jb_str(&b, sched_name[l->schedule]);
    jb_key(&b, "virtual_stages"); jb_int(&b, l->vstages > 1 ? l->vstages : 1);
    jb_key(&b, "recompute"); jb_str(&b, rec_name[l->recompute]); jb_key(&b, "precision"); jb_str(&b, prec_name(l->precision));
    jb_key(&b, "sp"); jb_bool(&b, l->sp);
    jb_key(&b, "offload"); jb_str(&b, layout_offload_name(l->offload));
    jb_obj_end(&b);
    jb_key(&b, "weights_bytes"); jb_num(&b, r->weights);
    jb_key(&b, "grads_bytes"); jb_num(&b, r->grads);
    jb_key(&b, "optim_bytes"); jb_num(&b, r->optim);
    jb_key(&b, "model_states_bytes"); jb_num(&b, r->model_states);
    jb_key(&b, "activations_bytes"); jb_num(&b, r->acts);
    jb_key(&b, "comm_buffer_bytes"); jb_num(&b, r->comm_buf);
    jb_key(&b, "ckpt_staging_bytes"); jb_num(&b, r->ckpt);
    jb_key(&b, "total_bytes"); jb_num(&b, r->total);
    if (l->offload) {
        jb_key(&b, "offload_bytes"); jb_num(&b, r->disk);
        jb_key(&b, "io_read_bytes"); jb_num(&b, r->io_read);
        jb_key(&b, "io_written_bytes"); jb_num(&b, r->io_written);
        jb_key(&b, "io_gather_bytes"); jb_num(&b, r->io_gather);
        jb_key(&b, "io_seconds"); jb_num(&b, r->t_io);
        jb_key(&b, "disk_gbps"); jb_num(&b, c->disk_gbps);
        jb_key(&b, "disk_gbps_source"); jb_str(&b, disk_src);
    }
    jb_key(&b, "device_bytes"); jb_num(&b, c->mem_gb * GiB);
    jb_key(&b, "fits"); jb_bool(&b, r->fits);
    jb_key(&b, "flops_per_token"); jb_num(&b, r->flops_token);
    jb_key(&b, "hw_flops_per_token"); jb_num(&b, r->hw_flops_token);
    jb_key(&b, "step_seconds"); jb_num(&b, r->t_step);
    jb_key(&b, "compute_seconds"); jb_num(&b, r->t_compute);
    jb_key(&b, "bubble_seconds"); jb_num(&b, r->t_bubble);
    jb_key(&b, "inter_node"); jb_obj_begin(&b);
    jb_key(&b, "dp"); jb_bool(&b, r->dp_inter);
    jb_key(&b, "tp"); jb_bool(&b, 0);
    jb_key(&b, "pp"); jb_bool(&b, r->pp_inter);
    jb_obj_end(&b);
    jb_key(&b, "comm_bytes"); jb_obj_begin(&b);
    jb_key(&b, "dp"); jb_num(&b, r->bytes_dp); jb_key(&b, "tp"); jb_num(&b, r->bytes_tp); jb_key(&b, "pp"); jb_num(&b, r->bytes_pp);
    jb_obj_end(&b);
    jb_key(&b, "comm_seconds"); jb_obj_begin(&b);
    jb_key(&b, "dp"); jb_num(&b, r->t_dp); jb_key(&b, "dp_exposed"); jb_num(&b, r->t_dp_exposed);
    jb_key(&b, "tp"); jb_num(&b, r->t_tp); jb_key(&b, "pp"); jb_num(&b, r->t_pp);
    jb_obj_end(&b);
    jb_key(&b, "tokens_per_s"); jb_num(&b, r->tokens_per_s);
    jb_key(&b, "mfu"); jb_num(&b, r->mfu);
    jb_key(&b, "days"); jb_num(&b, r->days);
    jb_key(&b, "device_hours"); jb_num(&b, r->device_hours);
    jb_key(&b, "megatron_eq4_days"); jb_num(&b, r->megatron_days);
    jb_obj_end(&b);
    puts(b.s);
    jb_free(&b);
}

// The tutorial's back-of-envelope numbers for GPT-3 175B, next to exact ones.
static void tutorial(const PlanModel *m) {
    double P = (double)plan_params(m), h = (double)m->h, L = (double)m->L, s = (double)m->s;
    printf("The tutorial's calculations for %s, checked:\n", m->name);
    printf("  %-44s %-22s %s\n", "claim", "tutorial", "exact");
    printf("  %-44s %-22s %.1f GB (%.0f parameters × 4 B)\n", "fp32 weights", "700 GB", P * 4 / 1e9, P);
    printf("  %-44s %-22s %.2f TB (16 B per parameter: weights, gradients, Adam m and v)\n", "with gradients and Adam", "2.8 TB", P * 16 / 1e12);
    printf("  %-44s %-22s %.1f → %d cards (model states only; activations need more)\n", "32 GB cards needed", "~90", P * 16 / 32e9, (int)ceil(P * 16 / 32e9));
    printf("  %-44s %-22s %.3g (6N), %.3g with attention (6N + 12·L·h·s)\n", "FLOPs per token", "6 × 175B = 1.05e12", 6 * P, 6 * P + 12 * L * h * s);
    printf("  %-44s %-22s %.3g (6N), %.3g with attention\n", "FLOPs for 1T tokens", "1.05e24", 6 * P * 1e12, (6 * P + 12 * L * h * s) * 1e12);
    double secs = 6 * P * 1e12 / 300e12;
    printf("  %-44s %-22s %.3g s = %.0f days = %.1f years (wrong by ~100×)\n", "one 300 TFLOP/s card, 1T tokens", "405 days", secs, secs / 86400, secs / 86400 / 365.25);
    printf("  %-44s %-22s %.1f s: a ring allreduce sends 2(n−1)/n ≈ 2× the gradient bytes\n", "700 GB of gradients at 100 GB/s", "7 s per step", 2 * P * 4 / 100e9);
    printf("  %-44s %-22s %.1f s with bf16 gradients (2 B each)\n", "", "", 2 * P * 2 / 100e9);
}

// --why-not dp=N,tp=N,pp=N[,zero=Z]: sizes in 1..2^30, a stage in 0..3,
// nothing after them.
static int parse_why_not(const char *s, int *dp, int *tp, int *pp, int *zero, Err *e) {
    static const char *keys[] = {"dp=", ",tp=", ",pp=", ",zero="};
    int *dst[] = {dp, tp, pp, zero};
    const char *p = s;
    for (int k = 0; k < 4; k++) {
        size_t n = strlen(keys[k]);
        if (k == 3 && !*p) break;   // zero is optional
        char *end;
        long v = strncmp(p, keys[k], n) ? -1 : strtol(p + n, &end, 10);
        if (v < 0 || end == p + n || v > (k == 3 ? 3 : 1 << 30) || (k < 3 && v < 1))
            return err_set(e, ERR_USAGE, "--why-not: expected dp=N,tp=N,pp=N[,zero=Z] (N in 1..2^30, Z in 0..3), got '%s'", s);
        *dst[k] = (int)v;
        p = end;
    }
    if (*p) return err_set(e, ERR_USAGE, "--why-not: unexpected '%s' after the layout in '%s'", p, s);
    return 0;
}

// What plan's flags give (their defaults in plan_flags).
typedef struct {
    const char *model, *config, *arch, *schedule, *recompute, *precision, *reduce, *attention, *why_not, *offload;
    int64_t devices, per_node, seq, gbatch, mbatch, vocab;
    double mem, tflops, mfu, bw_intra, bw_inter, alpha, tokens, doc_len, disk_gbps;
    int dp, tp, pp, zero, sp, json, explain, top, tut, vstages, local, ckpt_async;
    int layers, d_model, heads, kv_heads, d_ff, positions;   // shape flags over the preset or config
    int given_devices, given_per_node, given_mem, given_tflops;   // on the command line or in --config: --local keeps them
} PlanArgs;

// --local: this machine as the cluster, a device being one core's thread (as
// `tessera train --nproc N` runs): devices and devices per node the online
// cores, the memory the physical memory shared out, the peak the
// register-only probe's for one thread at the precision (kernels/peak). A
// flag given on the command line or in --config wins.
static void local_cluster(PlanArgs *a, Precision prec) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (!a->given_devices) a->devices = cores > 0 ? cores : 1;
    if (!a->given_per_node) a->per_node = a->devices;
    if (!a->given_mem && pages > 0 && page > 0)
        a->mem = (double)pages * (double)page / GiB / (double)a->devices;
    if (!a->given_tflops) {
        Peaks p;
        peak_probe(&p, 1);
        if (peak_for(&p, prec) > 0) a->tflops = peak_for(&p, prec) * 1e-3;
    }
}

// --disk-gbps not given: under --local the offload's own passes over 48 MB
// of files where train would put them ($TMPDIR, else /tmp; comm-bench
// --disk's measure, page cache included: a few tens of ms), else the
// constant 2 GB/s (an NVMe SSD's order) of a cluster not in hand.
static void disk_default(PlanArgs *a) {
    if (a->disk_gbps > 0) {
        snprintf(disk_src, sizeof disk_src, "--disk-gbps");
        return;
    }
    a->disk_gbps = 2;
    snprintf(disk_src, sizeof disk_src, "the default for a cluster not in hand; --local measures this machine's");
    if (!a->local) return;
    const char *dir = getenv("TMPDIR");
    if (!dir || !dir[0]) dir = "/tmp";
    double gbps = 0;
    size_t files = 0;
    Err e;
    if (disk_probe(dir, 48u << 20, 2, 1, &gbps, &files, &e) == 0 && gbps > 0) {
        a->disk_gbps = gbps;
        snprintf(disk_src, sizeof disk_src, "measured here: the offload's passes over %zu MB in %.200s, page cache included",
                 files >> 20, dir);
    } else {
        snprintf(disk_src, sizeof disk_src, "the default: %.200s could not be measured", dir);
    }
}

// plan's flag table: fills *a from the defaults, --config and the command
// line, or prints the usage (*help). *cfg holds --config's JSON, which
// a's strings may point into (json_free it after the last use). 0, or -1
// with e.
static int plan_flags(PlanArgs *a, int argc, char **argv, int *help, Json **cfg, Err *e) {
    *a = (PlanArgs){.model = "gpt2-124m", .schedule = "1f1b", .recompute = "none", .precision = "bf16", .reduce = "fp32",
                    .attention = "fused", .devices = 8, .per_node = 8, .gbatch = 512, .mbatch = 1, .mem = 80, .tflops = 312,
                    .mfu = 0.5, .bw_intra = 300, .bw_inter = 25, .alpha = 5, .zero = -1, .top = 5, .vstages = 1,
                    .disk_gbps = 0};   // 0: not given (plan_setup picks the default)
    Flag f[] = {
        {"model", FLAG_STR, &a->model, 0, 0, "PRESET", "model (default gpt2-124m); see the list above", 0, NULL},
        {"config", FLAG_STR, &a->config, 0, 0, "FILE.json", "flags as a JSON object; \"model\" may be a preset or {arch, n_layer, n_head, d_model, d_ff, max_seq, vocab; llama: n_kv_head, rope_theta, norm_eps} (as tessera train's)", 0, NULL},
        {"vocab", FLAG_U64, &a->vocab, 2, 1 << 24, "V", "override the model's vocabulary (e.g. 256 for --tokenizer byte)", 0, NULL},
        {"arch", FLAG_STR, &a->arch, 0, 0, "A", "override the architecture (gpt2, llama, qwen2: the registry's)", 0, NULL},
        {"layers", FLAG_INT, &a->layers, 1, 1 << 20, "L", "override the layer count", 0, NULL},
        {"d-model", FLAG_INT, &a->d_model, 1, 1 << 24, "C", "override the width", 0, NULL},
        {"heads", FLAG_INT, &a->heads, 1, 1 << 20, "NH", "override the attention heads", 0, NULL},
        {"kv-heads", FLAG_INT, &a->kv_heads, 1, 1 << 20, "N", "override the key/value heads (grouped-query attention; llama only)", 0, NULL},
        {"d-ff", FLAG_INT, &a->d_ff, 1, 1 << 26, "F", "override the FFN width (default with --d-model: 4× it for gpt2)", 0, NULL},
        {"positions", FLAG_INT, &a->positions, 1, 1 << 24, "S", "override the positions (max sequence length)", 0, NULL},
        {"devices", FLAG_U64, &a->devices, 1, 1e7, "N", "devices in the cluster (default 8)", 0, NULL},
        {"devices-per-node", FLAG_U64, &a->per_node, 1, 1e4, "N", "devices per node: a divisor of --devices, or more than it (one node; default 8)", 0, NULL},
        {"device-mem", FLAG_FLOAT, &a->mem, 1e-6, 1e7, "GiB", "memory per device (default 80)", 0, NULL},
        {"device-tflops", FLAG_FLOAT, &a->tflops, 1e-6, 1e7, "X", "peak TFLOP/s per device at the training precision (default 312; with --local this CPU's, measured)", 0, NULL},
        {"local", FLAG_BOOL, &a->local, 0, 0, "", "this machine as the cluster: a device per core, its share of the memory, and the peak of one core's threads measured at --precision (register-only probes: fp32 FMA, or the bf16 dot product where the CPU has it); flags given win", 0, NULL},
        {"mfu", FLAG_FLOAT, &a->mfu, 1e-6, 1, "X", "fraction of peak the compute achieves (default 0.5)", 0, NULL},
        {"bw-intra", FLAG_FLOAT, &a->bw_intra, 1e-9, 1e9, "GB/s", "bandwidth per device inside a node (default 300)", 0, NULL},
        {"bw-inter", FLAG_FLOAT, &a->bw_inter, 1e-9, 1e9, "GB/s", "bandwidth per device between nodes (default 25)", 0, NULL},
        {"alpha-us", FLAG_FLOAT, &a->alpha, 0, 1e9, "US", "latency per message in µs (default 5)", 0, NULL},
        {"seq", FLAG_U64, &a->seq, 1, 1e9, "S", "sequence length (default: the model's positions)", 0, NULL},
        {"global-batch", FLAG_U64, &a->gbatch, 1, 1e12, "B", "sequences per optimizer step (default 512)", 0, NULL},
        {"micro-batch", FLAG_U64, &a->mbatch, 1, 1e9, "B", "sequences per micro-batch per device (default 1)", 0, NULL},
        {"tokens", FLAG_FLOAT, &a->tokens, 0, 1e30, "T", "tokens to train on, for the time estimate", 0, NULL},
        {"doc-len", FLAG_FLOAT, &a->doc_len, 1, 1e9, "D", "document masking (train --doc-mask): the expected document length; attention then counts D(D+1)/2 pairs per document, the factor (D+1)/(S+1) of the causal count (default: no masking)", 0, NULL},
        {"dp", FLAG_INT, &a->dp, 1, 1 << 30, "N", "data-parallel size (a layout; without dp/tp/pp: search)", 0, NULL},
        {"tp", FLAG_INT, &a->tp, 1, 1 << 30, "N", "tensor-parallel size", 0, NULL},
        {"pp", FLAG_INT, &a->pp, 1, 1 << 30, "N", "pipeline-parallel size", 0, NULL},
        {"zero", FLAG_INT, &a->zero, 0, 3, "Z", "ZeRO stage 0..3 (default 0 for a layout, all in a search)", 0, NULL},
        {"schedule", FLAG_STR, &a->schedule, 0, 0, "S", "1f1b (default) or gpipe", 0, NULL},
        {"virtual-stages", FLAG_INT, &a->vstages, 1, 64, "V", "interleaved 1F1B with V chunks per stage (a layout's; the search uses 1)", 0, NULL},
        {"recompute", FLAG_STR, &a->recompute, 0, 0, "R", "none (default), selective or full", 0, NULL},
        {"precision", FLAG_STR, &a->precision, 0, 0, "P", "fp32, bf16 (default) or fp16", 0, NULL},
        {"reduce-dtype", FLAG_STR, &a->reduce, 0, 0, "T", "gradient reduction dtype under bf16/fp16: fp32 (default) or bf16", 0, NULL},
        {"sp", FLAG_BOOL, &a->sp, 0, 0, "", "sequence parallelism (default false)", 0, NULL},
        {"offload", FLAG_STR, &a->offload, 0, 0, "optimizer|params", "the optimizer state on disk, as tessera train --offload optimizer keeps it, or (params, with --zero 3) that and the owned parameter shard ZeRO-3 gathers from: resident memory, bytes on disk, bytes read and written per step and their time at --disk-gbps not hidden (the reads during forward and backward, the optimizer ring's first units and the parameters' gathers, hidden up to the compute's time; the rest counted whole) (without it, a search that finds no layout that fits tries again with the optimizer offloaded, then the parameters too)", 0, NULL},
        {"disk-gbps", FLAG_FLOAT, &a->disk_gbps, 1e-6, 1e6, "GB/s", "bandwidth of the disk under --offload (default: with --local, measured here by the offload's own passes over 48 MB in $TMPDIR or /tmp read and written through the page cache as the offload does (no fsync), as tessera comm-bench --disk measures; else 2, an NVMe SSD's order)", 0, NULL},
        {"attention", FLAG_STR, &a->attention, 0, 0, "A", "fused (default, no s² activations) or naive", 0, NULL},
        {"ckpt-async", FLAG_BOOL, &a->ckpt_async, 0, 0, "", "count tessera train --ckpt-async's staging copy of the checkpoint pieces a device writes (its parameters and AdamW moments in fp32)", 0, NULL},
        {"json", FLAG_BOOL, &a->json, 0, 0, "", "one JSON object instead of text", 0, NULL},
        {"explain", FLAG_BOOL, &a->explain, 0, 0, "", "show the formula behind each figure", 0, NULL},
        {"top", FLAG_INT, &a->top, 1, 1000, "N", "layouts to list in a search (default 5)", 0, NULL},
        {"why-not", FLAG_STR, &a->why_not, 0, 0, "dp=N,tp=N,pp=N[,zero=Z]", "why a layout was not chosen", 0, NULL},
        {"tutorial", FLAG_BOOL, &a->tut, 0, 0, "", "the tutorial's GPT-3 numbers, checked", 0, NULL},
    };
    int nf = (int)(sizeof f / sizeof f[0]);
    if (flags_parse(f, nf, argc, argv, "plan", help, cfg, e)) return -1;
    if (*help) {
        printf("usage: tessera plan --model PRESET | --config FILE.json [--layers L --d-model C --heads NH ...] [cluster] [job] [layout]\n\n"
               "Predicts memory per device, FLOPs, communication, step time and training time; with a layout\n"
               "(--dp/--tp/--pp) for that layout, without one the best layouts. Presets: %s.\n\n", config_preset_list_all());
        flags_print(f, nf);
    }
    a->given_devices = flags_find(f, nf, "devices")->seen;
    a->given_per_node = flags_find(f, nf, "devices-per-node")->seen;
    a->given_mem = flags_find(f, nf, "device-mem")->seen;
    a->given_tflops = flags_find(f, nf, "device-tflops")->seen;
    return 0;
}

// The model: --config's model object (unless --model is on the command
// line, which wins) or the preset, then the shape flags and --vocab over it.
// 0, or -1 with e.
static int plan_model(const PlanArgs *a, int argc, char **argv, const Json *cfg, PlanModel *m, Err *e) {
    const Json *jm = cfg ? json_get(cfg, "model") : NULL;
    int model_on_argv = 0;   // --model on the command line wins over the config file
    for (int i = 0; i < argc; i++) model_on_argv |= !strncmp(argv[i], "--model", 7);
    if (jm && jm->type == JSON_OBJ && !model_on_argv) {
        ModelConfig mc;
        if (config_from_json(&mc, jm, e) || config_validate(&mc, e)) { err_prefix(e, "--config: model"); return -1; }
        plan_model_from_config(m, &mc);
    } else if (plan_model_preset(m, a->model, e)) {
        return -1;
    }
    if (a->arch || a->layers || a->d_model || a->heads || a->kv_heads || a->d_ff || a->positions) {
        ModelConfig mc = m->cfg;
        if (a->arch && config_arch_parse(a->arch, &mc.arch))
            return err_set(e, ERR_USAGE, "--arch: expected one of %s, got '%s'", config_arch_list(), a->arch);
        config_clear_foreign(&mc);   // another architecture's fields of the preset or config
        if (a->kv_heads && !(arch_registry[mc.arch]->keys & KEY_KV_HEADS))
            return err_set(e, ERR_USAGE, "--kv-heads: a %s model has no separate key/value heads (no grouped-query attention)",
                           config_arch_name(mc.arch));
        if (a->layers) mc.n_layer = a->layers;
        if (a->d_model) { mc.d_model = a->d_model; if (!a->d_ff) mc.d_ff = 4 * a->d_model; }
        if (a->heads) { mc.n_head = a->heads; if (!a->kv_heads) mc.n_kv_head = 0; }
        if (a->kv_heads) mc.n_kv_head = a->kv_heads;
        if (a->d_ff) mc.d_ff = a->d_ff;
        if (a->positions) mc.max_seq = a->positions;
        snprintf(mc.name, sizeof mc.name, "custom");
        if (config_validate(&mc, e)) return -1;
        plan_model_from_config(m, &mc);
    }
    if (a->vocab) plan_model_set_vocab(m, a->vocab);
    return 0;
}

// The job, the cluster (--local's figures where no flag gave them) and
// what every layout shares: schedule, recomputation, precision, reduction
// dtype, attention, SP, virtual stages, checkpoint staging. 0, or -1 with e.
static int plan_setup(PlanArgs *a, const PlanModel *m, PlanJob *j, PlanCluster *c, Layout *l, Err *e) {
    *j = (PlanJob){a->seq ? a->seq : m->s, a->gbatch, a->mbatch, a->tokens, a->doc_len};
    *l = (Layout){0};
    int s_ = 0, r_ = 0, p_ = 0, red_ = 0, att_ = 0;
    if (pick(a->schedule, sched_name, 2, "schedule", &s_, e) || pick(a->recompute, rec_name, 3, "recompute", &r_, e) ||
        pick(a->precision, (const char *[]){"fp32", "bf16", "fp16"}, 3, "precision", &p_, e) || pick(a->reduce, (const char *[]){"bf16", "fp32"}, 2, "reduce-dtype", &red_, e) ||
        pick(a->attention, (const char *[]){"naive", "fused"}, 2, "attention", &att_, e))
        return -1;
    if (a->local) local_cluster(a, (Precision)p_);
    disk_default(a);
    *c = (PlanCluster){a->devices, a->per_node, a->mem, a->tflops, a->mfu, a->bw_intra, a->bw_inter, a->alpha, a->disk_gbps};
    if (plan_check_inputs(m, c, j, e)) return -1;
    l->schedule = s_;
    l->recompute = r_;
    l->precision = p_;
    l->reduce_bf16 = !red_;
    l->naive_attention = !att_;
    l->sp = a->sp;
    l->vstages = a->vstages;
    l->ckpt_async = a->ckpt_async;
    l->offload = OFFLOAD_NONE;
    if (a->offload && layout_offload_parse(a->offload, &l->offload))
        return err_set(e, ERR_USAGE, "--offload: expected optimizer or params, got '%s'", a->offload);
    return 0;
}

// The layout --dp/--tp/--pp (or --why-not) name: its figures, or why it
// is not valid or does not fit. 0, or -1 with e.
static int plan_layout(const PlanArgs *a, const PlanModel *m, const PlanCluster *c, const PlanJob *j, Layout *l, Err *e) {
    l->tp = a->tp ? a->tp : 1;
    l->pp = a->pp ? a->pp : 1;
    l->dp = a->dp ? a->dp : (int)(c->devices / ((int64_t)l->tp * l->pp) > 0 ? c->devices / ((int64_t)l->tp * l->pp) : 1);
    l->zero = a->zero < 0 ? 0 : a->zero;
    if (plan_check(m, c, j, l, e)) {
        if (a->why_not) { printf("dp=%d,tp=%d,pp=%d,zero=%d is not a valid layout: %s\n", l->dp, l->tp, l->pp, l->zero, e->msg); return 0; }
        return -1;
    }
    PlanResult r;
    plan_eval(m, c, j, l, &r);
    if (a->json) json_layout(m, c, l, &r);
    else print_layout(m, c, j, l, &r, a->explain || a->why_not);
    if (a->why_not && !r.fits) printf("why not: needs %.2f GiB per device, more than the %.0f GiB it has\n", r.total / GiB, c->mem_gb);
    else if (a->why_not) printf("why not: it fits; it was ranked by step time (%.4g s) against the layouts the search lists\n", r.t_step);
    return 0;
}

// The search: every power-of-two tp inside a node, every pp dividing the
// layers, every ZeRO stage (or --zero's) and recomputation, ranked by step
// time, then memory; the best --top, or the best as JSON. 0, or -1 with e
// when none fits.
static int plan_search(const PlanArgs *a, const PlanModel *m, const PlanCluster *c, const PlanJob *j, const Layout *l, Err *e) {
    enum { MAXL = 4096 };
    static Layout cand[MAXL];
    static PlanResult res[MAXL];
    int n = 0, rejected_mem = 0, rejected_rule = 0, tried_offload = 0;
    double best_mem = 1e300;
    Layout base = *l;
again:
    for (int t = 1; t <= c->per_node && t <= m->a; t *= 2)
        for (int p = 1; p <= m->L; p++) {
            if (m->L % p || c->devices % ((int64_t)t * p)) continue;
            for (int z = 0; z <= 3; z++) {
                if (a->zero >= 0 && z != a->zero) continue;
                for (int rc = 0; rc < 3; rc++) {
                    Layout x = base;
                    x.tp = t; x.pp = p; x.dp = (int)(c->devices / ((int64_t)t * p)); x.zero = z; x.recompute = rc;
                    x.vstages = 1;
                    if (x.dp > 1 << 30) continue;
                    if (plan_check(m, c, j, &x, NULL)) { rejected_rule++; continue; }
                    PlanResult y;
                    plan_eval(m, c, j, &x, &y);
                    if (!y.fits) { rejected_mem++; if (y.total < best_mem) best_mem = y.total; continue; }
                    if (n < MAXL) { cand[n] = x; res[n] = y; n++; }
                }
            }
        }
    if (n == 0 && base.offload != OFFLOAD_PARAMS) {   // nothing fits in memory: the optimizer state on disk, then the parameters too
        base.offload = base.offload ? OFFLOAD_PARAMS : OFFLOAD_OPTIMIZER;
        tried_offload = base.offload;
        rejected_mem = rejected_rule = 0;
        goto again;
    }
    if (n == 0)
        return err_set(e, ERR_USAGE, "no layout fits%s: %d valid layouts need more than %.0f GiB per device (the smallest %.1f GiB), "
                       "%d break a rule (divisibility, batch, TP inside a node); add devices or memory",
                       tried_offload ? ", not even with the optimizer and the parameters offloaded to disk" : "", rejected_mem, c->mem_gb, best_mem < 1e300 ? best_mem / GiB : 0.0, rejected_rule);
    // rank by step time, then memory
    for (int x = 1; x < n; x++)
        for (int b = x; b > 0 && (res[b].t_step < res[b - 1].t_step ||
                                  (res[b].t_step == res[b - 1].t_step && res[b].total < res[b - 1].total)); b--) {
            Layout tl = cand[b]; cand[b] = cand[b - 1]; cand[b - 1] = tl;
            PlanResult tr = res[b]; res[b] = res[b - 1]; res[b - 1] = tr;
        }
    if (a->json) { json_layout(m, c, &cand[0], &res[0]); return 0; }
    char pbuf[32], tried[64] = "", given[48];
    if (tried_offload) snprintf(tried, sizeof tried, " with --offload %s (none without it)", layout_offload_name(base.offload));
    snprintf(given, sizeof given, " (--offload %s)", layout_offload_name(base.offload));
    commas(plan_params(m), pbuf, sizeof pbuf);
    printf("%s (%s parameters) on %lld devices (%lld per node, %.3g GiB, %.3g TFLOP/s at MFU %.2f), %s, seq %lld, global batch %lld, micro-batch %lld\n",
           m->name, pbuf, (long long)c->devices, (long long)c->per_node, c->mem_gb, c->tflops, c->mfu, prec_name(l->precision),
           (long long)j->seq, (long long)j->global_batch, (long long)j->micro_batch);
    printf("%4s %4s %4s %5s %-10s | %9s | %10s | %12s | %6s\n", "dp", "tp", "pp", "zero", "recompute", "GiB/dev", "step (s)",
           "tokens/s", "MFU");
    for (int k = 0; k < n && k < a->top; k++)
        printf("%4d %4d %4d %5d %-10s | %9.2f | %10.4g | %12.4g | %5.1f%%\n", cand[k].dp, cand[k].tp, cand[k].pp,
               cand[k].zero, rec_name[cand[k].recompute], res[k].total / GiB, res[k].t_step, res[k].tokens_per_s,
               100 * res[k].mfu);
    printf("%d layouts fit%s; %d valid ones need more memory than the device has; %d break a rule. Details: --dp/--tp/--pp, --why-not.\n",
           n, tried_offload ? tried : base.offload ? given : "",
           rejected_mem, rejected_rule);
    if (j->tokens > 0) printf("best layout trains %.4g tokens in %.4g days (%.4g device-hours)\n", j->tokens, res[0].days, res[0].device_hours);
    return 0;
}

// The flags, the model, then one layout or the search.
int cmd_plan(int argc, char **argv) {
    PlanArgs a;
    Json *cfg = NULL;   // --config's JSON lives to the end: the flags' strings may point into it
    int help = 0, rc = -1;
    Err e = {0};
    PlanModel m;
    PlanJob j;
    PlanCluster c;
    Layout l;
    if (plan_flags(&a, argc, argv, &help, &cfg, &e)) goto out;
    if (help) { rc = 0; goto out; }
    if (plan_model(&a, argc, argv, cfg, &m, &e)) goto out;
    if (a.tut) { tutorial(&m); rc = 0; goto out; }
    if (plan_setup(&a, &m, &j, &c, &l, &e)) goto out;
    if (a.why_not && parse_why_not(a.why_not, &a.dp, &a.tp, &a.pp, &a.zero, &e)) goto out;
    rc = a.dp || a.tp || a.pp ? plan_layout(&a, &m, &c, &j, &l, &e) : plan_search(&a, &m, &c, &j, &l, &e);
out:
    json_free(cfg);
    return rc ? cli_fail("plan", &e) : 0;
}
