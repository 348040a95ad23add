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

/* The arguments of `ptfs export`: 0, or PTFS_EXIT_USAGE once said. */
static int export_args(int argc, char **argv, struct pt_export_opts *xo,
		       const char **path, const char **out, const char **to)
{
	static const char *const names[] = { "--to=", "--shard-size=",
		"--skip-unsupported", "--no-fsync", NULL };
	struct ptfs_args a;
	const char *v;
	int k;

	ptfs_args_init(&a, argc, argv);
	while ((k = ptfs_args_next(&a, names, &v)) != PTFS_ARG_END) {
		switch (k) {
		case PTFS_ARG_BAD:
			return PTFS_EXIT_USAGE;
		case 0:
			*to = v;
			if (strcmp(v, "safetensors") && strcmp(v, "npy") && strcmp(v, "pt"))
				return ptfs_usage_error("export", "--to takes safetensors, pt or npy, not '%s'", v);
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
		default:
			if (*path && *out)
				return ptfs_usage_error("export", "extra argument '%s'", v);
			*(*path ? out : path) = v;
		}
	}
	if (!*path)
		return ptfs_usage_error("export", "missing CHECKPOINT");
	if (!*to)
		return ptfs_usage_error("export", "missing --to safetensors|pt|npy");
	if (!*out)
		return ptfs_usage_error("export", "missing OUT");
	if (xo->shard_size && strcmp(*to, "safetensors") != 0)
		return ptfs_usage_error("export", "--shard-size is for --to safetensors");
	return 0;
}

/* `ptfs export CHECKPOINT --to safetensors|pt|npy [options] OUT` */
int ptfs_cmd_export(int argc, char **argv, const struct pt_ckpt_opts *o)
{
	struct pt_export_opts xo = { 0 };
	const char *path = NULL, *out = NULL, *to = NULL;
	struct pt_ckpt *ck;
	struct pt_error err;
	struct pt_buf notes;
	struct ptfs_progress *pg;
	int rc;

	rc = export_args(argc, argv, &xo, &path, &out, &to);
	if (rc)
		return rc;
	if (open_ck(path, o, &ck))
		return PTFS_EXIT_ERROR;
	pg = ptfs_progress_start("export");
	pt_ckpt_set_progress(ck, ptfs_progress_hook, pg);
	pt_error_clear(&err);
	pt_buf_init(&notes);
	if (strcmp(to, "safetensors") == 0)
		rc = pt_export_safetensors(ck, out, &xo, &notes, &err);
	else if (strcmp(to, "pt") == 0)
		rc = pt_export_pt(ck, out, &xo, &notes, &err);
	else
		rc = pt_export_npy(ck, out, &xo, &notes, &err);
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
