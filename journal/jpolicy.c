/*
 * jpolicy.c: the sync policy table and the journal's options.
 *
 * The four sync modes differ only in the rows of jsync_policies; the rest
 * of journal/ asks jpolicy(mode)->column at each point where it acts.  As
 * a table (docs/JOURNAL.md, "Sync modes"):
 *
 *   mode      STORED after     loop writes inline  pad  RWF_DSYNC  group sync  other syncs  timer sync     zeros ahead
 *   none      write()          any batch           no   no         no          syncer       no             no
 *   interval  write()          any batch           no   no         no          syncer       each interval  no
 *   always    fdatasync        unticketed, lone    4K   no         fdatasync   in group     no             yes
 *   odsync    RWF_DSYNC write  lone                4K   yes        the write   in group     no             yes
 *
 * preallocate = auto is fallocate in every mode (jopts_fix): where a sync
 * waits for the extent conversions of the records it covers, the zeros
 * come ahead of the records instead (zero_ahead).
 */
#include "jpriv.h"

#include <string.h>

/*
 * Why each value:
 * - ack_stable: always/odsync promise that an acknowledged set survives a
 *   power cut; none/interval promise only that it survives a process crash,
 *   which the write() to the kernel already gives.
 * - inline_write: a page-cache write on the loop saves two thread
 *   hand-offs per batch; a write that is (or must be followed by) a sync
 *   would stall the loop for a disk flush, so always writes inline the
 *   batches nobody waits for (the next synced batch covers them), and a
 *   synced one only when it holds a few sets a lone client waits for:
 *   nobody else is stalled then, and the loop saves the hand-off to the
 *   writer and the wake-up back (a client streaming more sets would have
 *   them read only after the sync, instead of gathering into the next
 *   group while the writer syncs); odsync, whose every write of records
 *   is a sync, only those lone sets'.
 * - write_dsync: odsync's records are written with RWF_DSYNC (pwritev2),
 *   the per-write O_DSYNC, on a descriptor opened without it, so that the
 *   zeros ahead of the records are plain page-cache writes.
 * - zero_ahead: a synced write into a merely fallocate()d extent also
 *   writes the extent's conversion; where a sync waits for it (always,
 *   odsync), a segment reserved by fallocate() is zero-filled ahead of its
 *   records, so that few of its syncs write one and each set waits
 *   less.  That beats zero-filling whole spares, each of which ends with
 *   an fdatasync of a segment of zeros between two groups: a set queued
 *   behind it waits for that sync, which the tail latency shows.  In
 *   none and interval no reply waits for a sync, and zeros there would
 *   double the bytes written for nothing (the kernel throttles the dirty
 *   pages).
 * - syncs_later: in none/interval no reply waits for a sync, so a sync in
 *   the group would only delay the group's other batches.
 */
const struct jsync_policy jsync_policies[] = {
	[JOURNAL_SYNC_NONE] = {
		.name = "none", .ack_stable = 0, .inline_write = JINLINE_ANY,
		.pad_ticketed = 0, .write_dsync = 0, .group_sync = 0,
		.syncs_later = 1, .timer_sync = 0,
	},
	[JOURNAL_SYNC_INTERVAL] = {
		.name = "interval", .ack_stable = 0, .inline_write = JINLINE_ANY,
		.pad_ticketed = 0, .write_dsync = 0, .group_sync = 0,
		.syncs_later = 1, .timer_sync = 1,
	},
	[JOURNAL_SYNC_ALWAYS] = {
		.name = "always", .ack_stable = 1, .inline_write = JINLINE_LONE,
		.pad_ticketed = 1, .write_dsync = 0, .group_sync = 1,
		.syncs_later = 0, .timer_sync = 0,
		.zero_ahead = 1,
	},
	[JOURNAL_SYNC_ODSYNC] = {
		.name = "odsync", .ack_stable = 1, .inline_write = JINLINE_LONE,
		.pad_ticketed = 1, .write_dsync = 1, .group_sync = 1,
		.syncs_later = 0, .timer_sync = 0,
		.zero_ahead = 1,
	},
};

#define NSYNC (sizeof(jsync_policies) / sizeof(jsync_policies[0]))

static const char *const prealloc_names[] = {
	[JOURNAL_PREALLOC_ZERO] = "zero",
	[JOURNAL_PREALLOC_FALLOCATE] = "fallocate",
	[JOURNAL_PREALLOC_NONE] = "none",
	[JOURNAL_PREALLOC_AUTO] = "auto",
};

#define NPREALLOC (sizeof(prealloc_names) / sizeof(prealloc_names[0]))

void journal_opts_default(struct journal_opts *o)
{
	o->sync = JOURNAL_SYNC_INTERVAL;
	o->sync_interval_ms = 100;
	o->prealloc = JOURNAL_PREALLOC_AUTO;
	o->zero_ahead = 0;
	o->segment_size = 64ull << 20;
	o->max_memory_size = 64ull << 20;
	o->checkpoint_interval_ms = 1000;
	o->cache = JOURNAL_CACHE_KEEP;
}

int journal_sync_waits(enum journal_sync s)
{
	return jpolicy(s)->ack_stable;
}

int journal_sync_parse(const char *s, enum journal_sync *out)
{
	for (size_t i = 0; i < NSYNC; i++) {
		if (strcmp(s, jsync_policies[i].name) == 0) {
			*out = (enum journal_sync)i;
			return 0;
		}
	}
	return TERN_EINVAL;
}

int journal_prealloc_parse(const char *s, enum journal_prealloc *out)
{
	int i = tern_word_index(prealloc_names, NPREALLOC, s);

	if (i < 0)
		return TERN_EINVAL;
	*out = (enum journal_prealloc)i;
	return 0;
}

const char *journal_sync_name(enum journal_sync s)
{
	return (unsigned)s < NSYNC ? jsync_policies[s].name : "?";
}

const char *journal_prealloc_name(enum journal_prealloc p)
{
	return (unsigned)p < NPREALLOC ? prealloc_names[p] : "?";
}

static const char *const cache_names[] = {
	[JOURNAL_CACHE_KEEP] = "keep",
	[JOURNAL_CACHE_DROP] = "drop",
};
#define NCACHE (sizeof(cache_names) / sizeof(cache_names[0]))

int journal_cache_parse(const char *s, enum journal_cache *out)
{
	int i = tern_word_index(cache_names, NCACHE, s);

	if (i < 0)
		return TERN_EINVAL;
	*out = (enum journal_cache)i;
	return 0;
}

const char *journal_cache_name(enum journal_cache c)
{
	return (unsigned)c < NCACHE ? cache_names[c] : "?";
}

/* Segment sizes: records are addressed with 32-bit offsets, and a segment
 * must hold its header block plus a useful amount of records. */
static uint64_t seg_size_clamp(uint64_t s)
{
	if (s < 64 * 1024)
		s = 64 * 1024;
	if (s > (1ull << 31))
		s = 1ull << 31;
	return (s + JALIGN_BLOCK - 1) & ~(uint64_t)(JALIGN_BLOCK - 1);
}

void jopts_fix(struct journal_opts *o)
{
	/* (an explicit fallocate means fallocate() alone; page_cache = drop
	 * keeps no page of a segment, and zeros would be pages the syncer
	 * drops before the records come) */
	o->zero_ahead = jpolicy(o->sync)->zero_ahead && o->cache != JOURNAL_CACHE_DROP &&
			(o->prealloc == JOURNAL_PREALLOC_AUTO || o->prealloc == JOURNAL_PREALLOC_ZERO);
	if (o->prealloc == JOURNAL_PREALLOC_AUTO)
		o->prealloc = JOURNAL_PREALLOC_FALLOCATE;
	o->segment_size = seg_size_clamp(o->segment_size);
	if (o->sync_interval_ms == 0)
		o->sync_interval_ms = 1;
	if (o->checkpoint_interval_ms == 0)
		o->checkpoint_interval_ms = 1000;
}
