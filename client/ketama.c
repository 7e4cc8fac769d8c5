/*
 * ketama.c: the ketama continuum, twemproxy's key hashes and its "{}" hash
 * tag.  See ketama.h for what is computed and why it must match.
 */
#include "ketama.h"

#include "tclient.h"

#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POINTS_PER_SERVER 160 /* per unit of weight share; 4 per digest */
#define KETAMA_DEFAULT_PORT 11211 /* left out of the hashed name */

struct point {
	uint32_t value;
	unsigned server;
};

struct ketama {
	struct ketama_server *servers;
	unsigned nservers;
	enum ketama_hash hash;
	struct point *points;
	unsigned npoints;
};

static const char *const hash_names[] = {
#define KETAMA_HASH_NAME(e, s) s,
	KETAMA_HASHES(KETAMA_HASH_NAME)
#undef KETAMA_HASH_NAME
};

int ketama_hash_parse(const char *name)
{
	for (int i = 0; i < KETAMA_HASH_COUNT; i++)
		if (strcmp(name, hash_names[i]) == 0)
			return i;
	return -1;
}

const char *ketama_hash_name(enum ketama_hash h)
{
	return (unsigned)h < KETAMA_HASH_COUNT ? hash_names[h] : "?";
}

/* MD5 of key into out[16]; -1 when the library has no MD5 (a FIPS-only
 * OpenSSL configuration), which ketama_new reports before any key is
 * hashed. */
static int md5(const char *key, size_t len, unsigned char out[16])
{
	unsigned int n = 0;

	if (EVP_Digest(key, len, out, &n, EVP_md5(), NULL) != 1 || n != 16) {
		memset(out, 0, 16);
		return -1;
	}
	return 0;
}

/* Little-endian 32-bit word i (0..3) of a digest, as ketama reads it. */
static uint32_t digest_word(const unsigned char d[16], unsigned i)
{
	return (uint32_t)d[4 * i] | (uint32_t)d[4 * i + 1] << 8 | (uint32_t)d[4 * i + 2] << 16 |
	       (uint32_t)d[4 * i + 3] << 24;
}

/*
 * The key hashes follow twemproxy's definitions bit for bit, including
 * their quirks: each byte is widened as a (signed) char, and the "64-bit"
 * FNV variants keep only 32 bits (fnv1a_64 even runs its whole loop in 32
 * bits).  A different result here would send keys to other servers than
 * the proxy does.
 */
uint32_t ketama_hash_key(enum ketama_hash h, const char *key, size_t len)
{
	unsigned char d[16];
	uint64_t h64;
	uint32_t h32;

	switch (h) {
	case KETAMA_MD5:
		md5(key, len, d);
		return digest_word(d, 0);
	case KETAMA_FNV1A_64:
		h32 = (uint32_t)UINT64_C(0xcbf29ce484222325);
		for (size_t i = 0; i < len; i++) {
			h32 ^= (uint32_t)key[i];
			h32 *= (uint32_t)UINT64_C(0x100000001b3);
		}
		return h32;
	case KETAMA_FNV1_64:
		h64 = UINT64_C(0xcbf29ce484222325);
		for (size_t i = 0; i < len; i++) {
			h64 *= UINT64_C(0x100000001b3);
			h64 ^= (uint64_t)(int64_t)key[i];
		}
		return (uint32_t)h64;
	case KETAMA_FNV1A_32:
		h32 = 2166136261u;
		for (size_t i = 0; i < len; i++) {
			h32 ^= (uint32_t)key[i];
			h32 *= 16777619u;
		}
		return h32;
	case KETAMA_FNV1_32:
		h32 = 2166136261u;
		for (size_t i = 0; i < len; i++) {
			h32 *= 16777619u;
			h32 ^= (uint32_t)key[i];
		}
		return h32;
	case KETAMA_ONE_AT_A_TIME:
		h32 = 0;
		for (size_t i = 0; i < len; i++) {
			h32 += (uint32_t)key[i];
			h32 += h32 << 10;
			h32 ^= h32 >> 6;
		}
		h32 += h32 << 3;
		h32 ^= h32 >> 11;
		h32 += h32 << 15;
		return h32;
	case KETAMA_HASH_COUNT:
		break;
	}
	return 0;
}

void ketama_tag(const char *key, size_t len, const char **part, size_t *plen)
{
	const char *open = memchr(key, '{', len);
	const char *close;

	*part = key;
	*plen = len;
	if (!open)
		return;
	close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
	if (close && close - open > 1) {
		*part = open + 1;
		*plen = (size_t)(close - open - 1);
	}
}

/* Parses the decimal number s[0..len) into *v within [lo, hi]. */
static int parse_uint(const char *s, size_t len, unsigned long lo, unsigned long hi,
		      unsigned long *v)
{
	unsigned long x = 0;

	if (len == 0 || len > 9)
		return TC_EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return TC_EINVAL;
		x = x * 10 + (unsigned long)(s[i] - '0');
	}
	if (x < lo || x > hi)
		return TC_EINVAL;
	*v = x;
	return 0;
}

static int copy_field(char *dst, size_t cap, const char *s, size_t len)
{
	if (len == 0 || len >= cap || memchr(s, '\0', len))
		return TC_EINVAL;
	memcpy(dst, s, len);
	dst[len] = '\0';
	return 0;
}

int ketama_server_parse(struct ketama_server *s, const char *spec, size_t len)
{
	const char *sp = memchr(spec, ' ', len);
	const char *addr = spec, *host, *rest, *colon;
	size_t alen = sp ? (size_t)(sp - spec) : len, hlen;
	unsigned long port, weight = 1;
	int rc;

	memset(s, 0, sizeof *s);
	if (alen == 0)
		return TC_EINVAL;
	/* HOST: "[v6]" or everything up to the first ':' after it. */
	if (addr[0] == '[') {
		const char *end = memchr(addr, ']', alen);

		if (!end || end + 1 >= addr + alen || end[1] != ':')
			return TC_EINVAL;
		host = addr + 1;
		hlen = (size_t)(end - host);
		rest = end + 2;
	} else {
		colon = memchr(addr, ':', alen);
		if (!colon)
			return TC_EINVAL;
		host = addr;
		hlen = (size_t)(colon - addr);
		rest = colon + 1;
	}
	if ((rc = copy_field(s->host, sizeof s->host, host, hlen)) < 0)
		return rc;
	/* PORT[:WEIGHT] */
	colon = memchr(rest, ':', (size_t)(addr + alen - rest));
	if ((rc = parse_uint(rest, (size_t)((colon ? colon : addr + alen) - rest), 1, 65535,
			     &port)) < 0)
		return rc;
	if (colon && (rc = parse_uint(colon + 1, (size_t)(addr + alen - colon - 1), 1, 1000000,
				      &weight)) < 0)
		return rc;
	s->port = (int)port;
	s->weight = (unsigned)weight;
	if (sp) {
		/* The name is everything after the first space. */
		return copy_field(s->name, sizeof s->name, sp + 1, len - alen - 1);
	}
	if (s->port == KETAMA_DEFAULT_PORT)
		return copy_field(s->name, sizeof s->name, s->host, strlen(s->host));
	if (snprintf(s->name, sizeof s->name, "%s:%d", s->host, s->port) >= (int)sizeof s->name)
		return TC_EINVAL;
	return 0;
}

int ketama_servers_parse(const char *list, struct ketama_server **out, unsigned *n)
{
	struct ketama_server *v;
	unsigned count = 1, i = 0;
	const char *p = list;
	int rc;

	*out = NULL;
	*n = 0;
	for (const char *c = list; *c; c++)
		count += *c == ',';
	v = calloc(count, sizeof *v);
	if (!v)
		return TC_ENOMEM;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if ((rc = ketama_server_parse(&v[i++], p, len)) < 0) {
			free(v);
			return rc;
		}
		if (!end)
			break;
		p = end + 1;
	}
	*out = v;
	*n = count;
	return 0;
}

static int point_cmp(const void *a, const void *b)
{
	const struct point *x = a, *y = b;

	/* Equal values (a chance of about 1 in 10^5 for three servers) are
	 * ordered by server so that the choice is at least stable; the proxies
	 * leave it to their sort. */
	if (x->value != y->value)
		return x->value < y->value ? -1 : 1;
	return x->server < y->server ? -1 : x->server > y->server;
}

int ketama_new(struct ketama **out, const struct ketama_server *servers, unsigned n,
	       enum ketama_hash h)
{
	struct ketama *k = NULL;
	uint64_t total = 0;
	unsigned char d[16];
	unsigned cap = 0;
	int rc;

	*out = NULL;
	if (n == 0 || (unsigned)h >= KETAMA_HASH_COUNT)
		return TC_EINVAL;
	if (md5("", 0, d) < 0) {
		errno = EINVAL;
		return TC_ESYS;
	}
	for (unsigned i = 0; i < n; i++) {
		if (servers[i].weight == 0)
			return TC_EINVAL;
		total += servers[i].weight;
	}
	rc = TC_ENOMEM;
	k = calloc(1, sizeof *k);
	if (!k)
		goto fail;
	k->servers = malloc(n * sizeof *k->servers);
	if (!k->servers)
		goto fail;
	memcpy(k->servers, servers, n * sizeof *servers);
	k->nservers = n;
	k->hash = h;
	for (unsigned i = 0; i < n; i++) {
		/* The same expression, in the same precision, as twemproxy's
		 * ketama_update and libmemcached's update_continuum: a
		 * server's point count must come out identical, rounding
		 * included. */
		float pct = (float)servers[i].weight / (float)total;
		unsigned per_server = (unsigned)(floorf((float)(pct * POINTS_PER_SERVER / 4 *
							       (float)n + 0.0000000001)) * 4);
		struct point *grown;

		grown = realloc(k->points, (cap + per_server) * sizeof *k->points);
		if (!grown)
			goto fail;
		k->points = grown;
		cap += per_server;
		for (unsigned g = 0; g < per_server / 4; g++) {
			char host[KETAMA_NAME_MAX + 16];
			int hl = snprintf(host, sizeof host, "%s-%u", servers[i].name, g);

			md5(host, (size_t)hl, d);
			for (unsigned x = 0; x < 4; x++) {
				k->points[k->npoints].value = digest_word(d, x);
				k->points[k->npoints++].server = i;
			}
		}
	}
	if (k->npoints == 0) {
		rc = TC_EINVAL;
		goto fail;
	}
	qsort(k->points, k->npoints, sizeof *k->points, point_cmp);
	*out = k;
	return 0;
fail:
	ketama_free(k);
	return rc;
}

void ketama_free(struct ketama *k)
{
	if (!k)
		return;
	free(k->points);
	free(k->servers);
	free(k);
}

unsigned ketama_count(const struct ketama *k)
{
	return k->nservers;
}

const struct ketama_server *ketama_server(const struct ketama *k, unsigned i)
{
	return i < k->nservers ? &k->servers[i] : NULL;
}

unsigned ketama_pick(const struct ketama *k, const char *key, size_t len)
{
	unsigned lo = 0, hi = k->npoints;
	const char *part;
	size_t plen;
	uint32_t hv;

	/* As the proxy does: one server takes everything, hashed or not. */
	if (k->nservers == 1)
		return 0;
	ketama_tag(key, len, &part, &plen);
	/* twemproxy hashes an empty key to 0 rather than hashing nothing. */
	hv = plen ? ketama_hash_key(k->hash, part, plen) : 0;
	/* The first point at or after the hash; past the last, the first. */
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;

		if (k->points[mid].value < hv)
			lo = mid + 1;
		else
			hi = mid;
	}
	return k->points[lo == k->npoints ? 0 : lo].server;
}
