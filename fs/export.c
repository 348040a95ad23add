/* SPDX-License-Identifier: MIT */
/*
 * export.c -- `ptfs tree --json` and `ptfs export`: the CLI side of the
 * exporters in core/export/ (argument parsing, messages).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "export/export.h"
#include "ptfs.h"

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
	struct pt_buf b;
	bool json = false;
	int i, rc = PTFS_EXIT_OK;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc) {
			char *end;
			max = strtoull(argv[++i], &end, 10);
			if (*end || max == 0) {
				fprintf(stderr, "ptfs tree: --max takes a positive number\n");
				return PTFS_EXIT_USAGE;
			}
		} else if (!path && argv[i][0] != '-') {
			path = argv[i];
		} else {
			path = NULL;
			break;
		}
	}
	if (!path || !json) {
		fprintf(stderr, "usage: ptfs tree --json [--max N] CHECKPOINT\n");
		return PTFS_EXIT_USAGE;
	}
	if (open_ck(path, o, &ck))
		return PTFS_EXIT_ERROR;
	pt_buf_init(&b);
	pt_tree_json(ck, &b, max);
	if (b.oom) {
		fprintf(stderr, "ptfs: %s: out of memory\n", path);
		rc = PTFS_EXIT_ERROR;
	} else if (fwrite(b.p, 1, b.len, stdout) != b.len || fflush(stdout) != 0) {
		fprintf(stderr, "ptfs: writing the tree: %s\n", strerror(errno));
		rc = PTFS_EXIT_ERROR;
	}
	pt_buf_free(&b);
	pt_ckpt_close(ck);
	return rc;
}

/* "5GB" (10^9), "500MiB" (2^20), "1000000" bytes; 0 when malformed. */
static uint64_t parse_size(const char *s)
{
	static const struct { const char *sfx; uint64_t mul; } u[] = {
		{ "", 1 }, { "B", 1 }, { "K", 1000 }, { "KB", 1000 },
		{ "M", 1000000 }, { "MB", 1000000 }, { "G", 1000000000 },
		{ "GB", 1000000000 }, { "T", 1000000000000ull },
		{ "TB", 1000000000000ull }, { "KiB", 1ull << 10 },
		{ "MiB", 1ull << 20 }, { "GiB", 1ull << 30 }, { "TiB", 1ull << 40 },
	};
	char *end;
	unsigned long long v;
	size_t i;

	if (!isdigit((unsigned char)s[0]))
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return 0;
	for (i = 0; i < sizeof(u) / sizeof(u[0]); i++)
		if (strcasecmp(end, u[i].sfx) == 0)
			return v > UINT64_MAX / u[i].mul ? 0 : v * u[i].mul;
	return 0;
}

static void print_notes(const struct pt_buf *notes)
{
	const char *p = notes->p, *nl;

	while (p && *p && (nl = strchr(p, '\n'))) {
		fprintf(stderr, "ptfs export: %.*s\n", (int)(nl - p), p);
		p = nl + 1;
	}
}

/* `ptfs export CHECKPOINT --to safetensors|pt|npy [options] OUT` */
int ptfs_cmd_export(int argc, char **argv, const struct pt_ckpt_opts *o)
{
	struct pt_export_opts xo = { 0 };
	const char *path = NULL, *out = NULL, *to = NULL;
	struct pt_ckpt *ck;
	struct pt_error err;
	struct pt_buf notes;
	int i, rc;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--to") == 0 && i + 1 < argc) {
			to = argv[++i];
		} else if (strcmp(argv[i], "--shard-size") == 0 && i + 1 < argc) {
			xo.shard_size = parse_size(argv[++i]);
			if (!xo.shard_size) {
				fprintf(stderr, "ptfs export: --shard-size takes a size (5GB, 500MiB, bytes)\n");
				return PTFS_EXIT_USAGE;
			}
		} else if (strcmp(argv[i], "--skip-unsupported") == 0) {
			xo.skip_unsupported = true;
		} else if (strcmp(argv[i], "--no-fsync") == 0) {
			xo.no_fsync = true;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			to = NULL;      /* unknown option: usage */
			break;
		} else if (!path) {
			path = argv[i];
		} else if (!out) {
			out = argv[i];
		} else {
			to = NULL;
			break;
		}
	}
	if (!path || !out || !to ||
	    (strcmp(to, "safetensors") && strcmp(to, "npy") && strcmp(to, "pt"))) {
		fprintf(stderr, "usage: ptfs export CHECKPOINT --to safetensors|pt|npy [--shard-size SIZE] [--skip-unsupported] [--no-fsync] OUT\n");
		return PTFS_EXIT_USAGE;
	}
	if (xo.shard_size && strcmp(to, "safetensors") != 0) {
		fprintf(stderr, "ptfs export: --shard-size is for --to safetensors\n");
		return PTFS_EXIT_USAGE;
	}
	if (open_ck(path, o, &ck))
		return PTFS_EXIT_ERROR;
	pt_error_clear(&err);
	pt_buf_init(&notes);
	if (strcmp(to, "safetensors") == 0)
		rc = pt_export_safetensors(ck, out, &xo, &notes, &err);
	else if (strcmp(to, "pt") == 0)
		rc = pt_export_pt(ck, out, &xo, &notes, &err);
	else
		rc = pt_export_npy(ck, out, &xo, &notes, &err);
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
	int ok;

	if (open_ck(path, o, &ck))
		return PTFS_EXIT_ERROR;
	pt_buf_init(&b);
	ok = pt_weights_only(ck, &b);
	fwrite(b.p, 1, b.len, stdout);
	pt_buf_free(&b);
	pt_ckpt_close(ck);
	return ok ? PTFS_EXIT_OK : PTFS_EXIT_ERROR;
}
