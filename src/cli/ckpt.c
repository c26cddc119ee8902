// tessera export / import / ckpt info / ckpt diff — moving weights to and from the
// Hugging Face ecosystem, and looking inside a checkpoint.
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "io/checkpoint.h"
#include "io/hf_gpt2.h"
#include "io/hf_model.h"
#include "io/weights.h"
#include "core/alloc.h"
#include "data/tokenizer.h"
#include "model/params.h"
#include "optim/adamw.h"

// The whole model's parameter table and its values from a checkpoint.
static int load_whole(Ckpt *ck, const ModelConfig *mc, ParamTable *t, float **params, Err *err) {
    ModelSlice sl = slice_whole(mc);
    *params = NULL;
    if (ptable_build(t, mc, &sl, err)) return -1;
    if (!(*params = mem_alloc(MEM_PARAMS, t->total * sizeof(float))))
        return err_set(err, ERR_RUN, "out of memory for %zu parameters", t->total);
    return ckpt_load_params(ck, t, *params, err);
}

int cmd_export(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *dtype = "f32", *hf_dir = NULL;
    Flag f[] = {
        {"ckpt", FLAG_STR, &ckpt, 0, 0, "PATH", "a checkpoint, or a run directory (its latest) (required)", 0, NULL},
        {"out", FLAG_STR, &out, 0, 0, "FILE", "safetensors file to write (GPT-2; this or --hf-dir)", 0, NULL},
        {"hf-dir", FLAG_STR, &hf_dir, 0, 0, "DIR", "a Hugging Face model directory to write: config.json and model.safetensors (GPT-2, LLaMA or Qwen2)", 0, NULL},
        {"dtype", FLAG_STR, &dtype, 0, 0, "T", "f32 (default; the fp32 masters as they are), bf16 or f16 (rounded to nearest even)", 0, NULL},
    };
    int nf = 4, help;
    Json *unused = NULL;
    Err e = {0};
    if (flags_parse(f, nf, argc, argv, "export", &help, &unused, &e)) return cli_fail("export", &e);
    if (help) {
        printf("usage: tessera export --ckpt PATH --out FILE.safetensors | --hf-dir DIR\n\n"
               "Writes the model as Hugging Face GPT2LMHeadModel, LlamaForCausalLM or Qwen2ForCausalLM tensors (F32, or BF16/F16 with\n"
               "--dtype): one safetensors file, or a model directory Hugging Face's loaders read.\n\n");
        flags_print(f, nf);
        return 0;
    }
    if (!ckpt || (!out && !hf_dir) || (out && hf_dir)) {
        err_set(&e, ERR_USAGE, "%s", !ckpt ? "--ckpt PATH is required" : "give --out FILE or --hf-dir DIR (one of them)");
        return cli_fail("export", &e);
    }
    StDtype dt = !strcmp(dtype, "f32") ? ST_F32 : !strcmp(dtype, "bf16") ? ST_BF16 : !strcmp(dtype, "f16") ? ST_F16 : ST_U8;
    if (dt == ST_U8) { err_set(&e, ERR_USAGE, "--dtype: expected f32, bf16 or f16, got '%s'", dtype); return cli_fail("export", &e); }
    Ckpt *ck = NULL;
    ModelConfig mc;
    ParamTable t = {0};
    float *params = NULL;
    int rc = -1;
    if (ckpt_open(&ck, ckpt, &e) || ckpt_config(ck, &mc, &e) || load_whole(ck, &mc, &t, &params, &e)) goto done;
    if (hf_dir ? hf_export_dir(&mc, &t, params, hf_dir, dt, &e) : hf_export(&mc, &t, params, out, dt, &e)) {
        if (!hf_dir) err_prefix(&e, "--out");
        goto done;
    }
    printf("exported %s (step %lld, %zu parameters) to %s (%s)\n", ckpt_dir(ck), (long long)ckpt_step(ck), t.total,
           hf_dir ? hf_dir : out, dtype);
    rc = 0;
done:
    mem_free(params);
    ptable_free(&t);
    ckpt_close(ck);
    return rc ? cli_fail("export", &e) : 0;
}

int cmd_import(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *model = NULL, *tokenizer = "gpt2";
    Flag f[] = {
        {"in", FLAG_STR, &in, 0, 0, "PATH", "a Hugging Face model directory (config.json and model.safetensors or its shards; GPT-2, LLaMA or Qwen2), or a GPT-2 safetensors file (required)", 0, NULL},
        {"out", FLAG_STR, &out, 0, 0, "DIR", "run directory for the step-0 checkpoint (required)", 0, NULL},
        {"model", FLAG_STR, &model, 0, 0, "PRESET", "preset whose head count to use (default: d_model/64, as GPT-2)", 0, NULL},
        {"tokenizer", FLAG_STR, &tokenizer, 0, 0, "gpt2|llama|byte", "tokenizer recorded for sample/eval (default gpt2)", 0, NULL},
    };
    int nf = 4, help;
    Json *unused = NULL;
    Err e = {0};
    if (flags_parse(f, nf, argc, argv, "import", &help, &unused, &e)) return cli_fail("import", &e);
    if (help) {
        printf("usage: tessera import --in DIR | FILE.safetensors --out DIR [--model PRESET] [--tokenizer T]\n\n"
               "Makes a step-0 checkpoint (parameters only) from Hugging Face GPT-2, LLaMA or Qwen2 weights, to sample,\n"
               "evaluate or fine-tune from (tessera train --init-from also reads the directory or file directly).\n"
               "Every config.json key must be one tessera implements, and every tensor one the model reads.\n\n");
        flags_print(f, nf);
        return 0;
    }
    if (!in || !out) { err_set(&e, ERR_USAGE, "%s is required", !in ? "--in FILE" : "--out DIR"); return cli_fail("import", &e); }
    if (tokenizer_vocab_of(tokenizer) < 0) {
        err_set(&e, ERR_USAGE, "--tokenizer: expected gpt2, llama or byte, got '%s'", tokenizer);
        return cli_fail("import", &e);
    }
    Weights w;
    ModelConfig hint = {0}, mc;
    ParamTable t = {0};
    float *params = NULL;
    if (model) {   // only its head count: a GPT-2 file states none
        if (config_preset(&hint, model, &e)) { err_prefix(&e, "--model"); return cli_fail("import", &e); }
        hint.d_model = 0;
    }
    int is_dir = hf_is_dir(in);
    if (weights_open(&w, in, model ? &hint : NULL, &e)) goto fail;
    if (w.kind == WEIGHTS_CKPT) {
        err_set(&e, ERR_USAGE, "--in %s: a tessera checkpoint, not Hugging Face weights (train --init-from reads it)", in);
        goto fail;
    }
    mc = w.mc;
    if (mc.vocab != tokenizer_vocab_of(tokenizer)) {
        err_set(&e, ERR_USAGE, "%s: its vocabulary has %d tokens, --tokenizer %s has %d", in, mc.vocab, tokenizer,
                tokenizer_vocab_of(tokenizer));
        goto fail;
    }
    ModelSlice sl = slice_whole(&mc);
    if (ptable_build(&t, &mc, &sl, &e)) goto fail;
    if (!(params = mem_alloc(MEM_PARAMS, t.total * sizeof(float)))) { err_set(&e, ERR_RUN, "out of memory"); goto fail; }
    if (weights_load(&w, &mc, &t, params, &e)) {
        err_prefix(&e, in);
        goto fail;
    }
    JsonBuf meta;
    jb_init(&meta);
    jb_obj_begin(&meta);
    jb_key(&meta, "steps_done"); jb_int(&meta, 0);
    jb_key(&meta, "tokenizer"); jb_str(&meta, tokenizer);
    jb_key(&meta, "imported_from"); jb_str(&meta, is_dir ? "huggingface" : "safetensors");
    jb_obj_end(&meta);
    CkptMeta md = {.step = 0, .cfg = &mc, .train = meta.s};
    int bad = ckpt_save(out, &md, &t, params, 0, &e);
    jb_free(&meta);
    if (bad) goto fail;
    printf("imported %s: %s, %d layers, %d heads (%d key/value), d_model %d, d_ff %d, max_seq %d, vocab %d -> "
           "%s/step_00000000\n", in, config_arch_name(mc.arch), mc.n_layer, mc.n_head, config_kv_heads(&mc), mc.d_model,
           mc.d_ff, mc.max_seq, mc.vocab, out);
    mem_free(params);
    ptable_free(&t);
    weights_close(&w);
    return 0;
fail:
    mem_free(params);
    ptable_free(&t);
    weights_close(&w);
    return cli_fail("import", &e);
}

// tessera ckpt diff A B: the largest difference between two checkpoints'
// parameters (same model), absolute and relative to the largest magnitude.
static int ckpt_diff(const char *pa, const char *pb) {
    Err e = {0};
    Ckpt *a = NULL, *b = NULL;
    ModelConfig ca, cb;
    ParamTable ta = {0}, tb = {0};
    float *xa = NULL, *xb = NULL;
    int rc = 2;
    if (ckpt_open(&a, pa, &e) || ckpt_open(&b, pb, &e) || ckpt_config(a, &ca, &e) || ckpt_config(b, &cb, &e)) goto out;
    if (memcmp(&ca.arch, &cb.arch, sizeof ca - offsetof(ModelConfig, arch))) {
        err_set(&e, ERR_USAGE, "the two checkpoints hold different models");
        goto out;
    }
    if (load_whole(a, &ca, &ta, &xa, &e) || load_whole(b, &cb, &tb, &xb, &e)) goto out;
    double dmax = 0, vmax = 0;
    const char *worst = "";
    for (int k = 0; k < ta.n; k++) {
        const ParamInfo *p = &ta.p[k];
        for (size_t i = 0; i < p->numel; i++) {
            double x = xa[p->offset + i], y = xb[p->offset + i], d = fabs(x - y);
            if (d > dmax) { dmax = d; worst = p->name; }
            if (fabs(x) > vmax) vmax = fabs(x);
        }
    }
    printf("max |a-b| %.6g (in %s), max |a| %.6g, max relative difference %.6g\n", dmax, worst, vmax, vmax ? dmax / vmax : 0);
    rc = 0;
out:
    mem_free(xa);
    mem_free(xb);
    ptable_free(&ta);
    ptable_free(&tb);
    ckpt_close(a);
    ckpt_close(b);
    return rc ? cli_fail("ckpt diff", &e) : 0;
}

int cmd_ckpt(int argc, char **argv) {
    int help = 0;
    for (int i = 0; i < argc && i < 2; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (help && (argc < 2 || !strcmp(argv[0], "info") || !strcmp(argv[0], "diff"))) {
        printf("usage: tessera ckpt info PATH | tessera ckpt diff PATH_A PATH_B\n\n"
               "info: a checkpoint's step, model, layout, the ranks its files are of, and its tensors; every checksum\n"
               "      verified.\n"
               "diff: the largest difference between two checkpoints' parameters (the same model, any layouts):\n"
               "      absolute, the tensor it is in, and relative to the largest magnitude.\n"
               "PATH: a checkpoint, or a run directory (its latest).\n");
        return 0;
    }
    if (argc == 3 && !strcmp(argv[0], "diff")) return ckpt_diff(argv[1], argv[2]);
    if (argc < 1 || strcmp(argv[0], "info")) {
        Err e;
        err_set(&e, ERR_USAGE, "usage: tessera ckpt info PATH | tessera ckpt diff PATH_A PATH_B");
        return cli_fail("ckpt", &e);
    }
    if (argc != 2) {
        Err e;
        err_set(&e, ERR_USAGE, "usage: tessera ckpt info PATH");
        return cli_fail("ckpt", &e);
    }
    Err e = {0};
    Ckpt *ck = NULL;
    ModelConfig mc;
    if (ckpt_open(&ck, argv[1], &e) || ckpt_config(ck, &mc, &e)) { ckpt_close(ck); return cli_fail("ckpt info", &e); }
    const Json *m = ckpt_meta(ck), *lay = json_get(m, "layout"), *files = json_get(m, "files");
    printf("checkpoint: %s\n", ckpt_dir(ck));
    printf("step:       %lld%s\n", (long long)ckpt_step(ck), ckpt_has_section(ck, adamw_sections[0]) ? " (with AdamW state)" : " (parameters only)");
    printf("model:      %s — %d layers, %d heads, d_model %d, d_ff %d, max_seq %d, vocab %d\n", mc.name, mc.n_layer,
           mc.n_head, mc.d_model, mc.d_ff, mc.max_seq, mc.vocab);
    int64_t dp = 1, tp = 1, pp = 1, z = 0;
    json_int64(json_get(lay, "dp"), &dp);
    json_int64(json_get(lay, "tp"), &tp);
    json_int64(json_get(lay, "pp"), &pp);
    json_int64(json_get(lay, "zero"), &z);
    printf("layout:     dp %lld, tp %lld, pp %lld, zero %lld; %zu file%s\n", (long long)dp, (long long)tp, (long long)pp,
           (long long)z, files->len, files->len == 1 ? "" : "s");
    // who wrote each file: file = (pp_rank·tp + tp_rank)·(files per DP group) + dp file
    int64_t per = (int64_t)files->len / (tp * pp > 0 ? tp * pp : 1);
    if (per >= 1 && (int64_t)files->len == per * tp * pp && (tp > 1 || pp > 1 || per > 1)) {
        for (size_t f = 0; f < files->len; f++) {
            const char *lo = NULL, *hi = NULL;   // its first and last tensors
            for (int i = 0; i < ckpt_ntensors(ck); i++) {
                const CkptTensor *t = ckpt_tensor(ck, i);
                if (t->file != (int)f || strchr(t->name, '/')) continue;
                if (!lo) lo = t->name;
                hi = t->name;
            }
            int64_t g = (int64_t)f / per;
            printf("%s %s: stage %lld of %lld, tp rank %lld of %lld, %s %lld: %s … %s\n", f ? "           " : "files:     ",
                   ckpt_file_name(ck, (int)f), (long long)(g / tp), (long long)pp, (long long)(g % tp), (long long)tp,
                   per > 1 ? "ZeRO piece of dp rank" : "written by dp rank", (long long)((int64_t)f % per),
                   lo ? lo : "(nothing)", hi ? hi : "");
        }
    }
    uint64_t bytes = 0;
    printf("%-36s %-18s %-30s %12s  %s\n", "tensor", "shape", "slice (offset+extent) [flat]", "bytes", "file");
    for (int i = 0; i < ckpt_ntensors(ck); i++) {
        const CkptTensor *t = ckpt_tensor(ck, i);
        char sh[64] = "", sl[96] = "";
        for (int d = 0; d < t->ndim; d++) {
            snprintf(sh + strlen(sh), sizeof sh - strlen(sh), "%s%lld", d ? "×" : "", (long long)t->shape[d]);
            snprintf(sl + strlen(sl), sizeof sl - strlen(sl), "%s%lld+%lld", d ? "," : "", (long long)t->offset[d],
                     (long long)t->extent[d]);
        }
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->extent[d];
        if (t->flat_lo != 0 || t->flat_hi != numel)   // a ZeRO piece: elements [lo, hi) of the slice
            snprintf(sl + strlen(sl), sizeof sl - strlen(sl), " [%lld,%lld)", (long long)t->flat_lo, (long long)t->flat_hi);
        printf("%-36s %-18s %-30s %12llu  %s\n", t->name, sh, sl, (unsigned long long)t->nbytes, ckpt_file_name(ck, t->file));
        bytes += t->nbytes;
    }
    int bad = ckpt_verify(ck, &e);
    printf("%d tensors, %.2f MiB; checksums: %s\n", ckpt_ntensors(ck), bytes / 1048576.0, bad ? "FAILED" : "all OK");
    ckpt_close(ck);
    return bad ? cli_fail("ckpt info", &e) : 0;
}
