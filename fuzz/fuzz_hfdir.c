// libFuzzer target: a Hugging Face model directory, the import reader on
// it (io/weights: config.json's keys, the index's weight_map against the
// shards, a model.safetensors beside them, the tensors every model reads),
// then the weights loaded. The input is the directory's files one after
// another, split at each SEP: config.json, model.safetensors.index.json,
// model.safetensors, s1.safetensors, s2.safetensors, ...; an empty part is
// a file that is not there (config.json is always written).
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "fuzz_file.h"
#include "io/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char SEP[] = "\n----\n";
enum { NPARTS = 7 };

// The file name of part k.
static void part_name(int k, char *buf, size_t cap) {
    static const char *fixed[] = {"config.json", "model.safetensors.index.json", "model.safetensors"};
    if (k < 3) snprintf(buf, cap, "%s", fixed[k]);
    else snprintf(buf, cap, "s%d.safetensors", k - 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char name[64], path[256];
    size_t at = 0, sl = sizeof SEP - 1;
    for (int k = 0; k < NPARTS; k++) {   // each part up to the next separator (the last: the rest)
        size_t end = at;
        while (end < size && !(end + sl <= size && !memcmp(data + end, SEP, sl))) end++;
        part_name(k, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
        if (k == 0 || end > at) fuzz_file(name, data + at, end - at);
        else unlink(path);
        at = end < size ? end + sl : size;
    }
    Weights w;
    Err e;
    ModelConfig hint = {.n_head = 2};
    if (weights_open(&w, fuzz_dir(), &hint, &e) == 0) {
        ModelSlice s = slice_whole(&w.mc);
        ParamTable t = {0};
        if (ptable_build(&t, &w.mc, &s, &e) == 0 && t.total <= (1u << 22)) {   // small models: load them too
            float *p = malloc(t.total * sizeof(float) + 1);
            if (p) weights_load(&w, &w.mc, &t, p, &e);
            free(p);
        }
        ptable_free(&t);
        weights_close(&w);
    }
    return 0;
}
