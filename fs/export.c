/* SPDX-License-Identifier: MIT */
/*
 * export.c -- `ptfs tree --json` and `ptfs export`: the CLI side of the
 * exporters in core/export/ (argument parsing, messages).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "ckpt/ckpt.h"
#include "export/export.h"
#include "progress.h"
#include "ptfs.h"
#include "usage.h"

static int open_ck(const char *path, const struct pt_ckpt_opts *o,
		   struct pt_ckpt **ck)
{
	struct pt_error err;

	pt_error_clear(&err);
	if (pt_ckpt_open(ck, path, o, &err) != 0) {
		fprintf(stderr, "ptfs: %s: %s\n", path, err.msg);
		return PTFS_EXIT_ERROR;
	}
	return 0;
}

/* `ptfs tree --json CHECKPOINT`: what /.ptfs/tree.json holds. */
int ptfs_cmd_tree(int argc, char **argv, const struct pt_ckpt_opts *o)
{
	unsigned long long max = 1000000;
	const char *path = NULL;
	struct pt_ckpt *ck;
	struct pt_error err;
	struct pt_buf b;
	static const char *const names[] = { "--json", "--max=", NULL };
	struct ptfs_args a;
	const char *v;
	bool json = false;
	int k, rc = PTFS_EXIT_OK;

	ptfs_args_init(&a, argc, argv);
	while ((k = ptfs_args_next(&a, names, &v)) != PTFS_ARG_END) {
		if (k == PTFS_ARG_BAD)
			return PTFS_EXIT_USAGE;
		if (k == 0) {
			json = true;
		} else if (k == 1) {
			char *end;
			max = strtoull(v, &end, 10);
			if (!*v || *end || max == 0)
				return ptfs_usage_error("tree", "--max takes a positive number, not '%s'", v);
		} else if (!path) {
			path = v;
		} else {
			return ptfs_usage_error("tree", "extra argument '%s'", v);
		}
	}
	if (!path)
		return ptfs_usage_error("tree", "missing CHECKPOINT");
	if (!json)
		return ptfs_usage_error("tree", "--json is required (the only output form)");
	if (open_ck(path, o, &ck))
		return PTFS_EXIT_ERROR;
	pt_buf_init(&b);
	pt_error_clear(&err);
	if (pt_tree_json(ck, &b, max, &err) != 0) {
		fprintf(stderr, "ptfs: %s: %s\n", path, err.msg);
		rc = PTFS_EXIT_ERROR;
	} else if (b.oom) {
		fprintf(stderr, "ptfs: %s: out of memory\n", path);
		rc = PTFS_EXIT_ERROR;
	} else if (fwrite(b.p, 1, b.len, stdout) != b.len || fflush(stdout) != 0) {
		fprintf(stderr, "ptfs: writing the tree: %s\n", strerror(errno));
		rc = PTFS_EXIT_ERROR;
	} else if (b.len > 20 && strstr(b.p + b.len - 20, "\"truncated\": true")) {
		fprintf(stderr, "ptfs: %s: the tree was cut (\"truncated\": true) at --max %llu entries or the walk's budget (-o max_walk_entries, max_walk_bytes)\n",
			path, max);
	}
	pt_buf_free(&b);
	pt_ckpt_close(ck);
	return rc;
}

static void print_notes(const struct pt_buf *notes)
{
	const char *p = notes->p, *nl;

	while (p && *p && (nl = strchr(p, '\n'))) {
		fprintf(stderr, "ptfs export: %.*s\n", (int)(nl - p), p);
		p = nl + 1;
	}
}

/* The targets that accept @xopts, as "a, b or c" (for messages). */
static const char *targets(unsigned xopts, char *buf, size_t cap)
{
	pt_exporter_names(xopts, ", ", " or ", buf, cap);
	return buf;
}

/* What the arguments leave to check once all are read: 0, or
 * PTFS_EXIT_USAGE once said. */
static int export_check(const struct pt_export_opts *xo, const char *path,
			const char *out, const struct pt_exporter *x)
{
	char names[256];

	if (!path)
		return ptfs_usage_error("export", "missing CHECKPOINT");
	if (!x) {
		pt_exporter_names(0, "|", "|", names, sizeof(names));
		return ptfs_usage_error("export", "missing --to %s", names);
	}
	if (!out)
		return ptfs_usage_error("export", "missing OUT");
	if (xo->shard_size && !(x->accepts & PT_XOPT_SHARD_SIZE))
		return ptfs_usage_error("export", "--shard-size is for --to %s",
					targets(PT_XOPT_SHARD_SIZE, names, sizeof(names)));
	if (xo->skip_unsupported && !(x->accepts & PT_XOPT_SKIP_UNSUPPORTED))
		return ptfs_usage_error("export", "--skip-unsupported is for --to %s",
					targets(PT_XOPT_SKIP_UNSUPPORTED, names, sizeof(names)));
	return 0;
}

/* The arguments of `ptfs export`: 0, or PTFS_EXIT_USAGE once said.
 * --list-targets alone sets *@list. */
static int export_args(int argc, char **argv, struct pt_export_opts *xo,
		       const char **path, const char **out,
		       const struct pt_exporter **x, bool *list)
{
	static const char *const names[] = { "--to=", "--shard-size=",
		"--skip-unsupported", "--no-fsync", "--list-targets", NULL };
	struct ptfs_args a;
	char buf[256];
	const char *v;
	int k;

	ptfs_args_init(&a, argc, argv);
	while ((k = ptfs_args_next(&a, names, &v)) != PTFS_ARG_END) {
		switch (k) {
		case PTFS_ARG_BAD:
			return PTFS_EXIT_USAGE;
		case 0:
			*x = pt_exporter_find(v);
			if (!*x)
				return ptfs_usage_error("export", "--to takes %s, not '%s'",
							targets(0, buf, sizeof(buf)), v);
			break;
		case 1:
			if (pt_parse_size(v, &xo->shard_size) != 0 || !xo->shard_size)
				return ptfs_usage_error("export", "--shard-size takes a size above 0 (%s), not '%s'",
							PT_SIZE_SYNTAX, v);
			break;
		case 2:
			xo->skip_unsupported = true;
			break;
		case 3:
			xo->no_fsync = true;
			break;
		case 4:
			*list = true;
			break;
		default:
			if (*path && *out)
				return ptfs_usage_error("export", "extra argument '%s'", v);
			*(*path ? out : path) = v;
		}
	}
	if (*list && argc > 2)
		return ptfs_usage_error("export", "--list-targets takes no other argument");
	return *list ? 0 : export_check(xo, *path, *out, *x);
}

/* `ptfs export --list-targets`: one line per target, its name, the
 * extension of the files it writes and what OUT becomes. */
static int list_targets(void)
{
	const struct pt_exporter *const *x;

	for (x = pt_exporters; *x; x++)
		printf("%-12s %-13s %s\n", (*x)->name, (*x)->ext, (*x)->summary);
	if (fflush(stdout) != 0) {
		fprintf(stderr, "ptfs export: writing the list: %s\n", strerror(errno));
		return PTFS_EXIT_ERROR;
	}
	return PTFS_EXIT_OK;
}

/* `ptfs export CHECKPOINT --to TARGET [options] OUT` (TARGET: an entry
 * of pt_exporters[]) */
int ptfs_cmd_export(int argc, char **argv, const struct pt_ckpt_opts *o)
{
	struct pt_export_opts xo = { 0 };
	const char *path = NULL, *out = NULL;
	const struct pt_exporter *x = NULL;
	struct pt_ckpt *ck;
	struct pt_error err;
	struct pt_buf notes;
	struct ptfs_progress *pg;
	bool list = false;
	int rc;

	rc = export_args(argc, argv, &xo, &path, &out, &x, &list);
	if (rc)
		return rc;
	if (list)
		return list_targets();
	if (open_ck(path, o, &ck))
		return PTFS_EXIT_ERROR;
	pg = ptfs_progress_start("export");
	pt_ckpt_set_progress(ck, ptfs_progress_hook, pg);
	pt_error_clear(&err);
	pt_buf_init(&notes);
	rc = x->write(ck, out, &xo, &notes, &err);
	ptfs_progress_end(pg);
	print_notes(&notes);
	if (rc)
		fprintf(stderr, "ptfs: %s: export to %s failed: %s\n", path, out,
			err.msg[0] ? err.msg : strerror(-rc));
	pt_buf_free(&notes);
	pt_ckpt_close(ck);
	return rc ? PTFS_EXIT_ERROR : PTFS_EXIT_OK;
}

int ptfs_cmd_weights_only(const char *path, const struct pt_ckpt_opts *o)
{
	struct pt_ckpt *ck;
	struct pt_buf b;
	int ok, rc;

	/* 2, not 1: "refused" is a verdict about a file that was read */
	if (open_ck(path, o, &ck))
		return PTFS_EXIT_TROUBLE;
	pt_buf_init(&b);
	ok = pt_weights_only(ck, &b);
	if (b.oom) {
		fprintf(stderr, "ptfs: %s: out of memory\n", path);
		rc = PTFS_EXIT_TROUBLE;
	} else if (fwrite(b.p, 1, b.len, stdout) != b.len || fflush(stdout) != 0) {
		fprintf(stderr, "ptfs info: writing the output: %s\n", strerror(errno));
		rc = PTFS_EXIT_TROUBLE;
	} else {
		rc = ok ? PTFS_EXIT_OK : PTFS_EXIT_ERROR;
	}
	pt_buf_free(&b);
	pt_ckpt_close(ck);
	return rc;
}
