/*
 * ketama.h: consistent hashing of keys over several servers, computed the
 * way twemproxy ("distribution: ketama") and libmemcached's weighted ketama
 * compute it, so that a client that hashes keys itself sends every key to
 * the server a proxy with the same server list and hash would.
 *
 * The continuum: each server gets 160 points per unit of its share of the
 * total weight (floor(weight / total * 40 * nservers) * 4 points, in single
 * precision as both implementations compute it); point group i of a server
 * is the MD5 digest of "NAME-i", cut into four little-endian 32-bit values.
 * NAME is the server's name when one is given ("host:port:weight name" in a
 * twemproxy server list), else "host:port", or just "host" when the port is
 * 11211 (libmemcached's convention, which twemproxy keeps).
 *
 * A key goes to the server of the first point at or after the key's hash
 * (wrapping around); the key hash is the proxy's `hash:` setting (md5 is
 * libmemcached's ketama key hash; fnv1a_64 is twemproxy's default).  With a
 * hash tag, only the part of the key between the first '{' and the next '}'
 * is hashed, as twemproxy does with `hash_tag: "{}"` (an empty tag, "{}",
 * hashes the whole key).  A list of one server takes every key.
 *
 * Errors: negative TC_E* codes (tclient.h).
 */
#ifndef TERN_KETAMA_H
#define TERN_KETAMA_H

#include <stddef.h>
#include <stdint.h>

/* Key hashes, with twemproxy's names for them. */
#define KETAMA_HASHES(X)                      \
	X(KETAMA_MD5, "md5")                  \
	X(KETAMA_FNV1A_64, "fnv1a_64")        \
	X(KETAMA_FNV1_64, "fnv1_64")          \
	X(KETAMA_FNV1A_32, "fnv1a_32")        \
	X(KETAMA_FNV1_32, "fnv1_32")          \
	X(KETAMA_ONE_AT_A_TIME, "one_at_a_time")

enum ketama_hash {
#define KETAMA_HASH_ENUM(e, s) e,
	KETAMA_HASHES(KETAMA_HASH_ENUM)
#undef KETAMA_HASH_ENUM
	KETAMA_HASH_COUNT
};

/* The hash named name (twemproxy's spelling), or -1 when there is none. */
int ketama_hash_parse(const char *name);
const char *ketama_hash_name(enum ketama_hash h);
/* The 32-bit hash of key[0..len) as twemproxy's hash of that name gives it. */
uint32_t ketama_hash_key(enum ketama_hash h, const char *key, size_t len);

/* The part of key that decides its server with the "{}" hash tag: what lies
 * between the first '{' and the next '}' when that is not empty, else the
 * whole key.  Stores it in *part, *plen. */
void ketama_tag(const char *key, size_t len, const char **part, size_t *plen);

#define KETAMA_HOST_MAX 256
#define KETAMA_NAME_MAX 300

struct ketama_server {
	char host[KETAMA_HOST_MAX]; /* as written, without IPv6 brackets */
	int port;
	unsigned weight;            /* 1 when not given */
	char name[KETAMA_NAME_MAX]; /* what the continuum hashes (see above) */
};

/*
 * Parses one server, "HOST:PORT[:WEIGHT][ NAME]" (HOST may be "[v6addr]"),
 * twemproxy's server syntax with the weight optional, from spec[0..len).
 * Returns 0, or TC_EINVAL for a malformed spec, a port outside 1..65535, a
 * weight outside 1..1000000, or a field too long.
 */
int ketama_server_parse(struct ketama_server *s, const char *spec, size_t len);

/* Parses a comma-separated list of servers into a new array (*out, freed
 * with free()) of *n entries.  Returns 0, TC_EINVAL (an empty list, an empty
 * or malformed entry) or TC_ENOMEM. */
int ketama_servers_parse(const char *list, struct ketama_server **out, unsigned *n);

struct ketama;

/* Builds the continuum of n servers (n >= 1; the array is copied) with key
 * hash h.  Returns 0 and *out, TC_EINVAL, TC_ENOMEM, or TC_ESYS when the
 * MD5 digest is not available (errno EINVAL). */
int ketama_new(struct ketama **out, const struct ketama_server *servers, unsigned n,
	       enum ketama_hash h);
void ketama_free(struct ketama *k);
unsigned ketama_count(const struct ketama *k);
const struct ketama_server *ketama_server(const struct ketama *k, unsigned i);
/* The index (into the server list) of key[0..len)'s server, hash tag
 * applied. */
unsigned ketama_pick(const struct ketama *k, const char *key, size_t len);

#endif
