/*
 * jspare.c: the writer's turn of segment files.  The spare (spare.seg) is
 * prepared ahead of need, so that starting a segment costs a rename, not an
 * allocation; activated (w_activate: renamed to the next segment's name,
 * after the old segment is synced as the mode promises); and dead segments
 * are reused as the spare or unlinked (w_free_segs).  Writer thread only
 * (j->sp is its alone; the inline write never starts, frees or closes a
 * segment).
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

#include "../lib/log.h"
#include "jio.h"

#define FALLOC_CHUNK (8u << 20) /* fallocate step of a spare segment */
#define NOSPC_RETRY_MS 1000

const unsigned char jzeros[ZERO_CHUNK];

/* A spare's failure: closes the spare, plans the retry, logs once. */
static void spare_failed(struct journal *j, int e)
{
	if (spare_get(j) != SP_NOSPC)
		log_error("journal: queue %s: cannot prepare next segment: %s",
			j->name, strerror(e));
	if (j->sp.fd >= 0)
		close(j->sp.fd);
	j->sp.fd = -1;
	pthread_mutex_lock(&j->env->mu_lock);
	j->mu.sp_retry_at = mono_ms() + NOSPC_RETRY_MS;
	jwork_spare(j, SP_NOSPC);
	pthread_mutex_unlock(&j->env->mu_lock);
}

/* Sets j's spare state (and the writer's lists), taking mu_lock. */
static void spare_state(struct journal *j, int state)
{
	pthread_mutex_lock(&j->env->mu_lock);
	jwork_spare(j, state);
	pthread_mutex_unlock(&j->env->mu_lock);
}

/* The spare's blocks from its bytes prepared so far on are reserved by
 * fallocate() (what was zero-filled before stays written). */
static void spare_unwritten_here(struct journal *j)
{
	if (j->sp.unwritten_from > j->sp.done)
		j->sp.unwritten_from = j->sp.done;
}

/* Opens (creating) spare.seg as j->sp.fd, and *size gets its size.  0 or
 * -1 (errno). */
static int spare_fd(struct journal *j, uint64_t *size)
{
	char path[JPATH_MAX];
	struct stat st;

	jpath(j, SPARE_NAME, path);
	j->sp.fd = jseg_open(j->env, path, O_RDWR | O_CREAT | O_CLOEXEC, TERN_FILE_MODE);
	if (j->sp.fd < 0 || fstat(j->sp.fd, &st) < 0)
		return -1;
	*size = (uint64_t)st.st_size;
	return 0;
}

/* The spare is ready: its descriptor is closed (an idle queue's ready
 * spare holds none; activation renames it by name). */
static void spare_ready(struct journal *j)
{
	if (j->sp.fd >= 0)
		close(j->sp.fd);
	j->sp.fd = -1;
	spare_state(j, SP_READY);
}

/* Cuts spare.seg (open or not) to target if it is longer.  0 or -1
 * (errno). */
static int spare_cut(struct journal *j, uint64_t target)
{
	if (j->sp.done > target) {
		char path[JPATH_MAX];

		jpath(j, SPARE_NAME, path);
		if ((j->sp.fd >= 0 ? ftruncate(j->sp.fd, (off_t)target)
				   : truncate(path, (off_t)target)) < 0)
			return -1;
		j->sp.done = target;
	}
	spare_bytes_set(j, j->sp.done);
	return 0;
}

/* Opens (creating) spare.seg and continues from its size, cut to target
 * if it is longer.  0 or -1 (errno). */
static int spare_open(struct journal *j, uint64_t target)
{
	if (spare_fd(j, &j->sp.done) < 0)
		return -1;
	return spare_cut(j, target);
}

/* Whether a failure to make or first write a segment (errno e) is a lack
 * of room, which is given up for now (w_abandon) rather than failing the
 * journal for good. */
static int no_room(int e)
{
	return e == ENOSPC || e == EDQUOT;
}

/* One step of preparing spare.seg at target bytes (all: until done),
 * without the failure's handling: 1 when more work remains,
 * 0 when the spare is ready, -1 on failure (errno; the spare's descriptor
 * may be left open). */
static int spare_steps(struct journal *j, const struct journal_opts *o, int all,
		       uint64_t target)
{
	/* (auto is resolved here: jopts_fix) */
	int falloc = o->prealloc == JOURNAL_PREALLOC_FALLOCATE;

	if (j->sp.fd < 0 && spare_open(j, target) < 0)
		return -1;
	if (falloc)
		spare_unwritten_here(j);
	/* fallocate in steps too: the writer serves queued groups between
	 * steps, and one call for a whole segment takes milliseconds */
	while (falloc && j->sp.done < target) {
		uint64_t n = target - j->sp.done > FALLOC_CHUNK ? FALLOC_CHUNK
								: target - j->sp.done;

		if (jio.fallocate(j->sp.fd, 0, (off_t)j->sp.done, (off_t)n) < 0)
			return -1;
		j->sp.done += n;
		spare_bytes_set(j, j->sp.done);
		if (!all && j->sp.done < target)
			return 1;
	}
	while (j->sp.done < target) {
		size_t n = target - j->sp.done > ZERO_CHUNK ? ZERO_CHUNK
							    : (size_t)(target - j->sp.done);

		if (jseg_write_all(j->sp.fd, jzeros, n, j->sp.done) < 0)
			return -1;
		/* start writeback of this step now, asynchronously, so the
		 * final fdatasync has little left to do: a sync of a whole
		 * freshly written segment would stall group commits */
		jio.sync_file_range(j->sp.fd, (off_t)j->sp.done, (off_t)n, SYNC_FILE_RANGE_WRITE);
		j->sp.done += n;
		spare_bytes_set(j, j->sp.done);
		if (!all && j->sp.done < target)
			return 1;
	}
	/* Sync now: the zeros (and the extent metadata) must not be written
	 * back by the first synced record.  Where no reply waits for a sync
	 * the syncer does it (and the segment's own syncs would cover it
	 * anyway). */
	if (jpolicy(o->sync)->syncs_later)
		s_post_sync(j, SFILE_SPARE, 0, SJOB_SYNC_SPARE, 0); /* a failure fails the journal */
	else if (jstat_fdatasync(j->env, j->sp.fd) < 0)
		return -1;
	if (spare_get(j) == SP_NOSPC)
		log_info("journal: queue %s: next segment ready again", j->name);
	spare_ready(j);
	return 0;
}

/* Prepares the whole spare at size bytes now (a failure recorded). */
static void spare_all(struct journal *j, const struct journal_opts *o, uint64_t size)
{
	if (spare_steps(j, o, 1, size) < 0)
		spare_failed(j, errno);
}

/* Halves the planned size (next_size) from plan, not below what doubling
 * alone gives (plain_size), when plan is still the plan and above that; 1
 * if the plan was changed (by this or by the loop meanwhile), 0 if it
 * cannot be lowered (a plan doubling gave finding no room is a full disk,
 * as it always was). */
static int plan_halved(struct journal *j, const struct journal_opts *o, uint64_t plan)
{
	uint64_t raw = __atomic_load_n(&j->atom.next_size, __ATOMIC_ACQUIRE);
	uint64_t plain = __atomic_load_n(&j->atom.plain_size, __ATOMIC_RELAXED);

	if (jseg_capped(raw, o) != plan)
		return 1;
	if (!plain || plan <= plain)
		return 0;
	if (__atomic_compare_exchange_n(&j->atom.next_size, &raw,
					plan / 2 > plain ? plan / 2 : plain, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		return 1;
	return jseg_capped(raw, o) != plan; /* (raw: what the loop stored) */
}

void w_spare_planned(struct journal *j, const struct journal_opts *o)
{
	uint64_t plan = jseg_target(j, o), first = plan;
	int rc, e = ENOSPC;

	/* (bounded: each turn halves the plan, or finds it changed by the
	 * loop, which raises it at most once a segment) */
	for (int turn = 0; turn < 64; turn++) {
		rc = spare_steps(j, o, 0, plan);
		if (rc > 0)
			return;
		if (rc == 0) {
			if (plan == first)
				j->sp.shrink_logged = 0;
			return;
		}
		e = errno;
		if (!no_room(e) || !plan_halved(j, o, plan))
			break;
		if (!j->sp.shrink_logged)
			log_warn("journal: queue %s: no room for a segment of %llu bytes: trying %llu",
				 j->name, (unsigned long long)plan,
				 (unsigned long long)jseg_target(j, o));
		j->sp.shrink_logged = 1;
		if (j->sp.fd >= 0)
			close(j->sp.fd); /* (reopened and cut to the new plan) */
		j->sp.fd = -1;
		plan = jseg_target(j, o);
	}
	spare_failed(j, e);
}

/* The spare is needed now but is not ready (a new queue, or segments
 * filling faster than zeroing).  Zero-filling the rest here would stall
 * every waiting set for a whole segment's worth of writes and a sync, so
 * reserve it with fallocate() instead: fast, and a full disk is still
 * detected before any record is written.  Only this segment pays the
 * unwritten-extent cost; the next spare is zero-filled in the background. */
void w_spare_now(struct journal *j, const struct journal_opts *o, uint64_t size)
{
	if (j->sp.fd < 0 && spare_fd(j, &j->sp.done) < 0 && j->sp.fd >= 0) {
		close(j->sp.fd);
		j->sp.fd = -1;
	}
	if (j->sp.fd >= 0 && j->sp.done >= size) {
		spare_all(j, o, size); /* complete already: just sync it */
		return;
	}
	if (j->sp.fd >= 0 && jio.fallocate(j->sp.fd, 0, 0, (off_t)size) == 0) {
		spare_unwritten_here(j);
		j->sp.done = size;
		spare_bytes_set(j, size);
		spare_ready(j);
		return;
	}
	/* no fallocate here (zero-fill), or a failure that spare_all records
	 * (NOSPC) and logs */
	spare_all(j, o, size);
}

/* Zeros the header block of the file at path.  0, or -1 (errno). */
static int header_zeroed(struct journal *j, const char *path)
{
	int fd = jseg_open(j->env, path, O_WRONLY | O_CLOEXEC, 0), rc, e;

	if (fd < 0)
		return -1;
	rc = jseg_write_all(fd, jzeros, JSEG_HDR_SIZE, 0);
	e = errno;
	close(fd);
	errno = e;
	return rc;
}

/*
 * w_take_spare's step, before the spare is renamed into place: its header
 * block must be zeros on disk.  Renamed and its directory synced, the file
 * is the new segment, whose own header reaches the disk only with its
 * first records; a power cut between the two must leave a segment made
 * and never written, not one whose header names another segment (which
 * recovery refuses as a misplaced file: ternd would not start).  A spare
 * made here is zeros there; a dead segment reused as the spare had its
 * header zeroed then (w_reuse_as_spare), durable once the syncer synced
 * it, or here; a spare found on disk at open (it may be one reused before
 * a crash) is checked.  0, or -1 with j failed.
 */
static int spare_header_durable(struct journal *j)
{
	char path[JPATH_MAX];
	unsigned char hdr[JSEG_HDR_USED];
	int fd;
	size_t i;

	if (j->sp.reused &&
	    __atomic_load_n(&j->atom.spare_hdr_synced, __ATOMIC_ACQUIRE) == j->sp.hdr_gen)
		return 0;
	jpath(j, SPARE_NAME, path);
	fd = jseg_open(j->env, path, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0) {
		jfail(j, "open spare", errno);
		return -1;
	}
	if (!j->sp.reused) {
		ssize_t n = jio.pread(fd, hdr, sizeof(hdr), 0);

		for (i = 0; n > 0 && i < (size_t)n && !hdr[i]; i++)
			;
		if (n >= 0 && i == (size_t)n) {
			close(fd);
			return 0; /* zeros (or nothing) already, as on disk */
		}
		if (jseg_write_all(fd, jzeros, JSEG_HDR_SIZE, 0) < 0) {
			jfail(j, "clear spare header", errno);
			close(fd);
			return -1;
		}
	}
	if (jstat_fdatasync(j->env, fd) < 0) {
		jfail(j, "sync spare header", errno);
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
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
static int w_reuse_as_spare(struct journal *j, const struct jseg *seg,
			    const struct journal_opts *o)
{
	char path[JPATH_MAX], spare[JPATH_MAX];
	struct stat st;
	uint64_t size = jseg_target(j, o);

	/* (page_cache = drop: its pages are gone, and each first write into
	 * a page of it would read that page back from the disk) */
	if (o->prealloc == JOURNAL_PREALLOC_NONE || o->cache == JOURNAL_CACHE_DROP)
		return 0;
	if (spare_get(j) == SP_READY &&
	    (j->sp.unwritten_from == JNO_UNWRITTEN || j->sp.reused))
		return 0;
	jpath_seg(j, seg->num, path);
	if (seg->lost || stat(path, &st) < 0 || (uint64_t)st.st_size != size)
		return 0;
	if (j->sp.fd >= 0) {
		close(j->sp.fd);
		j->sp.fd = -1;
	}
	/* Its header goes first: renamed into place as the next segment, the
	 * file must not read as segment seg->num if a power cut comes before
	 * the new header is durable (w_take_spare makes sure the zeros are).
	 * Zeros read as a segment made and never written. */
	if (header_zeroed(j, path) < 0)
		return 0;
	jpath(j, SPARE_NAME, spare);
	if (rename(path, spare) < 0)
		return 0;
	jseg_reclaimed(j, seg);
	j->sp.hdr_gen++;
	s_post_spare_header(j, j->sp.hdr_gen); /* (a failure fails the journal) */
	j->sp.reused = 1;
	j->sp.unwritten_from = JNO_UNWRITTEN;
	j->sp.done = size;
	spare_bytes_set(j, size);
	spare_ready(j);
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
	un->free_segs = malloc(n * sizeof(*un->free_segs));
	if (!un->free_segs) {
		free(un);
		return NULL;
	}
	return un;
}

/* Under wlock (it may close the current segment's descriptor). */
void w_free_segs(struct journal *j, const struct jseg *segs, size_t nfree,
		 const struct journal_opts *o)
{
	struct sjob *un = NULL;

	for (size_t i = 0; i < nfree; i++) {
		if (segs[i].num == j->w.seg) {
			jseg_wfd_close(j);
			j->w.seg = 0;
		}
		if (w_reuse_as_spare(j, &segs[i], o))
			continue;
		/* Unlinking drops the file's pages, waiting for any writeback
		 * of them, which would hold wlock and the writer meanwhile:
		 * the syncer does it. */
		if (!un)
			un = unlink_job(j, nfree);
		if (un) {
			un->free_segs[un->nfree++] = segs[i];
		} else {
			char path[JPATH_MAX];

			jpath_seg(j, segs[i].num, path);
			unlink(path);
			jseg_reclaimed(j, &segs[i]);
		}
	}
	if (un)
		s_post(j->env, un);
}

/* w_activate's step: the old segment's records are synced here, in every
 * mode, before any record goes into the new segment.  In a mode whose
 * replies wait for syncs that keeps its promise; in none and interval it
 * keeps the order: the kernel writes back each file's pages when it likes,
 * so without this a power cut could keep the new segment's first records
 * and lose the old one's last (a hole in the queue).  With page_cache =
 * drop the syncer also gets the segment, and drops its pages. */
static int w_leave_segment(struct journal *j, const struct journal_opts *o)
{
	int dirty = dirty_get(j) && !j->w.dsync, fd, rc = 0;

	if (!j->w.seg)
		return 0;
	if (dirty) {
		fd = jseg_wfd(j);
		if (fd < 0) {
			jfail(j, "open segment", errno);
			rc = -1;
		} else if (jseg_sync(j, fd) < 0) {
			rc = -1;
		}
	}
	if (rc == 0 && o->cache == JOURNAL_CACHE_DROP) {
		jseg_wfd_close(j);
		rc = s_post_sync(j, SFILE_SEG, j->w.seg, SJOB_SYNC_SEG, 0);
	}
	jseg_wfd_close(j);
	j->w.seg = 0;
	j->w.zero_end = j->w.zero_at = 0;
	return rc;
}

/* w_activate's step: the spare becomes segment file name.  A spare not
 * ready yet is reserved now at the segment's size (not at jseg_target:
 * the loop advanced next_size when it started this segment).  Returns 0,
 * -1 (j failed), or -2 when no spare could be had (a full disk: the spare
 * is SP_NOSPC, so the loop refuses adds until the writer's retry works).
 * *unwritten gets where the segment's fallocate()d blocks begin
 * (JNO_UNWRITTEN: none). */
static int w_take_spare(struct journal *j, const struct journal_opts *o, const char *name,
			uint64_t size, uint64_t *unwritten)
{
	*unwritten = JNO_UNWRITTEN;
	if (o->prealloc == JOURNAL_PREALLOC_NONE)
		return 0;
	if (spare_get(j) != SP_READY)
		w_spare_now(j, o, size);
	if (spare_get(j) != SP_READY)
		return -2;
	if (j->sp.done < size) {
		/* a record too large for the planned segment takes a full-size
		 * one: the spare, prepared at the planned size, is extended,
		 * so that every preallocated segment has the size its header
		 * says (tern-journal verify reads a shorter one as truncated) */
		char path[JPATH_MAX];
		int fd, e = 0;

		spare_unwritten_here(j);
		jpath(j, SPARE_NAME, path);
		fd = jseg_open(j->env, path, O_RDWR | O_CLOEXEC, 0);
		if (fd < 0) {
			e = errno;
		} else if (jio.fallocate(fd, 0, 0, (off_t)size) < 0) {
			e = errno;
			/* (no fallocate here: zeros) */
			for (uint64_t at = j->sp.done; e == EOPNOTSUPP && at < size;
			     at += ZERO_CHUNK) {
				size_t n = size - at > ZERO_CHUNK ? ZERO_CHUNK : (size_t)(size - at);

				if (jseg_write_all(fd, jzeros, n, at) < 0)
					e = errno ? errno : EIO;
				else if (at + n >= size)
					e = 0;
			}
		}
		if (fd >= 0)
			close(fd);
		if (e) {
			spare_failed(j, e);
			return no_room(e) ? -2 : (jfail(j, "extend spare", e), -1);
		}
		j->sp.done = size;
		spare_bytes_set(j, size);
	} else if (spare_cut(j, size) < 0) {
		/* (a spare prepared at a larger plan than the loop took, as
		 * when a burst started the segment at the doubled size: cut,
		 * so that the file has the size its header says) */
		jfail(j, "cut spare", errno);
		return -1;
	}
	if (j->sp.fd >= 0)
		close(j->sp.fd);
	j->sp.fd = -1;
	if (spare_header_durable(j) < 0)
		return -1;
	{
		char from[JPATH_MAX], to[JPATH_MAX];

		jpath(j, SPARE_NAME, from);
		jpath(j, name, to);
		if (rename(from, to) < 0) {
			jfail(j, "rename spare", errno);
			return -1;
		}
	}
	spare_bytes_set(j, 0); /* (counted in the loop's list now) */
	spare_state(j, SP_NONE); /* (w_activate decides when the next one is due) */
	j->sp.reused = 0; /* the next spare is a new file until w_free_segs */
	*unwritten = j->sp.unwritten_from;
	j->sp.unwritten_from = JNO_UNWRITTEN;
	return 0;
}

/* w_activate's step: whether segment j->w.seg (size bytes, fallocate()d
 * from unwritten on) gets zeros ahead of its records (ZERO_AHEAD, jpriv.h):
 * where the options ask for them (journal_opts.zero_ahead, jopts_fix). */
static void w_plan_zeros(struct journal *j, const struct journal_opts *o, uint64_t size,
			 uint64_t unwritten)
{
	j->w.zero_to = j->w.zero_end = j->w.zero_at = 0;
	if (!o->zero_ahead || unwritten >= size)
		return;
	j->w.zero_to = unwritten;
	j->w.zero_end = size;
	pthread_mutex_lock(&j->env->mu_lock);
	jwork_zero(j, 1); /* (this is the writer: nothing to wake) */
	pthread_mutex_unlock(&j->env->mu_lock);
}

void w_zero_step(struct journal *j)
{
	struct jenv *env = j->env;
	uint64_t from;
	int more = 0;

	pthread_mutex_lock(&env->wlock);
	/* at or past the end of what is written, and of the zeros so far */
	from = (j->w.hi + JALIGN_BLOCK - 1) / JALIGN_BLOCK * JALIGN_BLOCK;
	if (from < j->w.zero_to)
		from = j->w.zero_to;
	j->w.zero_at = 0;
	if (!j->w.seg || failed_get(j) || from >= j->w.zero_end) {
		j->w.zero_end = 0; /* (the segment is left, or zeroed to its end) */
	} else if (from < j->w.hi + ZERO_AHEAD) {
		size_t n = j->w.zero_end - from > ZERO_CHUNK ? ZERO_CHUNK
							     : (size_t)(j->w.zero_end - from);
		int fd = jseg_wfd(j);

		if (fd < 0 || jseg_write_all(fd, jzeros, n, from) < 0) {
			/* (the records go on into the unwritten extents; their
			 * own write reports a failing file) */
			log_warn("journal: queue %s: cannot write zeros ahead in segment %u: %s",
				 j->name, j->w.seg, strerror(errno));
			j->w.zero_end = 0;
		} else {
			jio.sync_file_range(fd, (off_t)from, (off_t)n, SYNC_FILE_RANGE_WRITE);
			j->w.zero_to = from + n;
		}
	}
	/* (each step writes, or ends the zeros: from < zero_end, and below
	 * hi + ZERO_AHEAD while more is set) */
	if (j->w.zero_end && j->w.zero_to < j->w.zero_end) {
		more = j->w.zero_to < j->w.hi + ZERO_AHEAD;
		/* (enough ahead: the records ask again halfway to the end) */
		if (!more)
			j->w.zero_at = j->w.zero_to - ZERO_AHEAD / 2;
	}
	pthread_mutex_lock(&env->mu_lock);
	jwork_zero(j, more);
	pthread_mutex_unlock(&env->mu_lock);
	pthread_mutex_unlock(&env->wlock);
}

/* w_activate's step: when the spare for the segment after seg (of size
 * bytes) is to be prepared: now for a large segment, once half of a small
 * one is written (see SPARE_AHEAD_MIN). */
static void w_plan_spare(struct journal *j, const struct journal_opts *o, uint64_t size)
{
	j->w.seg_size = size;
	j->w.spare_at = 0;
	if (o->prealloc == JOURNAL_PREALLOC_NONE || spare_get(j) != SP_NONE)
		return;
	j->w.spare_at = jseg_spare_at(size);
	if (!j->w.spare_at)
		spare_state(j, SP_PENDING);
}

void w_abandon(struct journal *j, uint32_t seg, int e)
{
	j->w.lost = seg;
	__atomic_store_n(&j->atom.lost_seg, seg, __ATOMIC_RELEASE);
	if (!j->w.lost_logged)
		log_error("journal: queue %s: no room for segment %u (%s): its records are"
			" not written, and sets to the queue are answered SERVER_ERROR until"
			" there is room again", j->name, seg, strerror(e));
	j->w.lost_logged = 1;
}

int w_activate(struct journal *j, uint32_t seg, uint64_t size,
	       enum journal_sync sync, const struct journal_opts *o)
{
	const struct jsync_policy *pol = jpolicy(sync);
	char name[32];
	int flags = O_RDWR | O_CREAT | O_CLOEXEC, rc;
	uint64_t unwritten;

	if (w_leave_segment(j, o) < 0)
		return -1;
	jseg_name(name, sizeof(name), seg);
	rc = w_take_spare(j, o, name, size, &unwritten);
	if (rc == -2)
		w_abandon(j, seg, ENOSPC);
	if (rc < 0)
		return rc;
	{
		char path[JPATH_MAX];
		int fd;

		jpath(j, name, path);
		fd = jseg_open(j->env, path, flags, TERN_FILE_MODE);
		if (fd < 0 && no_room(errno)) {
			w_abandon(j, seg, errno);
			return -2;
		}
		if (fd < 0) {
			jfail(j, "open segment", errno);
			return -1;
		}
		jseg_wfd_set(j, fd);
	}
	if (j->w.lost_logged) {
		log_info("journal: queue %s: writing again (segment %u)", j->name, seg);
		j->w.lost_logged = 0;
	}
	j->w.dsync = pol->write_dsync;
	j->w.seg = seg;
	w_plan_spare(j, o, size);
	j->w.hi = 0;
	w_plan_zeros(j, o, size, unwritten);
	j->w.sync_lo = 0;
	__atomic_store_n(&j->atom.dirty, 0, __ATOMIC_RELAXED);
	/* the new name must survive a crash before records in it are
	 * acknowledged as durable; where no reply waits for a sync, the
	 * syncer does it */
	if (pol->syncs_later)
		return s_post_sync(j, SFILE_DIR, 0, SJOB_SYNC_DIR, 0);
	if (jseg_sync_dir(j) < 0) {
		jfail(j, "sync directory", errno);
		return -1;
	}
	return 0;
}

void w_close_files(struct journal *j, int sync)
{
	if (j->w.seg && sync && dirty_get(j) && !j->w.dsync) {
		int fd = jseg_wfd(j);

		if (fd < 0)
			jfail(j, "open segment", errno);
		else
			jseg_sync(j, fd);
	}
	jseg_wfd_close(j);
	j->w.seg = 0;
	j->w.zero_end = j->w.zero_at = 0;
	if (j->sp.fd >= 0) {
		close(j->sp.fd);
		j->sp.fd = -1;
	}
}

/* Under wlock. */
void w_take_frees(struct jenv *env)
{
	struct sjob *s, *next;

	pthread_mutex_lock(&env->mu_lock);
	s = env->mu.f_head;
	env->mu.f_head = NULL;
	pthread_mutex_unlock(&env->mu_lock);
	for (; s; s = next) {
		struct journal_opts o;

		next = s->next;
		w_opts_get(s->j, &o);
		w_free_segs(s->j, s->free_segs, s->nfree, &o);
		free(s->free_segs);
		free(s);
	}
}
