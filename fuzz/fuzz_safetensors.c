// libFuzzer target: the safetensors header reader on arbitrary bytes, then
// every tensor's values through st_get.
#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    StFile f;
    Err e;
    if (st_parse(&f, data, size, &e) == 0) {
        volatile float sink = 0;
        for (int i = 0; i < f.n; i++) {
            const StTensor *t = &f.t[i];
            if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) continue;
            int64_t n = st_numel(t);
            for (int64_t k = 0; k < n; k++) sink += st_get(&f, t, k);
        }
        (void)sink;
        st_close(&f);
    }
    return 0;
}
