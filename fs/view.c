/* SPDX-License-Identifier: MIT */
/*
 * view.c -- the subcommands that look at weights without a mount:
 * `ptfs stat` (per-tensor statistics and hashes), `ptfs diff` (what changed
 * between two checkpoints) and `ptfs preview` (a tensor's picture as PNG).
 * The work is in core/view/; this file parses arguments and prints.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "base/json.h"
#include "ckpt/ckpt.h"
#include "decode/dtype.h"
#include "diff_values.h"
#include "io/fd.h"
#include "progress.h"
#include "ptfs.h"
#include "usage.h"
#include "view/diff.h"
#include "view/preview.h"
#include "view/stats.h"
#include "view/walk.h"

static const struct pt_ckpt_opts *vopts;

/* Write what @b holds to stdout and empty it. */
static void out_buf(struct pt_buf *b)
{
	if (b->len)
		fwrite(b->p, 1, b->len, stdout);
	b->len = 0;
}

static int open_ck(const char *path, struct pt_ckpt **ck)
{
	struct pt_error err;

	pt_error_clear(&err);
	if (pt_ckpt_open(ck, path, vopts, &err) != 0) {
		fprintf(stderr, "ptfs: %s: %s\n", path, err.msg);
		return -1;
	}
	return 0;
}

/* The tensors at or below @sub ("" = all) of an opened checkpoint. */
static int list_tensors(struct pt_ckpt *ck, const char *ckpath, const char *sub,
			struct pt_view_item **items, size_t *n)
{
	struct pt_error err;
	struct pt_node *top;
	int rc = 0;

	top = *sub ? pt_tree_path(ck, sub, &rc) : pt_tree_root(ck);
	if (!top) {
		fprintf(stderr, "ptfs: %s: %s: %s\n", ckpath, sub, strerror(-rc));
		return -1;
	}
	pt_error_clear(&err);
	if (pt_view_tensors(ck, top, sub, items, n, &err) != 0) {
		fprintf(stderr, "ptfs: %s: %s\n", ckpath, err.msg);
		return -1;
	}
	return 0;
}

static unsigned default_jobs(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 && n < 1024 ? (unsigned)n : 1;
}

static int parse_jobs(const char *s, unsigned *jobs)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (!*s || *end || v == 0 || v > 1024)
		return -1;
	*jobs = (unsigned)v;
	return 0;
}

/* ---- ptfs stat ---- */

static uint64_t node_bytes(struct pt_node *n)
{
	struct pt_nattr a;

	pt_node_attr(n, &a);
	return a.size;
}

/* Lines of stat and diff go out as items finish, in item order: the item
 * that completes the run from @next prints it (under @lock). */
struct stream {
	pthread_mutex_t lock;
	size_t next, n;
	bool *done;
	struct ptfs_progress *pg;
	void (*line)(void *ctx, size_t i, struct pt_buf *b);
	void *ctx;
};

static int stream_init(struct stream *s, size_t n, void (*line)(void *, size_t, struct pt_buf *),
		       void *ctx, const char *what)
{
	memset(s, 0, sizeof(*s));
	s->done = calloc(n + 1, sizeof(*s->done));
	if (!s->done)
		return -1;
	pthread_mutex_init(&s->lock, NULL);
	s->n = n;
	s->line = line;
	s->ctx = ctx;
	s->pg = ptfs_progress_start(what);
	return 0;
}

/* Item @i is finished: print every finished item from the next one on. */
static void stream_done(struct stream *s, size_t i)
{
	struct pt_buf b;

	pt_buf_init(&b);
	pthread_mutex_lock(&s->lock);
	s->done[i] = true;
	while (s->next < s->n && s->done[s->next])
		s->line(s->ctx, s->next++, &b);
	if (b.len)
		ptfs_progress_print(s->pg, b.p, b.len);
	pthread_mutex_unlock(&s->lock);
	pt_buf_free(&b);
}

static void stream_end(struct stream *s)
{
	ptfs_progress_end(s->pg);
	pthread_mutex_destroy(&s->lock);
	free(s->done);
}

struct stat_job {
	struct pt_ckpt *ck;
	const char *ckpath;
	bool json;
	struct pt_view_item *items;
	struct pt_tstats *st;
	int *rc;
	struct pt_error *err;
	struct pt_error err0;            /* before the first tensor */
	struct stream out;
};

static void shape_str(struct pt_buf *b, const struct pt_tinfo *ti)
{
	uint32_t i;

	pt_buf_putc(b, '[');
	for (i = 0; i < ti->rank; i++)
		pt_buf_printf(b, "%s%lld", i ? ", " : "", (long long)ti->shape[i]);
	pt_buf_putc(b, ']');
}

/* The line of tensor @i (an unreadable one: to stderr, unless JSON). */
static void stat_line(void *ctx, size_t i, struct pt_buf *b)
{
	struct stat_job *j = ctx;
	const struct pt_view_item *it = &j->items[i];

	if (j->json) {
		pt_buf_puts(b, i ? ",\n  " : "\n  ");
		if (j->rc[i]) {
			pt_buf_puts(b, "{\"path\": \"");
			pt_json_str(b, (const uint8_t *)it->path, strlen(it->path));
			pt_buf_puts(b, "\", \"error\": \"");
			pt_json_str(b, (const uint8_t *)j->err[i].msg, strlen(j->err[i].msg));
			pt_buf_puts(b, "\"}");
		} else {
			pt_tstats_json(&j->st[i], it->path, false, b);
		}
	} else if (j->rc[i]) {
		ptfs_progress_print(j->out.pg, b->p, b->len);   /* order kept */
		b->len = 0;
		fprintf(stderr, "ptfs: %s: %s: %s\n", j->ckpath, it->path, j->err[i].msg);
	} else {
		pt_buf_printf(b, "%s  %s ", it->path, j->st[i].ti.dtype);
		shape_str(b, &j->st[i].ti);
		pt_buf_puts(b, "  ");
		pt_tstats_text(&j->st[i], b);
		pt_buf_putc(b, '\n');
	}
}

static void stat_one(void *ctx, size_t i)
{
	struct stat_job *j = ctx;

	pt_error_clear(&j->err[i]);
	j->rc[i] = pt_tensor_stats(j->ck, j->items[i].node, &j->st[i], &j->err[i]);
	stream_done(&j->out, i);
}

/* "3 tensors contain NaN, 1 contains +Inf" or "no NaN or Inf". */
static void summary(struct pt_buf *b, const struct pt_tstats *st, const int *rc,
		    size_t n)
{
	size_t i, nan = 0, pinf = 0, ninf = 0, bad = 0;
	uint64_t elems = 0, bytes = 0;

	for (i = 0; i < n; i++) {
		if (rc[i]) {
			bad++;
			continue;
		}
		elems += st[i].ti.numel;
		bytes += st[i].ti.nbytes;
		nan += st[i].nan > 0;
		pinf += st[i].pinf > 0;
		ninf += st[i].ninf > 0;
	}
	pt_buf_printf(b, "%zu tensor%s, %llu elements, %llu bytes; ", n, n == 1 ? "" : "s",
		      (unsigned long long)elems, (unsigned long long)bytes);
	if (!nan && !pinf && !ninf)
		pt_buf_puts(b, "no NaN or Inf");
	if (nan)
		pt_buf_printf(b, "%zu tensor%s NaN", nan, nan == 1 ? " contains" : "s contain");
	if (pinf)
		pt_buf_printf(b, "%s%zu tensor%s +Inf", nan ? ", " : "", pinf,
			      pinf == 1 ? " contains" : "s contain");
	if (ninf)
		pt_buf_printf(b, "%s%zu tensor%s -Inf", nan || pinf ? ", " : "", ninf,
			      ninf == 1 ? " contains" : "s contain");
	if (bad)
		pt_buf_printf(b, "; %zu could not be read", bad);
}

/* Every tensor's line as it finishes, then the summary. */
static void stat_run(struct stat_job *j, size_t n, unsigned jobs)
{
	struct pt_buf b;
	size_t i;

	pt_buf_init(&b);
	if (j->json) {
		pt_buf_puts(&b, "{\"checkpoint\": \"");
		pt_json_str(&b, (const uint8_t *)j->ckpath, strlen(j->ckpath));
		pt_buf_puts(&b, "\", \"tensors\": [");
		ptfs_progress_print(j->out.pg, b.p, b.len);
		b.len = 0;
	}
	for (i = 0; i < n; i++)
		ptfs_progress_total(j->out.pg, node_bytes(j->items[i].node));
	pt_view_parallel(n, jobs, stat_one, j);
	if (j->json) {
		pt_buf_puts(&b, "\n], \"summary\": \"");
		summary(&b, j->st, j->rc, n);
		pt_buf_puts(&b, "\"}\n");
	} else {
		pt_buf_printf(&b, "%s: ", j->ckpath);
		summary(&b, j->st, j->rc, n);
		pt_buf_putc(&b, '\n');
	}
	ptfs_progress_end(j->out.pg);
	j->out.pg = NULL;
	out_buf(&b);
	pt_buf_free(&b);
}

/* The arguments of stat (@sub) or diff (@sub NULL, the two checkpoints in
 * @ckpath[0..1]): 0, or PTFS_EXIT_USAGE once said. */
static int view_args(int argc, char **argv, const char **ckpath, const char **sub,
		     unsigned *jobs, bool *json, bool *quiet, bool *tonly)
{
	static const char *const stat_names[] = { "--json", "-j=", NULL };
	static const char *const diff_names[] = { "--json", "-j=", "-q",
						  "--tensors-only", NULL };
	static const char *const stat_what[] = { "CHECKPOINT" };
	static const char *const diff_what[] = { "CHECKPOINT_A", "CHECKPOINT_B" };
	struct ptfs_args a;
	const char *v;
	int k, npos = 0, need = sub ? 1 : 2;

	ptfs_args_init(&a, argc, argv);
	while ((k = ptfs_args_next(&a, sub ? stat_names : diff_names, &v)) != PTFS_ARG_END) {
		if (k == PTFS_ARG_BAD)
			return PTFS_EXIT_USAGE;
		if (k == 0)
			*json = true;
		else if (k == 1 && parse_jobs(v, jobs))
			return ptfs_usage_error(argv[0], "-j takes a number from 1 to 1024, not '%s'", v);
		else if (k == 2)
			*quiet = true;
		else if (k == 3)
			*tonly = true;
		else if (k >= 0)
			continue;
		else if (npos < need)
			ckpath[npos++] = v;
		else if (sub && npos++ == 1)
			*sub = v;
		else
			return ptfs_usage_error(argv[0], "extra argument '%s'", v);
	}
	if (npos < need)
		return ptfs_usage_error(argv[0], "missing %s", (sub ? stat_what : diff_what)[npos]);
	return 0;
}

static int cmd_stat(int argc, char **argv)
{
	const char *ckpath = NULL, *sub = "";
	struct pt_view_item *items = NULL;
	struct pt_ckpt *ck = NULL;
	unsigned jobs = default_jobs();
	bool json = false, quiet = false;
	size_t n = 0, i;
	int status = PTFS_EXIT_ERROR;
	struct stat_job j = { 0 };

	if (view_args(argc, argv, &ckpath, &sub, &jobs, &json, &quiet, NULL))
		return PTFS_EXIT_USAGE;
	if (open_ck(ckpath, &ck))
		return PTFS_EXIT_ERROR;
	pt_error_clear(&j.err0);
	if (pt_tstats_load(&j.err0)) {
		fprintf(stderr, "ptfs: %s: %s\n", ckpath, j.err0.msg);
		goto out;
	}
	if (list_tensors(ck, ckpath, sub, &items, &n))
		goto out;
	j.ck = ck;
	j.ckpath = ckpath;
	j.json = json;
	j.items = items;
	j.st = calloc(n + 1, sizeof(*j.st));
	j.rc = calloc(n + 1, sizeof(*j.rc));
	j.err = calloc(n + 1, sizeof(*j.err));
	if (!j.st || !j.rc || !j.err || stream_init(&j.out, n, stat_line, &j, "stat")) {
		fprintf(stderr, "ptfs: %s: out of memory\n", ckpath);
		goto out;
	}
	pt_ckpt_set_progress(ck, ptfs_progress_hook, j.out.pg);
	stat_run(&j, n, jobs);
	stream_end(&j.out);
	status = PTFS_EXIT_OK;
	for (i = 0; i < n; i++)
		if (j.rc[i])
			status = PTFS_EXIT_ERROR;
out:
	free(j.st);
	free(j.rc);
	free(j.err);
	pt_view_items_free(items, n);
	pt_ckpt_close(ck);
	return status;
}

/* ---- ptfs diff ---- */

struct pair {
	struct pt_view_item *a, *b;     /* NULL when only on one side */
	struct pt_tdiff d;
	struct pt_error err;
	int rc;
};

struct diff_job {
	struct pt_ckpt *ca, *cb;
	struct pair *p;
	bool json, quiet;
	bool tensors_only;              /* --tensors-only: values not compared */
	struct ptfs_vdiff vals;         /* the values that are not tensors */
	struct stream out;
};

static void diff_line(void *ctx, size_t i, struct pt_buf *b);

static void diff_one(void *ctx, size_t i)
{
	struct diff_job *j = ctx;
	struct pair *p = &j->p[i];

	pt_error_clear(&p->err);
	if (!p->a || !p->b) {
		memset(&p->d, 0, sizeof(p->d));
		p->d.status = p->a ? PT_D_REMOVED : PT_D_ADDED;
	} else {
		p->rc = pt_tensor_diff(j->ca, p->a->node, j->cb, p->b->node, &p->d, &p->err);
		/* a change of shape is seen without reading a byte */
		if (!p->rc && p->d.status == PT_D_SHAPE)
			ptfs_progress_done(j->out.pg, node_bytes(p->a->node) +
					   node_bytes(p->b->node));
	}
	stream_done(&j->out, i);
}

static int by_key(const void *x, const void *y)
{
	const struct pt_view_item *a = x, *b = y;
	return strcmp(a->key, b->key);
}

/* Sorted merge of both sides' keys into pairs (*@np of them). */
static struct pair *match(struct pt_view_item *a, size_t na,
			  struct pt_view_item *b, size_t nb, size_t *np)
{
	struct pair *p = calloc(na + nb + 1, sizeof(*p));
	size_t i = 0, k = 0, n = 0;

	if (!p)
		return NULL;
	/* a side without tensors may have no array at all */
	if (na)
		qsort(a, na, sizeof(*a), by_key);
	if (nb)
		qsort(b, nb, sizeof(*b), by_key);
	while (i < na || k < nb) {
		int c = i == na ? 1 : k == nb ? -1 : strcmp(a[i].key, b[k].key);
		p[n].a = c <= 0 ? &a[i++] : NULL;
		p[n].b = c >= 0 ? &b[k++] : NULL;
		n++;
	}
	*np = n;
	return p;
}

static void side_json(struct pt_buf *o, const char *what, const struct pt_view_item *it)
{
	struct pt_tinfo ti;

	if (!it)
		return;
	pt_node_tinfo(it->node, &ti);
	pt_buf_printf(o, ", \"%s\": {\"path\": \"", what);
	pt_json_str(o, (const uint8_t *)it->path, strlen(it->path));
	pt_buf_printf(o, "\", \"dtype\": \"%s\", \"shape\": ", ti.dtype);
	shape_str(o, &ti);
	pt_buf_putc(o, '}');
}

static void side_text(struct pt_buf *o, const struct pt_view_item *it)
{
	struct pt_tinfo ti;

	pt_node_tinfo(it->node, &ti);
	pt_buf_printf(o, "%s ", ti.dtype);
	shape_str(o, &ti);
}

/* A flat C-order index as "[i, j, k]" over the tensor's shape. */
static void index_str(struct pt_buf *o, uint64_t flat, const struct pt_tinfo *ti)
{
	uint32_t d, e;

	pt_buf_putc(o, '[');
	for (d = 0; d < ti->rank; d++) {
		uint64_t inner = 1, n = ti->shape[d] > 0 ? (uint64_t)ti->shape[d] : 1;

		for (e = d + 1; e < ti->rank; e++)
			inner *= ti->shape[e] > 0 ? (uint64_t)ti->shape[e] : 1;
		pt_buf_printf(o, "%s%" PRIu64, d ? ", " : "", flat / inner % n);
	}
	pt_buf_putc(o, ']');
}

/* JSON: a double, null when not finite (JSON has no NaN). */
static void json_num(struct pt_buf *o, double x)
{
	if (isfinite(x))
		pt_buf_printf(o, "%.17g", x);
	else
		pt_buf_puts(o, "null");
}

static void where_json(struct pt_buf *o, const char *name, const struct pt_dat *at,
		       const struct pt_tinfo *ti)
{
	pt_buf_printf(o, ", \"%s\": {\"index\": ", name);
	index_str(o, at->index, ti);
	pt_buf_puts(o, ", \"a\": ");
	json_num(o, at->a);
	pt_buf_puts(o, ", \"b\": ");
	json_num(o, at->b);
	pt_buf_putc(o, '}');
}

static void values_text(struct pt_buf *o, const struct pt_tdiff *d, bool json,
			const struct pt_tinfo *ti)
{
	if (!d->compared)
		return;
	if (json) {
		pt_buf_printf(o, ", \"values\": %llu, \"changed_values\": %llu, \"nonfinite_changes\": %llu, "
			      "\"max_abs_diff\": %.17g, \"rel_l2\": ",
			      (unsigned long long)d->values, (unsigned long long)d->changed,
			      (unsigned long long)d->nonfinite, d->max_abs);
		json_num(o, d->rel_l2);
		if (d->changed)
			where_json(o, "first_change", &d->first, ti);
		if (d->max_abs > 0)
			where_json(o, "largest_change", &d->largest, ti);
		return;
	}
	pt_buf_printf(o, "  %llu of %llu values differ, max|a-b|=%.9g, rel_l2=%.9g",
		      (unsigned long long)d->changed, (unsigned long long)d->values,
		      d->max_abs, d->rel_l2);
	if (d->nonfinite)
		pt_buf_printf(o, " (%llu NaN/Inf changes)", (unsigned long long)d->nonfinite);
	if (d->changed) {
		pt_buf_puts(o, "; first at ");
		index_str(o, d->first.index, ti);
		pt_buf_printf(o, " (%.9g -> %.9g)", d->first.a, d->first.b);
	}
	if (d->max_abs > 0 && d->largest.index != d->first.index) {
		pt_buf_puts(o, ", largest at ");
		index_str(o, d->largest.index, ti);
		pt_buf_printf(o, " (%.9g -> %.9g)", d->largest.a, d->largest.b);
	}
}

static void pair_out(struct pt_buf *o, const struct pair *p, bool json)
{
	const struct pt_view_item *it = p->a ? p->a : p->b;

	if (json) {
		pt_buf_puts(o, "{\"key\": \"");
		pt_json_str(o, (const uint8_t *)it->key, strlen(it->key));
		pt_buf_printf(o, "\", \"status\": \"%s\"", p->rc ? "error" : pt_dstatus_name(p->d.status));
		side_json(o, "a", p->a);
		side_json(o, "b", p->b);
		if (p->rc) {
			pt_buf_puts(o, ", \"error\": \"");
			pt_json_str(o, (const uint8_t *)p->err.msg, strlen(p->err.msg));
			pt_buf_putc(o, '"');
		}
		if (p->a) {
			struct pt_tinfo ti;

			pt_node_tinfo(p->a->node, &ti);
			values_text(o, &p->d, true, &ti);
		}
		pt_buf_putc(o, '}');
		return;
	}
	switch (p->d.status) {
	case PT_D_SAME:
		return;
	case PT_D_ADDED:
	case PT_D_REMOVED:
		pt_buf_printf(o, "%c %s  ", p->a ? '-' : '+', it->key);
		side_text(o, it);
		break;
	default:
		pt_buf_printf(o, "%c %s  ", p->d.status == PT_D_VALUE ? '~' : '!', it->key);
		side_text(o, p->a);
		if (p->d.status != PT_D_VALUE) {
			pt_buf_puts(o, " -> ");
			side_text(o, p->b);
		}
		{
			struct pt_tinfo ti;

			pt_node_tinfo(p->a->node, &ti);
			values_text(o, &p->d, false, &ti);
		}
	}
	pt_buf_putc(o, '\n');
}

/* Counts per status; the exit status: 0 equal, 1 different, 2 trouble. */
static int diff_summary(struct pt_buf *o, const struct pair *p, size_t n, bool json)
{
	static const char *const label[] = { "same", "changed", "changed dtype",
					     "changed shape", "added", "removed" };
	size_t c[6] = { 0 }, bad = 0, i;

	for (i = 0; i < n; i++) {
		if (p[i].rc)
			bad++;
		else
			c[p[i].d.status]++;
	}
	if (json) {
		pt_buf_puts(o, "{");
		for (i = 0; i < 6; i++)
			pt_buf_printf(o, "%s\"%s\": %zu", i ? ", " : "",
				      pt_dstatus_name((enum pt_dstatus)i), c[i]);
		pt_buf_printf(o, ", \"errors\": %zu}", bad);
	} else {
		pt_buf_printf(o, "%zu tensor%s", n, n == 1 ? "" : "s");
		for (i = 0; i < 6; i++)
			if (c[i] || i == 0)
				pt_buf_printf(o, ", %zu %s", c[i], label[i]);
		if (bad)
			pt_buf_printf(o, ", %zu unreadable", bad);
	}
	if (bad)
		return 2;
	return c[PT_D_SAME] == n ? 0 : 1;
}

/* The line of pair @i (an unreadable one: to stderr, unless JSON). */
static void diff_line(void *ctx, size_t i, struct pt_buf *b)
{
	struct diff_job *j = ctx;
	const struct pair *p = &j->p[i];

	if (j->json) {
		pt_buf_puts(b, i ? ",\n  " : "\n  ");
		pair_out(b, p, true);
	} else if (p->rc) {
		ptfs_progress_print(j->out.pg, b->p, b->len);   /* order kept */
		b->len = 0;
		fprintf(stderr, "ptfs: %s: %s\n", (p->a ? p->a : p->b)->key, p->err.msg);
	} else if (!j->quiet) {
		pair_out(b, p, false);
	}
}

/* Every pair's line as it finishes, then the summary; the exit status. */
static int diff_run(struct diff_job *j, const char *pa, const char *pb, size_t n,
		    unsigned jobs)
{
	struct pt_buf o;
	size_t i;
	int status;

	pt_buf_init(&o);
	if (j->json) {
		pt_buf_puts(&o, "{\"a\": \"");
		pt_json_str(&o, (const uint8_t *)pa, strlen(pa));
		pt_buf_puts(&o, "\", \"b\": \"");
		pt_json_str(&o, (const uint8_t *)pb, strlen(pb));
		pt_buf_puts(&o, "\", \"tensors\": [");
		ptfs_progress_print(j->out.pg, o.p, o.len);
		o.len = 0;
	}
	for (i = 0; i < n; i++)
		if (j->p[i].a && j->p[i].b)
			ptfs_progress_total(j->out.pg, node_bytes(j->p[i].a->node) +
					    node_bytes(j->p[i].b->node));
	pt_view_parallel(n, jobs, diff_one, j);
	if (j->json)
		pt_buf_puts(&o, "\n], ");
	if (!j->tensors_only) {
		struct pt_buf lines;

		/* the values' lines after the tensors' (none with -q) */
		pt_buf_init(&lines);
		ptfs_values_print(&j->vals, j->json || !j->quiet ? &o : &lines, j->json);
		pt_buf_free(&lines);
		if (j->json)
			pt_buf_puts(&o, ", ");
	}
	if (j->json)
		pt_buf_puts(&o, "\"summary\": ");
	else
		pt_buf_printf(&o, "%s vs %s: ", pa, pb);
	status = diff_summary(&o, j->p, n, j->json);
	if (!j->tensors_only) {
		if (j->json)
			pt_buf_puts(&o, ", \"values_summary\": ");
		ptfs_values_summary(&j->vals, &o, j->json);
		if (status == 0 && ptfs_values_differ(&j->vals))
			status = 1;
	}
	if (j->json)
		pt_buf_printf(&o, ", \"equal\": %s}", status == 0 ? "true" : "false");
	pt_buf_putc(&o, '\n');
	ptfs_progress_end(j->out.pg);
	j->out.pg = NULL;
	out_buf(&o);
	pt_buf_free(&o);
	return status;
}

/*
 * `ptfs diff A B`: tensors matched by dotted key (a/b/c in one tree, the
 * key "a.b.c" in another), so a .pt compares with its safetensors export
 * or a DCP checkpoint with its consolidated file.  Unchanged means equal
 * bytes; values are compared only where bytes or dtypes differ.
 */
static int cmd_diff(int argc, char **argv)
{
	const char *path[2] = { NULL, NULL };
	struct pt_view_item *items[2] = { NULL, NULL };
	struct pt_ckpt *ck[2] = { NULL, NULL };
	size_t cnt[2] = { 0, 0 }, np = 0, k = 0;
	unsigned jobs = default_jobs();
	struct diff_job j = { 0 };
	int status = PTFS_EXIT_TROUBLE;

	if (view_args(argc, argv, path, NULL, &jobs, &j.json, &j.quiet, &j.tensors_only))
		return PTFS_EXIT_USAGE;
	for (k = 0; k < 2; k++)
		if (open_ck(path[k], &ck[k]) ||
		    list_tensors(ck[k], path[k], "", &items[k], &cnt[k]))
			goto out;
	if (!j.tensors_only) {
		struct pt_error err;

		pt_error_clear(&err);
		if (ptfs_values_diff(ck[0], ck[1], &j.vals, &err)) {
			fprintf(stderr, "ptfs: %s: %s\n", j.vals.have_b ? path[1] : path[0],
				err.msg);
			goto out;
		}
	}
	j.ca = ck[0];
	j.cb = ck[1];
	j.p = match(items[0], cnt[0], items[1], cnt[1], &np);
	if (!j.p) {
		fprintf(stderr, "ptfs: out of memory\n");
		goto out;
	}
	if (stream_init(&j.out, np, diff_line, &j, "diff")) {
		fprintf(stderr, "ptfs: out of memory\n");
		goto out;
	}
	pt_ckpt_set_progress(ck[0], ptfs_progress_hook, j.out.pg);
	pt_ckpt_set_progress(ck[1], ptfs_progress_hook, j.out.pg);
	status = diff_run(&j, path[0], path[1], np, jobs);
	stream_end(&j.out);
out:
	free(j.p);
	ptfs_values_free(&j.vals);
	for (k = 0; k < 2; k++) {
		pt_view_items_free(items[k], cnt[k]);
		pt_ckpt_close(ck[k]);
	}
	return status;
}

/* ---- ptfs preview, ptfs thumbnail ---- */

/* Write @n bytes to @path atomically (temporary file + rename), or to
 * stdout for "-" / NULL. */
static int write_out(const char *path, const uint8_t *p, size_t n)
{
	struct pt_buf tmp;
	FILE *f;
	int ok;

	if (!path || strcmp(path, "-") == 0) {
		if (isatty(STDOUT_FILENO)) {
			fprintf(stderr, "ptfs: not writing a PNG to a terminal (use --output FILE)\n");
			return -1;
		}
		return fwrite(p, 1, n, stdout) == n && fflush(stdout) == 0 ? 0 : -1;
	}
	pt_buf_init(&tmp);
	pt_buf_printf(&tmp, "%s.tmp%ld", path, (long)getpid());
	f = tmp.p ? fopen(tmp.p, "wb") : NULL;
	ok = f && fwrite(p, 1, n, f) == n;
	if (f && fclose(f) != 0)
		ok = 0;
	if (ok && rename(tmp.p, path) != 0)
		ok = 0;
	if (!ok) {
		fprintf(stderr, "ptfs: %s: %s\n", path, strerror(errno));
		if (tmp.p)
			unlink(tmp.p);
	}
	pt_buf_free(&tmp);
	return ok ? 0 : -1;
}

static int parse_side(const char *s, unsigned *side)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (!*s || *end || v < 16 || v > 4096)
		return -1;
	*side = (unsigned)v;
	return 0;
}

/* The arguments of preview (-v, -s, --output) or thumbnail (@outp NULL:
 * -s and --uri, in *@verbose's stead): 0, or PTFS_EXIT_USAGE once said. */
static int picture_args(int argc, char **argv, const char **arg, unsigned *side,
			const char **outp, bool *verbose, const char **uri)
{
	static const char *const pv_names[] = { "-s=", "-v", "--output=", NULL };
	static const char *const th_names[] = { "-s=", "--uri=", NULL };
	static const char *const pv_what[] = { "CHECKPOINT", "PATH" };
	static const char *const th_what[] = { "TENSOR_FILE", "OUTPUT.png" };
	struct ptfs_args a;
	const char *v;
	int k, n = 0;

	ptfs_args_init(&a, argc, argv);
	while ((k = ptfs_args_next(&a, outp ? pv_names : th_names, &v)) != PTFS_ARG_END) {
		if (k == PTFS_ARG_BAD)
			return PTFS_EXIT_USAGE;
		if (k == 0 && parse_side(v, side))
			return ptfs_usage_error(argv[0], "-s takes a size from 16 to 4096, not '%s'", v);
		if (k == 1 && !outp)
			*uri = v;
		else if (k == 1)
			*verbose = true;
		if (k == 2)
			*outp = v;
		if (k >= 0)
			continue;
		if (n == 2)
			return ptfs_usage_error(argv[0], "extra argument '%s'", v);
		arg[n++] = v;
	}
	if (n < 2)
		return ptfs_usage_error(argv[0], "missing %s", (outp ? pv_what : th_what)[n]);
	return 0;
}

static void report(const struct pt_preview *pv)
{
	fprintf(stderr, "%ux%u px of %llu x %llu, scale %.6g, read %llu bytes in %llu reads\n",
		pv->width, pv->height, (unsigned long long)pv->rows,
		(unsigned long long)pv->cols, pv->scale,
		(unsigned long long)pv->bytes_read, (unsigned long long)pv->reads);
}

/* `ptfs preview CHECKPOINT PATH [--output FILE] [-s SIDE] [-v]` (-o is
 * the checkpoint options, as for every subcommand) */
static int cmd_preview(int argc, char **argv)
{
	const char *arg[2] = { NULL, NULL }, *outp = NULL;
	struct pt_preview pv = { 0 };
	struct pt_ckpt *ck = NULL;
	struct pt_node *node;
	unsigned side = PT_PREVIEW_SIDE;
	struct pt_error err;
	bool verbose = false;
	int i, status = PTFS_EXIT_ERROR;

	if (picture_args(argc, argv, arg, &side, &outp, &verbose, NULL))
		return PTFS_EXIT_USAGE;
	if (open_ck(arg[0], &ck))
		return PTFS_EXIT_ERROR;
	node = pt_tree_path(ck, arg[1], &i);
	pt_error_clear(&err);
	if (!node) {
		fprintf(stderr, "ptfs: %s: %s: %s\n", arg[0], arg[1], strerror(-i));
		goto out;
	}
	if (pt_preview_render(ck, node, side, &pv, &err) != 0) {
		fprintf(stderr, "ptfs: %s: %s: %s\n", arg[0], arg[1], err.msg);
		goto out;
	}
	if (verbose)
		report(&pv);
	if (write_out(outp, pv.png, pv.len) == 0)
		status = PTFS_EXIT_OK;
out:
	pt_preview_free(&pv);
	pt_ckpt_close(ck);
	return status;
}

/* ---- ptfs thumbnail: a tensor file of a mount, through its xattrs ---- */

static int get_xattr(const char *path, const char *name, char *buf, size_t cap)
{
	ssize_t n = getxattr(path, name, buf, cap - 1);

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

/* "[4, 5]" into @shape (at most @max), the count in *@rank. */
static int parse_shape(const char *s, int64_t *shape, uint32_t max, uint32_t *rank)
{
	char *end;

	*rank = 0;
	if (*s++ != '[')
		return -EINVAL;
	while (*s == ' ')
		s++;
	while (*s && *s != ']') {
		long long v = strtoll(s, &end, 10);
		if (end == s || v < 0 || *rank == max)
			return -EINVAL;
		shape[(*rank)++] = v;
		s = end;
		while (*s == ',' || *s == ' ')
			s++;
	}
	return *s == ']' ? 0 : -EINVAL;
}

struct fd_src {
	int fd;
};

static ssize_t fd_read(void *ctx, void *buf, size_t n, uint64_t off, struct pt_error *err)
{
	struct fd_src *f = ctx;
	ssize_t got = pt_pread_upto(f->fd, buf, n, off);

	if (got < 0)
		return pt_fail(err, (int)got, "%s", strerror((int)-got));
	return got;
}

/* The tensor layout of a mounted tensor file from user.ptfs.* xattrs. */
static int thumb_info(const char *in, struct pt_tinfo *ti, int64_t *shape,
		      char *dtype, size_t dcap)
{
	char buf[1024], order[32];
	const struct pt_dtype *dt;
	uint32_t i;
	int rc;

	if ((rc = get_xattr(in, "user.ptfs.dtype", dtype, dcap)) ||
	    (rc = get_xattr(in, "user.ptfs.shape", buf, sizeof(buf))) ||
	    (rc = get_xattr(in, "user.ptfs.byteorder", order, sizeof(order))))
		return rc;
	dt = pt_dtype_from_torch(dtype);
	if (!dt)
		dt = pt_dtype_from_numpy(dtype, strlen(dtype));
	if (!dt || parse_shape(buf, shape, 64, &ti->rank))
		return -EINVAL;
	ti->dtype = dt->name;
	ti->itemsize = dt->size;
	ti->packed = dt->packed;
	ti->byteorder = strcmp(order, "big") == 0 ? '>' : '<';
	ti->shape = shape;
	ti->numel = 1;
	for (i = 0; i < ti->rank; i++)
		ti->numel *= (uint64_t)shape[i];
	ti->nbytes = ti->numel * ti->itemsize;
	return 0;
}

/* file:// and @path made absolute, percent-encoded but for RFC 3986's
 * unreserved characters and '/': the URI a file manager names it by. */
static int file_uri(const char *path, struct pt_buf *out)
{
	char *abs = realpath(path, NULL);
	const unsigned char *p;

	if (!abs)
		return -errno;
	pt_buf_printf(out, "file://");
	for (p = (const unsigned char *)abs; *p; p++) {
		if (isalnum(*p) || strchr("-._~/", *p))
			pt_buf_add(out, p, 1);
		else
			pt_buf_printf(out, "%%%02X", *p);
	}
	free(abs);
	return out->oom ? -ENOMEM : 0;
}

/* Thumb::URI and Thumb::MTime of the freedesktop thumbnail specification:
 * the thumbnail says which file, as of when, it shows. */
static int thumb_texts(const char *in, const char *uri, int fd, struct pt_buf *ubuf,
		       char *mtime, size_t cap, struct pt_png_text *txt)
{
	struct stat st;
	int rc;

	if (fstat(fd, &st) != 0)
		return -errno;
	snprintf(mtime, cap, "%lld", (long long)st.st_mtime);
	if (!uri) {
		if ((rc = file_uri(in, ubuf)))
			return rc;
		uri = ubuf->p;
	}
	txt[0] = (struct pt_png_text){ "Thumb::URI", uri };
	txt[1] = (struct pt_png_text){ "Thumb::MTime", mtime };
	return 0;
}

/*
 * `ptfs thumbnail [-s SIZE] [--uri URI] INPUT OUTPUT`: the freedesktop thumbnailer
 * entry point (share/thumbnailers/ptfs.thumbnailer).  INPUT is a tensor
 * file of a ptfs mount: its dtype, shape and byte order come from the
 * user.ptfs.* extended attributes, its bytes from the file itself, so the
 * command needs neither the checkpoint nor the daemon's help.  The
 * picture carries Thumb::URI (--uri, the file manager's %u, else the
 * file:// URI of INPUT) and Thumb::MTime (INPUT's mtime).
 */
static int cmd_thumbnail(int argc, char **argv)
{
	const char *arg[2] = { NULL, NULL }, *uri = NULL;
	struct pt_preview pv = { 0 };
	struct pt_preview_src src;
	struct pt_png_text txt[2];
	struct fd_src fs = { -1 };
	struct pt_buf ubuf;
	char mtime[32];
	unsigned side = 256;
	int64_t shape[64];
	char dtype[64];
	struct pt_error err;
	int rc, status = PTFS_EXIT_ERROR;

	if (picture_args(argc, argv, arg, &side, NULL, NULL, &uri))
		return PTFS_EXIT_USAGE;
	memset(&src, 0, sizeof(src));
	rc = thumb_info(arg[0], &src.ti, shape, dtype, sizeof(dtype));
	if (rc) {
		fprintf(stderr, "ptfs: %s: not a tensor file of a ptfs mount (%s)\n", arg[0],
			rc == -EINVAL ? "bad user.ptfs.* attributes" : strerror(-rc));
		return PTFS_EXIT_ERROR;
	}
	fs.fd = open(arg[0], O_RDONLY | O_CLOEXEC);
	if (fs.fd < 0) {
		fprintf(stderr, "ptfs: %s: %s\n", arg[0], strerror(errno));
		return PTFS_EXIT_ERROR;
	}
	src.read = fd_read;
	src.ctx = &fs;
	src.extra = txt;
	src.nextra = 2;
	src.compress = true;            /* written once, no size promised */
	pt_buf_init(&ubuf);
	pt_error_clear(&err);
	if ((rc = thumb_texts(arg[0], uri, fs.fd, &ubuf, mtime, sizeof(mtime), txt)))
		fprintf(stderr, "ptfs: %s: %s\n", arg[0], strerror(-rc));
	else if (pt_preview_render_src(&src, side, &pv, &err) != 0)
		fprintf(stderr, "ptfs: %s: %s\n", arg[0], err.msg);
	else if (write_out(arg[1], pv.png, pv.len) == 0)
		status = PTFS_EXIT_OK;
	pt_buf_free(&ubuf);
	pt_preview_free(&pv);
	close(fs.fd);
	return status;
}

int ptfs_view_cmd(int argc, char **argv, const struct pt_ckpt_opts *opts)
{
	vopts = opts;
	if (strcmp(argv[0], "stat") == 0)
		return cmd_stat(argc, argv);
	if (strcmp(argv[0], "diff") == 0)
		return cmd_diff(argc, argv);
	if (strcmp(argv[0], "preview") == 0)
		return cmd_preview(argc, argv);
	return cmd_thumbnail(argc, argv);
}
