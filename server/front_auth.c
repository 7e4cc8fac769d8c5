/*
 * front_auth.c: authentication on the wire (the users and their rights:
 * auth.h).  With an auth file, a connection starts unauthenticated:
 *
 * Text and meta: memcached's handshake (memcached -Y), the first request
 * "set <any key> <flags> <exptime> <bytes> [noreply]" with the data block
 * "<user> <password>": the user is the block up to its first space and
 * the password the rest, spaces included (as the auth file reads a
 * password); when that is no user's, memcached's reading is tried too
 * (words separated by spaces: the first the user, the second the
 * password, more ignored).  Answers, as memcached's, whatever noreply
 * says:
 *   STORED                                        authenticated (nothing
 *                                                 is enqueued)
 *   CLIENT_ERROR authentication failure           wrong user or password
 *   CLIENT_ERROR bad authentication token format  fewer than two words, or
 *                                                 a block longer than any
 *                                                 credentials (then the
 *                                                 connection is closed)
 *   CLIENT_ERROR bad command line termination     the block does not end
 *                                                 in CRLF
 *   CLIENT_ERROR unauthenticated                  any other request
 * A failed attempt leaves the connection open for another, up to
 * auth_max_failures, and is answered late (guard_auth_failed: each
 * failure of a peer later than the one before).
 *
 * Once logged in, the handshake is never stored as a message: a text set
 * to the key the connection logged in with is the handshake again (its
 * block read and answered as above), and a text or meta set whose block
 * is the credentials of a user of the auth file is a login as that user,
 * answered STORED (meta: as its set would be) with nothing enqueued.  A
 * failed login again leaves the connection unauthenticated: it does not
 * keep the identity it had.
 *
 * Binary: SASL with the PLAIN mechanism (RFC 4616), as memcached's -S
 * offers it: SASL_LIST_MECHS answers "PLAIN", SASL_AUTH with key "PLAIN"
 * and value "[authzid]\0user\0password" answers "Authenticated", or status
 * 0x20 "Auth failure."; before that, every request but VERSION and the
 * SASL ones gets status 0x20 "unauthenticated" (its value is skipped).
 * Without an auth file the SASL opcodes are unknown commands, as in
 * memcached without SASL.  A failed SASL_AUTH after a successful one
 * leaves the connection unauthenticated.
 *
 * Credentials never reach the log: a failure names the user only when
 * the auth file has it, and the buffers that held a password are wiped.
 */
#include "auth.h"
#include "conn.h"
#include "front.h"
#include "guard.h"
#include "state.h"

#include <stdlib.h>
#include <string.h>

#include "../lib/log.h"

/* The handshake's replies (memcached's words). */
#define AUTH_REPLIES(X)                                                   \
	X(OK, "STORED\r\n")                                               \
	X(UNAUTH, "CLIENT_ERROR unauthenticated\r\n")                     \
	X(FAILURE, "CLIENT_ERROR authentication failure\r\n")             \
	X(FORMAT, "CLIENT_ERROR bad authentication token format\r\n")     \
	X(TERMINATION, "CLIENT_ERROR bad command line termination\r\n")

enum auth_reply {
#define AUTH_REPLY_ENUM(e, s) AUTH_R_##e,
	AUTH_REPLIES(AUTH_REPLY_ENUM)
#undef AUTH_REPLY_ENUM
};

static const struct {
	const char *s;
	size_t len;
} auth_replies[] = {
#define AUTH_REPLY_ROW(e, s) { s, sizeof(s) - 1 },
	AUTH_REPLIES(AUTH_REPLY_ROW)
#undef AUTH_REPLY_ROW
};

/* The longest data block that can hold credentials: "user password"
 * with room for a few more words (memcached ignores them). */
#define AUTH_BODY_MAX (AUTH_NAME_MAX + AUTH_PASS_MAX + 64)

static void put(struct conn *c, enum auth_reply r)
{
	conn_add(c, auth_replies[r].s, auth_replies[r].len);
}

/* Makes c act as user u from now on (NULL: back to unauthenticated, and
 * so in a handshake again). */
static void become(struct conn *c, const struct auth_user *u)
{
	c->user = u;
	c->authed = u != NULL;
	c->acl = u && !auth_unrestricted(u) ? u : NULL;
	if (!u && c->srv->auth)
		conn_handshake_begin(c);
}

/* Counts and logs the outcome u of an attempt to log in as user (ulen
 * bytes) and returns u. */
static const struct auth_user *check(struct conn *c, const char *user, size_t ulen,
				     const struct auth_user *u, const char *how)
{
	struct server *s = c->srv;
	char name[AUTH_NAME_MAX + 1], who[80];

	s->stats.auth_cmds++;
	if (u) {
		log_info("connection %u authenticated as %s (%s)", c->id, auth_user_name(u), how);
		return u;
	}
	s->stats.auth_errors++;
	/* the name only when it is a user's: a password typed where the name
	 * goes must not reach the log */
	if (ulen <= AUTH_NAME_MAX && auth_find(s->auth, user, ulen)) {
		memcpy(name, user, ulen);
		name[ulen] = '\0';
		log_warn("authentication failed for user %s (%s) from %s", name, how,
			 conn_peer_name(c, who, sizeof(who)));
		return NULL;
	}
	log_warn("authentication failed: unknown user (%s) from %s", how,
		 conn_peer_name(c, who, sizeof(who)));
	return NULL;
}

/* Splits s (len bytes) into words separated by runs of spaces: up to max
 * of them into w/wl; returns how many there are. */
static size_t words(const char *s, size_t len, const char **w, size_t *wl, size_t max,
		    char sep2)
{
	size_t n = 0, i = 0;

	while (i < len) {
		size_t start;

		while (i < len && (s[i] == ' ' || s[i] == sep2))
			i++;
		if (i == len)
			break;
		start = i;
		while (i < len && s[i] != ' ' && s[i] != sep2)
			i++;
		if (n < max) {
			w[n] = s + start;
			wl[n] = i - start;
		}
		n++;
	}
	return n;
}

/* Reads the next bytes (the handshake's block, its CRLF after it) as
 * credentials: front_auth_body answers them. */
static void read_credentials(struct conn *c, uint64_t bytes)
{
	struct item *body;

	if (bytes > AUTH_BODY_MAX) {
		/* no credentials are that long: answer rather than read it */
		put(c, AUTH_R_FORMAT);
		c->state = CONN_CLOSING;
		return;
	}
	body = item_new((uint32_t)bytes);
	if (!body) {
		conn_add(c, "SERVER_ERROR out of memory\r\n", 28);
		conn_swallow(c, bytes + 2);
		return;
	}
	c->rq.auth = 1;
	conn_read_body(c, body, 2);
}

/* Remembers the key of c's handshake (key, len bytes): a set to it later
 * is the handshake again. */
static void remember_key(struct conn *c, const char *key, size_t len)
{
	char *k;

	if (c->auth_key_len == len && !memcmp(c->auth_key, key, len))
		return;
	k = len <= PROTO_LINE_MAX ? malloc(len) : NULL;
	free(c->auth_key);
	c->auth_key = k;
	c->auth_key_len = k ? (uint16_t)len : 0;
	if (k)
		memcpy(k, key, len);
}

void front_auth_line(struct conn *c, const char *line, size_t len)
{
	const char *w[5];
	size_t wl[5], n = words(line, len, w, wl, 5, '\t');
	uint64_t bytes;

	if (n < 5 || wl[0] != 3 || memcmp(w[0], "set", 3) != 0 ||
	    proto_parse_uint(w[4], wl[4], UINT64_MAX, &bytes)) {
		put(c, AUTH_R_UNAUTH);
		return;
	}
	remember_key(c, w[1], wl[1]);
	read_credentials(c, bytes);
}

int front_auth_set(struct conn *c)
{
	const struct proto_key *k = &c->rq.key;

	if (c->rq.x.fe->id != FRONT_TEXT || !c->auth_key || c->auth_key_len != k->raw_len ||
	    memcmp(c->auth_key, k->raw, k->raw_len) != 0)
		return 0;
	read_credentials(c, c->rq.bytes);
	return 1;
}

/* The user whose credentials the data block b (len bytes) holds, read as
 * the top of this file says, or NULL; counted and logged as one attempt.
 * *format is set when the block has fewer than two words. */
static const struct auth_user *text_credentials(struct conn *c, const char *b, size_t len,
						int *format)
{
	const char *sp = memchr(b, ' ', len), *w[2];
	size_t wl[2];
	const struct auth_user *u;

	*format = words(b, len, w, wl, 2, ' ') < 2; /* memcached splits on spaces only */
	if (*format)
		return NULL;
	u = sp && sp > b ? auth_check(c->srv->auth, b, (size_t)(sp - b), sp + 1,
				      len - (size_t)(sp - b) - 1) : NULL;
	if (!u && (w[0] != b || w[1] != sp + 1 || w[1] + wl[1] != b + len))
		/* not the same split: memcached's words */
		u = auth_check(c->srv->auth, w[0], wl[0], w[1], wl[1]);
	return check(c, w[0], wl[0], u, "text");
}

void front_auth_body(struct conn *c, struct item *it)
{
	const struct auth_user *u;
	int format;

	c->rq.auth = 0;
	if (it->data[it->len] != '\r' || it->data[it->len + 1] != '\n') {
		put(c, AUTH_R_TERMINATION);
		become(c, NULL);
	} else if ((u = text_credentials(c, it->data, it->len, &format)) != NULL) {
		become(c, u);
		put(c, AUTH_R_OK);
	} else {
		put(c, format ? AUTH_R_FORMAT : AUTH_R_FAILURE);
		become(c, NULL);
		if (!format)
			guard_auth_failed(c);
	}
	explicit_bzero(it->data, it->len + 2);
	item_unref(it);
	conn_wipe_input(c);
}

int front_auth_set_body(struct conn *c, struct item *it)
{
	const char *sp = memchr(it->data, ' ', it->len);
	const struct auth_user *u;

	/* most sets end here: a block that does not start with a user's
	 * name and a space is a message */
	if (it->len > AUTH_BODY_MAX || !sp ||
	    !auth_find(c->srv->auth, it->data, (size_t)(sp - it->data)))
		return 0;
	u = auth_check(c->srv->auth, it->data, (size_t)(sp - it->data), sp + 1,
		       it->len - (size_t)(sp - it->data) - 1);
	if (!u)
		return 0;
	check(c, it->data, (size_t)(sp - it->data), u, c->rq.x.fe->name);
	become(c, u);
	if (c->rq.x.fe->id == FRONT_TEXT)
		put(c, AUTH_R_OK); /* as the handshake: whatever noreply says */
	else
		c->rq.x.fe->reply(c, conn_out(c), &c->rq.x, OP_STORED, NULL, 0);
	explicit_bzero(it->data, it->len + 2);
	item_unref(it);
	conn_wipe_input(c);
	return 1;
}

/* SASL_AUTH with PLAIN: "[authzid]\0user\0password". */
static const struct auth_user *sasl_plain(struct conn *c, const char *v, size_t len)
{
	const struct auth_user *u;
	char who[80];
	const char *z1 = memchr(v, '\0', len), *z2, *user, *pass;
	size_t ulen;

	if (!z1 || !(z2 = memchr(z1 + 1, '\0', len - (size_t)(z1 + 1 - v)))) {
		c->srv->stats.auth_cmds++;
		c->srv->stats.auth_errors++;
		log_warn("authentication failed: malformed SASL PLAIN message (binary) from %s",
			 conn_peer_name(c, who, sizeof(who)));
		return NULL;
	}
	user = z1 + 1;
	ulen = (size_t)(z2 - user);
	pass = z2 + 1;
	/* an authorization identity, when given, must be the user itself */
	if (z1 != v && ((size_t)(z1 - v) != ulen || memcmp(v, user, ulen) != 0)) {
		c->srv->stats.auth_cmds++;
		c->srv->stats.auth_errors++;
		log_warn("authentication failed: SASL authorization identity differs (binary) "
			 "from %s", conn_peer_name(c, who, sizeof(who)));
		return NULL;
	}
	u = auth_check(c->srv->auth, user, ulen, pass, len - (size_t)(pass - v));
	return check(c, user, ulen, u, "binary SASL PLAIN");
}

/* A binary response with a body of text (no extras, no key). */
static void bin_text(struct conn *c, uint16_t status, const char *text)
{
	unsigned char hdr[BIN_HEADER_LEN];
	size_t len = strlen(text);

	bin_header_encode(hdr, c->rq.x.opcode, status, 0, 0, (uint32_t)len, c->rq.x.opaque, 0);
	conn_add(c, hdr, sizeof(hdr));
	conn_add(c, text, len);
}

int front_auth_binary(struct conn *c)
{
	struct bin_req *b = &c->bin;
	const struct auth_user *u;
	char who[80];

	switch (b->op->kind) {
	case BIN_K_SASL_LIST:
	case BIN_K_SASL_AUTH:
	case BIN_K_SASL_STEP:
		if (!c->srv->auth) {
			/* memcached without SASL knows none of them */
			bin_text(c, BIN_STATUS_UNKNOWN_COMMAND,
				 bin_status_text(BIN_STATUS_UNKNOWN_COMMAND));
			return 1;
		}
		if (b->op->kind == BIN_K_SASL_LIST) {
			bin_text(c, BIN_STATUS_SUCCESS, "PLAIN");
			return 1;
		}
		if (b->op->kind == BIN_K_SASL_STEP || b->keylen != 5 ||
		    memcmp(b->key, "PLAIN", 5) != 0) {
			/* PLAIN is one step; no other mechanism is offered */
			c->srv->stats.auth_cmds++;
			c->srv->stats.auth_errors++;
			log_warn("authentication failed: SASL mechanism or step not offered "
				 "(binary) from %s", conn_peer_name(c, who, sizeof(who)));
			u = NULL;
		} else {
			u = sasl_plain(c, b->value, b->value_len);
		}
		/* the message held the password: not left in the line buffer */
		memset((char *)b->value, 0, b->value_len);
		if (!u) {
			become(c, NULL); /* not the identity it had before */
			bin_text(c, BIN_STATUS_AUTH_ERROR, bin_status_text(BIN_STATUS_AUTH_ERROR));
			guard_auth_failed(c);
			return 1;
		}
		become(c, u);
		bin_text(c, BIN_STATUS_SUCCESS, "Authenticated");
		return 1;
	case BIN_K_VERSION:
		return 0; /* memcached answers it before authentication too */
	default:
		if (c->authed)
			return 0;
		bin_text(c, BIN_STATUS_AUTH_ERROR, "unauthenticated");
		conn_swallow(c, b->vlen);
		return 1;
	}
}

void front_auth_rebind(struct server *s)
{
	for (struct conn *c = s->conns; c; c = c->next) {
		const struct auth_user *u = NULL;

		if (!s->auth) {
			become(c, NULL);
			c->authed = 1;
			continue;
		}
		if (c->user)
			u = auth_find(s->auth, auth_user_name(c->user),
				      strlen(auth_user_name(c->user)));
		if (u) {
			become(c, u);
			continue;
		}
		if (c->authed || c->user) {
			/* its user is gone, or it never authenticated and now
			 * must: it may not go on */
			log_info("connection %u closed: %s", c->id,
				 c->user ? "its user was removed" : "authentication is now required");
			become(c, NULL);
			c->dead = 1;
			conn_resume(c);
		}
	}
}
