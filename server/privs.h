/*
 * privs.h: running as another user (-u USER, `user = USER`), as memcached
 * does: ternd started as root binds its sockets and reads its keys, then
 * gives the data directory to the user and becomes it (supplementary
 * groups, group, user), before it opens a single journal, so every file
 * it creates belongs to the user.
 */
#ifndef TERN_PRIVS_H
#define TERN_PRIVS_H

#include <stddef.h>
#include <sys/types.h>

struct privs {
	char name[64];
	uid_t uid;
	gid_t gid;
	int change; /* 1: a switch is due (root, another user) */
};

/*
 * Looks user up.  Running as root, a switch is due (p->change); running
 * as user already, nothing is to do; as anyone else, it is an error (only
 * root can switch).  Returns 0, or TERN_EINVAL / TERN_ESYS with a message
 * in err.
 */
int privs_lookup(const char *user, struct privs *p, char *err, size_t errlen);
/*
 * Makes dir (created 0755 if missing) and everything under it, without
 * following symbolic links or leaving its filesystem, belong to p's user
 * and group where it does not already; *changed counts the entries
 * changed.  Returns 0 or TERN_ESYS with a message in err.
 */
int privs_give_dir(const struct privs *p, const char *dir, unsigned long *changed,
		   char *err, size_t errlen);
/*
 * Becomes p's user: initgroups, setgid, setuid, then checks that root
 * cannot be regained.  Returns 0 or TERN_ESYS with a message in err.
 */
int privs_drop(const struct privs *p, char *err, size_t errlen);

/* A file read whole: its bytes (a NUL after them, not counted in len)
 * and its permission bits. */
struct privs_file {
	char *data;
	size_t len;
	unsigned mode;
};
/*
 * Reads the regular file at path (at most max bytes) into f, for the auth
 * file and the TLS files.  Returns 0, or TERN_ESYS / TERN_EINVAL /
 * TERN_ENOMEM with "PATH: cannot open: why" (or read, or "larger than")
 * in err.  privs_file_free wipes and frees what it read.
 */
int privs_file_read(const char *path, size_t max, struct privs_file *f, char *err,
		    size_t errlen);
void privs_file_free(struct privs_file *f);

#endif
