// core/checksum — CRC-32C (Castagnoli), the checksum of every file tessera writes.
#ifndef TSR_CORE_CHECKSUM_H
#define TSR_CORE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

// CRC-32C of buf[0..n) continuing from crc (start with 0). Uses the SSE4.2
// instruction when the build targets it, a table otherwise; same values.
uint32_t crc32c(uint32_t crc, const void *buf, size_t n);

#endif
