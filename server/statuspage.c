/*
 * statuspage.c: the status page, its script and the health probes on the
 * metrics listener (statuspage.h).
 *
 * The page is one HTML document with inline SVG charts drawn here, so it
 * shows everything with JavaScript off; /status.js only fetches the same
 * URL again and swaps the document's <main> in place.  A request walks
 * every queue once for the totals and the sort key (a pointer and a
 * number per queue), then reads the full figures and history of only the
 * queues on the requested page: the work per request grows with the
 * number of queues by one small entry each, and the page's size is
 * bounded by the rows it lists.
 */
#include "statuspage.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <unistd.h>

#include "state.h"
#include "status.h"
#include "evout.h"

#define HTML_TYPE "text/html; charset=utf-8"
#define TEXT_TYPE "text/plain; charset=utf-8"
#define JS_TYPE "text/javascript; charset=utf-8"
/* The page runs no inline script and loads nothing from elsewhere (its
 * icon is an empty data: URL, so that browsers ask for no /favicon.ico). */
#define PAGE_CSP                                                                   \
	"default-src 'none'; script-src 'self'; connect-src 'self'; style-src "    \
	"'unsafe-inline'; img-src 'self' data:; base-uri 'none'; form-action "     \
	"'self'; frame-ancestors 'none'"
/* The refresh interval the page asks of its script, by default and at most. */
#define REFRESH_S 5
#define REFRESH_MAX_S 3600
/* Rates on the page are over about the last minute: the slot in progress
 * and this many recorded slots before it. */
#define RATE_SLOTS 5
#define WINDOW_S (QHIST_SLOTS * QHIST_SLOT_MS / 1000)

/* The sort orders of the queue table: query word, heading. */
#define SORTS(X)                                       \
	X(NAME, "name", "name")                        \
	X(ITEMS, "items", "items waiting")             \
	X(BYTES, "bytes", "bytes waiting")             \
	X(OPEN, "open", "open items")                  \
	X(AGE, "age", "oldest item's age")             \
	X(IN, "in", "items in per second")             \
	X(OUT, "out", "items out per second")

enum sort {
#define SORT_ENUM(e, word, what) SORT_##e,
	SORTS(SORT_ENUM)
#undef SORT_ENUM
	SORT__COUNT
};

static const char *const sort_word[] = {
#define SORT_WORD(e, word, what) word,
	SORTS(SORT_WORD)
#undef SORT_WORD
};

static const char *const sort_what[] = {
#define SORT_WHAT(e, word, what) what,
	SORTS(SORT_WHAT)
#undef SORT_WHAT
};

/* What the query asks for. */
struct view {
	unsigned page, rows, refresh;
	enum sort sort;
	char filter[TERN_NAME_MAX + 1];
};

/* One queue in the first walk: what sorting needs. */
struct prow {
	struct queue *q;
	uint64_t key;
};

/* The first walk: every queue that passes the filter, and the totals. */
struct walk {
	const struct view *v;
	enum journal_sync sync;  /* the server's default */
	struct prow *rows;       /* room for every queue */
	size_t n;
	uint64_t queues, items, bytes, open, disk, segments, failed;
	uint64_t other_sync;     /* queues whose sync mode is not the default */
	const char *failed_name; /* a queue whose journal failed */
};

/* ---- output helpers ---- */

/* Text with &, <, >, " and ' escaped: safe in an element and in a quoted
 * attribute.  Queue names allow none of them today; the escape does not
 * depend on that. */
static void esc(struct evbuffer *b, int *err, const char *s)
{
	const char *p = s;

	for (; *p; p++) {
		const char *e;

		switch (*p) {
		case '&': e = "&amp;"; break;
		case '<': e = "&lt;"; break;
		case '>': e = "&gt;"; break;
		case '"': e = "&quot;"; break;
		case '\'': e = "&#39;"; break;
		default: continue;
		}
		if (p > s && evbuffer_add(b, s, (size_t)(p - s)) < 0)
			*err = 1;
		evout_str(b, err, e);
		s = p + 1;
	}
	if (p > s && evbuffer_add(b, s, (size_t)(p - s)) < 0)
		*err = 1;
}

/* A query string value with every byte but [A-Za-z0-9_.-] percent-encoded. */
static void url_arg(struct evbuffer *b, int *err, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '_' || c == '.' || c == '-')
			evout_printf(b, err, "%c", c);
		else
			evout_printf(b, err, "%%%02X", c);
	}
}

/* "1.5 MiB": bytes in binary units, three significant digits. */
static void fmt_bytes(char *buf, size_t len, uint64_t v)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	unsigned u = 0;

	while (d >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)v);
	else
		snprintf(buf, len, "%.*f %s", d < 10 ? 2 : d < 100 ? 1 : 0, d, unit[u]);
}

/* "950 ms", "12.5 s", "4 min 10 s", "3 h 5 min", "2 d 4 h". */
static void fmt_age(char *buf, size_t len, uint64_t ms)
{
	uint64_t s = ms / 1000;

	if (ms < 1000)
		snprintf(buf, len, "%llu ms", (unsigned long long)ms);
	else if (s < 60)
		snprintf(buf, len, "%.1f s", (double)ms / 1000);
	else if (s < 3600)
		snprintf(buf, len, "%llu min %llu s", (unsigned long long)(s / 60),
			 (unsigned long long)(s % 60));
	else if (s < 86400)
		snprintf(buf, len, "%llu h %llu min", (unsigned long long)(s / 3600),
			 (unsigned long long)(s / 60 % 60));
	else
		snprintf(buf, len, "%llu d %llu h", (unsigned long long)(s / 86400),
			 (unsigned long long)(s / 3600 % 24));
}

/* "0", "0.4", "12.3", "1250": a rate with as many decimals as it needs. */
static void fmt_rate(char *buf, size_t len, double r)
{
	if (r == 0)
		snprintf(buf, len, "0");
	else if (r < 100)
		snprintf(buf, len, "%.1f", r);
	else
		snprintf(buf, len, "%.0f", r);
}

/* ---- the history as rates ---- */

/* Items in and out per second over about the last minute (the slot in
 * progress and RATE_SLOTS recorded ones, fewer since a recent start). */
static void recent_rates(const struct queue_history *h, double *in, double *out_r)
{
	unsigned k = h->filled < RATE_SLOTS ? h->filled : RATE_SLOTS;
	uint64_t i_sum = h->in_now, o_sum = h->out_now;
	double secs = (double)h->since_ms / 1000 + (double)k * QHIST_SLOT_MS / 1000;

	for (unsigned i = QHIST_SLOTS - k; i < QHIST_SLOTS; i++) {
		i_sum += h->slot[i].in;
		o_sum += h->slot[i].out;
	}
	*in = secs > 0 ? (double)i_sum / secs : 0;
	*out_r = secs > 0 ? (double)o_sum / secs : 0;
}

/* One slot of a chart: when it began and ended (seconds before now),
 * the rates in and out during it, the depth at its end. */
struct span {
	double from, to, in, out, depth;
};

/* The chart's slots, oldest first: the recorded ones, then the one in
 * progress.  Returns how many (0 before anything can be drawn). */
static unsigned spans(const struct queue_history *h, struct span *p)
{
	unsigned n = 0;
	double slot_s = QHIST_SLOT_MS / 1000.0, since = (double)h->since_ms / 1000;

	for (unsigned i = QHIST_SLOTS - h->filled; i < QHIST_SLOTS; i++, n++) {
		p[n].to = since + (double)(QHIST_SLOTS - 1 - i) * slot_s;
		p[n].from = p[n].to + slot_s;
		p[n].in = h->slot[i].in / slot_s;
		p[n].out = h->slot[i].out / slot_s;
		p[n].depth = h->slot[i].depth;
	}
	/* the slot in progress, once it is long enough to give a rate (at
	 * once while it is all there is) */
	if (h->since_ms >= 1000 || (n == 0 && h->since_ms > 0)) {
		p[n].from = since;
		p[n].to = 0;
		p[n].in = (double)h->in_now / since;
		p[n].out = (double)h->out_now / since;
		p[n].depth = (double)h->depth_now;
		n++;
	}
	return n;
}

/* Where a chart draws: its box, its scales, the decimals of coordinates. */
struct frame {
	double x0, y0, w, h, rmax, dmax;
	int prec;
};

static double fx(const struct frame *f, double t)
{
	double x = f->x0 + f->w * (1 - t / WINDOW_S);

	return x < f->x0 ? f->x0 : x;
}

/* A rate (which: 0 in, 1 out) as steps, one level a slot, runs of equal
 * levels drawn as one. */
static void steps(struct evbuffer *b, int *err, const struct frame *f, const struct span *p,
		  unsigned n, int which, const char *cls)
{
	evout_printf(b, err, "<polyline class=\"%s\" points=\"", cls);
	for (unsigned i = 0; i < n; i++) {
		double v = which ? p[i].out : p[i].in, y = f->y0 + f->h * (1 - v / f->rmax);
		unsigned j = i;

		while (j + 1 < n && (which ? p[j + 1].out : p[j + 1].in) == v)
			j++;
		evout_printf(b, err, "%s%.*f,%.*f %.*f,%.*f", i ? " " : "", f->prec, fx(f, p[i].from),
		    f->prec, y, f->prec, fx(f, p[j].to), f->prec, y);
		i = j;
	}
	evout_str(b, err, "\"/>");
}

/* The depth at each slot's end as a filled area, from the start of the
 * first slot drawn (at the depth of its end). */
static void area(struct evbuffer *b, int *err, const struct frame *f, const struct span *p,
		 unsigned n)
{
	double bottom = f->y0 + f->h;

	evout_printf(b, err, "<polygon class=\"depth\" points=\"%.*f,%.*f", f->prec, fx(f, p[0].from),
	    f->prec, bottom);
	evout_printf(b, err, " %.*f,%.*f", f->prec, fx(f, p[0].from), f->prec,
	    f->y0 + f->h * (1 - p[0].depth / f->dmax));
	for (unsigned i = 0; i < n; i++) {
		/* a run of equal depths needs only its ends */
		if (i > 0 && i + 1 < n && p[i].depth == p[i - 1].depth &&
		    p[i].depth == p[i + 1].depth)
			continue;
		evout_printf(b, err, " %.*f,%.*f", f->prec, fx(f, p[i].to), f->prec,
		    f->y0 + f->h * (1 - p[i].depth / f->dmax));
	}
	evout_printf(b, err, " %.*f,%.*f\"/>", f->prec, fx(f, p[n - 1].to), f->prec, bottom);
}

/* The totals a chart's title states: items in and out over the window
 * drawn, the deepest the queue was in it. */
static void chart_title(struct evbuffer *b, int *err, const struct queue_history *h)
{
	uint64_t in = h->in_now, o = h->out_now, dmax = h->depth_now;

	for (unsigned i = QHIST_SLOTS - h->filled; i < QHIST_SLOTS; i++) {
		in += h->slot[i].in;
		o += h->slot[i].out;
		dmax = h->slot[i].depth > dmax ? h->slot[i].depth : dmax;
	}
	evout_printf(b, err, "<title>%s%d min: %llu in, %llu out; depth now %llu, at most %llu%s</title>",
	    h->filled < QHIST_SLOTS ? "since start, under " : "last ", WINDOW_S / 60,
	    (unsigned long long)in, (unsigned long long)o, (unsigned long long)h->depth_now,
	    (unsigned long long)dmax, h->incomplete ? " (some slots lost: out of memory)" : "");
}

/*
 * A chart of history h, w x hgt pixels: the depth as a grey area (scaled
 * to its own maximum), the rates in and out as steps (scaled to the larger
 * rate's maximum).  With labels, the big chart: scales and time marks.
 */
static void chart(struct evbuffer *b, int *err, const struct queue_history *h, int w, int hgt,
		  int labels)
{
	struct span p[QHIST_SLOTS + 1];
	unsigned n = spans(h, p);
	struct frame f;

	f.x0 = labels ? 44 : 1;
	f.y0 = labels ? 8 : 1;
	f.w = w - f.x0 - (labels ? 44 : 1);
	f.h = hgt - f.y0 - (labels ? 18 : 1);
	f.prec = labels ? 1 : 0;
	f.rmax = f.dmax = 0;
	for (unsigned i = 0; i < n; i++) {
		f.rmax = p[i].in > f.rmax ? p[i].in : f.rmax;
		f.rmax = p[i].out > f.rmax ? p[i].out : f.rmax;
		f.dmax = p[i].depth > f.dmax ? p[i].depth : f.dmax;
	}
	/* an idle queue draws flat along the bottom */
	f.rmax = f.rmax > 0 ? f.rmax * 1.1 : 1;
	f.dmax = f.dmax > 0 ? f.dmax * 1.1 : 1;
	evout_printf(b, err, "<svg class=\"%s\" width=\"%d\" height=\"%d\" "
			     "viewBox=\"0 0 %d %d\" role=\"img\">",
		     labels ? "chart" : "spark", w, hgt, w, hgt);
	chart_title(b, err, h);
	evout_printf(b, err, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
			     "height=\"%.1f\"/>", f.x0, f.y0, f.w, f.h);
	if (n) {
		area(b, err, &f, p, n);
		steps(b, err, &f, p, n, 0, "in");
		steps(b, err, &f, p, n, 1, "out");
	}
	if (labels) {
		char r[32];

		fmt_rate(r, sizeof(r), f.rmax);
		evout_printf(b, err, "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s/s</text>",
		    f.x0 - 4, f.y0 + 10, r);
		evout_printf(b, err, "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>",
		    f.x0 - 4, f.y0 + f.h);
		evout_printf(b, err, "<text class=\"axis depth-scale\" x=\"%.1f\" y=\"%.1f\">%.0f</text>",
		    f.x0 + f.w + 4, f.y0 + 10, f.dmax);
		for (int m = 0; m <= 2; m++) {
			char when[16];

			if (m)
				snprintf(when, sizeof(when), "-%d min", m * WINDOW_S / 120);
			else
				snprintf(when, sizeof(when), "now");
			evout_printf(b, err, "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">"
				    "%s</text>",
			    f.x0 + f.w * (1 - m / 2.0), f.y0 + f.h + 14,
			    m == 0 ? "end" : m == 2 ? "start" : "middle", when);
		}
	}
	evout_str(b, err, "</svg>");
}

/* The p-th quantile (0..1) of the fsync histogram as text: the bound of
 * the bucket it falls in. */
static void fsync_quantile(char *buf, size_t len, const struct jenv_stats *es, uint64_t total,
			   double q)
{
	uint64_t cum = 0, want = (uint64_t)ceil(q * (double)total);

	for (unsigned i = 0; i < JENV_FSYNC_BUCKETS; i++) {
		cum += es->fsync_count[i];
		if (cum >= want) {
			snprintf(buf, len, "&le; %g ms", (double)jenv_fsync_bounds_us[i] / 1000);
			return;
		}
	}
	snprintf(buf, len, "&gt; %g ms",
		 (double)jenv_fsync_bounds_us[JENV_FSYNC_BUCKETS - 1] / 1000);
}

/* The fsync latency histogram as bars (heights on a log scale of the
 * count, the count written above each bar), with its count, mean and
 * quantiles. */
static void fsync_chart(struct evbuffer *b, int *err, const struct jenv_stats *es)
{
	const int nb = JENV_FSYNC_BUCKETS + 1, bw = 40, w = nb * bw + 8, hgt = 150;
	uint64_t total = 0, max = 0;
	char p50[32], p99[32];

	for (int i = 0; i < nb; i++) {
		total += es->fsync_count[i];
		max = es->fsync_count[i] > max ? es->fsync_count[i] : max;
	}
	evout_str(b, err, "<p id=\"fsync-summary\">");
	if (total) {
		fsync_quantile(p50, sizeof(p50), es, total, 0.5);
		fsync_quantile(p99, sizeof(p99), es, total, 0.99);
		evout_printf(b, err, "%llu fdatasyncs since start, mean %.2f ms, median %s, p99 %s",
		    (unsigned long long)total, (double)es->fsync_us / 1000 / (double)total, p50, p99);
	} else {
		evout_str(b, err, "no fdatasync since start");
	}
	evout_printf(b, err, "; %llu failed.</p>", (unsigned long long)es->fsync_errors);
	evout_printf(b, err, "<svg id=\"fsync-chart\" class=\"chart\" width=\"%d\" height=\"%d\" "
		    "viewBox=\"0 0 %d %d\" role=\"img\"><title>fdatasync latency: count per "
		    "bucket (log scale)</title>",
	    w, hgt, w, hgt);
	for (int i = 0; i < nb; i++) {
		uint64_t c = es->fsync_count[i];
		double bh = max ? 100.0 * log10(1.0 + (double)c) / log10(1.0 + (double)max) : 0;
		double x = 4 + i * bw;
		char label[24];

		if (i < JENV_FSYNC_BUCKETS) {
			uint64_t us = jenv_fsync_bounds_us[i];

			if (us < 1000)
				snprintf(label, sizeof(label), "%gms", (double)us / 1000);
			else if (us < 1000000)
				snprintf(label, sizeof(label), "%llums", (unsigned long long)(us / 1000));
			else
				snprintf(label, sizeof(label), "%gs", (double)us / 1e6);
		} else {
			snprintf(label, sizeof(label), "more");
		}
		evout_printf(b, err, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\">"
			    "<title>%s%s: %llu</title></rect>",
		    x + 3, 120 - bh, bw - 6, bh, i < JENV_FSYNC_BUCKETS ? "up to " : "",
		    i < JENV_FSYNC_BUCKETS ? label : "above the last bound", (unsigned long long)c);
		evout_printf(b, err, "<text class=\"axis\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%llu"
			    "</text>",
		    x + bw / 2.0, 116 - bh, (unsigned long long)c);
		evout_printf(b, err, "<text class=\"axis\" x=\"%.1f\" y=\"136\" text-anchor=\"middle\">%s"
			    "</text>",
		    x + bw / 2.0, label);
	}
	evout_str(b, err, "</svg>");
}

/* ---- readiness ---- */

static void note(char *why, size_t len, size_t *used, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void note(char *why, size_t len, size_t *used, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*used + 1 >= len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(why + *used, len - *used, fmt, ap);
	va_end(ap);
	if (n > 0)
		*used = *used + (size_t)n < len ? *used + (size_t)n : len - 1;
}

static void find_failed(struct queue *q, void *arg)
{
	struct walk *w = arg;
	struct journal_stats js;

	if (!queue_journal(q))
		return;
	journal_get_stats(queue_journal(q), &js);
	if (js.write_errors) {
		/* a journal counts write errors only once it has failed */
		if (!w->failed++)
			w->failed_name = queue_name(q);
	}
}

int statuspage_ready(struct server *s, char *why, size_t len)
{
	struct walk w;
	struct statvfs fs;
	size_t used = 0;
	uint64_t seg = s->cfg.qdefault.jopts.segment_size;

	if (len)
		why[0] = '\0';
	if (s->shutting_down)
		note(why, len, &used, "shutting down\n");
	if (s->status != QUEUE_UP)
		note(why, len, &used, "server is %s\n", queue_status_name(s->status));
	memset(&w, 0, sizeof(w));
	qreg_each(s->reg, find_failed, &w);
	if (w.failed == 1)
		note(why, len, &used, "the journal of queue %s has failed (it refuses sets until "
				      "a restart)\n", w.failed_name);
	else if (w.failed)
		note(why, len, &used, "the journals of %llu queues have failed (%s and others; "
				      "they refuse sets until a restart)\n",
		     (unsigned long long)w.failed, w.failed_name);
	if (faccessat(AT_FDCWD, s->cfg.data_dir, W_OK, AT_EACCESS) < 0)
		note(why, len, &used, "the data directory is not writable: %s\n", strerror(errno));
	else if (statvfs(s->cfg.data_dir, &fs) == 0 &&
		 (uint64_t)fs.f_bavail * fs.f_frsize < seg) {
		char f[32], g[32];

		fmt_bytes(f, sizeof(f), (uint64_t)fs.f_bavail * fs.f_frsize);
		fmt_bytes(g, sizeof(g), seg);
		note(why, len, &used, "the data directory's file system has %s free, less than "
				      "one journal segment (segment_size %s)\n", f, g);
	}
	return used == 0;
}

/* ---- the page ---- */

static unsigned parse_uint(const char *v, unsigned def, unsigned lo, unsigned hi)
{
	char *end;
	unsigned long n;

	if (!v || !*v)
		return def;
	errno = 0;
	n = strtoul(v, &end, 10);
	if (errno || *end || v[0] == '-' || n < lo)
		return def;
	return n > hi ? hi : (unsigned)n;
}

static void parse_view(const char *query, struct view *v)
{
	struct evkeyvalq args;
	const char *a;

	memset(v, 0, sizeof(*v));
	v->page = 1;
	v->rows = STATUSPAGE_ROWS;
	v->refresh = REFRESH_S;
	v->sort = SORT_NAME;
	if (!query)
		return;
	/* (it initializes args first, so args is clear to free on failure) */
	if (evhttp_parse_query_str(query, &args) != 0) {
		evhttp_clear_headers(&args);
		return;
	}
	v->page = parse_uint(evhttp_find_header(&args, "page"), 1, 1, UINT32_MAX);
	v->rows = parse_uint(evhttp_find_header(&args, "n"), STATUSPAGE_ROWS, 1,
			     STATUSPAGE_MAX_ROWS);
	v->refresh = parse_uint(evhttp_find_header(&args, "refresh"), REFRESH_S, 0,
				REFRESH_MAX_S);
	if ((a = evhttp_find_header(&args, "sort")) != NULL)
		for (unsigned i = 0; i < SORT__COUNT; i++)
			if (strcmp(a, sort_word[i]) == 0)
				v->sort = (enum sort)i;
	if ((a = evhttp_find_header(&args, "q")) != NULL && strlen(a) < sizeof(v->filter))
		strcpy(v->filter, a);
	evhttp_clear_headers(&args);
}

/* The sort key of q (larger first), for every order but by name. */
static uint64_t sort_key(struct queue *q, enum sort sort, const struct queue_stats *st)
{
	struct queue_history h;
	double in, o;

	switch (sort) {
	case SORT_ITEMS: return st->items;
	case SORT_BYTES: return st->bytes;
	case SORT_OPEN: return st->open_transactions;
	case SORT_AGE: return st->age_ms;
	case SORT_IN:
	case SORT_OUT:
		queue_history(q, &h);
		recent_rates(&h, &in, &o);
		/* thousandths of an item a second: fine enough to order by */
		return (uint64_t)((sort == SORT_IN ? in : o) * 1000);
	default: return 0;
	}
}

static void collect(struct queue *q, void *arg)
{
	struct walk *w = arg;
	struct queue_stats st;
	struct prow *r;

	queue_get_stats(q, &st);
	w->queues++;
	w->items += st.items;
	w->bytes += st.bytes;
	w->open += st.open_transactions;
	w->other_sync += queue_get_conf(q)->jopts.sync != w->sync;
	if (queue_journal(q)) {
		struct journal_stats js;

		journal_get_stats(queue_journal(q), &js);
		w->disk += js.disk_bytes;
		w->segments += js.segments;
		if (js.write_errors && !w->failed++)
			w->failed_name = queue_name(q);
	}
	/* (rows has room for every queue: the walk creates none) */
	if (w->v->filter[0] && !strstr(queue_name(q), w->v->filter))
		return;
	r = &w->rows[w->n++];
	r->q = q;
	r->key = w->v->sort == SORT_NAME ? 0 : sort_key(q, w->v->sort, &st);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(queue_name(((const struct prow *)a)->q),
		      queue_name(((const struct prow *)b)->q));
}

static int cmp_key(const void *a, const void *b)
{
	const struct prow *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? 1 : -1;
	return cmp_name(a, b);
}

static const char CSS[] =
	"body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;"
	"background:#f5f6f8;color:#1a202c}"
	"header{background:#1a365d;color:#fff;padding:10px 20px;display:flex;gap:14px;"
	"align-items:baseline;flex-wrap:wrap}"
	"header h1{font-size:20px;margin:0}header .sub{opacity:.8}"
	"main{padding:12px 20px}section{background:#fff;border:1px solid #e2e8f0;"
	"border-radius:6px;padding:12px 16px;margin-bottom:14px}"
	"h2{font-size:16px;margin:0 0 8px}"
	".grid{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}"
	"table{border-collapse:collapse}th,td{padding:3px 8px;text-align:left;"
	"vertical-align:middle}"
	"table.kv th{color:#4a5568;font-weight:600;padding-left:0}"
	"#queue-table th{border-bottom:2px solid #cbd5e0;white-space:nowrap}"
	"#queue-table td{border-bottom:1px solid #edf2f7}#queue-table td.num{text-align:right;"
	"font-variant-numeric:tabular-nums}#queue-table td.name{font-family:ui-monospace,"
	"monospace;word-break:break-all}"
	".st-UP{color:#276749}.st-READONLY{color:#b7791f;font-weight:600}"
	".st-QUIESCENT{color:#c53030;font-weight:600}"
	".badge{border-radius:4px;padding:1px 8px;font-weight:600;font-size:13px}"
	".ok{background:#c6f6d5;color:#22543d}.bad{background:#fed7d7;color:#822727}"
	".warn{background:#fefcbf;color:#744210}"
	"svg .frame{fill:#fbfcfd;stroke:#e2e8f0}svg .depth{fill:#cbd5e0;opacity:.7}"
	"svg .in{fill:none;stroke:#2b6cb0;stroke-width:1.5}"
	"svg .out{fill:none;stroke:#dd6b20;stroke-width:1.5}"
	"svg .bar{fill:#805ad5}svg .axis{font-size:10px;fill:#4a5568}"
	".key-in{color:#2b6cb0;font-weight:600}.key-out{color:#dd6b20;font-weight:600}"
	".key-depth{color:#718096;font-weight:600}"
	".pager{display:flex;gap:14px;align-items:center;flex-wrap:wrap;margin:4px 0 8px}"
	".note{color:#4a5568;font-size:12px}"
	"a{color:#2b6cb0}";

/* The reasons of statuspage_ready, one a line, as a list. */
static void reasons(struct evbuffer *b, int *err, char *why)
{
	char *line, *save = NULL;

	evout_str(b, err, "<ul id=\"not-ready\">");
	for (line = strtok_r(why, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		evout_str(b, err, "<li>");
		esc(b, err, line);
		evout_str(b, err, "</li>");
	}
	evout_str(b, err, "</ul>");
}

static void server_section(struct evbuffer *b, int *err, struct server *s, const struct walk *w,
			   const struct jenv_stats *es, int ready, char *why)
{
	const struct journal_opts *jo = &s->cfg.qdefault.jopts;
	enum journal_sync sync = s->cfg.sync_forced ? s->cfg.forced_sync : jo->sync;
	struct queue_history h;
	struct statvfs fs;
	char t1[32], t2[32];

	evout_str(b, err, "<section id=\"server\"><h2>Server</h2><div class=\"grid\">"
			  "<table class=\"kv\">");
	evout_printf(b, err, "<tr><th>version</th><td id=\"version\">ternd %s (speaks memcached "
			     "%s)</td></tr>", TERN_VERSION, PROTO_MEMCACHED_VERSION);
	evout_printf(b, err, "<tr><th>sync mode</th><td id=\"sync-mode\">%s", journal_sync_name(sync));
	if (sync == JOURNAL_SYNC_INTERVAL)
		evout_printf(b, err, " (every %u ms)", jo->sync_interval_ms);
	if (s->cfg.sync_forced)
		evout_str(b, err, " (--sync, every queue)");
	else if (w->other_sync)
		evout_printf(b, err, " (the default; %llu queue%s another)", (unsigned long long)w->other_sync,
		    w->other_sync == 1 ? " has" : "s have");
	else
		evout_str(b, err, " (every queue)");
	evout_str(b, err, "</td></tr>");
	evout_printf(b, err, "<tr><th>status</th><td><span id=\"server-status\" class=\"st-%s\">%s</span>"
		    "</td></tr>",
	    queue_status_name(s->status), queue_status_name(s->status));
	evout_str(b, err, "<tr><th>ready</th><td id=\"ready\">");
	if (ready) {
		evout_str(b, err, "<span class=\"badge ok\">ready</span>");
	} else {
		evout_str(b, err, "<span class=\"badge bad\">not ready</span> ");
		reasons(b, err, why);
	}
	evout_str(b, err, "</td></tr>");
	fmt_age(t1, sizeof(t1), (uint64_t)(tern_mono_ms() - s->started_ms));
	evout_printf(b, err, "<tr><th>up for</th><td id=\"uptime\">%s</td></tr>", t1);
	evout_printf(b, err, "<tr><th>connections</th><td id=\"connections\">%u (at most %u)</td></tr>",
	    s->nconns, s->cfg.max_connections);
	evout_printf(b, err, "<tr><th>queues</th><td id=\"queue-count\">%llu</td></tr>",
	    (unsigned long long)w->queues);
	fmt_bytes(t1, sizeof(t1), w->bytes);
	evout_printf(b, err, "<tr><th>items waiting</th><td id=\"items\">%llu (%s), %llu open</td></tr>",
	    (unsigned long long)w->items, t1, (unsigned long long)w->open);
	fmt_bytes(t1, sizeof(t1), w->disk);
	evout_printf(b, err, "<tr><th>journal disk use</th><td id=\"disk\">%s in %llu segment file%s", t1,
	    (unsigned long long)w->segments, w->segments == 1 ? "" : "s");
	if (statvfs(s->cfg.data_dir, &fs) == 0) {
		fmt_bytes(t2, sizeof(t2), (uint64_t)fs.f_bavail * fs.f_frsize);
		evout_printf(b, err, "; %s free", t2);
	}
	evout_str(b, err, "</td></tr>");
	evout_printf(b, err, "<tr><th>journal errors</th><td id=\"journal-errors\">%llu failed journal%s, "
		    "%llu failed fdatasync%s</td></tr>",
	    (unsigned long long)w->failed, w->failed == 1 ? "" : "s",
	    (unsigned long long)es->fsync_errors, es->fsync_errors == 1 ? "" : "s");
	evout_str(b, err, "</table><div><h2>Traffic, all queues</h2>");
	qreg_history(s->reg, &h);
	chart(b, err, &h, 560, 150, 1);
	evout_str(b, err, "<p class=\"note\"><span class=\"key-in\">in/s</span>, "
		    "<span class=\"key-out\">out/s</span> (left scale), <span class=\"key-depth\">items "
		    "waiting</span> (grey, right scale); 10 s slots.</p></div>"
		    "<div><h2>fdatasync latency</h2>");
	fsync_chart(b, err, es);
	evout_str(b, err, "</div></div></section>");
}

/* A link to the page with v's arguments, but page p and sort so. */
static void page_link(struct evbuffer *b, int *err, const struct view *v, unsigned p, enum sort so)
{
	evout_printf(b, err, "?page=%u&amp;n=%u&amp;sort=%s&amp;refresh=%u", p, v->rows, sort_word[so],
	    v->refresh);
	if (v->filter[0]) {
		evout_str(b, err, "&amp;q=");
		url_arg(b, err, v->filter);
	}
}

static void pager(struct evbuffer *b, int *err, const struct view *v, size_t nrows,
		  size_t first, size_t last, unsigned pages, uint64_t queues)
{
	evout_str(b, err, "<div class=\"pager\"><span id=\"shown\">");
	if (nrows)
		evout_printf(b, err, "queues %zu&ndash;%zu of %zu", first + 1, last, nrows);
	else
		evout_str(b, err, "no queue");
	if (v->filter[0]) {
		evout_str(b, err, " whose name contains &ldquo;");
		esc(b, err, v->filter);
		evout_printf(b, err, "&rdquo; (of %llu)", (unsigned long long)queues);
	}
	evout_printf(b, err, ", by %s; page %u of %u</span>", sort_what[v->sort], v->page, pages);
	if (v->page > 1) {
		evout_str(b, err, "<a id=\"prev\" href=\"");
		page_link(b, err, v, v->page - 1, v->sort);
		evout_str(b, err, "\">&larr; previous</a>");
	}
	if (v->page < pages) {
		evout_str(b, err, "<a id=\"next\" href=\"");
		page_link(b, err, v, v->page + 1, v->sort);
		evout_str(b, err, "\">next &rarr;</a>");
	}
	/* a plain GET form: works without the script */
	evout_str(b, err, "<form method=\"get\" action=\"/\">name contains <input name=\"q\" size=\"16\" "
		    "value=\"");
	esc(b, err, v->filter);
	evout_str(b, err, "\"> sort by <select name=\"sort\">");
	for (unsigned i = 0; i < SORT__COUNT; i++)
		evout_printf(b, err, "<option value=\"%s\"%s>%s</option>", sort_word[i],
		    i == v->sort ? " selected" : "", sort_what[i]);
	evout_printf(b, err, "</select><input type=\"hidden\" name=\"n\" value=\"%u\"><input "
		    "type=\"hidden\" name=\"refresh\" value=\"%u\"> <button>show</button></form>",
	    v->rows, v->refresh);
	evout_str(b, err, "</div>");
}

static void queue_row(struct evbuffer *b, int *err, struct server *s, struct queue *q)
{
	struct queue_stats st;
	struct queue_history h;
	enum queue_status eff = status_of(s, q, NULL, 0);
	const struct journal_opts *jo = &queue_get_conf(q)->jopts;
	char t[32];
	double in, o;

	queue_get_stats(q, &st);
	queue_history(q, &h);
	recent_rates(&h, &in, &o);
	evout_str(b, err, "<tr data-queue=\"");
	esc(b, err, queue_name(q));
	evout_str(b, err, "\"><td class=\"name\">");
	esc(b, err, queue_name(q));
	evout_printf(b, err, "</td><td class=\"status st-%s\">%s", queue_status_name(eff),
	    queue_status_name(eff));
	if (eff != st.status)
		evout_str(b, err, " (server)");
	evout_printf(b, err, "</td><td class=\"items num\">%llu</td>", (unsigned long long)st.items);
	fmt_bytes(t, sizeof(t), st.bytes);
	evout_printf(b, err, "<td class=\"bytes num\">%s</td>", t);
	evout_printf(b, err, "<td class=\"open num\">%llu</td><td class=\"waiters num\">%llu</td>",
	    (unsigned long long)st.open_transactions, (unsigned long long)st.waiters);
	if (st.items)
		fmt_age(t, sizeof(t), st.age_ms);
	else
		snprintf(t, sizeof(t), "&ndash;");
	evout_printf(b, err, "<td class=\"age num\">%s</td>", t);
	fmt_rate(t, sizeof(t), in);
	evout_printf(b, err, "<td class=\"in num\">%s</td>", t);
	fmt_rate(t, sizeof(t), o);
	evout_printf(b, err, "<td class=\"out num\">%s</td><td class=\"history\">", t);
	chart(b, err, &h, 150, 30, 0);
	evout_printf(b, err, "</td><td class=\"sync\">%s</td>", journal_sync_name(jo->sync));
	if (queue_journal(q)) {
		struct journal_stats js;

		journal_get_stats(queue_journal(q), &js);
		fmt_bytes(t, sizeof(t), js.disk_bytes);
		evout_printf(b, err, "<td class=\"disk num\">%s</td>", t);
		if (js.write_errors)
			evout_str(b, err, "<td class=\"jstate bad\">failed</td>");
		else
			evout_str(b, err, "<td class=\"jstate\">ok</td>");
	} else {
		evout_str(b, err, "<td class=\"disk num\">&ndash;</td><td class=\"jstate\">memory</td>");
	}
	evout_str(b, err, "</tr>");
}

int statuspage_render(struct server *s, const char *query, struct evbuffer *b)
{
	struct view v;
	struct walk w;
	struct jenv_stats es;
	char why[1024];
	int err = 0, ready;
	size_t first, last;
	unsigned pages;

	parse_view(query, &v);
	memset(&w, 0, sizeof(w));
	w.v = &v;
	w.sync = s->cfg.sync_forced ? s->cfg.forced_sync : s->cfg.qdefault.jopts.sync;
	w.rows = malloc((qreg_count(s->reg) + 1) * sizeof(*w.rows));
	if (!w.rows)
		return TERN_ENOMEM;
	qreg_each(s->reg, collect, &w);
	if (w.n > 1)
		qsort(w.rows, w.n, sizeof(*w.rows), v.sort == SORT_NAME ? cmp_name : cmp_key);
	pages = w.n ? (unsigned)((w.n + v.rows - 1) / v.rows) : 1;
	if (v.page > pages)
		v.page = pages;
	first = (size_t)(v.page - 1) * v.rows;
	last = first + v.rows < w.n ? first + v.rows : w.n;
	memset(&es, 0, sizeof(es));
	if (s->env)
		jenv_get_stats(s->env, &es);
	ready = statuspage_ready(s, why, sizeof(why));

	evout_str(b, &err, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
		     "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
		     "<link rel=\"icon\" href=\"data:,\">");
	evout_printf(b, &err, "<title>tern %s: %llu queues, %s</title><style>%s</style>"
		     "<script src=\"/status.js\" defer></script></head>",
	    queue_status_name(s->status), (unsigned long long)w.queues,
	    ready ? "ready" : "not ready", CSS);
	evout_printf(b, &err, "<body data-refresh=\"%u\"><header><h1>tern</h1><span class=\"sub\">"
		     "ternd %s</span><span id=\"refresh-note\" class=\"sub\">", v.refresh,
	    TERN_VERSION);
	evout_str(b, &err, "<noscript><span>JavaScript is off: reload the page to see it change."
		     "</span></noscript></span></header><main id=\"main\">");
	server_section(b, &err, s, &w, &es, ready, why);
	evout_str(b, &err, "<section id=\"queues\"><h2>Queues</h2>");
	pager(b, &err, &v, w.n, first, last, pages, w.queues);
	evout_str(b, &err, "<table id=\"queue-table\"><thead><tr><th>queue</th><th>status</th>"
		     "<th>items</th><th>bytes</th><th>open</th><th>waiters</th><th>oldest</th>"
		     "<th>in/s</th><th>out/s</th><th>last 10 min</th><th>sync</th>"
		     "<th>journal</th><th></th></tr></thead><tbody>");
	for (size_t i = first; i < last; i++)
		queue_row(b, &err, s, w.rows[i].q);
	evout_str(b, &err, "</tbody></table>");
	evout_printf(b, &err, "<p class=\"note\">Rates are over about the last minute.  Each chart covers "
		     "the last 10 minutes in %d s slots: <span class=\"key-in\">in/s</span> and "
		     "<span class=\"key-out\">out/s</span> on one scale, the "
		     "<span class=\"key-depth\">items waiting</span> in grey on their own; hover "
		     "a chart for its totals.  The page lists at most %d queues at a time "
		     "(n=, up to %d); the figures are those of <a href=\"/metrics\">/metrics</a>."
		     "</p></section></main></body></html>\n",
	    QHIST_SLOT_MS / 1000, v.rows, STATUSPAGE_MAX_ROWS);
	free(w.rows);
	return err ? TERN_ENOMEM : 0;
}

/* ---- HTTP ---- */

/* Refreshes the page in place every data-refresh seconds while it is
 * visible.  The page is whole without it. */
static const char SCRIPT[] =
	"'use strict';\n"
	"(function () {\n"
	"  var secs = parseInt(document.body.getAttribute('data-refresh'), 10);\n"
	"  var note = document.getElementById('refresh-note');\n"
	"  if (!(secs > 0)) { note.textContent = 'not refreshing (refresh=0)'; return; }\n"
	"  note.textContent = 'refreshing every ' + secs + ' s';\n"
	"  function later() { setTimeout(tick, secs * 1000); }\n"
	"  function tick() {\n"
	"    if (document.hidden) { later(); return; }\n"
	"    fetch(location.href, { cache: 'no-store' }).then(function (r) {\n"
	"      if (!r.ok) throw new Error('HTTP ' + r.status);\n"
	"      return r.text();\n"
	"    }).then(function (text) {\n"
	"      var doc = new DOMParser().parseFromString(text, 'text/html');\n"
	"      var fresh = doc.getElementById('main');\n"
	"      if (!fresh) throw new Error('no page in the answer');\n"
	"      document.getElementById('main').replaceWith(fresh);\n"
	"      document.title = doc.title;\n"
	"      note.textContent = 'refreshing every ' + secs + ' s, last at ' +\n"
	"        new Date().toLocaleTimeString();\n"
	"    }).catch(function (e) {\n"
	"      note.textContent = 'refresh failed (' + e.message + '), retrying';\n"
	"    }).then(later);\n"
	"  }\n"
	"  later();\n"
	"})();\n";

static void no_cache(struct evhttp_request *req, const char *type)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	evhttp_add_header(h, "Content-Type", type);
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
}

static void on_page(struct evhttp_request *req, void *arg)
{
	struct server *s = arg;
	struct evbuffer *b = evhttp_request_get_output_buffer(req);
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);

	if (statuspage_render(s, u ? evhttp_uri_get_query(u) : NULL, b)) {
		evbuffer_drain(b, evbuffer_get_length(b));
		evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
		return;
	}
	no_cache(req, HTML_TYPE);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Security-Policy",
			  PAGE_CSP);
	evhttp_add_header(evhttp_request_get_output_headers(req), "X-Frame-Options", "DENY");
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void on_script(struct evhttp_request *req, void *arg)
{
	struct evbuffer *b = evhttp_request_get_output_buffer(req);

	if (evbuffer_add_reference(b, SCRIPT, sizeof(SCRIPT) - 1, NULL, NULL) < 0) {
		evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
		return;
	}
	no_cache(req, JS_TYPE);
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void text_reply(struct evhttp_request *req, int code, const char *reason,
		       const char *text)
{
	struct evbuffer *b = evhttp_request_get_output_buffer(req);

	if (evbuffer_add(b, text, strlen(text)) < 0) {
		evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
		return;
	}
	no_cache(req, TEXT_TYPE);
	evhttp_send_reply(req, code, reason, NULL);
}

static void on_healthz(struct evhttp_request *req, void *arg)
{
	text_reply(req, HTTP_OK, "OK", "ok\n");
}

static void on_readyz(struct evhttp_request *req, void *arg)
{
	char why[1024];

	char body[1200];
	size_t used = 0;

	if (statuspage_ready(arg, why, sizeof(why))) {
		text_reply(req, HTTP_OK, "OK", "ready\n");
		return;
	}
	/* "not ready: REASON", a line each */
	for (char *save = NULL, *line = strtok_r(why, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		int n = snprintf(body + used, sizeof(body) - used, "not ready: %s\n", line);

		if (n < 0 || (size_t)n >= sizeof(body) - used)
			break;
		used += (size_t)n;
	}
	body[used] = '\0';
	text_reply(req, HTTP_SERVUNAVAIL, "Service Unavailable", body);
}

int statuspage_attach(struct evhttp *http, struct server *s)
{
	if (evhttp_set_cb(http, "/", on_page, s) != 0 ||
	    evhttp_set_cb(http, "/status.js", on_script, s) != 0 ||
	    evhttp_set_cb(http, "/healthz", on_healthz, s) != 0 ||
	    evhttp_set_cb(http, "/readyz", on_readyz, s) != 0)
		return TERN_ENOMEM;
	return 0;
}
