/*
 * jspare.c: the spare segment (spare.seg), prepared by the writer thread
 * ahead of need so that starting a segment costs a rename, not an
 * allocation; and the reuse of dead segments as the spare.  Writer thread
 * only (j->sp is its alone; the inline write never starts a segment).
 *
 * preallocate = zero writes zeros in ZERO_CHUNK steps, starting each
 * step's writeback at once, then syncs the file, so that the zeros and the
 * extent metadata are on disk before any record needs syncing: on ext4 a
 * merely fallocate()d file has unwritten extents, and the first synced
 * write into them costs as much as growing the file.  preallocate =
 * fallocate reserves the blocks only (in FALLOC_CHUNK steps); none lets
 * the segment grow.  Between steps the writer serves queued groups.
 *
 * A spare that cannot be prepared (ENOSPC) is state SP_NOSPC: the loop
 * then refuses adds once the current segment is full, and the writer
 * retries every NOSPC_RETRY_MS, or sooner when an add is refused.
 */
#include "jpriv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jio.h"

#define FALLOC_CHUNK (8u << 20) /* fallocate step of a spare segment */
#define NOSPC_RETRY_MS 1000

const unsigned char jzeros[ZERO_CHUNK];

/* w_spare_step's failure: closes the spare, plans the retry, logs once. */
static void spare_failed(struct journal *j, int e)
{
	if (spare_get(j) != SP_NOSPC)
		fprintf(stderr, "journal: queue %s: cannot prepare next segment: %s\n",
			j->name, strerror(e));
	if (j->sp.fd >= 0)
		close(j->sp.fd);
	j->sp.fd = -1;
	pthread_mutex_lock(&j->env->mu_lock);
	j->mu.sp_retry_at = mono_ms() + NOSPC_RETRY_MS;
	pthread_mutex_unlock(&j->env->mu_lock);
	spare_set(j, SP_NOSPC);
}

/* Opens (creating) spare.seg and continues from its size, cut to target
 * if it is longer.  0 or -1 (errno). */
static int spare_open(struct journal *j, uint64_t target)
{
	struct stat st;

	j->sp.fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (j->sp.fd < 0 || fstat(j->sp.fd, &st) < 0)
		return -1;
	j->sp.done = (uint64_t)st.st_size;
	if (j->sp.done > target) {
		if (ftruncate(j->sp.fd, (off_t)target) < 0)
			return -1;
		j->sp.done = target;
	}
	return 0;
}

int w_spare_step(struct journal *j, const struct journal_opts *o, int all,
		 uint64_t target)
{
	if (j->sp.fd < 0 && spare_open(j, target) < 0)
		goto fail;
	/* fallocate in steps too: the writer serves queued groups between
	 * steps, and one call for a whole segment takes milliseconds */
	while (o->prealloc == JOURNAL_PREALLOC_FALLOCATE && j->sp.done < target) {
		uint64_t n = target - j->sp.done > FALLOC_CHUNK ? FALLOC_CHUNK
								: target - j->sp.done;

		if (jio.fallocate(j->sp.fd, 0, (off_t)j->sp.done, (off_t)n) < 0)
			goto fail;
		j->sp.done += n;
		if (!all && j->sp.done < target)
			return 1;
	}
	while (j->sp.done < target) {
		size_t n = target - j->sp.done > ZERO_CHUNK ? ZERO_CHUNK
							    : (size_t)(target - j->sp.done);

		if (jseg_write_all(j->sp.fd, jzeros, n, j->sp.done) < 0)
			goto fail;
		/* start writeback of this step now, asynchronously, so the
		 * final fdatasync has little left to do: a sync of a whole
		 * freshly written segment would stall group commits */
		jio.sync_file_range(j->sp.fd, (off_t)j->sp.done, (off_t)n, SYNC_FILE_RANGE_WRITE);
		j->sp.done += n;
		if (!all && j->sp.done < target)
			return 1;
	}
	/* Sync now: the zeros (and the extent metadata) must not be written
	 * back by the first synced record.  Where no reply waits for a sync
	 * the syncer does it (and the segment's own syncs would cover it
	 * anyway). */
	{
		int fd = jpolicy(o->sync)->syncs_later ? dup(j->sp.fd) : -1;

		if (fd >= 0)
			s_post_sync(j, fd, SJOB_SYNC_SPARE, 0); /* a failure fails the journal */
		else if (jio.fdatasync(j->sp.fd) < 0)
			goto fail;
	}
	if (spare_get(j) == SP_NOSPC)
		fprintf(stderr, "journal: queue %s: next segment ready again\n", j->name);
	spare_set(j, SP_READY);
	return 0;
fail:
	spare_failed(j, errno);
	return 0;
}

/* The spare is needed now but is not ready (a new queue, or segments
 * filling faster than zeroing).  Zero-filling the rest here would stall
 * every waiting set for a whole segment's worth of writes and a sync, so
 * reserve it with fallocate() instead: fast, and a full disk is still
 * detected before any record is written.  Only this segment pays the
 * unwritten-extent cost; the next spare is zero-filled in the background. */
void w_spare_now(struct journal *j, const struct journal_opts *o, uint64_t size)
{
	if (j->sp.fd < 0) {
		struct stat st;

		j->sp.fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (j->sp.fd >= 0 && fstat(j->sp.fd, &st) == 0)
			j->sp.done = (uint64_t)st.st_size;
	}
	if (j->sp.fd >= 0 && j->sp.done >= size) {
		w_spare_step(j, o, 1, size); /* complete already: just sync it */
		return;
	}
	if (j->sp.fd >= 0 && jio.fallocate(j->sp.fd, 0, 0, (off_t)size) == 0) {
		j->sp.done = size;
		spare_set(j, SP_READY);
		return;
	}
	/* no fallocate here (zero-fill), or a failure that w_spare_step
	 * records (NOSPC) and logs */
	w_spare_step(j, o, 1, size);
}

/*
 * Keeps one spare: a dead full-size segment is already allocated and
 * written, so reusing it costs nothing.  It also replaces a ready spare
 * that fallocate() reserved: dropping that file frees a few extents, while
 * unlinking the dead segment would free every page of it still cached (CPU
 * time on the core the loop may share), and the reused file's blocks are
 * written already, so its writeback converts no unwritten extents.
 * Returns 1 when segment file name became the spare.
 */
static int w_reuse_as_spare(struct journal *j, const char *name, const struct journal_opts *o)
{
	struct stat st;
	uint64_t size = jseg_target(j, o);

	if (o->prealloc == JOURNAL_PREALLOC_NONE)
		return 0;
	if (spare_get(j) == SP_READY &&
	    (o->prealloc != JOURNAL_PREALLOC_FALLOCATE || j->sp.reused))
		return 0;
	if (fstatat(j->dirfd, name, &st, 0) < 0 || (uint64_t)st.st_size != size)
		return 0;
	if (j->sp.fd >= 0) {
		close(j->sp.fd);
		j->sp.fd = -1;
	}
	if (renameat(j->dirfd, name, j->dirfd, SPARE_NAME) < 0)
		return 0;
	j->sp.reused = 1;
	spare_set(j, SP_READY);
	j->sp.fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CLOEXEC, 0);
	if (j->sp.fd < 0)
		spare_set(j, SP_PENDING);
	j->sp.done = size;
	return 1;
}

/* An SJOB_UNLINK job for up to n segments of j; NULL without memory. */
static struct sjob *unlink_job(struct journal *j, size_t n)
{
	struct sjob *un = calloc(1, sizeof(*un));

	if (!un)
		return NULL;
	un->kind = SJOB_UNLINK;
	un->j = j;
	un->fd = -1;
	un->free_segs = malloc(n * sizeof(*un->free_segs));
	if (!un->free_segs) {
		free(un);
		return NULL;
	}
	return un;
}

/* Under wlock (it may close the current segment's descriptor). */
void w_free_segs(struct journal *j, const uint32_t *segs, size_t nfree,
		 const struct journal_opts *o)
{
	char name[32];
	struct sjob *un = NULL;

	for (size_t i = 0; i < nfree; i++) {
		jseg_name(name, sizeof(name), segs[i]);
		if (segs[i] == j->w.seg && j->w.fd >= 0) {
			close(j->w.fd);
			j->w.fd = -1;
			j->w.seg = 0;
		}
		if (w_reuse_as_spare(j, name, o))
			continue;
		/* Unlinking drops the file's pages, waiting for any writeback
		 * of them, which would hold wlock and the writer meanwhile:
		 * the syncer does it. */
		if (!un)
			un = unlink_job(j, nfree);
		if (un)
			un->free_segs[un->nfree++] = segs[i];
		else
			unlinkat(j->dirfd, name, 0);
	}
	if (un)
		s_post(j->env, un);
}
