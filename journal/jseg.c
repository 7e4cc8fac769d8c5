/*
 * jseg.c: segment files: their names, the loop's list of them (with the
 * ids of the ADD records each holds, for checkpoints), the size of the
 * next one, opening one for reading, writing and syncing through the jio
 * seam (and failing the journal when that fails), and unlinking a dead one
 * without stalling the core.  See jpriv.h for which thread calls what.
 */
#include "jpriv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/log.h"
#include "jio.h"

#define UNLINK_STEP (2u << 20) /* truncation step of a dead segment */

void jseg_name(char *buf, size_t n, uint32_t seg)
{
	snprintf(buf, n, "%08" PRIu32 ".seg", seg);
}

int jseg_parse(const char *name, uint32_t *seg)
{
	char *end;
	unsigned long v;

	if (name[0] < '0' || name[0] > '9')
		return 0;
	errno = 0;
	v = strtoul(name, &end, 10);
	if (errno || strcmp(end, ".seg") != 0 || v == 0 || v > UINT32_MAX)
		return 0;
	*seg = (uint32_t)v;
	return 1;
}

char *jseg_path(const struct journal *j, uint32_t seg)
{
	char *p;

	if (asprintf(&p, "%s/%08" PRIu32 ".seg", j->dir, seg) < 0)
		return NULL;
	return p;
}

int jseg_write_all(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;

	while (n) {
		ssize_t r = jio.pwrite(fd, p, n, (off_t)off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = EIO;
			return -1;
		}
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int jseg_writev_all(int fd, struct iovec *iov, int cnt, uint64_t off, int flags)
{
	while (cnt > 0) {
		ssize_t r = jio.pwritev(fd, iov, cnt, (off_t)off, flags);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = EIO;
			return -1;
		}
		off += (uint64_t)r;
		while (cnt > 0 && (size_t)r >= iov->iov_len) {
			r -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + r;
			iov->iov_len -= (size_t)r;
		}
	}
	return 0;
}

int jseg_add(struct journal *j, uint32_t num, uint64_t size)
{
	if (jgrow((void **)&j->loop.segs, &j->loop.segcap, j->loop.nseg + 1,
		  sizeof(*j->loop.segs)) < 0)
		return TERN_ENOMEM;
	j->loop.segs[j->loop.nseg].num = num;
	j->loop.segs[j->loop.nseg].size = size;
	j->loop.segs[j->loop.nseg].end = 0;
	j->loop.segs[j->loop.nseg].lost = 0;
	j->loop.segs[j->loop.nseg].kcur = 0;
	j->loop.segs[j->loop.nseg].klast = 0;
	j->loop.segs[j->loop.nseg].unordered = 0;
	j->loop.segs[j->loop.nseg].learn = 0;
	j->loop.segs[j->loop.nseg].plast = 0;
	j->loop.nseg++;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int jseg_list(struct journal *j)
{
	DIR *d = opendir(j->dir);
	struct dirent *de;
	uint32_t *nums = NULL, seg;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (!d)
		return TERN_ESYS;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, SPARE_NAME)) {
			struct stat st;

			if (fstatat(dirfd(d), SPARE_NAME, &st, 0) == 0)
				spare_bytes_set(j, (uint64_t)st.st_size);
			continue;
		}
		if (!jseg_parse(de->d_name, &seg))
			continue;
		if (jgrow((void **)&nums, &cap, n + 1, sizeof(*nums)) < 0) {
			rc = TERN_ENOMEM;
			break;
		}
		nums[n++] = seg;
	}
	closedir(d);
	if (rc == 0) {
		if (n)
			qsort(nums, n, sizeof(*nums), cmp_u32);
		for (size_t i = 0; i < n && rc == 0; i++) {
			struct stat st;
			char path[JPATH_MAX];

			jpath_seg(j, nums[i], path);
			if (stat(path, &st) < 0) {
				if (errno == ENOENT)
					continue;
				rc = TERN_ESYS;
				jseg_log_read_error(j, nums[i], rc);
				break;
			}
			/* never skipped (its items would be dropped, and the
			 * file with them at the next checkpoint) */
			if (!S_ISREG(st.st_mode)) {
				errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
				rc = TERN_ESYS;
				jseg_log_read_error(j, nums[i], rc);
				break;
			}
			rc = jseg_add(j, nums[i], (uint64_t)st.st_size);
			if (rc == 0) /* (its ids are not known yet) */
				j->loop.segs[j->loop.nseg - 1].learn = 1;
			if (nums[i] > j->loop.last_seg)
				j->loop.last_seg = j->loop.prev_seg = nums[i];
		}
	}
	free(nums);
	return rc;
}

struct jseg *jseg_find(struct journal *j, uint32_t seg)
{
	for (size_t i = j->loop.nseg; i-- > 0;)
		if (j->loop.segs[i].num == seg)
			return &j->loop.segs[i];
	return NULL;
}

/* The segment that holds pos, NULL if none does (the current one first:
 * most calls are for it). */
static struct jseg *seg_of(struct journal *j, uint64_t pos)
{
	if (j->loop.nseg && j->loop.segs[j->loop.nseg - 1].num == JPOS_SEG(pos))
		return &j->loop.segs[j->loop.nseg - 1];
	return jseg_find(j, JPOS_SEG(pos));
}

/* An ADD of id in s, after every ADD noted there before it. */
static void note_add(struct jseg *s, uint64_t id)
{
	if (s->klast && id <= s->klast)
		s->unordered = 1;
	if (!s->klast || id < s->kcur)
		s->kcur = id;
	if (id > s->klast)
		s->klast = id;
}

void jseg_note_add(struct journal *j, uint64_t pos, uint64_t id)
{
	struct jseg *s = seg_of(j, pos);

	if (s)
		note_add(s, id);
}

void jseg_note_index(struct journal *j, uint64_t pos, uint64_t id)
{
	struct jseg *s = seg_of(j, pos);

	if (!s)
		return;
	if (s->learn) {
		/* a segment found at open: recovery's load, then read-behind,
		 * take its items in file order (but compaction's copies, which
		 * recovery loads last: out of order, so unordered) */
		if (pos <= s->plast)
			s->unordered = 1;
		s->plast = pos;
		note_add(s, id);
		return;
	}
	if (id > s->klast) /* (its ADD was not noted: never for a segment made while running) */
		s->unordered = 1;
	if (id < s->kcur)
		s->kcur = id;
}

int jseg_lost(struct journal *j, uint32_t seg)
{
	struct jseg *s = jseg_find(j, seg);

	return s && s->lost;
}

uint32_t jseg_next_after(struct journal *j, uint32_t seg)
{
	for (size_t i = 0; i < j->loop.nseg; i++)
		if (j->loop.segs[i].num > seg)
			return j->loop.segs[i].num;
	return 0;
}

uint64_t jseg_target(struct journal *j, const struct journal_opts *o)
{
	return jseg_capped(__atomic_load_n(&j->atom.next_size, __ATOMIC_ACQUIRE), o);
}

void jseg_target_init(struct journal *j)
{
	uint64_t s = j->loop.opts.segment_size;

	__atomic_store_n(&j->atom.next_size, s < FIRST_SEG_SIZE ? s : FIRST_SEG_SIZE,
			 __ATOMIC_RELEASE);
}

int jseg_reader_open(struct journal *j, uint32_t seg, struct jreader *rd,
		     struct journal_recovery *rec)
{
	char *p = jseg_path(j, seg);
	int rc, e;

	if (!p)
		return TERN_ENOMEM;
	rc = jreader_open_as(rd, p, seg);
	e = errno;
	switch (rc) {
	case 0:
		break;
	case JREADER_HDR_EMPTY:
		/* made, and the process died before its first write: nothing
		 * in it (its records, if any, are read all the same) */
		rc = 0;
		break;
	case JREADER_HDR_DAMAGED:
		log_warn("journal: queue %s: segment %s: damaged header; reading its"
			" records as segment %u", j->name, p, seg);
		j->loop.corrupt_seen++;
		if (rec)
			rec->corrupt_records++;
		rc = 0;
		break;
	case TERN_ESYS:
		log_error("journal: queue %s: cannot read segment %s: %s", j->name, p,
			strerror(e));
		break;
	case TERN_ECORRUPT:
		log_error("journal: queue %s: segment %s has another segment's number in"
			" its header (a misplaced file?)", j->name, p);
		break;
	default:
		log_error("journal: queue %s: segment %s: %s", j->name, p,
			tern_strerror(rc));
		break;
	}
	free(p);
	errno = e;
	return rc;
}

void jseg_log_read_error(struct journal *j, uint32_t seg, int rc)
{
	int e = errno;
	char *p = jseg_path(j, seg);

	log_error("journal: queue %s: cannot read segment %s: %s", j->name,
		p ? p : "?", rc == TERN_ESYS ? strerror(e) : tern_strerror(rc));
	free(p);
	errno = e;
}

void jseg_log_damage(struct journal *j, struct jreader *rd,
		     struct journal_recovery *rec, int rc)
{
	if (rc == JREAD_TORN) {
		log_warn("journal: queue %s: segment %08u: torn write at offset %" PRIu64
			 " (part of a write a power cut left, never synced): the segment's"
			 " records end there", j->name, rd->seg, rd->dmg_off);
		return;
	}
	log_warn("journal: queue %s: segment %08u: damaged data at offset %" PRIu64
		" (%" PRIu64 " bytes skipped)",
		j->name, rd->seg, rd->dmg_off, rd->dmg_len);
	if (rec) {
		rec->corrupt_records++;
		rec->corrupt_bytes += rd->dmg_len;
	}
}

/*
 * Unlinks a dead segment in steps.  Unlinking a file frees every page of
 * it still in the page cache in one go, tens of milliseconds of CPU for a
 * full segment, and a kernel built without preemption (PREEMPT_NONE) does
 * not interrupt that work, so the loop and the writer, when they share the
 * core, would wait that long.  Truncating the file UNLINK_STEP at a time
 * and yielding between steps bounds each stretch to about a millisecond.
 * A crash halfway leaves a shortened dead segment, which opening the
 * journal deletes like any segment older than the checkpoint's oldest
 * live one.
 */
void jseg_unlink_gently(struct journal *j, uint32_t seg)
{
	char path[JPATH_MAX];
	int fd;

	jpath_seg(j, seg, path);
	fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd >= 0) {
		struct stat st;

		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
			off_t size = st.st_size;

			while (size > (off_t)UNLINK_STEP) {
				size -= (off_t)UNLINK_STEP;
				if (ftruncate(fd, size) < 0)
					break;
				sched_yield();
			}
		}
		close(fd);
	}
	unlink(path);
}

static int no_fds(int e)
{
	return e == EMFILE || e == ENFILE;
}

int jseg_open(struct jenv *env, const char *path, int flags, mode_t mode)
{
	unsigned pause_ms = 1, waits = 0;
	int64_t t0 = 0;
	int fd;

	while ((fd = jio.openat(AT_FDCWD, path, flags, mode)) < 0 && no_fds(errno)) {
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)pause_ms * 1000000 };

		if (!waits++) {
			t0 = mono_ms();
			log_warn("journal: out of file descriptors (%s): waiting up to %d s for"
				 " one to write or sync", strerror(errno), JSEG_FD_WAIT_MS / 1000);
		} else if (mono_ms() - t0 >= JSEG_FD_WAIT_MS) {
			return -1; /* (errno: EMFILE or ENFILE) */
		}
		nanosleep(&ts, NULL);
		pause_ms = pause_ms * 2 > 100 ? 100 : pause_ms * 2;
	}
	if (waits) {
		int e = errno;

		log_info("journal: a file descriptor was free again after %lld ms",
			 (long long)(mono_ms() - t0));
		errno = e;
	}
	return fd;
}

int jseg_sync_dir(struct journal *j)
{
	int fd = jseg_open(j->env, j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	int rc, e;

	if (fd < 0)
		return -1;
	rc = jstat_fdatasync(j->env, fd);
	e = errno;
	close(fd);
	errno = e;
	return rc;
}

void jseg_drop_cached(int fd, uint64_t *mark, uint64_t upto, uint64_t lag)
{
	uint64_t end = upto & ~(uint64_t)(JALIGN_BLOCK - 1);

	end = end > lag ? end - lag : 0;
	if (end <= *mark || (lag && end - *mark < DROP_STEP))
		return;
	/* advice: a failure (EINVAL on a file system without a page cache)
	 * leaves the pages where they are; len 0 is up to the end */
	(void)posix_fadvise(fd, (off_t)*mark, upto == JDROP_ALL ? 0 : (off_t)(end - *mark),
			    POSIX_FADV_DONTNEED);
	*mark = end;
}

/* ----------------------------------------- the segment descriptor cache */

/* The cache holds at most this many descriptors, a quarter of
 * RLIMIT_NOFILE within these bounds: the rest is for connections, and
 * re-opening a segment costs one open(2) when a queue that was quiet
 * writes again. */
#define WFD_CACHE_MIN 16
#define WFD_CACHE_MAX 1024

void jseg_wfd_init(struct jenv *env)
{
	struct rlimit rl;
	rlim_t cap = WFD_CACHE_MAX;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 4 < cap)
		cap = rl.rlim_cur / 4;
	env->fdc.cap = cap < WFD_CACHE_MIN ? WFD_CACHE_MIN : (unsigned)cap;
}

static void wfd_unlink(struct jenv *env, struct journal *j)
{
	if (j->w.lru_prev)
		j->w.lru_prev->w.lru_next = j->w.lru_next;
	else
		env->fdc.head = j->w.lru_next;
	if (j->w.lru_next)
		j->w.lru_next->w.lru_prev = j->w.lru_prev;
	else
		env->fdc.tail = j->w.lru_prev;
	j->w.lru_prev = j->w.lru_next = NULL;
}

static void wfd_push(struct jenv *env, struct journal *j)
{
	j->w.lru_prev = NULL;
	j->w.lru_next = env->fdc.head;
	if (env->fdc.head)
		env->fdc.head->w.lru_prev = j;
	else
		env->fdc.tail = j;
	env->fdc.head = j;
}

void jseg_wfd_close(struct journal *j)
{
	if (j->w.fd < 0)
		return;
	close(j->w.fd);
	j->w.fd = -1;
	wfd_unlink(j->env, j);
	j->env->fdc.n--;
}

void jseg_wfd_set(struct journal *j, int fd)
{
	struct jenv *env = j->env;

	jseg_wfd_close(j);
	/* Closing a segment's descriptor loses nothing: what was written is
	 * in the page cache, and a sync through a descriptor opened later
	 * covers it (and reports a writeback error no one has seen). */
	while (env->fdc.n >= env->fdc.cap && env->fdc.tail)
		jseg_wfd_close(env->fdc.tail);
	j->w.fd = fd;
	wfd_push(env, j);
	env->fdc.n++;
}

int jseg_wfd(struct journal *j)
{
	char path[JPATH_MAX];
	int fd, flags;

	if (j->w.fd >= 0) {
		if (j->env->fdc.head != j) {
			wfd_unlink(j->env, j);
			wfd_push(j->env, j);
		}
		return j->w.fd;
	}
	if (!j->w.seg) {
		errno = EBADF;
		return -1;
	}
	jpath_seg(j, j->w.seg, path);
	flags = O_RDWR | O_CLOEXEC;
	fd = jio.openat(AT_FDCWD, path, flags, 0);
	/* out of descriptors: the cache's own first (j's is not among them:
	 * it is closed) */
	while (fd < 0 && no_fds(errno) && j->env->fdc.n > JSEG_WFD_KEEP) {
		jseg_wfd_close(j->env->fdc.tail);
		fd = jio.openat(AT_FDCWD, path, flags, 0);
	}
	if (fd < 0 && no_fds(errno))
		fd = jseg_open(j->env, path, flags, 0);
	if (fd < 0)
		return -1;
	jseg_wfd_set(j, fd);
	return fd;
}

void jfail(struct journal *j, const char *what, int e)
{
	if (!failed_get(j))
		log_error("journal: queue %s: %s failed: %s; journal is now failed",
			j->name, what, strerror(e));
	__atomic_store_n(&j->atom.failed, TERN_EIO, __ATOMIC_RELEASE);
	stat_add(&j->atom.st_errors, 1);
}

int jseg_sync(struct journal *j, int fd)
{
	if (jstat_fdatasync(j->env, fd) < 0) {
		jfail(j, "fdatasync", errno);
		return -1;
	}
	stat_add(&j->atom.st_syncs, 1);
	return 0;
}
