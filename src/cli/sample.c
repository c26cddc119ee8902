// tessera sample — generate text from a checkpoint.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "io/checkpoint.h"
#include "kernels/matmul.h"
#include "kernels/sampling.h"
#include "model/stage.h"

int cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "\n", *precision = "fp32";
    int tokens = 200, top_k = 40, threads = 0, no_cache = 0;
    double temperature = 0.8;
    uint64_t seed = 1337;
    Flag f[] = {
        {"ckpt", FLAG_STR, &ckpt, 0, 0, "PATH", "a checkpoint, or a run directory (its latest) (required)", 0, NULL},
        {"prompt", FLAG_STR, &prompt, 0, 0, "TEXT", "text to continue (default: a new document)", 0, NULL},
        {"tokens", FLAG_INT, &tokens, 1, 1 << 24, "N", "tokens to generate (default 200)", 0, NULL},
        {"temperature", FLAG_FLOAT, &temperature, 0, 100, "X", "softmax temperature, 0 = greedy (default 0.8)", 0, NULL},
        {"top-k", FLAG_INT, &top_k, 0, 1 << 24, "K", "sample among the K most likely, 0 = all (default 40)", 0, NULL},
        {"seed", FLAG_U64, &seed, 0, 9.2e18, "N", "sampling seed (default 1337)", 0, NULL},
        {"threads", FLAG_INT, &threads, 1, 1024, "N", "threads (default: all cores)", 0, NULL},
        {"precision", FLAG_STR, &precision, 0, 0, "P", "fp32 (default), bf16 or fp16: weights and activations in 16 bits, fp32 math", 0, NULL},
        {"no-cache", FLAG_BOOL, &no_cache, 0, 0, "", "run the whole context again for every token instead of keeping its keys and values", 0, NULL},
    };
    int nf = (int)(sizeof f / sizeof f[0]), help;
    Json *unused = NULL;
    const Json *meta = NULL;
    Err e = {0};
    if (flags_parse(f, nf, argc, argv, "sample", &help, &unused, &e)) return cli_fail("sample", &e);
    if (help) {
        printf("usage: tessera sample --ckpt PATH [flags]\n\nContinues a prompt with a trained model, printing each token as it comes.\n"
               "Every layer's keys and values are kept (a KV cache): a new token runs one position, not the whole\n"
               "context; past the model's positions the window slides and the context runs again. A model trained\n"
               "with --doc-mask attends within the current document: a separator (<|endoftext|>, <s>) in the prompt\n"
               "or the output starts a new one, its positions from 0.\n\n");
        flags_print(f, nf);
        return 0;
    }
    if (!ckpt) { err_set(&e, ERR_USAGE, "--ckpt PATH is required"); return cli_fail("sample", &e); }
    Precision prec;
    if (prec_parse(precision, &prec)) {
        err_set(&e, ERR_USAGE, "--precision: expected fp32, bf16 or fp16, got '%s'", precision);
        return cli_fail("sample", &e);
    }
    kernels_set_threads(threads ? threads : omp_get_num_procs());
    Ckpt *ck = NULL;
    ModelConfig mc;
    Tokenizer tok;
    Stage st;
    memset(&st, 0, sizeof st);
    memset(&tok, 0, sizeof tok);
    if (ckpt_open(&ck, ckpt, &e) || ckpt_config(ck, &mc, &e)) goto fail;
    meta = ckpt_meta(ck);
    const char *dir = ckpt_dir(ck);
    const Json *tn = json_get(json_get(meta, "train"), "tokenizer");
    // a checkpoint that does not say (an old import) is GPT-2's, as eval assumes too
    if (tokenizer_open(&tok, tn && tn->type == JSON_STR ? tn->text : "gpt2", &e)) goto fail;
    if (tok.vocab != mc.vocab) {
        err_set(&e, ERR_USAGE, "%s: the model's vocabulary (%d) does not match its tokenizer's (%d)", dir, mc.vocab, tok.vocab);
        goto fail;
    }
    ModelSlice sl = slice_whole(&mc);
    if (stage_init(&st, &mc, &sl, 1, mc.max_seq, 1, stage_prec_flag(prec), &e) || ckpt_load_params(ck, &st.table, st.params, &e)) goto fail;
    if (!no_cache && stage_kv_init(&st, &e)) goto fail;
    // a run trained with --doc-mask: a separator in the context starts a new document
    const Json *dm = json_get(json_get(meta, "train"), "doc_mask");
    if (dm && dm->type == JSON_BOOL && dm->boolean && stage_set_doc_mask(&st, tok.doc_sep, &e)) goto fail;
    size_t plen = strlen(prompt);
    int total = (int)plen + tokens + 2;
    int *ids = malloc((size_t)(total > 0 ? total : 1) * sizeof *ids);
    float *logits = malloc((size_t)mc.vocab_padded * sizeof *logits), *scratch = malloc((size_t)mc.vocab * sizeof *scratch);
    if (!ids || !logits || !scratch) {
        free(ids);
        free(logits);
        free(scratch);
        err_set(&e, ERR_RUN, "out of memory");
        goto fail;
    }
    int n;
    if (!flags_find(f, nf, "prompt")->seen && tok.eot >= 0) {
        ids[0] = tok.eot;   // no prompt: start a new document, as GPT-2 does
        n = 1;
    } else {
        n = (int)tokenizer_encode(&tok, prompt, plen, ids, plen + 2);
        fputs(prompt, stdout);
    }
    fflush(stdout);
    uint64_t stream = rng_stream_of("sample");
    for (int i = 0; i < tokens; i++) {
        int T = n < mc.max_seq ? n : mc.max_seq;   // the last max_seq tokens are the context
        const int *ctx = ids + n - T;
        if (!no_cache) {
            // the positions not cached yet: the prompt, then each new token; once the
            // window slides every position moves, and the whole context runs again
            if (n > mc.max_seq) stage_kv_reset(&st);
            int pos = stage_kv_pos(&st), todo = T - pos;
            stage_forward(&st, 0, ctx + pos, NULL, 1, todo, 0.0f);
            stage_logits(&st, 0, 1, todo, todo - 1, logits);
        } else {
            stage_forward(&st, 0, ctx, NULL, 1, T, 0.0f);
            stage_logits(&st, 0, 1, T, T - 1, logits);
        }
        int id = sampling_pick(logits, mc.vocab, temperature, top_k, rng_uniform(seed, stream, (uint64_t)i), scratch);
        ids[n++] = id;
        char buf[64];
        size_t bl = tokenizer_decode(&tok, id, buf, sizeof buf);
        fwrite(buf, 1, bl, stdout);
        fflush(stdout);
    }
    putchar('\n');
    free(ids);
    free(logits);
    free(scratch);
    stage_free(&st);
    tokenizer_close(&tok);
    ckpt_close(ck);
    return 0;
fail:
    stage_free(&st);
    tokenizer_close(&tok);
    ckpt_close(ck);
    return cli_fail("sample", &e);
}
