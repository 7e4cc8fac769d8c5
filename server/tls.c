/* tls.c: OpenSSL sessions over the connections' sockets (tls.h). */
#include "tls.h"

#include <errno.h>
#include <event2/buffer.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/log.h"
#include "../lib/tern.h"

/* Plaintext per SSL_write: one full record. */
#define TLS_WRITE_CHUNK 16384
/* TLS 1.2's suites: ECDHE key exchange (forward secrecy) with AEAD
 * ciphers (no CBC, no SHA-1 MAC), ECDSA and RSA certificates, in
 * OpenSSL's order of preference.  TLS 1.3's are all such and stay as
 * OpenSSL has them. */
#define TLS_CIPHERS "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"               \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

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

/* No passphrase: a key must be unencrypted (nothing may prompt on the
 * terminal of a daemon). */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	return -1;
}

/* Uses the chain in pem (the server's certificate, then its CAs). */
static int use_chain(SSL_CTX *ctx, const char *pem, size_t len)
{
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	X509 *x = b ? PEM_read_bio_X509_AUX(b, NULL, no_passphrase, NULL) : NULL;
	int ok = x && SSL_CTX_use_certificate(ctx, x) == 1 && SSL_CTX_clear_chain_certs(ctx) == 1;

	X509_free(x);
	while (ok) {
		X509 *ca = PEM_read_bio_X509(b, NULL, no_passphrase, NULL);
		unsigned long e;

		if (!ca) {
			/* the end of the text: the one error that is not one */
			e = ERR_peek_last_error();
			if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE)
				ERR_clear_error();
			else
				ok = 0;
			break;
		}
		if (SSL_CTX_add0_chain_cert(ctx, ca) != 1) {
			X509_free(ca);
			ok = 0;
		}
	}
	BIO_free(b);
	return ok;
}

/* Asks clients for a certificate chained to one of the CAs in pem (with
 * required: a client without one fails its handshake). */
static int use_client_cas(SSL_CTX *ctx, const char *pem, size_t len, int required)
{
	static const unsigned char sid_ctx[] = "ternd";
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	X509_STORE *store = SSL_CTX_get_cert_store(ctx);
	int n = 0, ok = b != NULL;

	while (ok) {
		X509 *x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL);
		unsigned long e;

		if (!x) {
			e = ERR_peek_last_error();
			if (n && ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE)
				ERR_clear_error();
			else
				ok = 0;
			break;
		}
		/* trusted, and named in the certificate request */
		ok = X509_STORE_add_cert(store, x) == 1 && SSL_CTX_add_client_CA(ctx, x) == 1;
		X509_free(x);
		n++;
	}
	BIO_free(b);
	if (!ok)
		return 0;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (required ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
			   NULL);
	/* (a resumed session must have been verified by this context) */
	return SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1) == 1;
}

/* Uses the private key in pem. */
static int use_key(SSL_CTX *ctx, const char *pem, size_t len)
{
	BIO *b = BIO_new_mem_buf(pem, (int)len);
	EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL) : NULL;
	int ok = k && SSL_CTX_use_PrivateKey(ctx, k) == 1;

	EVP_PKEY_free(k);
	BIO_free(b);
	return ok;
}

int tls_ctx_new(const struct tls_pem *pem, struct tls_ctx **out, char *err, size_t errlen)
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
	ERR_clear_error();
	if (SSL_CTX_set_cipher_list(t->ctx, TLS_CIPHERS) != 1) {
		ssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS: cannot set the ciphers: %s", why);
		goto fail;
	}
	if (pem->cert_len > INT32_MAX || !use_chain(t->ctx, pem->cert, pem->cert_len)) {
		ssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS certificate %s: %s", pem->cert_path, why);
		goto fail;
	}
	if (pem->key_len > INT32_MAX || !use_key(t->ctx, pem->key, pem->key_len)) {
		ssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS key %s (for certificate %s): %s", pem->key_path,
			 pem->cert_path, why);
		goto fail;
	}
	if (SSL_CTX_check_private_key(t->ctx) != 1) {
		ssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS key %s does not match certificate %s: %s", pem->key_path,
			 pem->cert_path, why);
		goto fail;
	}
	if (pem->ca && (pem->ca_len > INT32_MAX ||
			!use_client_cas(t->ctx, pem->ca, pem->ca_len, !pem->client_optional))) {
		ssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS client CAs %s: %s", pem->ca_path, why);
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
