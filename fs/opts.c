/* SPDX-License-Identifier: MIT */
/*
 * opts.c -- the checkpoint options shared by the mount and the FUSE-less
 * subcommands (opts.h).
 */
#include "opts.h"

#include "base/units.h"
#include "container/journal.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT(name, max, bytes) { #name, offsetof(struct pt_limits, name), \
				  sizeof(((struct pt_limits *)0)->name), max, bytes }

static const struct limit_opt {
	const char *name;
	size_t off;             /* in struct pt_limits */
	size_t size;            /* 4 or 8 bytes */
	uint64_t max;
	bool bytes;             /* a size (base/units.h), else a count */
} limit_opts[] = {
	LIMIT(max_records, UINT64_MAX, false),
	LIMIT(max_pickle_bytes, UINT64_MAX, true),
	LIMIT(max_inflate_bytes, UINT64_MAX, true),
	LIMIT(max_values, UINT64_MAX, false),
	LIMIT(max_memo, UINT64_MAX, false),
	LIMIT(max_memory, UINT64_MAX, true),
	LIMIT(max_depth, UINT32_MAX, false),
	LIMIT(max_rank, UINT32_MAX, false),
	LIMIT(max_dir_entries, UINT64_MAX, false),
	LIMIT(max_walk_entries, UINT64_MAX, false),
	LIMIT(max_walk_bytes, UINT64_MAX, true),
};

/* A positive decimal number <= @max, or false. */
static bool parse_count(const char *s, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end = NULL;

	if (*s < '0' || *s > '9')
		return false;   /* no sign, no space, not empty */
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v == 0 || v > max)
		return false;
	*out = v;
	return true;
}

/* A cap from @s, a size for the byte caps, else a count; or false after
 * one line naming the option. */
static bool parse_limit(const struct limit_opt *l, const char *opt,
			const char *s, uint64_t *out)
{
	if (!l->bytes) {
		if (s && parse_count(s, l->max, out))
			return true;
		fprintf(stderr, "ptfs: bad option '%s': %s takes a number from 1 to %llu\n",
			opt, l->name, (unsigned long long)l->max);
		return false;
	}
	if (s && pt_parse_size(s, out) == 0 && *out > 0 && *out <= l->max)
		return true;
	fprintf(stderr, "ptfs: bad option '%s': %s takes a size above 0 (%s)\n",
		opt, l->name, PT_SIZE_SYNTAX);
	return false;
}

int ptfs_opt_apply(struct pt_ckpt_opts *o, const char *opt)
{
	const char *eq = strchr(opt, '=');
	size_t nlen = eq ? (size_t)(eq - opt) : strlen(opt);
	size_t i;
	uint64_t v;

	if (strcmp(opt, "nested") == 0) {
		o->nested = true;
		return 1;
	}
	if (strcmp(opt, "suffix") == 0) {
		o->suffix = true;
		return 1;
	}
	if (strncmp(opt, "commit=", 7) == 0) {
		if (pt_commit_way_parse(opt + 7, &o->commit) != 0) {
			fprintf(stderr, "ptfs: bad option '%s' (commit=auto, rewrite, clone or inplace)\n",
				opt);
			return -1;
		}
		return 1;
	}
	for (i = 0; i < sizeof(limit_opts) / sizeof(*limit_opts); i++) {
		const struct limit_opt *l = &limit_opts[i];
		char *field = (char *)&o->limits + l->off;

		if (strlen(l->name) != nlen || strncmp(opt, l->name, nlen) != 0)
			continue;
		if (!parse_limit(l, opt, eq ? eq + 1 : NULL, &v))
			return -1;
		if (l->size == sizeof(uint32_t)) {
			uint32_t v32 = (uint32_t)v;
			memcpy(field, &v32, sizeof(v32));
		} else {
			memcpy(field, &v, sizeof(v));
		}
		return 1;
	}
	return 0;
}
