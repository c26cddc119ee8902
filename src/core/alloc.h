// core/alloc — the tagged allocator. Every large buffer (parameters,
// gradients, optimizer state, activations, communication buffers, scratch,
// checkpoint staging)
// comes from here, tagged, so current and peak bytes per tag can be reported
// and checked against the planner's predictions.
//
// Blocks are 64-byte aligned and zero-filled. The counters are per process
// (each rank is a process) and safe to update from several threads.
#ifndef TSR_CORE_ALLOC_H
#define TSR_CORE_ALLOC_H

#include <stddef.h>

typedef enum MemTag {
    MEM_PARAMS, MEM_GRADS, MEM_OPTIM, MEM_ACTS, MEM_COMM, MEM_WORKSPACE,
    MEM_PARAMS16,   // the 16-bit copy of the weights that bf16/fp16 forward and backward read
    MEM_CKPT,       // --ckpt-async's staging copy of the pieces a rank writes to a checkpoint
    MEM_NTAGS
} MemTag;

// Returns a zeroed, 64-byte aligned block of `bytes` (0 is allowed), or NULL
// when the system is out of memory or a test has armed mem_fail_after().
void *mem_alloc(MemTag tag, size_t bytes);
// Frees a block from mem_alloc (NULL is a no-op) and updates its tag's count.
void mem_free(void *p);
// A workspace kept across calls: *buf (of *have bytes) replaced by a block
// of `bytes` under tag when it is smaller (its contents are not kept);
// returns *buf, NULL when it cannot be had.
void *mem_grow(void **buf, size_t *have, MemTag tag, size_t bytes);

size_t mem_current(MemTag tag);      // bytes live now under tag
size_t mem_peak(MemTag tag);         // high-water mark under tag
size_t mem_current_total(void);
size_t mem_peak_total(void);         // high-water mark of the sum over tags
const char *mem_tag_name(MemTag tag);   // "params", "grads", ...
void mem_reset_peak(void);           // peaks := current values

// Bytes held on disk in place of memory (the optimizer offload's files):
// not a tag, not in the totals; mem_offload_add moves it by delta.
void mem_offload_add(long long delta);
size_t mem_offload(void);

// Test hook: the n-th mem_alloc from now (1 = the next one) returns NULL;
// n <= 0 disarms.
void mem_fail_after(long n);

// Human-readable size into buf ("1.50 MiB"); returns buf.
char *mem_fmt(size_t bytes, char *buf, size_t cap);

#endif
