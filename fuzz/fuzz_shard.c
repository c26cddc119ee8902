// libFuzzer target: a token shard's header and tokens (data/shard) checked
// against the GPT-2 vocabulary, from a file of arbitrary bytes.
#include <stddef.h>
#include <stdint.h>

#include "data/shard.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("shard.bin", data, size);
    Shard s;
    Err e;
    if (shard_open(&s, path, 50257, &e) == 0) {
        for (int64_t i = 0; i < s.ntok; i++) (void)shard_token(&s, i);
        shard_close(&s);
    }
    return 0;
}
