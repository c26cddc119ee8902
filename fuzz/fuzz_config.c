// libFuzzer target: a --config file (cli/flags: every flag type, ranges,
// unknown keys) and the model object in it (model/config), from arbitrary
// bytes.
#include <stddef.h>
#include <stdint.h>

#include "cli/flags.h"
#include "fuzz_file.h"
#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *path = (char *)fuzz_file("config.json", data, size);
    int batch = 8, sp = 0;
    uint64_t seed = 1;
    double lr = 1e-3;
    const char *model = "gpt2-tiny", *data_path = NULL;
    Flag fl[] = {
        {"config", FLAG_STR, NULL, 0, 0, "FILE", "", 0, NULL},
        {"model", FLAG_STR, &model, 0, 0, "PRESET", "", 0, NULL},
        {"data", FLAG_STR, &data_path, 0, 0, "PATH", "", 0, NULL},
        {"batch", FLAG_INT, &batch, 1, 1 << 16, "B", "", 0, NULL},
        {"seed", FLAG_U64, &seed, 0, 9.2e18, "N", "", 0, NULL},
        {"lr", FLAG_FLOAT, &lr, 0, 10, "X", "", 0, NULL},
        {"sp", FLAG_BOOL, &sp, 0, 0, "", "", 0, NULL},
        {"resume", FLAG_STR, &data_path, 0, 0, "[PATH]", "", 0, "@latest"},
    };
    const char *cfgpath = NULL;
    fl[0].dst = &cfgpath;
    char *argv[] = {"--config", path};
    int help;
    Json *cfg = NULL;
    Err e;
    if (flags_parse(fl, 8, 2, argv, "fuzz", &help, &cfg, &e) == 0) {
        const Json *jm = cfg ? json_get(cfg, "model") : NULL;
        ModelConfig c;
        if (jm && jm->type == JSON_OBJ) config_from_json(&c, jm, &e);
    }
    json_free(cfg);
    return 0;
}
