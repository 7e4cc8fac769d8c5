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
 * Makes dir (created TERN_DIR_MODE if missing) and everything under it
 * belong to p's user and group where it does not already; *changed counts
 * the entries changed.  Root does this, so nothing in dir may lead it
 * elsewhere: the walk goes by descriptors (openat with O_NOFOLLOW, fstat
 * and fchown of what was opened), never follows a symbolic link, skips
 * what is not on dir's file system, and refuses a file with more than
 * one link (a hard link to a file outside dir would give that file
 * away).  dir itself must look like a data directory: empty, or holding
 * only entries named in names (n of them), one of which, lock, must be
 * there; else it is refused, not taken over (a misspelt data_dir).
 * Returns 0, or TERN_ESYS / TERN_EINVAL with a message in err.
 */
int privs_give_dir(const struct privs *p, const char *dir, const char *const *names,
		   unsigned n, const char *lock, unsigned long *changed, char *err,
		   size_t errlen);
/*
 * Becomes p's user: initgroups, setgid, setuid, then checks that root
 * cannot be regained.  Returns 0 or TERN_ESYS with a message in err.
 */
int privs_drop(const struct privs *p, char *err, size_t errlen);

/*
 * The root reader: a reload must read the auth file and the TLS files
 * again, and the documented setup keeps them readable by root alone
 * (chmod 600), which the user ternd became cannot read.  So before it
 * becomes the user, ternd forks a small process that stays root and reads
 * those files, and only those (the paths given at start, compared byte
 * for byte), for it: a request on a socketpair names a path, the answer
 * is the file's mode and bytes.  It holds no other descriptor, uses no
 * heap, and ends when ternd closes the socket or dies (PR_SET_PDEATHSIG).
 * A path given later (a reload that names another file) is read as the
 * user.
 */
struct privs_reader;
/*
 * Starts the root reader for the n paths (empty strings are skipped).
 * Call it as root, before privs_drop.  Returns 0, or TERN_ESYS /
 * TERN_ENOMEM with a message in err.
 */
int privs_reader_start(const char *const *paths, unsigned n, struct privs_reader **out,
		       char *err, size_t errlen);
/* Ends the reader and waits for it (NULL: nothing). */
void privs_reader_stop(struct privs_reader *r);

/* A file read whole: its bytes (a NUL after them, not counted in len)
 * and its permission bits. */
struct privs_file {
	char *data;
	size_t len;
	unsigned mode;
};
/*
 * Reads the regular file at path (at most max bytes) into f, for the auth
 * file and the TLS files: through the root reader r when it has path,
 * else as the process is (also once r failed: the read that found it
 * failing is an error).  Returns 0, or TERN_ESYS /
 * TERN_EINVAL / TERN_ENOMEM with "PATH: cannot open: why" (or read, or
 * "larger than") in err.  privs_file_free wipes and frees what it read.
 */
int privs_file_read(struct privs_reader *r, const char *path, size_t max,
		    struct privs_file *f, char *err, size_t errlen);
void privs_file_free(struct privs_file *f);

#endif
