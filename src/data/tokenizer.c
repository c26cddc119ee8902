#include "data/tokenizer.h"

#include <string.h>

int tokenizer_open(Tokenizer *t, const char *name, Err *err) {
    memset(t, 0, sizeof *t);
    if (strcmp(name, "byte") == 0) {
        t->kind = TOK_BYTE;
        t->vocab = 256;
        t->eot = -1;
        return 0;
    }
    return err_set(err, ERR_USAGE, "--tokenizer: unknown tokenizer '%s' (known: byte)", name);
}

void tokenizer_close(Tokenizer *t) { memset(t, 0, sizeof *t); }

size_t tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int *ids, size_t cap) {
    (void)t;
    for (size_t i = 0; i < len && i < cap; i++) ids[i] = (unsigned char)text[i];
    return len;
}

size_t tokenizer_decode(const Tokenizer *t, int id, char *out, size_t cap) {
    (void)t;
    if (cap < 1 || id < 0 || id > 255) return 0;
    out[0] = (char)id;
    return 1;
}
