// io/checkpoint: save/load round trip, tensors assembled from slices held by
// several files (a tensor-parallel pair loaded into the whole model and
// back), --keep, corrupt or incomplete checkpoints, and the background
// writer (the same bytes as a synchronous write, from its staging copy).
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/checksum.h"
#include "io/checkpoint.h"
#include "io/ckpt_writer.h"
#include "kernels/matmul.h"
#include "optim/adamw.h"
#include "test.h"

static char tmp[] = "/tmp/tsr_ckpt_XXXXXX";

// A slice's parameter table and flat buffers, as a rank holds them.
typedef struct {
    ModelConfig cfg;
    ModelSlice slice;
    ParamTable table;
    float *params, *grads;
} Model;

static int model_init(Model *m, const ModelConfig *c, const ModelSlice *s, Err *e) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->slice = *s;
    if (ptable_build(&m->table, c, s, e)) return -1;
    m->params = mem_alloc(MEM_PARAMS, m->table.total * 4);
    m->grads = mem_alloc(MEM_GRADS, m->table.total * 4);
    return 0;
}

static void model_free(Model *m) {
    mem_free(m->params);
    mem_free(m->grads);
    ptable_free(&m->table);
}

static const char *const SECTIONS[] = {"", "exp_avg/", "exp_avg_sq/"};

// rank's whole buffers, with the moments when o is given.
static int write_rank(const char *dir, int64_t step, int rank, const Model *m, const AdamW *o, Err *e) {
    CkptPiece all = {0, m->table.total, {m->params, o ? o->m : NULL, o ? o->v : NULL}};
    return ckpt_write_pieces(dir, step, rank, &m->table, SECTIONS, o ? 3 : 1, &all, 1, e);
}

static int commit(const char *dir, int64_t step, int nfiles, int dp, int zero, const Model *m, const AdamW *o,
                  const char *train, int keep, Err *e) {
    char state[64];
    snprintf(state, sizeof state, "{\"optimizer\":true,\"adam_t\":%lld}", o ? (long long)o->t : 0LL);
    CkptMeta md = {.step = step, .cfg = &m->cfg, .nfiles = nfiles, .dp = dp, .tp = m->slice.tp_size, .zero = zero,
                   .state = o ? state : NULL, .train = train};
    return ckpt_commit(dir, &md, keep, e);
}

// One process: the whole model (and moments) in one file.
static int save(const char *dir, int64_t step, const Model *m, const AdamW *o, const char *train, int keep, Err *e) {
    if (ckpt_begin(dir, step, e) || write_rank(dir, step, 0, m, o, e)) return -1;
    return commit(dir, step, 1, 1, 0, m, o, train, keep, e);
}

// The model's parameters and, with o, its moments and step count.
static int load(Ckpt *ck, Model *m, AdamW *o, Err *e) {
    if (ckpt_load_params(ck, &m->table, m->params, e)) return -1;
    if (!o) return 0;
    if (ckpt_load_range(ck, &m->table, SECTIONS[1], 0, m->table.total, o->m, e) ||
        ckpt_load_range(ck, &m->table, SECTIONS[2], 0, m->table.total, o->v, e))
        return -1;
    return json_int64(json_get(ckpt_meta(ck), "adam_t"), &o->t) ? err_set(e, ERR_USAGE, "no adam_t") : 0;
}

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
    Model a, b;
    EXPECT(model_init(&a, &c, &s, &e) == 0 && model_init(&b, &c, &s, &e) == 0, "%s", e.msg);
    ptable_init(&a.table, a.params, 3);
    AdamW oa, ob;
    adamw_init(&oa, a.table.total, &e);
    adamw_init(&ob, b.table.total, &e);
    for (size_t i = 0; i < a.table.total; i++) { oa.m[i] = (float)i; oa.v[i] = 0.5f * i; }
    oa.t = 17;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/run", tmp);
    EXPECT(save(dir, 5, &a, &oa, "{\"k\":1}", 0, &e) == 0, "%s", e.msg);
    Ckpt *ck;
    ModelConfig c2;
    EXPECT(ckpt_open(&ck, dir, &e) == 0, "%s", e.msg);
    if (!ck) return;
    EXPECT(strstr(ckpt_dir(ck), "step_00000005") && ckpt_step(ck) == 5 && ckpt_has_section(ck, "exp_avg/"), "meta");
    EXPECT(ckpt_config(ck, &c2, &e) == 0 && c2.n_layer == 2 && c2.vocab == 256, "config round trip");
    EXPECT(load(ck, &b, &ob, &e) == 0 && ob.t == 17, "%s", e.msg);
    EXPECT(memcmp(a.params, b.params, a.table.total * 4) == 0 && memcmp(oa.m, ob.m, a.table.total * 4) == 0 &&
           memcmp(oa.v, ob.v, a.table.total * 4) == 0, "loaded tensors differ");
    EXPECT(ckpt_verify(ck, &e) == 0, "%s", e.msg);
    ckpt_close(ck);
    // --keep 2: only the newest two steps remain.
    for (int st = 6; st <= 8; st++) EXPECT(save(dir, st, &a, NULL, NULL, 2, &e) == 0, "%s", e.msg);
    char p[700];
    snprintf(p, sizeof p, "%s/step_00000006", dir);
    int gone = access(p, F_OK) != 0;
    snprintf(p, sizeof p, "%s/step_00000007", dir);
    EXPECT(gone && access(p, F_OK) == 0, "--keep 2 kept the wrong steps");
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && ckpt_step(ck) == 8 && !ckpt_has_section(ck, "exp_avg/"), "latest is step 8");
    EXPECT(load(ck, &b, &ob, &e) == -1 && strstr(e.msg, "exp_avg/") && strstr(e.msg, "missing"), "moments from a params-only checkpoint: %s", e.msg);
    ckpt_close(ck);
    adamw_free(&oa);
    adamw_free(&ob);
    model_free(&a);
    model_free(&b);
}

// Two tensor-parallel halves saved as two rank files load into the whole
// model, and the whole model's checkpoint loads into each half: the reader
// assembles tensors from slices.
static void test_slices_across_files(void) {
    Err e;
    ModelConfig c = tiny();
    ModelSlice whole = slice_whole(&c), h0 = {0, c.n_layer, 0, 2, 1, 0, 1, 0}, h1 = {0, c.n_layer, 1, 2, 1, 0, 1, 0};
    Model w, a, b, w2;
    EXPECT(model_init(&w, &c, &whole, &e) == 0 && model_init(&a, &c, &h0, &e) == 0 &&
           model_init(&b, &c, &h1, &e) == 0 && model_init(&w2, &c, &whole, &e) == 0, "%s", e.msg);
    ptable_init(&w.table, w.params, 9);
    ptable_init(&a.table, a.params, 9);
    ptable_init(&b.table, b.params, 9);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tp", tmp);
    EXPECT(ckpt_begin(dir, 1, &e) == 0 && write_rank(dir, 1, 0, &a, NULL, &e) == 0 &&
           write_rank(dir, 1, 1, &b, NULL, &e) == 0 && commit(dir, 1, 2, 1, 0, &a, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    Ckpt *ck;
    EXPECT(ckpt_open(&ck, dir, &e) == 0, "%s", e.msg);
    if (!ck) return;
    EXPECT(load(ck, &w2, NULL, &e) == 0, "%s", e.msg);
    EXPECT(memcmp(w.params, w2.params, w.table.total * 4) == 0, "whole model assembled from two halves differs");
    ckpt_close(ck);
    // and the other way: whole -> a half
    snprintf(dir, sizeof dir, "%s/whole", tmp);
    EXPECT(save(dir, 1, &w, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    memset(b.params, 0, b.table.total * 4);
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && load(ck, &b, NULL, &e) == 0, "%s", e.msg);
    Model b2;
    model_init(&b2, &c, &h1, &e);
    ptable_init(&b2.table, b2.params, 9);
    EXPECT(memcmp(b.params, b2.params, b.table.total * 4) == 0, "half loaded from the whole model differs");
    ckpt_close(ck);
    // A missing half is an error naming the tensor, not silent zeros.
    snprintf(dir, sizeof dir, "%s/half", tmp);
    EXPECT(ckpt_begin(dir, 1, &e) == 0 && write_rank(dir, 1, 0, &a, NULL, &e) == 0 &&
           commit(dir, 1, 1, 1, 0, &a, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && load(ck, &w2, NULL, &e) == -1 && strstr(e.msg, "cover"),
           "incomplete slices: %s", e.msg);
    ckpt_close(ck);
    model_free(&w); model_free(&a); model_free(&b); model_free(&w2); model_free(&b2);
}

// ZeRO pieces: flat ranges that cut tensors mid-row, written by several
// ranks ("flat" entries), load into the whole model; so do tensor-parallel
// halves each cut into three pieces.
static void test_flat_pieces(void) {
    Err e;
    ModelConfig c = tiny();
    ModelSlice whole = slice_whole(&c), padded = whole, h[2] = {{0, c.n_layer, 0, 2, 1, 0, 1, 0}, {0, c.n_layer, 1, 2, 1, 0, 1, 0}};
    padded.pad_multiple = 3;
    Model w, p, w2, half[2];
    EXPECT(model_init(&w, &c, &whole, &e) == 0 && model_init(&p, &c, &padded, &e) == 0 &&
           model_init(&w2, &c, &whole, &e) == 0 && model_init(&half[0], &c, &h[0], &e) == 0 &&
           model_init(&half[1], &c, &h[1], &e) == 0, "%s", e.msg);
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
            pc[k] = (CkptPiece){lo, lo + sk, {p.params + lo, p.grads + lo, p.params + lo}};
        }
        EXPECT(ckpt_write_pieces(dir, 3, r, &p.table, SECTIONS, 3, pc, p.table.nseg, &e) == 0, "%s", e.msg);
    }
    ow.t = 4;
    EXPECT(commit(dir, 3, 3, 3, 3, &w, &ow, NULL, 0, &e) == 0, "%s", e.msg);
    Ckpt *ck;
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && load(ck, &w2, &o2, &e) == 0, "%s", e.msg);
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
            CkptPiece pc = {cut[q], cut[q + 1], {half[hh].params + cut[q]}};
            EXPECT(ckpt_write_pieces(dir, 1, hh * 3 + q, &half[hh].table, SECTIONS, 1, &pc, 1, &e) == 0, "%s", e.msg);
        }
    }
    EXPECT(commit(dir, 1, 6, 1, 0, &w, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    memset(w2.params, 0, w2.table.total * 4);
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && load(ck, &w2, NULL, &e) == 0, "%s", e.msg);
    EXPECT(memcmp(w.params, w2.params, w.table.total * 4) == 0, "whole model from cut tensor-parallel halves differs");
    ckpt_close(ck);
    adamw_free(&ow);
    adamw_free(&o2);
    model_free(&w); model_free(&p); model_free(&w2); model_free(&half[0]); model_free(&half[1]);
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
    Model a;
    model_init(&a, &c, &s, &e);
    ptable_init(&a.table, a.params, 1);
    char dir[600], f[800], cmd[2000];
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    Ckpt *ck = NULL;
#define FRESH() (snprintf(cmd, sizeof cmd, "rm -rf %s", dir), system(cmd), save(dir, 3, &a, NULL, NULL, 0, &e))
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
    Model b;
    model_init(&b, &c, &s, &e);
    EXPECT(ckpt_open(&ck, dir, &e) == 0 && load(ck, &b, NULL, &e) == -1 && strstr(e.msg, "checksum mismatch"),
           "flipped byte: %s", e.msg);
    ckpt_close(ck);
    // meta.json: one changed byte (step 3 -> 4) breaks its checksum
    snprintf(f, sizeof f, "%s/step_00000003/meta.json", dir);
    FRESH();
    fp = fopen(f, "r+b");
    char text[4096] = "";
    size_t got = fread(text, 1, sizeof text - 1, fp);
    char *at = strstr(text, "\"step\":3");
    EXPECT(got > 0 && at && strstr(text, "\"crc32c\":"), "meta.json carries a checksum: %s", text);
    if (at) { fseek(fp, at - text + 7, SEEK_SET); fputc('4', fp); }
    fclose(fp);
    EXPECT(ckpt_open(&ck, dir, &e) == -1 && strstr(e.msg, "meta.json") && strstr(e.msg, "checksum mismatch"),
           "changed meta.json: %s", e.msg);
    // meta.json: wrong version, wrong field types, bad JSON, missing model, step out of range (no checksum: an older file)
    const char *metas[][2] = {
        {"{\"format\":\"tessera-checkpoint\",\"version\":2,\"step\":3,\"files\":[\"rank_00000.tsr\"]}", "unsupported checkpoint version"},
        {"{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":\"3\",\"files\":[\"rank_00000.tsr\"]}", "field 'step'"},
        {"{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":3,\"files\":[\"../x\"]}", "field 'files'"},
        {"{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":3}", "field 'files'"},
        {"{\"format\":\"other\",\"version\":1}", "field 'format'"},
        {"{\"format\":\"tessera-checkpoint\",", "invalid JSON"},
        {"{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":2147483648,\"files\":[\"rank_00000.tsr\"]}", "field 'step'"},
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
    model_free(&a);
    model_free(&b);
}

// A checkpoint directory of one rank file: its index JSON (with the right
// CRC) and nfloats of data.
static void hostile_file(const char *dir, const char *index, const float *data, size_t nfloats) {
    char path[800];
    snprintf(path, sizeof path, "%s", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    write_text(path, "{\"format\":\"tessera-checkpoint\",\"version\":1,\"step\":1,\"files\":[\"rank_00000.tsr\"],"
                     "\"model\":{\"n_layer\":2,\"n_head\":4,\"d_model\":128,\"d_ff\":512,\"max_seq\":64,\"vocab\":256}}");
    snprintf(path, sizeof path, "%s/rank_00000.tsr", dir);
    FILE *f = fopen(path, "wb");
    unsigned char hdr[32] = {'T', 'S', 'R', 'T', 'E', 'N', 'S', 0, 1};
    uint32_t n = (uint32_t)strlen(index), crc = crc32c(0, index, n);
    uint64_t db = nfloats * 4;
    memcpy(hdr + 12, &n, 4);
    memcpy(hdr + 16, &crc, 4);
    memcpy(hdr + 24, &db, 8);
    static const char zeros[64];
    fwrite(hdr, 32, 1, f);
    fwrite(index, n, 1, f);
    fwrite(zeros, (64 - (32 + n) % 64) % 64, 1, f);
    fwrite(data, 4, nfloats, f);
    fclose(f);
}

// Index entries built to overflow, and pieces that overlap: refused with
// the tensor's name, every product checked (this test also runs under
// UBSan), every element loaded exactly once.
static void test_hostile_index(void) {
    Err e;
    Ckpt *ck = NULL;
    char dir[600], idx[1000];
    static float data[32768];
    for (int i = 0; i < 32768; i++) data[i] = (float)i;
    const char *cases[][2] = {
        {"[0,0]", "[9223372036854775807,128]"},   // offset + extent overflows
        {"[9223372036854775807,0]", "[1,128]"},
    };
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, "%s/hostile%d", tmp, k);
        snprintf(idx, sizeof idx, "{\"tensors\":[{\"name\":\"wte.weight\",\"dtype\":\"f32\",\"shape\":[256,128],"
                 "\"offset\":%s,\"extent\":%s,\"data_offset\":0,\"nbytes\":131072,\"crc32c\":0}]}", cases[k][0], cases[k][1]);
        hostile_file(dir, idx, data, 32768);
        EXPECT(ckpt_open(&ck, dir, &e) == -1 && strstr(e.msg, "wte.weight") && strstr(e.msg, "outside its shape"), "case %d: %s", k, e.msg);
    }
    snprintf(dir, sizeof dir, "%s/hostile_big", tmp);
    hostile_file(dir, "{\"tensors\":[{\"name\":\"x\",\"dtype\":\"f32\",\"shape\":[2097152,2097152,2097152],"
                      "\"offset\":[0,0,0],\"extent\":[1,1,4],\"data_offset\":0,\"nbytes\":16,\"crc32c\":0}]}", data, 4);
    EXPECT(ckpt_open(&ck, dir, &e) == -1 && strstr(e.msg, "shape too large"), "2^63 elements: %s", e.msg);
    // two pieces of wte that overlap by 8192 elements (valid checksums) and
    // together count as many elements as the tensor has: the last 8192
    // would never be loaded
    uint32_t c1 = crc32c(0, data, 20480 * 4), c2 = crc32c(0, data + 20480, 12288 * 4);
    snprintf(idx, sizeof idx, "{\"tensors\":["
             "{\"name\":\"wte.weight\",\"dtype\":\"f32\",\"shape\":[256,128],\"offset\":[0,0],\"extent\":[256,128],"
             "\"flat\":[0,20480],\"data_offset\":0,\"nbytes\":81920,\"crc32c\":%u},"
             "{\"name\":\"wte.weight\",\"dtype\":\"f32\",\"shape\":[256,128],\"offset\":[0,0],\"extent\":[256,128],"
             "\"flat\":[12288,24576],\"data_offset\":81920,\"nbytes\":49152,\"crc32c\":%u}]}", c1, c2);
    snprintf(dir, sizeof dir, "%s/hostile_overlap", tmp);
    hostile_file(dir, idx, data, 32768);
    ModelConfig c = tiny();
    ModelSlice s = slice_whole(&c);
    Model m;
    model_init(&m, &c, &s, &e);
    const ParamInfo *wte = ptable_find(&m.table, "wte.weight");
    EXPECT(ckpt_open(&ck, dir, &e) == 0, "%s", e.msg);
    EXPECT(ck && ckpt_load_range(ck, &m.table, "", wte->offset, wte->offset + wte->numel, m.params, &e) == -1 &&
           strstr(e.msg, "overlap"), "overlapping pieces: %s", ck ? e.msg : "");
    ckpt_close(ck);
    model_free(&m);
}

// Whole file's bytes equal.
static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    for (int ca = 0, cb = 0; same && ca != EOF; ) {
        ca = fgetc(fa);
        cb = fgetc(fb);
        same = ca == cb;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

// io/ckpt_writer: ZeRO-like pieces of 3 sections written in the background
// are the bytes ckpt_write_pieces writes, though the caller's buffers
// change as soon as the write starts; the staging buffer is MEM_CKPT's; a
// failed write reports its path at the wait.
static void test_background_writer(void) {
    Err e;
    ModelConfig c = tiny();
    ModelSlice padded = slice_whole(&c);
    padded.pad_multiple = 3;
    Model p;
    EXPECT(model_init(&p, &c, &padded, &e) == 0, "%s", e.msg);
    ptable_init(&p.table, p.params, 5);
    for (size_t i = 0; i < p.table.total; i++) p.grads[i] = 0.25f * p.params[i];
    CkptPiece pc[16];
    size_t floats = 0;
    for (int k = 0; k < p.table.nseg; k++) {   // piece 1 of 3 of every segment
        size_t sk = (p.table.seg[k].hi - p.table.seg[k].lo) / 3, lo = p.table.seg[k].lo + sk;
        pc[k] = (CkptPiece){lo, lo + sk, {p.params + lo, p.grads + lo, p.params + lo}};
        floats += 3 * sk;
    }
    char sync[600], async[600], a[700], b[700];
    snprintf(sync, sizeof sync, "%s/wsync", tmp);
    snprintf(async, sizeof async, "%s/wasync", tmp);
    EXPECT(ckpt_begin(sync, 4, &e) == 0 && ckpt_write_pieces(sync, 4, 1, &p.table, SECTIONS, 3, pc, p.table.nseg, &e) == 0,
           "%s", e.msg);
    size_t m0 = mem_current(MEM_CKPT);
    CkptWriter *w;
    EXPECT(ckpt_writer_open(&w, floats, &e) == 0, "%s", e.msg);
    EXPECT(mem_current(MEM_CKPT) - m0 == floats * sizeof(float), "staging counted under MEM_CKPT");
    EXPECT(ckpt_begin(async, 4, &e) == 0, "%s", e.msg);
    EXPECT(ckpt_writer_start(w, async, 4, 1, &p.table, SECTIONS, 3, pc, p.table.nseg, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < p.table.total; i++) p.params[i] = p.grads[i] = -1.0f;   // the step goes on
    EXPECT(ckpt_writer_wait(w, &e) == 0 && ckpt_writer_done(w), "%s", e.msg);
    snprintf(a, sizeof a, "%s/step_00000004.tmp/rank_00001.tsr", sync);
    snprintf(b, sizeof b, "%s/step_00000004.tmp/rank_00001.tsr", async);
    EXPECT(same_file(a, b), "the background writer's file differs from ckpt_write_pieces'");
    // a step never begun: the thread's failure comes back at the wait
    EXPECT(ckpt_writer_start(w, async, 9, 0, &p.table, SECTIONS, 3, pc, p.table.nseg, &e) == 0, "%s", e.msg);
    e.msg[0] = 0;
    EXPECT(ckpt_writer_wait(w, &e) == -1 && strstr(e.msg, "step_00000009.tmp"), "failed write: %s", e.msg);
    EXPECT(ckpt_writer_wait(w, &e) == 0, "nothing in flight");
    ckpt_writer_close(w);
    EXPECT(mem_current(MEM_CKPT) == m0, "staging freed");
    model_free(&p);
}

int main(void) {
    if (!mkdtemp(tmp)) return 1;
    kernels_set_threads(2);
    RUN(test_roundtrip);
    RUN(test_slices_across_files);
    RUN(test_flat_pieces);
    RUN(test_corruption);
    RUN(test_hostile_index);
    RUN(test_background_writer);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd)) return 1;
    return test_finish();
}
