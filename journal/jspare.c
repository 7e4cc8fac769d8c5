/* jspare.c: spare segment preparation and reuse (moved from journal.c). */
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

const unsigned char zeros[ZERO_CHUNK];

/* One step of preparing spare.seg at target bytes (all: until done).
 * Returns 1 when more work remains, 0 when done or failed (state tells). */
int w_spare_step(struct journal *j, const struct journal_opts *o, int all,
			uint64_t target)
{
	struct stat st;

	if (j->sp_fd < 0) {
		j->sp_fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (j->sp_fd < 0)
			goto fail;
		if (fstat(j->sp_fd, &st) < 0)
			goto fail;
		j->sp_done = (uint64_t)st.st_size;
		if (j->sp_done > target) {
			if (ftruncate(j->sp_fd, (off_t)target) < 0)
				goto fail;
			j->sp_done = target;
		}
	}
	/* fallocate in steps too: the writer serves queued groups between
	 * steps, and one call for a whole 64 MiB segment took milliseconds */
	while (o->prealloc == JOURNAL_PREALLOC_FALLOCATE && j->sp_done < target) {
		uint64_t n = target - j->sp_done > FALLOC_CHUNK ? FALLOC_CHUNK
								: target - j->sp_done;

		if (jio.fallocate(j->sp_fd, 0, (off_t)j->sp_done, (off_t)n) < 0)
			goto fail;
		j->sp_done += n;
		if (!all && j->sp_done < target)
			return 1;
	}
	while (j->sp_done < target) {
		size_t n = target - j->sp_done > ZERO_CHUNK ? ZERO_CHUNK
							    : (size_t)(target - j->sp_done);

		if (wr_all(j->sp_fd, zeros, n, j->sp_done) < 0)
			goto fail;
		/* start writeback of this step now, asynchronously, so the
		 * final fdatasync has little left to do: a sync of a whole
		 * freshly written segment would stall group commits */
		jio.sync_file_range(j->sp_fd, (off_t)j->sp_done, (off_t)n, SYNC_FILE_RANGE_WRITE);
		j->sp_done += n;
		if (!all && j->sp_done < target)
			return 1;
	}
	/* Sync now, in the background: the zeros (and the extent metadata)
	 * must not be written back by the first synced record (always,
	 * odsync).  none/interval acknowledge without a sync: the syncer
	 * does it, and the segment's own syncs would cover it anyway. */
	{
		int fd = journal_sync_waits(o->sync) ? -1 : dup(j->sp_fd);

		if (fd >= 0)
			s_post_sync(j, fd, SJ_SPARE, 0, 0); /* a failure fails the journal */
		else if (jio.fdatasync(j->sp_fd) < 0)
			goto fail;
	}
	if (spare_get(j) != SP_READY && spare_get(j) == SP_NOSPC)
		fprintf(stderr, "journal: queue %s: next segment ready again\n", j->name);
	spare_set(j, SP_READY);
	return 0;
fail:
	{
		int e = errno;

		if (spare_get(j) != SP_NOSPC)
			fprintf(stderr, "journal: queue %s: cannot prepare next segment: %s\n",
				j->name, strerror(e));
		if (j->sp_fd >= 0)
			close(j->sp_fd);
		j->sp_fd = -1;
		pthread_mutex_lock(&j->env->mu);
		j->sp_retry_at = mono_ms() + NOSPC_RETRY_MS;
		pthread_mutex_unlock(&j->env->mu);
		spare_set(j, SP_NOSPC);
	}
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
	if (j->sp_fd < 0) {
		struct stat st;

		j->sp_fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (j->sp_fd >= 0 && fstat(j->sp_fd, &st) == 0)
			j->sp_done = (uint64_t)st.st_size;
	}
	if (j->sp_fd >= 0 && j->sp_done >= size) {
		w_spare_step(j, o, 1, size); /* complete already: just sync it */
		return;
	}
	if (j->sp_fd >= 0 && jio.fallocate(j->sp_fd, 0, 0, (off_t)size) == 0) {
		j->sp_done = size;
		spare_set(j, SP_READY);
		return;
	}
	if (j->sp_fd >= 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
		w_spare_step(j, o, 1, size); /* no fallocate here: zero-fill */
		return;
	}
	w_spare_step(j, o, 1, size); /* records the failure (NOSPC) and logs it */
}

void w_free_segs(struct journal *j, const uint32_t *segs, size_t nfree,
			const struct journal_opts *o)
{
	char name[32];
	struct sjob *un = NULL;

	for (size_t i = 0; i < nfree; i++) {
		seg_name(name, sizeof(name), segs[i]);
		if (segs[i] == j->w_seg && j->w_fd >= 0) {
			close(j->w_fd);
			j->w_fd = -1;
			j->w_seg = 0;
		}
		/* keep one spare: a dead full-size segment is already
		 * allocated and written, so reusing it costs nothing.  It
		 * also replaces a ready spare that fallocate() reserved:
		 * dropping that file frees a few extents, while unlinking the
		 * dead segment would free every page of it still cached
		 * (~30 ms of CPU for 64 MiB, measured, on the core the loop
		 * may share), and the reused file's blocks are written
		 * already, so its writeback converts no unwritten extents. */
		if (o->prealloc != JOURNAL_PREALLOC_NONE &&
		    (spare_get(j) != SP_READY ||
		     (o->prealloc == JOURNAL_PREALLOC_FALLOCATE && !j->sp_reused))) {
			struct stat st;

			if (fstatat(j->dirfd, name, &st, 0) == 0 &&
			    (uint64_t)st.st_size == seg_target(j)) {
				if (j->sp_fd >= 0) {
					close(j->sp_fd);
					j->sp_fd = -1;
				}
				if (renameat(j->dirfd, name, j->dirfd, SPARE_NAME) == 0) {
					j->sp_reused = 1;
					spare_set(j, SP_READY);
					j->sp_fd = jio.openat(j->dirfd, SPARE_NAME, O_RDWR | O_CLOEXEC, 0);
					if (j->sp_fd < 0)
						spare_set(j, SP_PENDING);
					j->sp_done = seg_target(j);
					continue;
				}
			}
		}
		/* Unlinking drops the file's pages, waiting for any writeback
		 * of them: 10-15 ms for a few written-out segments, which held
		 * wlock and the writer (measured).  The syncer does it. */
		if (!un && (un = calloc(1, sizeof(*un))) != NULL) {
			un->j = j;
			un->fd = -1;
			un->unlink = 1;
			un->free_segs = malloc(nfree * sizeof(*un->free_segs));
			if (!un->free_segs) {
				free(un);
				un = NULL;
			}
		}
		if (un)
			un->free_segs[un->nfree++] = segs[i];
		else
			unlinkat(j->dirfd, name, 0);
	}
	if (un)
		s_post(j->env, un);
}
