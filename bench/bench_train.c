// bench_train — median time of one full training step (forward, backward,
// gradient norm, AdamW) of a preset model at B×T on random tokens, with
// tokens/s, MFU and peak memory. One configuration per process, so the
// peak memory is that configuration's.
//   bench_train PRESET B T VOCAB STEPS THREADS SGEMM_GFLOPS [fp32|bf16]
// SGEMM_GFLOPS -1 leaves the MFU/sg column out ("-"); 0 measures the ceiling again after every step (the best of
// two 2048³ products) and quotes each step against the ceiling measured
// next to it: MFU/sg is then the median of those ratios, which a busy
// moment of this shared machine moves far less than a ratio of two
// figures taken minutes apart. MFU/pk is against the peak of the arithmetic
// the step's products use, measured by kernels/peak's register-only probes
// (fp32 FMA at the widest vector, or the bf16 dot product under bf16).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kernels/matmul.h"
#include "kernels/peak.h"
#include "model/stage.h"
#include "optim/adamw.h"
#include "train/trainer.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long rss_peak_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) v = atol(line + 6);
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv) {
    Precision prec = PREC_FP32;
    if ((argc != 8 && argc != 9) || (argc == 9 && prec_parse(argv[8], &prec))) {
        fprintf(stderr, "usage: bench_train PRESET B T VOCAB STEPS THREADS SGEMM_GFLOPS [fp32|bf16|fp16]\n");
        return 2;
    }
    int B = atoi(argv[2]), T = atoi(argv[3]), V = atoi(argv[4]), steps = atoi(argv[5]), threads = atoi(argv[6]);
    double ceiling = atof(argv[7]);
    Err e;
    ModelConfig c;
    if (config_preset(&c, argv[1], &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
    config_set_vocab(&c, V);
    kernels_set_threads(threads);
    Peaks pk;
    peak_probe(&pk, threads);
    matmul_bf16_allow(peak_bf16_pays(&pk));   // as the trainer: bf16 products where their unit outruns fp32
    Stage st;
    ModelSlice s = slice_whole(&c);
    AdamW opt;
    if (stage_init(&st, &c, &s, B, T, 1, stage_prec_flag(prec), &e) || adamw_init(&opt, st.table.total, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    ptable_init(&st.table, st.params, 1);
    stage_fuse_norm(&st, 1);   // as one rank's trainer: the last products take the norm's sums
    int *tok = malloc(sizeof(int) * B * T), *tgt = malloc(sizeof(int) * B * T);
    AdamWConfig oc = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    float lr = 1e-4f;
    double *t = malloc(sizeof(double) * (steps + 1)), *ratio = malloc(sizeof(double) * (steps + 1));
    double *ceil_at = malloc(sizeof(double) * (steps + 1)), fpt = arch_flops_token(&c, T) * B * T * 1e-9;
    for (int i = -1; i < steps; i++) {   // one warm-up step
        for (int k = 0; k < B * T; k++) {
            tok[k] = (int)rng_below(1, 1, (uint64_t)(i + 1) * B * T + k, V);
            tgt[k] = (int)rng_below(1, 2, (uint64_t)(i + 1) * B * T + k, V);
        }
        double t0 = timer_now();
        // the trainer's step on one process: the first backward writes the gradients (no zeroing
        // pass), the update writes the 16-bit copy the passes read (bf16/fp16) as it goes, and the
        // norm reads only the gradients whose sums the products did not take
        stage_grads_begin(&st);
        stage_microbatch(&st, 0, 1);
        stage_forward(&st, 0, tok, tgt, B, T, 1.0f / (B * T));
        stage_backward(&st, 0, tok, B, T);
        stage_microbatch(&st, 0, 0);
        size_t nread = 0;
        double norm = sqrt(sum_squares_taken(&st.table, st.grads, 0, st.table.total, stage_grad_sumsq(&st), &nread));
        Precision prec16 = PREC_FP32;
        uint16_t *p16 = stage_params16(&st, &prec16);
        OptPiece piece = {0, st.table.total, st.params, st.grads, 0, p16, prec16, NULL, NULL};
        adamw_begin_step(&opt);
        adamw_update_pieces(&opt, &st.table, &piece, 1, lr, &oc, norm > 1 ? (float)(1 / norm) : 1.0f);
        if (p16) stage_params16_current(&st);
        else stage_params_changed(&st);
        if (i >= 0) t[i] = timer_now() - t0;
        if (i >= 0 && ceiling == 0) {
            ceil_at[i] = kernels_sgemm_gflops(2048, 2);
            ratio[i] = fpt / t[i] / ceil_at[i];
        }
    }
    double mfu_sg = -1;
    if (ceiling == 0) {   // the medians of the interleaved ceilings and of the ratios
        qsort(ceil_at, (size_t)steps, sizeof *ceil_at, cmp);
        qsort(ratio, (size_t)steps, sizeof *ratio, cmp);
        ceiling = ceil_at[steps / 2];
        mfu_sg = ratio[steps / 2];
    }
    qsort(t, (size_t)steps, sizeof *t, cmp);
    double med = t[steps / 2], tps = B * T / med, flops = arch_flops_token(&c, T) * tps * 1e-9;
    char name[40];
    snprintf(name, sizeof name, "%s %s", argv[1], prec_name(prec));
    char sg[16] = "     -";
    if (ceiling > 0 || mfu_sg >= 0) snprintf(sg, sizeof sg, "%5.1f%%", 100 * (mfu_sg >= 0 ? mfu_sg : flops / ceiling));
    printf("%-16s %3d %4d %6d | %9.1f | %8.0f | %6.1f | %s | %5.1f%% | %7.0f | %7.0f\n", name, B, T, V, med * 1e3, tps,
           flops, sg, 100 * flops / peak_for(&pk, prec), mem_peak_total() / 1048576.0, rss_peak_kib() / 1024.0);
    return 0;
}
