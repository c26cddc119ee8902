// tessera tokenize — text on stdin to ids on stdout (space-separated), or
// ids back to text with --decode.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "data/tokenizer.h"

// Reads all of stdin into a malloc'd buffer.
static char *slurp(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) return NULL;
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (n < cap) { if (feof(stdin) || ferror(stdin)) break; continue; }
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) { free(buf); return NULL; }
        buf = nb;
        cap *= 2;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    const char *name = "gpt2";
    int decode = 0;
    Flag f[] = {
        {"tokenizer", FLAG_STR, &name, 0, 0, "gpt2|llama|byte", "tokenizer (default gpt2)", 0, NULL},
        {"decode", FLAG_BOOL, &decode, 0, 0, "", "read ids, write text", 0, NULL},
    };
    int nf = 2, help;
    Json *unused = NULL;
    Err e = {0};
    if (flags_parse(f, nf, argc, argv, "tokenize", &help, &unused, &e)) return cli_fail("tokenize", &e);
    if (help) {
        printf("usage: tessera tokenize [--tokenizer gpt2|llama|byte] [--decode] < input\n\n"
               "Text on stdin to token ids on stdout (space-separated), or ids back to text.\n\n");
        flags_print(f, nf);
        return 0;
    }
    Tokenizer tok;
    if (tokenizer_open(&tok, name, &e)) return cli_fail("tokenize", &e);
    size_t len;
    char *in = slurp(&len);
    if (!in) { tokenizer_close(&tok); err_set(&e, ERR_RUN, "out of memory reading stdin"); return cli_fail("tokenize", &e); }
    int rc = 0;
    if (!decode) {
        int *ids = malloc((len + 2) * sizeof *ids);
        size_t n = tokenizer_encode(&tok, in, len, ids, len + 2);
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        free(ids);
    } else {
        char *p = in, *end;
        char buf[256];
        int front = tokenizer_front_space(&tok);   // the space the encoder put in front goes again
        for (;;) {
            while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
            if (!*p) break;
            long id = strtol(p, &end, 10);
            if (end == p || id < 0 || id >= tok.vocab) {
                int w = (int)strcspn(p, " \t\r\n");
                err_set(&e, ERR_USAGE, "--decode: '%.*s' is not a token id of %s (0..%d)", w > 20 ? 20 : w, p, name,
                        tok.vocab - 1);
                rc = cli_fail("tokenize", &e);
                break;
            }
            size_t n = tokenizer_decode(&tok, (int)id, buf, sizeof buf), skip = front && n && buf[0] == ' ';
            if (n) front = 0;
            fwrite(buf + skip, 1, n - skip, stdout);
            p = end;
        }
    }
    free(in);
    tokenizer_close(&tok);
    return rc;
}
