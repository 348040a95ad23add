/* SPDX-License-Identifier: MIT */
/*
 * tensor_read.c -- a tensor's bytes in C order, from wherever its storage
 * lies (enum pt_stkind): a range of the checkpoint's file, a ZIP record
 * inflated once, memory, nothing (zeros), or DCP chunks in several files
 * (chunks.c).  Every read ends in pt_source_read() (io/).  A contiguous
 * tensor is one storage range; a view is gathered element run by element
 * run from its storage window, whole and kept (gathered.c) when a part of
 * it is asked for.  The byte windows were checked against the storages
 * when the tensors were made (torch.c), so nothing here checks an
 * untrusted number again.
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static ssize_t storage_read(struct pt_ckpt *ck, const struct pt_storage *st,
			    void *buf, size_t n, uint64_t off,
			    struct pt_error *err)
{
	const struct pt_source *src;
	const uint8_t *mem;
	int rc;

	if (off >= st->nbytes)
		return 0;
	if (n > st->nbytes - off)
		n = (size_t)(st->nbytes - off);
	if (st->home)
		ck = st->home;  /* a shard's storage: its file, its zip */
	switch (st->kind) {
	case PT_ST_FILE:
		/* through the layer (uncommitted writes); the storage is one
		 * region (a source that gains from it fetches ahead inside
		 * it; a no-op for files) */
		src = pt__tensor_source(ck);
		pt_source_region(src, st->file_off, st->nbytes);
		rc = pt_source_read(src, buf, n, st->file_off + off, err);
		return rc ? rc : (ssize_t)n;
	case PT_ST_MEM:
		memcpy(buf, st->mem + off, n);
		return (ssize_t)n;
	case PT_ST_ZIP:
		rc = pt_zip_inflated(ck->zip, st->entry, &mem, err);
		if (rc)
			return rc;
		memcpy(buf, mem + off, n);
		return (ssize_t)n;
	case PT_ST_NONE:
		memset(buf, 0, n);
		return (ssize_t)n;
	case PT_ST_CHUNKS:
		return pt__chunks_read(ck, st->chunks, buf, n, off, err);
	}
	return -EINVAL;
}


/*
 * Gather elements [e0, e0 + count) of a strided tensor, in C order, into
 * @dst.  The storage window [byte_lo, byte_hi) is read in one piece (it is
 * bounded by the storage, which the caller accepted when it opened the
 * file) and elements are copied from it.
 */
static int gather(struct pt_ckpt *ck, const struct pt_tensor *t,
		  uint8_t *dst, uint64_t e0, uint64_t count,
		  struct pt_error *err)
{
	uint64_t es = t->dtype->size, lo = t->byte_lo, span = t->byte_hi - lo;
	int64_t idx[64];
	uint64_t rem = e0, i, pos = 0;
	uint8_t *win = NULL;
	ssize_t got;
	uint32_t d, r = t->rank;

	if (r > 64)
		return pt_fail(err, -EFBIG, "tensor rank too large to gather");
	win = malloc(span ? span : 1);
	if (!win)
		return pt_fail(err, -ENOMEM, "out of memory gathering a view");
	got = storage_read(ck, t->st, win, span, lo, err);
	if (got < 0 || (uint64_t)got != span) {
		free(win);
		return got < 0 ? (int)got : pt_fail(err, -EIO, "short storage read");
	}
	/* multi-index of element e0 */
	for (d = r; d-- > 0;) {
		idx[d] = (int64_t)(rem % (uint64_t)t->shape[d]);
		rem /= (uint64_t)t->shape[d];
	}
	/* a run along the last dimension at a time, copied with a loop for
	 * the element size (a memcpy call per element was most of a
	 * transposed tensor's gather) */
	for (i = 0; i < count;) {
		uint64_t at = (uint64_t)t->offset, run = 1, step = 0, k;
		const uint8_t *src;

		for (d = 0; d < r; d++)
			at += (uint64_t)idx[d] * (uint64_t)t->stride[d];
		if (r > 0) {
			run = (uint64_t)(t->shape[r - 1] - idx[r - 1]);
			step = (uint64_t)t->stride[r - 1] * es;
		}
		if (run > count - i)
			run = count - i;
		src = win + at * es - lo;
		switch (es) {
		case 2:
			for (k = 0; k < run; k++, src += step, pos += 2)
				memcpy(dst + pos, src, 2);
			break;
		case 4:
			for (k = 0; k < run; k++, src += step, pos += 4)
				memcpy(dst + pos, src, 4);
			break;
		case 8:
			for (k = 0; k < run; k++, src += step, pos += 8)
				memcpy(dst + pos, src, 8);
			break;
		default:
			for (k = 0; k < run; k++, src += step, pos += es)
				memcpy(dst + pos, src, es);
			break;
		}
		i += run;
		if (r == 0)
			break;
		idx[r - 1] += (int64_t)run;
		for (d = r; d-- > 0;) {
			if (idx[d] < t->shape[d])
				break;
			idx[d] = 0;
			if (d > 0)
				idx[d - 1]++;
		}
	}
	free(win);
	return 0;
}

/* A part of non-contiguous @t through the kept copies (gathered.c): the
 * bytes read, a negative errno, or 0 when it cannot be kept (the caller
 * gathers the part alone). */
static ssize_t gathered_read(struct pt_ckpt *ck, const struct pt_tensor *t,
			     void *buf, size_t n, uint64_t off,
			     struct pt_error *err)
{
	uint64_t gen;
	uint8_t *all;
	int rc = 0;

	if (t->nbytes > PT_GATHERED_MAX_BYTES || n == 0)
		return 0;
	if (pt__gathered_copy(ck, t, buf, n, off))
		return (ssize_t)n;
	if (!pt__gathered_fill_begin(ck))
		return 0;
	/* gathered by the reader we waited for? */
	if (pt__gathered_copy(ck, t, buf, n, off)) {
		pt__gathered_fill_end(ck);
		return (ssize_t)n;
	}
	gen = pt__gathered_gen(ck, t);  /* before the bytes are read */
	all = malloc((size_t)t->nbytes);
	if (all)
		rc = gather(ck, t, all, 0, t->numel, err);
	if (all && !rc) {
		memcpy(buf, all + off, n);
		pt__gathered_keep(ck, t, gen, all);
	} else {
		free(all);
	}
	pt__gathered_fill_end(ck);
	if (!all)
		return 0;
	return rc ? rc : (ssize_t)n;
}

ssize_t pt__tensor_read(struct pt_ckpt *ck, const struct pt_tensor *t,
			void *buf, size_t n, uint64_t off, struct pt_error *err)
{
	uint64_t es = t->dtype->size, e0, e1, end;
	uint8_t *tmp;
	ssize_t got;
	int rc;

	__atomic_add_fetch(&ck->tensor_reads, 1, __ATOMIC_RELAXED);
	if (off >= t->nbytes)
		return 0;
	if (n > t->nbytes - off)
		n = (size_t)(t->nbytes - off);
	if (t->contiguous)
		return storage_read(ck, t->st, buf, n, t->byte_lo + off, err);
	if (n < t->nbytes) {
		got = gathered_read(ck, t, buf, n, off, err);
		if (got != 0)
			return got;
	}
	end = off + n;
	e0 = off / es;
	e1 = (end + es - 1) / es;
	tmp = malloc((e1 - e0) * es);
	if (!tmp)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = gather(ck, t, tmp, e0, e1 - e0, err);
	if (rc == 0)
		memcpy(buf, tmp + (off - e0 * es), n);
	free(tmp);
	return rc ? rc : (ssize_t)n;
}
