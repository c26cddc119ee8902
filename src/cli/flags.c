#include "cli/flags.h"

#include "core/fileio.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Flag *flags_find(Flag *flags, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    return NULL;
}

// Sets flag f from text v; `src` says where it came from for errors.
static int set_value(Flag *f, const char *v, const char *src, Err *err) {
    char *end;
    errno = 0;
    switch (f->type) {
    case FLAG_INT:
    case FLAG_U64: {
        if (!*v || *v == '+' || (f->type == FLAG_U64 && *v == '-'))
            return err_set(err, ERR_USAGE, "%s--%s: expected an integer, got '%s'", src, f->name, v);
        long long x = strtoll(v, &end, 10);
        if (*end || errno) return err_set(err, ERR_USAGE, "%s--%s: expected an integer, got '%s'", src, f->name, v);
        if ((double)x < f->min || (double)x > f->max)
            return err_set(err, ERR_USAGE, "%s--%s: %lld is out of range (%.0f..%.0f)", src, f->name, x, f->min, f->max);
        if (f->type == FLAG_INT) *(int *)f->dst = (int)x;
        else *(uint64_t *)f->dst = (uint64_t)x;
        break;
    }
    case FLAG_FLOAT: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return err_set(err, ERR_USAGE, "%s--%s: expected a number, got '%s'", src, f->name, v);
        if (x < f->min || x > f->max)
            return err_set(err, ERR_USAGE, "%s--%s: %g is out of range (%g..%g)", src, f->name, x, f->min, f->max);
        *(double *)f->dst = x;
        break;
    }
    case FLAG_STR:
        if (!*v) return err_set(err, ERR_USAGE, "%s--%s: empty value", src, f->name);
        *(const char **)f->dst = v;
        break;
    case FLAG_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1")) *(int *)f->dst = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "0")) *(int *)f->dst = 0;
        else return err_set(err, ERR_USAGE, "%s--%s: expected true or false, got '%s'", src, f->name, v);
        break;
    }
    f->seen = 1;
    return 0;
}

// The value of flag f given as argv[*i] without "=": the next argument when
// f takes it (then *i moves past it), else f's bare value; NULL when f has
// neither. The rule is the one flags.h states.
static const char *next_value(const Flag *f, int argc, char **argv, int *i) {
    const char *next = *i + 1 < argc ? argv[*i + 1] : NULL;
    int take;
    if (!next) take = 0;
    else if (f->type == FLAG_BOOL)
        take = !strcmp(next, "true") || !strcmp(next, "false") || !strcmp(next, "1") || !strcmp(next, "0");
    else take = strncmp(next, "--", 2) != 0 || (!f->bare && (f->type == FLAG_INT || f->type == FLAG_FLOAT));
    if (take) return argv[++*i];
    if (f->bare) return f->bare;
    return f->type == FLAG_BOOL ? "true" : NULL;
}

static int load_config(Flag *flags, int n, const char *path, Json **out, Err *err) {
    char *text;
    size_t len;
    if (file_read(path, &text, &len, 64u << 20, err)) { err_prefix(err, "--config"); return -1; }
    Json *j = json_parse(text, len, err);
    free(text);
    if (!j) {
        char pre[4200];
        snprintf(pre, sizeof pre, "--config %s", path);
        err_prefix(err, pre);
        return -1;
    }
    if (j->type != JSON_OBJ) { json_free(j); return err_set(err, ERR_USAGE, "--config %s: expected a JSON object", path); }
    char src[4200];
    snprintf(src, sizeof src, "--config %s: ", path);
    for (const Json *m = j->child; m; m = m->next) {
        Flag *f = flags_find(flags, n, m->key);
        if (!f || !strcmp(m->key, "config")) {
            err_set(err, ERR_USAGE, "--config %s: unknown key '%s'", path, m->key);
            json_free(j);
            return -1;
        }
        // "model" may be an object (a model definition), kept in the tree
        // for the caller; everything else is a scalar set through its flag.
        if (m->type == JSON_OBJ && !strcmp(m->key, "model")) { f->seen = 1; continue; }
        const char *v = m->type == JSON_NUM || m->type == JSON_STR ? m->text
                      : m->type == JSON_BOOL ? (m->boolean ? "true" : "false") : NULL;
        if (!v) {
            err_set(err, ERR_USAGE, "--config %s: key '%s' must be a number or string", path, m->key);
            json_free(j);
            return -1;
        }
        if (set_value(f, v, src, err)) { json_free(j); return -1; }
    }
    *out = j;
    return 0;
}

int flags_parse(Flag *flags, int n, int argc, char **argv, const char *cmd, int *help, Json **cfg_json, Err *err) {
    *help = 0;
    *cfg_json = NULL;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { *help = 1; return 0; }
    Flag *cfg = flags_find(flags, n, "config");
    for (int i = 0; cfg && i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strncmp(a, "--config=", 9)) v = a + 9;
        else if (!strcmp(a, "--config")) v = next_value(cfg, argc, argv, &i);
        else continue;
        if (!v) return err_set(err, ERR_USAGE, "--config: missing value");
        if (load_config(flags, n, v, cfg_json, err)) return -1;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return err_set(err, ERR_USAGE, "unexpected argument '%s' (see tessera %s --help)", a, cmd);
        char name[64];
        const char *eq = strchr(a + 2, '='), *v;
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name) return err_set(err, ERR_USAGE, "unknown flag '%s' (see tessera %s --help)", a, cmd);
        memcpy(name, a + 2, nl);
        name[nl] = 0;
        Flag *f = flags_find(flags, n, name);
        if (!f) return err_set(err, ERR_USAGE, "unknown flag '--%s' (see tessera %s --help)", name, cmd);
        v = eq ? eq + 1 : next_value(f, argc, argv, &i);
        if (!v) return err_set(err, ERR_USAGE, "--%s: missing value", name);
        if (f == cfg) continue;   // already applied
        if (set_value(f, v, "", err)) return -1;
    }
    return 0;
}

void flags_print(const Flag *flags, int n) {
    for (int i = 0; i < n; i++) {
        const Flag *f = &flags[i];
        const char *mv = f->type == FLAG_BOOL || !f->metavar ? "" : f->metavar;
        int brackets = f->bare && *mv && *mv != '[';
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s%s%s", f->name, *mv ? " " : "", brackets ? "[" : "", mv, brackets ? "]" : "");
        printf("  %-24s %s\n", left, f->help);
    }
}

int cli_fail(const char *cmd, const Err *e) {
    if (!e->shown) fprintf(stderr, "tessera %s: %s\n", cmd, e->msg);
    return e->code ? e->code : 1;
}
