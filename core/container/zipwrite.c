/* SPDX-License-Identifier: MIT */
/*
 * zipwrite.c -- commit changed records by writing a whole new archive beside
 * the original and renaming it over (docs/FORMATS.md, "Rewriting a ZIP").
 *
 * Records are emitted in local-header order.  One that is unchanged and
 * still starts where it started is copied verbatim (copy_file_range(), so
 * copy-on-write filesystems share the extents); any other record gets a
 * fresh header exactly as miniz writes it for torch, so that a torch file
 * whose records keep their sizes comes out with the same layout, and one
 * whose sizes change comes out as torch itself would have written it (which
 * is what torch's computed offsets assume: docs/FORMATS.md, "Computed
 * storage offsets").  The central directory and the ZIP64 end records are
 * always regenerated.
 */
#include "container/zipwrite.h"
#include "container/replace.h"

#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/rd.h"
#include "io/fd.h"

#define ZW_HBUF_SIZE (1u << 20)         /* buffered headers and directory */
#define ZW_PBUF_SIZE (4u << 20)         /* payload chunks, bounce buffer */
#define ZW_COPY_CHUNK (64ull << 20)     /* one copy_file_range() call */
#define ZW_LIMIT32 0xFFFFFFFFull        /* ZIP64 from here on (>=) */
#define ZW_ALIGN_DEFAULT 64u
#define ZW_ALIGN_MAX 32768u             /* keeps the FB block < 64 KiB */
#define ZW_BLOCK 4096u                  /* filesystem block, for sharing */

#define ZW_SIG_LOCAL 0x04034b50u
#define ZW_SIG_DESC 0x08074b50u
#define ZW_SIG_CD 0x02014b50u
#define ZW_SIG_Z64_EOCD 0x06064b50u
#define ZW_SIG_Z64_LOC 0x07064b50u
#define ZW_SIG_EOCD 0x06054b50u

#define ZW_FLAG_DESC 0x0008u            /* bit 3: CRC and sizes follow */
#define ZW_FLAG_UTF8 0x0800u            /* bit 11: UTF-8 name */
#define ZW_FLAG_DEFLATE_OPT 0x0006u     /* bits 1-2: deflate options */

/*
 * One record of the new archive, laid out (offsets, padding) before a byte
 * is written, so that the file's size is known in advance.
 */
struct zw_rec {
	const struct pt_zip_entry *e;   /* the original record, or NULL */
	const struct pt_zw_change *ch;  /* new contents, or NULL */
	const char *name;               /* the name written */
	uint32_t name_len;
	bool verbatim;                  /* copied header to descriptor */
	uint16_t pad;                   /* fresh header: FB padding bytes */
	uint64_t lho;           /* new local header offset */
	uint64_t end;           /* new end of the record */
	uint64_t csize;         /* stored bytes */
	uint64_t usize;         /* uncompressed bytes */
	uint32_t crc;           /* CRC-32 of the uncompressed bytes */
	uint16_t method;        /* PT_ZIP_STORED or PT_ZIP_DEFLATED */
	uint16_t flags;         /* general purpose flags */
	uint16_t mtime;         /* DOS time */
	uint16_t mdate;         /* DOS date */
	uint16_t made;          /* version made by */
	uint16_t needed;        /* version needed to extract (CD) */
	uint16_t iattr;         /* internal attributes, from the original */
	uint32_t eattr;         /* external attributes, from the original */
};

/* A record's place in the original file, for sorting by offset. */
struct zw_ord {
	uint64_t lho;           /* original local header offset */
	uint64_t idx;           /* central directory index */
};

/* One commit in progress. */
struct zw {
	const struct pt_zip *z;         /* index of the original (borrowed) */
	const char *tmp;                /* temporary file name, for messages */
	int in;                         /* the original, read-only */
	int out;                        /* the temporary file */
	uint8_t *hbuf;                  /* ZW_HBUF_SIZE bytes not yet written */
	size_t hlen;                    /* bytes used in hbuf */
	uint8_t *pbuf;                  /* ZW_PBUF_SIZE bytes of scratch */
	uint64_t off;                   /* output size, hbuf included */
	unsigned nwrites;               /* write syscalls so far */
	unsigned fail_at;               /* fault hook: fail this write */
	bool no_cfr;                    /* copy_file_range() unusable here */
	bool share;                     /* keep moved payloads' block offsets */
	uint32_t align;                 /* payload alignment */
	struct zw_rec *recs;            /* the new archive, in file order */
	size_t n;                       /* records */
	const size_t *cd_order;         /* directory order (NULL: file order) */
	uint64_t cd_off;                /* laid out: central directory */
	uint64_t cd_size;
	uint64_t size;                  /* laid out: the whole file */
	struct pt_replace *sealed;      /* pt_zip_stage_plan(): sealed here,
					 * not renamed */
	struct pt_error *err;
};

uint32_t pt_crc32(uint32_t crc, const void *p, size_t n)
{
	return libdeflate_crc32(crc, p, n);
}

/* Each write (@step "write") and copy ("copy") first passes here, so a
 * test can fail any one. */
static int zw_fault(struct zw *w, const char *step)
{
	int rc = pt_fault(step);

	if (rc)
		return pt_fail(w->err, rc, "commit: %s to %s: %s", step,
			       w->tmp, strerror(-rc));
	w->nwrites++;
	if (w->fail_at && w->nwrites == w->fail_at)
		return pt_fail(w->err, -EIO,
			       "commit: write to %s: injected fault (write %u)",
			       w->tmp, w->nwrites);
	return 0;
}

static int zw_pwrite(struct zw *w, const uint8_t *p, size_t n, uint64_t at)
{
	int rc = zw_fault(w, "write");

	if (rc)
		return rc;
	rc = pt_pwrite_full(w->out, p, n, at);
	if (rc)
		return pt_fail(w->err, rc, "commit: write to %s: %s", w->tmp,
			       strerror(-rc));
	return 0;
}

/* Grow the output by @n bytes, keeping every offset a valid off_t. */
static int zw_advance(struct zw *w, uint64_t n)
{
	uint64_t next;

	if (!pt_add_u64(w->off, n, &next) || next > (uint64_t)INT64_MAX)
		return pt_fail(w->err, -EFBIG,
			       "commit: %s would exceed the largest file size",
			       w->tmp);
	w->off = next;
	return 0;
}

static int zw_flush(struct zw *w)
{
	int rc;

	if (w->hlen == 0)
		return 0;
	rc = zw_pwrite(w, w->hbuf, w->hlen, w->off - w->hlen);
	w->hlen = 0;
	return rc;
}

/* Write @n bytes straight to the file (flushing buffered bytes first). */
static int zw_direct(struct zw *w, const uint8_t *p, size_t n)
{
	uint64_t at;
	int rc;

	rc = zw_flush(w);
	if (rc)
		return rc;
	at = w->off;
	rc = zw_advance(w, n);
	if (rc)
		return rc;
	return zw_pwrite(w, p, n, at);
}

/* Append @n bytes through the header buffer. */
static int zw_put(struct zw *w, const void *p, size_t n)
{
	int rc;

	if (n > ZW_HBUF_SIZE - w->hlen) {
		rc = zw_flush(w);
		if (rc)
			return rc;
		if (n > ZW_HBUF_SIZE)
			return zw_direct(w, p, n);
	}
	rc = zw_advance(w, n);
	if (rc)
		return rc;
	memcpy(w->hbuf + w->hlen, p, n);
	w->hlen += n;
	return 0;
}

/* Append @n copies of byte @c through the header buffer. */
static int zw_fill(struct zw *w, uint8_t c, size_t n)
{
	int rc;

	while (n > 0) {
		size_t k;

		if (w->hlen == ZW_HBUF_SIZE) {
			rc = zw_flush(w);
			if (rc)
				return rc;
		}
		k = ZW_HBUF_SIZE - w->hlen;
		if (k > n)
			k = n;
		rc = zw_advance(w, k);
		if (rc)
			return rc;
		memset(w->hbuf + w->hlen, c, k);
		w->hlen += k;
		n -= k;
	}
	return 0;
}

/* The slow path of zw_copy(): bounce through pbuf. */
static int zw_copy_rw(struct zw *w, uint64_t src, uint64_t len, uint64_t dst)
{
	while (len > 0) {
		size_t k = len > ZW_PBUF_SIZE ? ZW_PBUF_SIZE : (size_t)len;
		int rc = pt_pread_full(w->in, w->pbuf, k, src);

		if (rc)
			return pt_fail(w->err, rc,
				       "commit: read of the original at 0x%llx: %s",
				       (unsigned long long)src,
				       rc == -EIO ? "file shrank"
						  : strerror(-rc));
		rc = zw_pwrite(w, w->pbuf, k, dst);
		if (rc)
			return rc;
		src += k;
		dst += k;
		len -= k;
	}
	return 0;
}

/* Copy @len bytes at @src of the original to the end of the output. */
static int zw_copy(struct zw *w, uint64_t src, uint64_t len)
{
	uint64_t dst;
	int rc;

	rc = zw_flush(w);
	if (rc)
		return rc;
	dst = w->off;
	rc = zw_advance(w, len);
	if (rc)
		return rc;
	while (len > 0 && !w->no_cfr) {
		uint64_t k64 = len > ZW_COPY_CHUNK ? ZW_COPY_CHUNK : len;
		size_t k;
		off_t io = (off_t)src;
		off_t oo = (off_t)dst;
		ssize_t got;

		/* up to the source's next block boundary alone: a remap
		 * (reflink) needs both ranges to start on a block, and the
		 * kernel copies the whole range when it cannot remap it */
		if (src % ZW_BLOCK && k64 > ZW_BLOCK - src % ZW_BLOCK)
			k64 = ZW_BLOCK - src % ZW_BLOCK;
		k = (size_t)k64;
		rc = zw_fault(w, "copy");
		if (rc)
			return rc;
		got = copy_file_range(w->in, &io, w->out, &oo, k, 0);
		if (got < 0) {
			int e = errno;

			if (e == EINTR)
				continue;
			if (e == EXDEV || e == ENOSYS || e == EINVAL ||
			    e == EOPNOTSUPP || e == ETXTBSY || e == EBADF) {
				w->no_cfr = true;
				break;
			}
			return pt_fail(w->err, -e, "commit: copy to %s: %s",
				       w->tmp, strerror(e));
		}
		if (got == 0)
			return pt_fail(w->err, -EIO,
				       "commit: read of the original at 0x%llx: file shrank",
				       (unsigned long long)src);
		src += (uint64_t)got;
		dst += (uint64_t)got;
		len -= (uint64_t)got;
	}
	return zw_copy_rw(w, src, len, dst);
}

static bool zw_size64(const struct zw_rec *r)
{
	return r->usize >= ZW_LIMIT32 || r->csize >= ZW_LIMIT32;
}

/* Does the record carry a ZIP64 extra (docs/FORMATS.md, "ZIP64")? */
static bool zw_zip64(const struct zw_rec *r)
{
	return zw_size64(r) || r->lho >= ZW_LIMIT32;
}

/*
 * Stream a change's new contents to the output, computing the CRC-32.
 */
static int zw_stream(struct zw *w, struct zw_rec *r)
{
	const struct pt_zw_change *ch = r->ch;
	uint64_t done = 0;
	int rc;

	r->crc = 0;
	while (done < ch->size) {
		uint64_t left = ch->size - done;
		size_t k = left > ZW_PBUF_SIZE ? ZW_PBUF_SIZE : (size_t)left;

		rc = ch->read(ch->ctx, w->pbuf, k, done);
		if (rc)
			return pt_fail(w->err, rc < 0 ? rc : -EIO,
				       "commit: new contents of '%s' at offset %llu: %s",
				       r->name, (unsigned long long)done,
				       strerror(rc < 0 ? -rc : EIO));
		r->crc = pt_crc32(r->crc, w->pbuf, k);
		rc = zw_direct(w, w->pbuf, k);
		if (rc)
			return rc;
		done += k;
	}
	return 0;
}

/*
 * Write one record with a fresh, torch-style local header at the offset
 * laid out for it (docs/FORMATS.md, "Record layout"): zero CRC and sizes,
 * bit 3, the ZIP64 extra as miniz writes it, the FB padding block, the
 * payload (new contents, or the original stored/deflated bytes) and a data
 * descriptor when non-empty.
 */
static int zw_fresh(struct zw *w, struct zw_rec *r)
{
	uint8_t h[30];
	uint8_t x[4 + 24 + 4];
	uint8_t d[24];
	size_t xl = 0;
	size_t dl;
	bool size64 = zw_size64(r);
	bool off64 = r->lho >= ZW_LIMIT32;
	int rc;

	if (size64 || off64) {
		uint16_t n = (uint16_t)((size64 ? 16 : 0) + (off64 ? 8 : 0));

		pt_put16(x, 0x0001);
		pt_put16(x + 2, n);
		xl = 4;
		if (size64) {
			/* miniz: compressed size is not known yet, so 0 */
			pt_put64(x + xl, r->usize);
			pt_put64(x + xl + 8, 0);
			xl += 16;
		}
		if (off64) {
			pt_put64(x + xl, r->lho);
			xl += 8;
		}
	}
	pt_put16(x + xl, 0x4246);
	pt_put16(x + xl + 2, r->pad);
	xl += 4;

	pt_put32(h, ZW_SIG_LOCAL);
	pt_put16(h + 4, r->method == PT_ZIP_DEFLATED ? 20 : 0);
	pt_put16(h + 6, r->flags);
	pt_put16(h + 8, r->method);
	pt_put16(h + 10, r->mtime);
	pt_put16(h + 12, r->mdate);
	memset(h + 14, 0, 12);
	pt_put16(h + 26, (uint16_t)r->name_len);
	pt_put16(h + 28, (uint16_t)(xl + r->pad));
	rc = zw_put(w, h, sizeof(h));
	if (!rc)
		rc = zw_put(w, r->name, r->name_len);
	if (!rc)
		rc = zw_put(w, x, xl);
	if (!rc)
		rc = zw_fill(w, 'Z', r->pad);
	if (rc)
		return rc;

	if (r->ch)
		rc = zw_stream(w, r);
	else if (r->e)
		rc = zw_copy(w, r->e->data_off, r->e->csize);
	if (rc || r->csize == 0)
		return rc;

	pt_put32(d, ZW_SIG_DESC);
	pt_put32(d + 4, r->crc);
	if (size64 || off64) {
		pt_put64(d + 8, r->csize);
		pt_put64(d + 16, r->usize);
		dl = 24;
	} else {
		pt_put32(d + 8, (uint32_t)r->csize);
		pt_put32(d + 12, (uint32_t)r->usize);
		dl = 16;
	}
	return zw_put(w, d, dl);
}

/* The ZIP64 extra of a central directory entry: 0, or 4 + its values. */
static uint32_t zw_cd_extra_len(const struct zw_rec *r)
{
	if (!zw_zip64(r))
		return 0;
	return 4u + (zw_size64(r) ? 16u : 0u) +
	       (r->lho >= ZW_LIMIT32 ? 8u : 0u);
}

/* One central directory entry (docs/FORMATS.md, "ZIP64"): the ZIP64
 * extra is the only extra. */
static int zw_cd_entry(struct zw *w, const struct zw_rec *r)
{
	uint8_t h[46];
	uint8_t x[4 + 24];
	size_t xl = 0;
	bool size64 = zw_size64(r);
	bool off64 = r->lho >= ZW_LIMIT32;
	uint16_t needed = r->needed;
	int rc;

	if (size64 || off64) {
		pt_put16(x, 0x0001);
		pt_put16(x + 2,
			 (uint16_t)((size64 ? 16 : 0) + (off64 ? 8 : 0)));
		xl = 4;
		if (size64) {
			pt_put64(x + xl, r->usize);
			pt_put64(x + xl + 8, r->csize);
			xl += 16;
		}
		if (off64) {
			pt_put64(x + xl, r->lho);
			xl += 8;
		}
		/* torch writes 0 here and must stay byte-identical; other
		 * writers declare what they need, and ZIP64 needs 4.5 */
		if (needed != 0 && (needed & 0xff) < 45)
			needed = (uint16_t)((needed & 0xff00) | 45);
	}
	pt_put32(h, ZW_SIG_CD);
	pt_put16(h + 4, r->made);
	pt_put16(h + 6, needed);
	pt_put16(h + 8, r->flags);
	pt_put16(h + 10, r->method);
	pt_put16(h + 12, r->mtime);
	pt_put16(h + 14, r->mdate);
	pt_put32(h + 16, r->crc);
	pt_put32(h + 20, size64 ? (uint32_t)ZW_LIMIT32 : (uint32_t)r->csize);
	pt_put32(h + 24, size64 ? (uint32_t)ZW_LIMIT32 : (uint32_t)r->usize);
	pt_put16(h + 28, (uint16_t)r->name_len);
	pt_put16(h + 30, (uint16_t)xl);
	pt_put16(h + 32, 0);            /* comment length */
	pt_put16(h + 34, 0);            /* disk */
	pt_put16(h + 36, r->iattr);
	pt_put32(h + 38, r->eattr);
	pt_put32(h + 42, off64 ? (uint32_t)ZW_LIMIT32 : (uint32_t)r->lho);
	rc = zw_put(w, h, sizeof(h));
	if (!rc)
		rc = zw_put(w, r->name, r->name_len);
	if (!rc)
		rc = zw_put(w, x, xl);
	return rc;
}

#define ZW_END_SIZE (56u + 20u + 22u)

/* ZIP64 EOCD + locator + classic EOCD, as torch writes them
 * (docs/FORMATS.md, "ZIP64"). */
static int zw_end(struct zw *w, uint64_t n, uint64_t cd_off, uint64_t cd_size)
{
	uint8_t b[ZW_END_SIZE];
	uint64_t z64_off = w->off;

	pt_put32(b, ZW_SIG_Z64_EOCD);
	pt_put64(b + 4, 44);
	pt_put16(b + 12, 0x031E);
	pt_put16(b + 14, 0x002D);
	pt_put32(b + 16, 0);
	pt_put32(b + 20, 0);
	pt_put64(b + 24, n);
	pt_put64(b + 32, n);
	pt_put64(b + 40, cd_size);
	pt_put64(b + 48, cd_off);

	pt_put32(b + 56, ZW_SIG_Z64_LOC);
	pt_put32(b + 60, 0);
	pt_put64(b + 64, z64_off);
	pt_put32(b + 72, 1);

	pt_put32(b + 76, ZW_SIG_EOCD);
	pt_put16(b + 80, 0);
	pt_put16(b + 82, 0);
	pt_put16(b + 84, n > 0xFFFF ? 0xFFFF : (uint16_t)n);
	pt_put16(b + 86, n > 0xFFFF ? 0xFFFF : (uint16_t)n);
	pt_put32(b + 88, cd_size >= ZW_LIMIT32 ? (uint32_t)ZW_LIMIT32
					      : (uint32_t)cd_size);
	pt_put32(b + 92, cd_off >= ZW_LIMIT32 ? (uint32_t)ZW_LIMIT32
					     : (uint32_t)cd_off);
	pt_put16(b + 96, 0);
	return zw_put(w, b, sizeof(b));
}

/*
 * Keep the internal and external attributes of the original central
 * directory (file modes of Info-ZIP and Python archives).  The index does
 * not carry them, so walk the directory again; best effort: any surprise
 * leaves the remaining attributes 0, which is what torch writes anyway.
 * @iattr and @eattr are indexed by central directory index.
 */
static void zw_read_attrs(struct zw *w, uint16_t *iattr, uint32_t *eattr,
			  uint64_t n)
{
	const struct pt_zip_info *info = pt_zip_info(w->z);
	uint64_t pos = info->cd_off;
	uint64_t end;
	uint64_t boff = 0;
	uint64_t blen = 0;
	uint64_t i;

	if (!pt_add_u64(info->cd_off, info->cd_size, &end))
		return;
	for (i = 0; i < n; i++) {
		const struct pt_zip_entry *e = pt_zip_entry_at(w->z, i);
		const uint8_t *h;

		if (end - pos < 46)
			return;
		if (blen < 46 || pos < boff || pos - boff > blen - 46) {
			uint64_t left = end - pos;
			size_t k = left > ZW_PBUF_SIZE ? ZW_PBUF_SIZE
						       : (size_t)left;

			if (pt_pread_full(w->in, w->pbuf, k, pos) != 0)
				return;
			boff = pos;
			blen = k;
		}
		h = w->pbuf + (size_t)(pos - boff);
		if (pt_le32(h) != ZW_SIG_CD || pt_le16(h + 28) != e->name_len)
			return;
		iattr[i] = pt_le16(h + 36);
		eattr[i] = pt_le32(h + 38);
		pos += 46u + pt_le16(h + 28) + pt_le16(h + 30) +
		       pt_le16(h + 32);
		if (pos > end)
			return;
	}
}

/* Give each original record of the new archive its attributes. */
static int zw_attrs(struct zw *w)
{
	uint64_t count = pt_zip_info(w->z)->n_entries;
	uint16_t *iattr = calloc(count ? (size_t)count : 1, sizeof(*iattr));
	uint32_t *eattr = calloc(count ? (size_t)count : 1, sizeof(*eattr));
	size_t i;

	if (!iattr || !eattr) {
		free(iattr);
		free(eattr);
		return pt_fail(w->err, -ENOMEM, "commit: out of memory");
	}
	zw_read_attrs(w, iattr, eattr, count);
	for (i = 0; i < w->n; i++) {
		struct zw_rec *r = &w->recs[i];

		if (r->e) {
			r->iattr = iattr[r->e->index];
			r->eattr = eattr[r->e->index];
		}
	}
	free(iattr);
	free(eattr);
	return 0;
}

/* Parse an ASCII decimal alignment; 0 when it is not a usable one. */
static uint32_t zw_parse_align(const uint8_t *s, size_t n)
{
	uint32_t v = 0;
	size_t i;

	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' ||
			 s[n - 1] == ' '))
		n--;
	if (n == 0 || n > 5)
		return 0;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		v = v * 10 + (uint32_t)(s[i] - '0');
	}
	return v >= 1 && v <= ZW_ALIGN_MAX ? v : 0;
}

/* The record of the new archive named "<prefix>/<rel>", or NULL. */
static const struct zw_rec *zw_find_rel(const struct zw *w, const char *rel)
{
	const char *prefix = pt_zip_info(w->z)->prefix;
	size_t pl = strlen(prefix);
	size_t rl = strlen(rel);
	size_t i;

	for (i = 0; i < w->n; i++) {
		const struct zw_rec *r = &w->recs[i];
		const char *name = r->name;

		if (pl > 0) {
			if (r->name_len != pl + 1 + rl ||
			    memcmp(name, prefix, pl) != 0 || name[pl] != '/')
				continue;
			name += pl + 1;
		} else if (r->name_len != rl) {
			continue;
		}
		if (memcmp(name, rel, rl) == 0)
			return r;
	}
	return NULL;
}

/*
 * The payload alignment of the new archive: the value of its
 * "<prefix>/.storage_alignment" (new contents or the original's), else 64
 * (docs/FORMATS.md, "Records and their order").
 */
static uint32_t zw_alignment(const struct zw *w)
{
	const struct zw_rec *r = zw_find_rel(w, ".storage_alignment");
	struct pt_error e;
	uint8_t s[16];
	uint32_t v;
	size_t n;

	if (!r || r->usize == 0 || r->usize > sizeof(s))
		return ZW_ALIGN_DEFAULT;
	n = (size_t)r->usize;
	if (r->ch) {
		if (r->ch->read(r->ch->ctx, s, n, 0) != 0)
			return ZW_ALIGN_DEFAULT;
	} else {
		pt_error_clear(&e);
		if (r->method != PT_ZIP_STORED ||
		    pt_source_read(pt_zip_source(w->z), s, n, r->e->data_off,
				   &e) != 0)
			return ZW_ALIGN_DEFAULT;
	}
	v = zw_parse_align(s, n);
	return v ? v : ZW_ALIGN_DEFAULT;
}

static uint32_t zw_gcd(uint32_t a, uint32_t b)
{
	while (b) {
		uint32_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/*
 * The modulus a moved record's payload keeps its offset by, so that its
 * blocks can be shared and it stays aligned: lcm(4096, alignment), or 0
 * when that does not fit the FB block (an odd alignment) or this record
 * gains nothing (new contents, or less than a block).
 */
static uint64_t zw_share_mod(const struct zw *w, const struct zw_rec *r)
{
	uint64_t mod = (uint64_t)ZW_BLOCK / zw_gcd(ZW_BLOCK, w->align) *
		       w->align;

	if (!w->share || !r->e || r->ch || r->csize < ZW_BLOCK ||
	    mod > ZW_ALIGN_MAX || r->e->data_off % w->align != 0)
		return 0;
	return mod;
}

/* *@acc += @n, staying a valid off_t; false if it would not. */
static bool zw_grow(uint64_t *acc, uint64_t n)
{
	return pt_add_u64(*acc, n, acc) && *acc <= (uint64_t)INT64_MAX;
}

/* Lay out record @r at offset @off: header, padding, payload, descriptor. */
static bool zw_lay_record(const struct zw *w, struct zw_rec *r, uint64_t off)
{
	const struct pt_zip_entry *e = r->e;
	uint64_t mod = zw_share_mod(w, r);
	uint64_t want = 0;
	uint64_t end = off;

	r->lho = off;
	r->verbatim = e && !r->ch && r->name == e->name && off == e->lho &&
		      e->end >= e->lho;
	if (r->verbatim) {
		r->flags = e->flags;
		r->end = e->end;
		return true;
	}
	if (r->csize > 0)
		r->flags |= ZW_FLAG_DESC;
	/* header, name, the ZIP64 extra (as in the directory), FB's id */
	if (!zw_grow(&end, 30u + r->name_len + zw_cd_extra_len(r) + 4u))
		return false;
	if (mod)
		want = e->data_off % mod;
	else
		mod = w->align;
	/* (want - end) mod @mod, without going below zero */
	r->pad = (uint16_t)((want + mod - end % mod) % mod);
	if (!zw_grow(&end, r->pad) || !zw_grow(&end, r->csize))
		return false;
	if (r->csize > 0 && !zw_grow(&end, zw_zip64(r) ? 24 : 16))
		return false;
	r->end = end;
	return true;
}

/* Lay out the whole new archive: every record, the directory, the end. */
static int zw_layout(struct zw *w)
{
	uint64_t off = 0;
	size_t i;

	for (i = 0; i < w->n; i++) {
		if (!zw_lay_record(w, &w->recs[i], off))
			goto too_big;
		off = w->recs[i].end;
	}
	w->cd_off = off;
	for (i = 0; i < w->n; i++) {
		const struct zw_rec *r = &w->recs[i];

		if (!zw_grow(&off, 46u + r->name_len + zw_cd_extra_len(r)))
			goto too_big;
	}
	w->cd_size = off - w->cd_off;
	if (!zw_grow(&off, ZW_END_SIZE))
		goto too_big;
	w->size = off;
	return 0;
too_big:
	return pt_fail(w->err, -EFBIG,
		       "commit: the new archive would exceed the largest file size");
}

/*
 * The payload alignment, whether moved payloads keep their block offsets
 * (not when the archive has ".format_version": docs/FORMATS.md, "Computed
 * storage offsets"), and the layout.
 */
static int zw_prepare(struct zw *w, bool may_share)
{
	w->align = zw_alignment(w);
	w->share = may_share && !zw_find_rel(w, ".format_version");
	return zw_layout(w);
}

/* Is there room for the new file beside the original?  The margin covers
 * what a filesystem spends beyond the file's bytes: its last partial block,
 * its block map (4 bytes per 4 KiB block, 1/1024 of the size, in the worst
 * case of ext2-style indirect blocks; extents and B-trees need far less),
 * and the directory entry and inode (1 MiB is ample).  Filesystems that
 * report no blocks (some FUSE and network ones) are not checked. */
#define ZW_SPACE_SLACK (1ull << 20)

static int zw_space(const struct zw *w, const char *path)
{
	struct pt_error e;
	struct statvfs sv;
	char *real = NULL;
	char *slash;
	uint64_t avail;
	uint64_t need = w->size;
	int rc = 0;

	/* pt_replace_begin() reports a path that does not resolve */
	pt_error_clear(&e);
	if (pt_resolve_path(path, &real, &e) != 0)
		return 0;
	slash = strrchr(real, '/');
	if (slash == real)
		slash++;
	if (slash)
		*slash = '\0';
	if (statvfs(real, &sv) == 0 && sv.f_blocks > 0) {
		if (!pt_mul_u64(sv.f_bavail, sv.f_frsize, &avail))
			avail = UINT64_MAX;
		if (!pt_add_u64(need, w->size / 1024 + ZW_SPACE_SLACK, &need))
			need = UINT64_MAX;
		if (need > avail)
			rc = pt_fail(w->err, -ENOSPC,
				     "commit: needs %llu bytes in %s, %llu free: %s",
				     (unsigned long long)need, real,
				     (unsigned long long)avail, strerror(ENOSPC));
	}
	free(real);
	return rc;
}

static bool zw_ts_eq(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/*
 * Is the file at @path, open as @st, still the one @z indexed and @expect
 * describes?  -ESTALE if not.
 */
static int zw_check_same(const struct pt_zip *z, const char *path,
			 const struct stat *st,
			 const struct pt_zw_expect *expect,
			 struct pt_error *err)
{
	const struct pt_source *src = pt_zip_source(z);
	struct pt_error e;
	bool stale = false;

	if (!S_ISREG(st->st_mode))
		return pt_fail(err, -EINVAL, "commit: %s: not a regular file",
			       path);
	if (expect) {
		if (expect->dev && expect->dev != st->st_dev)
			stale = true;
		if (expect->ino && expect->ino != st->st_ino)
			stale = true;
		if (expect->size && expect->size != st->st_size)
			stale = true;
		if ((expect->mtime.tv_sec || expect->mtime.tv_nsec) &&
		    !zw_ts_eq(&expect->mtime, &st->st_mtim))
			stale = true;
	}
	if (src->size != (uint64_t)st->st_size)
		stale = true;
	pt_error_clear(&e);
	if (pt_source_check(src, PT_CHECK_NAME, &e) == -ESTALE)
		stale = true;
	if (stale)
		return pt_fail(err, -ESTALE,
			       "commit: %s: checkpoint changed on disk since it was opened",
			       path);
	return 0;
}

/* Write every record, the central directory and the end records, exactly
 * as laid out. */
static int zw_write_all(struct zw *w)
{
	size_t i;
	int rc;

	for (i = 0; i < w->n; i++) {
		struct zw_rec *r = &w->recs[i];

		if (r->verbatim)
			rc = zw_copy(w, r->e->lho, r->e->end - r->e->lho);
		else
			rc = zw_fresh(w, r);
		if (rc)
			return rc;
		if (w->off != r->end)
			return pt_fail(w->err, -EIO,
				       "commit: '%s' ends at %llu, laid out to end at %llu",
				       r->name, (unsigned long long)w->off,
				       (unsigned long long)r->end);
	}
	for (i = 0; i < w->n; i++) {
		rc = zw_cd_entry(w, &w->recs[w->cd_order ? w->cd_order[i]
							 : i]);
		if (rc)
			return rc;
	}
	rc = zw_end(w, w->n, w->cd_off, w->cd_size);
	if (!rc)
		rc = zw_flush(w);
	if (!rc && w->off != w->size)
		rc = pt_fail(w->err, -EIO,
			     "commit: wrote %llu bytes, laid out %llu",
			     (unsigned long long)w->off,
			     (unsigned long long)w->size);
	return rc;
}

/*
 * Write the laid-out archive through the safe-replace module (the real
 * file behind symlinks, a temporary beside it with its owner, mode and
 * xattrs) and rename it over the original.
 */
static int zw_commit(struct zw *w, const char *path,
		     const struct pt_zw_expect *expect,
		     const struct pt_zw_faults *faults)
{
	struct pt_replace r;
	struct pt_replace_expect rex;
	struct stat st;
	struct pt_error *err = w->err;
	size_t i;
	int rc;
	int e;

	memset(&rex, 0, sizeof(rex));
	if (expect) {
		rex.dev = expect->dev;
		rex.ino = expect->ino;
		rex.size = expect->size;
		rex.mtime = expect->mtime;
	}
	w->fail_at = faults ? faults->fail_write_at : 0;
	rc = pt_replace_begin(&r, path, &rex, err);
	if (rc) {
		pt_error_prefix(err, "commit");
		return rc;
	}
	w->in = open(r.real, O_RDONLY | O_CLOEXEC);
	if (w->in < 0 || fstat(w->in, &st) != 0) {
		e = errno;
		rc = pt_fail(err, -e, "commit: open %s: %s", r.real,
			     strerror(e));
		goto fail;
	}
	/* pt_replace_begin() holds the writers' lock on the original */
	rc = zw_check_same(w->z, r.real, &st, expect, err);
	if (rc)
		goto fail;
	w->hbuf = malloc(ZW_HBUF_SIZE);
	w->pbuf = malloc(ZW_PBUF_SIZE);
	if (!w->hbuf || !w->pbuf) {
		rc = pt_fail(err, -ENOMEM, "commit: out of memory");
		goto fail;
	}
	rc = zw_attrs(w);
	if (rc)
		goto fail;
	w->out = r.fd;
	w->tmp = r.tmp;
	rc = zw_write_all(w);
	if (rc)
		goto fail;
	if (faults && faults->fail_rename) {
		rc = pt_fail(err, -EIO, "commit: rename %s to %s: injected fault",
			     r.tmp, r.real);
		goto fail;
	}
	rc = w->sealed ? pt_replace_seal(&r, err) : pt_replace_commit(&r, err);
	if (rc) {
		pt_error_prefix(err, "commit");
		return rc;
	}
	if (w->sealed)
		*w->sealed = r;
	for (i = 0; i < w->n; i++)
		if (w->recs[i].ch && w->recs[i].ch->crc_out)
			*w->recs[i].ch->crc_out = w->recs[i].crc;
	return 0;
fail:
	pt_replace_abort(&r);
	return rc;
}

/* Prepare, check the space, commit; frees what @w holds either way. */
static int zw_run(struct zw *w, const char *path, bool may_share,
		  const struct pt_zw_expect *expect,
		  const struct pt_zw_faults *faults)
{
	int rc = zw_prepare(w, may_share);

	if (!rc)
		rc = zw_space(w, path);
	if (!rc)
		rc = zw_commit(w, path, expect, faults);
	if (w->in >= 0)
		close(w->in);
	free(w->hbuf);
	free(w->pbuf);
	return rc;
}

static void zw_init(struct zw *w, const struct pt_zip *z, struct zw_rec *recs,
		    size_t n, struct pt_error *err)
{
	memset(w, 0, sizeof(*w));
	w->z = z;
	w->in = -1;
	w->out = -1;
	w->recs = recs;
	w->n = n;
	w->err = err;
}

/* ---- plans ---- */

/* Is @e a record of @z? */
static bool zw_is_entry(const struct pt_zip *z, const struct pt_zip_entry *e)
{
	return e && e->index < pt_zip_info(z)->n_entries &&
	       pt_zip_entry_at(z, e->index) == e;
}

/* Check new contents; @what names the record in the message. */
static int zw_check_change(const struct pt_zw_change *c, const char *what,
			   struct pt_error *err)
{
	if (c->size > (uint64_t)INT64_MAX || (c->size > 0 && !c->read))
		return pt_fail(err, -EINVAL, "commit: '%s': bad change",
			       what);
	return 0;
}

/* The record of the new archive that plan entry @p describes. */
static int zw_from_plan(const struct pt_zip *z, const struct pt_zw_rec *p,
			size_t i, struct zw_rec *r, struct pt_error *err)
{
	const struct pt_zip_entry *t = pt_zip_info(z)->n_entries
				       ? pt_zip_entry_at(z, 0) : NULL;
	const struct pt_zip_entry *e = p->entry;
	size_t len;

	if (e && !zw_is_entry(z, e))
		return pt_fail(err, -EINVAL,
			       "commit: plan record %zu: entry is not in this archive",
			       i);
	if (!e && !p->name)
		return pt_fail(err, -EINVAL,
			       "commit: plan record %zu: a new record needs a name",
			       i);
	r->name = e ? e->name : p->name;
	len = e ? e->name_len : 0;
	if (p->name) {
		len = strnlen(p->name, 65536);
		if (len == 0 || len > 65535)
			return pt_fail(err, -EINVAL,
				       "commit: plan record %zu: a name must have 1 to 65535 bytes",
				       i);
		/* the original's own name is no rename: may stay verbatim */
		if (!e || len != e->name_len ||
		    memcmp(p->name, e->name, len) != 0)
			r->name = p->name;
	}
	r->name_len = (uint32_t)len;
	r->e = e;
	r->ch = p->change;
	if (r->ch && r->ch->entry && r->ch->entry != e)
		return pt_fail(err, -EINVAL,
			       "commit: plan record %zu ('%s'): its change is for '%s'",
			       i, r->name, r->ch->entry->name);
	if (r->ch && zw_check_change(r->ch, r->name, err))
		return -EINVAL;
	if (!e)
		e = t;                  /* torch writes every record alike */
	r->mtime = e ? e->mtime : 0;
	r->mdate = e ? e->mdate : 0;
	r->made = e ? e->version_made : 0;
	r->needed = e ? e->version_needed : 0;
	r->flags = e ? (uint16_t)(e->flags & ZW_FLAG_UTF8) : ZW_FLAG_UTF8;
	if (r->ch || !r->e) {
		r->method = PT_ZIP_STORED;
		r->usize = r->ch ? r->ch->size : 0;
		r->csize = r->usize;
	} else {
		r->method = r->e->method;
		r->usize = r->e->usize;
		r->csize = r->e->csize;
		r->crc = r->e->crc32;
		if (r->method == PT_ZIP_DEFLATED)
			r->flags |= (uint16_t)(r->e->flags &
					       ZW_FLAG_DEFLATE_OPT);
	}
	return 0;
}

static int zw_name_cmp(const void *a, const void *b)
{
	const struct zw_rec *x = *(const struct zw_rec *const *)a;
	const struct zw_rec *y = *(const struct zw_rec *const *)b;

	return strcmp(x->name, y->name);
}

/* No name twice in the new archive (readers refuse such archives). */
static int zw_check_names(const struct zw_rec *recs, size_t n,
			  struct pt_error *err)
{
	const struct zw_rec **by = calloc(n ? n : 1, sizeof(*by));
	size_t i;
	int rc = 0;

	if (!by)
		return pt_fail(err, -ENOMEM, "commit: out of memory");
	for (i = 0; i < n; i++)
		by[i] = &recs[i];
	qsort(by, n, sizeof(*by), zw_name_cmp);
	for (i = 1; i < n && !rc; i++)
		if (strcmp(by[i - 1]->name, by[i]->name) == 0)
			rc = pt_fail(err, -EINVAL,
				     "commit: '%s' is twice in the plan",
				     by[i]->name);
	free(by);
	return rc;
}

/* The records of the new archive from @plan; *@out is malloc()ed. */
static int zw_plan_recs(const struct pt_zip *z, const struct pt_zw_rec *plan,
			size_t n, struct zw_rec **out, struct pt_error *err)
{
	struct zw_rec *recs = calloc(n ? n : 1, sizeof(*recs));
	size_t i;
	int rc = 0;

	*out = NULL;
	if (!recs)
		return pt_fail(err, -ENOMEM,
			       "commit: out of memory for %zu records", n);
	for (i = 0; i < n && !rc; i++)
		rc = zw_from_plan(z, &plan[i], i, &recs[i], err);
	if (!rc)
		rc = zw_check_names(recs, n, err);
	if (rc) {
		free(recs);
		return rc;
	}
	*out = recs;
	return 0;
}

int pt_zip_plan_size(const struct pt_zip *z, const struct pt_zw_rec *recs,
		     size_t n, uint64_t *size, struct pt_error *err)
{
	struct zw_rec *r;
	struct zw w;
	int rc;

	*size = 0;
	rc = zw_plan_recs(z, recs, n, &r, err);
	if (rc)
		return rc;
	zw_init(&w, z, r, n, err);
	rc = zw_prepare(&w, true);
	if (!rc)
		*size = w.size;
	free(r);
	return rc;
}

/* Write the archive of @recs at @path: renamed over it, or with @sealed
 * left sealed beside it (pt_zip_stage_plan()). */
static int plan_run(const char *path, const struct pt_zip *z,
		    const struct pt_zw_rec *recs, size_t n,
		    const struct pt_zw_expect *expect,
		    const struct pt_zw_faults *faults,
		    struct pt_replace *sealed, struct pt_error *err)
{
	struct zw_rec *r;
	struct zw w;
	int rc;

	rc = zw_plan_recs(z, recs, n, &r, err);
	if (rc)
		return rc;
	zw_init(&w, z, r, n, err);
	w.sealed = sealed;
	rc = zw_run(&w, path, true, expect, faults);
	free(r);
	return rc;
}

int pt_zip_write_plan(const char *path, const struct pt_zip *z,
		      const struct pt_zw_rec *recs, size_t n,
		      const struct pt_zw_expect *expect,
		      const struct pt_zw_faults *faults, struct pt_error *err)
{
	return plan_run(path, z, recs, n, expect, faults, NULL, err);
}

int pt_zip_stage_plan(const char *path, const struct pt_zip *z,
		      const struct pt_zw_rec *recs, size_t n,
		      struct pt_replace *sealed, struct pt_error *err)
{
	return plan_run(path, z, recs, n, NULL, NULL, sealed, err);
}

/* ---- pt_zip_rewrite(): every record kept, some with new contents ---- */

static int zw_ord_cmp(const void *a, const void *b)
{
	const struct zw_ord *x = a;
	const struct zw_ord *y = b;

	if (x->lho != y->lho)
		return x->lho < y->lho ? -1 : 1;
	if (x->idx != y->idx)
		return x->idx < y->idx ? -1 : 1;
	return 0;
}

/* Check @changes against @z; *@out[i] is the change for entry i or NULL. */
static int zw_map_changes(const struct pt_zip *z,
			  const struct pt_zw_change *changes, size_t n,
			  const struct pt_zw_change ***out,
			  struct pt_error *err)
{
	uint64_t count = pt_zip_info(z)->n_entries;
	const struct pt_zw_change **chg;
	size_t i;
	int rc = -EINVAL;

	*out = NULL;
	chg = NULL;
	if (count <= SIZE_MAX / sizeof(struct zw_rec))
		chg = calloc(count ? (size_t)count : 1,
			     sizeof(const struct pt_zw_change *));
	if (!chg) {
		pt_fail(err, -ENOMEM, "commit: out of memory for %llu records",
			(unsigned long long)count);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		const struct pt_zw_change *c = &changes[i];
		const struct pt_zip_entry *e = c->entry;

		if (!zw_is_entry(z, e)) {
			pt_fail(err, rc,
				"commit: change %zu: entry is not in this archive",
				i);
			goto out_free;
		}
		if (chg[e->index]) {
			pt_fail(err, rc, "commit: '%s' changed twice", e->name);
			goto out_free;
		}
		if (zw_check_change(c, e->name, err))
			goto out_free;
		chg[e->index] = c;
	}
	*out = chg;
	return 0;
out_free:
	free(chg);
	return rc;
}

/*
 * The plan of a rewrite: every record in local-header order, each with its
 * change; @cd_order[i] is where central directory entry i went.
 */
static int zw_rewrite_recs(const struct pt_zip *z,
			   const struct pt_zw_change **chg,
			   struct zw_rec *recs, size_t *cd_order,
			   struct pt_error *err)
{
	size_t count = (size_t)pt_zip_info(z)->n_entries;
	struct zw_ord *ord = calloc(count ? count : 1, sizeof(*ord));
	size_t i;
	int rc = 0;

	if (!ord)
		return pt_fail(err, -ENOMEM, "commit: out of memory");
	for (i = 0; i < count; i++) {
		ord[i].lho = pt_zip_entry_at(z, i)->lho;
		ord[i].idx = i;
	}
	qsort(ord, count, sizeof(*ord), zw_ord_cmp);
	for (i = 0; i < count && !rc; i++) {
		struct pt_zw_rec p;

		p.entry = pt_zip_entry_at(z, ord[i].idx);
		p.name = NULL;
		p.change = chg[ord[i].idx];
		rc = zw_from_plan(z, &p, i, &recs[i], err);
		cd_order[ord[i].idx] = i;
	}
	free(ord);
	return rc;
}

int pt_zip_rewrite(const char *path, const struct pt_zip *z,
		   const struct pt_zw_change *changes, size_t n,
		   const struct pt_zw_expect *expect,
		   const struct pt_zw_faults *faults, struct pt_error *err)
{
	const struct pt_zw_change **chg = NULL;
	struct zw_rec *recs = NULL;
	size_t *cd_order = NULL;
	size_t count;
	struct zw w;
	int rc;

	rc = zw_map_changes(z, changes, n, &chg, err);
	if (rc)
		return rc;
	/* count fits a size_t: zw_map_changes() checked it */
	count = (size_t)pt_zip_info(z)->n_entries;
	recs = calloc(count ? count : 1, sizeof(*recs));
	cd_order = calloc(count ? count : 1, sizeof(*cd_order));
	if (!recs || !cd_order)
		rc = pt_fail(err, -ENOMEM, "commit: out of memory");
	if (!rc)
		rc = zw_rewrite_recs(z, chg, recs, cd_order, err);
	if (!rc) {
		/* torch's own layout: no padding to share blocks */
		zw_init(&w, z, recs, count, err);
		w.cd_order = cd_order;
		rc = zw_run(&w, path, false, expect, faults);
	}
	free(recs);
	free(cd_order);
	free(chg);
	return rc;
}
