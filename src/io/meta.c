#include "io/meta.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/checksum.h"

static const char SEAL[] = "\"crc32c\":";

void meta_seal(JsonBuf *b) {
    char tail[48];
    uint32_t crc = crc32c(crc32c(0, b->s, b->len), ",", 1);   // the separator jb_raw puts before the key
    snprintf(tail, sizeof tail, "%s %u}\n", SEAL, (unsigned)crc);
    jb_raw(b, tail);
}

// The last occurrence of the seal's key in text[0..len), or NULL.
static const char *find_seal(const char *text, size_t len) {
    size_t k = sizeof SEAL - 1;
    for (size_t i = len >= k ? len - k + 1 : 0; i-- > 0;)
        if (!memcmp(text + i, SEAL, k)) return text + i;
    return NULL;
}

int meta_parse(const char *text, size_t len, const char *path, Json **out, Err *err) {
    *out = NULL;
    Json *m = json_parse(text, len, err);
    if (!m) { err_prefix(err, path); return -1; }
    const Json *seal = json_get(m, "crc32c");
    if (seal) {   // checked before any field is believed
        const char *at = find_seal(text, len);
        int64_t want;
        if (!at || json_int64(seal, &want) || want < 0 || want > 0xffffffffLL ||
            crc32c(0, text, (size_t)(at - text)) != (uint32_t)want) {
            err_set(err, ERR_USAGE, "%s: checksum mismatch (the file is damaged)", path);
            goto fail;
        }
    }
    const Json *f = json_get(m, "format"), *v = json_get(m, "version"), *files = json_get(m, "files");
    int64_t x;
    if (!f || f->type != JSON_STR || strcmp(f->text, "tessera-checkpoint")) {
        err_set(err, ERR_USAGE, "%s: not a tessera checkpoint (field 'format')", path);
        goto fail;
    }
    if (json_int64(v, &x) || x != META_VERSION) {
        err_set(err, ERR_USAGE, "%s: unsupported checkpoint version (field 'version'; this build reads %d)", path, META_VERSION);
        goto fail;
    }
    if (json_int64(json_get(m, "step"), &x) || x < 0 || x > INT32_MAX) {
        err_set(err, ERR_USAGE, "%s: field 'step' is missing or not an integer in [0, 2^31)", path);
        goto fail;
    }
    if (!files || files->type != JSON_ARR || files->len < 1 || files->len > 65536) {
        err_set(err, ERR_USAGE, "%s: field 'files' must list the rank files", path);
        goto fail;
    }
    for (size_t i = 0; i < files->len; i++) {
        const Json *fn = json_at(files, i);
        if (!fn || fn->type != JSON_STR || !fn->text[0] || strchr(fn->text, '/') || strlen(fn->text) != fn->len ||
            !strcmp(fn->text, "..") || !strcmp(fn->text, ".")) {
            err_set(err, ERR_USAGE, "%s: field 'files' entry %zu is not a file name", path, i);
            goto fail;
        }
    }
    *out = m;
    return 0;
fail:
    json_free(m);
    return -1;
}

int meta_model(const Json *meta, const char *path, ModelConfig *cfg, Err *err) {
    const Json *m = json_get(meta, "model");
    if (!m || m->type != JSON_OBJ) return err_set(err, ERR_USAGE, "%s: missing field 'model'", path);
    static const char *keys[] = {"n_layer", "n_head", "d_model", "d_ff", "max_seq", "vocab"};
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < 6; i++)   // what every model has; the loop below reads them with the rest
        if (!json_get(m, keys[i])) return err_set(err, ERR_USAGE, "%s: field 'model.%s' is missing", path, keys[i]);
    const Json *ar = json_get(m, "arch");
    if (ar && (ar->type != JSON_STR || config_arch_parse(ar->text, &cfg->arch)))
        return err_set(err, ERR_USAGE, "%s: field 'model.arch' must be one of %s", path, config_arch_list());
    for (const Json *f = m->child; f; f = f->next) {   // every model field, checked as a config's are
        if (!strcmp(f->key, "arch") || !strcmp(f->key, "name") || !strcmp(f->key, "vocab_padded")) continue;
        Err fe = {0};
        if (config_set_field(cfg, f->key, f, &fe))
            return err_set(err, ERR_USAGE, "%s: field 'model.%s': %s", path, f->key, fe.msg);
    }
    const Json *nm = json_get(m, "name");
    snprintf(cfg->name, sizeof cfg->name, "%s", nm && nm->type == JSON_STR ? nm->text : "custom");
    config_set_vocab(cfg, cfg->vocab);
    if (config_validate(cfg, err)) {
        char pre[300];
        snprintf(pre, sizeof pre, "%s: model", path);
        err_prefix(err, pre);
        return -1;
    }
    return 0;
}
