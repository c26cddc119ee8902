// io/ckpt_writer — a rank's checkpoint file written in the background
// (tessera train --ckpt-async).
//
// ckpt_writer_start copies the sections of the pieces a rank writes into a
// staging buffer (one allocation under MEM_CKPT, sized once at open) and
// returns at once; a thread of the writer then writes, checksums and
// fsyncs the rank's file by ckpt_write_pieces on the copies — the same
// bytes a synchronous save writes — while the caller's buffers change.
// One write at a time: ckpt_writer_wait blocks until the write ends (the
// thread is joined; no spinning) and returns its status.
//
// The writer never commits. A checkpoint is complete only once every
// rank's file is durable; then one rank's ckpt_commit (meta.json, the
// rename, `latest`, --keep's pruning) makes it the latest, on the caller's
// own thread — the ranks agree on "all written" through the collectives
// they already run there, and the writer's thread touches files only. A
// kill at any moment leaves the step's temporary directory, which the next
// ckpt_begin removes, and the previous checkpoint as `latest`.
//
// Test hook: TESSERA_TEST_CKPT_DELAY=MS in the environment makes the thread
// sleep MS milliseconds before writing the file and MS after it, so a test
// can kill a run while a write is in flight.
#ifndef TSR_IO_CKPT_WRITER_H
#define TSR_IO_CKPT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "io/checkpoint.h"

typedef struct CkptWriter CkptWriter;

// A writer whose staging buffer holds `floats` floats: what the pieces of a
// save cover, summed over its sections. 0, or -1 with err (out of memory).
int ckpt_writer_open(CkptWriter **out, size_t floats, Err *err);
// Waits for a write in flight, then frees the writer (NULL is a no-op).
void ckpt_writer_close(CkptWriter *w);
// Stages the pieces' sections (as ckpt_write_pieces takes them; together
// at most the writer's floats) and starts writing rank's file of step into
// dir's step directory begun by ckpt_begin. t and sections must outlive
// the write; dir is copied. No write may be in flight. 0, or -1 with err
// (the thread could not start).
int ckpt_writer_start(CkptWriter *w, const char *dir, int64_t step, int rank, const ParamTable *t,
                      const char *const *sections, int nsec, const CkptPiece *pc, int npc, Err *err);
// Whether the write in flight has ended (never blocks); 1 when none is.
int ckpt_writer_done(CkptWriter *w);
// Waits for the write in flight to end: its status (0, or -1 with err);
// 0 when none is.
int ckpt_writer_wait(CkptWriter *w, Err *err);

#endif
