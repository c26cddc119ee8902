// io/checkpoint — checkpoints on disk (DESIGN §6).
//
// A checkpoint is a directory RUN/step_NNNNNNNN/ holding meta.json and one
// tensor file per rank (rank_RRRRR.tsr). It is written as
// step_NNNNNNNN.tmp/ — every file fsynced, then the directory — and renamed;
// then RUN/latest (one line naming the step directory) is replaced the same
// way, and checkpoints beyond the newest `keep` are removed. A crash at any
// point leaves the previous checkpoint and `latest` intact.
//
// Tensor file: a 32-byte header
//   magic "TSRTENS\0" | u32 version (1) | u32 index bytes | u32 index CRC-32C
//   | u32 reserved | u64 data bytes
// then the index, a JSON object {"tensors": [{name, dtype, shape (global),
// offset (slice start per dimension), extent (slice size per dimension),
// data_offset, nbytes, crc32c, and optionally flat}...]}, zero padding to a
// multiple of 64, and the data. "flat": [b, e] says the entry holds only
// elements [b, e) of its slice in row-major order (a ZeRO piece that cuts a
// tensor); without it, the whole slice. Parameters keep their names; AdamW moments are "exp_avg/NAME"
// and "exp_avg_sq/NAME". Every size is checked against the file length and
// every checksum verified before data is used.
//
// Loading assembles each tensor a stage needs from whatever slices the
// files hold, so a checkpoint loads into another layout.
#ifndef TSR_IO_CHECKPOINT_H
#define TSR_IO_CHECKPOINT_H

#include <stdint.h>

#include "core/check.h"
#include "core/json.h"
#include "model/stage.h"
#include "io/meta.h"
#include "train/optim.h"

// ---- writing: ckpt_begin (one rank), ckpt_write_rank (every rank),
// ckpt_commit (one rank, after all have written) ----
int ckpt_begin(const char *dir, int64_t step, Err *err);
// Writes rank's parameters and, with opt, its AdamW moments.
int ckpt_write_rank(const char *dir, int64_t step, int rank, const Stage *s, const AdamW *opt, Err *err);

// A flat range [lo, hi) of a rank's buffers (table offsets) and its values:
// params, and with an optimizer m and v, each holding hi − lo floats.
typedef struct CkptPiece {
    size_t lo, hi;
    const float *params, *m, *v;
} CkptPiece;
// Writes the parts of the table's tensors that the pieces cover (a ZeRO
// rank's own pieces); with_opt: the moments too.
int ckpt_write_pieces(const char *dir, int64_t step, int rank, const ParamTable *t, const CkptPiece *pc, int npc,
                      int with_opt, Err *err);

// The layout recorded in meta.json.
typedef struct CkptLayout {
    int dp, zero;
} CkptLayout;
// meta.json (format, version, step, model, layout, files, optimizer,
// adam_t, and the JSON object text train_meta as "train"), then the rename,
// `latest`, and removal of all but the newest `keep` checkpoints (keep <= 0:
// keep all). lay NULL: dp 1, zero 0.
int ckpt_commit(const char *dir, int64_t step, int nranks, const CkptLayout *lay, const Stage *s, const AdamW *opt,
                const char *train_meta, int keep, Err *err);
// One process: begin, write rank 0, commit.
int ckpt_save(const char *dir, int64_t step, const Stage *s, const AdamW *opt, const char *train_meta, int keep,
              Err *err);

// ---- reading ----
typedef struct Ckpt Ckpt;

typedef struct CkptTensor {
    const char *name;
    int ndim;
    int64_t shape[3], offset[3], extent[3];   // global shape and the slice held
    int64_t flat_lo, flat_hi;                 // the elements of the slice held (row-major)
    uint64_t nbytes;
    int file;                                 // index into meta's "files"
} CkptTensor;

// Opens PATH — a checkpoint, or a run directory (then its latest) — reads
// meta.json and maps and indexes every rank file. Errors name the file and
// what is wrong.
int ckpt_open(Ckpt **out, const char *path, Err *err);
void ckpt_close(Ckpt *c);
const char *ckpt_dir(const Ckpt *c);        // the step directory
const Json *ckpt_meta(const Ckpt *c);
int64_t ckpt_step(const Ckpt *c);
int ckpt_has_optimizer(const Ckpt *c);
int ckpt_config(const Ckpt *c, ModelConfig *cfg, Err *err);
int ckpt_ntensors(const Ckpt *c);
const CkptTensor *ckpt_tensor(const Ckpt *c, int i);
const char *ckpt_file_name(const Ckpt *c, int file);   // "rank_00000.tsr"
// Verifies every tensor's checksum.
int ckpt_verify(Ckpt *c, Err *err);
// Fills the stage's parameters (and, with opt, its moments and step count)
// from the slices in the files.
int ckpt_load(Ckpt *c, Stage *s, AdamW *opt, Err *err);
// Fills dst (laid out as the table's range [lo, hi), whole tensors) with
// the tensors named prefix + name ("" parameters, "exp_avg/",
// "exp_avg_sq/") that lie in the range.
int ckpt_load_range(Ckpt *c, const ParamTable *t, const char *prefix, size_t lo, size_t hi, float *dst, Err *err);
// AdamW's step count; -1 with err when missing.
int ckpt_adam_t(Ckpt *c, int64_t *t, Err *err);

// Test hook: with TESSERA_CKPT_CRASH_AFTER=N in the environment the process
// kills itself (SIGKILL) right after the N-th write, fsync or rename of a
// save — for crash-safety tests.

#endif
