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

struct item *item_new(uint32_t len)
{
	struct item *it = malloc(sizeof(*it) + (size_t)len + 2);

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
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tern_name_valid(const char *name, size_t len)
{
	size_t i;

	if (len == 0 || len > TERN_NAME_MAX)
		return 0;
	if (name[0] == '.' || name[0] == '+')
		return 0; /* no ".", "..", hidden directories or empty parent */
	for (i = 0; i < len; i++) {
		char c = name[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '+')
			continue;
		if (c == '.') {
			if (i + 1 < len && name[i + 1] == '.')
				return 0;
			continue;
		}
		return 0;
	}
	return 1;
}
