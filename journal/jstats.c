/*
 * jstats.c: the environment's figures for monitoring (journal.h, struct
 * jenv_stats): fsync latencies and group-commit sizes.  Every thread that
 * syncs or writes a group adds to them with relaxed atomics (no lock, no
 * ordering: they are counters); the loop reads them for /metrics.
 */
#include "jpriv.h"

#include <errno.h>
#include <string.h>

#include "jio.h"

const uint64_t jenv_fsync_bounds_us[JENV_FSYNC_BUCKETS] = JENV_FSYNC_BOUNDS_US;
const uint64_t jenv_group_bounds[JENV_GROUP_BUCKETS] = JENV_GROUP_BOUNDS;

/* The bucket of v among n ascending bounds (n: above them all). */
static size_t bucket(const uint64_t *bounds, size_t n, uint64_t v)
{
	size_t i = 0;

	while (i < n && v > bounds[i])
		i++;
	return i;
}

int jstat_fdatasync(struct jenv *env, int fd)
{
	int64_t t0 = tern_mono_us(), us;
	int rc = jio.fdatasync(fd), e = errno;

	us = tern_mono_us() - t0;
	if (us < 0)
		us = 0;
	stat_add(&env->stats.fsync_count[bucket(jenv_fsync_bounds_us, JENV_FSYNC_BUCKETS,
						(uint64_t)us)], 1);
	stat_add(&env->stats.fsync_us, (uint64_t)us);
	if (rc < 0)
		stat_add(&env->stats.fsync_errors, 1);
	errno = e;
	return rc;
}

void jstat_group(struct jenv *env, uint64_t nbatch, uint64_t nrec)
{
	if (!nrec)
		return; /* checkpoints or closes only: no records were committed */
	stat_add(&env->stats.group_count[bucket(jenv_group_bounds, JENV_GROUP_BUCKETS, nrec)], 1);
	stat_add(&env->stats.group_records, nrec);
	stat_add(&env->stats.group_batches, nbatch);
}

void jenv_get_stats(struct jenv *env, struct jenv_stats *st)
{
	const uint64_t *src = (const uint64_t *)&env->stats;
	uint64_t *dst = (uint64_t *)st;

	/* struct jenv_stats is uint64_t fields only: read each atomically */
	for (size_t i = 0; i < sizeof(*st) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}
