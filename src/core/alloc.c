#include "core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "core/check.h"

// Each block is preceded by a 64-byte header holding its tag, its size and
// what calloc returned, so mem_free needs only the pointer. Blocks come
// zeroed from calloc, which takes large ones straight from the kernel's
// zeroed pages without writing them: a gpt2-124m run's 3 GB are not
// written twice before its first step.
enum { HDR = 64, HDR_MAGIC = 0x7e55e7a1 };
typedef struct { uint32_t magic; uint32_t tag; size_t bytes; void *raw; } Header;

static _Atomic size_t cur[MEM_NTAGS], peak[MEM_NTAGS];
static _Atomic size_t cur_total, peak_total;
static _Atomic long fail_countdown;
static _Atomic long long offload_bytes;

static void raise_peak(_Atomic size_t *pk, size_t v) {
    size_t old = atomic_load(pk);
    while (v > old && !atomic_compare_exchange_weak(pk, &old, v)) {}
}

// A block of 8 MiB or more asks for transparent huge pages (where the kernel
// gives them on request, as Debian's does): 2 MiB pages, 512 times fewer
// page faults on first touch and TLB misses as the kernels stream it.
static void huge_pages(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    if (n < ((size_t)8 << 20)) return;
    uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, hi = ((uintptr_t)p + n) & ~(uintptr_t)4095;
    madvise((void *)lo, hi - lo, MADV_HUGEPAGE);   // advice: a refusal leaves 4 KiB pages
#else
    (void)p, (void)n;
#endif
}

void *mem_alloc(MemTag tag, size_t bytes) {
    CHECK(tag >= 0 && tag < MEM_NTAGS);
    long fc = atomic_load(&fail_countdown);
    if (fc > 0 && atomic_fetch_sub(&fail_countdown, 1) == 1) return NULL;
    if (bytes > SIZE_MAX - 2 * HDR) return NULL;
    size_t total = HDR + ((bytes + 63) & ~(size_t)63);
    char *raw = calloc(1, total + 63);
    if (!raw) return NULL;
    huge_pages(raw, total + 63);
    char *base = (char *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);   // 64-byte aligned
    Header *h = (Header *)base;
    h->magic = HDR_MAGIC;
    h->raw = raw;
    h->tag = (uint32_t)tag;
    h->bytes = bytes;
    raise_peak(&peak[tag], atomic_fetch_add(&cur[tag], bytes) + bytes);
    raise_peak(&peak_total, atomic_fetch_add(&cur_total, bytes) + bytes);
    return base + HDR;
}

void mem_free(void *p) {
    if (!p) return;
    Header *h = (Header *)((char *)p - HDR);
    CHECKF(h->magic == HDR_MAGIC, "mem_free of a pointer not from mem_alloc");
    h->magic = 0;
    atomic_fetch_sub(&cur[h->tag], h->bytes);
    atomic_fetch_sub(&cur_total, h->bytes);
    free(h->raw);
}

void *mem_grow(void **buf, size_t *have, MemTag tag, size_t bytes) {
    if (bytes > *have) {
        mem_free(*buf);
        *buf = mem_alloc(tag, bytes);
        *have = *buf ? bytes : 0;
    }
    return *buf;
}

void mem_offload_add(long long delta) { atomic_fetch_add(&offload_bytes, delta); }
size_t mem_offload(void) { return (size_t)atomic_load(&offload_bytes); }

size_t mem_current(MemTag tag) { return atomic_load(&cur[tag]); }
size_t mem_peak(MemTag tag) { return atomic_load(&peak[tag]); }
size_t mem_current_total(void) { return atomic_load(&cur_total); }
size_t mem_peak_total(void) { return atomic_load(&peak_total); }

const char *mem_tag_name(MemTag tag) {
    static const char *names[MEM_NTAGS] = {"params", "grads", "optim", "acts", "comm", "workspace", "params16", "ckpt"};
    CHECK(tag >= 0 && tag < MEM_NTAGS);
    return names[tag];
}

void mem_reset_peak(void) {
    for (int t = 0; t < MEM_NTAGS; t++) atomic_store(&peak[t], atomic_load(&cur[t]));
    atomic_store(&peak_total, atomic_load(&cur_total));
}

void mem_fail_after(long n) { atomic_store(&fail_countdown, n > 0 ? n : 0); }

char *mem_fmt(size_t bytes, char *buf, size_t cap) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, cap, "%zu B", bytes);
    else snprintf(buf, cap, "%.2f %s", v, unit[u]);
    return buf;
}
