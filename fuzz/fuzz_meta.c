// libFuzzer target: a checkpoint's meta.json reader (the strict JSON parser,
// the field checks, and the model config) on arbitrary bytes.
#include <stddef.h>
#include <stdint.h>

#include "io/meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Json *m;
    Err e;
    if (meta_parse((const char *)data, size, "meta.json", &m, &e) == 0) {
        ModelConfig c;
        meta_model(m, "meta.json", &c, &e);
        json_free(m);
    }
    return 0;
}
