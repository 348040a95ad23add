/* SPDX-License-Identifier: MIT */
/*
 * out.c -- output files of the exporters: a temporary file beside the
 * final name, tensor bytes appended by copy_file_range() where they lie
 * contiguous in a local file (read and write otherwise), then fsync, a
 * last check that the checkpoint did not change while it was read, and
 * rename.  A failure at any point removes the temporary file, so an output
 * is never seen half-written.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/export.h"
#include "io/fd.h"

static pthread_key_t xbuf_key;
static pthread_once_t xbuf_once = PTHREAD_ONCE_INIT;

static void xbuf_init(void)
{
	(void)pthread_key_create(&xbuf_key, free);
}

uint8_t *pt__xbuf(size_t *len)
{
	uint8_t *b;

	(void)pthread_once(&xbuf_once, xbuf_init);
	b = pthread_getspecific(xbuf_key);
	if (!b) {
		b = malloc(PT_XBUF_SIZE);
		if (b && pthread_setspecific(xbuf_key, b) != 0) {
			free(b);
			b = NULL;
		}
	}
	*len = PT_XBUF_SIZE;
	return b;
}

void pt_swap_elems(uint8_t *p, size_t n, unsigned size)
{
	size_t i;
	unsigned a;

	if (size < 2)
		return;
	for (i = 0; i < n; i++, p += size)
		for (a = 0; a < size / 2; a++) {
			uint8_t t = p[a];
			p[a] = p[size - 1 - a];
			p[size - 1 - a] = t;
		}
}

int pt_xout_open(struct pt_xout *o, const char *path, struct pt_error *err)
{
	char *dcopy = strdup(path), *bcopy = strdup(path);
	size_t len;
	int e;

	memset(o, 0, sizeof(*o));
	o->fd = -1;
	o->path = strdup(path);
	if (!dcopy || !bcopy || !o->path) {
		free(dcopy);
		free(bcopy);
		pt_xout_abort(o);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	len = strlen(path) + 32;
	o->tmp = malloc(len);
	if (o->tmp)
		snprintf(o->tmp, len, "%s/.%s.ptfs-XXXXXX", dirname(dcopy),
			 basename(bcopy));
	free(dcopy);
	free(bcopy);
	if (!o->tmp) {
		pt_xout_abort(o);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	o->fd = mkostemp(o->tmp, O_CLOEXEC);
	if (o->fd < 0) {
		e = errno;
		free(o->tmp);
		o->tmp = NULL;
		pt_xout_abort(o);
		return pt_fail(err, -e, "%s: %s", path, strerror(e));
	}
	/* the name is the one a killed commit leaves (replace.h): the lock
	 * tells a sweep of the target's directory that a writer is alive */
	(void)flock(o->fd, LOCK_EX | LOCK_NB);
	{
		mode_t um = umask(0);
		umask(um);
		(void)fchmod(o->fd, 0666 & ~um);
	}
	return 0;
}

int pt_xout_create(struct pt_xout *o, const char *path, struct pt_error *err)
{
	int e;

	memset(o, 0, sizeof(*o));
	o->direct = true;
	o->path = strdup(path);
	if (!o->path)
		return pt_fail(err, -ENOMEM, "out of memory");
	o->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (o->fd < 0) {
		e = errno;
		pt_xout_abort(o);
		return pt_fail(err, -e, "%s: %s", path, strerror(e));
	}
	return 0;
}

int pt_xout_write(struct pt_xout *o, const void *p, size_t n,
		  struct pt_error *err)
{
	int rc = pt_pwrite_full(o->fd, p, n, o->off);

	if (rc)
		return pt_fail(err, rc, "%s: %s", o->path, strerror(-rc));
	o->off += n;
	return 0;
}

/* copy_file_range() of [@from, @from + @n) of @fd; 1 when the kernel
 * cannot do it here (the caller then reads), 0 done, or -errno. */
static int copy_range(struct pt_xout *o, int fd, uint64_t from, uint64_t n,
		      struct pt_error *err)
{
	const uint64_t start = o->off;

	while (n > 0) {
		loff_t in = (loff_t)from, out = (loff_t)o->off;
		size_t ask = n > (1u << 30) ? (1u << 30) : (size_t)n;
		ssize_t k = copy_file_range(fd, &in, o->fd, &out, ask, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && o->off == start &&
		    (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
		     errno == EOPNOTSUPP))
			return 1;
		if (k <= 0) {
			int e = k < 0 ? errno : EIO;
			if (k == 0)     /* the source ended early */
				return pt_fail(err, -EIO, "%s: checkpoint ended early (changed on disk?)",
					       o->path);
			return pt_fail(err, -e, "%s: %s", o->path, strerror(e));
		}
		from += (uint64_t)k;
		n -= (uint64_t)k;
		o->off += (uint64_t)k;
	}
	return 0;
}

/* Start writing back what was written since @from, so that the fsync
 * before the rename finds little left to do (the disk works while we
 * copy).  Only a hint: errors show at fsync. */
static void start_writeback(struct pt_xout *o, uint64_t from)
{
	if (!o->direct && !o->nosync && o->off > from)
		(void)sync_file_range(o->fd, (off64_t)from, (off64_t)(o->off - from),
				      SYNC_FILE_RANGE_WRITE);
}

int pt_xout_tensor(struct pt_xout *o, struct pt_ckpt *ck, struct pt_node *node,
		   const struct pt_tinfo *ti, bool swap, struct pt_error *err)
{
	unsigned unit = ti->itemsize;
	uint64_t done = 0, file_off;
	size_t cap;
	uint8_t *buf, *own = NULL;
	int fd, rc;

	if (ti->nbytes == 0)
		return 0;
	if (!swap && pt_node_extent(ck, node, 0, ti->nbytes, &fd, &file_off)) {
		uint64_t at = o->off;

		rc = copy_range(o, fd, file_off, ti->nbytes, err);
		if (rc == 0) {
			start_writeback(o, at);
			pt_ckpt_progress(ck, PT_PROGRESS_DONE, ti->nbytes);
		}
		if (rc <= 0)
			return rc;
	}
	if (strncmp(ti->dtype, "complex", 7) == 0)
		unit /= 2;      /* real and imaginary parts swap apart */
	if (!ti->contiguous && ti->nbytes > PT_XBUF_SIZE) {
		cap = ti->nbytes < PT_VIEW_CHUNK ? (size_t)ti->nbytes : PT_VIEW_CHUNK;
		buf = own = malloc(cap);
	} else {
		buf = pt__xbuf(&cap);
	}
	if (!buf)
		return pt_fail(err, -ENOMEM, "out of memory");
	cap -= cap % ti->itemsize;
	rc = 0;
	while (done < ti->nbytes && !rc) {
		size_t want = ti->nbytes - done < cap ? (size_t)(ti->nbytes - done) : cap;

		rc = pt_view_read(ck, node, ti, buf, want, done, err);
		if (rc)
			break;
		if (swap)
			pt_swap_elems(buf, want / unit, unit);
		rc = pt_xout_write(o, buf, want, err);
		done += want;
		if (done % (16u << 20) < want)
			start_writeback(o, o->off > (16u << 20) ? o->off - (16u << 20) : 0);
	}
	free(own);
	return rc;
}

int pt_xout_commit(struct pt_xout *o, struct pt_ckpt *ck, struct pt_error *err)
{
	char *dcopy;
	int e, dfd, rc;

	if (o->direct) {
		e = close(o->fd) != 0 ? errno : 0;
		o->fd = -1;
		if (e)
			return pt_fail(err, -e, "%s: %s", o->path, strerror(e));
		free(o->path);
		o->path = NULL;
		return 0;
	}
	if (!o->nosync && fsync(o->fd) != 0) {
		e = errno;
		return pt_fail(err, -e, "%s: %s", o->path, strerror(e));
	}
	rc = pt_ckpt_unchanged(ck, err);
	if (rc)
		return rc;
	if (close(o->fd) != 0) {
		o->fd = -1;
		e = errno;
		return pt_fail(err, -e, "%s: %s", o->path, strerror(e));
	}
	o->fd = -1;
	if (rename(o->tmp, o->path) != 0) {
		e = errno;
		return pt_fail(err, -e, "%s: %s", o->path, strerror(e));
	}
	free(o->tmp);
	o->tmp = NULL;
	dcopy = o->nosync ? NULL : strdup(o->path);
	if (dcopy) {
		dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			(void)fsync(dfd);
			close(dfd);
		}
		free(dcopy);
	}
	free(o->path);
	o->path = NULL;
	return 0;
}

void pt_xout_abort(struct pt_xout *o)
{
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
	if (o->tmp)
		unlink(o->tmp);
	free(o->tmp);
	free(o->path);
	o->tmp = NULL;
	o->path = NULL;
}

int pt_xout_npy_data(struct pt_xout *o, struct pt_ckpt *ck,
		     struct pt_node *node, const struct pt_tinfo *ti,
		     const struct pt_npy *np, struct pt_error *err)
{
	uint64_t done = 0;
	size_t cap, k;
	uint8_t *in, *out;
	int rc = 0;

	if (!np->conv)
		return pt_xout_tensor(o, ck, node, ti, false, err);
	in = pt__xbuf(&cap);
	out = malloc(cap);
	if (!in || !out) {
		free(out);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	k = cap / np->out_size;         /* elements per round */
	while (done < ti->numel && !rc) {
		size_t m = ti->numel - done < k ? (size_t)(ti->numel - done) : k;
		size_t want = m * np->in_size;

		rc = pt_view_read(ck, node, ti, in, want, done * np->in_size, err);
		if (rc)
			break;
		pt_npy_convert(np, in, out, m);
		rc = pt_xout_write(o, out, m * np->out_size, err);
		done += m;
	}
	free(out);
	return rc;
}

/* ---- views: gathered from their storage in bounded pieces ---- */

struct elem_it {
	int64_t idx[64];
	int64_t at;                     /* element offset in the storage */
	const struct pt_tinfo *ti;
};

static void it_start(struct elem_it *it, const struct pt_tinfo *ti, uint64_t e)
{
	uint32_t d;

	it->ti = ti;
	it->at = ti->offset;
	for (d = ti->rank; d-- > 0;) {
		it->idx[d] = (int64_t)(e % (uint64_t)ti->shape[d]);
		e /= (uint64_t)ti->shape[d];
		it->at += it->idx[d] * ti->stride[d];
	}
}

static void it_next(struct elem_it *it)
{
	const struct pt_tinfo *ti = it->ti;
	uint32_t d;

	for (d = ti->rank; d-- > 0;) {
		it->at += ti->stride[d];
		if (++it->idx[d] < ti->shape[d])
			return;
		it->at -= ti->stride[d] * ti->shape[d];
		it->idx[d] = 0;
	}
}

/* Elements [e0, e0 + count) into @out: the storage range they touch is
 * read once when it fits a piece, else piece by piece, each piece
 * scanned for the elements inside it. */
static int gather_elems(struct pt_ckpt *ck, struct pt_node *node,
			const struct pt_tinfo *ti, uint8_t *out, uint64_t e0,
			uint64_t count, struct pt_error *err)
{
	const uint64_t es = ti->itemsize;
	uint64_t lo = UINT64_MAX, hi = 0, p, i;
	struct elem_it it;
	uint8_t *piece;
	int rc = 0;

	if (ti->rank > 64)
		return pt_fail(err, -EFBIG, "tensor rank over 64");
	it_start(&it, ti, e0);
	for (i = 0; i < count; i++, it_next(&it)) {
		uint64_t b = (uint64_t)it.at * es;
		if (b < lo)
			lo = b;
		if (b + es > hi)
			hi = b + es;
	}
	piece = malloc(hi - lo < PT_VIEW_PIECE ? (size_t)(hi - lo) : PT_VIEW_PIECE);
	if (!piece)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (p = lo; p < hi && !rc; p += PT_VIEW_PIECE) {
		uint64_t len = hi - p < PT_VIEW_PIECE ? hi - p : PT_VIEW_PIECE;

		rc = pt_node_storage_read(ck, node, piece, (size_t)len, p, err);
		it_start(&it, ti, e0);
		for (i = 0; i < count && !rc; i++, it_next(&it)) {
			uint64_t b = (uint64_t)it.at * es;
			if (b >= p && b < p + len)
				memcpy(out + i * es, piece + (b - p), es);
		}
	}
	free(piece);
	return rc;
}

int pt_view_read(struct pt_ckpt *ck, struct pt_node *node,
		 const struct pt_tinfo *ti, void *dst, size_t n, uint64_t rel,
		 struct pt_error *err)
{
	const uint64_t es = ti->itemsize;
	uint64_t e0 = rel / es, e1 = (rel + n + es - 1) / es;
	uint8_t *tmp;
	ssize_t got;
	int rc;

	pt_ckpt_progress(ck, PT_PROGRESS_DONE, n);
	if (ti->contiguous || ti->packed) {
		got = pt_node_read(ck, node, dst, n, rel, err);
		return got == (ssize_t)n ? 0 : got < 0 ? (int)got :
		       pt_fail(err, -EIO, "tensor ended early (checkpoint changed on disk?)");
	}
	if (rel % es == 0 && n % es == 0)
		return gather_elems(ck, node, ti, dst, e0, e1 - e0, err);
	tmp = malloc((size_t)((e1 - e0) * es));
	if (!tmp)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = gather_elems(ck, node, ti, tmp, e0, e1 - e0, err);
	if (!rc)
		memcpy(dst, tmp + (rel - e0 * es), n);
	free(tmp);
	return rc;
}

/* What pt_view_read() reads, byte-swapped per element when @swap
 * (complex: per half): the element order a little-endian reader expects
 * of a big-endian tensor. */
int pt__view_read_swapped(struct pt_ckpt *ck, struct pt_node *node,
			  const struct pt_tinfo *ti, uint8_t *dst, size_t n,
			  uint64_t rel, bool swap, struct pt_error *err)
{
	unsigned es = ti->itemsize, unit = es;
	uint64_t a = rel - rel % es, b = rel + n;
	uint8_t *tmp;
	int rc;

	if (!swap)
		return pt_view_read(ck, node, ti, dst, n, rel, err);
	if (strncmp(ti->dtype, "complex", 7) == 0)
		unit /= 2;
	b = b + (es - b % es) % es;
	tmp = malloc((size_t)(b - a));
	if (!tmp)
		return -ENOMEM;
	rc = pt_view_read(ck, node, ti, tmp, (size_t)(b - a), a, err);
	if (!rc) {
		pt_swap_elems(tmp, (size_t)(b - a) / unit, unit);
		memcpy(dst, tmp + (rel - a), n);
	}
	free(tmp);
	return rc;
}
