#include "train/trainer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"

// The pipeline and every rank's place in the layout: its stage's layers (its
// chunks', interleaved) and its tensor-parallel slice.
static void print_pipeline(Trainer *t) {
    const Layout *m = t->lay;
    const ModelConfig *mc = &t->mc;
    int P = m->pp, V = t->V, M = t->tc->accum, n = layout_devices(m);
    char sched[128];
    int cl = mc->n_layer / (P * V);
    if (V > 1) snprintf(sched, sizeof sched, "interleaved 1f1b schedule (%d chunks of %d layer%s per stage)", V, cl,
                        cl == 1 ? "" : "s");
    else snprintf(sched, sizeof sched, "%s schedule", pipe_schedule_name(m->schedule));
    printf("pipeline:  %d stages (%s backend), %s, %d micro-batches per step; activations of %d micro-batch%s held at "
           "once on this rank (stage 0; the memory line is its)\n", P, comm_backend(m->ppg), sched, M, t->st.slots,
           V > 1 ? " chunks" : "es");
    if (n > 16) {
        printf("ranks:     %d (rank = pp_rank·%d + dp_rank·%d + tp_rank)\n", n, m->dp * m->tp, m->tp);
        return;
    }
    for (int r = 0; r < n; r++) {
        int d, tr, pr;
        layout_coords(m, r, &d, &tr, &pr);
        char tpd[96] = "", layers[160] = "";
        if (m->tp > 1) {
            int h = mc->n_head / m->tp, v = mc->vocab_padded / m->tp;
            snprintf(tpd, sizeof tpd, ", tp %d/%d (heads %d–%d, vocabulary rows %d–%d)", tr, m->tp, tr * h, tr * h + h - 1,
                     tr * v, tr * v + v - 1);
        }
        for (int v = 0, k = 0; v < V && k < (int)sizeof layers; v++) {   // chunk v is virtual stage v·P + pr
            int j = v * P + pr, b = t->begin[j], e = t->begin[j + 1] - 1;
            k += b == e ? snprintf(layers + k, sizeof layers - (size_t)k, "%s%d", v ? ", " : "", b)
                        : snprintf(layers + k, sizeof layers - (size_t)k, "%s%d–%d", v ? ", " : "", b, e);
        }
        printf("%s rank %d: stage %d, layer%s %s%s%s%s, dp %d/%d\n", r ? "          " : "ranks:    ", r, pr,
               strchr(layers, ',') || strstr(layers, "–") ? "s" : "", layers,
               pr == 0 ? " + embeddings" : "", pr == P - 1 ? " + final norm, head, loss" : "", tpd, d, m->dp);
    }
}

// The data and validation lines: files, tokens and sequences, of a mixture
// each source's with its weight.
static void print_data(const Trainer *t) {
    const TrainConfig *tc = t->tc;
    const Loader *l = t->ld;
    if (!loader_is_mixture(l)) {
        printf("data:      %s — %d file%s, %lld tokens (%s tokenizer), %lld sequences of %d+1 per epoch\n", tc->data,
               loader_files(l), loader_files(l) == 1 ? "" : "s", (long long)loader_tokens(l), tc->tokenizer,
               (long long)loader_samples(l), tc->seq);
    } else {
        printf("data:      a mixture of %d sources (%s tokenizer, sequences of %d+1; each source shuffled by its own "
               "epochs, each next sequence from the source furthest below its weight's share):\n",
               loader_nsources(l), tc->tokenizer, tc->seq);
        for (int s = 0; s < loader_nsources(l); s++) {
            LoaderSource ls = loader_source(l, s);
            printf("           %-12s weight %.4g — %d file%s, %lld tokens, %lld sequences per epoch\n", ls.name, ls.weight,
                   ls.files, ls.files == 1 ? "" : "s", (long long)ls.tokens, (long long)ls.samples);
        }
    }
    const ValSet *v = &t->val;
    if (!v->n) return;
    int64_t tok = 0, seqs = 0;
    for (int s = 0; s < v->n; s++) {
        tok += loader_tokens(v->ld[s]);
        seqs += loader_samples(v->ld[s]);
    }
    printf("val:       %lld tokens, %lld sequences", (long long)tok, (long long)seqs);
    for (int s = 0; !v->plain && s < v->n; s++)
        printf("%s%s %.4g (%lld sequences)", s ? ", " : " of the sources (weights) ", v->name[s], v->weight[s],
               (long long)loader_samples(v->ld[s]));
    printf("; evaluated %s%s, %s%s\n", tc->eval_every > 0 ? "every --eval-every steps and " : "", "at the end",
           tc->eval_batches ? "first --eval-batches batches" : "all of it", v->plain ? "" : " of each source");
}

void trainer_print_header(Trainer *t) {
    const TrainConfig *tc = t->tc;
    const Layout *l = t->lay;
    const ModelConfig *mc = &t->mc;
    int64_t np = config_param_count(mc, 0);
    printf("model:     %s — %d layers, %d heads, d_model %d, d_ff %d, max_seq %d, vocab %d (padded %d)\n", mc->name,
           mc->n_layer, mc->n_head, mc->d_model, mc->d_ff, mc->max_seq, mc->vocab, mc->vocab_padded);
    if (t->lay->tp > 1 || t->lay->pp > 1)
        printf("params:    %.2fM (%lld; %zu on this rank's %s with vocabulary padding)\n", np / 1e6, (long long)np,
               t->st.table.total, t->lay->pp > 1 ? "stage" : "tensor-parallel slice");
    else
        printf("params:    %.2fM (%lld; %zu with vocabulary padding)\n", np / 1e6, (long long)np, t->st.table.total);
    print_data(t);
    printf("batch:     %d × %d tokens × %d %s × %d ranks = %.0f tokens per step, %d steps\n", tc->batch, tc->seq,
           tc->accum, t->lay->pp > 1 ? "micro-batches" : "accumulation", t->D, t->tokens_per_step, tc->steps);
    char line[1024];
    dp_describe(t->dp, line, sizeof line);
    if (line[0]) printf("parallel:  %s\n", line);
    if (t->lay->tp > 1)
        printf("tensor:    %d-way tensor parallel (%s backend): heads, FFN columns and vocabulary rows split over the "
               "ranks (Megatron column/row layers, vocabulary-parallel embedding and loss)%s\n", t->lay->tp,
               comm_backend(t->lay->tpg), l->sp ? "; sequence parallel: norms and residual stream split by rows" : "");
    if (t->lay->pp > 1) print_pipeline(t);
    printf("optimizer: AdamW lr %g → %g (%s, warmup %d), betas %g/%g, eps %g, weight decay %g, clip %g\n",
           (float)tc->lr.lr, (float)(tc->lr.shape == LR_COSINE ? tc->lr.min_lr : tc->lr.lr),
           tc->lr.shape == LR_COSINE ? "cosine" : "constant", tc->lr.warmup, (float)tc->adamw.beta1,
           (float)tc->adamw.beta2, (float)tc->adamw.eps, (float)tc->adamw.weight_decay, (float)tc->clip);
    if (t->hosts[0]) printf("hosts:     %s\n", t->hosts);
    const Peaks *pk = &t->peaks;
    printf("cpu:       %s; peaks of %d thread%s (register-only probes): fp32 FMA %.0f (256-bit)", peak_isa(pk),
           pk->threads, pk->threads == 1 ? "" : "s", pk->fp32_256);
    if (pk->fp32_512 > 0) printf(", %.0f (512-bit)", pk->fp32_512);
    if (pk->bf16 > 0) printf(", bf16 dot %.0f", pk->bf16);
    if (pk->amx > 0) printf(", AMX bf16 tiles %.0f", pk->amx);
    printf(" GFLOP/s\n");
    int units = l->precision == PREC_BF16 && peak_bf16_pays(pk);
    char how[160] = "";
    if (units) snprintf(how, sizeof how, "; bf16 products on %s", gemm_bf16_unit_name());
    else if (l->precision == PREC_BF16 && gemm_bf16_own())
        snprintf(how, sizeof how, "; bf16 products widened to fp32 (%s: %.0f GFLOP/s, under the FMAs' %.0f)",
                 gemm_bf16_unit_name(), gemm_bf16_unit() == BF16_AMX ? pk->amx : pk->bf16, peak_fp32(pk));
    printf("compute:   %d thread%s, %s%s; %.3g GFLOP per token; MFU against %.1f GFLOP/s (%s)\n", kernels_threads(),
           kernels_threads() == 1 ? "" : "s", kernels_blas_info(), how, t->flops_tok * 1e-9, t->peak, t->peak_src);
    if (l->precision != PREC_FP32)
        printf("precision: %s — the passes read a 16-bit copy of the fp32 weights (AdamW updates the fp32 masters) and "
               "store activations in 16 bits (norm statistics, softmax log-sum-exp and the residual stream in fp32); "
               "%s%s%s; gradients fp32\n", prec_name(l->precision),
               units ? "the linear layers and attention multiply bf16 pairs on " : "",
               units ? gemm_bf16_unit_name() : "",
               units ? " into fp32 sums, the rest computes in fp32"
               : l->precision == PREC_FP16 ? "every operation computes in fp32 (no fp16 arithmetic unit here)"
                                            : "every operation computes in fp32");
    if (t->fp16)
        printf("scaler:    dynamic loss scale from %g: ×2 after %d steps without overflow, ×0.5 on overflow (hysteresis "
               "%d: the overflows before the first halving), the step skipped on every rank; the run stops below %g\n",
               t->sc.scale, tc->scaler.window, tc->scaler.hysteresis, tc->scaler.min);
    if (t->flag_scale > 0)
        printf("scaler:    the checkpoint's loss scale %g is used, not --loss-scale %g: a resumed run continues its scale "
               "(--loss-scale sets a fresh run's)\n", t->sc.scale, t->flag_scale);
    if (l->recompute == RECOMPUTE_FULL)
        printf("recompute: full — each block keeps only its output (the next block's input) and runs forward again "
               "before its backward\n");
    if (l->recompute == RECOMPUTE_SELECTIVE)
        printf("recompute: selective — the attention core's output is recomputed from the saved q/k/v before each "
               "block's backward\n");
    if (t->doc_sep >= 0)
        printf("documents: masked — attention stays inside each document of a sequence and positions restart at its "
               "first token, token %d (MFU counts the attention pairs really computed)\n", t->doc_sep);
    const Offload *off = dp_offload(t->dp);
    if (off) {
        char b[32];
        printf("offload:   %s on disk in %s%s — the AdamW moments%s of this rank's owned pieces, streamed through a ring "
               "of %d buffers (read ahead, written behind) at each update\n",
               mem_fmt(offload_disk_bytes(off), b, sizeof b), offload_dir(off), tc->offload_keep ? " (kept)" : "",
               layout_offloads_masters(l) ? " and fp32 masters" : "", OFFLOAD_RING);
        if (l->offload == OFFLOAD_PARAMS)
            printf("           and the owned parameter shard ZeRO-3 gathers from (%s), mapped from %s: each segment's "
                   "piece read %d segment%s ahead, checked before its gather and handed back once gathered\n",
                   l->precision == PREC_FP32 ? "fp32" : prec_name(l->precision), OFFLOAD_PARAMS_FILE, tc->offload_prefetch,
                   tc->offload_prefetch == 1 ? "" : "s");
    }
    report_memory(t->rep);
    if (t->ck) printf("resumed:   %s at step %d\n", ckpt_dir(t->ck), t->done);
    if (tc->init_from) printf("init:      %s\n", tc->init_from);
    fflush(stdout);
}
