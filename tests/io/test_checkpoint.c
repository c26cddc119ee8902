// io/checkpoint: save/load round trip, tensors assembled from slices held by
// several files (a tensor-parallel pair loaded into the whole model and
// back), --keep, and corrupt or incomplete checkpoints.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "io/checkpoint.h"
#include "kernels/matmul.h"
#include "test.h"

static char tmp[] = "/tmp/tsr_ckpt_XXXXXX";

static ModelConfig tiny(void) {
    Err e;
    ModelConfig c;
    config_preset(&c, "gpt2-tiny", &e);
    config_set_vocab(&c, 256);
    c.n_layer = 2;
    return c;
}

static void test_roundtrip(void) {
    Err e;
    ModelConfig c = tiny();
    ModelSlice s = slice_whole(&c);
    Stage a, b;
    EXPECT(stage_init(&a, &c, &s, 1, 8, 0, &e) == 0 && stage_init(&b, &c, &s, 1, 8, 0, &e) == 0, "%s", e.msg);
    ptable_init(&a.table, a.params, 3);
    AdamW oa, ob;
    adamw_init(&oa, a.table.total, &e);
    adamw_init(&ob, b.table.total, &e);
    for (size_t i = 0; i < a.table.total; i++) { oa.m[i] = (float)i; oa.v[i] = 0.5f * i; }
    oa.t = 17;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/run", tmp);
    EXPECT(ckpt_save(dir, 5, &a, &oa, "{\"k\":1}", 0, &e) == 0, "%s", e.msg);
    Ckpt *ck;
    ModelConfig c2;
    EXPECT(ckpt_open(&ck, dir, &e) == 0, "%s", e.msg);
    if (!ck) return;
    EXPECT(strstr(ckpt_dir(ck), "step_00000005") && ckpt_step(ck) == 5 && ckpt_has_optimizer(ck), "meta");
    EXPECT(ckpt_config(ck, &c2, &e) == 0 && c2.n_layer == 2 && c2.vocab == 256, "config round trip");
    EXPECT(ckpt_load(ck, &b, &ob, &e) == 0 && ob.t == 17, "%s", e.msg);
    EXPECT(memcmp(a.params, b.params, a.table.total * 4) == 0 && memcmp(oa.m, ob.m, a.table.total * 4) == 0 &&
           memcmp(oa.v, ob.v, a.table.total * 4) == 0, "loaded tensors differ");
    EXPECT(ckpt_verify(ck, &e) == 0, "%s", e.msg);
    ckpt_close(ck);
    // --keep 2: only the newest two steps remain.
    for (int st = 6; st <= 8; st++) EXPECT(ckpt_save(dir, st, &a, NULL, NULL, 2, &e) == 0, "%s", e.msg);
    char p[700];
    snprintf(p, sizeof p, "%s/step_00000006", dir);
    int gone = access(p, F_OK) != 0;
    snprintf(p, sizeof p, "%s/step_00000007", dir);
    EXPECT(gone && access(p, F_OK) == 0, "--keep 2 kept the wrong steps");
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && ckpt_step(ck) == 8 && !ckpt_has_optimizer(ck), "latest is step 8");
    EXPECT(ckpt_load(ck, &b, &ob, &e) == -1 && strstr(e.msg, "no optimizer state"), "moments from a params-only checkpoint: %s", e.msg);
    ckpt_close(ck);
    adamw_free(&oa);
    adamw_free(&ob);
    stage_free(&a);
    stage_free(&b);
}

// Two tensor-parallel halves saved as two rank files load into the whole
// model, and the whole model's checkpoint loads into each half: the reader
// assembles tensors from slices.
static void test_slices_across_files(void) {
    Err e;
    ModelConfig c = tiny();
    ModelSlice whole = slice_whole(&c), h0 = {0, c.n_layer, 0, 2, 1}, h1 = {0, c.n_layer, 1, 2, 1};
    Stage w, a, b, w2;
    EXPECT(stage_init(&w, &c, &whole, 1, 8, 0, &e) == 0 && stage_init(&a, &c, &h0, 1, 8, 0, &e) == 0 &&
           stage_init(&b, &c, &h1, 1, 8, 0, &e) == 0 && stage_init(&w2, &c, &whole, 1, 8, 0, &e) == 0, "%s", e.msg);
    ptable_init(&w.table, w.params, 9);
    ptable_init(&a.table, a.params, 9);
    ptable_init(&b.table, b.params, 9);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tp", tmp);
    EXPECT(ckpt_begin(dir, 1, &e) == 0 && ckpt_write_rank(dir, 1, 0, &a, NULL, &e) == 0 &&
           ckpt_write_rank(dir, 1, 1, &b, NULL, &e) == 0 && ckpt_commit(dir, 1, 2, NULL, &a, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    Ckpt *ck;
    EXPECT(ckpt_open(&ck, dir, &e) == 0, "%s", e.msg);
    if (!ck) return;
    EXPECT(ckpt_load(ck, &w2, NULL, &e) == 0, "%s", e.msg);
    EXPECT(memcmp(w.params, w2.params, w.table.total * 4) == 0, "whole model assembled from two halves differs");
    ckpt_close(ck);
    // and the other way: whole -> a half
    snprintf(dir, sizeof dir, "%s/whole", tmp);
    EXPECT(ckpt_save(dir, 1, &w, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    memset(b.params, 0, b.table.total * 4);
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && ckpt_load(ck, &b, NULL, &e) == 0, "%s", e.msg);
    Stage b2;
    stage_init(&b2, &c, &h1, 1, 8, 0, &e);
    ptable_init(&b2.table, b2.params, 9);
    EXPECT(memcmp(b.params, b2.params, b.table.total * 4) == 0, "half loaded from the whole model differs");
    ckpt_close(ck);
    // A missing half is an error naming the tensor, not silent zeros.
    snprintf(dir, sizeof dir, "%s/half", tmp);
    EXPECT(ckpt_begin(dir, 1, &e) == 0 && ckpt_write_rank(dir, 1, 0, &a, NULL, &e) == 0 &&
           ckpt_commit(dir, 1, 1, NULL, &a, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && ckpt_load(ck, &w2, NULL, &e) == -1 && strstr(e.msg, "cover"),
           "incomplete slices: %s", e.msg);
    ckpt_close(ck);
    stage_free(&w); stage_free(&a); stage_free(&b); stage_free(&w2); stage_free(&b2);
}

// ZeRO pieces: flat ranges that cut tensors mid-row, written by several
// ranks ("flat" entries), load into the whole model; so do tensor-parallel
// halves each cut into three pieces.
static void test_flat_pieces(void) {
    Err e;
    ModelConfig c = tiny();
    ModelSlice whole = slice_whole(&c), padded = whole, h[2] = {{0, c.n_layer, 0, 2, 1}, {0, c.n_layer, 1, 2, 1}};
    padded.pad_multiple = 3;
    Stage w, p, w2, half[2];
    EXPECT(stage_init(&w, &c, &whole, 1, 8, 0, &e) == 0 && stage_init(&p, &c, &padded, 1, 8, 0, &e) == 0 &&
           stage_init(&w2, &c, &whole, 1, 8, 0, &e) == 0 && stage_init(&half[0], &c, &h[0], 1, 8, 0, &e) == 0 &&
           stage_init(&half[1], &c, &h[1], 1, 8, 0, &e) == 0, "%s", e.msg);
    ptable_init(&w.table, w.params, 11);
    ptable_init(&p.table, p.params, 11);
    AdamW ow, o2;
    adamw_init(&ow, w.table.total, &e);
    adamw_init(&o2, w.table.total, &e);
    for (size_t i = 0; i < p.table.total; i++) p.grads[i] = 0.5f * p.params[i];   // stands in for the moments
    // every segment in 3 pieces; rank r writes piece r of each
    char dir[600];
    snprintf(dir, sizeof dir, "%s/zero", tmp);
    EXPECT(ckpt_begin(dir, 3, &e) == 0, "%s", e.msg);
    for (int r = 0; r < 3; r++) {
        CkptPiece pc[16];
        for (int k = 0; k < p.table.nseg; k++) {
            size_t sk = (p.table.seg[k].hi - p.table.seg[k].lo) / 3, lo = p.table.seg[k].lo + (size_t)r * sk;
            pc[k] = (CkptPiece){lo, lo + sk, p.params + lo, p.grads + lo, p.params + lo};
        }
        EXPECT(ckpt_write_pieces(dir, 3, r, &p.table, pc, p.table.nseg, 1, &e) == 0, "%s", e.msg);
    }
    ow.t = 4;
    CkptLayout lay = {3, 3};
    EXPECT(ckpt_commit(dir, 3, 3, &lay, &w, &ow, NULL, 0, &e) == 0, "%s", e.msg);
    Ckpt *ck;
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && ckpt_load(ck, &w2, &o2, &e) == 0, "%s", e.msg);
    int bad = memcmp(w.params, w2.params, w.table.total * 4) != 0;
    for (size_t i = 0; i < w.table.total; i++) bad += o2.m[i] != 0.5f * w.params[i] || o2.v[i] != w.params[i];
    EXPECT(bad == 0 && o2.t == 4, "whole model from ZeRO pieces differs (%d)", bad);
    ckpt_close(ck);
    // tensor-parallel halves, each cut at two awkward offsets
    snprintf(dir, sizeof dir, "%s/tpflat", tmp);
    EXPECT(ckpt_begin(dir, 1, &e) == 0, "%s", e.msg);
    for (int hh = 0; hh < 2; hh++) {
        ptable_init(&half[hh].table, half[hh].params, 11);
        size_t n = half[hh].table.total, cut[4] = {0, n / 3 + 7, 2 * n / 3 + 1, n};
        for (int q = 0; q < 3; q++) {
            CkptPiece pc = {cut[q], cut[q + 1], half[hh].params + cut[q], NULL, NULL};
            EXPECT(ckpt_write_pieces(dir, 1, hh * 3 + q, &half[hh].table, &pc, 1, 0, &e) == 0, "%s", e.msg);
        }
    }
    EXPECT(ckpt_commit(dir, 1, 6, NULL, &w, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    memset(w2.params, 0, w2.table.total * 4);
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && ckpt_load(ck, &w2, NULL, &e) == 0, "%s", e.msg);
    EXPECT(memcmp(w.params, w2.params, w.table.total * 4) == 0, "whole model from cut tensor-parallel halves differs");
    ckpt_close(ck);
    adamw_free(&ow);
    adamw_free(&o2);
    stage_free(&w); stage_free(&p); stage_free(&w2); stage_free(&half[0]); stage_free(&half[1]);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    fputs(s, f);
    fclose(f);
}

static void test_corruption(void) {
    Err e;
    ModelConfig c = tiny();
    ModelSlice s = slice_whole(&c);
    Stage a;
    stage_init(&a, &c, &s, 1, 8, 0, &e);
    ptable_init(&a.table, a.params, 1);
    char dir[600], f[800], cmd[2000];
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    Ckpt *ck = NULL;
#define FRESH() (snprintf(cmd, sizeof cmd, "rm -rf %s", dir), system(cmd), ckpt_save(dir, 3, &a, NULL, NULL, 0, &e))
    // truncated rank file
    FRESH();
    snprintf(f, sizeof f, "%s/step_00000003/rank_00000.tsr", dir);
    EXPECT(truncate(f, 5000) == 0, "truncate");
    EXPECT(ckpt_open(&ck, dir, &e) == -1 && strstr(e.msg, "rank_00000.tsr") && strstr(e.msg, "truncated"), "truncated: %s", e.msg);
    // missing rank file
    FRESH();
    unlink(f);
    EXPECT(ckpt_open(&ck, dir, &e) == -1 && strstr(e.msg, "rank_00000.tsr") && strstr(e.msg, "No such file"), "missing: %s", e.msg);
    // flipped data byte: caught by the tensor checksum on load
    FRESH();
    FILE *fp = fopen(f, "r+b");
    fseek(fp, -40, SEEK_END);
    int ch = fgetc(fp);
    fseek(fp, -40, SEEK_END);
    fputc(ch ^ 1, fp);
    fclose(fp);
    Stage b;
    stage_init(&b, &c, &s, 1, 8, 0, &e);
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && ckpt_load(ck, &b, NULL, &e) == -1 && strstr(e.msg, "checksum mismatch"),
           "flipped byte: %s", e.msg);
    ckpt_close(ck);
    // meta.json: wrong version, wrong field types, bad JSON, missing model
    snprintf(f, sizeof f, "%s/step_00000003/meta.json", dir);
    const char *metas[][2] = {
        {"{\"format\":\"tessera-checkpoint\",\"version\":2,\"step\":3,\"files\":[\"rank_00000.tsr\"]}", "unsupported checkpoint version"},
        {"{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":\"3\",\"files\":[\"rank_00000.tsr\"]}", "field 'step'"},
        {"{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":3,\"files\":[\"../x\"]}", "field 'files'"},
        {"{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":3}", "field 'files'"},
        {"{\"format\":\"other\",\"version\":1}", "field 'format'"},
        {"{\"format\":\"tessera-checkpoint\",", "invalid JSON"},
    };
    for (size_t k = 0; k < sizeof metas / sizeof metas[0]; k++) {
        write_text(f, metas[k][0]);
        EXPECT(ckpt_open(&ck, dir, &e) == -1 && strstr(e.msg, "meta.json") && strstr(e.msg, metas[k][1]),
               "meta case %zu: %s", k, e.msg);
    }
    write_text(f, "{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":3,\"files\":[\"rank_00000.tsr\"],"
                  "\"model\":{\"n_layer\":2,\"n_head\":3,\"d_model\":128,\"d_ff\":512,\"max_seq\":64,\"vocab\":256}}");
    ModelConfig c2;
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && ckpt_config(ck, &c2, &e) == -1 && strstr(e.msg, "n_head"), "bad model: %s", e.msg);
    ckpt_close(ck);
    EXPECT(ckpt_open(&ck, "/nonexistent/run", &e) == -1 && strstr(e.msg, "/nonexistent/run"), "missing dir: %s", e.msg);
    stage_free(&a);
    stage_free(&b);
}

int main(void) {
    if (!mkdtemp(tmp)) return 1;
    kernels_set_threads(2);
    RUN(test_roundtrip);
    RUN(test_slices_across_files);
    RUN(test_flat_pieces);
    RUN(test_corruption);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd)) return 1;
    return test_finish();
}
