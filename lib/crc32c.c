/* crc32c.c: CRC-32C, short buffers by the CPU's crc32 instruction, the rest
 * by ISA-L. */
#include "crc32c.h"

#include <isa-l/crc.h>
#include <string.h>

/*
 * ISA-L chooses its code when first called (256 bytes a step folded with
 * VPCLMULQDQ on AVX-512 CPUs, three crc32 chains joined with PCLMULQDQ on
 * older ones, tables on CPUs with neither) and runs several times faster
 * than one chain of crc32 instructions on long buffers.  Below
 * CRC_ISAL_MIN bytes the call into it costs more than the few crc32
 * instructions a short record needs; journal headers, REMOVE and OPEN
 * records are all that short and are checksummed per message, so they stay
 * inline.
 */
#define CRC_ISAL_MIN 256u
#define CRC_ISAL_MAX (1u << 30) /* bytes per call: ISA-L takes an int */

#if defined(__x86_64__)
static uint64_t load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static uint32_t load32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

/* One chain of crc32 instructions, 8 bytes a step; crc is the register
 * (already inverted). */
__attribute__((target("sse4.2")))
static uint32_t crc_short(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = crc;

	for (; len >= 8; p += 8, len -= 8)
		c = __builtin_ia32_crc32di(c, load64(p));
	crc = (uint32_t)c;
	if (len >= 4) {
		crc = __builtin_ia32_crc32si(crc, load32(p));
		p += 4;
		len -= 4;
	}
	while (len--)
		crc = __builtin_ia32_crc32qi(crc, *p++);
	return crc;
}

/*
 * ISA-L's vector code returns without vzeroupper, leaving the upper halves
 * of the vector registers in use.  The first legacy SSE instruction run
 * after that (the compiler's own code, anywhere in the server) stalls on
 * the transition between the two register states, once per CRC: enough
 * to slow the loop by more than the CRC gains.  Clearing them after each
 * call is nearly free; the ABI preserves no upper halves across a call.
 */
__attribute__((target("avx")))
static void vector_upper_clear(void)
{
	__builtin_ia32_vzeroupper();
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	/* tern's CRC is the inverted register (the iSCSI convention, as
	 * zlib's crc32 presents CRC-32); ISA-L takes and returns the
	 * register itself. */
	crc = ~crc;
#if defined(__x86_64__)
	if (len < CRC_ISAL_MIN && __builtin_cpu_supports("sse4.2"))
		return ~crc_short(crc, p, len);
#endif
	/* ISA-L never writes to the buffer, though its prototype is not const. */
	while (len) {
		int n = len > CRC_ISAL_MAX ? (int)CRC_ISAL_MAX : (int)len;

		crc = crc32_iscsi((unsigned char *)p, n, crc);
		p += n;
		len -= (size_t)n;
	}
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx"))
		vector_upper_clear();
#endif
	return ~crc;
}
