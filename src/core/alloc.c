#include "core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

// Each block is preceded by a 64-byte header holding its tag and size, so
// mem_free needs only the pointer.
enum { HDR = 64, HDR_MAGIC = 0x7e55e7a1 };
typedef struct { uint32_t magic; uint32_t tag; size_t bytes; } Header;

static _Atomic size_t cur[MEM_NTAGS], peak[MEM_NTAGS];
static _Atomic size_t cur_total, peak_total;
static _Atomic long fail_countdown;
static _Atomic long long offload_bytes;

static void raise_peak(_Atomic size_t *pk, size_t v) {
    size_t old = atomic_load(pk);
    while (v > old && !atomic_compare_exchange_weak(pk, &old, v)) {}
}

void *mem_alloc(MemTag tag, size_t bytes) {
    CHECK(tag >= 0 && tag < MEM_NTAGS);
    long fc = atomic_load(&fail_countdown);
    if (fc > 0 && atomic_fetch_sub(&fail_countdown, 1) == 1) return NULL;
    if (bytes > SIZE_MAX - 2 * HDR) return NULL;
    size_t total = HDR + ((bytes + 63) & ~(size_t)63);
    char *raw = aligned_alloc(64, total);
    if (!raw) return NULL;
    memset(raw, 0, total);
    Header *h = (Header *)raw;
    h->magic = HDR_MAGIC;
    h->tag = (uint32_t)tag;
    h->bytes = bytes;
    raise_peak(&peak[tag], atomic_fetch_add(&cur[tag], bytes) + bytes);
    raise_peak(&peak_total, atomic_fetch_add(&cur_total, bytes) + bytes);
    return raw + HDR;
}

void mem_free(void *p) {
    if (!p) return;
    Header *h = (Header *)((char *)p - HDR);
    CHECKF(h->magic == HDR_MAGIC, "mem_free of a pointer not from mem_alloc");
    h->magic = 0;
    atomic_fetch_sub(&cur[h->tag], h->bytes);
    atomic_fetch_sub(&cur_total, h->bytes);
    free(h);
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
