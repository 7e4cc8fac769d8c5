/*
 * crc32c.h: CRC-32C (Castagnoli), the checksum of every journal record.
 *
 * Uses the CPU's crc32 instruction (SSE4.2) when it has one, three streams
 * side by side on longer buffers, else a table.
 * Chosen over zlib's crc32, which works a byte at a time from tables and
 * is a large share of the server's work when every record is checksummed;
 * the instruction does 8 bytes per step.
 */
#ifndef TERN_CRC32C_H
#define TERN_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc (0 to start) over len bytes of buf; returns the new CRC.
 * crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
