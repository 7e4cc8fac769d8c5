/* crc32c.c: CRC-32C, hardware (SSE4.2) with a table fallback. */
#include "crc32c.h"

#include <string.h>

#define POLY 0x82F63B78u /* Castagnoli, reflected */

static uint32_t table[256];
static int have_table;

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[i] = c;
	}
	__atomic_store_n(&have_table, 1, __ATOMIC_RELEASE);
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
	if (!__atomic_load_n(&have_table, __ATOMIC_ACQUIRE))
		table_init(); /* idempotent: racing threads write the same values */
	while (len--)
		crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
/*
 * The crc32 instruction takes 3 cycles but can start one every cycle, so
 * one chain of them runs at a third of the CPU's speed.  Long buffers are
 * cut into three streams computed side by side, then joined: a stream's
 * CRC is moved past the bytes that follow it by multiplying with x^(8n)
 * modulo the polynomial (four table lookups, the tables built once with
 * zlib's crc32_combine matrix method).  The layout follows Mark Adler's
 * public crc32c.c.  It matters for large records: the writer checksums
 * every body it writes, on the critical path of each group.
 */
#define CRC_LONG 1024u  /* bytes per stream (a power of two) */
#define CRC_SHORT 128u

static uint32_t zeros_long[4][256], zeros_short[4][256];
static int have_zeros;

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;

	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		sq[n] = gf2_times(mat, mat[n]);
}

/* The operator that appends len zero bytes (len a power of two) to a CRC
 * register, as four tables indexed by the register's bytes. */
static void zeros_init(uint32_t zeros[4][256], size_t len)
{
	uint32_t even[32], odd[32], row = 1;

	odd[0] = POLY; /* one zero bit */
	for (int n = 1; n < 32; n++) {
		odd[n] = row;
		row <<= 1;
	}
	gf2_square(even, odd); /* two bits */
	gf2_square(odd, even); /* four bits */
	for (;;) {
		gf2_square(even, odd); /* one byte, then 4, 16, ... */
		len >>= 1;
		if (!len) {
			memcpy(odd, even, sizeof(odd));
			break;
		}
		gf2_square(odd, even); /* 2 bytes, then 8, 32, ... */
		len >>= 1;
		if (!len)
			break;
	}
	for (uint32_t n = 0; n < 256; n++) {
		zeros[0][n] = gf2_times(odd, n);
		zeros[1][n] = gf2_times(odd, n << 8);
		zeros[2][n] = gf2_times(odd, n << 16);
		zeros[3][n] = gf2_times(odd, n << 24);
	}
}

static uint32_t shift(uint32_t zeros[4][256], uint32_t crc)
{
	return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^
	       zeros[2][(crc >> 16) & 0xff] ^ zeros[3][crc >> 24];
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* Three streams of n bytes each (n a multiple of 8), joined into c. */
__attribute__((target("sse4.2")))
static uint64_t crc_3way(uint64_t c, const unsigned char *p, size_t n,
			 uint32_t zeros[4][256])
{
	uint64_t c1 = 0, c2 = 0;
	const unsigned char *end = p + n;

	do {
		c = __builtin_ia32_crc32di(c, load64(p));
		c1 = __builtin_ia32_crc32di(c1, load64(p + n));
		c2 = __builtin_ia32_crc32di(c2, load64(p + 2 * n));
		p += 8;
	} while (p < end);
	c = shift(zeros, (uint32_t)c) ^ (uint32_t)c1;
	return shift(zeros, (uint32_t)c) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = crc;

	while (len && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		len--;
	}
	if (len >= 3 * CRC_SHORT && !__atomic_load_n(&have_zeros, __ATOMIC_ACQUIRE)) {
		/* idempotent: racing threads write the same values */
		zeros_init(zeros_long, CRC_LONG);
		zeros_init(zeros_short, CRC_SHORT);
		__atomic_store_n(&have_zeros, 1, __ATOMIC_RELEASE);
	}
	for (; len >= 3 * CRC_LONG; p += 3 * CRC_LONG, len -= 3 * CRC_LONG)
		c = crc_3way(c, p, CRC_LONG, zeros_long);
	for (; len >= 3 * CRC_SHORT; p += 3 * CRC_SHORT, len -= 3 * CRC_SHORT)
		c = crc_3way(c, p, CRC_SHORT, zeros_short);
	for (; len >= 8; p += 8, len -= 8)
		c = __builtin_ia32_crc32di(c, load64(p));
	while (len--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
	return (uint32_t)c;
}

static int use_hw(void)
{
	static int hw = -1;
	int v = __atomic_load_n(&hw, __ATOMIC_RELAXED);

	if (v < 0) {
		__builtin_cpu_init();
		v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		__atomic_store_n(&hw, v, __ATOMIC_RELAXED);
	}
	return v;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	crc = ~crc;
#if defined(__x86_64__)
	if (use_hw())
		return ~crc_hw(crc, buf, len);
#endif
	return ~crc_sw(crc, buf, len);
}
