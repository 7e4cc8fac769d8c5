/*
 * jseg.c: segment files: their names, the loop's list of them, the size of
 * the next one, opening one for reading, writing and syncing through the
 * jio seam (and failing the journal when that fails), and unlinking a dead
 * one without stalling the core.  See jpriv.h for which thread calls what.
 */
#include "jpriv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int jseg_writev_all(int fd, struct iovec *iov, int cnt, uint64_t off)
{
	while (cnt > 0) {
		ssize_t r = jio.pwritev(fd, iov, cnt, (off_t)off);

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
	DIR *d = fdopendir(dup(j->dirfd));
	struct dirent *de;
	uint32_t *nums = NULL, seg;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (!d)
		return TERN_ESYS;
	while ((de = readdir(d))) {
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
			char name[32];

			jseg_name(name, sizeof(name), nums[i]);
			if (fstatat(j->dirfd, name, &st, 0) < 0)
				continue;
			rc = jseg_add(j, nums[i], (uint64_t)st.st_size);
			if (nums[i] > j->loop.last_seg)
				j->loop.last_seg = nums[i];
		}
	}
	free(nums);
	return rc;
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
	uint64_t v = __atomic_load_n(&j->atom.next_size, __ATOMIC_ACQUIRE);

	if (v == 0 || v > o->segment_size)
		v = o->segment_size;
	return v;
}

void jseg_target_init(struct journal *j)
{
	uint64_t s = j->loop.opts.segment_size;

	__atomic_store_n(&j->atom.next_size, s < FIRST_SEG_SIZE ? s : FIRST_SEG_SIZE,
			 __ATOMIC_RELEASE);
}

int jseg_reader_open(struct journal *j, uint32_t seg, struct jreader *rd)
{
	char *p = jseg_path(j, seg);
	int rc;

	if (!p)
		return TERN_ENOMEM;
	rc = jreader_open(rd, p);
	if (rc == 0 && rd->seg != seg) {
		fprintf(stderr, "journal: queue %s: segment %s has number %u in its header\n",
			j->name, p, rd->seg);
		jreader_close(rd);
		rc = TERN_ECORRUPT;
	}
	free(p);
	return rc;
}

void jseg_log_damage(struct journal *j, struct jreader *rd,
		     struct journal_recovery *rec)
{
	fprintf(stderr,
		"journal: queue %s: segment %08u: damaged data at offset %" PRIu64
		" (%" PRIu64 " bytes skipped)\n",
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
void jseg_unlink_gently(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);

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
	unlinkat(dirfd, name, 0);
}

void jfail(struct journal *j, const char *what, int e)
{
	if (!failed_get(j))
		fprintf(stderr, "journal: queue %s: %s failed: %s; journal is now failed\n",
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
