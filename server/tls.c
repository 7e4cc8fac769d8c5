/* tls.c: OpenSSL sessions over the connections' sockets (tls.h). */
#include "tls.h"

#include <errno.h>
#include <event2/buffer.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/log.h"
#include "../lib/tern.h"

/* Plaintext per SSL_write: one full record. */
#define TLS_WRITE_CHUNK 16384

struct tls_ctx {
	SSL_CTX *ctx;
};

struct tls {
	SSL *ssl;
	size_t wlen;    /* a write to repeat with these many bytes (OpenSSL's
			   rule after WANT_*), 0 when none */
	int want_write; /* the last EAGAIN waits for writable */
	int want_read;  /* ... for readable */
};

/* OpenSSL's first queued error as text (the queue is cleared). */
static void ssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();

	if (e)
		ERR_error_string_n(e, buf, len);
	else
		snprintf(buf, len, "%s", strerror(errno));
	ERR_clear_error();
}

int tls_ctx_new(const char *cert, const char *key, struct tls_ctx **out, char *err,
		size_t errlen)
{
	struct tls_ctx *t = calloc(1, sizeof(*t));
	char why[256];

	*out = NULL;
	if (!t || !(t->ctx = SSL_CTX_new(TLS_server_method()))) {
		free(t);
		snprintf(err, errlen, "TLS: out of memory");
		return TERN_ENOMEM;
	}
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	/* (CLEANSE_PLAINTEXT: OpenSSL zeroes the plaintext it has handed
	 * over, a login's password among it, before it reuses or frees its
	 * buffers) */
	SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
					    SSL_OP_CIPHER_SERVER_PREFERENCE |
					    SSL_OP_CLEANSE_PLAINTEXT);
	/* writes resume from wherever the output buffer moved; buffers are
	 * given back while a connection is idle */
	SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
					 SSL_MODE_RELEASE_BUFFERS);
	if (SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1) {
		ssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS certificate %s: %s", cert, why);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
		ssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS key %s (for certificate %s): %s", key, cert, why);
		goto fail;
	}
	if (SSL_CTX_check_private_key(t->ctx) != 1) {
		ssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS key %s does not match certificate %s: %s", key, cert, why);
		goto fail;
	}
	*out = t;
	return 0;
fail:
	tls_ctx_free(t);
	return TERN_EINVAL;
}

void tls_ctx_free(struct tls_ctx *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

struct tls *tls_new(struct tls_ctx *ctx, int fd)
{
	struct tls *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->ssl = SSL_new(ctx->ctx);
	if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
		SSL_free(t->ssl);
		free(t);
		ERR_clear_error();
		return NULL;
	}
	SSL_set_accept_state(t->ssl);
	return t;
}

void tls_free(struct tls *t)
{
	if (!t)
		return;
	/* a close_notify if the handshake was done and the socket takes it */
	if (SSL_is_init_finished(t->ssl))
		SSL_shutdown(t->ssl);
	ERR_clear_error();
	SSL_free(t->ssl);
	free(t);
}

/* Maps the result r of an SSL call to -1 with errno (or 0 at the end of
 * the peer's input, for a read). */
static ssize_t failed(struct tls *t, int r, const char *what)
{
	int e = SSL_get_error(t->ssl, r), saved = errno;
	char why[256];

	t->want_read = e == SSL_ERROR_WANT_READ;
	t->want_write = e == SSL_ERROR_WANT_WRITE;
	switch (e) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		ERR_clear_error();
		errno = saved ? saved : EPIPE;
		return -1;
	default:
		if (log_enabled(LOG_LEVEL_DEBUG)) {
			ssl_reason(why, sizeof(why));
			log_debug("TLS %s failed: %s", what, why);
		}
		ERR_clear_error();
		errno = EPROTO;
		return -1;
	}
}

ssize_t tls_read(struct tls *t, void *buf, size_t n)
{
	int r;

	ERR_clear_error();
	r = SSL_read(t->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
	if (r > 0) {
		t->want_read = t->want_write = 0;
		return r;
	}
	return failed(t, r, "read");
}

ssize_t tls_write(struct tls *t, struct evbuffer *b)
{
	ssize_t total = 0;
	size_t left;

	while ((left = evbuffer_get_length(b)) > 0) {
		size_t n = t->wlen ? t->wlen : left < TLS_WRITE_CHUNK ? left : TLS_WRITE_CHUNK;
		unsigned char *p = evbuffer_pullup(b, (ev_ssize_t)n);
		int r;

		if (!p) {
			errno = ENOMEM;
			return -1;
		}
		ERR_clear_error();
		r = SSL_write(t->ssl, p, (int)n);
		if (r <= 0) {
			t->wlen = n;
			if (failed(t, r, "write") == 0)
				errno = EPIPE;
			return -1;
		}
		t->wlen = 0;
		t->want_read = t->want_write = 0;
		evbuffer_drain(b, (size_t)r);
		total += r;
	}
	return total;
}

int tls_wants_write(const struct tls *t)
{
	return t->want_write;
}

int tls_wants_read(const struct tls *t)
{
	return t->want_read;
}

int tls_pending(const struct tls *t)
{
	return SSL_pending(t->ssl) > 0;
}
