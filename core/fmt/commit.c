/* SPDX-License-Identifier: MIT */
/*
 * commit.c -- what the writing formats (zip.c, safetensors.c) share around
 * a commit: the patch applied the way -o commit says, and the line that
 * says how it went (fmt.h).
 */
#include "fmt/fmt.h"

#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt_i.h"

int pt__commit_patch(struct pt_ckpt *ck, const struct pt_patch *p, size_t n,
		     bool own_rewrite, enum pt_commit_way *used,
		     struct pt_error *err)
{
	struct pt_replace_expect ex;

	/* the file must still be the one the source opened */
	memset(&ex, 0, sizeof(ex));
	ex.size = (off_t)ck->src->size;
	ex.mtime = ck->src->mtime;
	return pt_patch_apply(pt_source_local_path(ck->src), ck->opts.commit,
			      p, n, &ex, own_rewrite, &ck->no_clone, used, err);
}

int pt__commit_end(struct pt_ckpt *ck, int rc, enum pt_commit_way used,
		   uint64_t bytes, struct pt_error *err)
{
	if (rc) {
		pt_error_prefix(err, "commit (%s)", pt_commit_way_name(used));
		return rc;
	}
	if (used == PT_COMMIT_REWRITE)
		bytes = ck->src->size;
	snprintf(ck->last_commit, sizeof(ck->last_commit),
		 "%s, %llu bytes written", pt_commit_way_name(used),
		 (unsigned long long)bytes);
	return 0;
}
