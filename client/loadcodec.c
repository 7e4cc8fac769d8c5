/* loadcodec.c: self-verifying bodies and the checker; see loadcodec.h. */
#include "loadcodec.h"

#include <stdlib.h>
#include <string.h>

#include "../lib/crc32c.h"

/* The filler pattern, stored twice in a row so that any PAT bytes starting
 * anywhere in the first copy are one memcpy. */
#define PAT 8192
static char pattern[2 * PAT];

static uint64_t mix64(uint64_t x)
{
	/* splitmix64 finaliser */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

__attribute__((constructor)) static void pattern_init(void)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint64_t s = 0x7465726e; /* "tern" */

	for (unsigned i = 0; i < PAT; i++) {
		s = mix64(s);
		pattern[i] = alphabet[s & 63];
	}
	memcpy(pattern + PAT, pattern, PAT);
}

static uint64_t key3(uint32_t queue, uint32_t producer, uint64_t seq)
{
	return mix64(seq ^ mix64(((uint64_t)queue << 32) | producer));
}

size_t loadcodec_size(uint32_t queue, uint32_t producer, uint64_t seq,
		      size_t min, size_t max)
{
	if (max <= min)
		return min;
	return min + (size_t)(key3(queue, producer, seq) % (uint64_t)(max - min + 1));
}

void loadcodec_fill(char *dst, size_t len, uint64_t start)
{
	size_t off = (size_t)(start % PAT);

	while (len > 0) {
		size_t n = len < PAT ? len : PAT;

		memcpy(dst, pattern + off, n);
		dst += n;
		len -= n;
	}
}

static void put32(char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (char)(v >> (8 * i));
}

static uint32_t get32(const char *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)(unsigned char)p[i] << (8 * i);
	return v;
}

/* CRC-32C, the journal's own (the CPU's crc32 instruction where there is
 * one): the driver checks every body it sends and receives on one thread,
 * and at high rates that thread, not the server, must not become the
 * busier side. */
static uint32_t body_crc(const char *b, size_t len)
{
	return crc32c(crc32c(0, b, 12), b + 16, len - 16);
}

void loadcodec_encode(char *dst, size_t len, uint32_t queue, uint32_t producer,
		      uint64_t seq)
{
	put32(dst, LOADCODEC_MAGIC);
	put32(dst + 4, queue);
	put32(dst + 8, producer);
	put32(dst + 16, (uint32_t)seq);
	put32(dst + 20, (uint32_t)(seq >> 32));
	loadcodec_fill(dst + LOADCODEC_HDR, len - LOADCODEC_HDR,
		       key3(queue, producer, seq));
	put32(dst + 12, body_crc(dst, len));
}

int loadcodec_decode(const char *body, size_t len, struct loadcodec_hdr *h)
{
	if (len < LOADCODEC_HDR)
		return LOADCODEC_ESHORT;
	if (get32(body) != LOADCODEC_MAGIC)
		return LOADCODEC_EMAGIC;
	if (get32(body + 12) != body_crc(body, len))
		return LOADCODEC_ECRC;
	h->queue = get32(body + 4);
	h->producer = get32(body + 8);
	h->seq = get32(body + 16) | (uint64_t)get32(body + 20) << 32;
	return LOADCODEC_OK;
}

/* ---- checker -------------------------------------------------------------- */

#define CHUNK_BITS 18 /* 256 Ki messages, 32 KiB per chunk */
#define CHUNK_WORDS ((1u << CHUNK_BITS) / 64)
#define MAX_CHUNKS 4096 /* 2^30 messages per producer */
#define SEQ_LIMIT ((uint64_t)MAX_CHUNKS << CHUNK_BITS)

/* A lazily grown bitmap: table of chunk pointers, both created on first
 * use with compare-and-swap (the loser frees its copy). */
struct bits {
	uint64_t **tab;
};

struct lc_queue {
	struct bits *stored, *seen; /* [max_producers] */
	uint64_t read, corrupt, duplicate, reordered; /* atomic */
};

struct lcheck {
	unsigned nqueues, max_producers;
	struct lc_queue *q;
};

struct lcheck_stream {
	unsigned n;
	uint64_t last[]; /* UINT64_MAX: nothing read yet from that producer */
};

static void *cas_alloc(void **slot, size_t size)
{
	void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE), *expected = NULL;

	if (p)
		return p;
	p = calloc(1, size);
	if (!p)
		return NULL;
	if (__atomic_compare_exchange_n(slot, &expected, p, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		return p;
	free(p);
	return expected;
}

/* The word holding bit seq, or NULL (seq out of range, or out of memory
 * when create, or absent when !create). */
static uint64_t *bits_word(struct bits *b, uint64_t seq, int create)
{
	uint64_t **tab, *chunk;
	uint64_t ci = seq >> CHUNK_BITS;

	if (seq >= SEQ_LIMIT)
		return NULL;
	if (create)
		tab = cas_alloc((void **)&b->tab, MAX_CHUNKS * sizeof(uint64_t *));
	else
		tab = __atomic_load_n(&b->tab, __ATOMIC_ACQUIRE);
	if (!tab)
		return NULL;
	if (create)
		chunk = cas_alloc((void **)&tab[ci], CHUNK_WORDS * sizeof(uint64_t));
	else
		chunk = __atomic_load_n(&tab[ci], __ATOMIC_ACQUIRE);
	if (!chunk)
		return NULL;
	return &chunk[(seq >> 6) & (CHUNK_WORDS - 1)];
}

/* Sets bit seq; returns its previous value (0/1), or -1 on failure. */
static int bits_set(struct bits *b, uint64_t seq)
{
	uint64_t *w = bits_word(b, seq, 1), m = 1ull << (seq & 63);

	if (!w)
		return -1;
	return (__atomic_fetch_or(w, m, __ATOMIC_RELAXED) & m) != 0;
}

static void bits_free(struct bits *b)
{
	if (!b->tab)
		return;
	for (unsigned i = 0; i < MAX_CHUNKS; i++)
		free(b->tab[i]);
	free(b->tab);
	b->tab = NULL;
}

struct lcheck *lcheck_new(unsigned nqueues, unsigned max_producers)
{
	struct lcheck *c = calloc(1, sizeof *c);

	if (!c)
		return NULL;
	c->nqueues = nqueues;
	c->max_producers = max_producers;
	c->q = calloc(nqueues, sizeof *c->q);
	if (!c->q)
		goto fail;
	for (unsigned i = 0; i < nqueues; i++) {
		c->q[i].stored = calloc(max_producers, sizeof(struct bits));
		c->q[i].seen = calloc(max_producers, sizeof(struct bits));
		if (!c->q[i].stored || !c->q[i].seen)
			goto fail;
	}
	return c;
fail:
	lcheck_free(c);
	return NULL;
}

void lcheck_free(struct lcheck *c)
{
	if (!c)
		return;
	for (unsigned i = 0; c->q && i < c->nqueues; i++) {
		for (unsigned p = 0; p < c->max_producers; p++) {
			if (c->q[i].stored)
				bits_free(&c->q[i].stored[p]);
			if (c->q[i].seen)
				bits_free(&c->q[i].seen[p]);
		}
		free(c->q[i].stored);
		free(c->q[i].seen);
	}
	free(c->q);
	free(c);
}

int lcheck_stored(struct lcheck *c, unsigned queue, unsigned producer, uint64_t seq)
{
	if (queue >= c->nqueues || producer >= c->max_producers)
		return -1;
	return bits_set(&c->q[queue].stored[producer], seq) < 0 ? -1 : 0;
}

struct lcheck_stream *lcheck_stream_new(unsigned max_producers)
{
	struct lcheck_stream *s =
		malloc(sizeof *s + max_producers * sizeof(uint64_t));

	if (!s)
		return NULL;
	s->n = max_producers;
	for (unsigned i = 0; i < max_producers; i++)
		s->last[i] = UINT64_MAX;
	return s;
}

void lcheck_stream_free(struct lcheck_stream *s)
{
	free(s);
}

static void add(uint64_t *counter)
{
	__atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

enum lcheck_outcome lcheck_read(struct lcheck *c, struct lcheck_stream *s,
				unsigned queue, const char *body, size_t len,
				size_t size_min, size_t size_max)
{
	struct lc_queue *q = &c->q[queue];
	struct loadcodec_hdr h;
	int was;

	add(&q->read);
	if (loadcodec_decode(body, len, &h) != LOADCODEC_OK || h.queue != queue ||
	    h.producer >= c->max_producers || h.seq >= SEQ_LIMIT ||
	    (size_max && len != loadcodec_size(h.queue, h.producer, h.seq,
					       size_min, size_max))) {
		add(&q->corrupt);
		return LCHECK_CORRUPT;
	}
	was = bits_set(&q->seen[h.producer], h.seq);
	if (was != 0) {
		/* A duplicate is only a duplicate: it does not move the
		 * stream's position, so it is not also counted as reordered. */
		add(was > 0 ? &q->duplicate : &q->corrupt);
		return was > 0 ? LCHECK_DUPLICATE : LCHECK_CORRUPT;
	}
	if (s && h.producer < s->n) {
		uint64_t last = s->last[h.producer];

		s->last[h.producer] = h.seq;
		if (last != UINT64_MAX && h.seq < last) {
			add(&q->reordered);
			return LCHECK_REORDERED;
		}
	}
	return LCHECK_OK;
}

/* Counts bits set in want[0..limit) that are clear in have. */
static uint64_t count_missing(struct bits *want, struct bits *have, uint64_t limit)
{
	uint64_t missing = 0;

	for (uint64_t seq = 0; seq < limit; seq += 64) {
		uint64_t w, h, *wp, *hp;
		uint64_t mask = limit - seq >= 64 ? ~0ull : (1ull << (limit - seq)) - 1;

		if (want) {
			/* skip absent chunks quickly */
			if (!want->tab || !want->tab[seq >> CHUNK_BITS]) {
				seq = ((seq >> CHUNK_BITS) + 1) * (1ull << CHUNK_BITS) - 64;
				continue;
			}
			wp = bits_word(want, seq, 0);
			w = wp ? *wp : 0;
		} else {
			w = ~0ull;
		}
		hp = bits_word(have, seq, 0);
		h = hp ? *hp : 0;
		missing += (uint64_t)__builtin_popcountll(w & ~h & mask);
	}
	return missing;
}

void lcheck_finish(struct lcheck *c, unsigned queue,
		   const uint64_t *expected_per_producer, struct lcheck_counts *out)
{
	struct lc_queue *q = &c->q[queue];
	uint64_t lost = 0;

	for (unsigned p = 0; p < c->max_producers; p++) {
		if (expected_per_producer)
			lost += count_missing(NULL, &q->seen[p],
					      expected_per_producer[p] < SEQ_LIMIT
						      ? expected_per_producer[p]
						      : SEQ_LIMIT);
		else if (q->stored[p].tab)
			lost += count_missing(&q->stored[p], &q->seen[p], SEQ_LIMIT);
	}
	out->read = __atomic_load_n(&q->read, __ATOMIC_RELAXED);
	out->corrupt = __atomic_load_n(&q->corrupt, __ATOMIC_RELAXED);
	out->duplicate = __atomic_load_n(&q->duplicate, __ATOMIC_RELAXED);
	out->reordered = __atomic_load_n(&q->reordered, __ATOMIC_RELAXED);
	out->lost = lost;
}
