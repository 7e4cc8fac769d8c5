/*
 * crc32c.h: CRC-32C (Castagnoli), the checksum of every journal record.
 *
 * Buffers shorter than 256 bytes go through the CPU's crc32 instruction
 * (SSE4.2) inline, 8 bytes a step; longer ones, and every buffer on a CPU
 * without the instruction, through Intel's ISA-L (crc32_iscsi), which picks
 * the fastest code the CPU runs (VPCLMULQDQ folding, crc32 chains joined
 * with PCLMULQDQ, or tables).
 * Chosen over zlib's crc32, which works a byte at a time from tables and
 * is a large share of the server's work when every record is checksummed.
 */
#ifndef TERN_CRC32C_H
#define TERN_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc (0 to start) over len bytes of buf; returns the new CRC:
 * crc32c(crc32c(0, a, n), b, m) is the CRC of a's n bytes followed by b's m.
 * crc32c(0, "123456789", 9) == 0xE3069283.  Safe from any thread; buf may
 * have any alignment and is only read. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
