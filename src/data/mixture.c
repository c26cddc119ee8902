#include "data/mixture.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/json.h"
#include "data/shard.h"

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

void mix_free(Mixture *m) {
    for (int i = 0; i < m->n; i++) free(m->src[i].path);
    memset(m, 0, sizeof *m);
}

// Adds one source (name, path and raw weight, as the spec gives them)
// after checking each; `what` is the entry as written, for the messages.
static int add(Mixture *m, const char *name, size_t nlen, const char *path, size_t plen, double w, const char *flag,
               const char *what, Err *err) {
    if (m->n == MIX_MAX_SOURCES)
        return err_set(err, ERR_USAGE, "%s: more than %d sources", flag, MIX_MAX_SOURCES);
    if (!nlen || nlen >= MIX_NAME_MAX)
        return err_set(err, ERR_USAGE, "%s '%s': a source's name is 1 to %d characters", flag, what, MIX_NAME_MAX - 1);
    for (size_t i = 0; i < nlen; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
            return err_set(err, ERR_USAGE, "%s '%s': a source's name is made of letters, digits, '_', '.' and '-'", flag, what);
    }
    for (int i = 0; i < m->n; i++)
        if (strlen(m->src[i].name) == nlen && !memcmp(m->src[i].name, name, nlen))
            return err_set(err, ERR_USAGE, "%s: the name '%.*s' is given to two sources", flag, (int)nlen, name);
    if (!plen) return err_set(err, ERR_USAGE, "%s '%s': the source has no path", flag, what);
    if (!(w > 0) || !isfinite(w) || w > 1e9)
        return err_set(err, ERR_USAGE, "%s '%s': weight %g: a source's weight is positive (at most 1e9)", flag, what, w);
    MixSource *s = &m->src[m->n];
    if (!(s->path = malloc(plen + 1))) return err_set(err, ERR_RUN, "out of memory");
    m->n++;
    memcpy(s->path, path, plen);
    s->path[plen] = 0;
    memcpy(s->name, name, nlen);
    s->name[nlen] = 0;
    s->weight = w;
    struct stat st;
    if (!strpbrk(s->path, "*?[") && stat(s->path, &st))
        return err_set(err, ERR_USAGE, "%s '%s': %s: %s", flag, what, s->path, strerror(errno));
    return 0;
}

// NAME=PATH:WEIGHT, ... (entries split at ',', the weight after the last ':').
static int parse_list(Mixture *m, const char *spec, const char *flag, Err *err) {
    const char *p = spec;
    for (;;) {
        const char *end = strchr(p, ','), *eq;
        if (!end) end = p + strlen(p);
        char what[4200];
        if (end - p >= (int)sizeof what) return err_set(err, ERR_USAGE, "%s: a source of more than 4 KiB", flag);
        snprintf(what, sizeof what, "%.*s", (int)(end - p), p);
        const char *colon = strrchr(what, ':');
        if (!(eq = memchr(p, '=', (size_t)(end - p))) || !colon)
            return err_set(err, ERR_USAGE, "%s '%s': expected NAME=PATH:WEIGHT (sources separated by commas)", flag, what);
        char *wend;
        errno = 0;
        double w = strtod(colon + 1, &wend);
        if (wend == colon + 1 || *wend || errno)
            return err_set(err, ERR_USAGE, "%s '%s': the weight '%s' is not a number", flag, what, colon + 1);
        const char *path = eq + 1;
        size_t plen = (size_t)(colon - what) - (size_t)(path - p);
        if (add(m, p, (size_t)(eq - p), path, plen, w, flag, what, err)) return -1;
        if (!*end) return 0;
        p = end + 1;
    }
}

// {"sources": [{"name", "path", "weight"}, ...]} or the array alone.
static int parse_json(Mixture *m, const char *file, const char *flag, Err *err) {
    char *text;
    size_t len;
    if (file_read(file, &text, &len, 1 << 20, err)) { err_prefix(err, flag); return -1; }
    Json *j = json_parse(text, len, err);
    free(text);
    if (!j) {
        char pre[4300];
        snprintf(pre, sizeof pre, "%s %s", flag, file);
        err_prefix(err, pre);
        return -1;
    }
    const Json *a = j->type == JSON_OBJ ? json_get(j, "sources") : j;
    int rc = 0;
    if (!a || a->type != JSON_ARR || !a->len || (j->type == JSON_OBJ && j->len != 1))
        rc = err_set(err, ERR_USAGE, "%s %s: expected {\"sources\": [{\"name\": ..., \"path\": ..., \"weight\": ...}, ...]}",
                     flag, file);
    for (const Json *e = a && !rc ? a->child : NULL; e && !rc; e = e->next) {
        const Json *n = json_get(e, "name"), *p = json_get(e, "path"), *w = json_get(e, "weight");
        char what[600];
        snprintf(what, sizeof what, "%s source %d", file, m->n + 1);
        if (e->type != JSON_OBJ || e->len != 3 || !n || n->type != JSON_STR || !p || p->type != JSON_STR || !w ||
            w->type != JSON_NUM)
            rc = err_set(err, ERR_USAGE, "%s %s: expected an object of \"name\" and \"path\" (strings) and \"weight\" (a "
                         "number), nothing else", flag, what);
        else
            rc = add(m, n->text, n->len, p->text, p->len, w->num, flag, what, err);
    }
    json_free(j);
    return rc;
}

int mix_parse(Mixture *m, const char *spec, const char *flag, Err *err) {
    memset(m, 0, sizeof *m);
    struct stat st;
    int exists = stat(spec, &st) == 0, json = ends_with(spec, ".json");
    int rc;
    if (json && exists && S_ISREG(st.st_mode)) {
        rc = parse_json(m, spec, flag, err);
    } else if ((exists && !json) || !strchr(spec, '=')) {
        m->n = m->plain = 1;
        m->src[0].weight = 1;
        rc = (m->src[0].path = strdup(spec)) ? 0 : err_set(err, ERR_RUN, "out of memory");
    } else {
        rc = parse_list(m, spec, flag, err);
    }
    if (rc) { mix_free(m); return -1; }
    // normalized, then rounded to 12 decimals: 0.7,0.2,0.1 and 7,2,1 are
    // the same mixture, bit for bit (and print as written)
    double sum = 0;
    for (int i = 0; i < m->n; i++) sum += m->src[i].weight;
    for (int i = 0; i < m->n; i++) {
        MixSource *s = &m->src[i];
        s->weight = nearbyint(s->weight / sum * 1e12) / 1e12;
        if (s->weight <= 0) {
            err_set(err, ERR_USAGE, "%s: source %s's weight is below 1e-12 of the sum of the weights", flag, s->name);
            mix_free(m);
            return -1;
        }
    }
    return 0;
}

int mix_pick(const double *w, const int64_t *count, int n) {
    int64_t total = 0;
    for (int s = 0; s < n; s++) total += count[s];
    int best = 0;
    double most = w[0] * (double)(total + 1) - (double)count[0];
    for (int s = 1; s < n; s++) {
        double d = w[s] * (double)(total + 1) - (double)count[s];
        if (d > most) { most = d; best = s; }
    }
    return best;
}

int mix_check_tokenizer(const Mixture *m, const char *tokenizer, Err *err) {
    for (int i = 0; i < m->n; i++) {
        struct stat st;
        char rec[64];
        const MixSource *s = &m->src[i];
        if (stat(s->path, &st) || !S_ISDIR(st.st_mode)) continue;
        int got = shard_info_read(s->path, rec, sizeof rec, err);
        if (got < 0) return -1;
        if (got && strcmp(rec, tokenizer))
            return err_set(err, ERR_USAGE, "source %s (%s) holds shards of the %s tokenizer, not %s: the sources of a "
                           "mixture share --tokenizer", s->name[0] ? s->name : s->path, s->path, rec, tokenizer);
    }
    return 0;
}

void mix_describe(const Mixture *m, char *buf, int cap) {
    int k = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n && k < cap; i++)
        k += snprintf(buf + k, (size_t)(cap - k), "%s%s %.4g", i ? ", " : "", m->src[i].name, m->src[i].weight);
}
