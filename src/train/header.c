#include "train/trainer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"

// The pipeline and every rank's place in the mesh: its stage's layers (its
// chunks', interleaved) and its tensor-parallel slice.
static void print_pipeline(Trainer *t) {
    const Mesh *m = t->mesh;
    const ModelConfig *mc = &t->mc;
    int P = m->pp, V = t->V, M = t->tc->accum, n = m->dp * m->tp * m->pp;
    char sched[128];
    int cl = mc->n_layer / (P * V);
    if (V > 1) snprintf(sched, sizeof sched, "interleaved 1f1b schedule (%d chunks of %d layer%s per stage)", V, cl,
                        cl == 1 ? "" : "s");
    else snprintf(sched, sizeof sched, "%s schedule", pipe_schedule_name(t->tc->schedule));
    printf("pipeline:  %d stages (%s backend), %s, %d micro-batches per step; activations of %d micro-batch%s held at "
           "once on this rank (stage 0; the memory line is its)\n", P, comm_backend(m->ppg), sched, M, t->st.slots,
           V > 1 ? " chunks" : "es");
    if (n > 16) {
        printf("ranks:     %d (rank = pp_rank·%d + dp_rank·%d + tp_rank)\n", n, m->dp * m->tp, m->tp);
        return;
    }
    for (int r = 0; r < n; r++) {
        int d, tr, pr;
        mesh_coords(r, m->dp, m->tp, m->pp, &d, &tr, &pr);
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

// Gathers every rank's hostname and describes, when the ranks span more
// than one host, where they are and which kinds of group stay inside a
// host (shared memory) or cross hosts (the network): the planner's
// intra/inter-node split, as it happened. Every rank calls it.
int trainer_find_hosts(Trainer *t, Err *err) {
    enum { NAME = 64 };
    const Mesh *m = t->mesh;
    int n = m->dp * m->tp * m->pp;
    char mine[NAME] = "";
    gethostname(mine, NAME - 1);
    char *all = calloc((size_t)n, NAME);
    int *host = calloc((size_t)n, sizeof *host);
    if (!all || !host) { free(all); free(host); return err_set(err, ERR_RUN, "out of memory"); }
    int rc = comm_allgather(t->stats, mine, all, NAME, DT_U8, err), nh = 0;
    for (int r = 0; !rc && r < n; r++) {   // host ids in order of first rank
        int h = 0;
        while (h < r && strncmp(all + (size_t)h * NAME, all + (size_t)r * NAME, NAME)) h++;
        host[r] = h < r ? host[h] : nh++;
    }
    t->hosts[0] = 0;
    if (!rc && nh > 1) {
        size_t len = 0, cap = sizeof t->hosts;
        len += (size_t)snprintf(t->hosts + len, cap - len, "%d (", nh);
        for (int h = 0; h < nh && len < cap; h++) {
            int first = 1;
            for (int r = 0; r < n && len < cap; r++) {
                if (host[r] != h) continue;
                int end = r;
                while (end + 1 < n && host[end + 1] == h) end++;
                if (first) len += (size_t)snprintf(t->hosts + len, cap - len, "%s%s: ranks ", h ? ", " : "", all + (size_t)r * NAME);
                len += (size_t)snprintf(t->hosts + len, cap - len, first ? (end > r ? "%d-%d" : "%d") : (end > r ? ",%d-%d" : ",%d"), r, end);
                first = 0;
                r = end;
            }
        }
        // each kind of group: inside one host when all its groups are
        static const char *kind[3] = {"data-parallel", "tensor-parallel", "pipeline"};
        int inside[3] = {1, 1, 1};
        for (int r = 0; r < n; r++)
            for (int q = 0; q < n; q++) {
                int d1, t1, p1, d2, t2, p2;
                mesh_coords(r, m->dp, m->tp, m->pp, &d1, &t1, &p1);
                mesh_coords(q, m->dp, m->tp, m->pp, &d2, &t2, &p2);
                if (host[r] == host[q]) continue;
                if (t1 == t2 && p1 == p2) inside[0] = 0;   // the same data-parallel group
                if (d1 == d2 && p1 == p2) inside[1] = 0;
                if (d1 == d2 && t1 == t2) inside[2] = 0;
            }
        int sizes[3] = {m->dp, m->tp, m->pp};
        char in[96] = "", out[96] = "";
        for (int k = 0; k < 3; k++) {
            if (sizes[k] == 1) continue;
            char *d = inside[k] ? in : out;
            size_t dl = strlen(d);
            snprintf(d + dl, sizeof in - dl, "%s%s", dl ? ", " : "", kind[k]);
        }
        if (len < cap) len += (size_t)snprintf(t->hosts + len, cap - len, ")");
        if (in[0] && len < cap) len += (size_t)snprintf(t->hosts + len, cap - len, "; inside one host: %s groups", in);
        if (out[0] && len < cap) snprintf(t->hosts + len, cap - len, "; across hosts: %s groups", out);
    }
    free(all);
    free(host);
    return rc;
}

void trainer_print_header(Trainer *t) {
    const TrainConfig *tc = t->tc;
    const ModelConfig *mc = &t->mc;
    int64_t np = config_param_count(mc, 0);
    printf("model:     %s — %d layers, %d heads, d_model %d, d_ff %d, max_seq %d, vocab %d (padded %d)\n", mc->name,
           mc->n_layer, mc->n_head, mc->d_model, mc->d_ff, mc->max_seq, mc->vocab, mc->vocab_padded);
    if (t->mesh->tp > 1 || t->mesh->pp > 1)
        printf("params:    %.2fM (%lld; %zu on this rank's %s with vocabulary padding)\n", np / 1e6, (long long)np,
               t->st.table.total, t->mesh->pp > 1 ? "stage" : "tensor-parallel slice");
    else
        printf("params:    %.2fM (%lld; %zu with vocabulary padding)\n", np / 1e6, (long long)np, t->st.table.total);
    printf("data:      %s — %d file%s, %lld tokens (%s tokenizer), %lld sequences of %d+1 per epoch\n", tc->data,
           loader_sources(t->ld), loader_sources(t->ld) == 1 ? "" : "s", (long long)loader_tokens(t->ld), tc->tokenizer,
           (long long)loader_samples(t->ld), tc->seq);
    if (t->val)
        printf("val:       %lld tokens, %lld sequences; evaluated %s%s, %s\n", (long long)loader_tokens(t->val),
               (long long)loader_samples(t->val), tc->eval_every > 0 ? "every --eval-every steps and " : "",
               "at the end", tc->eval_batches ? "first --eval-batches batches" : "all of it");
    printf("batch:     %d × %d tokens × %d %s × %d ranks = %.0f tokens per step, %d steps\n", tc->batch, tc->seq,
           tc->accum, t->mesh->pp > 1 ? "micro-batches" : "accumulation", t->D, t->tokens_per_step, tc->steps);
    char line[1024];
    dp_describe(t->dp, line, sizeof line);
    if (line[0]) printf("parallel:  %s\n", line);
    if (t->mesh->tp > 1)
        printf("tensor:    %d-way tensor parallel (%s backend): heads, FFN columns and vocabulary rows split over the "
               "ranks (Megatron column/row layers, vocabulary-parallel embedding and loss)%s\n", t->mesh->tp,
               comm_backend(t->mesh->tpg), tc->sp ? "; sequence parallel: norms and residual stream split by rows" : "");
    if (t->mesh->pp > 1) print_pipeline(t);
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
    printf(" GFLOP/s\n");
    printf("compute:   %d thread%s, %s%s; %.3g GFLOP per token; MFU against %.1f GFLOP/s (%s)\n", kernels_threads(),
           kernels_threads() == 1 ? "" : "s", kernels_blas_info(),
           tc->precision == PREC_BF16 && gemm_bf16_own() ? "; bf16 products on the bf16 units" : "",
           t->flops_tok * 1e-9, t->peak, t->peak_src);
    if (tc->precision != PREC_FP32)
        printf("precision: %s — the passes read a 16-bit copy of the fp32 weights (AdamW updates the fp32 masters) and "
               "store activations in 16 bits (norm statistics, softmax log-sum-exp and the residual stream in fp32); "
               "%s; gradients fp32\n", prec_name(tc->precision),
               tc->precision == PREC_BF16 && gemm_bf16_own()
                   ? "the linear layers and attention multiply bf16 pairs on the bf16 units (vdpbf16ps) into fp32 "
                     "sums, the rest computes in fp32"
                   : tc->precision == PREC_FP16 ? "every operation computes in fp32 (no fp16 arithmetic unit here)"
                                                : "every operation computes in fp32");
    if (t->fp16)
        printf("scaler:    dynamic loss scale from %g: ×2 after %d steps without overflow, ×0.5 on overflow (hysteresis "
               "%d: the overflows before the first halving), the step skipped on every rank; the run stops below %g\n",
               t->sc.scale, tc->scaler.window, tc->scaler.hysteresis, tc->scaler.min);
    if (t->flag_scale > 0)
        printf("scaler:    the checkpoint's loss scale %g is used, not --loss-scale %g: a resumed run continues its scale "
               "(--loss-scale sets a fresh run's)\n", t->sc.scale, t->flag_scale);
    if (tc->recompute == STAGE_RECOMPUTE_FULL)
        printf("recompute: full — each block keeps only its output (the next block's input) and runs forward again "
               "before its backward\n");
    if (tc->recompute == STAGE_RECOMPUTE_SELECTIVE)
        printf("recompute: selective — the attention core's output is recomputed from the saved q/k/v before each "
               "block's backward\n");
    report_memory(t->rep);
    if (t->ck) printf("resumed:   %s at step %d\n", ckpt_dir(t->ck), t->done);
    if (tc->init_from) printf("init:      %s\n", tc->init_from);
    fflush(stdout);
}
