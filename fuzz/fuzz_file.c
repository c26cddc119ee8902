#include "fuzz_file.h"

#include <stdio.h>
#include <stdlib.h>

static char dir[] = "/tmp/tsr_fuzz_XXXXXX";

const char *fuzz_dir(void) {
    static int made;
    if (!made && !mkdtemp(dir)) abort();
    made = 1;
    return dir;
}

const char *fuzz_file(const char *name, const uint8_t *data, size_t size) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    return path;
}
