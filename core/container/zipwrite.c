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
#include <unistd.h>

#include "base/rd.h"
#include "io/fd.h"

#define ZW_HBUF_SIZE (1u << 20)         /* buffered headers and directory */
#define ZW_PBUF_SIZE (4u << 20)         /* payload chunks, bounce buffer */
#define ZW_COPY_CHUNK (64ull << 20)     /* one copy_file_range() call */
#define ZW_LIMIT32 0xFFFFFFFFull        /* ZIP64 from here on (>=) */
#define ZW_ALIGN_DEFAULT 64u
#define ZW_ALIGN_MAX 32768u             /* keeps the FB block < 64 KiB */

#define ZW_SIG_LOCAL 0x04034b50u
#define ZW_SIG_DESC 0x08074b50u
#define ZW_SIG_CD 0x02014b50u
#define ZW_SIG_Z64_EOCD 0x06064b50u
#define ZW_SIG_Z64_LOC 0x07064b50u
#define ZW_SIG_EOCD 0x06054b50u

#define ZW_FLAG_DESC 0x0008u            /* bit 3: CRC and sizes follow */
#define ZW_FLAG_UTF8 0x0800u            /* bit 11: UTF-8 name */
#define ZW_FLAG_DEFLATE_OPT 0x0006u     /* bits 1-2: deflate options */

/* What the new central directory says about one record. */
struct zw_rec {
	uint64_t lho;           /* new local header offset */
	uint64_t csize;         /* stored bytes */
	uint64_t usize;         /* uncompressed bytes */
	uint32_t crc;           /* CRC-32 of the uncompressed bytes */
	uint16_t method;        /* PT_ZIP_STORED or PT_ZIP_DEFLATED */
	uint16_t flags;         /* general purpose flags */
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
	uint32_t align;                 /* payload alignment */
	struct pt_error *err;
};

uint32_t pt_crc32(uint32_t crc, const void *p, size_t n)
{
	return libdeflate_crc32(crc, p, n);
}

/* Each write first passes here, so a test can fail any one. */
static int zw_fault(struct zw *w)
{
	int rc = pt_fault("write");

	if (rc)
		return pt_fail(w->err, rc, "commit: write to %s: %s", w->tmp,
			       strerror(-rc));
	w->nwrites++;
	if (w->fail_at && w->nwrites == w->fail_at)
		return pt_fail(w->err, -EIO,
			       "commit: write to %s: injected fault (write %u)",
			       w->tmp, w->nwrites);
	return 0;
}

static int zw_pwrite(struct zw *w, const uint8_t *p, size_t n, uint64_t at)
{
	int rc = zw_fault(w);

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
		size_t k = (size_t)k64;
		off_t io = (off_t)src;
		off_t oo = (off_t)dst;
		ssize_t got;

		rc = zw_fault(w);
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

/*
 * Stream a change's new contents to the output, computing the CRC-32.
 */
static int zw_stream(struct zw *w, const struct pt_zip_entry *e,
		     const struct pt_zw_change *ch, uint32_t *crc)
{
	uint64_t done = 0;
	int rc;

	*crc = 0;
	while (done < ch->size) {
		uint64_t left = ch->size - done;
		size_t k = left > ZW_PBUF_SIZE ? ZW_PBUF_SIZE : (size_t)left;

		rc = ch->read(ch->ctx, w->pbuf, k, done);
		if (rc)
			return pt_fail(w->err, rc < 0 ? rc : -EIO,
				       "commit: new contents of '%s' at offset %llu: %s",
				       e->name, (unsigned long long)done,
				       strerror(rc < 0 ? -rc : EIO));
		*crc = pt_crc32(*crc, w->pbuf, k);
		rc = zw_direct(w, w->pbuf, k);
		if (rc)
			return rc;
		done += k;
	}
	return 0;
}

/*
 * Write one record with a fresh, torch-style local header at the current
 * offset (docs/FORMATS.md, "Record layout"): zero CRC and sizes, bit 3, the
 * ZIP64 extra as miniz writes it, the FB padding block, the payload (the
 * change, or the original stored/deflated bytes) and a data descriptor when
 * non-empty.
 */
static int zw_fresh(struct zw *w, const struct pt_zip_entry *e,
		    const struct pt_zw_change *ch, struct zw_rec *r)
{
	uint8_t h[30];
	uint8_t x[4 + 24 + 4];
	uint8_t d[24];
	uint64_t start;
	size_t xl = 0;
	size_t pad;
	size_t dl;
	bool size64;
	bool off64;
	int rc;

	r->lho = w->off;
	if (ch) {
		r->method = PT_ZIP_STORED;
		r->usize = ch->size;
		r->csize = ch->size;
	} else {
		r->method = e->method;
		r->usize = e->usize;
		r->csize = e->csize;
		r->crc = e->crc32;
	}
	r->flags = (uint16_t)((e->flags & ZW_FLAG_UTF8) |
			      (r->csize > 0 ? ZW_FLAG_DESC : 0));
	if (r->method == PT_ZIP_DEFLATED)
		r->flags |= (uint16_t)(e->flags & ZW_FLAG_DEFLATE_OPT);
	size64 = zw_size64(r);
	off64 = r->lho >= ZW_LIMIT32;

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
	/* r->lho <= INT64_MAX, so this cannot wrap */
	start = r->lho + 30 + e->name_len + xl + 4;
	pad = (size_t)((w->align - start % w->align) % w->align);
	pt_put16(x + xl, 0x4246);
	pt_put16(x + xl + 2, (uint16_t)pad);
	xl += 4;

	pt_put32(h, ZW_SIG_LOCAL);
	pt_put16(h + 4, r->method == PT_ZIP_DEFLATED ? 20 : 0);
	pt_put16(h + 6, r->flags);
	pt_put16(h + 8, r->method);
	pt_put16(h + 10, e->mtime);
	pt_put16(h + 12, e->mdate);
	memset(h + 14, 0, 12);
	pt_put16(h + 26, (uint16_t)e->name_len);
	pt_put16(h + 28, (uint16_t)(xl + pad));
	rc = zw_put(w, h, sizeof(h));
	if (!rc)
		rc = zw_put(w, e->name, e->name_len);
	if (!rc)
		rc = zw_put(w, x, xl);
	if (!rc)
		rc = zw_fill(w, 'Z', pad);
	if (rc)
		return rc;

	if (ch)
		rc = zw_stream(w, e, ch, &r->crc);
	else
		rc = zw_copy(w, e->data_off, e->csize);
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

/* Copy a record that neither changed nor moved, header to descriptor. */
static int zw_verbatim(struct zw *w, const struct pt_zip_entry *e,
		       struct zw_rec *r)
{
	r->lho = e->lho;
	r->method = e->method;
	r->usize = e->usize;
	r->csize = e->csize;
	r->crc = e->crc32;
	r->flags = e->flags;
	return zw_copy(w, e->lho, e->end - e->lho);
}

/* One central directory entry (docs/FORMATS.md, "ZIP64"): the ZIP64
 * extra is the only extra. */
static int zw_cd_entry(struct zw *w, const struct pt_zip_entry *e,
		       const struct zw_rec *r)
{
	uint8_t h[46];
	uint8_t x[4 + 24];
	size_t xl = 0;
	bool size64 = zw_size64(r);
	bool off64 = r->lho >= ZW_LIMIT32;
	uint16_t needed = e->version_needed;
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
	pt_put16(h + 4, e->version_made);
	pt_put16(h + 6, needed);
	pt_put16(h + 8, r->flags);
	pt_put16(h + 10, r->method);
	pt_put16(h + 12, e->mtime);
	pt_put16(h + 14, e->mdate);
	pt_put32(h + 16, r->crc);
	pt_put32(h + 20, size64 ? (uint32_t)ZW_LIMIT32 : (uint32_t)r->csize);
	pt_put32(h + 24, size64 ? (uint32_t)ZW_LIMIT32 : (uint32_t)r->usize);
	pt_put16(h + 28, (uint16_t)e->name_len);
	pt_put16(h + 30, (uint16_t)xl);
	pt_put16(h + 32, 0);            /* comment length */
	pt_put16(h + 34, 0);            /* disk */
	pt_put16(h + 36, r->iattr);
	pt_put32(h + 38, r->eattr);
	pt_put32(h + 42, off64 ? (uint32_t)ZW_LIMIT32 : (uint32_t)r->lho);
	rc = zw_put(w, h, sizeof(h));
	if (!rc)
		rc = zw_put(w, e->name, e->name_len);
	if (!rc)
		rc = zw_put(w, x, xl);
	return rc;
}

/* ZIP64 EOCD + locator + classic EOCD, as torch writes them
 * (docs/FORMATS.md, "ZIP64"). */
static int zw_end(struct zw *w, uint64_t n, uint64_t cd_off, uint64_t cd_size)
{
	uint8_t b[56 + 20 + 22];
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
 */
static void zw_read_attrs(struct zw *w, struct zw_rec *recs, uint64_t n)
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
		recs[i].iattr = pt_le16(h + 36);
		recs[i].eattr = pt_le32(h + 38);
		pos += 46u + pt_le16(h + 28) + pt_le16(h + 30) +
		       pt_le16(h + 32);
		if (pos > end)
			return;
	}
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

/*
 * The payload alignment: the value of "<prefix>/.storage_alignment" (the
 * new value if that record is being changed), else 64 (docs/FORMATS.md,
 * "Records and their order").
 */
static uint32_t zw_alignment(struct zw *w, const struct pt_zw_change **chg)
{
	const struct pt_zip_entry *e = pt_zip_find_rel(w->z,
						       ".storage_alignment");
	const struct pt_zw_change *ch;
	uint8_t s[16];
	uint32_t v;
	size_t n;

	if (!e)
		return ZW_ALIGN_DEFAULT;
	ch = chg[e->index];
	if (ch) {
		if (ch->size == 0 || ch->size > sizeof(s))
			return ZW_ALIGN_DEFAULT;
		n = (size_t)ch->size;
		if (ch->read(ch->ctx, s, n, 0) != 0)
			return ZW_ALIGN_DEFAULT;
	} else {
		if (e->method != PT_ZIP_STORED || e->usize == 0 ||
		    e->usize > sizeof(s))
			return ZW_ALIGN_DEFAULT;
		n = (size_t)e->usize;
		if (pt_pread_full(w->in, s, n, e->data_off) != 0)
			return ZW_ALIGN_DEFAULT;
	}
	v = zw_parse_align(s, n);
	return v ? v : ZW_ALIGN_DEFAULT;
}

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

		if (!e || e->index >= count ||
		    pt_zip_entry_at(z, e->index) != e) {
			pt_fail(err, rc,
				"commit: change %zu: entry is not in this archive",
				i);
			goto out_free;
		}
		if (chg[e->index]) {
			pt_fail(err, rc, "commit: '%s' changed twice", e->name);
			goto out_free;
		}
		if (c->size > (uint64_t)INT64_MAX ||
		    (c->size > 0 && !c->read)) {
			pt_fail(err, rc, "commit: '%s': bad change", e->name);
			goto out_free;
		}
		chg[e->index] = c;
	}
	*out = chg;
	return 0;
out_free:
	free(chg);
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

/* Write every record, the central directory and the end records. */
static int zw_write_all(struct zw *w, const struct pt_zw_change **chg,
			struct zw_rec *recs, struct zw_ord *ord, uint64_t n)
{
	uint64_t cd_off;
	uint64_t i;
	int rc;

	for (i = 0; i < n; i++) {
		uint64_t idx = ord[i].idx;
		const struct pt_zip_entry *e = pt_zip_entry_at(w->z, idx);

		if (!chg[idx] && w->off == e->lho && e->end >= e->lho)
			rc = zw_verbatim(w, e, &recs[idx]);
		else
			rc = zw_fresh(w, e, chg[idx], &recs[idx]);
		if (rc)
			return rc;
	}
	cd_off = w->off;
	for (i = 0; i < n; i++) {
		rc = zw_cd_entry(w, pt_zip_entry_at(w->z, i), &recs[i]);
		if (rc)
			return rc;
	}
	rc = zw_end(w, n, cd_off, w->off - cd_off);
	if (rc)
		return rc;
	return zw_flush(w);
}

int pt_zip_rewrite(const char *path, const struct pt_zip *z,
		   const struct pt_zw_change *changes, size_t n,
		   const struct pt_zw_expect *expect,
		   const struct pt_zw_faults *faults, struct pt_error *err)
{
	struct zw w;
	struct pt_replace r;
	struct pt_replace_expect rex;
	const struct pt_zw_change **chg = NULL;
	struct zw_rec *recs = NULL;
	struct zw_ord *ord = NULL;
	uint64_t count = pt_zip_info(z)->n_entries;
	uint64_t i;
	struct stat st;
	bool begun = false;
	int rc;
	int e;

	memset(&w, 0, sizeof(w));
	w.z = z;
	w.in = -1;
	w.out = -1;
	w.err = err;
	w.fail_at = faults ? faults->fail_write_at : 0;

	rc = zw_map_changes(z, changes, n, &chg, err);
	if (rc)
		goto out;
	/* the safe-replace module: the real file behind symlinks, a
	 * temporary beside it with its owner, mode and xattrs */
	memset(&rex, 0, sizeof(rex));
	if (expect) {
		rex.dev = expect->dev;
		rex.ino = expect->ino;
		rex.size = expect->size;
		rex.mtime = expect->mtime;
	}
	rc = pt_replace_begin(&r, path, &rex, err);
	if (rc) {
		pt_error_prefix(err, "commit");
		goto out;
	}
	begun = true;
	w.in = open(r.real, O_RDONLY | O_CLOEXEC);
	if (w.in < 0 || fstat(w.in, &st) != 0) {
		e = errno;
		rc = pt_fail(err, -e, "commit: open %s: %s", r.real, strerror(e));
		goto out;
	}
	/* pt_replace_begin() holds the writers' lock on the original */
	rc = zw_check_same(z, r.real, &st, expect, err);
	if (rc)
		goto out;

	/* count fits a size_t: zw_map_changes() checked it */
	recs = calloc(count ? (size_t)count : 1, sizeof(*recs));
	ord = calloc(count ? (size_t)count : 1, sizeof(*ord));
	w.hbuf = malloc(ZW_HBUF_SIZE);
	w.pbuf = malloc(ZW_PBUF_SIZE);
	if (!recs || !ord || !w.hbuf || !w.pbuf) {
		rc = pt_fail(err, -ENOMEM, "commit: out of memory");
		goto out;
	}
	for (i = 0; i < count; i++) {
		ord[i].lho = pt_zip_entry_at(z, i)->lho;
		ord[i].idx = i;
	}
	qsort(ord, (size_t)count, sizeof(*ord), zw_ord_cmp);
	zw_read_attrs(&w, recs, count);
	w.align = zw_alignment(&w, chg);

	w.out = r.fd;
	w.tmp = r.tmp;
	rc = zw_write_all(&w, chg, recs, ord, count);
	if (rc)
		goto out;
	if (faults && faults->fail_rename) {
		rc = pt_fail(err, -EIO, "commit: rename %s to %s: injected fault",
			     r.tmp, r.real);
		goto out;
	}
	begun = false;
	rc = pt_replace_commit(&r, err);
	if (rc) {
		pt_error_prefix(err, "commit");
		goto out;
	}
	for (i = 0; i < n; i++)
		if (changes[i].crc_out)
			*changes[i].crc_out = recs[changes[i].entry->index].crc;
out:
	if (begun)
		pt_replace_abort(&r);
	if (w.in >= 0)
		close(w.in);
	free(w.hbuf);
	free(w.pbuf);
	free(recs);
	free(ord);
	free(chg);
	return rc;
}
