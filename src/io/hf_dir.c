#include "io/hf_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"

int hf_is_dir(const char *path) {
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/config.json", path);
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && stat(p, &st) == 0;
}

void hf_dir_close(HfDir *d) {
    for (int i = 0; i < d->n; i++) {
        st_close(&d->f[i]);
        free(d->fname[i]);
    }
    d->n = 0;
}

// Opens dir/name as the next file of d.
static int open_file(HfDir *d, const char *dir, const char *name, Err *err) {
    if (d->n == HF_MAX_SHARDS) return err_set(err, ERR_USAGE, "%s: more than %d shards", dir, HF_MAX_SHARDS);
    char path[4400];
    snprintf(path, sizeof path, "%s%s%s", dir, *dir ? "/" : "", name);
    if (!(d->fname[d->n] = strdup(name))) return err_set(err, ERR_RUN, "out of memory");
    if (st_open(&d->f[d->n], path, err)) {
        free(d->fname[d->n]);
        return -1;
    }
    d->n++;
    return 0;
}

int hf_open_file(HfDir *d, const char *path, Err *err) {
    memset(d, 0, sizeof *d);
    return open_file(d, "", path, err);
}

const StTensor *hf_dir_find(const HfDir *d, const char *name, const StFile **f) {
    for (int k = 0; k < d->n; k++) {
        const StTensor *t = st_find(&d->f[k], name);
        if (t) {
            if (f) *f = &d->f[k];
            return t;
        }
    }
    return NULL;
}

// The shard weight_map names for tensor `name`, or NULL.
static const char *map_shard(const Json *wm, const char *name) {
    const Json *v = json_get(wm, name);
    return v && v->type == JSON_STR ? v->text : NULL;
}

// Every tensor lies in the one shard weight_map names for it, and every
// name the map lists is in its shard.
static int check_map(const HfDir *d, const Json *wm, const char *ipath, Err *err) {
    for (const Json *m = wm->child; m; m = m->next) {
        int k = 0;
        while (k < d->n && strcmp(d->fname[k], m->text)) k++;
        if (!st_find(&d->f[k], m->key))
            return err_set(err, ERR_USAGE, "%s: weight_map puts tensor %s in %s, which does not hold it", ipath, m->key, m->text);
    }
    for (int k = 0; k < d->n; k++)
        for (int i = 0; i < d->f[k].n; i++) {
            const char *name = d->f[k].t[i].name, *s = map_shard(wm, name);
            if (!s)
                return err_set(err, ERR_USAGE, "%s: tensor %s in %s is not in weight_map", ipath, name, d->fname[k]);
            if (strcmp(s, d->fname[k]))
                return err_set(err, ERR_USAGE, "%s: tensor %s is in %s as well as in %s, where weight_map puts it", ipath,
                               name, d->fname[k], s);
        }
    return 0;
}

// A model.safetensors beside an index holds the shards' tensors, byte for
// byte; else one of the two is stale and which is meant cannot be told.
static int check_single(const HfDir *d, const char *dir, Err *err) {
    for (int k = 0; k < d->n; k++)
        if (!strcmp(d->fname[k], "model.safetensors")) return 0;   // the index names it: one of the shards
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat st;
    if (stat(path, &st)) return 0;
    StFile one;
    if (st_open(&one, path, err)) return -1;
    int total = 0, rc = 0;
    for (int k = 0; k < d->n; k++) total += d->f[k].n;
    const char *bad = total != one.n ? "(a different number of tensors)" : NULL;
    for (int i = 0; !bad && i < one.n; i++) {
        const StTensor *a = &one.t[i], *b;
        const StFile *f;
        if (!(b = hf_dir_find(d, a->name, &f)) || a->dtype != b->dtype || a->ndim != b->ndim ||
            memcmp(a->shape, b->shape, sizeof a->shape) || a->end - a->begin != b->end - b->begin ||
            memcmp(one.data + a->begin, f->data + b->begin, a->end - a->begin))
            bad = a->name;
    }
    if (bad)
        rc = err_set(err, ERR_USAGE, "%s: model.safetensors and model.safetensors.index.json disagree (tensor %s): one of "
                     "them is stale; remove it", dir, bad);
    st_close(&one);
    return rc;
}

int hf_open_weights(HfDir *d, const char *dir, Err *err) {
    memset(d, 0, sizeof *d);
    char ipath[4200];
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    struct stat st;
    if (stat(ipath, &st)) return open_file(d, dir, "model.safetensors", err);
    char *text;
    size_t len;
    if (file_read(ipath, &text, &len, 64 << 20, err)) return -1;
    Json *j = json_parse(text, len, err);
    free(text);
    if (!j) { err_prefix(err, ipath); return -1; }
    const Json *wm = json_get(j, "weight_map");
    int rc = !wm || wm->type != JSON_OBJ ? err_set(err, ERR_USAGE, "%s: no object 'weight_map'", ipath)
             : !wm->len ? err_set(err, ERR_USAGE, "%s: weight_map lists no tensors", ipath) : 0;
    for (const Json *m = wm ? wm->child : NULL; !rc && m; m = m->next) {
        if (m->type != JSON_STR || !m->text[0] || strchr(m->text, '/') || !strcmp(m->text, ".") || !strcmp(m->text, ".."))
            rc = err_set(err, ERR_USAGE, "%s: weight_map['%s'] is not a file name in the directory", ipath, m->key);
        int known = 0;
        for (int i = 0; !rc && i < d->n; i++) known |= !strcmp(d->fname[i], m->text);
        if (!rc && !known && open_file(d, dir, m->text, err)) rc = -1;
    }
    if (!rc) rc = check_map(d, wm, ipath, err) || check_single(d, dir, err) ? -1 : 0;
    json_free(j);
    if (rc) hf_dir_close(d);
    return rc;
}

int hf_dir_check_read(const HfDir *d, int (*reads)(const StTensor *t, void *ctx), void *ctx, const char *what,
                      Err *err) {
    for (int k = 0; k < d->n; k++)
        for (int i = 0; i < d->f[k].n; i++)
            if (!reads(&d->f[k].t[i], ctx))
                return err_set(err, ERR_USAGE, "%s: tensor %s is not part of %s (nothing would read it)", d->fname[k],
                               d->f[k].t[i].name, what);
    return 0;
}

Json *hf_config_read(const char *dir, char *path, size_t cap, Err *err) {
    snprintf(path, cap, "%s/config.json", dir);
    char *text;
    size_t len;
    if (file_read(path, &text, &len, 1 << 20, err)) return NULL;
    Json *j = json_parse(text, len, err);
    free(text);
    if (!j) { err_prefix(err, path); return NULL; }
    if (j->type != JSON_OBJ) {
        json_free(j);
        err_set(err, ERR_USAGE, "%s: not a JSON object", path);
        return NULL;
    }
    return j;
}

// Whether scalar v is the value the JSON text want[0..n) holds.
static int same_value(const Json *v, const char *want, size_t n) {
    Err e;
    Json *w = json_parse(want, n, &e);
    CHECKF(w, "a config table's value %.*s is not JSON", (int)n, want);
    int same = v->type == w->type && (v->type == JSON_NULL || (v->type == JSON_BOOL && v->boolean == w->boolean) ||
                                      (v->type == JSON_NUM && v->num == w->num) ||
                                      (v->type == JSON_STR && !strcmp(v->text, w->text)));
    json_free(w);
    return same;
}

int hf_config_check(const Json *cfg, const HfKey *keys, int n, const char *path, Err *err) {
    for (const Json *m = cfg->child; m; m = m->next) {
        int k = 0;
        while (k < n && strcmp(keys[k].name, m->key)) k++;
        if (k == n)
            return err_set(err, ERR_USAGE, "%s: key '%s' is not one tessera knows; it may change the model", path, m->key);
        if (keys[k].kind != HF_KEY_FIXED) continue;
        int ok = 0;
        for (const char *w = keys[k].want; !ok && *w;) {
            size_t l = strcspn(w, "|");
            ok = same_value(m, w, l);
            w += l + (w[l] == '|');
        }
        if (!ok) {
            const char *v = m->type == JSON_OBJ ? "an object" : m->type == JSON_ARR ? "an array"
                            : m->type == JSON_NULL ? "null" : m->type == JSON_BOOL ? (m->boolean ? "true" : "false") : NULL;
            return err_set(err, ERR_USAGE, "%s: '%s' is %s%s%s; tessera implements only %s", path, m->key,
                           v ? "" : m->type == JSON_STR ? "\"" : "", v ? v : m->text, v ? "" : m->type == JSON_STR ? "\"" : "",
                           keys[k].want);
        }
    }
    return 0;
}

int hf_config_int(const Json *cfg, const char *key, int required, int lo, int hi, int *out, const char *path, Err *err) {
    const Json *v = json_get(cfg, key);
    int64_t x;
    if (!v && !required) return 0;
    if (!v || v->type != JSON_NUM || json_int64(v, &x) || x < lo || x > hi)
        return err_set(err, ERR_USAGE, "%s: field '%s' is %s, not an integer in [%d, %d]", path, key,
                       !v ? "missing" : v->type == JSON_NUM ? v->text : json_type_name(v->type), lo, hi);
    *out = (int)x;
    return 0;
}

int hf_dir_prepare(const char *dir, Err *err) {
    struct stat st;
    if (stat(dir, &st)) {
        if (errno == ENOENT && !mkdir(dir, 0755)) return 0;
        return err_set(err, ERR_USAGE, "--hf-dir %s: %s", dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return err_set(err, ERR_USAGE, "--hf-dir %s: not a directory", dir);
    DIR *dd = opendir(dir);
    if (!dd) return err_set(err, ERR_USAGE, "--hf-dir %s: %s", dir, strerror(errno));
    char *names[4];   // the first weight files in name order, for the message
    int nfound = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        size_t l = strlen(e->d_name);
        int weights = !strcmp(e->d_name, "model.safetensors.index.json") ||
                      (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors") && strcmp(e->d_name, "model.safetensors"));
        if (!weights) continue;
        char *nm = strdup(e->d_name);
        if (!nm) continue;   // out of memory: the refusal names fewer files
        int k = nfound < 4 ? nfound : 4;
        while (k > 0 && strcmp(names[k - 1], nm) > 0) {   // insertion into the sorted first four
            if (k < 4) names[k] = names[k - 1];
            else free(names[3]);
            k--;
        }
        if (k < 4) names[k] = nm;
        else free(nm);
        nfound++;
    }
    closedir(dd);
    char found[1200] = "";
    for (int i = 0; i < nfound && i < 3; i++)
        snprintf(found + strlen(found), sizeof found - strlen(found), "%s%s", i ? ", " : "", names[i]);
    for (int i = 0; i < nfound && i < 4; i++) free(names[i]);
    if (nfound)
        return err_set(err, ERR_USAGE, "--hf-dir %s: holds %s%s, weights this export would not replace (a loader reads "
                       "them instead of model.safetensors); remove them or choose another directory", dir, found,
                       nfound > 3 ? " and more" : "");
    return 0;
}
