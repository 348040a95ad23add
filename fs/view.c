/* SPDX-License-Identifier: MIT */
/*
 * view.c -- the subcommands that look at weights without a mount:
 * `ptfs stat` (per-tensor statistics and hashes), `ptfs diff` (what changed
 * between two checkpoints) and `ptfs preview` (a tensor's picture as PNG).
 * The work is in core/view/; this file parses arguments and prints.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/xattr.h>

#include "base/json.h"
#include "ckpt/ckpt.h"
#include "decode/dtype.h"
#include "ptfs.h"
#include "view/diff.h"
#include "view/preview.h"
#include "view/stats.h"
#include "view/walk.h"

static const struct pt_ckpt_opts *vopts;

/* This file's part of the usage text (main.c has all of it; not called
 * from here, so that view.c depends on nothing else in fs/). */
static void view_usage(void)
{
	fputs("usage: ptfs stat [--json] [-j N] CHECKPOINT [PATH]\n"
	      "       ptfs diff [--json] [-j N] [-q] CHECKPOINT_A CHECKPOINT_B\n"
	      "       ptfs preview [-v] [-s SIDE] CHECKPOINT PATH [--output FILE.png]\n"
	      "       ptfs thumbnail [-s SIZE] TENSOR_FILE_IN_A_MOUNT OUTPUT.png\n", stderr);
}

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
	struct pt_node *top;
	int rc = 0;

	top = *sub ? pt_tree_path(ck, sub, &rc) : pt_tree_root(ck);
	if (!top) {
		fprintf(stderr, "ptfs: %s: %s: %s\n", ckpath, sub, strerror(-rc));
		return -1;
	}
	if (pt_view_tensors(ck, top, sub, items, n) != 0) {
		fprintf(stderr, "ptfs: %s: out of memory\n", ckpath);
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

	if (*end || v == 0 || v > 1024) {
		fprintf(stderr, "ptfs: -j takes a number from 1 to 1024\n");
		return -1;
	}
	*jobs = (unsigned)v;
	return 0;
}

/* ---- ptfs stat ---- */

struct stat_job {
	struct pt_ckpt *ck;
	struct pt_view_item *items;
	struct pt_tstats *st;
	int *rc;
	struct pt_error *err;
	struct pt_error err0;            /* before the first tensor */
};

static void stat_one(void *ctx, size_t i)
{
	struct stat_job *j = ctx;

	pt_error_clear(&j->err[i]);
	j->rc[i] = pt_tensor_stats(j->ck, j->items[i].node, &j->st[i], &j->err[i]);
}

static void shape_str(struct pt_buf *b, const struct pt_tinfo *ti)
{
	uint32_t i;

	pt_buf_putc(b, '[');
	for (i = 0; i < ti->rank; i++)
		pt_buf_printf(b, "%s%lld", i ? ", " : "", (long long)ti->shape[i]);
	pt_buf_putc(b, ']');
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

static void stat_print(const char *ckpath, struct pt_view_item *items,
		       const struct pt_tstats *st, const int *rc,
		       const struct pt_error *err, size_t n, bool json)
{
	struct pt_buf b;
	size_t i;

	pt_buf_init(&b);
	if (json) {
		pt_buf_puts(&b, "{\"checkpoint\": \"");
		pt_json_str(&b, (const uint8_t *)ckpath, strlen(ckpath));
		pt_buf_puts(&b, "\", \"tensors\": [");
	}
	for (i = 0; i < n; i++) {
		if (json) {
			pt_buf_puts(&b, i ? ",\n  " : "\n  ");
			if (rc[i]) {
				pt_buf_puts(&b, "{\"path\": \"");
				pt_json_str(&b, (const uint8_t *)items[i].path, strlen(items[i].path));
				pt_buf_puts(&b, "\", \"error\": \"");
				pt_json_str(&b, (const uint8_t *)err[i].msg, strlen(err[i].msg));
				pt_buf_puts(&b, "\"}");
			} else {
				pt_tstats_json(&st[i], items[i].path, false, &b);
			}
		} else if (rc[i]) {
			fprintf(stderr, "ptfs: %s: %s: %s\n", ckpath, items[i].path, err[i].msg);
			continue;
		} else {
			pt_buf_printf(&b, "%s  %s ", items[i].path, st[i].ti.dtype);
			shape_str(&b, &st[i].ti);
			pt_buf_puts(&b, "  ");
			pt_tstats_text(&st[i], &b);
			pt_buf_putc(&b, '\n');
		}
		out_buf(&b);
	}
	if (json) {
		pt_buf_puts(&b, "\n], \"summary\": \"");
		summary(&b, st, rc, n);
		pt_buf_puts(&b, "\"}\n");
	} else {
		pt_buf_printf(&b, "%s: ", ckpath);
		summary(&b, st, rc, n);
		pt_buf_putc(&b, '\n');
	}
	out_buf(&b);
	pt_buf_free(&b);
}

static int cmd_stat(int argc, char **argv)
{
	const char *ckpath = NULL, *sub = "";
	struct pt_view_item *items = NULL;
	struct pt_ckpt *ck = NULL;
	unsigned jobs = default_jobs();
	bool json = false;
	size_t n = 0, i;
	int status = PTFS_EXIT_ERROR;
	struct stat_job j = { 0 };

	for (i = 1; i < (size_t)argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (strcmp(argv[i], "-j") == 0 && i + 1 < (size_t)argc) {
			if (parse_jobs(argv[++i], &jobs))
				return PTFS_EXIT_USAGE;
		} else if (!ckpath)
			ckpath = argv[i];
		else if (!*sub)
			sub = argv[i];
		else
			ckpath = NULL, i = (size_t)argc;
	}
	if (!ckpath) {
		view_usage();
		return PTFS_EXIT_USAGE;
	}
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
	j.items = items;
	j.st = calloc(n + 1, sizeof(*j.st));
	j.rc = calloc(n + 1, sizeof(*j.rc));
	j.err = calloc(n + 1, sizeof(*j.err));
	if (!j.st || !j.rc || !j.err) {
		fprintf(stderr, "ptfs: %s: out of memory\n", ckpath);
		goto out;
	}
	pt_view_parallel(n, jobs, stat_one, &j);
	stat_print(ckpath, items, j.st, j.rc, j.err, n, json);
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
};

static void diff_one(void *ctx, size_t i)
{
	struct diff_job *j = ctx;
	struct pair *p = &j->p[i];

	pt_error_clear(&p->err);
	if (!p->a || !p->b) {
		memset(&p->d, 0, sizeof(p->d));
		p->d.status = p->a ? PT_D_REMOVED : PT_D_ADDED;
		return;
	}
	p->rc = pt_tensor_diff(j->ca, p->a->node, j->cb, p->b->node, &p->d, &p->err);
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
	qsort(a, na, sizeof(*a), by_key);
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

static void values_text(struct pt_buf *o, const struct pt_tdiff *d, bool json)
{
	if (!d->compared)
		return;
	if (json) {
		pt_buf_printf(o, ", \"values\": %llu, \"changed_values\": %llu, \"nonfinite_changes\": %llu, "
			      "\"max_abs_diff\": %.17g, \"rel_l2\": ",
			      (unsigned long long)d->values, (unsigned long long)d->changed,
			      (unsigned long long)d->nonfinite, d->max_abs);
		if (isfinite(d->rel_l2))
			pt_buf_printf(o, "%.17g", d->rel_l2);
		else
			pt_buf_puts(o, "null");
		return;
	}
	pt_buf_printf(o, "  %llu of %llu values differ, max|a-b|=%.6g, rel_l2=%.6g",
		      (unsigned long long)d->changed, (unsigned long long)d->values,
		      d->max_abs, d->rel_l2);
	if (d->nonfinite)
		pt_buf_printf(o, " (%llu NaN/Inf changes)", (unsigned long long)d->nonfinite);
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
		values_text(o, &p->d, true);
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
		values_text(o, &p->d, false);
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

static int diff_print(const char *pa, const char *pb, const struct pair *p,
		      size_t n, bool json, bool quiet)
{
	struct pt_buf o;
	size_t i;
	int status;

	pt_buf_init(&o);
	if (json) {
		pt_buf_puts(&o, "{\"a\": \"");
		pt_json_str(&o, (const uint8_t *)pa, strlen(pa));
		pt_buf_puts(&o, "\", \"b\": \"");
		pt_json_str(&o, (const uint8_t *)pb, strlen(pb));
		pt_buf_puts(&o, "\", \"tensors\": [");
	}
	for (i = 0; i < n; i++) {
		if (json) {
			pt_buf_puts(&o, i ? ",\n  " : "\n  ");
			pair_out(&o, &p[i], true);
		} else if (p[i].rc) {
			fprintf(stderr, "ptfs: %s: %s\n", (p[i].a ? p[i].a : p[i].b)->key,
				p[i].err.msg);
		} else if (!quiet) {
			pair_out(&o, &p[i], false);
		}
		out_buf(&o);
	}
	if (json)
		pt_buf_puts(&o, "\n], \"summary\": ");
	else
		pt_buf_printf(&o, "%s vs %s: ", pa, pb);
	status = diff_summary(&o, p, n, json);
	if (json)
		pt_buf_printf(&o, ", \"equal\": %s}", status == 0 ? "true" : "false");
	pt_buf_putc(&o, '\n');
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
	bool json = false, quiet = false;
	int i, status = 2;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (strcmp(argv[i], "-q") == 0)
			quiet = true;
		else if (strcmp(argv[i], "-j") == 0 && i + 1 < argc) {
			if (parse_jobs(argv[++i], &jobs))
				return 2;
		} else if (k < 2)
			path[k++] = argv[i];
		else
			k = 3;
	}
	if (k != 2) {
		view_usage();
		return 2;
	}
	for (k = 0; k < 2; k++)
		if (open_ck(path[k], &ck[k]) ||
		    list_tensors(ck[k], path[k], "", &items[k], &cnt[k]))
			goto out;
	j.ca = ck[0];
	j.cb = ck[1];
	j.p = match(items[0], cnt[0], items[1], cnt[1], &np);
	if (!j.p) {
		fprintf(stderr, "ptfs: out of memory\n");
		goto out;
	}
	pt_view_parallel(np, jobs, diff_one, &j);
	status = diff_print(path[0], path[1], j.p, np, json, quiet);
out:
	free(j.p);
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

	if (*end || v < 16 || v > 4096) {
		fprintf(stderr, "ptfs: -s takes a size from 16 to 4096\n");
		return -1;
	}
	*side = (unsigned)v;
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
	int i, k = 0, status = PTFS_EXIT_ERROR;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-v") == 0)
			verbose = true;
		else if (strcmp(argv[i], "--output") == 0 && i + 1 < argc)
			outp = argv[++i];
		else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
			if (parse_side(argv[++i], &side))
				return PTFS_EXIT_USAGE;
		} else if (k < 2)
			arg[k++] = argv[i];
		else
			k = 3;
	}
	if (k != 2) {
		view_usage();
		return PTFS_EXIT_USAGE;
	}
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
	size_t done = 0;

	while (done < n) {
		ssize_t r = pread(f->fd, (char *)buf + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return pt_fail(err, -errno, "%s", strerror(errno));
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
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

/*
 * `ptfs thumbnail [-s SIZE] INPUT OUTPUT`: the freedesktop thumbnailer
 * entry point (share/thumbnailers/ptfs.thumbnailer).  INPUT is a tensor
 * file of a ptfs mount: its dtype, shape and byte order come from the
 * user.ptfs.* extended attributes, its bytes from the file itself, so the
 * command needs neither the checkpoint nor the daemon's help.
 */
static int cmd_thumbnail(int argc, char **argv)
{
	const char *arg[2] = { NULL, NULL };
	struct pt_preview pv = { 0 };
	struct pt_preview_src src;
	struct fd_src fs = { -1 };
	unsigned side = 256;
	int64_t shape[64];
	char dtype[64];
	struct pt_error err;
	int i, k = 0, rc, status = PTFS_EXIT_ERROR;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
			if (parse_side(argv[++i], &side))
				return PTFS_EXIT_USAGE;
		} else if (k < 2)
			arg[k++] = argv[i];
		else
			k = 3;
	}
	if (k != 2) {
		view_usage();
		return PTFS_EXIT_USAGE;
	}
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
	pt_error_clear(&err);
	if (pt_preview_render_src(&src, side, &pv, &err) != 0)
		fprintf(stderr, "ptfs: %s: %s\n", arg[0], err.msg);
	else if (write_out(arg[1], pv.png, pv.len) == 0)
		status = PTFS_EXIT_OK;
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
	if (strcmp(argv[0], "thumbnail") == 0)
		return cmd_thumbnail(argc, argv);
	view_usage();
	return PTFS_EXIT_USAGE;
}
