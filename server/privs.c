/* privs.c: becoming another user (contracts in privs.h). */
#include "privs.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/log.h"
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

/* How deep the walk goes: a data directory is three levels deep. */
#define GIVE_DEPTH_MAX 8

struct give {
	const struct privs *p;
	dev_t dev;                /* the data directory's file system */
	unsigned long changed;
	char *err;
	size_t errlen;
	const char *dir;
};

/* Gives the object open as fd (st: its fstat) to the user, unless it is
 * the user's already.  0 or -1 with g->err set (name: for the message). */
static int give_fd(struct give *g, int fd, const struct stat *st, const char *name)
{
	if (st->st_uid == g->p->uid && st->st_gid == g->p->gid)
		return 0;
	if (fchownat(fd, "", g->p->uid, g->p->gid, AT_EMPTY_PATH) < 0) {
		snprintf(g->err, g->errlen, "cannot give data directory %s to user %s: %s: %s",
			 g->dir, g->p->name, name, strerror(errno));
		return -1;
	}
	g->changed++;
	return 0;
}

/* Gives everything in the directory open as dfd (path: for messages).
 * 0 or -1 with g->err set. */
static int give_tree(struct give *g, int dfd, const char *path, int depth)
{
	int fd = dup(dfd), rc = 0;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		snprintf(g->err, g->errlen, "cannot read %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	rewinddir(d); /* (a duplicate shares its position with dfd) */
	while (!rc && (errno = 0, e = readdir(d)) != NULL) {
		char sub[4096];
		struct stat st;
		int cfd, dir;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		/* O_PATH with O_NOFOLLOW opens a symbolic link itself, a FIFO
		 * without waiting; what fstat then says is what is given */
		cfd = openat(dfd, e->d_name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (cfd < 0 || fstat(cfd, &st) < 0) {
			if (errno == ENOENT) { /* gone meanwhile */
				if (cfd >= 0)
					close(cfd);
				continue;
			}
			snprintf(g->err, g->errlen, "cannot open %s: %s", sub, strerror(errno));
			if (cfd >= 0)
				close(cfd);
			rc = -1;
			break;
		}
		dir = S_ISDIR(st.st_mode);
		if (st.st_dev != g->dev) {
			log_warn("data directory %s: %s is on another file system: not given "
				 "to user %s", g->dir, sub, g->p->name);
		} else if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
			snprintf(g->err, g->errlen, "data directory %s: %s has %lu links: refused "
				 "(a hard link would give away a file outside the data directory; "
				 "remove the other links)", g->dir, sub, (unsigned long)st.st_nlink);
			rc = -1;
		} else if (dir || S_ISREG(st.st_mode)) {
			rc = give_fd(g, cfd, &st, sub);
		}
		close(cfd);
		if (rc || !dir || st.st_dev != g->dev)
			continue;
		if (depth >= GIVE_DEPTH_MAX) {
			snprintf(g->err, g->errlen, "data directory %s: %s is too deep: refused",
				 g->dir, sub);
			rc = -1;
			break;
		}
		/* the directory it was is the one walked: a symbolic link put
		 * in its place since fails here */
		cfd = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (cfd < 0) {
			snprintf(g->err, g->errlen, "cannot open %s: %s", sub, strerror(errno));
			rc = -1;
			break;
		}
		if (fstat(cfd, &st) == 0 && st.st_dev == g->dev)
			rc = give_tree(g, cfd, sub, depth + 1);
		close(cfd);
	}
	if (!rc && errno) {
		snprintf(g->err, g->errlen, "cannot read %s: %s", path, strerror(errno));
		rc = -1;
	}
	closedir(d);
	return rc;
}

/* Whether the directory open as dfd looks like a data directory (see
 * privs_give_dir).  0, or -1 with err set. */
static int looks_like_data(int dfd, const char *dir, const char *const *names, unsigned n,
			   const char *lock, char *err, size_t errlen)
{
	int fd = dup(dfd), entries = 0, has_lock = 0, rc = 0;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		snprintf(err, errlen, "cannot read data directory %s: %s", dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	rewinddir(d);
	while (!rc && (e = readdir(d)) != NULL) {
		unsigned i;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		entries++;
		has_lock |= !strcmp(e->d_name, lock);
		for (i = 0; i < n && strcmp(e->d_name, names[i]); i++)
			;
		if (i == n) {
			snprintf(err, errlen, "data directory %s holds %s, which is not ternd's: "
				 "refused (a data directory of its own, or a new one, is given to "
				 "the user)", dir, e->d_name);
			rc = -1;
		}
	}
	closedir(d);
	if (!rc && entries && !has_lock) {
		snprintf(err, errlen, "data directory %s has no %s file: refused (not a data "
			 "directory of ternd's)", dir, lock);
		rc = -1;
	}
	return rc;
}

int privs_give_dir(const struct privs *p, const char *dir, const char *const *names,
		   unsigned n, const char *lock, unsigned long *changed, char *err,
		   size_t errlen)
{
	struct give g = { p, 0, 0, err, errlen, dir };
	struct stat st;
	int fd, rc;

	*changed = 0;
	if (mkdir(dir, TERN_DIR_MODE) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create data directory %s: %s", dir, strerror(errno));
		return TERN_ESYS;
	}
	/* (the path itself is the operator's, and may be a link) */
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "cannot open data directory %s: %s", dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return TERN_ESYS;
	}
	if (looks_like_data(fd, dir, names, n, lock, err, errlen)) {
		close(fd);
		return TERN_EINVAL;
	}
	g.dev = st.st_dev;
	rc = give_fd(&g, fd, &st, dir) || give_tree(&g, fd, dir, 0) ? TERN_ESYS : 0;
	close(fd);
	*changed = g.changed;
	return rc;
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

/* ---- the root reader ----
 *
 * Request: u32 path length, the path, u64 the most bytes wanted.  Answer:
 * i32 errno (0: the file follows), u32 mode, then chunks of u32 length and
 * bytes, up to a chunk of length 0.  A chunk of length CHUNK_FAILED is
 * followed by an i32 errno: the file failed while it was read.  Native
 * byte order: both ends are this program.
 */
#define READER_PATH_MAX 4096
#define READER_CHUNK 16384
#define CHUNK_FAILED UINT32_MAX
/* How long ternd waits for the reader to answer (it reads local files). */
#define READER_WAIT_MS 5000

struct privs_reader {
	int fd;             /* ternd's end of the socketpair; -1 once broken */
	pid_t pid;
	unsigned n;
	char **paths;
};

/* Writes all of buf to fd (blocking).  0 or -1. */
static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads len bytes from fd, waiting at most wait_ms for each (wait_ms < 0:
 * forever).  0, or -1 (errno; EPIPE at the end of input, ETIMEDOUT). */
static int read_all(int fd, void *buf, size_t len, int wait_ms)
{
	char *p = buf;

	while (len) {
		ssize_t n;

		if (wait_ms >= 0) {
			struct pollfd pf = { fd, POLLIN, 0 };
			int r = poll(&pf, 1, wait_ms);

			if (r < 0 && errno == EINTR)
				continue;
			if (r == 0)
				errno = ETIMEDOUT;
			if (r <= 0)
				return -1;
		}
		n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			errno = EPIPE;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The reader's answer to one request for path: the file's bytes, or why
 * not.  Runs in the reader process: no heap, no log. */
static void reader_serve(int sock, const struct privs_reader *r, const char *path,
			 uint64_t max)
{
	char buf[READER_CHUNK];
	int32_t e = EPERM;
	uint32_t mode = 0, len;
	struct stat st;
	int fd = -1;

	for (unsigned i = 0; i < r->n; i++)
		if (!strcmp(r->paths[i], path))
			e = 0;
	/* (O_NONBLOCK: a FIFO put at the path must not hang the reader) */
	if (!e && (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) < 0)
		e = errno;
	if (!e && fstat(fd, &st) < 0)
		e = errno;
	if (!e && !S_ISREG(st.st_mode))
		e = EINVAL;
	if (!e && (uint64_t)st.st_size > max)
		e = EFBIG;
	if (!e)
		mode = (uint32_t)(st.st_mode & 07777);
	if (write_all(sock, &e, sizeof(e)) || write_all(sock, &mode, sizeof(mode)) || e)
		goto done;
	for (uint64_t sent = 0;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || (uint64_t)n > max - sent) {
			len = CHUNK_FAILED;
			e = n < 0 ? errno : EFBIG;
			write_all(sock, &len, sizeof(len));
			write_all(sock, &e, sizeof(e));
			break;
		}
		len = (uint32_t)n;
		if (write_all(sock, &len, sizeof(len)) || write_all(sock, buf, (size_t)n) || !n)
			break;
		sent += (uint64_t)n;
	}
	explicit_bzero(buf, sizeof(buf));
done:
	if (fd >= 0)
		close(fd);
}

/* The reader process: answers requests until ternd closes its end. */
static void __attribute__((noreturn)) reader_main(int sock, const struct privs_reader *r,
						  pid_t parent)
{
	char path[READER_PATH_MAX + 1];
	/* (the socket above 2 first: 0-2 may have been closed, and a socket
	 * taken one of them) */
	int hi = fcntl(sock, F_DUPFD_CLOEXEC, 10), null = open("/dev/null", O_RDWR | O_CLOEXEC);

	/* ends with ternd, whatever ends it */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	/* ternd's handlers (the event loop's) are not the reader's: the
	 * service manager's SIGTERM ends it at once */
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, sig == SIGPIPE ? SIG_IGN : SIG_DFL);
	/* no descriptor but its socket (and /dev/null for 0-2) */
	if (hi < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
	    dup2(hi, 3) < 0 || close_range(4, ~0U, 0) < 0)
		_exit(1);
	for (;;) {
		uint32_t len;
		uint64_t max;

		if (read_all(3, &len, sizeof(len), -1) || len > READER_PATH_MAX ||
		    read_all(3, path, len, -1) || read_all(3, &max, sizeof(max), -1))
			_exit(0);
		path[len] = '\0';
		reader_serve(3, r, path, max);
	}
}

static void reader_free(struct privs_reader *r)
{
	for (unsigned i = 0; i < r->n; i++)
		free(r->paths[i]);
	free(r->paths);
	free(r);
}

int privs_reader_start(const char *const *paths, unsigned n, struct privs_reader **out,
		       char *err, size_t errlen)
{
	struct privs_reader *r = calloc(1, sizeof(*r));
	int sv[2];
	pid_t parent = getpid();

	*out = NULL;
	if (!r || !(r->paths = calloc(n ? n : 1, sizeof(*r->paths))))
		goto nomem;
	for (unsigned i = 0; i < n; i++)
		if (paths[i][0] && !(r->paths[r->n++] = strdup(paths[i])))
			goto nomem;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		snprintf(err, errlen, "cannot start the root reader: %s", strerror(errno));
		reader_free(r);
		return TERN_ESYS;
	}
	r->pid = fork();
	if (r->pid < 0) {
		snprintf(err, errlen, "cannot start the root reader: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		reader_free(r);
		return TERN_ESYS;
	}
	if (r->pid == 0)
		reader_main(sv[1], r, parent);
	close(sv[1]);
	r->fd = sv[0];
	*out = r;
	return 0;
nomem:
	snprintf(err, errlen, "cannot start the root reader: out of memory");
	if (r)
		reader_free(r);
	return TERN_ENOMEM;
}

void privs_reader_stop(struct privs_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd); /* the reader reads the end of its input and exits */
	while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
		;
	reader_free(r);
}

/* Whether the root reader r reads path. */
static int reader_has(const struct privs_reader *r, const char *path)
{
	for (unsigned i = 0; r && r->fd >= 0 && i < r->n; i++)
		if (!strcmp(r->paths[i], path))
			return 1;
	return 0;
}

/* Appends n bytes to f (capacity *cap), growing it by copies that wipe
 * the old buffer.  0 or -1. */
static int file_append(struct privs_file *f, size_t *cap, const char *p, size_t n)
{
	if (f->len + n + 1 > *cap) {
		size_t ncap = (*cap ? *cap : 4096);
		char *nb;

		while (ncap < f->len + n + 1)
			ncap *= 2;
		if (!(nb = malloc(ncap)))
			return -1;
		if (f->data) {
			memcpy(nb, f->data, f->len);
			explicit_bzero(f->data, *cap);
			free(f->data);
		}
		f->data = nb;
		*cap = ncap;
	}
	memcpy(f->data + f->len, p, n);
	f->len += n;
	f->data[f->len] = '\0';
	return 0;
}

/* Reads path through the root reader.  0 or an error with err set; *broken
 * is set when the reader itself failed (it is not asked again). */
static int reader_read(struct privs_reader *r, const char *path, size_t max,
		       struct privs_file *f, int *broken, char *err, size_t errlen)
{
	uint32_t len = (uint32_t)strlen(path), mode;
	uint64_t want = max;
	int32_t e;
	size_t cap = 0;
	char buf[READER_CHUNK];

	*broken = 0;
	if (write_all(r->fd, &len, sizeof(len)) || write_all(r->fd, path, len) ||
	    write_all(r->fd, &want, sizeof(want)) ||
	    read_all(r->fd, &e, sizeof(e), READER_WAIT_MS) ||
	    read_all(r->fd, &mode, sizeof(mode), READER_WAIT_MS))
		goto broken;
	if (e) {
		if (e == EFBIG)
			snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
		else if (e == EINVAL)
			snprintf(err, errlen, "%s: cannot read: not a regular file", path);
		else
			snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
		return e == ENOENT || e == EACCES ? TERN_ESYS : TERN_EINVAL;
	}
	f->mode = mode;
	for (;;) {
		if (read_all(r->fd, &len, sizeof(len), READER_WAIT_MS))
			goto broken;
		if (len == CHUNK_FAILED) {
			if (read_all(r->fd, &e, sizeof(e), READER_WAIT_MS))
				goto broken;
			privs_file_free(f);
			snprintf(err, errlen, "%s: cannot read: %s", path, strerror(e));
			return TERN_ESYS;
		}
		if (len > sizeof(buf) || read_all(r->fd, buf, len, READER_WAIT_MS))
			goto broken;
		if (!len)
			break;
		if (file_append(f, &cap, buf, len)) {
			explicit_bzero(buf, sizeof(buf));
			privs_file_free(f);
			snprintf(err, errlen, "%s: out of memory", path);
			/* the rest of the answer is still to come */
			*broken = 1;
			return TERN_ENOMEM;
		}
	}
	explicit_bzero(buf, sizeof(buf));
	if (!f->data && file_append(f, &cap, "", 0)) {
		snprintf(err, errlen, "%s: out of memory", path);
		return TERN_ENOMEM;
	}
	return 0;
broken:
	explicit_bzero(buf, sizeof(buf));
	privs_file_free(f);
	*broken = 1;
	snprintf(err, errlen, "%s: the root reader failed: %s", path, strerror(errno));
	return TERN_ESYS;
}

int privs_file_read(struct privs_reader *r, const char *path, size_t max,
		    struct privs_file *f, char *err, size_t errlen)
{
	int fd, rc;

	memset(f, 0, sizeof(*f));
	if (reader_has(r, path)) {
		int broken;

		rc = reader_read(r, path, max, f, &broken, err, errlen);
		if (!broken)
			return rc;
		/* out of step, or gone: not asked again */
		close(r->fd);
		r->fd = -1;
		return rc;
	}
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
