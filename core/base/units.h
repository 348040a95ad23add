/* SPDX-License-Identifier: MIT */
/*
 * units.h -- the one size syntax and the one duration syntax of every
 * ptfs option (base/units.c), so that a suffix means the same everywhere:
 * -o cache_size=, -o max_memory= and the other byte caps, --shard-size.
 *
 * A size is a decimal number of bytes with an optional suffix, as GNU
 * coreutils reads them (dd, head -c, sort -S):
 *
 *	k M G T		powers of 1024 (K = KiB)
 *	kB MB GB TB	powers of 1000 (SI)
 *	KiB MiB GiB TiB	powers of 1024 (IEC)
 *	B		bytes
 *
 * Suffixes are case-insensitive ("10gib", "512mb").  No sign, no space,
 * no fraction.  A duration is a decimal number of seconds, or one with
 * ms, s, m or h; it takes no size suffix ("2K" is not a duration).
 */
#ifndef PTFS_CORE_BASE_UNITS_H
#define PTFS_CORE_BASE_UNITS_H

#include <stdint.h>

/* What a size may look like, for the one line that rejects one. */
#define PT_SIZE_SYNTAX "bytes, or with k, M, G, T (1024^n), kB, MB, GB, TB (1000^n), KiB, MiB, GiB, TiB"

/* What a duration may look like. */
#define PT_DURATION_SYNTAX "seconds, or with ms, s, m, h"

/* The bytes @s says, in *@out: 0, -EINVAL when it is not a size (empty,
 * a sign, a space, an unknown suffix) or -ERANGE when it exceeds
 * UINT64_MAX.  *@out is left alone on failure. */
int pt_parse_size(const char *s, uint64_t *out);

/* The milliseconds @s says, in *@out: 0, -EINVAL or -ERANGE as above. */
int pt_parse_duration_ms(const char *s, uint64_t *out);

#endif /* PTFS_CORE_BASE_UNITS_H */
