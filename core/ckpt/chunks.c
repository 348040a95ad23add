/* SPDX-License-Identifier: MIT */
/*
 * chunks.c -- the bytes of a PT_ST_CHUNKS storage (struct pt_chunks): a
 * tensor of a distributed checkpoint (fmt/dcp.c) whose boxes lie in
 * several .distcp files, read back in the global tensor's C order.  The
 * format checked the tiling and every file range at open, so nothing
 * here checks an untrusted number again.
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>

/* Does chunk @c hold the element at multi-index @idx? */
static bool chunk_has(const struct pt_chunk *c, const int64_t *idx,
		      uint32_t r)
{
	uint32_t d;

	for (d = 0; d < r; d++)
		if (idx[d] < c->offsets[d] || idx[d] - c->offsets[d] >= c->sizes[d])
			return false;
	return true;
}

/* The bytes of chunk @c in its file: one region (io/source.h). */
static uint64_t chunk_bytes(const struct pt_chunk *c, uint32_t r, uint64_t es)
{
	uint64_t b = es;
	uint32_t d;

	for (d = 0; d < r; d++)
		b *= (uint64_t)c->sizes[d];
	return b;
}

/*
 * PT_ST_CHUNKS (struct pt_chunks): bytes [off, off + n) of the global
 * C-order tensor, copied run by run.  A run is the longest stretch of
 * consecutive global elements that are also consecutive in one chunk:
 * the rest of its innermost row, and more rows while the chunk spans whole
 * dimensions.  Chunks are looked up from the last one used (reads go
 * forward in C order, which is the chunks' order), then by a scan.  The
 * format checked the tiling and every file range at open.
 */
ssize_t pt__chunks_read(const struct pt_ckpt *ck, const struct pt_chunks *cs,
			uint8_t *buf, size_t n, uint64_t off,
			struct pt_error *err)
{
	uint32_t r = cs->rank, d;
	uint64_t es = cs->es, done = 0;
	int64_t idx[64];
	size_t hint = 0, k;
	int rc;

	if (r > 64)
		return pt_fail(err, -EFBIG, "tensor rank too large to assemble");
	while (done < n) {
		uint64_t pos = off + done, rem = pos / es, skip = pos % es;
		uint64_t lin = 0, run = 1, mult = 1, take;
		const struct pt_chunk *c = NULL;
		const struct pt_ckpt *h;

		for (d = r; d-- > 0;) {
			idx[d] = (int64_t)(rem % (uint64_t)cs->shape[d]);
			rem /= (uint64_t)cs->shape[d];
		}
		for (k = 0; k < 2 && hint + k < cs->n && !c; k++)
			if (chunk_has(&cs->v[hint + k], idx, r))
				c = &cs->v[hint + k];
		for (k = 0; k < cs->n && !c; k++)
			if (chunk_has(&cs->v[k], idx, r))
				c = &cs->v[k];
		if (!c)
			return pt_fail(err, -EIO, "no chunk holds byte %llu",
				       (unsigned long long)pos);
		hint = (size_t)(c - cs->v);
		for (d = 0; d < r; d++)
			lin = lin * (uint64_t)c->sizes[d] +
			      (uint64_t)(idx[d] - c->offsets[d]);
		for (d = r; d-- > 0;) {
			run += (uint64_t)(c->sizes[d] - 1 - (idx[d] - c->offsets[d])) * mult;
			if (c->sizes[d] != cs->shape[d])
				break;
			mult *= (uint64_t)c->sizes[d];
		}
		take = run * es - skip;
		if (take > n - done)
			take = n - done;
		h = c->home ? c->home : ck;
		pt_source_region(pt__tensor_source(h), c->file_off,
				 chunk_bytes(c, r, es));
		rc = pt_source_read(pt__tensor_source(h), buf + done, (size_t)take,
				    c->file_off + lin * es + skip, err);
		if (rc)
			return rc;
		done += take;
	}
	return (ssize_t)n;
}
