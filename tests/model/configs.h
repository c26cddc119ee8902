// What the model tests share: a small model of any architecture, GPT-2's
// multi-head attention or grouped queries of half as many key/value heads.
#ifndef TSR_TESTS_MODEL_CONFIGS_H
#define TSR_TESTS_MODEL_CONFIGS_H

#include <stdio.h>
#include <string.h>

#include "model/config.h"

static inline ModelConfig small_config(ArchId arch, int L, int NH, int C, int F, int T, int V) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "test");
    c.arch = arch;
    c.n_layer = L; c.n_head = NH; c.n_kv_head = arch == ARCH_GPT2 ? 0 : NH / 2; c.d_model = C; c.d_ff = F;
    c.max_seq = T;
    config_set_vocab(&c, V);
    return c;
}

#endif
