/* tern.c: error strings, items, clocks, name validation. */
#include "tern.h"

#include <errno.h>
#include <malloc.h>
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

/*
 * Blocks freed on the thread that called tern_block_keep (the event loop)
 * are kept for reuse in size classes an eighth of a power of two wide, up
 * to BCACHE_MAX_BYTES in all: malloc's per-thread cache holds only 7 chunks
 * of a size and none above 1 KiB, so a pipelined batch otherwise takes each
 * block from malloc's bins, hundreds of instructions per malloc and free.
 * A block is its class's size, so any kept block of a class fits any
 * request of it (the rounding costs at most an eighth).  Only that thread
 * touches the lists, so they take no lock; a block freed on another thread
 * (the journal's writer can drop an item's last reference) goes back to
 * malloc.  Under AddressSanitizer a kept block is poisoned, so a use after
 * its free is still reported until the block is reused.
 */
#define BCACHE_MIN_SHIFT 6  /* classes above 64 bytes */
#define BCACHE_MAX_SHIFT 16 /* up to 64 KiB; larger blocks come from malloc */
#define BCACHE_CLASSES ((BCACHE_MAX_SHIFT - BCACHE_MIN_SHIFT) * 8)
#define BCACHE_MAX_BYTES ((size_t)4 << 20)

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define BCACHE_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define BCACHE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define BCACHE_POISON(p, n) ((void)(p), (void)(n))
#define BCACHE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct bcache_blk {
	struct bcache_blk *next;
};

/* Touched only by the keeping thread (bcache_mine). */
static struct {
	struct bcache_blk *head[BCACHE_CLASSES];
	size_t bytes; /* kept, in all classes */
} bcache;
static __thread int bcache_mine;
static int bcache_taken;

/* The class of an n-byte block and, in *size, the class's block size (n
 * when it has none); -1 when blocks of n bytes are not kept. */
static int bcache_class(size_t n, size_t *size)
{
	unsigned p, q;

	*size = n;
	if (n <= ((size_t)1 << BCACHE_MIN_SHIFT) || n > ((size_t)1 << BCACHE_MAX_SHIFT))
		return -1;
	p = 63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1)); /* 2^p <= n-1 */
	q = (unsigned)((n - 1) >> (p - 3));                             /* 8..15 */
	*size = (size_t)(q + 1) << (p - 3);
	return (int)((p - BCACHE_MIN_SHIFT) * 8 + q - 8);
}

void tern_block_keep(void)
{
	if (!__atomic_exchange_n(&bcache_taken, 1, __ATOMIC_ACQ_REL))
		bcache_mine = 1;
}

void *tern_block_alloc(size_t n)
{
	size_t size;
	int c = bcache_class(n, &size);
	struct bcache_blk *b;

	if (c < 0 || !bcache_mine || !bcache.head[c])
		return malloc(size);
	b = bcache.head[c];
	BCACHE_UNPOISON(b, size);
	bcache.head[c] = b->next;
	bcache.bytes -= size;
	return b;
}

size_t tern_block_size(size_t n)
{
	size_t size;

	bcache_class(n, &size);
	return size;
}

void tern_block_free(void *p, size_t n)
{
	struct bcache_blk *b = p;
	size_t size;
	int c = bcache_class(n, &size);

	if (c < 0 || !bcache_mine || bcache.bytes + size > BCACHE_MAX_BYTES) {
		free(p);
		return;
	}
	b->next = bcache.head[c];
	bcache.head[c] = b;
	bcache.bytes += size;
	BCACHE_POISON((char *)b + sizeof(*b), size - sizeof(*b));
}

int tern_heap_keep(void)
{
	/* (mallopt returns 1 when it took the setting) */
	int ok = mallopt(M_MMAP_THRESHOLD, (int)TERN_HEAP_MMAP_AT);

	ok &= mallopt(M_TRIM_THRESHOLD, (int)TERN_HEAP_KEEP);
	return ok == 1 ? 0 : -1;
}

void tern_heap_trim(void)
{
	malloc_trim(0);
}

/* A sized block starts with the size asked for (the free and realloc
 * need it); SIZED_HDR keeps the caller's pointer as aligned as malloc's. */
#define SIZED_HDR 16

void *tern_sized_alloc(size_t n)
{
	size_t *p = tern_block_alloc(n + SIZED_HDR);

	if (!p)
		return NULL;
	*p = n;
	return (char *)p + SIZED_HDR;
}

void tern_sized_free(void *q)
{
	size_t *p;

	if (!q)
		return;
	p = (size_t *)(void *)((char *)q - SIZED_HDR);
	tern_block_free(p, *p + SIZED_HDR);
}

void *tern_sized_realloc(void *q, size_t n)
{
	size_t *p, old;
	void *r;

	if (!q)
		return tern_sized_alloc(n);
	p = (size_t *)(void *)((char *)q - SIZED_HDR);
	old = *p;
	if (tern_block_size(n + SIZED_HDR) == tern_block_size(old + SIZED_HDR)) {
		*p = n; /* the same block size: it fits */
		return q;
	}
	r = tern_sized_alloc(n);
	if (!r)
		return NULL;
	memcpy(r, q, old < n ? old : n);
	tern_sized_free(q);
	return r;
}

struct item *item_new(uint32_t len)
{
	size_t n = sizeof(struct item) + (size_t)len + 2;
	/* A replaced seam sees every allocation (a test failing them); its
	 * blocks are of the class's size too, so they can be kept when freed. */
	struct item *it = tern_malloc == malloc ? tern_block_alloc(n)
						: tern_malloc(tern_block_size(n));

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
		tern_block_free(it, sizeof(*it) + (size_t)it->len + 2);
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

/* The pass clocks (tern.h): per thread, so no other thread sees the loop's. */
static __thread struct {
	int in_pass, have_wall, have_mono;
	int64_t wall_ms, mono_ms;
} pass;

void tern_pass_begin(int64_t mono_us)
{
	pass.in_pass = 1;
	pass.have_wall = 0;
	pass.have_mono = mono_us >= 0;
	pass.mono_ms = mono_us / 1000;
}

void tern_pass_end(void)
{
	pass.in_pass = 0;
}

/* The pass's reading of a clock (read now if the pass has none); outside a
 * pass a fresh one. */
static int64_t pass_read(int *have, int64_t *ms, int64_t (*clock_ms)(void))
{
	if (!pass.in_pass)
		return clock_ms();
	if (!*have) {
		*ms = clock_ms();
		*have = 1;
	}
	return *ms;
}

int64_t tern_pass_now_ms(void)
{
	return pass_read(&pass.have_wall, &pass.wall_ms, tern_now_ms);
}

int64_t tern_pass_mono_ms(void)
{
	return pass_read(&pass.have_mono, &pass.mono_ms, tern_mono_ms);
}

/* Bytes allowed in queue names: [A-Za-z0-9_.+-{}].  Braces let a name
 * carry a proxy's hash tag ("{jobs}": twemproxy with hash_tag "{}" then
 * routes "{jobs}/open" and "{jobs}" alike); they are ordinary bytes in a
 * file name.  A table: the check runs for every request, so the entries of
 * a name's bytes are and-ed together without a branch per byte; NAME_IN
 * survives when every byte is allowed, NAME_NODOT when none is '.' (only
 * then is the name looked at again, for ".."). */
#define NAME_IN 1
#define NAME_NODOT 2
#define W (NAME_IN | NAME_NODOT)
static const unsigned char name_ok[256] = {
	['a'] = W, ['b'] = W, ['c'] = W, ['d'] = W, ['e'] = W, ['f'] = W, ['g'] = W,
	['h'] = W, ['i'] = W, ['j'] = W, ['k'] = W, ['l'] = W, ['m'] = W, ['n'] = W,
	['o'] = W, ['p'] = W, ['q'] = W, ['r'] = W, ['s'] = W, ['t'] = W, ['u'] = W,
	['v'] = W, ['w'] = W, ['x'] = W, ['y'] = W, ['z'] = W,
	['A'] = W, ['B'] = W, ['C'] = W, ['D'] = W, ['E'] = W, ['F'] = W, ['G'] = W,
	['H'] = W, ['I'] = W, ['J'] = W, ['K'] = W, ['L'] = W, ['M'] = W, ['N'] = W,
	['O'] = W, ['P'] = W, ['Q'] = W, ['R'] = W, ['S'] = W, ['T'] = W, ['U'] = W,
	['V'] = W, ['W'] = W, ['X'] = W, ['Y'] = W, ['Z'] = W,
	['0'] = W, ['1'] = W, ['2'] = W, ['3'] = W, ['4'] = W, ['5'] = W, ['6'] = W,
	['7'] = W, ['8'] = W, ['9'] = W,
	['_'] = W, ['-'] = W, ['+'] = W, ['{'] = W, ['}'] = W, ['.'] = NAME_IN,
};
#undef W

int tern_word_index(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return (int)i;
	return -1;
}

int tern_name_valid(const char *name, size_t len)
{
	const unsigned char *p = (const unsigned char *)name;
	unsigned acc = NAME_IN | NAME_NODOT;
	size_t i = 0;

	if (len == 0 || len > TERN_NAME_MAX)
		return 0;
	if (p[0] == '.' || p[0] == '+')
		return 0; /* no ".", "..", hidden directories or empty parent */
	for (; len - i >= 4; i += 4)
		acc &= name_ok[p[i]] & name_ok[p[i + 1]] & name_ok[p[i + 2]] & name_ok[p[i + 3]];
	for (; i < len; i++)
		acc &= name_ok[p[i]];
	if (!(acc & NAME_IN))
		return 0; /* outside the set */
	if (!(acc & NAME_NODOT)) {
		for (i = 1; i < len; i++)
			if (p[i] == '.' && p[i - 1] == '.')
				return 0; /* ".." */
	}
	return 1;
}
