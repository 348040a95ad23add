/* SPDX-License-Identifier: MIT */
/*
 * fuzz_limits.h -- the caps the checkpoint fuzzers open with: the
 * defaults, lowered where a fuzzed file could otherwise spend the
 * fuzzer's memory or time limit on one input (a finding that is only a
 * large default).
 */
#ifndef PTFS_TESTS_FUZZ_LIMITS_H
#define PTFS_TESTS_FUZZ_LIMITS_H

#include "ckpt/ckpt.h"

static inline void fuzz_ckpt_opts(struct pt_ckpt_opts *opts)
{
	pt_ckpt_opts_default(opts);
	opts->limits.max_records = 100000;
	opts->limits.max_pickle_bytes = 16u << 20;
	opts->limits.max_inflate_bytes = 64u << 20;
	opts->limits.max_values = 1000000;
	opts->limits.max_memo = 1000000;
	opts->limits.max_memory = 256u << 20;
	opts->limits.max_dir_entries = 1000000;
}

#endif /* PTFS_TESTS_FUZZ_LIMITS_H */
