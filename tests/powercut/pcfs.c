/*
 * pcfs: a file system that can lose power.  A FUSE file system that passes
 * every operation through to a backing directory, and keeps apart what a
 * disk would hold if the power went now: the durable state.  On command it
 * cuts the power: it stops (every later operation fails with EIO) and
 * rewrites the backing directory as exactly what the durable state holds,
 * so that a program started on it sees what a power cut would have left.
 *
 *   pcfs [--rule=posix|linux] [--tear=P] [--seed=N] [--state=DIR]
 *        BACKING MOUNTPOINT [FUSE options]
 *
 * THE MODEL (tests/powercut/README.md says the same for its users)
 * - File data written and not yet covered by an fsync or fdatasync of that
 *   file is lost at the cut; so is a change of size (ftruncate, fallocate,
 *   growth by a write) not yet synced.  A write through a descriptor opened
 *   with O_SYNC or O_DSYNC is synced as it is written; the kernel turns a
 *   pwritev2(RWF_DSYNC) on a FUSE file into a write followed by an fsync
 *   of the file, which syncs the whole file here (FUSE passes no range).
 * - A name created, renamed, linked or removed (files and directories) is
 *   durable only once its directory was synced (fsync of the directory):
 *   the portable rule (--rule=posix).  --rule=linux is ext4's and XFS's:
 *   every fsync or fdatasync, of any file or directory, commits every
 *   earlier change of names and of sizes (ftruncate, fallocate) on the
 *   whole file system, as their journal commits them together; data stays
 *   per file.
 * - A failed fsync loses the unsynced pages of its file for good, as
 *   Linux's page cache does: they are marked clean without reaching the
 *   disk, and the next fsync does not report them again.
 * - --tear=P: at the cut, each unsynced 4 KiB page, each unsynced size
 *   change, and (as a whole) each directory's unsynced names reach the
 *   disk with probability P, independently and so in any order: a write
 *   torn between pages, and the kernel's own writeback of part of what was
 *   not synced.  Without it, exactly the synced state is left.
 *
 * The control file /.powercut (not listed) takes commands, one per write:
 *   cut                      cut the power now
 *   arm before|after OP N [S] cut at the Nth operation of kind OP (below)
 *                            whose path contains S (a rename's is
 *                            FROM>TO; S ending in $ must end the path),
 *                            before it is done or right after
 *   fail OP SKIP TIMES ERR [S]  the matching operations after the first SKIP
 *                            fail with errno ERR (a number), TIMES of them
 *                            (-1: every one from then on)
 *   tear P | seed N | rule posix|linux
 * and reading it gives the state ("running" or "cut"), a count of each
 * kind of operation so far, the most recent operations and the times of
 * each file's first and last two fsyncs.  OP is one of write, fsync, fsyncdir, rename,
 * unlink, mkdir, rmdir, create, truncate, fallocate, sync (fsync or
 * fsyncdir), any.
 *
 * Single-threaded (-s is forced): every operation, the control file's
 * included, runs alone, so a cut falls between two operations, or inside
 * an armed one, never during another.
 */
#define FUSE_USE_VERSION 31

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u
#define CTL_NAME "/.powercut"
#define CTL_FH UINT64_MAX

/* ------------------------------------------------------------ the model */

struct dent {
	char *name;
	struct node *n;
};

/*
 * A file, directory or symbolic link of the backing directory.  A node
 * outlives its last name in the backing directory for as long as a durable
 * directory entry may still name it (an unlink not yet synced).
 */
struct node {
	uint64_t id;         /* its durable contents: STATE/<id> */
	ino_t ino;           /* the backing inode; 0 once no live name is left */
	mode_t mode;
	struct node *hnext;  /* in the table by ino */
	struct node *all;    /* every node */
	/* a file's durable size, and what is not durable yet */
	uint64_t dsize;
	uint64_t *dirty;     /* bit per page written since the last sync */
	size_t dwords;
	int size_dirty;      /* its size changed since the last sync */
	int msize_set;       /* ftruncate or fallocate set msize since the last
				commit (--rule=linux commits it with the names) */
	uint64_t msize;
	int dfd;             /* the backing file, open while anything is dirty */
	/* a directory's durable entries, and whether its live ones changed */
	struct dent *ents;
	size_t nent;
	int ns_dirty;
	char *target;        /* a symbolic link's */
	char *made;          /* where the cut put it (a second name: a link) */
};

enum op {
	OP_WRITE, OP_FSYNC, OP_FSYNCDIR, OP_RENAME, OP_UNLINK, OP_MKDIR, OP_RMDIR,
	OP_CREATE, OP_TRUNCATE, OP_FALLOCATE, OP_N,
	OP_SYNC = OP_N, /* fsync or fsyncdir (triggers only) */
	OP_ANY,
};

static const char *const op_names[] = {
	"write", "fsync", "fsyncdir", "rename", "unlink", "mkdir", "rmdir", "create",
	"truncate", "fallocate", "sync", "any",
};

struct trigger {
	int on;
	int op;
	uint64_t n, seen;
	int after;       /* cut right after the operation (else before it) */
	char pat[256];
};

/* The most recent operations, for the status (which phase a cut hit). */
#define RECENT 64
struct recent {
	int op;
	int zeros;       /* a write of zeros only */
	uint64_t t_ns;   /* CLOCK_MONOTONIC */
	char path[160];
};

/* The first and the last two fsyncs of each file (by path; the oldest
 * entry makes room when the table is full), so a harness can tell which
 * acknowledged writes a sync must have covered. */
#define SYNCED 256
struct synced {
	uint64_t first_ns, prev_ns, last_ns; /* CLOCK_MONOTONIC; prev_ns 0:
						one so far */
	char path[160];
};

struct fault {
	int on;
	int op;
	uint64_t skip;
	int64_t times;   /* -1: for ever */
	int err;
	char pat[256];
};

static struct {
	char *backing, *state;
	int bfd;             /* the backing directory */
	int linux_rule;
	double tear;
	uint64_t rng;
	uint64_t next_id;
	struct node *root;
	struct node **tab;
	size_t tabn;
	struct node *all;
	int cut;
	uint64_t count[OP_N];
	uint64_t failed;
	struct trigger trig;
	struct fault fault;
	struct recent recent[RECENT];
	uint64_t nrecent;
	struct synced synced[SYNCED];
	uint64_t cut_ns;
	char ctl_out[65536];
} pc;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(void)
{
	/* xorshift64* */
	pc.rng ^= pc.rng >> 12;
	pc.rng ^= pc.rng << 25;
	pc.rng ^= pc.rng >> 27;
	return pc.rng * 2685821657736338717ull;
}

/* 1 with probability pc.tear. */
static int torn_survives(void)
{
	return (double)(rng_next() >> 11) / (double)(1ull << 53) < pc.tear;
}

static void die(const char *what)
{
	fprintf(stderr, "pcfs: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The backing path of a FUSE path, relative to pc.bfd. */
static const char *rel(const char *path)
{
	return path[1] ? path + 1 : ".";
}

static struct node *node_find(ino_t ino)
{
	for (struct node *n = pc.tab[ino % pc.tabn]; n; n = n->hnext)
		if (n->ino == ino)
			return n;
	return NULL;
}

static struct node *node_new(ino_t ino, mode_t mode)
{
	struct node *n = calloc(1, sizeof(*n));

	if (!n)
		die("calloc");
	n->id = ++pc.next_id;
	n->ino = ino;
	n->mode = mode;
	n->dfd = -1;
	n->hnext = pc.tab[ino % pc.tabn];
	pc.tab[ino % pc.tabn] = n;
	n->all = pc.all;
	pc.all = n;
	return n;
}

/* The node no live name refers to any more (its inode number may be
 * reused by a new file). */
static void node_detach(struct node *n)
{
	struct node **pp = &pc.tab[n->ino % pc.tabn];

	while (*pp && *pp != n)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = n->hnext;
	n->ino = 0;
}

/* The node of the live name at path (relative to the backing directory),
 * made if it is new. */
static struct node *node_at(const char *path)
{
	struct stat st;
	struct node *n;

	if (fstatat(pc.bfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return NULL;
	n = node_find(st.st_ino);
	if (!n)
		n = node_new(st.st_ino, st.st_mode);
	return n;
}

static void shadow_path(const struct node *n, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%" PRIu64, pc.state, n->id);
}

/* Opens n's durable contents (made empty if it has none yet). */
static int shadow_open(const struct node *n)
{
	char p[PATH_MAX];
	int fd;

	shadow_path(n, p, sizeof(p));
	fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		die("open durable contents");
	return fd;
}

/* Copies [off, off+len) of fd into the durable contents sfd, leaving holes
 * for pages of zeros past the durable end (the file stays sparse). */
static void copy_pages(int sfd, int fd, uint64_t first, uint64_t last, uint64_t size)
{
	static unsigned char buf[PAGE];
	static const unsigned char zero[PAGE];

	for (uint64_t p = first; p <= last; p++) {
		uint64_t off = p * PAGE;
		size_t len = off + PAGE <= size ? PAGE : (size_t)(size - off);
		ssize_t got;

		if (off >= size)
			break;
		got = pread(fd, buf, len, (off_t)off);
		if (got < 0)
			die("read backing file");
		if ((size_t)got < len)
			memset(buf + got, 0, len - (size_t)got);
		if (!memcmp(buf, zero, len)) {
			struct stat st;

			if (fstat(sfd, &st) == 0 && (uint64_t)st.st_size <= off)
				continue; /* (the final size gives it zeros) */
		}
		if (pwrite(sfd, buf, len, (off_t)off) != (ssize_t)len)
			die("write durable contents");
	}
}

static int page_dirty(const struct node *n, uint64_t p)
{
	return p / 64 < n->dwords && (n->dirty[p / 64] >> (p % 64) & 1);
}

static void mark_pages(struct node *n, uint64_t off, uint64_t len)
{
	uint64_t first, last;

	if (!len)
		return;
	first = off / PAGE;
	last = (off + len - 1) / PAGE;
	if (last / 64 >= n->dwords) {
		size_t nw = (size_t)(last / 64 + 1) * 2;
		uint64_t *d = realloc(n->dirty, nw * sizeof(*d));

		if (!d)
			die("realloc");
		memset(d + n->dwords, 0, (nw - n->dwords) * sizeof(*d));
		n->dirty = d;
		n->dwords = nw;
	}
	for (uint64_t p = first; p <= last; p++)
		n->dirty[p / 64] |= 1ull << (p % 64);
}

/* Keeps the backing file of n open while n has unsynced data (fd: a
 * descriptor of it, or -1 to open path). */
static void hold_fd(struct node *n, int fd, const char *path)
{
	if (n->dfd >= 0)
		return;
	if (fd >= 0) {
		/* a descriptor of its own that reads (fd may be write-only),
		 * which also works for a file unlinked meanwhile */
		char p[64];

		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		n->dfd = open(p, O_RDONLY | O_CLOEXEC);
	} else if (path)
		n->dfd = openat(pc.bfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

static uint64_t fd_size(int fd)
{
	struct stat st;

	return fd >= 0 && fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static int any_dirty(const struct node *n)
{
	for (size_t w = 0; w < n->dwords; w++)
		if (n->dirty[w])
			return 1;
	return 0;
}

static void release_fd(struct node *n)
{
	if (n->dfd >= 0 && !any_dirty(n) && !n->size_dirty) {
		close(n->dfd);
		n->dfd = -1;
	}
}

/* Sets the durable size of n (its contents cut or extended with zeros). */
static void shadow_resize(struct node *n, uint64_t size)
{
	int sfd = shadow_open(n);

	if (ftruncate(sfd, (off_t)size) < 0)
		die("resize durable contents");
	close(sfd);
	n->dsize = size;
}

/* What an fsync of file n makes durable: its unsynced pages and size.
 * keep: 0 to drop them instead (a failed fsync). */
static void file_sync(struct node *n, int keep)
{
	uint64_t size;
	int sfd;

	if (n->dfd < 0)
		return;
	size = fd_size(n->dfd);
	sfd = shadow_open(n);
	for (size_t w = 0; keep && w < n->dwords; w++) {
		for (unsigned b = 0; n->dirty[w] && b < 64; b++) {
			if (!(n->dirty[w] >> b & 1))
				continue;
			copy_pages(sfd, n->dfd, w * 64 + b, w * 64 + b, size);
		}
	}
	if (keep) {
		if (ftruncate(sfd, (off_t)size) < 0)
			die("resize durable contents");
		n->dsize = size;
		n->size_dirty = n->msize_set = 0;
	}
	close(sfd);
	memset(n->dirty, 0, n->dwords * sizeof(*n->dirty));
	release_fd(n);
}

static void dents_free(struct node *d)
{
	for (size_t i = 0; i < d->nent; i++)
		free(d->ents[i].name);
	free(d->ents);
	d->ents = NULL;
	d->nent = 0;
}

/* Opens the backing directory at path (relative to pc.bfd) for readdir;
 * NULL with errno. */
static DIR *dir_open(const char *path)
{
	int fd = openat(pc.bfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), e;
	DIR *dh;

	if (fd < 0)
		return NULL;
	dh = fdopendir(fd);
	if (!dh) {
		e = errno;
		close(fd);
		errno = e;
	}
	return dh;
}

/* Reads the live entries of directory dir (its backing path) into d's
 * durable ones. */
static void dir_snapshot(struct node *d, const char *path)
{
	DIR *dh = dir_open(path);
	struct dirent *de;
	size_t cap = 0;

	if (!dh)
		return;
	dents_free(d);
	while ((de = readdir(dh))) {
		struct stat st;
		struct node *n;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(dh), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		n = node_find(st.st_ino);
		if (!n)
			n = node_new(st.st_ino, st.st_mode);
		if (d->nent == cap) {
			cap = cap ? cap * 2 : 16;
			d->ents = realloc(d->ents, cap * sizeof(*d->ents));
			if (!d->ents)
				die("realloc");
		}
		d->ents[d->nent].name = strdup(de->d_name);
		d->ents[d->nent++].n = n;
	}
	closedir(dh);
	d->ns_dirty = 0;
}

/* Walks the live tree under path (node d), calling fn on every directory. */
static void walk_dirs(struct node *d, const char *path, void (*fn)(struct node *, const char *))
{
	DIR *dh;
	struct dirent *de;

	fn(d, path);
	dh = dir_open(path);
	if (!dh)
		return;
	while ((de = readdir(dh))) {
		char sub[PATH_MAX];
		struct node *n;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    de->d_type != DT_DIR)
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		n = node_at(sub);
		if (n)
			walk_dirs(n, sub, fn);
	}
	closedir(dh);
}

static void snapshot_if_dirty(struct node *d, const char *path)
{
	if (d->ns_dirty)
		dir_snapshot(d, path);
}

/* --rule=linux: a sync commits every change of names and of sizes made
 * by ftruncate or fallocate, on the whole file system. */
static void commit_all(void)
{
	walk_dirs(pc.root, ".", snapshot_if_dirty);
	for (struct node *n = pc.all; n; n = n->all) {
		if (n->msize_set) {
			shadow_resize(n, n->msize);
			n->msize_set = 0;
		}
	}
}

/* The directory holding path's last component. */
static struct node *parent_of(const char *path)
{
	char buf[PATH_MAX];
	char *slash;

	snprintf(buf, sizeof(buf), "%s", path);
	slash = strrchr(buf, '/');
	if (!slash || slash == buf)
		return pc.root;
	*slash = 0;
	return node_at(buf + 1);
}

static void ns_changed(const char *path)
{
	struct node *d = parent_of(path);

	if (d)
		d->ns_dirty = 1;
}

/* ------------------------------------------------------------- the cut */

/* Removes everything under the directory fd (closed). */
static void rm_tree(int fd)
{
	DIR *dh = fdopendir(fd);
	struct dirent *de;

	if (!dh)
		die("fdopendir");
	while ((de = readdir(dh))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(dh), de->d_name, 0) == 0)
			continue;
		if (errno == EISDIR || errno == EPERM) {
			int sub = openat(dirfd(dh), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

			if (sub >= 0) {
				rm_tree(sub);
				if (unlinkat(dirfd(dh), de->d_name, AT_REMOVEDIR) == 0)
					continue;
			}
		}
		die("remove backing file");
	}
	closedir(dh);
}

/* Makes the durable tree of directory d under path (relative to pc.bfd). */
static void make_tree(struct node *d, const char *path)
{
	for (size_t i = 0; i < d->nent; i++) {
		struct node *n = d->ents[i].n;
		char p[PATH_MAX];

		snprintf(p, sizeof(p), "%s/%s", path, d->ents[i].name);
		if (n->made) {
			/* a second name of a file (a directory is made once) */
			if (!S_ISDIR(n->mode) && linkat(pc.bfd, n->made, pc.bfd, p, 0) < 0)
				die("link");
			continue;
		}
		n->made = strdup(p);
		if (S_ISDIR(n->mode)) {
			if (mkdirat(pc.bfd, p, n->mode & 07777) < 0)
				die("mkdir");
			make_tree(n, p);
		} else if (S_ISLNK(n->mode)) {
			if (symlinkat(n->target ? n->target : "", pc.bfd, p) < 0)
				die("symlink");
		} else {
			char s[PATH_MAX];
			int fd;

			shadow_path(n, s, sizeof(s));
			fd = shadow_open(n); /* (made empty if never synced) */
			if (ftruncate(fd, (off_t)n->dsize) < 0)
				die("resize durable contents");
			close(fd);
			if (renameat(AT_FDCWD, s, pc.bfd, p) < 0)
				die("rename durable contents into place");
			fchmodat(pc.bfd, p, n->mode & 07777, 0);
		}
	}
}

/* At a cut with --tear: what of the unsynced state reached the disk. */
static void tear_some(struct node *d, const char *path)
{
	(void)path;
	if (d->ns_dirty && torn_survives())
		dir_snapshot(d, path);
}

static void tear_file(struct node *n)
{
	uint64_t size, dsize;
	int sfd;

	if (n->dfd < 0)
		return;
	size = fd_size(n->dfd);
	dsize = n->dsize;
	if ((n->size_dirty || n->msize_set) && torn_survives())
		dsize = size;
	sfd = shadow_open(n);
	if (ftruncate(sfd, (off_t)dsize) < 0)
		die("resize durable contents");
	n->dsize = dsize;
	for (uint64_t p = 0; p < (uint64_t)n->dwords * 64; p++)
		if (page_dirty(n, p) && p * PAGE < dsize && torn_survives())
			copy_pages(sfd, n->dfd, p, p, dsize);
	close(sfd);
}

/* Cuts the power: the backing directory becomes the durable state. */
static void power_cut(void)
{
	int fd;

	if (pc.cut)
		return;
	pc.cut = 1;
	pc.cut_ns = now_ns();
	if (pc.tear > 0) {
		if (pc.linux_rule) {
			if (torn_survives())
				commit_all();
		} else {
			walk_dirs(pc.root, ".", tear_some);
		}
		for (struct node *n = pc.all; n; n = n->all)
			tear_file(n);
	}
	for (struct node *n = pc.all; n; n = n->all) {
		if (n->dfd >= 0)
			close(n->dfd);
		n->dfd = -1;
	}
	fd = openat(pc.bfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		die("open backing directory");
	rm_tree(fd);
	make_tree(pc.root, ".");
	fd = open(pc.state, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		rm_tree(fd);
		rmdir(pc.state);
	}
	fprintf(stderr, "pcfs: power cut\n");
}

/* --------------------------------------------------- triggers and faults */

/* Whether path contains pattern s; a pattern ending in '$' must end
 * path ("spare.seg$": a rename to the spare, not from it). */
static int path_matches(const char *path, const char *s)
{
	size_t n = strlen(s), len = strlen(path);

	if (!n)
		return 1;
	if (s[n - 1] == '$')
		return len >= n - 1 && !memcmp(path + len - (n - 1), s, n - 1);
	return strstr(path, s) != NULL;
}

static int op_matches(int want, enum op op)
{
	return want == (int)op || want == OP_ANY ||
	       (want == OP_SYNC && (op == OP_FSYNC || op == OP_FSYNCDIR));
}

/*
 * Every operation that changes the backing directory calls this first:
 * counts it, and returns 0 to go on, a negative errno to fail it (a fault,
 * or a cut before it), or 1 when it is to be done and then followed by a
 * cut (op_after).
 */
static int op_begin_z(enum op op, const char *path, int zeros)
{
	struct recent *r;

	if (pc.cut)
		return -EIO;
	pc.count[op]++;
	r = &pc.recent[pc.nrecent++ % RECENT];
	r->op = op;
	r->zeros = zeros;
	r->t_ns = now_ns();
	snprintf(r->path, sizeof(r->path), "%s", path);
	if (pc.fault.on && op_matches(pc.fault.op, op) && path_matches(path, pc.fault.pat)) {
		if (pc.fault.skip) {
			pc.fault.skip--;
		} else if (pc.fault.times) {
			if (pc.fault.times > 0 && --pc.fault.times == 0)
				pc.fault.on = 0;
			pc.failed++;
			return -pc.fault.err;
		}
	}
	if (pc.trig.on && op_matches(pc.trig.op, op) && path_matches(path, pc.trig.pat) &&
	    ++pc.trig.seen == pc.trig.n) {
		pc.trig.on = 0;
		if (!pc.trig.after) {
			power_cut();
			return -EIO;
		}
		return 1;
	}
	return 0;
}

static int op_begin(enum op op, const char *path)
{
	return op_begin_z(op, path, 0);
}

/* Notes a completed fsync of path (NULL: of a file with no name left). */
static void synced_note(const char *path)
{
	struct synced *e = NULL, *oldest = &pc.synced[0];
	uint64_t t = now_ns();

	if (!path)
		return;
	for (int i = 0; i < SYNCED && !e; i++) {
		if (!strcmp(pc.synced[i].path, path))
			e = &pc.synced[i];
		else if (pc.synced[i].last_ns < oldest->last_ns)
			oldest = &pc.synced[i];
	}
	if (!e) {
		e = oldest;
		e->last_ns = 0;
		e->first_ns = t;
		snprintf(e->path, sizeof(e->path), "%s", path);
	}
	e->prev_ns = e->last_ns;
	e->last_ns = t;
}

/* Forgets the fsyncs of path: the name is gone, or now another file's. */
static void synced_forget(const char *path)
{
	for (int i = 0; i < SYNCED && path; i++)
		if (!strcmp(pc.synced[i].path, path))
			pc.synced[i] = (struct synced){ 0 };
}

/* Ends an operation op_begin returned go for: cuts the power if armed. */
static int op_end(int go, int rc)
{
	if (go == 1)
		power_cut();
	return rc;
}

static int parse_op(const char *s)
{
	for (int i = 0; i < (int)(sizeof(op_names) / sizeof(op_names[0])); i++)
		if (!strcmp(s, op_names[i]))
			return i;
	return -1;
}

/* Runs one command written to the control file. */
static int ctl_command(const char *buf, size_t len)
{
	char line[512], a[32], b[32], pat[256];
	unsigned long long n, skip;
	long long times;
	int err, op;
	double p;

	if (len >= sizeof(line))
		return -EINVAL;
	memcpy(line, buf, len);
	line[len] = 0;
	line[strcspn(line, "\r\n")] = 0;
	pat[0] = 0;
	if (!strcmp(line, "cut")) {
		power_cut();
		return 0;
	}
	if (sscanf(line, "arm %31s %31s %llu %255s", a, b, &n, pat) >= 3) {
		op = parse_op(b);
		if (op < 0 || (strcmp(a, "before") && strcmp(a, "after")) || !n)
			return -EINVAL;
		memset(&pc.trig, 0, sizeof(pc.trig));
		pc.trig.on = 1;
		pc.trig.op = op;
		pc.trig.n = n;
		pc.trig.after = !strcmp(a, "after");
		snprintf(pc.trig.pat, sizeof(pc.trig.pat), "%s", pat);
		return 0;
	}
	if (!strcmp(line, "disarm")) {
		pc.trig.on = 0;
		pc.fault.on = 0;
		return 0;
	}
	if (sscanf(line, "fail %31s %llu %lld %d %255s", a, &skip, &times, &err, pat) >= 4) {
		op = parse_op(a);
		if (op < 0 || err <= 0 || !times)
			return -EINVAL;
		memset(&pc.fault, 0, sizeof(pc.fault));
		pc.fault.on = 1;
		pc.fault.op = op;
		pc.fault.skip = skip;
		pc.fault.times = times;
		pc.fault.err = err;
		snprintf(pc.fault.pat, sizeof(pc.fault.pat), "%s", pat);
		return 0;
	}
	if (sscanf(line, "tear %lf", &p) == 1 && p >= 0 && p <= 1) {
		pc.tear = p;
		return 0;
	}
	if (sscanf(line, "seed %llu", &n) == 1) {
		pc.rng = n ? n : 1;
		return 0;
	}
	if (sscanf(line, "rule %31s", a) == 1 && (!strcmp(a, "posix") || !strcmp(a, "linux"))) {
		pc.linux_rule = !strcmp(a, "linux");
		return 0;
	}
	return -EINVAL;
}

/* The status the control file reads: the state, the cut's time, the
 * count of each kind of operation, the most recent ones, oldest first
 * ("recent OP T_NS ZEROS PATH"), and the times of the first and the last
 * two fsyncs of each file ("synced FIRST_NS PREV_NS LAST_NS PATH"). */
static void ctl_status(void)
{
	size_t cap = sizeof(pc.ctl_out), n;
	uint64_t from = pc.nrecent > RECENT ? pc.nrecent - RECENT : 0;

	n = (size_t)snprintf(pc.ctl_out, cap, "%s\ncut_at %" PRIu64 "\nfailed %" PRIu64 "\n",
			     pc.cut ? "cut" : pc.trig.on ? "armed" : "running", pc.cut_ns,
			     pc.failed);
	for (int i = 0; i < OP_N && n < cap; i++)
		n += (size_t)snprintf(pc.ctl_out + n, cap - n, "%s %" PRIu64 "\n", op_names[i],
				      pc.count[i]);
	for (uint64_t i = from; i < pc.nrecent && n < cap; i++) {
		const struct recent *r = &pc.recent[i % RECENT];

		n += (size_t)snprintf(pc.ctl_out + n, cap - n, "recent %s %" PRIu64 " %d %s\n",
				      op_names[r->op], r->t_ns, r->zeros, r->path);
	}
	for (int i = 0; i < SYNCED && n < cap; i++)
		if (pc.synced[i].last_ns)
			n += (size_t)snprintf(pc.ctl_out + n, cap - n,
					      "synced %" PRIu64 " %" PRIu64 " %" PRIu64 " %s\n",
					      pc.synced[i].first_ns, pc.synced[i].prev_ns,
					      pc.synced[i].last_ns, pc.synced[i].path);
}

/* ---------------------------------------------------- FUSE operations */

struct fh {
	int fd;
	struct node *n;
	int dsync; /* opened with O_SYNC or O_DSYNC */
};

static struct fh *fh_of(struct fuse_file_info *fi)
{
	return fi && fi->fh != CTL_FH ? (struct fh *)(uintptr_t)fi->fh : NULL;
}

static int is_ctl(const char *path)
{
	return !strcmp(path, CTL_NAME);
}

static int pc_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);

	if (is_ctl(path)) {
		memset(st, 0, sizeof(*st));
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = sizeof(pc.ctl_out);
		return 0;
	}
	/* (the root stays visible after a cut, so that tools looking for the
	 * mount find it and unmount it) */
	if (pc.cut && strcmp(path, "/"))
		return -EIO;
	if (h ? fstat(h->fd, st) : fstatat(pc.bfd, rel(path), st, AT_SYMLINK_NOFOLLOW))
		return -errno;
	return 0;
}

static int pc_access(const char *path, int mask)
{
	if (is_ctl(path))
		return 0;
	if (pc.cut)
		return -EIO;
	return faccessat(pc.bfd, rel(path), mask, AT_SYMLINK_NOFOLLOW) ? -errno : 0;
}

static int pc_readlink(const char *path, char *buf, size_t size)
{
	ssize_t n;

	if (pc.cut)
		return -EIO;
	n = readlinkat(pc.bfd, rel(path), buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return 0;
}

static int pc_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	DIR *dh;
	struct dirent *de;

	(void)off;
	(void)fi;
	(void)flags;
	if (pc.cut)
		return -EIO;
	dh = dir_open(rel(path));
	if (!dh)
		return -errno;
	while ((de = readdir(dh))) {
		struct stat st;

		memset(&st, 0, sizeof(st));
		st.st_ino = de->d_ino;
		st.st_mode = (mode_t)de->d_type << 12;
		if (fill(buf, de->d_name, &st, 0, 0))
			break;
	}
	closedir(dh);
	return 0;
}

static int pc_mkdir(const char *path, mode_t mode)
{
	int go = op_begin(OP_MKDIR, path), rc;

	if (go < 0)
		return go;
	rc = mkdirat(pc.bfd, rel(path), mode) ? -errno : 0;
	if (rc == 0) {
		node_at(rel(path));
		ns_changed(path);
	}
	return op_end(go, rc);
}

/* Before a name that may be a file's last goes: the node is detached. */
static struct node *last_name(const char *path)
{
	struct stat st;
	struct node *n;

	if (fstatat(pc.bfd, rel(path), &st, AT_SYMLINK_NOFOLLOW) < 0)
		return NULL;
	n = node_find(st.st_ino);
	return n && (S_ISDIR(st.st_mode) || st.st_nlink <= 1) ? n : NULL;
}

/* unlink or rmdir (flags 0 or AT_REMOVEDIR): the name is gone from the
 * live directory, and from the durable one once it is synced. */
static int remove_name(const char *path, enum op op, int flags)
{
	int go = op_begin(op, path), rc;
	struct node *n;

	if (go < 0)
		return go;
	n = last_name(path);
	rc = unlinkat(pc.bfd, rel(path), flags) ? -errno : 0;
	if (rc == 0) {
		if (n)
			node_detach(n);
		ns_changed(path);
	}
	return op_end(go, rc);
}

static int pc_unlink(const char *path)
{
	synced_forget(path);
	return remove_name(path, OP_UNLINK, 0);
}

static int pc_rmdir(const char *path)
{
	return remove_name(path, OP_RMDIR, AT_REMOVEDIR);
}

static int pc_symlink(const char *target, const char *path)
{
	int go = op_begin(OP_CREATE, path), rc;

	if (go < 0)
		return go;
	rc = symlinkat(target, pc.bfd, rel(path)) ? -errno : 0;
	if (rc == 0) {
		struct node *n = node_at(rel(path));

		if (n) {
			free(n->target);
			n->target = strdup(target);
		}
		ns_changed(path);
	}
	return op_end(go, rc);
}

static int pc_rename(const char *from, const char *to, unsigned int flags)
{
	char both[2 * PATH_MAX + 2];
	struct node *over;
	int go, rc;

	/* (triggers and the status see "FROM>TO") */
	snprintf(both, sizeof(both), "%s>%s", from, to);
	go = op_begin(OP_RENAME, both);
	if (go < 0)
		return go;
	if (flags & RENAME_EXCHANGE)
		return op_end(go, -EINVAL);
	synced_forget(from);
	synced_forget(to);
	over = last_name(to);
	rc = renameat2(pc.bfd, rel(from), pc.bfd, rel(to), flags) ? -errno : 0;
	if (rc == 0) {
		if (over)
			node_detach(over);
		ns_changed(from);
		ns_changed(to);
	}
	return op_end(go, rc);
}

static int pc_link(const char *from, const char *to)
{
	int go = op_begin(OP_CREATE, to), rc;

	if (go < 0)
		return go;
	rc = linkat(pc.bfd, rel(from), pc.bfd, rel(to), 0) ? -errno : 0;
	if (rc == 0)
		ns_changed(to);
	return op_end(go, rc);
}

static int pc_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);
	struct node *n;
	int rc;

	if (is_ctl(path))
		return 0;
	if (pc.cut)
		return -EIO;
	rc = (h ? fchmod(h->fd, mode) : fchmodat(pc.bfd, rel(path), mode, 0)) ? -errno : 0;
	n = h ? h->n : node_at(rel(path));
	if (rc == 0 && n)
		n->mode = (n->mode & S_IFMT) | (mode & 07777);
	return rc;
}

static int pc_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);

	if (is_ctl(path))
		return 0;
	if (pc.cut)
		return -EIO;
	if (h ? fchown(h->fd, uid, gid) : fchownat(pc.bfd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW))
		return -errno;
	return 0;
}

/* A size change of n from old to now: the pages between are unsynced. */
static void size_changed(struct node *n, uint64_t old, uint64_t now, int meta)
{
	if (old == now)
		return;
	mark_pages(n, old < now ? old : now, old < now ? now - old : old - now);
	n->size_dirty = 1;
	if (meta) {
		n->msize_set = 1;
		n->msize = now;
	}
}

static int pc_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);
	struct node *n;
	uint64_t old;
	int go, rc, fd;

	if (is_ctl(path))
		return 0;
	go = op_begin(OP_TRUNCATE, path);
	if (go < 0)
		return go;
	n = h ? h->n : node_at(rel(path));
	if (!n)
		return op_end(go, -errno);
	hold_fd(n, h ? h->fd : -1, rel(path));
	fd = n->dfd;
	old = fd_size(fd);
	if (h) {
		rc = ftruncate(h->fd, size) ? -errno : 0;
	} else {
		int wfd = openat(pc.bfd, rel(path), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);

		rc = wfd < 0 || ftruncate(wfd, size) ? -errno : 0;
		if (wfd >= 0)
			close(wfd);
	}
	if (rc == 0)
		size_changed(n, old, (uint64_t)size, 1);
	release_fd(n);
	return op_end(go, rc);
}

static int fh_make(struct fuse_file_info *fi, int fd, struct node *n)
{
	struct fh *h = malloc(sizeof(*h));

	if (!h) {
		close(fd);
		return -ENOMEM;
	}
	h->fd = fd;
	h->n = n;
	h->dsync = (fi->flags & (O_SYNC | O_DSYNC)) != 0;
	fi->fh = (uint64_t)(uintptr_t)h;
	/* the page cache stays on (mmap needs it); the kernel's copy is
	 * dropped at each open, as the data may have changed meanwhile */
	fi->direct_io = 0;
	fi->keep_cache = 0;
	return 0;
}

static int pc_open(const char *path, struct fuse_file_info *fi)
{
	struct node *n;
	uint64_t old;
	int fd, go = 0;

	if (is_ctl(path)) {
		ctl_status();
		fi->fh = CTL_FH;
		fi->direct_io = 1;
		return 0;
	}
	if (pc.cut)
		return -EIO;
	if (fi->flags & O_TRUNC) {
		go = op_begin(OP_TRUNCATE, path);
		if (go < 0)
			return go;
	}
	n = node_at(rel(path));
	old = n ? n->dsize : 0;
	if (n && (fi->flags & O_TRUNC)) {
		hold_fd(n, -1, rel(path));
		old = fd_size(n->dfd);
	}
	fd = openat(pc.bfd, rel(path), (fi->flags & ~(O_CREAT | O_EXCL | O_NOCTTY)) | O_CLOEXEC);
	if (fd < 0)
		return op_end(go, -errno);
	if (!n)
		n = node_at(rel(path));
	if (!n) {
		close(fd);
		return op_end(go, -EIO);
	}
	if (fi->flags & O_TRUNC) {
		size_changed(n, old, 0, 1);
		release_fd(n);
	}
	return op_end(go, fh_make(fi, fd, n));
}

static int pc_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	int go = op_begin(OP_CREATE, path), fd, existed;
	struct stat st;
	struct node *n;

	if (go < 0)
		return go;
	existed = fstatat(pc.bfd, rel(path), &st, AT_SYMLINK_NOFOLLOW) == 0;
	fd = openat(pc.bfd, rel(path), fi->flags | O_CREAT | O_CLOEXEC, mode);
	if (fd < 0)
		return op_end(go, -errno);
	n = node_at(rel(path));
	if (!n) {
		close(fd);
		return op_end(go, -EIO);
	}
	if (!existed)
		ns_changed(path);
	return op_end(go, fh_make(fi, fd, n));
}

static int pc_read(const char *path, char *buf, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);
	ssize_t n;

	if (fi->fh == CTL_FH) {
		size_t len = strlen(pc.ctl_out);

		(void)path;
		if ((size_t)off >= len)
			return 0;
		if (size > len - (size_t)off)
			size = len - (size_t)off;
		memcpy(buf, pc.ctl_out + off, size);
		return (int)size;
	}
	if (pc.cut)
		return -EIO;
	n = pread(h->fd, buf, size, off);
	return n < 0 ? -errno : (int)n;
}

static int all_zeros(const char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i])
			return 0;
	return 1;
}

static int pc_write(const char *path, const char *buf, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);
	uint64_t old;
	ssize_t n;
	int go;

	if (fi->fh == CTL_FH)
		return ctl_command(buf, size) ? -EINVAL : (int)size;
	go = op_begin_z(OP_WRITE, path, all_zeros(buf, size));
	if (go < 0)
		return go;
	hold_fd(h->n, h->fd, NULL);
	old = fd_size(h->fd);
	n = pwrite(h->fd, buf, size, off);
	if (n < 0)
		return op_end(go, -errno);
	mark_pages(h->n, (uint64_t)off, (uint64_t)n);
	if ((uint64_t)off + (uint64_t)n > old)
		size_changed(h->n, old, (uint64_t)off + (uint64_t)n, 0);
	if (h->dsync)
		file_sync(h->n, 1);
	return op_end(go, (int)n);
}

static int pc_statfs(const char *path, struct statvfs *st)
{
	(void)path;
	if (pc.cut)
		return -EIO;
	return fstatvfs(pc.bfd, st) ? -errno : 0;
}

static int pc_release(const char *path, struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);

	(void)path;
	if (h) {
		close(h->fd);
		free(h);
	}
	return 0;
}

static int pc_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);
	int go;

	(void)datasync;
	if (fi->fh == CTL_FH)
		return 0;
	go = op_begin(OP_FSYNC, path);
	if (go < 0) {
		/* a failed fsync loses what it was to write (as Linux's page
		 * cache marks those pages clean) */
		if (!pc.cut && h)
			file_sync(h->n, 0);
		return go;
	}
	if (h)
		file_sync(h->n, 1);
	if (pc.linux_rule)
		commit_all();
	synced_note(path);
	return op_end(go, 0);
}

static int pc_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
	int go = op_begin(OP_FSYNCDIR, path);
	struct node *d;

	(void)datasync;
	(void)fi;
	if (go < 0)
		return go;
	if (pc.linux_rule) {
		commit_all();
	} else {
		d = node_at(rel(path));
		if (d)
			dir_snapshot(d, rel(path));
	}
	return op_end(go, 0);
}

static int pc_fallocate(const char *path, int mode, off_t off, off_t len,
			struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);
	uint64_t old;
	int go = op_begin(OP_FALLOCATE, path), rc;

	if (go < 0)
		return go;
	if (!h)
		return op_end(go, -EBADF);
	hold_fd(h->n, h->fd, NULL);
	old = fd_size(h->fd);
	rc = fallocate(h->fd, mode, off, len) ? -errno : 0;
	if (rc == 0) {
		uint64_t now = fd_size(h->fd);

		/* punched or zeroed ranges change the data */
		if (mode & ~FALLOC_FL_KEEP_SIZE)
			mark_pages(h->n, (uint64_t)off, (uint64_t)len);
		size_changed(h->n, old, now, 1);
	}
	release_fd(h->n);
	return op_end(go, rc);
}

static int pc_utimens(const char *path, const struct timespec tv[2],
		      struct fuse_file_info *fi)
{
	struct fh *h = fh_of(fi);

	if (is_ctl(path))
		return 0;
	if (pc.cut)
		return -EIO;
	if (h ? futimens(h->fd, tv) : utimensat(pc.bfd, rel(path), tv, AT_SYMLINK_NOFOLLOW))
		return -errno;
	return 0;
}

static void *pc_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	/* an unlinked file that is still open keeps working through its
	 * descriptor instead of being renamed to a hidden name */
	cfg->hard_remove = 1;
	cfg->use_ino = 0;
	cfg->direct_io = 0;
	cfg->kernel_cache = 0;
	cfg->auto_cache = 0;
	return NULL;
}

static const struct fuse_operations pc_ops = {
	.init = pc_init,
	.getattr = pc_getattr,
	.access = pc_access,
	.readlink = pc_readlink,
	.readdir = pc_readdir,
	.mkdir = pc_mkdir,
	.unlink = pc_unlink,
	.rmdir = pc_rmdir,
	.symlink = pc_symlink,
	.rename = pc_rename,
	.link = pc_link,
	.chmod = pc_chmod,
	.chown = pc_chown,
	.truncate = pc_truncate,
	.open = pc_open,
	.create = pc_create,
	.read = pc_read,
	.write = pc_write,
	.statfs = pc_statfs,
	.release = pc_release,
	.fsync = pc_fsync,
	.fsyncdir = pc_fsyncdir,
	.fallocate = pc_fallocate,
	.utimens = pc_utimens,
};

/* ------------------------------------------------------------- startup */

/* The durable state at mount: everything in the backing directory. */
static void scan_dir(struct node *d, const char *path)
{
	DIR *dh = dir_open(path);
	struct dirent *de;

	if (!dh)
		die("open backing directory");
	while ((de = readdir(dh))) {
		char p[PATH_MAX];
		struct node *n;
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
		if (fstatat(pc.bfd, p, &st, AT_SYMLINK_NOFOLLOW) < 0)
			die("stat backing file");
		if (node_find(st.st_ino))
			continue; /* (a second name: dir_snapshot records it) */
		n = node_new(st.st_ino, st.st_mode);
		if (S_ISDIR(st.st_mode)) {
			scan_dir(n, p);
		} else if (S_ISLNK(st.st_mode)) {
			char t[PATH_MAX];
			ssize_t len = readlinkat(pc.bfd, p, t, sizeof(t) - 1);

			t[len > 0 ? len : 0] = 0;
			n->target = strdup(t);
		} else if (S_ISREG(st.st_mode)) {
			int src = openat(pc.bfd, p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), sfd;

			if (src < 0)
				die("open backing file");
			sfd = shadow_open(n);
			copy_pages(sfd, src, 0, ((uint64_t)st.st_size + PAGE - 1) / PAGE,
				   (uint64_t)st.st_size);
			if (ftruncate(sfd, st.st_size) < 0)
				die("resize durable contents");
			close(sfd);
			close(src);
			n->dsize = (uint64_t)st.st_size;
		}
	}
	closedir(dh);
	dir_snapshot(d, path);
}

struct pc_opts {
	char *rule, *tear, *seed, *state;
};

static const struct fuse_opt pc_optspec[] = {
	{ "--rule=%s", offsetof(struct pc_opts, rule), 0 },
	{ "--tear=%s", offsetof(struct pc_opts, tear), 0 },
	{ "--seed=%s", offsetof(struct pc_opts, seed), 0 },
	{ "--state=%s", offsetof(struct pc_opts, state), 0 },
	FUSE_OPT_END,
};

static int pc_arg(void *data, const char *arg, int key, struct fuse_args *out)
{
	(void)out;
	if (key == FUSE_OPT_KEY_NONOPT && !pc.backing) {
		pc.backing = realpath(arg, NULL);
		if (!pc.backing)
			die(arg);
		return 0; /* consumed: the next one is the mount point */
	}
	(void)data;
	return 1;
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct pc_opts o = { 0 };
	struct stat st;
	int rc;

	if (fuse_opt_parse(&args, &o, pc_optspec, pc_arg) < 0 || !pc.backing) {
		fprintf(stderr, "usage: pcfs [--rule=posix|linux] [--tear=P] [--seed=N]"
			" [--state=DIR] BACKING MOUNTPOINT [FUSE options]\n");
		return 2;
	}
	pc.linux_rule = o.rule && !strcmp(o.rule, "linux");
	if (o.rule && !pc.linux_rule && strcmp(o.rule, "posix")) {
		fprintf(stderr, "pcfs: --rule is posix or linux\n");
		return 2;
	}
	pc.tear = o.tear ? strtod(o.tear, NULL) : 0;
	pc.rng = o.seed ? strtoull(o.seed, NULL, 10) : (uint64_t)getpid();
	if (!pc.rng)
		pc.rng = 1;
	if (o.state) {
		pc.state = o.state;
	} else if (asprintf(&pc.state, "%s.pcfs", pc.backing) < 0) {
		die("asprintf");
	}
	if (mkdir(pc.state, 0700) < 0) {
		fprintf(stderr, "pcfs: cannot make the state directory %s: %s\n", pc.state,
			strerror(errno));
		return 1;
	}
	pc.bfd = open(pc.backing, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pc.bfd < 0 || fstat(pc.bfd, &st) < 0)
		die(pc.backing);
	pc.tabn = 4093;
	pc.tab = calloc(pc.tabn, sizeof(*pc.tab));
	if (!pc.tab)
		die("calloc");
	pc.root = node_new(st.st_ino, st.st_mode);
	scan_dir(pc.root, ".");
	/* one thread: each operation runs alone (see the top) */
	fuse_opt_add_arg(&args, "-s");
	rc = fuse_main(args.argc, args.argv, &pc_ops, NULL);
	fuse_opt_free_args(&args);
	return rc;
}
