/* SPDX-License-Identifier: MIT */
/*
 * remote.c -- CHECKPOINT given as a URL (http://, https://, s3://, hf://):
 * the remote options (-o cache_dir=, cache_size=, timeout=, cafile=,
 * s3_endpoint=) and opening through core/remote when ptfs was built with
 * libcurl.  The mount and the subcommands both open checkpoints here.
 */
#include "ptfs.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fuse_lowlevel.h>

#include "base/units.h"
#include "base/url.h"
#include "ckpt/ckpt.h"
#include "ckpt/pending.h"
#include "log.h"
#ifdef PTFS_HAVE_REMOTE
#include "remote/remote_source.h"

static struct pt_remote_opts ropts;
static bool ropts_set;
#endif

/* The URLs given on the command line, by the shown (redacted) string that
 * stands for each in argv from then on: every message prints what it has
 * in hand and so never a secret; opening takes the real one back. */
static struct {
	const char *shown;
	const char *real;
} hidden[16];
static unsigned n_hidden;

/* The shown string for @arg, or NULL when it has nothing to hide. */
static char *url_hide(const char *arg)
{
	char buf[2048];
	char *s;

	if (!ptfs_is_url(arg) || n_hidden == sizeof(hidden) / sizeof(hidden[0]))
		return NULL;
	pt_url_redact(arg, buf, sizeof(buf));
	if (!strcmp(buf, arg) || !(s = strdup(buf)))
		return NULL;
	hidden[n_hidden].shown = s;
	hidden[n_hidden].real = arg;
	n_hidden++;
	return s;
}

const char *ptfs_url_hide(const char *arg)
{
	char *s = url_hide(arg);

	return s ? s : arg;
}

char *ptfs_url_hide_arg(char *arg)
{
	char *s = url_hide(arg);

	return s ? s : arg;
}

static const char *url_real(const char *arg)
{
	unsigned i;

	for (i = 0; i < n_hidden; i++)
		if (hidden[i].shown == arg)
			return hidden[i].real;
	return arg;
}

#ifdef PTFS_HAVE_REMOTE
/* core/remote's warnings (and PTFS_REMOTE_TRACE lines): logged here */
static void remote_log(int level, const char *line)
{
	if (level >= 7)
		fuse_log(FUSE_LOG_DEBUG, "%s\n", line);
	else
		fuse_log(level <= 3 ? FUSE_LOG_ERR : FUSE_LOG_WARNING,
			 "ptfs: %s\n", line);
}
#endif

bool ptfs_is_url(const char *arg)
{
	return !strncmp(arg, "http://", 7) || !strncmp(arg, "https://", 8) ||
	       !strncmp(arg, "s3://", 5) || !strncmp(arg, "hf://", 5);
}

#ifdef PTFS_HAVE_REMOTE
/* -o cache_size=SIZE: 1, or -1 after one line. */
static int set_cache_size(const char *opt, const char *v)
{
	if (pt_parse_size(v, &ropts.cache_size) == 0 && ropts.cache_size)
		return 1;
	fprintf(stderr, "ptfs: bad option '%s': cache_size takes a size above 0 (%s)\n",
		opt, PT_SIZE_SYNTAX);
	return -1;
}

/* -o timeout=DURATION, whole seconds: 1, or -1 after one line. */
static int set_timeout(const char *opt, const char *v)
{
	uint64_t ms;

	if (pt_parse_duration_ms(v, &ms) == 0 && ms >= 1000 && ms % 1000 == 0 &&
	    ms / 1000 <= UINT_MAX) {
		ropts.timeout_s = (unsigned)(ms / 1000);
		return 1;
	}
	fprintf(stderr, "ptfs: bad option '%s': timeout takes a duration of at least 1 s, in whole seconds (%s)\n",
		opt, PT_DURATION_SYNTAX);
	return -1;
}
#endif

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
		ropts.log = remote_log;
		ropts_set = true;
	}
	switch (k) {
	case 1:
		return set_cache_size(opt, v);
	case 2:
		return set_timeout(opt, v);
	default:
		break;
	}
	if (!*v) {
		fprintf(stderr, "ptfs: bad option '%s': %.*s takes a value\n",
			opt, (int)strlen(keys[k]) - 1, keys[k]);
		return -1;
	}
	if (k == 0)
		ropts.cache_dir = v;
	else if (k == 3)
		ropts.cafile = v;
	else
		ropts.s3_endpoint = v;
	return 1;
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
			ropts.log = remote_log;
			ropts_set = true;
		}
		rc = pt_source_open_remote(url_real(arg), &ropts, &src, err);
		return rc ? rc : pt_ckpt_open_source(ck, src, o, err);
	}
#else
	return pt_fail(err, -ENOTSUP,
		       "this ptfs was built without libcurl: no remote checkpoints");
#endif
}

void ptfs_report_open(const char *arg, const struct pt_error *err)
{
	char shown[2048];

	arg = pt_url_redact(arg, shown, sizeof(shown));
	if (!strncmp(err->msg, arg, strlen(arg)))
		fprintf(stderr, "ptfs: %s\n", err->msg);   /* names it already */
	else
		fprintf(stderr, "ptfs: %s: %s\n", arg, err->msg);
}
