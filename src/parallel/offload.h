// parallel/offload — optimizer state on disk (ZeRO-Offload; Ren et al.
// 2021), streamed through a small ring of buffers.
//
// A rank's offloaded state is `kinds` arrays of S floats (its shard: the
// AdamW moments and, under bf16/fp16, the fp32 masters), each in its own
// file in a directory this module creates (mkdtemp: mode 0700, made afresh)
// under a base directory; the files are created with O_EXCL|O_NOFOLLOW and
// their whole size reserved at once (posix_fallocate), so a full disk or a
// file-size limit is met when the run starts, not in the middle of a step.
// The shard is cut into units — the data-parallel module's segments, each
// unit a range [off, off + n) of every file.
//
// A pass runs over every unit in order: a reader thread reads unit u + 1
// into the ring while the caller updates unit u in place and a writer
// thread writes unit u − 1 back (OFFLOAD_RING buffers of every kind, each
// the largest unit's size, MEM_OPTIM). A unit never written holds zeros
// (the moments of a fresh run): it is not read, only zeroed.
//
// Every unit's CRC-32C is kept from its last write and checked on every
// read, so a file changed underneath is found. Failures (a short read, EIO,
// a checksum that differs, a write the disk refuses) name the file and
// stop the pass; the caller's wait returns -1 with that error.
#ifndef TSR_PARALLEL_OFFLOAD_H
#define TSR_PARALLEL_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

typedef struct Offload Offload;

enum { OFFLOAD_RING = 3 };   // read-ahead, update, write-behind
enum { OFFLOAD_MAX_KINDS = 3 };

// The ring's resident bytes for units of at most maxn floats and `kinds`
// files: what offload_open allocates (MEM_OPTIM).
size_t offload_ring_bytes(int kinds, size_t maxn);

// Creates offload-rRRRRR-HOST-pPID.XXXXXX under base (rank numbers the
// file set, HOST and PID name this process; the directories of this host's
// processes that no longer run, which a SIGKILL left, are removed first)
// and in it one file per kind, names[k] (".f32" added),
// each of the units' total floats; unit u is [off[u], off[u] + n[u]).
// ERR_USAGE when base is not a writable directory (flag names it in the
// message), ERR_RUN naming the file when a file cannot be made or sized.
// keep: the directory and files stay at offload_close.
int offload_open(Offload **out, const char *base, const char *flag, int rank, int kinds, const char *const *names,
                 const size_t *off, const size_t *n, int nu, int keep, Err *err);
// Waits for nothing (no pass may be open), closes the files and removes
// them and the directory unless kept. NULL is a no-op.
void offload_close(Offload *o);
const char *offload_dir(const Offload *o);
// The files' bytes on disk (all kinds).
size_t offload_disk_bytes(const Offload *o);

// ---- a pass over every unit in order ----
// Starts the reader and the writer (or takes the pass offload_prefetch
// started). 0, or -1 with err.
int offload_pass_begin(Offload *o, Err *err);
// Starts the next pass ahead, after offload_pass_end: its reader fills the
// ring with the first units while the caller does other work (the next
// step's forward and backward). Writing, mapping or closing the files
// first calls it off (its reads are discarded). 0, or -1 with err.
int offload_prefetch(Offload *o, Err *err);
// Waits for unit u's values (u the next unit of the pass); bufs[k] gets
// kind k's n[u] floats, to be updated in place. 0, or -1 with the I/O
// error that stopped the pass.
int offload_unit(Offload *o, int u, float **bufs, Err *err);
// Unit u is updated: written back behind the next ones.
void offload_unit_done(Offload *o, int u);
// Waits for every write (and, after a failure, for the threads to stop).
// 0, or -1 with the first I/O error of the pass.
int offload_pass_end(Offload *o, Err *err);

// ---- between passes ----
// Writes kind k of unit u from src (n[u] floats), at once (no pass may be
// open but one started ahead, which this calls off).
int offload_write(Offload *o, int k, int u, const float *src, Err *err);
// The whole file of kind k, mapped read-only (S floats) after its units
// are checked against their checksums; valid until offload_unmap. NULL
// with err.
const float *offload_map(Offload *o, int k, Err *err);
void offload_unmap(Offload *o);

// Totals since offload_open: bytes of the units taken (offload_unit) and
// written, and the seconds the caller waited on them (offload_unit,
// offload_pass_end).
uint64_t offload_bytes_read(const Offload *o);
uint64_t offload_bytes_written(const Offload *o);
double offload_waited(const Offload *o);
// Adds to those totals what the caller read, wrote and waited for
// outside the passes (the parameters' file).
void offload_count(Offload *o, uint64_t read, uint64_t written, double waited);

// ---- the parameters' file (--offload params) ----
// A file of `bytes` in the offload's directory (OFFLOAD_PARAMS_FILE, made
// O_EXCL, its blocks reserved), mapped read-write and shared: the owned
// parameter shard, which the caller reads and writes in place and whose
// pages it hands back to the kernel (madvise) when done with them, so
// they live in the file and the page cache, not in the process. Unmapped
// and removed (unless kept) at offload_close; its bytes count on disk.
// NULL with err naming the file.
#define OFFLOAD_PARAMS_FILE "params.bin"
void *offload_map_params(Offload *o, size_t bytes, Err *err);
const char *offload_params_path(const Offload *o);
// 0 while the parameters' file is its full length; -1 with err naming it
// once it was cut short underneath (its mapping would fault).
int offload_params_intact(const Offload *o, Err *err);
// The parameters' file an address lies in (NULL: none): for a SIGBUS
// handler, which a read the device failed or a file cut short underneath
// raises; plain loads only, safe in a signal handler.
const char *offload_fault_path(const void *addr);

#endif
