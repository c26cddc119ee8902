// tessera eval — validation loss and perplexity of a checkpoint.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "kernels/matmul.h"
#include "train/trainer.h"

int cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL, *precision = "fp32";
    int batch = 8, seq = 0, batches = 0, threads = 0;
    Flag f[] = {
        {"ckpt", FLAG_STR, &ckpt, 0, 0, "PATH", "a checkpoint, or a run directory (its latest) (required)", 0, NULL},
        {"data", FLAG_STR, &data, 0, 0, "PATH", "validation data: a directory's val_*.bin, a .bin, a glob or a text file, or a mixture NAME=PATH:WEIGHT,... or FILE.json (each source's loss, and their weighted mean) (required)", 0, NULL},
        {"batch", FLAG_INT, &batch, 1, 1 << 16, "B", "sequences per batch (default 8)", 0, NULL},
        {"seq", FLAG_INT, &seq, 1, 1 << 20, "T", "tokens per sequence (default: the training run's)", 0, NULL},
        {"batches", FLAG_INT, &batches, 0, 1 << 30, "N", "evaluate at most N batches, 0 = all (default)", 0, NULL},
        {"threads", FLAG_INT, &threads, 1, 1024, "N", "threads (default: all cores)", 0, NULL},
        {"precision", FLAG_STR, &precision, 0, 0, "P", "fp32 (default), bf16 or fp16: weights and activations in 16 bits, fp32 math", 0, NULL},
    };
    int nf = (int)(sizeof f / sizeof f[0]), help;
    Json *unused = NULL;
    const Json *meta = NULL;
    Err e = {0};
    if (flags_parse(f, nf, argc, argv, "eval", &help, &unused, &e)) return cli_fail("eval", &e);
    if (help) {
        printf("usage: tessera eval --ckpt PATH --data PATH [flags]\n\nValidation loss and perplexity of a model (documents masked as in training for a\nrun trained with --doc-mask).\n\n");
        flags_print(f, nf);
        return 0;
    }
    if (!ckpt || !data) {
        err_set(&e, ERR_USAGE, "%s is required", !ckpt ? "--ckpt PATH" : "--data PATH");
        return cli_fail("eval", &e);
    }
    Precision prec;
    if (prec_parse(precision, &prec)) {
        err_set(&e, ERR_USAGE, "--precision: expected fp32, bf16 or fp16, got '%s'", precision);
        return cli_fail("eval", &e);
    }
    kernels_set_threads(threads ? threads : omp_get_num_procs());
    Ckpt *ck = NULL;
    ModelConfig mc;
    Tokenizer tok;
    Stage st;
    ValSet val;
    Mixture mix;
    memset(&val, 0, sizeof val);
    memset(&mix, 0, sizeof mix);
    memset(&st, 0, sizeof st);
    memset(&tok, 0, sizeof tok);
    if (ckpt_open(&ck, ckpt, &e) || ckpt_config(ck, &mc, &e)) goto fail;
    meta = ckpt_meta(ck);
    const char *dir = ckpt_dir(ck);
    const Json *tr = json_get(meta, "train"), *tn = json_get(tr, "tokenizer");
    int64_t tseq;
    if (!seq) seq = json_int64(json_get(tr, "seq"), &tseq) == 0 && tseq > 0 && tseq <= mc.max_seq ? (int)tseq : mc.max_seq;
    if (tokenizer_open(&tok, tn && tn->type == JSON_STR ? tn->text : "gpt2", &e)) goto fail;
    if (tok.vocab != mc.vocab) {
        err_set(&e, ERR_USAGE, "%s: the model's vocabulary (%d) does not match its tokenizer's (%d)", dir, mc.vocab, tok.vocab);
        goto fail;
    }
    LoaderOptions lo = {.T = seq, .B = batch, .ranks = 1, .split = SPLIT_VAL};
    ModelSlice sl = slice_whole(&mc);
    if (mix_parse(&mix, data, "--data", &e) || valset_open(&val, &mix, "--data", &tok, &lo, &e)) goto fail;
    if (stage_init(&st, &mc, &sl, batch, seq, 1, stage_prec_flag(prec), &e) || ckpt_load_params(ck, &st.table, st.params, &e)) goto fail;
    // a run trained with --doc-mask is evaluated with its documents masked too
    const Json *dm = json_get(tr, "doc_mask");
    int masked = dm && dm->type == JSON_BOOL && dm->boolean;
    if (masked && stage_set_doc_mask(&st, tok.doc_sep, &e)) goto fail;
    int64_t n[MIX_MAX_SOURCES], all = 0;
    double t0 = timer_now(), sum[MIX_MAX_SOURCES], losses[MIX_MAX_SOURCES];
    if (valset_evaluate(&val, &st, NULL, batches, sum, n, &e)) goto fail;
    double loss = valset_loss(&val, sum, n, losses);
    for (int s = 0; s < val.n; s++) all += n[s];
    printf("model %s (step %lld), %s: %lld tokens in %.1f s\n", dir,
           (long long)(json_get(meta, "step") ? json_get(meta, "step")->num : 0), data, (long long)all, timer_now() - t0);
    for (int s = 0; !val.plain && s < val.n; s++)
        printf("  %-12s weight %.4g: val loss %.6f  perplexity %.2f  (%lld tokens)\n", val.name[s], val.weight[s], losses[s],
               exp(losses[s]), (long long)n[s]);
    printf("val loss %.6f  perplexity %.2f%s%s%s%s\n", loss, exp(loss), prec ? "  in " : "", prec ? prec_name(prec) : "",
           val.plain ? "" : "  (the sources' losses, weighted)", masked ? "  (documents masked, as trained)" : "");
    valset_close(&val);
    mix_free(&mix);
    stage_free(&st);
    tokenizer_close(&tok);
    ckpt_close(ck);
    return 0;
fail:
    valset_close(&val);
    mix_free(&mix);
    stage_free(&st);
    tokenizer_close(&tok);
    ckpt_close(ck);
    return cli_fail("eval", &e);
}
