/*
 * auth.c: the auth file's users and the [access] rights (contracts and the
 * rights' words in auth.h).
 */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../lib/log.h"

/* Queue-name prefixes a right covers. */
struct prefixes {
	int any;          /* "*": every queue */
	char **p;
	size_t *len;
	unsigned n;
};

struct auth_user {
	char *name, *pass;
	size_t nlen, plen;
	unsigned flags;   /* AUTH_STATS, AUTH_ADMIN */
	struct prefixes read, write;
	int all;          /* every right on every queue */
};

struct auth {
	struct auth_user *users;
	unsigned n;
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
	if (u->pass) {
		/* the password does not outlive its use in freed memory */
		memset(u->pass, 0, u->plen);
		free(u->pass);
	}
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
	free(a);
}

unsigned auth_count(const struct auth *a)
{
	return a->n;
}

const struct auth_user *auth_find(const struct auth *a, const char *name)
{
	size_t len = strlen(name);

	for (unsigned i = 0; i < a->n; i++)
		if (a->users[i].nlen == len && !memcmp(a->users[i].name, name, len))
			return &a->users[i];
	return NULL;
}

/* Compares n bytes without stopping at the first difference. */
static int same_bytes(const char *a, const char *b, size_t n)
{
	unsigned char d = 0;

	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return d == 0;
}

const struct auth_user *auth_check(const struct auth *a, const char *user, size_t ulen,
				   const char *pass, size_t plen)
{
	for (unsigned i = 0; i < a->n; i++) {
		const struct auth_user *u = &a->users[i];

		if (u->nlen == ulen && !memcmp(u->name, user, ulen))
			return u->plen == plen && same_bytes(u->pass, pass, plen) ? u : NULL;
	}
	return NULL;
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

/* Reads the users of f into a.  0 or an error with err set. */
static int read_users(struct auth *a, FILE *f, const char *path, char *err, size_t errlen)
{
	char line[AUTH_NAME_MAX + AUTH_PASS_MAX + 8];
	unsigned cap = 0;
	int lineno = 0;

	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);
		char *colon;
		struct auth_user *u;

		lineno++;
		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			snprintf(err, errlen, "%s:%d: line too long", path, lineno);
			return TERN_EINVAL;
		}
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (!len || line[0] == '#')
			continue;
		colon = strchr(line, ':');
		if (!colon) {
			snprintf(err, errlen, "%s:%d: expected user:password", path, lineno);
			return TERN_EINVAL;
		}
		if (!auth_user_name_valid(line, (size_t)(colon - line)) ||
		    (colon - line == 1 && line[0] == '*')) {
			snprintf(err, errlen, "%s:%d: bad user name", path, lineno);
			return TERN_EINVAL;
		}
		if (!colon[1] || strlen(colon + 1) > AUTH_PASS_MAX) {
			snprintf(err, errlen, "%s:%d: the password must be 1 to %d bytes", path,
				 lineno, AUTH_PASS_MAX);
			return TERN_EINVAL;
		}
		*colon = '\0';
		if (auth_find(a, line)) {
			snprintf(err, errlen, "%s:%d: user %s given twice", path, lineno, line);
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
		u->name = strdup(line);
		u->pass = strdup(colon + 1);
		if (!u->name || !u->pass) {
			user_free(u);
			goto nomem;
		}
		u->nlen = strlen(u->name);
		u->plen = strlen(u->pass);
		u->all = 1; /* until a rule says otherwise */
		a->n++;
	}
	memset(line, 0, sizeof(line));
	if (ferror(f)) {
		snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
		return TERN_ESYS;
	}
	if (!a->n) {
		snprintf(err, errlen, "%s: no user (expected user:password lines)", path);
		return TERN_EINVAL;
	}
	return 0;
nomem:
	memset(line, 0, sizeof(line));
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

int auth_load(const char *path, const struct access_rule *rules, struct auth **out,
	      char *err, size_t errlen)
{
	struct auth *a = calloc(1, sizeof(*a));
	const struct access_rule *r, *dflt = NULL;
	struct stat st;
	FILE *f;
	int rc;

	*out = NULL;
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return TERN_ENOMEM;
	}
	f = fopen(path, "re");
	if (!f) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		auth_free(a);
		return TERN_ESYS;
	}
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 0044))
		log_warn("auth file %s can be read by other users (mode %04o): chmod 600 it",
			 path, (unsigned)(st.st_mode & 0777));
	rc = read_users(a, f, path, err, errlen);
	fclose(f);
	if (rc)
		goto fail;
	for (r = rules; r; r = r->next) {
		struct auth_user *u;

		if (!strcmp(r->user, "*")) {
			dflt = r;
			continue;
		}
		u = (struct auth_user *)auth_find(a, r->user);
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
