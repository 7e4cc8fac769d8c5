/* privs.c: becoming another user (contracts in privs.h). */
#include "privs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/tern.h"

int privs_lookup(const char *user, struct privs *p, char *err, size_t errlen)
{
	struct passwd *pw;

	memset(p, 0, sizeof(*p));
	if (strlen(user) >= sizeof(p->name)) {
		snprintf(err, errlen, "user name too long: %s", user);
		return TERN_EINVAL;
	}
	errno = 0;
	pw = getpwnam(user);
	if (!pw) {
		snprintf(err, errlen, "cannot run as user %s: %s", user,
			 errno ? strerror(errno) : "no such user");
		return errno ? TERN_ESYS : TERN_EINVAL;
	}
	snprintf(p->name, sizeof(p->name), "%s", user);
	p->uid = pw->pw_uid;
	p->gid = pw->pw_gid;
	if (geteuid() == 0) {
		p->change = p->uid != 0 || getuid() != 0;
		return 0;
	}
	if (geteuid() == p->uid && getuid() == p->uid)
		return 0; /* already that user */
	snprintf(err, errlen, "cannot run as user %s: only root can switch users", user);
	return TERN_EINVAL;
}

/* nftw's callback has no argument: the walk's state, one walk at a time. */
static struct {
	const struct privs *p;
	unsigned long changed;
	int err;
	char path[512];
} walk;

static int give_one(const char *path, const struct stat *st, int type, struct FTW *f)
{
	if (st->st_uid == walk.p->uid && st->st_gid == walk.p->gid)
		return 0;
	if (lchown(path, walk.p->uid, walk.p->gid) < 0) {
		walk.err = errno;
		snprintf(walk.path, sizeof(walk.path), "%s", path);
		return 1; /* stops the walk */
	}
	walk.changed++;
	return 0;
}

int privs_give_dir(const struct privs *p, const char *dir, unsigned long *changed,
		   char *err, size_t errlen)
{
	int rc;

	*changed = 0;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create data directory %s: %s", dir, strerror(errno));
		return TERN_ESYS;
	}
	memset(&walk, 0, sizeof(walk));
	walk.p = p;
	rc = nftw(dir, give_one, 16, FTW_PHYS | FTW_MOUNT);
	*changed = walk.changed;
	if (rc < 0 || walk.err) {
		snprintf(err, errlen, "cannot give data directory %s to user %s: %s%s%s", dir,
			 p->name, walk.err ? walk.path : "", walk.err ? ": " : "",
			 strerror(walk.err ? walk.err : errno));
		return TERN_ESYS;
	}
	return 0;
}

int privs_drop(const struct privs *p, char *err, size_t errlen)
{
	if (!p->change)
		return 0;
	if (initgroups(p->name, p->gid) < 0 || setgid(p->gid) < 0 || setuid(p->uid) < 0) {
		snprintf(err, errlen, "cannot become user %s: %s", p->name, strerror(errno));
		return TERN_ESYS;
	}
	if (p->uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
		snprintf(err, errlen, "cannot become user %s: root could be regained", p->name);
		return TERN_ESYS;
	}
	return 0;
}

/* Reads all of fd (at most max bytes) into f. */
static int read_fd(int fd, const char *path, size_t max, struct privs_file *f, char *err,
		   size_t errlen)
{
	struct stat st;
	size_t cap;

	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
		return TERN_ESYS;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: cannot read: not a regular file", path);
		return TERN_EINVAL;
	}
	if ((uint64_t)st.st_size > max) {
		snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
		return TERN_EINVAL;
	}
	cap = (size_t)st.st_size + 1;
	f->data = malloc(cap);
	if (!f->data) {
		snprintf(err, errlen, "%s: out of memory", path);
		return TERN_ENOMEM;
	}
	f->mode = (unsigned)(st.st_mode & 07777);
	for (;;) {
		ssize_t n = read(fd, f->data + f->len, cap - f->len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
			privs_file_free(f);
			return TERN_ESYS;
		}
		if (n == 0)
			break;
		f->len += (size_t)n;
		if (f->len == cap) { /* it grew while read */
			snprintf(err, errlen, "%s: changed while it was read", path);
			privs_file_free(f);
			return TERN_EINVAL;
		}
	}
	f->data[f->len] = '\0';
	return 0;
}

int privs_file_read(const char *path, size_t max, struct privs_file *f, char *err,
		    size_t errlen)
{
	int fd, rc;

	memset(f, 0, sizeof(*f));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return TERN_ESYS;
	}
	rc = read_fd(fd, path, max, f, err, errlen);
	close(fd);
	return rc;
}

void privs_file_free(struct privs_file *f)
{
	if (f->data) {
		/* a password or a key does not outlive its use in freed memory */
		explicit_bzero(f->data, f->len + 1);
		free(f->data);
	}
	memset(f, 0, sizeof(*f));
}
