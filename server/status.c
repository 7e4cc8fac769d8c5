/*
 * status.c: the server's and the queues' status (UP, READONLY, QUIESCENT;
 * Kestrel's), the file that keeps what operators set across restarts, and
 * the aliases' check against the queues that exist.  See status.h and
 * docs/OPERATIONS.md; the status command is ops_status (ops.c).
 *
 * Two sources set a status: the configuration ([server] status, [queues]
 * and [queue NAME] status) and the status command.  The command wins until
 * the configuration changes: a reload applies a configured status only
 * where it differs from the one configured before, so an operator's
 * QUIESCENT survives a reload that changes something else.  What operators
 * set is written to DATA_DIR/status and read back at start, where it wins
 * over the configuration (a drained server stays drained after a restart).
 */
#include "state.h"
#include "status.h"
#include "../lib/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATUS_FILE "status"

static enum queue_status stricter(enum queue_status a, enum queue_status b)
{
	return a > b ? a : b;
}

enum queue_status status_of(struct server *s, struct queue *q, const char *name, size_t len)
{
	char buf[PROTO_NAME_MAX + 1];
	struct queue_conf qc;

	if (q)
		return stricter(s->status, queue_get_status(q));
	if (len > PROTO_NAME_MAX)
		return s->status;
	memcpy(buf, name, len);
	buf[len] = '\0';
	config_queue_conf(&s->cfg, buf, &qc);
	return stricter(s->status, qc.status);
}

const char *status_refusal(struct server *s, struct queue *q, const char *name, size_t len,
			   int write, char *buf, size_t buflen)
{
	enum queue_status qs, st = status_of(s, q, name, len);

	if (st == QUEUE_UP || (st == QUEUE_READONLY && !write))
		return NULL;
	/* name the server when it is what refuses */
	if (s->status == st) {
		snprintf(buf, buflen, "server is %s", queue_status_name(st));
		return buf;
	}
	qs = q ? queue_get_status(q) : st;
	snprintf(buf, buflen, "queue %.*s is %s", (int)len, name, queue_status_name(qs));
	return buf;
}

/* ---- the file of what operators set ---- */

struct save_ctx {
	FILE *f;
	int err;
};

static void count_queue(struct queue *q, void *arg)
{
	*(unsigned *)arg += queue_status_by_operator(q) != 0;
}

static void save_queue(struct queue *q, void *arg)
{
	struct save_ctx *x = arg;

	if (queue_status_by_operator(q) &&
	    fprintf(x->f, "queue %s %s\n", queue_name(q),
		    queue_status_name(queue_get_status(q))) < 0)
		x->err = 1;
}

int status_save(struct server *s, char *err, size_t errlen)
{
	char path[sizeof(s->cfg.data_dir) + 16], tmp[sizeof(path) + 4];
	struct save_ctx x = { NULL, 0 };
	unsigned set = s->status_by_op != 0;
	int fd, dfd;

	snprintf(path, sizeof(path), "%s/" STATUS_FILE, s->cfg.data_dir);
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	qreg_each(s->reg, count_queue, &set);
	if (!set && access(path, F_OK) < 0 && errno == ENOENT)
		return 0; /* nothing set, nothing to undo */
	/* written whole beside it, synced, then renamed over it: a crash
	 * leaves the old file or the new one */
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, TERN_FILE_MODE);
	if (fd < 0 || !(x.f = fdopen(fd, "w"))) {
		snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
		if (fd >= 0)
			close(fd);
		return TERN_ESYS;
	}
	fprintf(x.f, "# ternd: statuses set with the status command (read at start)\n");
	if (s->status_by_op)
		fprintf(x.f, "server %s\n", queue_status_name(s->status));
	qreg_each(s->reg, save_queue, &x);
	if (fflush(x.f) || ferror(x.f) || x.err || fdatasync(fd) < 0) {
		snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
		fclose(x.f);
		unlink(tmp);
		return TERN_ESYS;
	}
	if (fclose(x.f) || rename(tmp, path) < 0) {
		snprintf(err, errlen, "cannot replace %s: %s", path, strerror(errno));
		unlink(tmp);
		return TERN_ESYS;
	}
	dfd = open(s->cfg.data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd) < 0) {
			snprintf(err, errlen, "cannot sync %s: %s", s->cfg.data_dir, strerror(errno));
			close(dfd);
			return TERN_ESYS;
		}
		close(dfd);
	}
	return 0;
}

int status_load(struct server *s, char *err, size_t errlen)
{
	char path[sizeof(s->cfg.data_dir) + 16], line[PROTO_NAME_MAX + 64];
	FILE *f;
	int n = 0, rc = 0;

	snprintf(path, sizeof(path), "%s/" STATUS_FILE, s->cfg.data_dir);
	f = fopen(path, "r");
	if (!f) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return TERN_ESYS;
	}
	while (fgets(line, sizeof(line), f)) {
		char *w[3], *save = NULL;
		int nw = 0;
		enum queue_status st;
		struct queue *q;

		n++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, errlen, "%s:%d: line too long", path, n);
			rc = TERN_EINVAL;
			break;
		}
		for (char *t = strtok_r(line, " \t\r\n", &save); t && nw < 3;
		     t = strtok_r(NULL, " \t\r\n", &save))
			w[nw++] = t;
		if (nw == 0 || w[0][0] == '#')
			continue;
		if (!strcmp(w[0], "server") && nw == 2 &&
		    !queue_status_parse(w[1], strlen(w[1]), &st)) {
			s->status = st;
			s->status_by_op = 1;
			log_info("server status %s (set by an operator, from %s)",
				 queue_status_name(st), path);
			continue;
		}
		if (!strcmp(w[0], "queue") && nw == 3 &&
		    !queue_status_parse(w[2], strlen(w[2]), &st)) {
			q = qreg_find(s->reg, w[1], strlen(w[1]));
			if (!q) {
				log_warn("%s:%d: no queue %s: its status is dropped", path, n, w[1]);
				continue;
			}
			queue_set_status(q, st, 1);
			log_info("queue %s status %s (set by an operator, from %s)", w[1],
				 queue_status_name(st), path);
			continue;
		}
		snprintf(err, errlen, "%s:%d: expected 'server STATUS' or 'queue NAME STATUS'",
			 path, n);
		rc = TERN_EINVAL;
		break;
	}
	if (!rc && ferror(f)) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		rc = TERN_ESYS;
	}
	fclose(f);
	return rc;
}

/* ---- setting ---- */

static void cancel_one(struct queue *q, void *arg)
{
	queue_cancel_waiters(q);
}

void status_set_server(struct server *s, enum queue_status st, int by_operator)
{
	if (st != s->status)
		log_info("server status %s -> %s%s", queue_status_name(s->status),
			 queue_status_name(st), by_operator ? " (status command)" : " (configuration)");
	s->status = st;
	s->status_by_op = by_operator;
	if (st == QUEUE_QUIESCENT)
		qreg_each(s->reg, cancel_one, NULL);
}

int status_reload(struct server *s, enum queue_status old_cfg, char *err, size_t errlen)
{
	if (s->cfg.status != old_cfg)
		status_set_server(s, s->cfg.status, 0);
	/* queue_set_conf has applied each queue's; what operators set may
	 * have changed with them */
	return status_save(s, err, errlen);
}

/* ---- aliases ---- */

int status_aliases_check(struct server *s, const struct config *cfg, char *err,
			 size_t errlen)
{
	for (const struct config_alias *a = cfg->aliases; a; a = a->next)
		if (qreg_find(s->reg, a->name, strlen(a->name))) {
			snprintf(err, errlen, "[alias %s]: a queue of that name exists (an alias "
				 "name may not be a queue's: delete the queue or rename the alias)",
				 a->name);
			return TERN_EINVAL;
		}
	return 0;
}
