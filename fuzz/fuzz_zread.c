// libFuzzer target: prepare's decompressing reader (data/zread) over a file
// of arbitrary bytes — plain, gzip members, zstd frames and skippable
// frames, truncated or followed by other bytes — read to its end or its
// first error.
#include <stddef.h>
#include <stdint.h>

#include "data/zread.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("input", data, size);
    Zread *z;
    Err e;
    if (zread_open(&z, path, &e)) return 0;
    static char buf[4096];
    long r, total = 0;
    // odd read sizes, so that reads end inside members and frames
    for (size_t n = 1; (r = zread_read(z, buf, n, &e)) > 0; n = n % 4093 + 7) total += r;
    (void)total;
    zread_close(z);
    return 0;
}
