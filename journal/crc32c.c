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
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = crc;

	while (len && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
		p += 8;
		len -= 8;
	}
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
