// io/safetensors — the safetensors format (Hugging Face): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"k": "v"}}
// padded with spaces, then the data. The reader is strict: the header must
// fit the file, every dtype be known, every shape match its byte range,
// ranges lie inside the data and neither overlap nor leave holes. A hostile
// file gets an error, never an out-of-bounds access.
#ifndef TSR_IO_SAFETENSORS_H
#define TSR_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

enum { ST_MAX_DIM = 8 };
typedef enum { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_U16, ST_U32, ST_U64 } StDtype;

typedef struct StTensor {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIM];
    uint64_t begin, end;      // byte range in the data section
} StTensor;

typedef struct StFile {
    void *map;
    size_t map_len;
    const unsigned char *data;   // data section
    size_t data_len;
    StTensor *t;
    int n;
} StFile;

// Maps and validates a file; errors name it.
int st_open(StFile *f, const char *path, Err *err);
// Validates and indexes a buffer (the file's bytes); used by st_open and the fuzzer.
int st_parse(StFile *f, const unsigned char *buf, size_t len, Err *err);
void st_close(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);
int64_t st_numel(const StTensor *t);
// Element i of a floating-point tensor (F32, F16 or BF16) as float.
float st_get(const StFile *f, const StTensor *t, int64_t i);

typedef struct StWrite {
    const char *name;
    int ndim;
    int64_t shape[ST_MAX_DIM];
    const float *data;       // row-major
    StDtype dtype;           // written as F32 (the default), BF16 or F16 (rounded to nearest even)
} StWrite;

// Writes tensors in the given order (a temporary of its own, fsync,
// rename; core/fileio). Errors name path.
int st_write(const char *path, const StWrite *t, int n, Err *err);

#endif
