/* privs.c: becoming another user (contracts in privs.h). */
#include "privs.h"

#include <errno.h>
#include <ftw.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
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
