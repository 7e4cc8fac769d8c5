/* tern.c: error strings, items, clocks, name validation. */
#include "tern.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *tern_strerror(int err)
{
	if (err == TERN_ESYS)
		return strerror(errno);
	switch (err) {
	case 0:
		return "success";
#define TERN_ERR_CASE(name, val, text) \
	case name:                     \
		return text;
		TERN_ERRORS(TERN_ERR_CASE)
#undef TERN_ERR_CASE
	}
	return "unknown error";
}

void *(*tern_malloc)(size_t n) = malloc;

struct item *item_new(uint32_t len)
{
	struct item *it = tern_malloc(sizeof(*it) + (size_t)len + 2);

	if (!it)
		return NULL;
	memset(it, 0, sizeof(*it));
	it->len = len;
	it->refcount = 1;
	it->data[len] = '\r';
	it->data[len + 1] = '\n';
	return it;
}

struct item *item_ref(struct item *it)
{
	__atomic_add_fetch(&it->refcount, 1, __ATOMIC_RELAXED);
	return it;
}

void item_unref(struct item *it)
{
	if (it && __atomic_sub_fetch(&it->refcount, 1, __ATOMIC_ACQ_REL) == 0)
		free(it);
}

int64_t tern_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t tern_mono_ms(void)
{
	return tern_mono_us() / 1000;
}

int64_t tern_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Bytes allowed in queue names: [A-Za-z0-9_.+-{}].  Braces let a name
 * carry a proxy's hash tag ("{jobs}": twemproxy with hash_tag "{}" then
 * routes "{jobs}/open" and "{jobs}" alike); they are ordinary bytes in a
 * file name.  A table: the check runs for every request, so it costs one
 * lookup per byte. */
static const unsigned char name_ok[256] = {
	['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1,
	['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1,
	['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1,
	['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
	['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1,
	['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1,
	['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,
	['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
	['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,
	['7'] = 1, ['8'] = 1, ['9'] = 1,
	['_'] = 1, ['-'] = 1, ['+'] = 1, ['{'] = 1, ['}'] = 1, ['.'] = 2,
};

int tern_name_valid(const char *name, size_t len)
{
	const unsigned char *p = (const unsigned char *)name;
	size_t i;

	if (len == 0 || len > TERN_NAME_MAX)
		return 0;
	if (p[0] == '.' || p[0] == '+')
		return 0; /* no ".", "..", hidden directories or empty parent */
	for (i = 0; i < len; i++) {
		unsigned char k = name_ok[p[i]];

		if (k == 1)
			continue;
		if (k == 0 || (i + 1 < len && p[i + 1] == '.'))
			return 0; /* outside the set, or ".." */
	}
	return 1;
}
