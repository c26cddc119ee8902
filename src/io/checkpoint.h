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
// tensor); without it, the whole slice. Parameters keep their names; other
// sections prefix them ("exp_avg/NAME"). Every size is checked against the
// file length and every checksum verified before data is used.
//
// Loading assembles each tensor a stage needs from whatever slices the
// files hold, so a checkpoint loads into another layout.
#ifndef TSR_IO_CHECKPOINT_H
#define TSR_IO_CHECKPOINT_H

#include <stdint.h>

#include "core/check.h"
#include "core/json.h"
#include "io/meta.h"
#include "model/params.h"

// ---- writing: ckpt_begin (one rank), ckpt_write_pieces (every rank that
// holds something to write), ckpt_commit (one rank, after all have written) ----
int ckpt_begin(const char *dir, int64_t step, Err *err);
// After a failed save (one rank, once every rank has stopped writing):
// removes the step's temporary directory; the previous checkpoints and
// `latest` are as they were.
void ckpt_abort(const char *dir, int64_t step);
// Before a run: makes the run directory when it is missing (its parent
// must exist) and checks that it is a writable directory; ERR_USAGE naming
// --ckpt-dir otherwise; an entry a save would create, replace or remove
// (step_*, latest*, .lock) that is a symbolic link is refused by name.
int ckpt_prepare_dir(const char *dir, Err *err);
// Takes the run directory's lock (an flock on DIR/.lock holding the pid)
// for as long as the returned descriptor stays open: one run per
// directory. A second run gets ERR_USAGE naming the holder's pid.
int ckpt_lock(const char *dir, Err *err);

// Checkpoints hold named sections of flat pieces: section k's part of a
// tensor is stored as sections[k] + its name ("" the parameters; the
// trainer adds "exp_avg/" and "exp_avg_sq/" for the AdamW moments). A piece
// is a flat range [lo, hi) of a rank's buffers (table offsets) and, for
// each section, its hi − lo values.
enum { CKPT_MAX_SECTIONS = 4 };
typedef struct CkptPiece {
    size_t lo, hi;
    const float *data[CKPT_MAX_SECTIONS];
} CkptPiece;
// Writes rank's file: for each section, the parts of the table's tensors
// that the pieces cover.
int ckpt_write_pieces(const char *dir, int64_t step, int rank, const ParamTable *t, const char *const *sections,
                      int nsec, const CkptPiece *pc, int npc, Err *err);

// What meta.json records besides the files.
typedef struct CkptMeta {
    int64_t step;
    const ModelConfig *cfg;
    int nfiles;                // rank files written (rank_00000.tsr …)
    int dp, tp, pp, zero;      // the layout that wrote it
    const char *state;         // a JSON object whose members go to meta.json's top level (the optimizer's), or NULL
    const char *train;         // a JSON object stored as "train", or NULL
} CkptMeta;
// meta.json (format, version, step, model, layout, files, state's members,
// train), then the rename, `latest`, and removal of all but the newest
// `keep` checkpoints (keep <= 0: keep all).
int ckpt_commit(const char *dir, const CkptMeta *m, int keep, Err *err);
// One process, parameters only: begin, write rank 0's whole buffer, commit.
int ckpt_save(const char *dir, const CkptMeta *m, const ParamTable *t, const float *params, int keep, Err *err);

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
// Whether the files hold a section with this prefix ("exp_avg/").
int ckpt_has_section(const Ckpt *c, const char *prefix);
int ckpt_config(const Ckpt *c, ModelConfig *cfg, Err *err);
int ckpt_ntensors(const Ckpt *c);
const CkptTensor *ckpt_tensor(const Ckpt *c, int i);
const char *ckpt_file_name(const Ckpt *c, int file);   // "rank_00000.tsr"
// Verifies every tensor's checksum.
int ckpt_verify(Ckpt *c, Err *err);
// Fills dst (laid out as the table's range [lo, hi), whole tensors) with
// section `prefix` ("" parameters) of the tensors that lie in the range,
// assembled from the slices and pieces in the files.
int ckpt_load_range(Ckpt *c, const ParamTable *t, const char *prefix, size_t lo, size_t hi, float *dst, Err *err);
// The parameters of the whole table (table.total floats).
int ckpt_load_params(Ckpt *c, const ParamTable *t, float *params, Err *err);

// Test hook: with TESSERA_CKPT_CRASH_AFTER=N in the environment the process
// kills itself (SIGKILL) right after the N-th write, fsync or rename of a
// save — for crash-safety tests.

#endif
