/* SPDX-License-Identifier: MIT */
/*
 * stats.h -- statistics of a tensor file, streamed in bounded chunks:
 * min, max, mean, standard deviation, counts of zeros, NaN, +Inf, -Inf,
 * and the sha256 of its bytes.
 *
 * What the numbers are over (README "ptfs stat"):
 *  - floats (every width, bfloat16 and float8/float4 decoded exactly):
 *    min/max/mean/std over the finite values; NaN and infinities counted;
 *  - integers, bool (0/1), bits*: over all values; int64/uint64 min/max
 *    exact;
 *  - complex: over the magnitudes |z|; an element with a NaN part counts
 *    as NaN, one with an infinite part as +Inf; zero means both parts 0;
 *  - quantized (qint8, quint8, qint32, quint4x2, quint2x4): over the
 *    stored integers (scale and zero point are not kept with the bytes);
 *    packed types count every packed value;
 *  - std is the population standard deviation (numpy's default, ddof=0),
 *    from per-chunk means merged exactly (Chan et al.), all in double.
 * The sha256 is of the file's bytes as the mount serves them.
 */
#ifndef PTFS_CORE_VIEW_STATS_H
#define PTFS_CORE_VIEW_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "view/elem.h"

struct pt_tstats {
	struct pt_tinfo ti;
	struct pt_elem el;
	bool decoded;           /* false: a dtype without values (sha only) */
	uint64_t values;        /* decoded values (complex: elements) */
	uint64_t finite, zeros, nan, pinf, ninf;
	double min, max, mean, m2;      /* over finite values */
	bool int64;             /* 64-bit integers: exact bounds below */
	bool uns;
	int64_t imin, imax;
	uint64_t umin, umax;
	uint8_t sha256[32];
	uint64_t bytes_read;
};

/* Compute the statistics of tensor file @node.  0, or a negative errno
 * with one line in @err. */
int pt_tensor_stats(struct pt_ckpt *ck, struct pt_node *node,
		    struct pt_tstats *s, struct pt_error *err);

/* Load libcrypto, which pt_tensor_stats() needs for the sha256 (it is
 * loaded on first use, base/dl.h), so that a command over many tensors
 * fails once, before the first.  0, or -ENOTSUP with one line in @err. */
int pt_tstats_load(struct pt_error *err);

/* Append the statistics as one JSON object (no trailing newline), with
 * "path" when @path is not NULL.  @fixed pads every number with spaces to
 * a width that holds any value, so the text's length is known before the
 * statistics are: pt_tstats_json_size(). */
void pt_tstats_json(const struct pt_tstats *s, const char *path, bool fixed,
		    struct pt_buf *out);

/* Length of pt_tstats_json(s, @path, true, ...) for any statistics of a
 * tensor @ti (0 when out of memory). */
uint64_t pt_tstats_json_size(const struct pt_tinfo *ti, const char *path);

/* Append one human line: "min=... max=... mean=... std=... zeros=...
 * nan=... +inf=... -inf=... sha256=...". */
void pt_tstats_text(const struct pt_tstats *s, struct pt_buf *out);

#endif /* PTFS_CORE_VIEW_STATS_H */
