/*
 * auth.c: the auth file's users and the [access] rights (contracts and the
 * rights' words in auth.h).
 */
#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/tern.h"

/* Queue-name prefixes a right covers. */
struct prefixes {
	int any;          /* "*": every queue */
	char **p;
	size_t *len;
	unsigned n;
};

/* The length of a keyed digest (HMAC-SHA-256). */
#define MAC_LEN 32

struct auth_user {
	char *name;
	size_t nlen;
	unsigned char name_mac[MAC_LEN], pass_mac[MAC_LEN];
	unsigned flags;   /* AUTH_STATS, AUTH_ADMIN */
	struct prefixes read, write;
	int all;          /* every right on every queue */
};

struct auth {
	struct auth_user *users;
	unsigned n;
	unsigned char key[MAC_LEN];      /* this load's digest key */
	unsigned char nobody[MAC_LEN];   /* compared when no user matches */
};

/* The words of a rights value (auth.h). */
#define RIGHT_WORDS(X)       \
	X(READ, "read=")     \
	X(WRITE, "write=")   \
	X(STATS, "stats")    \
	X(ADMIN, "admin")    \
	X(ALL, "all")        \
	X(NONE, "none")

enum right_word {
#define RIGHT_WORD_ENUM(e, w) W_##e,
	RIGHT_WORDS(RIGHT_WORD_ENUM)
#undef RIGHT_WORD_ENUM
	W__COUNT
};

static const char *const right_words[] = {
#define RIGHT_WORD_STR(e, w) w,
	RIGHT_WORDS(RIGHT_WORD_STR)
#undef RIGHT_WORD_STR
};

int auth_user_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > AUTH_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)name[i];

		if (ch <= ' ' || ch == ':' || ch == 0x7f)
			return 0;
	}
	return 1;
}

/* Whether a prefix byte may be in a queue name. */
static int prefix_char(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '.' || ch == '-' || ch == '+';
}

static void prefixes_free(struct prefixes *p)
{
	for (unsigned i = 0; i < p->n; i++)
		free(p->p[i]);
	free(p->p);
	free(p->len);
	memset(p, 0, sizeof(*p));
}

/* Adds the prefix s (len bytes) to p (NULL: only check it).  NULL or why
 * it is refused. */
static const char *prefix_add(struct prefixes *p, const char *s, size_t len)
{
	char **np;
	size_t *nl;

	if (len == 1 && s[0] == '*') {
		if (p)
			p->any = 1;
		return NULL;
	}
	if (len == 0 || len > TERN_NAME_MAX)
		return "a queue prefix must be 1 to 250 bytes, or *";
	for (size_t i = 0; i < len; i++)
		if (!prefix_char((unsigned char)s[i]))
			return "a queue prefix holds only the characters of queue names";
	if (!p)
		return NULL;
	np = realloc(p->p, (p->n + 1) * sizeof(*np));
	if (!np)
		return "out of memory";
	p->p = np;
	nl = realloc(p->len, (p->n + 1) * sizeof(*nl));
	if (!nl)
		return "out of memory";
	p->len = nl;
	if (!(p->p[p->n] = strndup(s, len)))
		return "out of memory";
	p->len[p->n++] = len;
	return NULL;
}

/* Parses rights into u (NULL: only check them).  NULL or why not. */
static const char *rights_parse(const char *s, struct auth_user *u)
{
	int words = 0;

	for (;;) {
		const char *w, *end;
		size_t len;
		int k;

		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s)
			break;
		w = s;
		while (*s && *s != ' ' && *s != '\t')
			s++;
		len = (size_t)(s - w);
		words++;
		for (k = 0; k < W__COUNT; k++) {
			size_t wl = strlen(right_words[k]);

			if (right_words[k][wl - 1] == '=' ? len >= wl && !memcmp(w, right_words[k], wl)
							  : len == wl && !memcmp(w, right_words[k], wl))
				break;
		}
		switch (k) {
		case W_READ:
		case W_WRITE: {
			struct prefixes *p = !u ? NULL : k == W_READ ? &u->read : &u->write;
			const char *list = w + strlen(right_words[k]);

			for (;;) {
				const char *why;

				end = memchr(list, ',', (size_t)(s - list));
				if (!end)
					end = s;
				why = prefix_add(p, list, (size_t)(end - list));
				if (why)
					return why;
				if (end == s)
					break;
				list = end + 1;
			}
			break;
		}
		case W_STATS:
			if (u)
				u->flags |= AUTH_STATS;
			break;
		case W_ADMIN:
			if (u)
				u->flags |= AUTH_ADMIN | AUTH_STATS;
			break;
		case W_ALL:
			if (u)
				u->all = 1;
			break;
		case W_NONE:
			break;
		default:
			return "unknown right (read=PREFIXES, write=PREFIXES, stats, admin, all, none)";
		}
	}
	return words ? NULL : "no rights given (none gives none)";
}

const char *auth_rights_check(const char *rights)
{
	return rights_parse(rights, NULL);
}

static void user_free(struct auth_user *u)
{
	free(u->name);
	prefixes_free(&u->read);
	prefixes_free(&u->write);
}

void auth_free(struct auth *a)
{
	if (!a)
		return;
	for (unsigned i = 0; i < a->n; i++)
		user_free(&a->users[i]);
	free(a->users);
	OPENSSL_cleanse(a, sizeof(*a));
	free(a);
}

unsigned auth_count(const struct auth *a)
{
	return a->n;
}

const struct auth_user *auth_find(const struct auth *a, const char *name, size_t len)
{
	for (unsigned i = 0; i < a->n; i++)
		if (a->users[i].nlen == len && !memcmp(a->users[i].name, name, len))
			return &a->users[i];
	return NULL;
}

/* out = HMAC-SHA-256 of data under a's key.  0, or -1 when OpenSSL fails. */
static int mac(const struct auth *a, const char *data, size_t len, unsigned char *out)
{
	unsigned int olen = MAC_LEN;

	return HMAC(EVP_sha256(), a->key, MAC_LEN, (const unsigned char *)data, len, out, &olen)
		       && olen == MAC_LEN ? 0 : -1;
}

const struct auth_user *auth_check(const struct auth *a, const char *user, size_t ulen,
				   const char *pass, size_t plen)
{
	unsigned char um[MAC_LEN], pm[MAC_LEN];
	const struct auth_user *found = NULL;
	int ok;

	if (mac(a, user, ulen, um) || mac(a, pass, plen, pm))
		return NULL;
	/* every user's name is compared, a match or not, and then one
	 * password digest, the user's or one no password has */
	for (unsigned i = 0; i < a->n; i++)
		if (CRYPTO_memcmp(a->users[i].name_mac, um, MAC_LEN) == 0)
			found = &a->users[i];
	ok = CRYPTO_memcmp(found ? found->pass_mac : a->nobody, pm, MAC_LEN) == 0;
	OPENSSL_cleanse(pm, sizeof(pm));
	return found && ok ? found : NULL;
}

const char *auth_user_name(const struct auth_user *u)
{
	return u->name;
}

int auth_unrestricted(const struct auth_user *u)
{
	return u->all;
}

static int prefixes_match(const struct prefixes *p, const char *q, size_t qlen)
{
	if (p->any)
		return 1;
	for (unsigned i = 0; i < p->n; i++)
		if (p->len[i] <= qlen && !memcmp(p->p[i], q, p->len[i]))
			return 1;
	return 0;
}

int auth_may(const struct auth_user *u, enum auth_right r, const char *q, size_t qlen)
{
	if (u->all)
		return 1;
	switch (r) {
	case AUTH_READ:
		return prefixes_match(&u->read, q, qlen);
	case AUTH_WRITE:
		return prefixes_match(&u->write, q, qlen);
	default:
		return (u->flags & r) != 0;
	}
}

/* Reads the users of the auth file's text (len bytes) into a.  0 or an
 * error with err set. */
static int read_users(struct auth *a, const char *text, size_t len, const char *path, char *err,
		      size_t errlen)
{
	const char *p = text, *end = text + len;
	unsigned cap = 0;
	int lineno = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *line = p, *colon, *pass;
		size_t llen = (size_t)((nl ? nl : end) - p), nlen, plen;
		struct auth_user *u;

		p = nl ? nl + 1 : end;
		lineno++;
		while (llen && line[llen - 1] == '\r')
			llen--;
		if (!llen || line[0] == '#')
			continue;
		if (llen > AUTH_NAME_MAX + AUTH_PASS_MAX + 1) {
			snprintf(err, errlen, "%s:%d: line too long", path, lineno);
			return TERN_EINVAL;
		}
		/* fgets would stop a password at a NUL byte and check a
		 * shorter one than written: no text holds one */
		if (memchr(line, '\0', llen)) {
			snprintf(err, errlen, "%s:%d: NUL byte in the line (the file must be text)",
				 path, lineno);
			return TERN_EINVAL;
		}
		colon = memchr(line, ':', llen);
		if (!colon) {
			snprintf(err, errlen, "%s:%d: expected user:password", path, lineno);
			return TERN_EINVAL;
		}
		nlen = (size_t)(colon - line);
		pass = colon + 1;
		plen = llen - nlen - 1;
		if (!auth_user_name_valid(line, nlen) || (nlen == 1 && line[0] == '*')) {
			snprintf(err, errlen, "%s:%d: bad user name", path, lineno);
			return TERN_EINVAL;
		}
		if (!plen || plen > AUTH_PASS_MAX) {
			snprintf(err, errlen, "%s:%d: the password must be 1 to %d bytes", path,
				 lineno, AUTH_PASS_MAX);
			return TERN_EINVAL;
		}
		if (auth_find(a, line, nlen)) {
			snprintf(err, errlen, "%s:%d: user %.*s given twice", path, lineno,
				 (int)nlen, line);
			return TERN_EINVAL;
		}
		if (a->n == cap) {
			unsigned ncap = cap ? cap * 2 : 8;
			struct auth_user *n = realloc(a->users, ncap * sizeof(*n));

			if (!n)
				goto nomem;
			a->users = n;
			cap = ncap;
		}
		u = &a->users[a->n];
		memset(u, 0, sizeof(*u));
		u->name = strndup(line, nlen);
		if (!u->name)
			goto nomem;
		u->nlen = nlen;
		if (mac(a, line, nlen, u->name_mac) || mac(a, pass, plen, u->pass_mac)) {
			free(u->name);
			snprintf(err, errlen, "%s: cannot compute password digests", path);
			return TERN_ENOMEM;
		}
		u->all = 1; /* until a rule says otherwise */
		a->n++;
	}
	if (!a->n) {
		snprintf(err, errlen, "%s: no user (expected user:password lines)", path);
		return TERN_EINVAL;
	}
	return 0;
nomem:
	snprintf(err, errlen, "%s: out of memory", path);
	return TERN_ENOMEM;
}

/* Gives u the rights of rule (a user's own, or the default "*"). */
static int apply_rule(struct auth_user *u, const char *rights, char *err, size_t errlen)
{
	const char *why;

	u->all = 0;
	why = rights_parse(rights, u);
	if (why) {
		snprintf(err, errlen, "[access] %s: %s", u->name, why);
		return TERN_EINVAL;
	}
	return 0;
}

int auth_parse(const char *text, size_t len, const char *path, const struct access_rule *rules,
	       struct auth **out, char *err, size_t errlen)
{
	struct auth *a = calloc(1, sizeof(*a));
	const struct access_rule *r, *dflt = NULL;
	int rc;

	*out = NULL;
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return TERN_ENOMEM;
	}
	if (RAND_bytes(a->key, sizeof(a->key)) != 1 ||
	    RAND_bytes(a->nobody, sizeof(a->nobody)) != 1) {
		snprintf(err, errlen, "%s: no random bytes for the password digests", path);
		rc = TERN_ESYS;
		goto fail;
	}
	rc = read_users(a, text, len, path, err, errlen);
	if (rc)
		goto fail;
	for (r = rules; r; r = r->next) {
		struct auth_user *u;

		if (!strcmp(r->user, "*")) {
			dflt = r;
			continue;
		}
		u = (struct auth_user *)auth_find(a, r->user, strlen(r->user));
		if (!u) {
			snprintf(err, errlen, "[access] %s: no such user in %s", r->user, path);
			rc = TERN_EINVAL;
			goto fail;
		}
		if ((rc = apply_rule(u, r->rights, err, errlen)) != 0)
			goto fail;
	}
	if (dflt) {
		for (unsigned i = 0; i < a->n; i++) {
			int own = 0;

			for (r = rules; r && !own; r = r->next)
				own = !strcmp(r->user, a->users[i].name);
			if (!own && (rc = apply_rule(&a->users[i], dflt->rights, err, errlen)) != 0)
				goto fail;
		}
	}
	*out = a;
	return 0;
fail:
	auth_free(a);
	return rc;
}
