/*
 * tclient.c: connect, request formatting, incremental reply parsing, and a
 * blocking pipelined connection.  See tclient.h for the contracts.
 */
#include "tclient.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

const char *tc_strerror(int err)
{
	if (err == TC_ESYS)
		return strerror(errno);
	switch (err) {
#define TC_ERR_CASE(name, val, text) \
	case name:                   \
		return text;
		TC_ERRORS(TC_ERR_CASE)
#undef TC_ERR_CASE
	}
	return err >= 0 ? "success" : "unknown error";
}

static const char *const proto_names[] = { "memcache", "redis", "beanstalk" };

int tc_proto_parse(const char *name)
{
	for (unsigned i = 0; i < sizeof proto_names / sizeof proto_names[0]; i++)
		if (strcmp(name, proto_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *tc_proto_name(enum tc_proto p)
{
	return (unsigned)p < 3 ? proto_names[p] : "?";
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline (monotonic ms).  Returns 1 when
 * ready, TC_ETIMEDOUT, or TC_ESYS. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - mono_ms();
		struct pollfd pfd = { .fd = fd, .events = events };
		int n;

		if (left <= 0)
			return TC_ETIMEDOUT;
		n = poll(&pfd, 1, left > 1000000 ? 1000000 : (int)left);
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return TC_ESYS;
	}
}

int tc_connect(const char *host, int port, int timeout_ms, int *fd)
{
	/* No AI_ADDRCONFIG: it hides ::1 on hosts whose only IPv6 address is
	 * loopback, which is exactly where tests and benchmarks run. */
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res = NULL, *ai;
	char portstr[16];
	int64_t deadline = mono_ms() + timeout_ms;
	int rc = TC_ERESOLVE, s = -1, saved = 0;

	if (port <= 0 || port > 65535 || !host)
		return TC_EINVAL;
	snprintf(portstr, sizeof portstr, "%d", port);
	if (getaddrinfo(host, portstr, &hints, &res) != 0)
		return TC_ERESOLVE;
	for (ai = res; ai; ai = ai->ai_next) {
		int one = 1, err = 0;
		socklen_t elen = sizeof err;

		s = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			   ai->ai_protocol);
		if (s < 0) {
			rc = TC_ESYS;
			saved = errno;
			continue;
		}
		if (connect(s, ai->ai_addr, ai->ai_addrlen) < 0) {
			if (errno != EINPROGRESS) {
				rc = TC_ESYS;
				goto next;
			}
			rc = wait_fd(s, POLLOUT, deadline);
			if (rc < 0)
				goto next;
			if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) < 0) {
				rc = TC_ESYS;
				goto next;
			}
			if (err) {
				errno = err;
				rc = TC_ESYS;
				goto next;
			}
		}
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		*fd = s;
		freeaddrinfo(res);
		return 0;
next:
		saved = errno;
		close(s);
		s = -1;
		if (rc == TC_ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	errno = saved;
	return rc;
}

/* ---- formatting ----------------------------------------------------------- */

size_t tc_fmt_u64(char *dst, uint64_t v)
{
	char tmp[20];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (i = 0; i < n; i++)
		dst[i] = tmp[n - 1 - i];
	return n;
}

static size_t put_str(char *dst, const char *s, size_t n)
{
	memcpy(dst, s, n);
	return n;
}
#define PUT_LIT(dst, lit) put_str((dst), (lit), sizeof(lit) - 1)

size_t tc_fmt_put_head(enum tc_proto p, char *dst, const char *q, size_t qlen,
		       uint32_t flags, size_t bodylen)
{
	char *d = dst;

	switch (p) {
	case TC_MEMCACHE:
		d += PUT_LIT(d, "set ");
		d += put_str(d, q, qlen);
		*d++ = ' ';
		d += tc_fmt_u64(d, flags);
		d += PUT_LIT(d, " 0 ");
		d += tc_fmt_u64(d, bodylen);
		break;
	case TC_REDIS:
		d += PUT_LIT(d, "*3\r\n$5\r\nLPUSH\r\n$");
		d += tc_fmt_u64(d, qlen);
		d += PUT_LIT(d, "\r\n");
		d += put_str(d, q, qlen);
		d += PUT_LIT(d, "\r\n$");
		d += tc_fmt_u64(d, bodylen);
		break;
	case TC_BEANSTALK:
		/* priority 1024, no delay, TTR 120 s (longer than any run's
		 * reserve-to-delete gap). */
		d += PUT_LIT(d, "put 1024 0 120 ");
		d += tc_fmt_u64(d, bodylen);
		break;
	}
	d += PUT_LIT(d, "\r\n");
	return (size_t)(d - dst);
}

size_t tc_fmt_get(enum tc_proto p, char *dst, const char *q, size_t qlen,
		  const char *opts, int wait_ms)
{
	char *d = dst;

	switch (p) {
	case TC_MEMCACHE:
		d += PUT_LIT(d, "get ");
		d += put_str(d, q, qlen);
		if (opts)
			d += put_str(d, opts, strlen(opts));
		break;
	case TC_REDIS:
		if (wait_ms > 0) {
			/* Redis >= 6 takes a fractional timeout in seconds. */
			char t[32];
			int tn = snprintf(t, sizeof t, "%d.%03d", wait_ms / 1000,
					  wait_ms % 1000);

			d += PUT_LIT(d, "*3\r\n$5\r\nBRPOP\r\n$");
			d += tc_fmt_u64(d, qlen);
			d += PUT_LIT(d, "\r\n");
			d += put_str(d, q, qlen);
			d += PUT_LIT(d, "\r\n$");
			d += tc_fmt_u64(d, (uint64_t)tn);
			d += PUT_LIT(d, "\r\n");
			d += put_str(d, t, (size_t)tn);
		} else {
			d += PUT_LIT(d, "*2\r\n$4\r\nRPOP\r\n$");
			d += tc_fmt_u64(d, qlen);
			d += PUT_LIT(d, "\r\n");
			d += put_str(d, q, qlen);
		}
		break;
	case TC_BEANSTALK:
		d += PUT_LIT(d, "reserve-with-timeout ");
		d += tc_fmt_u64(d, wait_ms > 0 ? (uint64_t)(wait_ms + 999) / 1000 : 0);
		break;
	}
	d += PUT_LIT(d, "\r\n");
	return (size_t)(d - dst);
}

size_t tc_fmt_delete_job(char *dst, uint64_t id)
{
	char *d = dst;

	d += PUT_LIT(d, "delete ");
	d += tc_fmt_u64(d, id);
	d += PUT_LIT(d, "\r\n");
	return (size_t)(d - dst);
}

/* ---- parsing -------------------------------------------------------------- */

/* Parses an unsigned decimal at s[0..n); returns 0 and *v, or -1. */
static int parse_u64(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;

	if (n == 0 || n > 19)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(s[i] - '0');
	}
	*v = x;
	return 0;
}

/* Splits line[0..n) on spaces: up to max tokens, returns the count. */
static int split(const char *line, size_t n, const char **tok, size_t *tlen, int max)
{
	int k = 0;
	size_t i = 0;

	while (i < n && k < max) {
		while (i < n && line[i] == ' ')
			i++;
		if (i == n)
			break;
		tok[k] = line + i;
		while (i < n && line[i] != ' ')
			i++;
		tlen[k] = (size_t)(line + i - tok[k]);
		k++;
	}
	return k;
}

static int starts(const char *line, size_t n, const char *word)
{
	size_t w = strlen(word);

	return n >= w && memcmp(line, word, w) == 0 && (n == w || line[w] == ' ');
}

/* Finds the first line; returns its length without CRLF, or -1 when no
 * newline yet (-2 when the line is too long to ever be valid). */
static ssize_t find_line(const char *buf, size_t len, size_t *next)
{
	const char *nl = memchr(buf, '\n', len < TC_LINE_MAX ? len : TC_LINE_MAX);
	size_t n;

	if (!nl)
		return len >= TC_LINE_MAX ? -2 : -1;
	n = (size_t)(nl - buf);
	*next = n + 1;
	if (n > 0 && buf[n - 1] == '\r')
		n--;
	return (ssize_t)n;
}

/* Needs `total` bytes for a body of n bytes followed by the trailer. */
static ssize_t need_more(size_t total, size_t *need)
{
	if (need)
		*need = total;
	return 0;
}

static ssize_t parse_memcache(const char *buf, size_t len, struct tc_reply *r,
			      size_t *need)
{
	size_t next;
	ssize_t n = find_line(buf, len, &next);
	const char *tok[6];
	size_t tlen[6];
	uint64_t flags, bytes, cas = 0;
	size_t total;
	int ntok;

	if (n == -2)
		return TC_EPROTO;
	if (n < 0)
		return need_more(len + 1, need);
	r->line = buf;
	r->line_len = (size_t)n;
	if (starts(buf, (size_t)n, "VALUE")) {
		/* VALUE key flags bytes [cas] */
		ntok = split(buf, (size_t)n, tok, tlen, 6);
		if (ntok < 4 || ntok > 5 ||
		    parse_u64(tok[2], tlen[2], &flags) < 0 || flags > UINT32_MAX ||
		    parse_u64(tok[3], tlen[3], &bytes) < 0 || bytes > TC_VALUE_MAX ||
		    (ntok == 5 && parse_u64(tok[4], tlen[4], &cas) < 0))
			return TC_EPROTO;
		total = next + bytes + 2 + 5;
		if (len < total)
			return need_more(total, need);
		if (memcmp(buf + next + bytes, "\r\nEND\r\n", 7) != 0)
			return TC_EPROTO;
		r->type = TC_R_VALUE;
		r->key = tok[1];
		r->key_len = tlen[1];
		r->flags = (uint32_t)flags;
		r->id = cas;
		r->data = buf + next;
		r->len = bytes;
		return (ssize_t)total;
	}
	if (n == 6 && memcmp(buf, "STORED", 6) == 0)
		r->type = TC_R_STORED;
	else if (n == 3 && memcmp(buf, "END", 3) == 0)
		r->type = TC_R_END;
	else if (n == 10 && memcmp(buf, "NOT_STORED", 10) == 0)
		r->type = TC_R_NOT_STORED;
	else if (n == 7 && memcmp(buf, "DELETED", 7) == 0)
		r->type = TC_R_DELETED;
	else if (n == 9 && memcmp(buf, "NOT_FOUND", 9) == 0)
		r->type = TC_R_NOT_FOUND;
	else if ((n == 2 && memcmp(buf, "OK", 2) == 0) ||
		 starts(buf, (size_t)n, "VERSION"))
		r->type = TC_R_OK;
	else if (n == 5 && memcmp(buf, "ERROR", 5) == 0)
		r->type = TC_R_ERROR;
	else if (starts(buf, (size_t)n, "CLIENT_ERROR"))
		r->type = TC_R_CLIENT_ERROR;
	else if (starts(buf, (size_t)n, "SERVER_ERROR"))
		r->type = TC_R_SERVER_ERROR;
	else
		r->type = TC_R_OTHER;
	return (ssize_t)next;
}

/* One RESP bulk string at buf[0..len) ("$n\r\n...\r\n" or "$-1\r\n").
 * Returns bytes used, 0 (need more) or TC_EPROTO; *data NULL for nil. */
static ssize_t resp_bulk(const char *buf, size_t len, const char **data,
			 size_t *dlen, size_t *need)
{
	size_t next;
	ssize_t n = find_line(buf, len, &next);
	uint64_t bytes;

	if (n == -2)
		return TC_EPROTO;
	if (n < 0)
		return need_more(len + 1, need);
	if (n < 2 || buf[0] != '$')
		return TC_EPROTO;
	if (n == 3 && memcmp(buf, "$-1", 3) == 0) {
		*data = NULL;
		*dlen = 0;
		return (ssize_t)next;
	}
	if (parse_u64(buf + 1, (size_t)n - 1, &bytes) < 0 || bytes > TC_VALUE_MAX)
		return TC_EPROTO;
	if (len < next + bytes + 2)
		return need_more(next + bytes + 2, need);
	if (memcmp(buf + next + bytes, "\r\n", 2) != 0)
		return TC_EPROTO;
	*data = buf + next;
	*dlen = bytes;
	return (ssize_t)(next + bytes + 2);
}

static ssize_t parse_redis(const char *buf, size_t len, struct tc_reply *r,
			   size_t *need)
{
	size_t next;
	ssize_t n = find_line(buf, len, &next), a, b;
	uint64_t v;

	if (n == -2)
		return TC_EPROTO;
	if (n < 0)
		return need_more(len + 1, need);
	if (n < 1)
		return TC_EPROTO;
	r->line = buf;
	r->line_len = (size_t)n;
	switch (buf[0]) {
	case '+':
		r->type = TC_R_OK;
		return (ssize_t)next;
	case '-':
		r->type = TC_R_ERROR;
		return (ssize_t)next;
	case ':':
		/* LPUSH answers with the new length: the message is stored. */
		if (buf[1] == '-' || parse_u64(buf + 1, (size_t)n - 1, &v) < 0)
			return TC_EPROTO;
		r->type = TC_R_STORED;
		r->id = v;
		return (ssize_t)next;
	case '_': /* RESP3 null */
		r->type = TC_R_END;
		return (ssize_t)next;
	case '$':
		a = resp_bulk(buf, len, &r->data, &r->len, need);
		if (a <= 0)
			return a;
		r->type = r->data ? TC_R_VALUE : TC_R_END;
		return a;
	case '*':
		if (n == 3 && memcmp(buf, "*-1", 3) == 0) {
			r->type = TC_R_END;
			return (ssize_t)next;
		}
		/* BRPOP: [list name, value] */
		if (n != 2 || buf[1] != '2')
			return TC_EPROTO;
		a = resp_bulk(buf + next, len - next, &r->key, &r->key_len, need);
		if (a <= 0) {
			if (a == 0 && need)
				*need += next;
			return a;
		}
		b = resp_bulk(buf + next + (size_t)a, len - next - (size_t)a, &r->data,
			      &r->len, need);
		if (b <= 0) {
			if (b == 0 && need)
				*need += next + (size_t)a;
			return b;
		}
		if (!r->key || !r->data)
			return TC_EPROTO;
		r->type = TC_R_VALUE;
		return (ssize_t)(next + (size_t)a + (size_t)b);
	}
	return TC_EPROTO;
}

static ssize_t parse_beanstalk(const char *buf, size_t len, struct tc_reply *r,
			       size_t *need)
{
	size_t next;
	ssize_t n = find_line(buf, len, &next);
	const char *tok[3];
	size_t tlen[3];
	uint64_t bytes;
	int k;

	if (n == -2)
		return TC_EPROTO;
	if (n < 0)
		return need_more(len + 1, need);
	r->line = buf;
	r->line_len = (size_t)n;
	k = split(buf, (size_t)n, tok, tlen, 3);
	if (k == 0)
		return TC_EPROTO;
	if (starts(buf, (size_t)n, "RESERVED")) {
		if (k < 3 || parse_u64(tok[1], tlen[1], &r->id) < 0 ||
		    parse_u64(tok[2], tlen[2], &bytes) < 0 || bytes > TC_VALUE_MAX)
			return TC_EPROTO;
		if (len < next + bytes + 2)
			return need_more(next + bytes + 2, need);
		if (memcmp(buf + next + bytes, "\r\n", 2) != 0)
			return TC_EPROTO;
		r->type = TC_R_VALUE;
		r->data = buf + next;
		r->len = bytes;
		return (ssize_t)(next + bytes + 2);
	}
	if (starts(buf, (size_t)n, "INSERTED")) {
		if (k < 2 || parse_u64(tok[1], tlen[1], &r->id) < 0)
			return TC_EPROTO;
		r->type = TC_R_STORED;
	} else if (starts(buf, (size_t)n, "TIMED_OUT") ||
		   starts(buf, (size_t)n, "DEADLINE_SOON"))
		r->type = TC_R_END;
	else if (starts(buf, (size_t)n, "DELETED"))
		r->type = TC_R_DELETED;
	else if (starts(buf, (size_t)n, "NOT_FOUND"))
		r->type = TC_R_NOT_FOUND;
	else if (starts(buf, (size_t)n, "USING") || starts(buf, (size_t)n, "WATCHING"))
		r->type = TC_R_OK;
	else if (starts(buf, (size_t)n, "BURIED") || starts(buf, (size_t)n, "JOB_TOO_BIG") ||
		 starts(buf, (size_t)n, "DRAINING"))
		r->type = TC_R_NOT_STORED;
	else if (starts(buf, (size_t)n, "OUT_OF_MEMORY") ||
		 starts(buf, (size_t)n, "INTERNAL_ERROR"))
		r->type = TC_R_SERVER_ERROR;
	else if (starts(buf, (size_t)n, "BAD_FORMAT") ||
		 starts(buf, (size_t)n, "UNKNOWN_COMMAND") ||
		 starts(buf, (size_t)n, "EXPECTED_CRLF"))
		r->type = TC_R_ERROR;
	else
		r->type = TC_R_OTHER;
	return (ssize_t)next;
}

ssize_t tc_parse_reply(enum tc_proto p, const char *buf, size_t len,
		       struct tc_reply *r, size_t *need)
{
	memset(r, 0, sizeof *r);
	if (len == 0)
		return need_more(1, need);
	switch (p) {
	case TC_MEMCACHE:
		return parse_memcache(buf, len, r, need);
	case TC_REDIS:
		return parse_redis(buf, len, r, need);
	case TC_BEANSTALK:
		return parse_beanstalk(buf, len, r, need);
	}
	return TC_EINVAL;
}

/* ---- buffer --------------------------------------------------------------- */

char *tc_buf_reserve(struct tc_buf *b, size_t n)
{
	if (b->off + b->len + n <= b->cap)
		return b->p + b->off + b->len;
	if (b->off > 0) {
		memmove(b->p, b->p + b->off, b->len);
		b->off = 0;
		if (b->len + n <= b->cap)
			return b->p + b->len;
	}
	size_t cap = b->cap ? b->cap : 4096;

	while (cap < b->len + n)
		cap *= 2;
	char *np = realloc(b->p, cap);

	if (!np)
		return NULL;
	b->p = np;
	b->cap = cap;
	return b->p + b->len;
}

void tc_buf_consume(struct tc_buf *b, size_t n)
{
	if (n >= b->len) {
		b->off = 0;
		b->len = 0;
	} else {
		b->off += n;
		b->len -= n;
	}
}

void tc_buf_free(struct tc_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

/* ---- blocking connection -------------------------------------------------- */

struct tc_conn {
	int fd;
	enum tc_proto proto;
	int timeout_ms;
	struct tc_buf in, out;
	size_t last; /* bytes of the previous reply, consumed on the next call */
};

int tc_conn_open(struct tc_conn **out, const char *host, int port,
		 enum tc_proto p, int timeout_ms)
{
	struct tc_conn *c = calloc(1, sizeof *c);
	int rc;

	if (!c)
		return TC_ENOMEM;
	c->proto = p;
	c->timeout_ms = timeout_ms;
	rc = tc_connect(host, port, timeout_ms, &c->fd);
	if (rc < 0) {
		int e = errno;

		free(c);
		errno = e;
		return rc;
	}
	*out = c;
	return 0;
}

void tc_conn_close(struct tc_conn *c)
{
	if (!c)
		return;
	close(c->fd);
	tc_buf_free(&c->in);
	tc_buf_free(&c->out);
	free(c);
}

int tc_conn_fd(const struct tc_conn *c)
{
	return c->fd;
}

int tc_conn_raw(struct tc_conn *c, const void *bytes, size_t len)
{
	char *d = tc_buf_reserve(&c->out, len);

	if (!d)
		return TC_ENOMEM;
	memcpy(d, bytes, len);
	c->out.len += len;
	return 0;
}

int tc_conn_put(struct tc_conn *c, const char *q, const void *body, size_t len)
{
	size_t qlen = strlen(q);
	char *d = tc_buf_reserve(&c->out, TC_FMT_MAX(qlen) + len + 2);
	size_t n;

	if (!d)
		return TC_ENOMEM;
	n = tc_fmt_put_head(c->proto, d, q, qlen, 0, len);
	memcpy(d + n, body, len);
	memcpy(d + n + len, TC_PUT_TAIL, 2);
	c->out.len += n + len + 2;
	return 0;
}

int tc_conn_get(struct tc_conn *c, const char *q, const char *opts, int wait_ms)
{
	size_t qlen = strlen(q), olen = opts ? strlen(opts) : 0;
	char *d = tc_buf_reserve(&c->out, TC_FMT_MAX(qlen) + olen);

	if (!d)
		return TC_ENOMEM;
	c->out.len += tc_fmt_get(c->proto, d, q, qlen, opts, wait_ms);
	return 0;
}

int tc_conn_flush(struct tc_conn *c)
{
	int64_t deadline = mono_ms() + c->timeout_ms;

	while (c->out.len > 0) {
		ssize_t n = send(c->fd, c->out.p + c->out.off, c->out.len, MSG_NOSIGNAL);

		if (n > 0) {
			tc_buf_consume(&c->out, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return TC_ESYS;
		int rc = wait_fd(c->fd, POLLOUT, deadline);

		if (rc < 0)
			return rc;
	}
	return 0;
}

int tc_conn_reply(struct tc_conn *c, struct tc_reply *r)
{
	int64_t deadline = mono_ms() + c->timeout_ms;
	int rc;

	tc_buf_consume(&c->in, c->last);
	c->last = 0;
	rc = tc_conn_flush(c);
	if (rc < 0)
		return rc;
	for (;;) {
		size_t need = 0;
		ssize_t used = tc_parse_reply(c->proto, c->in.p + c->in.off, c->in.len,
					      r, &need);

		if (used < 0)
			return (int)used;
		if (used > 0) {
			c->last = (size_t)used;
			return 0;
		}
		size_t want = need > c->in.len ? need - c->in.len : 1;

		if (want < 16384)
			want = 16384;
		char *d = tc_buf_reserve(&c->in, want);

		if (!d)
			return TC_ENOMEM;
		ssize_t n = recv(c->fd, d, want, 0);

		if (n > 0) {
			c->in.len += (size_t)n;
			continue;
		}
		if (n == 0)
			return TC_ECLOSED;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return TC_ESYS;
		rc = wait_fd(c->fd, POLLIN, deadline);
		if (rc < 0)
			return rc;
	}
}
