/*
 * counters.c: the figures `stats` and /metrics read besides the server's
 * counters (counters.h): the journal environment's, and every queue's
 * added up.
 */
#include "counters.h"

#include <string.h>

#include "state.h"

static void add_queue(struct queue *q, void *arg)
{
	struct queue_stats *sum = arg, st;

	queue_get_stats(q, &st);
	sum->items += st.items;
	sum->bytes += st.bytes;
	sum->total_items += st.total_items;
	sum->delayed_items += st.delayed_items;
	sum->redeliveries += st.redeliveries;
	sum->dead_lettered += st.dead_lettered;
	sum->dead_dropped += st.dead_dropped;
	sum->expired_to += st.expired_to;
}

void figures_collect(struct server *s, struct figures *f)
{
	memset(f, 0, sizeof(*f));
	if (s->env)
		jenv_get_stats(s->env, &f->es);
	qreg_each(s->reg, add_queue, &f->sum);
}
