/* SPDX-License-Identifier: MIT */
/*
 * remote.c -- CHECKPOINT given as a URL (http://, https://, s3://, hf://):
 * the remote options (-o cache_dir=, cache_size=, timeout=, cafile=,
 * s3_endpoint=) and opening through core/remote when ptfs was built with
 * libcurl.  The mount and the subcommands both open checkpoints here.
 */
#include "ptfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/pending.h"
#include "log.h"
#ifdef PTFS_HAVE_REMOTE
#include "remote/remote_source.h"

static struct pt_remote_opts ropts;
static bool ropts_set;
#endif

bool ptfs_is_url(const char *arg)
{
	return !strncmp(arg, "http://", 7) || !strncmp(arg, "https://", 8) ||
	       !strncmp(arg, "s3://", 5) || !strncmp(arg, "hf://", 5);
}

/* "10G", "512M", "4096": bytes; 0 when malformed. */
static unsigned long long parse_size(const char *s)
{
	char *end = NULL;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = 0;

	if (end == s)
		return 0;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end || v > (~0ull >> shift))
		return 0;
	return v << shift;
}

int ptfs_remote_option(const char *opt)
{
	static const char *const keys[] = { "cache_dir=", "cache_size=",
		"timeout=", "cafile=", "s3_endpoint=", NULL };
	const char *v = NULL;
	int k;

	for (k = 0; keys[k]; k++) {
		if (!strncmp(opt, keys[k], strlen(keys[k]))) {
			v = opt + strlen(keys[k]);
			break;
		}
	}
	if (!v)
		return 0;
#ifdef PTFS_HAVE_REMOTE
	if (!ropts_set) {
		pt_remote_opts_default(&ropts);
		ropts_set = true;
	}
	if (!*v)
		goto bad;
	switch (k) {
	case 0: ropts.cache_dir = v; break;
	case 1: ropts.cache_size = parse_size(v); if (!ropts.cache_size) goto bad; break;
	case 2: ropts.timeout_s = (unsigned)parse_size(v); if (!ropts.timeout_s) goto bad; break;
	case 3: ropts.cafile = v; break;
	default: ropts.s3_endpoint = v; break;
	}
	return 1;
bad:
	fprintf(stderr, "ptfs: bad option '%s'\n", opt);
	return -1;
#else
	fprintf(stderr, "ptfs: option '%s': this ptfs was built without libcurl (no remote checkpoints)\n",
		opt);
	return -1;
#endif
}

bool ptfs_pending_note(const char *path, char *found, size_t cap)
{
	if (ptfs_is_url(path) ||
	    !pt_pending_find(path, ptfs_state_dir(false), found, cap))
		return false;
	fprintf(stderr, "ptfs: %s: has writes a mount could not commit, kept in %s: 'ptfs recover %s' applies them, 'ptfs recover --discard %s' drops them\n",
		path, found, path, path);
	return true;
}

int ptfs_open_checkpoint(const char *arg, const struct pt_ckpt_opts *o,
			 struct pt_ckpt **ck, struct pt_error *err)
{
	char found[4096];

	*ck = NULL;
	if (!ptfs_is_url(arg)) {
		/* a command that may write (o->recover: a writable mount,
		 * set, recover) deals with kept writes itself */
		if (!o->recover)
			(void)ptfs_pending_note(arg, found, sizeof(found));
		return pt_ckpt_open(ck, arg, o, err);
	}
#ifdef PTFS_HAVE_REMOTE
	{
		struct pt_source *src;
		int rc;

		if (!ropts_set) {
			pt_remote_opts_default(&ropts);
			ropts_set = true;
		}
		rc = pt_source_open_remote(arg, &ropts, &src, err);
		return rc ? rc : pt_ckpt_open_source(ck, src, o, err);
	}
#else
	return pt_fail(err, -ENOTSUP,
		       "this ptfs was built without libcurl: no remote checkpoints");
#endif
}

void ptfs_report_open(const char *arg, const struct pt_error *err)
{
	if (!strncmp(err->msg, arg, strlen(arg)))
		fprintf(stderr, "ptfs: %s\n", err->msg);   /* names it already */
	else
		fprintf(stderr, "ptfs: %s: %s\n", arg, err->msg);
}
