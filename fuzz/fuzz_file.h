// fuzz/fuzz_file — the bytes a target reads as a file: written to a
// temporary file of the target's own (made once per process).
#ifndef TSR_FUZZ_FILE_H
#define TSR_FUZZ_FILE_H

#include <stddef.h>
#include <stdint.h>

// Writes data[0..size) to the file named name in this process's temporary
// directory and returns its path (valid until the next call with name).
const char *fuzz_file(const char *name, const uint8_t *data, size_t size);
// The temporary directory itself.
const char *fuzz_dir(void);

#endif
