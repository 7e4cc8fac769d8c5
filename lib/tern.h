/*
 * tern.h: what every module of tern shares: error codes and the message item.
 *
 * Error convention: functions that can fail return int, 0 on
 * success, a negative TERN_E* code otherwise.  System failures return
 * TERN_ESYS and leave errno set; tern_strerror() names every code.
 */
#ifndef TERN_H
#define TERN_H

#include <stddef.h>
#include <stdint.h>

#define TERN_VERSION "0.1.0"
#define TERN_DEFAULT_PORT 22133

/*
 * The modes of every file and directory ternd creates in its data
 * directory (journal segments and spares, the catalog, the lock and status
 * files, the queues' directories): the server's user only.  A message
 * body is nobody else's to read, whatever the umask or the service
 * manager's settings; the umask can only take bits away from these.
 */
#define TERN_FILE_MODE 0600
#define TERN_DIR_MODE 0700

/* X-macro table of tern's own error codes: name, value, text. */
#define TERN_ERRORS(X)                                                        \
	X(TERN_ESYS, -1, "system error (see errno)")                          \
	X(TERN_ENOMEM, -2, "out of memory")                                   \
	X(TERN_EINVAL, -3, "invalid argument")                                \
	X(TERN_ENOSPC, -4, "no space left for the journal")                   \
	X(TERN_ECORRUPT, -5, "journal record is corrupt")                     \
	X(TERN_EIO, -6, "journal I/O failed")                                 \
	X(TERN_EFULL, -7, "queue is full")                                    \
	X(TERN_ETOOBIG, -8, "item too large")                                 \
	X(TERN_ENOTFOUND, -9, "not found")                                    \
	X(TERN_EBADNAME, -10, "bad queue name")                               \
	X(TERN_ELMDB, -11, "catalog (LMDB) error")                            \
	X(TERN_EVERSION, -12, "unsupported on-disk format version")            \
	X(TERN_ELOCKED, -13, "data directory is in use by another process")   \
	X(TERN_EACCES, -14, "access denied")

enum tern_err {
#define TERN_ERR_ENUM(name, val, text) name = (val),
	TERN_ERRORS(TERN_ERR_ENUM)
#undef TERN_ERR_ENUM
};

/* Returns a static string for a TERN_E* code (for TERN_ESYS, strerror(errno)). */
const char *tern_strerror(int err);

/*
 * A message.  Allocated once at its final size by item_new(): the body is
 * followed by "\r\n" so a reply can reference data[0..len+2) directly.
 * Shared by reference count between the queue, the journal writer thread and
 * replies in flight (evbuffer references), so the count is atomic.  The
 * links are owned by whichever single list currently holds the item (a queue
 * or a connection's open set), always on the event-loop thread.
 */
struct item {
	struct item *next, *prev; /* list links (owner: queue or open set) */
	uint64_t id;              /* per-queue id, monotonic, never 0 */
	int64_t expiry_ms;        /* unix ms after which it is dead; 0 = never */
	int64_t add_ms;           /* unix ms when it was enqueued */
	uint32_t flags;           /* client flags, stored and returned */
	uint32_t len;             /* body length in bytes (without CRLF) */
	uint32_t refcount;        /* atomic */
	uint32_t open_conn;       /* while open: owning connection id; else 0 */
	uint32_t deliveries;      /* times handed out by an open read (or
				     reserve): kept across restarts */
	uint32_t state;           /* ITEM_* bits */
	int64_t open_deadline_ms; /* while open: when open_timeout returns it;
				     while delayed: when it becomes visible
				     (both monotonic ms, tern_mono_ms; an item
				     is never open and delayed at once) */
	void *owner;              /* while open: queue it belongs to */
	char data[];              /* len bytes of body, then "\r\n" */
};

/* item.state: delayed delivery: add_ms is the wall-clock time (unix ms) at
 * which the item becomes (or became) visible, not when it was set. */
#define ITEM_DELAYED 0x1u

/*
 * The allocation seam: item_new(), the journal's batches and checkpoint
 * blobs and the queues' history rings (server/qhist.h) allocate through
 * this pointer (malloc by default), so a unit test
 * can make exactly those allocations fail and check the out-of-memory
 * paths.  Replace it only on the event-loop thread, while no other thread
 * allocates through it (only the loop does).
 */
extern void *(*tern_malloc)(size_t n);

/* Allocates an item with room for len body bytes plus CRLF; refcount 1.
 * Returns NULL when out of memory.  CRLF is written by item_new.  The item
 * is a tern_block_alloc block (a kept one when its class has one) while
 * tern_malloc is malloc; through a replaced seam every item is a new
 * allocation. */
struct item *item_new(uint32_t len);
/* Adds a reference; returns it. Thread-safe. */
struct item *item_ref(struct item *it);
/* Drops a reference; at zero hands the item to tern_block_free.
 * Thread-safe. NULL is ignored. */
void item_unref(struct item *it);

/*
 * Blocks kept for reuse by one thread, the event loop's.  tern_block_alloc
 * returns a block of at least n bytes: on that thread one it freed before
 * when n's size class has one, else from malloc (NULL without memory).
 * tern_block_free takes a block back with the same n (NULL is ignored): on
 * that thread it keeps it, up to 4 MiB of kept blocks in all, otherwise (or
 * on any other thread) it frees it.  Classes are an eighth of a power of two
 * wide, from 64 bytes to 64 KiB; tern_block_size(n) is the size of n's
 * block.  Both are safe on any thread; a block may be freed on another
 * thread than the one that allocated it.
 */
void *tern_block_alloc(size_t n);
void tern_block_free(void *p, size_t n);
size_t tern_block_size(size_t n);
/* Makes the calling thread the one that keeps blocks; only the first call
 * in a process does (later ones, from any thread, change nothing). */
void tern_block_keep(void);

/*
 * The heap above the kept blocks: glibc by default gives the top of its
 * heap back to the kernel once 128 KiB of it is free, and serves each
 * block from 128 KiB up with a mapping of its own, unmapped at its free.
 * A queue of large messages then takes every message's pages from the
 * kernel afresh, a page fault each 4 KiB.  tern_heap_keep (once, at
 * start) keeps up to TERN_HEAP_KEEP bytes of freed heap for reuse and
 * serves blocks up to TERN_HEAP_MMAP_AT from the heap; tern_heap_trim
 * gives back what is free (the server calls it when idle).  Returns 0, or
 * -1 when malloc did not take both settings (another allocator, such as
 * a sanitizer's, has its own ways).  glibc gives back the whole free top
 * once it passes the threshold: at twice the default max_memory_size, a
 * queue that drained the 64 MiB it held keeps them for its next backlog.
 */
#define TERN_HEAP_KEEP ((size_t)128 << 20)
#define TERN_HEAP_MMAP_AT ((size_t)32 << 20)
int tern_heap_keep(void);
void tern_heap_trim(void);

/*
 * malloc, realloc and free over the kept blocks for callers that free
 * without giving a size: libevent (event_set_mem_functions), whose chains
 * a pipelined batch frees and allocates by the dozen.  Each block carries
 * the size asked for in front of the pointer returned.
 */
void *tern_sized_alloc(size_t n);
void *tern_sized_realloc(void *p, size_t n);
void tern_sized_free(void *p);

/* Wall clock in unix milliseconds (CLOCK_REALTIME). */
int64_t tern_now_ms(void);
/* Monotonic clock in milliseconds (CLOCK_MONOTONIC). */
int64_t tern_mono_ms(void);
/* The same in microseconds. */
int64_t tern_mono_us(void);

/*
 * The event loop's clocks, read at most once per loop pass.  The loop calls
 * tern_pass_begin before each pass (mono_us: a tern_mono_us reading taken
 * just before a pass that will not wait, else -1) and tern_pass_end after
 * it.  While a pass runs on the calling thread, tern_pass_now_ms and
 * tern_pass_mono_ms read their clock the first time and then return that
 * reading, so the requests of one pass share it; outside a pass, and on
 * every other thread, they are tern_now_ms and tern_mono_ms.  For what a
 * request stamps (add time, expiry, last use), where the length of a pass
 * does not matter; never for a deadline that must not come early.
 */
void tern_pass_begin(int64_t mono_us);
void tern_pass_end(void);
int64_t tern_pass_now_ms(void);
int64_t tern_pass_mono_ms(void);

/* Queue names: 1..250 bytes of [A-Za-z0-9_.-], '+' for fanout children and
 * '{' '}' for hash tags; never starting with '.' or '+', never containing
 * "..", never '/': a name is a directory under the data directory and can
 * never leave it.  Returns 1 when valid. */
int tern_name_valid(const char *name, size_t len);
#define TERN_NAME_MAX 250

/* The index of s in names[0..n) (the values an option takes), or -1. */
int tern_word_index(const char *const *names, size_t n, const char *s);

/* Whether len bytes at a and b are the same.  For the short strings every
 * request compares (a queue name with the one it used last): eight bytes
 * at a time, inline, where memcmp would cost a call for a dozen bytes. */
static inline int tern_same_bytes(const char *a, const char *b, size_t len)
{
	uint64_t x, y;
	size_t i;

	if (len < 8) {
		for (i = 0; i < len; i++)
			if (a[i] != b[i])
				return 0;
		return 1;
	}
	for (i = 0; len - i > 8; i += 8) {
		__builtin_memcpy(&x, a + i, 8);
		__builtin_memcpy(&y, b + i, 8);
		if (x != y)
			return 0;
	}
	__builtin_memcpy(&x, a + len - 8, 8); /* the last eight */
	__builtin_memcpy(&y, b + len - 8, 8);
	return x == y;
}

#endif
