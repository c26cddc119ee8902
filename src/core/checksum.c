#include "core/checksum.h"

#include <string.h>

#ifdef __SSE4_2__
#include <nmmintrin.h>

uint32_t crc32c(uint32_t crc, const void *buf, size_t n) {
    const unsigned char *p = buf;
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#else
static uint32_t table[256];
static int table_ready;

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        table[i] = c;
    }
    table_ready = 1;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t n) {
    if (!table_ready) make_table();
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    while (n--) c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}
#endif
