// libFuzzer target: a whole checkpoint directory — meta.json and a rank
// file (header, tensor index, data) — opened, verified and described as
// `tessera ckpt info` does. Input: a 2-byte little-endian length n, n bytes
// of meta.json, then the rank file.
#include <stddef.h>
#include <stdint.h>

#include "fuzz_file.h"
#include "io/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2) n = size - 2;
    fuzz_file("meta.json", data + 2, n);
    fuzz_file("rank_00000.tsr", data + 2 + n, size - 2 - n);
    Ckpt *ck;
    Err e;
    if (ckpt_open(&ck, fuzz_dir(), &e) == 0) {
        ModelConfig c;
        ckpt_config(ck, &c, &e);
        for (int i = 0; i < ckpt_ntensors(ck); i++) (void)ckpt_tensor(ck, i)->nbytes;
        ckpt_verify(ck, &e);
        ckpt_close(ck);
    }
    return 0;
}
