/* jseg.c: segment files: names, listing, readers, I/O helpers (moved from journal.c). */
#include "jpriv.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "jio.h"

void seg_name(char *buf, size_t n, uint32_t seg)
{
	snprintf(buf, n, "%08" PRIu32 ".seg", seg);
}

static int seg_parse(const char *name, uint32_t *seg)
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

int wr_all(int fd, const void *buf, size_t n, uint64_t off)
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

int wrv_all(int fd, struct iovec *iov, int cnt, uint64_t off)
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

int segs_add(struct journal *j, uint32_t num, uint64_t size)
{
	if (grow((void **)&j->segs, &j->segcap, j->nseg + 1, sizeof(*j->segs)) < 0)
		return TERN_ENOMEM;
	j->segs[j->nseg].num = num;
	j->segs[j->nseg].size = size;
	j->nseg++;
	return 0;
}

uint64_t seg_target(struct journal *j)
{
	uint64_t v = __atomic_load_n(&j->next_size, __ATOMIC_ACQUIRE);

	if (v == 0 || v > j->opts.segment_size)
		v = j->opts.segment_size;
	return v;
}

void seg_target_init(struct journal *j)
{
	uint64_t v = j->opts.segment_size < FIRST_SEG_SIZE ? j->opts.segment_size
							     : FIRST_SEG_SIZE;

	__atomic_store_n(&j->next_size, v, __ATOMIC_RELEASE);
}

/*
 * Unlinks a dead segment in steps.  Unlinking a file frees every page of
 * it still in the page cache in one go: ~30 ms of CPU for 64 MiB here
 * (strace of the syncer during bench-peers' latency step), and this
 * kernel (PREEMPT_NONE, HZ 250) does not preempt that work, so the loop
 * and the writer, sharing the core, waited that long (set p99 1.2-2.9 ms
 * at 160k msg/s).  Truncating the file UNLINK_STEP at a
 * time and yielding between steps bounds each stretch to ~1 ms.  A crash
 * halfway leaves a shortened dead segment, which opening the journal
 * deletes like any segment older than the checkpoint's oldest live one.
 */
void seg_unlink_gently(int dirfd, const char *name)
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

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

char *seg_path(const struct journal *j, uint32_t seg)
{
	char *p;

	if (asprintf(&p, "%s/%08" PRIu32 ".seg", j->dir, seg) < 0)
		return NULL;
	return p;
}

int open_seg_reader(struct journal *j, uint32_t seg, struct jreader *rd)
{
	char *p = seg_path(j, seg);
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

void log_damage(struct journal *j, struct jreader *rd,
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

int list_segments(struct journal *j)
{
	DIR *d = fdopendir(dup(j->dirfd));
	struct dirent *de;
	uint32_t *nums = NULL, seg;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (!d)
		return TERN_ESYS;
	while ((de = readdir(d))) {
		if (!seg_parse(de->d_name, &seg))
			continue;
		if (grow((void **)&nums, &cap, n + 1, sizeof(*nums)) < 0) {
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

			seg_name(name, sizeof(name), nums[i]);
			if (fstatat(j->dirfd, name, &st, 0) < 0)
				continue;
			rc = segs_add(j, nums[i], (uint64_t)st.st_size);
			if (nums[i] > j->last_seg)
				j->last_seg = nums[i];
		}
	}
	free(nums);
	return rc;
}

int rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return errno == ENOENT ? 0 : TERN_ESYS;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
			rc = TERN_ESYS;
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT)
		rc = TERN_ESYS;
	return rc;
}

uint32_t next_seg_after(struct journal *j, uint32_t seg)
{
	for (size_t i = 0; i < j->nseg; i++)
		if (j->segs[i].num > seg)
			return j->segs[i].num;
	return 0;
}
