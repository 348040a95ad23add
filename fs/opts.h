/* SPDX-License-Identifier: MIT */
/*
 * opts.h -- the checkpoint options both front ends take (fs/opts.c): the
 * mount as -o NAME[=VALUE], ls/cat/info/set as -o NAME[=VALUE][,...].
 * One parser, so that every option is reachable from both and means the
 * same in both.
 */
#ifndef PTFS_FS_OPTS_H
#define PTFS_FS_OPTS_H

#include "ckpt/ckpt.h"

/*
 * Apply one option to @o: "nested", "suffix", "commit=WAY" (auto, rewrite, clone,
 * inplace), or "LIMIT=N" for each field of struct
 * pt_limits (max_records, max_pickle_bytes, max_inflate_bytes, max_values,
 * max_memo, max_memory, max_depth, max_rank, max_dir_entries), N a
 * positive decimal number (0, signs, junk, overflow, or past UINT32_MAX
 * for max_depth/max_rank are errors).  Returns 1 when @opt was ours and
 * applied, 0 when it is not one of ours (the mount passes it on to
 * libfuse), -1 when it is ours but bad (one line printed on stderr).
 */
int ptfs_opt_apply(struct pt_ckpt_opts *o, const char *opt);

#endif /* PTFS_FS_OPTS_H */
