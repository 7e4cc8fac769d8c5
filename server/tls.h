/*
 * tls.h: TLS for connections of the TLS listener (tls_listen, tls_cert,
 * tls_key): OpenSSL over the connection's own non-blocking socket, driven
 * by the same read and write events as a plain connection, so conn.c
 * keeps one design and a plain connection pays one test of c->tls.  The
 * handshake happens inside the first reads and writes (accept state).
 * TLS 1.2 and 1.3 with forward secrecy and AEAD ciphers only; optional
 * client certificates (tls_ca); no renegotiation; a peer that closes the TCP
 * connection without a close_notify is an orderly end of its input (as
 * for a plain connection, whose replies are still sent).
 */
#ifndef TERN_TLS_H
#define TERN_TLS_H

#include <stddef.h>
#include <sys/types.h>

struct evbuffer;
struct tls_ctx; /* certificate and key: one per listener (replaced by a reload) */
struct tls;     /* one connection's session */

/* The PEM text of the TLS files (read by the caller, which names them by
 * their paths in messages). */
struct tls_pem {
	const char *cert_path, *key_path, *ca_path;
	const char *cert, *key;          /* the certificate chain (the server's
					    certificate first), its private key */
	size_t cert_len, key_len;
	const char *ca;                  /* the CAs of clients' certificates, or
					    NULL: none asked for */
	size_t ca_len;
	int client_optional;             /* with ca: a client may present none */
};
/* The largest TLS file read. */
#define TLS_FILE_MAX (1u << 20)
/*
 * Loads the certificate chain and its private key (unencrypted) and
 * checks they match; with pem->ca, asks clients for a certificate that
 * chains to one of those CAs (and refuses the handshake of a client
 * without one unless client_optional, or with one that does not verify).
 * TLS 1.2 offers only ECDHE key exchange with AEAD ciphers (TLS_CIPHERS);
 * TLS 1.3's suites are all of that kind.  Returns 0 or TERN_EINVAL /
 * TERN_ENOMEM with OpenSSL's reason in err ("TLS certificate PATH: why").
 */
int tls_ctx_new(const struct tls_pem *pem, struct tls_ctx **out, char *err, size_t errlen);
/* Drops the caller's reference (sessions keep theirs). */
void tls_ctx_free(struct tls_ctx *t);

/* A session on fd (the caller keeps the descriptor); NULL without memory. */
struct tls *tls_new(struct tls_ctx *ctx, int fd);
/* Sends a close_notify if it can without waiting, and frees t. */
void tls_free(struct tls *t);
/*
 * Reads up to n bytes of plaintext.  Returns the bytes read; 0 when the
 * peer ended its side; -1 with errno EAGAIN when the socket must become
 * readable first (or writable: tls_wants_write), or with another errno
 * when the session failed (EPROTO: a TLS error, logged at debug).
 */
ssize_t tls_read(struct tls *t, void *buf, size_t n);
/*
 * Writes b's bytes as records, draining what was sent.  Returns the bytes
 * sent (b is then empty); -1 with errno EAGAIN when the socket must become
 * writable (or readable: tls_wants_read) first, some bytes sent or not, or
 * with another errno when the session failed.
 */
ssize_t tls_write(struct tls *t, struct evbuffer *b);
/* After EAGAIN: the last call waits for the socket to be writable (a read
 * during a handshake), or readable (a write).  */
int tls_wants_write(const struct tls *t);
int tls_wants_read(const struct tls *t);
/* Whether plaintext is buffered in t, which no socket event announces. */
int tls_pending(const struct tls *t);

#endif
