// io/safetensors: the strict reader against malformed headers, the
// reader/writer round trip, F16/BF16 conversion, the GPT-2 mapping, and
// LLaMA's model directories (one file, or shards with an index).
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "io/hf_gpt2.h"
#include "io/hf_model.h"
#include "model/stage.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "test.h"

// A buffer: 8-byte length, header text, then `data` zero bytes.
static unsigned char *make(const char *header, size_t data, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data;
    unsigned char *b = calloc(*len + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    return b;
}

static void expect_reject(const char *header, size_t data, const char *why) {
    size_t len;
    unsigned char *b = make(header, data, &len);
    StFile f;
    Err e;
    int rc = st_parse(&f, b, len, &e);
    EXPECT(rc == -1 && strstr(e.msg, why), "header %s: want /%s/, got rc %d '%s'", header, why, rc, rc ? e.msg : "");
    if (rc == 0) st_close(&f);
    free(b);
}

static void test_malformed_headers(void) {
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside the data");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap");
    expect_reject("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype 'F33'");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "shape needs 12 bytes");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8, "bad shape");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "outside the data");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "expected exactly");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "expected exactly");
    expect_reject("[1,2]", 0, "not a JSON object");
    expect_reject("{\"a\":", 0, "invalid JSON");
    expect_reject("{\"__metadata__\":{\"k\":1}}", 0, "values must be strings");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,8]}}", 8, "shape");
    expect_reject("{}", 4, "after the last tensor");
    // a header length past the end of the file
    unsigned char b[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    StFile f;
    Err e;
    EXPECT(st_parse(&f, b, 10, &e) == -1 && strstr(e.msg, "past the end"), "header length: %s", e.msg);
    EXPECT(st_parse(&f, b, 5, &e) == -1 && strstr(e.msg, "too short"), "tiny file: %s", e.msg);
    // and a good one
    size_t len;
    unsigned char *g = make("{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]},"
                            "\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, &len);
    unsigned char *d = g + len - 8;
    d[0] = 0x00; d[1] = 0x3C;   // F16 1.0
    d[2] = 0x00; d[3] = 0xC0;   // F16 -2.0
    d[4] = 0x80; d[5] = 0x3F;   // BF16 1.0
    d[6] = 0x40; d[7] = 0x40;   // BF16 3.0
    EXPECT(st_parse(&f, g, len, &e) == 0, "%s", e.msg);
    if (f.n == 2) {
        const StTensor *a = st_find(&f, "a"), *bb = st_find(&f, "b");
        EXPECT(a && bb && st_get(&f, a, 0) == 1.0f && st_get(&f, a, 1) == -2.0f && st_get(&f, bb, 0) == 1.0f &&
               st_get(&f, bb, 1) == 3.0f, "F16/BF16 values");
        st_close(&f);
    }
    free(g);
}

static void test_gpt2_roundtrip(void) {
    Err e;
    ModelConfig c;
    config_preset(&c, "gpt2-tiny", &e);
    config_set_vocab(&c, 300);   // padded to 384: the padding must not be exported
    c.n_layer = 2;
    ModelSlice s = slice_whole(&c);
    Stage a, b;
    stage_init(&a, &c, &s, 1, 4, 1, 0, &e);
    stage_init(&b, &c, &s, 1, 4, 1, 0, &e);
    ptable_init(&a.table, a.params, 4);
    char p1[] = "/tmp/tsr_st1_XXXXXX", p2[] = "/tmp/tsr_st2_XXXXXX";
    int f1 = mkstemp(p1), f2 = mkstemp(p2);
    close(f1);
    close(f2);
    EXPECT(hf_export(&a.cfg, &a.table, a.params, p1, ST_F32, &e) == 0, "%s", e.msg);
    StFile f;
    EXPECT(st_open(&f, p1, &e) == 0, "%s", e.msg);
    const StTensor *wte = st_find(&f, "transformer.wte.weight"), *qkv = st_find(&f, "transformer.h.1.attn.c_attn.weight");
    EXPECT(wte && wte->shape[0] == 300 && wte->shape[1] == 128, "wte shape without padding");
    EXPECT(qkv && qkv->shape[0] == 128 && qkv->shape[1] == 384, "c_attn stored (in, 3·out)");
    // element check: tessera c_attn[which=1][out=5][in=7] == HF[7][1·128+5]
    const ParamInfo *pq = ptable_find(&a.table, "h.1.attn.c_attn.weight");
    EXPECT(qkv && st_get(&f, qkv, 7 * 384 + 128 + 5) == a.params[pq->offset + (1 * 128 + 5) * 128 + 7], "c_attn transpose");
    ModelConfig c2 = {0};
    c2.n_head = 4;
    HfDir hd;
    EXPECT(hf_open_file(&hd, p1, &e) == 0, "%s", e.msg);
    EXPECT(hf_read_config(&hd, &c2, &e) == 0 && c2.n_layer == 2 && c2.vocab == 300 && c2.d_ff == 512 && c2.max_seq == 64,
           "inferred config: %s", e.msg);
    EXPECT(hf_load(&hd, &b.cfg, &b.table, b.params, &e) == 0, "%s", e.msg);
    hf_dir_close(&hd);
    EXPECT(memcmp(a.params, b.params, a.table.total * 4) == 0, "import differs from the exported model");
    EXPECT(hf_export(&b.cfg, &b.table, b.params, p2, ST_F32, &e) == 0, "%s", e.msg);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", p1, p2);
    EXPECT(system(cmd) == 0, "export -> import -> export is not byte-identical");
    st_close(&f);
    unlink(p1);
    unlink(p2);
    stage_free(&a);
    stage_free(&b);
}

// Splits dir/model.safetensors into two shards (its first three tensors,
// then all but the last `drop` of the rest) listed by an index, and removes
// it.
static void split_dir(const char *dir, int drop) {
    Err e;
    char path[600];
    StFile f;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    EXPECT(st_open(&f, path, &e) == 0, "%s", e.msg);
    int n = f.n;
    StWrite *w = calloc((size_t)n, sizeof *w);
    float **v = calloc((size_t)n, sizeof *v);
    JsonBuf ix;
    jb_init(&ix);
    jb_obj_begin(&ix);
    jb_key(&ix, "weight_map");
    jb_obj_begin(&ix);
    for (int i = 0; i < n; i++) {
        const StTensor *t = &f.t[i];
        int64_t m = 1;
        for (int k = 0; k < t->ndim; k++) m *= t->shape[k];
        v[i] = malloc((size_t)m * sizeof **v + 1);
        for (int64_t k = 0; k < m; k++) v[i][k] = st_get(&f, t, k);
        w[i] = (StWrite){.name = strdup(t->name), .ndim = t->ndim, .data = v[i]};
        memcpy(w[i].shape, t->shape, sizeof w[i].shape);
        jb_key(&ix, t->name);
        jb_str(&ix, i < 3 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors");
    }
    jb_obj_end(&ix);
    jb_obj_end(&ix);
    st_close(&f);
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    EXPECT(st_write(path, w, 3, &e) == 0, "%s", e.msg);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    EXPECT(st_write(path, w + 3, n - 3 - drop, &e) == 0, "%s", e.msg);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    EXPECT(file_write_whole(path, ix.s, ix.len, &e) == 0, "%s", e.msg);
    jb_free(&ix);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    for (int i = 0; i < n; i++) {
        free(v[i]);
        free((char *)w[i].name);
    }
    free(v);
    free(w);
}

// A LLaMA model written as a Hugging Face directory loads back bit for bit;
// then its tensors split into two shards listed by an index load back too,
// and a directory with a tensor missing or of another model is refused by
// name.
static void test_llama_directories(void) {
    Err e;
    ModelConfig c;
    config_preset(&c, "llama-tiny", &e);
    config_set_vocab(&c, 300);   // padded to 384: the padding is not exported
    c.n_layer = 2;
    c.rope_theta = 500;
    ModelSlice s = slice_whole(&c);
    Stage a, b;
    EXPECT(stage_init(&a, &c, &s, 1, 4, 1, 0, &e) == 0 && stage_init(&b, &c, &s, 1, 4, 1, 0, &e) == 0, "%s", e.msg);
    ptable_init(&a.table, a.params, 4);
    char dir[] = "/tmp/tsr_hf_XXXXXX", path[600], cmd[700];
    EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    EXPECT(hf_export_dir(&a.cfg, &a.table, a.params, dir, ST_F32, &e) == 0, "%s", e.msg);
    EXPECT(hf_is_dir(dir), "a model directory");
    HfDir d;
    ModelConfig c2;
    EXPECT(hf_model_open(&d, dir, &c2, &e) == 0, "%s", e.msg);
    EXPECT(c2.arch == ARCH_LLAMA && c2.n_layer == 2 && c2.n_head == 4 && config_kv_heads(&c2) == 2 && c2.d_ff == 352 &&
           c2.vocab == 300 && c2.rope_theta == 500 && c2.norm_eps == config_norm_eps(&c), "config.json read back");
    const StTensor *emb = d.n ? st_find(&d.f[0], "model.embed_tokens.weight") : NULL;
    const StTensor *head = d.n ? st_find(&d.f[0], "lm_head.weight") : NULL;
    EXPECT(emb && head && emb->shape[0] == 300 && head->shape[0] == 300, "embeddings and head without padding");
    EXPECT(hf_model_load(&d, &b.cfg, &b.table, b.params, &e) == 0, "%s", e.msg);
    EXPECT(!memcmp(a.params, b.params, a.table.total * 4), "the directory loads back differently");
    hf_dir_close(&d);
    split_dir(dir, 0);
    memset(b.params, 0, b.table.total * 4);
    EXPECT(hf_model_open(&d, dir, &c2, &e) == 0 && d.n == 2, "shards: %s", e.msg);
    EXPECT(hf_model_load(&d, &b.cfg, &b.table, b.params, &e) == 0, "%s", e.msg);
    EXPECT(!memcmp(a.params, b.params, a.table.total * 4), "the shards load back differently");
    hf_dir_close(&d);
    // an export over the shards is refused (the index would be read instead)
    EXPECT(hf_export_dir(&a.cfg, &a.table, a.params, dir, ST_F32, &e) == -1 && strstr(e.msg, "--hf-dir") &&
           strstr(e.msg, "model.safetensors.index.json"), "export over shards: %s", e.msg);
    snprintf(cmd, sizeof cmd, "rm %s/model-0000?-of-00002.safetensors %s/model.safetensors.index.json", dir, dir);
    EXPECT(system(cmd) == 0, "removing the shards");
    // a tensor the index lists missing from its shard: the second holds only the rest but one
    EXPECT(hf_export_dir(&a.cfg, &a.table, a.params, dir, ST_F32, &e) == 0, "%s", e.msg);
    split_dir(dir, 1);
    EXPECT(hf_model_open(&d, dir, &c2, &e) == -1 && strstr(e.msg, "which does not hold it"), "missing tensor: %s", e.msg);
    // a model type no architecture of the registry has
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *mamba = "{\"model_type\": \"mamba\"}";
    EXPECT(file_write_whole(path, mamba, strlen(mamba), &e) == 0, "%s", e.msg);
    EXPECT(hf_model_open(&d, dir, &c2, &e) == -1 && strstr(e.msg, "config.json: model_type is \"mamba\"") &&
           strstr(e.msg, "\"gpt2\", \"llama\", \"qwen2\""), "another model type: %s", e.msg);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0, "cleanup");
    stage_free(&a);
    stage_free(&b);
}

// A GPT-2 model directory, in shards: config.json's head count (4, not
// d_model/64) and the weights load back bit for bit.
static void test_gpt2_directory(void) {
    Err e;
    ModelConfig c;
    config_preset(&c, "gpt2-tiny", &e);
    config_set_vocab(&c, 300);
    c.n_layer = 2;
    ModelSlice s = slice_whole(&c);
    Stage a, b;
    EXPECT(stage_init(&a, &c, &s, 1, 4, 1, 0, &e) == 0 && stage_init(&b, &c, &s, 1, 4, 1, 0, &e) == 0, "%s", e.msg);
    ptable_init(&a.table, a.params, 6);
    char dir[] = "/tmp/tsr_hfg_XXXXXX", cmd[700];
    EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    EXPECT(hf_export_dir(&a.cfg, &a.table, a.params, dir, ST_F32, &e) == 0, "%s", e.msg);
    split_dir(dir, 0);
    HfDir d;
    ModelConfig c2 = {0};
    char cpath[600];
    int heads = 0;
    Json *cfg = hf_config_read(dir, cpath, sizeof cpath, &e);
    EXPECT(cfg && hf_gpt2_config(cfg, cpath, &heads, &e) == 0 && heads == 4, "config.json's heads: %d (%s)", heads, e.msg);
    json_free(cfg);
    c2.n_head = heads;
    EXPECT(hf_open_weights(&d, dir, &e) == 0 && d.n == 2, "shards: %s", e.msg);
    EXPECT(hf_read_config(&d, &c2, &e) == 0 && c2.n_layer == 2 && c2.n_head == 4 && c2.vocab == 300, "config: %s",
           e.msg);
    EXPECT(hf_load(&d, &b.cfg, &b.table, b.params, &e) == 0, "%s", e.msg);
    EXPECT(!memcmp(a.params, b.params, a.table.total * 4), "the shards load back differently");
    hf_dir_close(&d);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0, "cleanup");
    stage_free(&a);
    stage_free(&b);
}

int main(void) {
    kernels_set_threads(2);
    RUN(test_malformed_headers);
    RUN(test_gpt2_roundtrip);
    RUN(test_llama_directories);
    RUN(test_gpt2_directory);
    return test_finish();
}
