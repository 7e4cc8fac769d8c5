/*
 * auth.h: who may connect and what each may do: the users and passwords
 * of the auth file (memcached's format, `-Y FILE`) and the rights of the
 * config file's [access] section.
 *
 * The auth file has one "user:password" per line (the password is the
 * rest of the line; empty lines and lines starting with '#' are skipped),
 * as memcached reads it, so one file can serve both.  Rights are tern's
 * extension: an [access] line "USER = WORD..." gives a user
 *   read=P[,P...]   get (every option: waits, open, close, abort, peek,
 *                   reserve, close=<id>, abort=<id>), delete of an item by
 *                   id (delete q/<id>), monitor, confirm on the queues
 *                   whose names start with a P;
 *   write=P[,P...]  set and add on those queues;
 *   stats           the stats command (every form);
 *   admin           delete of a queue, flush, flush_all, flush_expired,
 *                   flush_all_expired, reload, shutdown, verbosity (and
 *                   binary VERBOSITY), and stats;
 *   all             every right on every queue (read=* write=* admin);
 *   none            nothing (the user may authenticate, then only quit).
 * A P of "*" is every queue.  A user without a line of its own gets the
 * line of the user "*" when there is one, else every right (memcached's
 * meaning of a valid password).
 *
 * Pure: no I/O (server.c reads the file), no connection state.  The handshakes
 * that use it are in front_auth.c.
 */
#ifndef TERN_AUTH_H
#define TERN_AUTH_H

#include <stddef.h>

/* Rights (bits). */
enum auth_right {
	AUTH_READ = 1,
	AUTH_WRITE = 2,
	AUTH_STATS = 4,
	AUTH_ADMIN = 8,
};

struct auth;
struct auth_user;

/* One line of the config file's [access] section: a user's rights, as
 * written (config.c checks it with auth_rights_check when it reads the
 * file; auth_parse applies it). */
struct access_rule {
	struct access_rule *next;
	char *user, *rights;
};

/* Longest user name and password accepted in the auth file. */
#define AUTH_NAME_MAX 64
#define AUTH_PASS_MAX 256

/* The largest auth file read. */
#define AUTH_FILE_MAX (1u << 20)

/*
 * Parses the auth file's contents, text (len bytes, read from path, which
 * only names it in messages), and applies rules (the [access] lines) to
 * its users.  Returns 0, or TERN_EINVAL (a malformed line, a NUL byte, a
 * user given twice, no user at all, a rule for a user the file does not
 * name), TERN_ENOMEM, with a message in err ("FILE:LINE: why"; never a
 * password).  The passwords are not kept: each user keeps a keyed digest
 * of its name and password (HMAC-SHA-256 under a key drawn for this
 * load), which auth_check compares.
 */
int auth_parse(const char *text, size_t len, const char *path, const struct access_rule *rules,
	       struct auth **out, char *err, size_t errlen);
void auth_free(struct auth *a);
/* How many users a has. */
unsigned auth_count(const struct auth *a);

/*
 * The user whose name and password these are (not NUL-terminated), or
 * NULL.  It takes the same time whatever the bytes that differ, the
 * length of the user's password, or whether the user exists: the digests
 * of both are compared with every user's, each in full.
 */
const struct auth_user *auth_check(const struct auth *a, const char *user, size_t ulen,
				   const char *pass, size_t plen);
/* The user named name (len bytes), or NULL: a reload finds a connection's
 * user again; a set's data block is looked at as credentials only when it
 * starts with a user's name.  Not constant-time: never for a login. */
const struct auth_user *auth_find(const struct auth *a, const char *name, size_t len);
const char *auth_user_name(const struct auth_user *u);
/* Whether u has right r; for AUTH_READ and AUTH_WRITE on queue q (qlen
 * bytes). */
int auth_may(const struct auth_user *u, enum auth_right r, const char *q, size_t qlen);
/* Whether u has every right on every queue (the checks can be skipped). */
int auth_unrestricted(const struct auth_user *u);

/* Checks an [access] value: NULL, or why it is wrong (static). */
const char *auth_rights_check(const char *rights);
/* Whether name can be a user: 1..AUTH_NAME_MAX bytes, no ':', blank or
 * control character ("*" names the default rule). */
int auth_user_name_valid(const char *name, size_t len);

#endif
