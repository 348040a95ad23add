/* SPDX-License-Identifier: MIT */
/*
 * zip.c -- read-only index of a ZIP archive (APPNOTE.TXT 6.3.x, 4.3).
 *
 * pt_zip_open() finds the end of central directory record (§4.3.16) by
 * scanning back over at most a 64 KiB comment, follows the ZIP64 locator
 * (§4.3.15) to the ZIP64 end record (§4.3.14) when there is one, reads the
 * whole central directory (§4.3.12) into one buffer and walks it with the
 * bounds-checked cursor of rd.h.  Then it reads every local header
 * (§4.3.7), checks it against its central-directory entry, locates the
 * optional data descriptor (§4.3.9) and rejects records that overlap one
 * another or the central directory.  Everything later (lookups, reads) runs
 * on data validated here.  docs/FORMATS.md, "The ZIP container" describes
 * how torch writes these archives.
 *
 * The file is read with pread() through struct pt_source, never mapped.
 */
#include "container/zip.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>

#include "base/buf.h"
#include "base/hash.h"
#include "base/rd.h"


/* Signatures (APPNOTE §4.3.7, §4.3.9, §4.3.12, §4.3.14-§4.3.16). */
#define ZIP_SIG_LOCAL 0x04034b50u
#define ZIP_SIG_CENTRAL 0x02014b50u
#define ZIP_SIG_DESCRIPTOR 0x08074b50u
#define ZIP_SIG_EOCD 0x06054b50u
#define ZIP_SIG_Z64_EOCD 0x06064b50u
#define ZIP_SIG_Z64_LOCATOR 0x07064b50u

/* Fixed record sizes. */
#define ZIP_LOCAL_LEN 30
#define ZIP_CENTRAL_LEN 46
#define ZIP_EOCD_LEN 22
#define ZIP_Z64_EOCD_LEN 56
#define ZIP_Z64_LOCATOR_LEN 20
#define ZIP_MAX_COMMENT 65535
/* Largest central-directory entry: header + three 16-bit lengths. */
#define ZIP_CENTRAL_MAX (ZIP_CENTRAL_LEN + 3 * 65535)

#define ZIP_EXTRA_ZIP64 0x0001
#define ZIP_FLAG_ENCRYPTED 0x0001
#define ZIP_FLAG_DESCRIPTOR 0x0008

#define ZIP_U16_SENTINEL 0xffffu
#define ZIP_U32_SENTINEL 0xffffffffu

/* Room for a quoted name in a message (the message itself is 512 bytes). */
#define ZIP_QUOTE_MAX 160

/* One entry plus what only this file needs. */
struct pt_zip_ent {
	struct pt_zip_entry e;          /* what callers see (88 bytes) */
	uint32_t hash;                  /* of e.name (pt_hash_name) */
	bool unchecked;                 /* local header not read yet (see
					 * zip_predict_local); pt_zip.lock */
};

struct pt_zip {
	const struct pt_source *src;    /* the archive (borrowed) */
	struct pt_limits lim;           /* caps, copied at open */
	struct pt_zip_info info;        /* summary; info.prefix = prefix */
	uint64_t end_start;             /* first byte of the end records */
	struct pt_zip_ent *ents;        /* info.n_entries, in CD order */
	uint32_t *slots;                /* by name: index + 1 (0 empty),
					 * open addressing, nslots a power of
					 * two over twice the entries: sized
					 * once, never rehashed */
	size_t nslots;
	char *names;                    /* NUL-terminated names, back to back */
	char *prefix;                   /* NUL-terminated archive prefix */
	uint8_t **inflated;             /* NULL until an entry is inflated,
					 * then n_entries slots: entry i's
					 * usize bytes or NULL; pt_zip.lock
					 * guards it (most archives are
					 * stored: no slot per entry) */
	pthread_mutex_t lock;           /* guards inflated, ents[i].unchecked */
	uint8_t *win;                   /* read window, during open only */
	uint64_t win_off;               /* file offset of win[0] */
	size_t win_len;                 /* valid bytes in win */
	bool lock_ok;                   /* lock was initialised */
};

struct zip_quote {
	char s[ZIP_QUOTE_MAX + 8];
};

/*
 * Make an untrusted name safe for a one-line message: control bytes, quote
 * and backslash become \xNN, and long names are cut with "...".
 */
static const char *zip_quote(struct zip_quote *q, const char *name, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	size_t i;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (o + 4 > ZIP_QUOTE_MAX) {
			memcpy(q->s + o, "...", 3);
			o += 3;
			break;
		}
		if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
			q->s[o++] = '\\';
			q->s[o++] = 'x';
			q->s[o++] = hex[c >> 4];
			q->s[o++] = hex[c & 15];
		} else {
			q->s[o++] = (char)c;
		}
	}
	q->s[o] = '\0';
	return q->s;
}

static unsigned long long ull(uint64_t v)
{
	return (unsigned long long)v;
}

/* The private entry behind @e, or NULL when @e is not one of @z's. */
static struct pt_zip_ent *zip_own(const struct pt_zip *z,
				  const struct pt_zip_entry *e)
{
	struct pt_zip_ent *ze;

	if (!z || !e || e->index >= z->info.n_entries)
		return NULL;
	ze = &z->ents[e->index];
	if (&ze->e != e)
		return NULL;
	return ze;
}

/*
 * Parse the ZIP64 end of central directory record that the locator at
 * @loc_off points to (APPNOTE §4.3.14-§4.3.15).
 */
static int zip_read_z64_end(struct pt_zip *z, const uint8_t *loc,
			    uint64_t loc_off, struct pt_error *err)
{
	uint8_t rec[ZIP_Z64_EOCD_LEN];
	uint64_t off = pt_le64(loc + 8);
	uint64_t recsize;
	uint32_t sig;
	int rc;

	if (pt_le32(loc + 4) != 0 || pt_le32(loc + 16) > 1)
		return pt_fail(err, -ENOTSUP,
			       "zip: ZIP64 locator at 0x%llx: multi-disk archives are not supported",
			       ull(loc_off));
	if (off > loc_off || loc_off - off < ZIP_Z64_EOCD_LEN)
		return pt_fail(err, -EBADMSG,
			       "zip: ZIP64 end of central directory record at 0x%llx (from the locator at 0x%llx) is not before the locator",
			       ull(off), ull(loc_off));
	rc = pt_source_read(z->src, rec, sizeof(rec), off, err);
	if (rc)
		return rc;
	sig = pt_le32(rec);
	if (sig != ZIP_SIG_Z64_EOCD)
		return pt_fail(err, -EBADMSG,
			       "zip: no ZIP64 end of central directory record at 0x%llx (signature 0x%08" PRIx32 ")",
			       ull(off), sig);
	/* The record size excludes its first 12 bytes; it may hold an
	 * extensible data sector but must end by the locator. */
	recsize = pt_le64(rec + 4);
	if (recsize < ZIP_Z64_EOCD_LEN - 12 || recsize > loc_off - off - 12)
		return pt_fail(err, -EBADMSG,
			       "zip: ZIP64 end of central directory record at 0x%llx: bad record size %llu",
			       ull(off), ull(recsize));
	if (pt_le32(rec + 16) != 0 || pt_le32(rec + 20) != 0)
		return pt_fail(err, -ENOTSUP,
			       "zip: ZIP64 end of central directory record at 0x%llx: multi-disk archives are not supported",
			       ull(off));
	z->info.n_entries = pt_le64(rec + 32);
	z->info.cd_size = pt_le64(rec + 40);
	z->info.cd_off = pt_le64(rec + 48);
	z->info.zip64 = true;
	z->end_start = off;
	return 0;
}

/*
 * Find the end records and fill z->info.{eocd_off, zip64, n_entries,
 * cd_size, cd_off} and z->end_start.  The classic record must end exactly
 * at the end of the file (its comment included): trailing garbage is not
 * tolerated.
 */
static int zip_find_end(struct pt_zip *z, struct pt_error *err)
{
	const uint64_t size = z->src->size;
	uint8_t loc[ZIP_Z64_LOCATOR_LEN];
	uint8_t *tail = NULL;
	const uint8_t *eocd = NULL;
	uint64_t tail_off;
	size_t tlen;
	size_t i;
	int rc;

	if (size < ZIP_EOCD_LEN)
		return pt_fail(err, -EBADMSG,
			       "zip: file too short for an end of central directory record (%llu bytes)",
			       ull(size));
	tlen = size < ZIP_EOCD_LEN + ZIP_MAX_COMMENT ?
		       (size_t)size : ZIP_EOCD_LEN + ZIP_MAX_COMMENT;
	tail_off = size - tlen;
	tail = malloc(tlen);
	if (!tail)
		return pt_fail(err, -ENOMEM, "zip: out of memory");
	rc = pt_source_read(z->src, tail, tlen, tail_off, err);
	if (rc)
		goto out;
	/* APPNOTE §4.3.16: the record is followed by its comment and
	 * nothing else, so pos + 22 + comment_len == size. */
	for (i = tlen - ZIP_EOCD_LEN + 1; i-- > 0;) {
		if (pt_le32(tail + i) == ZIP_SIG_EOCD &&
		    i + ZIP_EOCD_LEN + pt_le16(tail + i + 20) == tlen) {
			eocd = tail + i;
			break;
		}
	}
	if (!eocd) {
		rc = pt_fail(err, -EBADMSG,
			     "zip: no end of central directory record in the last %zu bytes",
			     tlen);
		goto out;
	}
	z->info.eocd_off = tail_off + i;

	if (z->info.eocd_off >= ZIP_Z64_LOCATOR_LEN) {
		uint64_t loc_off = z->info.eocd_off - ZIP_Z64_LOCATOR_LEN;

		rc = pt_source_read(z->src, loc, sizeof(loc), loc_off, err);
		if (rc)
			goto out;
		if (pt_le32(loc) == ZIP_SIG_Z64_LOCATOR) {
			rc = zip_read_z64_end(z, loc, loc_off, err);
			goto out;
		}
	}

	if (pt_le16(eocd + 8) == ZIP_U16_SENTINEL ||
	    pt_le16(eocd + 10) == ZIP_U16_SENTINEL ||
	    pt_le32(eocd + 12) == ZIP_U32_SENTINEL ||
	    pt_le32(eocd + 16) == ZIP_U32_SENTINEL) {
		rc = pt_fail(err, -EBADMSG,
			     "zip: end of central directory record at 0x%llx holds ZIP64 sentinels but there is no ZIP64 locator",
			     ull(z->info.eocd_off));
		goto out;
	}
	if (pt_le16(eocd + 4) != 0 || pt_le16(eocd + 6) != 0) {
		rc = pt_fail(err, -ENOTSUP,
			     "zip: end of central directory record at 0x%llx: multi-disk archives are not supported",
			     ull(z->info.eocd_off));
		goto out;
	}
	z->info.n_entries = pt_le16(eocd + 10);
	z->info.cd_size = pt_le32(eocd + 12);
	z->info.cd_off = pt_le32(eocd + 16);
	z->info.zip64 = false;
	z->end_start = z->info.eocd_off;
	rc = 0;
out:
	free(tail);
	return rc;
}

/* Check the central directory's place and size, then read it. */
static int zip_read_cd(struct pt_zip *z, uint8_t **out, struct pt_error *err)
{
	const struct pt_zip_info *in = &z->info;
	uint64_t max_cd;
	uint8_t *cd;
	int rc;

	*out = NULL;
	if (in->cd_off > z->src->size || in->cd_size > z->src->size - in->cd_off)
		return pt_fail(err, -EBADMSG,
			       "zip: central directory at 0x%llx (%llu bytes) beyond end of file (%llu bytes)",
			       ull(in->cd_off), ull(in->cd_size),
			       ull(z->src->size));
	if (in->cd_off + in->cd_size > z->end_start)
		return pt_fail(err, -EBADMSG,
			       "zip: central directory at 0x%llx (%llu bytes) overlaps the end records at 0x%llx",
			       ull(in->cd_off), ull(in->cd_size),
			       ull(z->end_start));
	if (in->n_entries > in->cd_size / ZIP_CENTRAL_LEN)
		return pt_fail(err, -EBADMSG,
			       "zip: entry count %llu too large for a central directory of %llu bytes at 0x%llx",
			       ull(in->n_entries), ull(in->cd_size),
			       ull(in->cd_off));
	if (in->n_entries > z->lim.max_records)
		return pt_fail(err, -EFBIG,
			       "zip: %llu entries exceed the limit of %llu (max_records)",
			       ull(in->n_entries), ull(z->lim.max_records));
	/* n_entries <= max_records, so this cannot overflow in practice;
	 * check anyway rather than trust the limit's value. */
	if (!pt_mul_u64(in->n_entries, ZIP_CENTRAL_MAX, &max_cd))
		max_cd = UINT64_MAX;
	if (in->cd_size > max_cd)
		return pt_fail(err, -EBADMSG,
			       "zip: central directory of %llu bytes at 0x%llx too large for %llu entries",
			       ull(in->cd_size), ull(in->cd_off),
			       ull(in->n_entries));
	if (in->cd_size >= SIZE_MAX)
		return pt_fail(err, -EFBIG,
			       "zip: central directory of %llu bytes too large for memory",
			       ull(in->cd_size));
	cd = malloc(in->cd_size ? (size_t)in->cd_size : 1);
	if (!cd)
		return pt_fail(err, -ENOMEM,
			       "zip: out of memory reading a central directory of %llu bytes",
			       ull(in->cd_size));
	pt_populate(cd, (size_t)in->cd_size);
	rc = pt_source_read(z->src, cd, (size_t)in->cd_size, in->cd_off, err);
	if (rc) {
		free(cd);
		return rc;
	}
	*out = cd;
	return 0;
}

/*
 * Resolve the ZIP64 extended information extra field (APPNOTE §4.5.3): each
 * 8-byte field is present iff its 32-bit counterpart is 0xFFFFFFFF, in the
 * order uncompressed size, compressed size, local header offset, then a
 * 4-byte disk number iff the 16-bit one is 0xFFFF.  A truncated extra block
 * ends the walk (later blocks cannot be found), which is only an error if a
 * ZIP64 value was needed.
 */
static int zip_resolve_zip64(struct pt_zip_entry *e, const uint8_t *extra,
			     size_t elen, uint32_t csize32, uint32_t usize32,
			     uint32_t lho32, uint16_t disk16, uint64_t cd_pos,
			     struct pt_error *err)
{
	struct pt_rd r = pt_rd_make(extra, elen);
	struct zip_quote q;
	bool need = csize32 == ZIP_U32_SENTINEL || usize32 == ZIP_U32_SENTINEL ||
		    lho32 == ZIP_U32_SENTINEL || disk16 == ZIP_U16_SENTINEL;

	e->csize = csize32;
	e->usize = usize32;
	e->lho = lho32;
	e->zip64 = false;
	for (;;) {
		uint16_t id = 0;
		uint16_t sz = 0;
		const uint8_t *d;
		struct pt_rd f;
		bool ok = true;

		if (!pt_rd_u16(&r, &id) || !pt_rd_u16(&r, &sz))
			break;
		d = pt_rd_take(&r, sz);
		if (!d)
			break;
		if (id != ZIP_EXTRA_ZIP64)
			continue;
		e->zip64 = true;
		f = pt_rd_make(d, sz);
		if (usize32 == ZIP_U32_SENTINEL)
			ok = ok && pt_rd_u64(&f, &e->usize);
		if (csize32 == ZIP_U32_SENTINEL)
			ok = ok && pt_rd_u64(&f, &e->csize);
		if (lho32 == ZIP_U32_SENTINEL)
			ok = ok && pt_rd_u64(&f, &e->lho);
		if (disk16 == ZIP_U16_SENTINEL)
			ok = ok && pt_rd_has(&f, 4);
		if (!ok)
			return pt_fail(err, -EBADMSG,
				       "zip: entry '%s': ZIP64 extra field of %u bytes too short (central directory entry at 0x%llx)",
				       zip_quote(&q, e->name, e->name_len), sz,
				       ull(cd_pos));
		return 0;
	}
	if (need)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': size or offset 0xffffffff but no ZIP64 extra field (central directory entry at 0x%llx)",
			       zip_quote(&q, e->name, e->name_len), ull(cd_pos));
	return 0;
}

/* The entry named @name (@len bytes, hash @h), or NULL.  One probe is one
 * compare of a slot and, on a hash match, of the entry. */
static struct pt_zip_ent *zip_find(const struct pt_zip *z, const char *name,
				   size_t len, uint32_t h)
{
	size_t i, mask = z->nslots - 1;

	if (!z->nslots)
		return NULL;
	for (i = h & mask; z->slots[i]; i = (i + 1) & mask) {
		struct pt_zip_ent *ze = &z->ents[z->slots[i] - 1];

		if (ze->hash == h && ze->e.name_len == len &&
		    memcmp(ze->e.name, name, len) == 0)
			return ze;
	}
	return NULL;
}

/*
 * Parse one central-directory header (APPNOTE §4.3.12) at the cursor into
 * z->ents[i], copying its name to *@names.
 */
static int zip_parse_entry(struct pt_zip *z, struct pt_rd *r, uint64_t i,
			   char **names, struct pt_error *err)
{
	struct pt_zip_ent *ze = &z->ents[i];
	struct pt_zip_entry *e = &ze->e;
	struct pt_zip_ent *dup = NULL;
	const uint64_t pos = z->info.cd_off + r->pos;
	const uint8_t *h;
	const uint8_t *name;
	const uint8_t *extra;
	uint16_t nlen;
	uint16_t elen;
	uint16_t clen;
	struct zip_quote q;
	int rc;

	memset(ze, 0, sizeof(*ze));
	h = pt_rd_take(r, ZIP_CENTRAL_LEN);
	if (!h)
		return pt_fail(err, -EBADMSG,
			       "zip: central directory entry %llu at 0x%llx: header past end of central directory",
			       ull(i), ull(pos));
	if (pt_le32(h) != ZIP_SIG_CENTRAL)
		return pt_fail(err, -EBADMSG,
			       "zip: central directory entry %llu at 0x%llx: bad signature 0x%08" PRIx32,
			       ull(i), ull(pos), pt_le32(h));
	nlen = pt_le16(h + 28);
	elen = pt_le16(h + 30);
	clen = pt_le16(h + 32);
	name = pt_rd_take(r, nlen);
	if (!name)
		return pt_fail(err, -EBADMSG,
			       "zip: central directory entry %llu at 0x%llx: name of %u bytes past end of central directory",
			       ull(i), ull(pos), nlen);
	extra = pt_rd_take(r, elen);
	if (!extra)
		return pt_fail(err, -EBADMSG,
			       "zip: central directory entry %llu at 0x%llx: extra field of %u bytes past end of central directory",
			       ull(i), ull(pos), elen);
	if (!pt_rd_take(r, clen))
		return pt_fail(err, -EBADMSG,
			       "zip: central directory entry %llu at 0x%llx: comment of %u bytes past end of central directory",
			       ull(i), ull(pos), clen);
	if (nlen == 0)
		return pt_fail(err, -EBADMSG,
			       "zip: central directory entry %llu at 0x%llx: empty name",
			       ull(i), ull(pos));
	if (memchr(name, '\0', nlen))
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': name contains a NUL byte (central directory entry at 0x%llx)",
			       zip_quote(&q, (const char *)name, nlen),
			       ull(pos));

	memcpy(*names, name, nlen);
	(*names)[nlen] = '\0';
	e->name = *names;
	e->name_len = nlen;
	*names += nlen + 1;
	e->index = (uint32_t)i;
	e->version_made = pt_le16(h + 4);
	e->version_needed = pt_le16(h + 6);
	e->flags = pt_le16(h + 8);
	e->method = pt_le16(h + 10);
	e->mtime = pt_le16(h + 12);
	e->mdate = pt_le16(h + 14);
	e->crc32 = pt_le32(h + 16);
	rc = zip_resolve_zip64(e, extra, elen, pt_le32(h + 20), pt_le32(h + 24),
			       pt_le32(h + 42), pt_le16(h + 34), pos, err);
	if (rc)
		return rc;

	if (e->flags & ZIP_FLAG_ENCRYPTED)
		return pt_fail(err, -ENOTSUP,
			       "zip: entry '%s': encrypted entries are not supported (central directory entry at 0x%llx)",
			       zip_quote(&q, e->name, e->name_len), ull(pos));
	if (e->method != PT_ZIP_STORED && e->method != PT_ZIP_DEFLATED)
		return pt_fail(err, -ENOTSUP,
			       "zip: entry '%s': compression method %u is not supported (central directory entry at 0x%llx)",
			       zip_quote(&q, e->name, e->name_len), e->method,
			       ull(pos));
	if (e->method == PT_ZIP_STORED && e->csize != e->usize)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': stored, but compressed size %llu != uncompressed size %llu (central directory entry at 0x%llx)",
			       zip_quote(&q, e->name, e->name_len),
			       ull(e->csize), ull(e->usize), ull(pos));

	ze->hash = pt_hash_name(e->name, nlen);
	dup = zip_find(z, e->name, nlen, ze->hash);
	if (dup)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': duplicate name (central directory entries %" PRIu32 " and %llu)",
			       zip_quote(&q, e->name, e->name_len),
			       dup->e.index, ull(i));
	pt_slot_put(z->slots, z->nslots, ze->hash, ze->e.index + 1);
	return 0;
}

static int zip_parse_cd(struct pt_zip *z, const uint8_t *cd,
			struct pt_error *err)
{
	struct pt_rd r = pt_rd_make(cd, (size_t)z->info.cd_size);
	uint64_t n = z->info.n_entries;
	char *names;
	uint64_t i;
	int rc;

	/* n <= cd_size / 46 and cd_size < SIZE_MAX were checked. */
	/* not calloc(): glibc clears a reused heap chunk whole before the
	 * parse writes it again; each entry is cleared as it is parsed */
	z->ents = malloc((n ? (size_t)n : 1) * sizeof(*z->ents));
	/* Names with their NULs fit in cd_size: each entry has >= 46 bytes
	 * of header for one NUL. */
	z->names = malloc((size_t)z->info.cd_size + 1);
	for (z->nslots = 16; z->nslots < 2 * n; z->nslots *= 2)
		;
	z->slots = calloc(z->nslots, sizeof(*z->slots));
	if (z->ents)
		pt_populate(z->ents, (n ? (size_t)n : 1) * sizeof(*z->ents));
	if (z->names)
		pt_populate(z->names, (size_t)z->info.cd_size);
	if (!z->ents || !z->names || !z->slots)
		return pt_fail(err, -ENOMEM,
			       "zip: out of memory indexing %llu entries",
			       ull(n));
	names = z->names;
	for (i = 0; i < n; i++) {
		rc = zip_parse_entry(z, &r, i, &names, err);
		if (rc)
			return rc;
	}
	/* the names took a quarter of the central directory's bytes (torch's
	 * 20,000 records: 0.3 of 1.2 MB): give the rest back, and point the
	 * entries at the names where they now are (back to back, in order) */
	names = realloc(z->names, (size_t)(names - z->names) + 1);
	if (names) {
		z->names = names;
		for (i = 0; i < n; i++) {
			z->ents[i].e.name = names;
			names += z->ents[i].e.name_len + 1;
		}
	}
	return 0;
}

/* Compare the descriptor's sizes at @d (@wide: 8-byte fields) with @e. */
static bool zip_dd_sizes_match(const uint8_t *d, bool wide,
			       const struct pt_zip_entry *e)
{
	if (wide)
		return pt_le64(d) == e->csize && pt_le64(d + 8) == e->usize;
	return pt_le32(d) == e->csize && pt_le32(d + 4) == e->usize;
}

/*
 * Locate the data descriptor after the payload (APPNOTE §4.3.9): optional
 * signature, CRC-32, then 4-byte sizes, or 8-byte ones for a ZIP64 entry.
 * Writers disagree on when to use the wide form, so both are tried, the
 * one the entry suggests first.  A candidate is accepted only when its
 * sizes (and, without a signature, its CRC) agree with the central
 * directory; if none does, the descriptor is treated as absent.
 */
#define ZIP_WIN_SIZE (64u * 1024)

/*
 * Read for the open-time walk over local headers and data descriptors.
 * torch interleaves them with payloads, so a checkpoint of many small
 * tensors would cost two pread() calls per record; a 64 KiB window turns
 * that into one call per 64 KiB of file.  Falls back to a plain read for
 * ranges larger than the window.
 */
static int zip_read_win(struct pt_zip *z, void *buf, size_t n, uint64_t off,
			struct pt_error *err)
{
	uint64_t left;
	size_t len;
	int rc;

	if (z->win && off >= z->win_off && n <= z->win_len &&
	    off - z->win_off <= z->win_len - n) {
		memcpy(buf, z->win + (off - z->win_off), n);
		return 0;
	}
	if (n > ZIP_WIN_SIZE || off > z->src->size)
		return pt_source_read(z->src, buf, n, off, err);
	if (!z->win) {
		z->win = malloc(ZIP_WIN_SIZE);
		if (!z->win)
			return pt_source_read(z->src, buf, n, off, err);
	}
	left = z->src->size - off;
	len = left < ZIP_WIN_SIZE ? (size_t)left : ZIP_WIN_SIZE;
	if (len < n)
		return pt_source_read(z->src, buf, n, off, err);
	z->win_len = 0;
	rc = pt_source_read(z->src, z->win, len, off, err);
	if (rc)
		return rc;
	z->win_off = off;
	z->win_len = len;
	memcpy(buf, z->win, n);
	return 0;
}

static int zip_find_descriptor(struct pt_zip *z, struct pt_zip_entry *e,
			       struct pt_error *err)
{
	uint8_t d[24];
	uint64_t room = z->info.cd_off - e->data_end;
	size_t n = room < sizeof(d) ? (size_t)room : sizeof(d);
	bool sig;
	int k;
	int rc;

	e->has_descriptor = false;
	e->end = e->data_end;
	if (n < 12)
		return 0;
	rc = zip_read_win(z, d, n, e->data_end, err);
	if (rc)
		return rc;
	sig = pt_le32(d) == ZIP_SIG_DESCRIPTOR;
	for (k = 0; k < 4; k++) {
		bool with_sig = k < 2;
		bool wide = (k % 2 == 0) == e->zip64;
		size_t len = (size_t)(with_sig ? 4 : 0) + 4 + (wide ? 16 : 8);
		const uint8_t *c = d + (with_sig ? 4 : 0);

		if (with_sig && !sig)
			continue;
		if (len > n)
			continue;
		if (!with_sig && pt_le32(c) != e->crc32)
			continue;
		if (!zip_dd_sizes_match(c + 4, wide, e))
			continue;
		e->has_descriptor = true;
		e->end = e->data_end + len;
		return 0;
	}
	return 0;
}

/*
 * Read the local header of @e (APPNOTE §4.3.7) and fill data_off,
 * data_end, end, lh_extra_len, has_descriptor.  @buf holds at least
 * 30 + 65535 bytes.  Sizes and CRC in the local header are ignored (torch
 * writes zeros there); the name and method must match.
 */
static int zip_check_local(struct pt_zip *z, struct pt_zip_entry *e,
			   uint8_t *buf, struct pt_error *err)
{
	const uint64_t size = z->src->size;
	const uint64_t cd_off = z->info.cd_off;
	struct zip_quote q;
	struct zip_quote q2;
	uint64_t want;
	size_t got;
	uint32_t sig;
	uint16_t lnlen;
	uint16_t lelen;
	uint16_t lmethod;
	int rc;

	if (e->lho > size || size - e->lho < ZIP_LOCAL_LEN)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': local header at 0x%llx beyond end of file",
			       zip_quote(&q, e->name, e->name_len), ull(e->lho));
	if (e->lho > cd_off || cd_off - e->lho < ZIP_LOCAL_LEN)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': local header at 0x%llx overlaps the central directory at 0x%llx",
			       zip_quote(&q, e->name, e->name_len), ull(e->lho),
			       ull(cd_off));
	/* One read for the fixed part and the name, when it fits. */
	want = ZIP_LOCAL_LEN + e->name_len;
	got = (size_t)(want < cd_off - e->lho ? want : cd_off - e->lho);
	rc = zip_read_win(z, buf, got, e->lho, err);
	if (rc)
		return rc;
	sig = pt_le32(buf);
	if (sig != ZIP_SIG_LOCAL)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': no local header at 0x%llx (signature 0x%08" PRIx32 ")",
			       zip_quote(&q, e->name, e->name_len), ull(e->lho),
			       sig);
	lmethod = pt_le16(buf + 8);
	lnlen = pt_le16(buf + 26);
	lelen = pt_le16(buf + 28);
	if (lnlen != e->name_len || got < want ||
	    memcmp(buf + ZIP_LOCAL_LEN, e->name, e->name_len) != 0) {
		/* Show (the start of) the local name. */
		size_t show = lnlen < ZIP_QUOTE_MAX ? lnlen : ZIP_QUOTE_MAX;
		uint64_t room = cd_off - e->lho - ZIP_LOCAL_LEN;

		if (show > room)
			show = (size_t)room;
		rc = pt_source_read(z->src, buf + ZIP_LOCAL_LEN, show,
				    e->lho + ZIP_LOCAL_LEN, err);
		if (rc)
			return rc;
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': name in the local header at 0x%llx ('%s', %u bytes) does not match the central directory",
			       zip_quote(&q, e->name, e->name_len), ull(e->lho),
			       zip_quote(&q2, (const char *)buf + ZIP_LOCAL_LEN,
					 show),
			       lnlen);
	}
	if (lmethod != e->method)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': local header at 0x%llx says method %u, the central directory %u",
			       zip_quote(&q, e->name, e->name_len), ull(e->lho),
			       lmethod, e->method);
	e->lh_extra_len = lelen;
	/* lho < cd_off <= size <= INT64_MAX: no overflow here. */
	e->data_off = e->lho + ZIP_LOCAL_LEN + lnlen + lelen;
	if (e->data_off > cd_off)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': local header at 0x%llx (%u bytes of extra field) runs into the central directory at 0x%llx",
			       zip_quote(&q, e->name, e->name_len), ull(e->lho),
			       lelen, ull(cd_off));
	if (!pt_add_u64(e->data_off, e->csize, &e->data_end) ||
	    e->data_end > size)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': data at 0x%llx (%llu bytes) beyond end of file",
			       zip_quote(&q, e->name, e->name_len),
			       ull(e->data_off), ull(e->csize));
	if (e->data_end > cd_off)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': data at 0x%llx (%llu bytes) runs into the central directory at 0x%llx",
			       zip_quote(&q, e->name, e->name_len),
			       ull(e->data_off), ull(e->csize), ull(cd_off));
	e->has_descriptor = false;
	e->end = e->data_end;
	if (e->flags & ZIP_FLAG_DESCRIPTOR)
		return zip_find_descriptor(z, e, err);
	return 0;
}

static int zip_cmp_lho(const void *a, const void *b)
{
	const struct pt_zip_entry *x = *(const struct pt_zip_entry *const *)a;
	const struct pt_zip_entry *y = *(const struct pt_zip_entry *const *)b;

	if (x->lho != y->lho)
		return x->lho < y->lho ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* Reject records that share bytes: [lho, end) must be disjoint. */
static int zip_check_overlaps(struct pt_zip *z, struct pt_error *err)
{
	const uint64_t n = z->info.n_entries;
	const struct pt_zip_entry **v;
	struct zip_quote q;
	struct zip_quote q2;
	uint64_t i;
	int rc = 0;

	if (n < 2)
		return 0;
	v = calloc((size_t)n, sizeof(*v));
	if (!v)
		return pt_fail(err, -ENOMEM, "zip: out of memory");
	for (i = 0; i < n; i++)
		v[i] = &z->ents[i].e;
	/* writers list records in file order (torch's 20,000: a sort of 5 M
	 * instructions that moved nothing) */
	for (i = 0; i + 1 < n && v[i]->lho < v[i + 1]->lho; i++)
		;
	if (i + 1 < n)
		qsort(v, (size_t)n, sizeof(*v), zip_cmp_lho);
	for (i = 0; i + 1 < n; i++) {
		const struct pt_zip_entry *a = v[i];
		const struct pt_zip_entry *b = v[i + 1];

		if (a->end > b->lho) {
			rc = pt_fail(err, -EBADMSG,
				     "zip: entry '%s': record at 0x%llx-0x%llx overlaps entry '%s' at 0x%llx",
				     zip_quote(&q, a->name, a->name_len),
				     ull(a->lho), ull(a->end),
				     zip_quote(&q2, b->name, b->name_len),
				     ull(b->lho));
			break;
		}
	}
	free(v);
	return rc;
}

/* Look up "<pfx>/<rel>" (or just @rel when @plen is 0). */
static const struct pt_zip_entry *zip_find_join(const struct pt_zip *z,
						const char *pfx, size_t plen,
						const char *rel, size_t rlen)
{
	struct pt_zip_ent *ze = NULL;
	char small[256];
	char *key = small;
	size_t klen;

	if (plen == 0) {
		if (rlen > 65535)
			return NULL;
		ze = zip_find(z, rel, rlen, pt_hash_name(rel, rlen));
		return ze ? &ze->e : NULL;
	}
	klen = plen + 1 + rlen;
	if (rlen > 65535 || plen > 65535 || klen > 65535)
		return NULL;
	if (klen > sizeof(small)) {
		key = malloc(klen);
		if (!key)
			return NULL;
	}
	memcpy(key, pfx, plen);
	key[plen] = '/';
	memcpy(key + plen + 1, rel, rlen);
	ze = zip_find(z, key, klen, pt_hash_name(key, klen));
	if (key != small)
		free(key);
	return ze ? &ze->e : NULL;
}

/*
 * Choose the archive prefix (docs/FORMATS.md, "Archive prefix"), first rule
 * that applies:
 *  1. torch's rule, when it leads to a data.pkl: the first CD entry's name
 *     up to its first '/', if "<that>/data.pkl" exists;
 *  2. "" if "data.pkl" sits at the root;
 *  3. the directory part of the shortest name ending in "/data.pkl"
 *     (the first in CD order among equals);
 *  4. torch's rule regardless (TorchScript JSON layout, torch.package...),
 *     or "" when the first name has no '/' or there are no entries.
 */
static int zip_set_prefix(struct pt_zip *z, struct pt_error *err)
{
	static const char pkl[] = "data.pkl";
	const size_t pkl_len = sizeof(pkl) - 1;
	const struct pt_zip_entry *first = NULL;
	const char *slash = NULL;
	const char *p = "";
	size_t plen = 0;
	bool chosen = false;
	bool nested = false;
	uint64_t i;

	if (z->info.n_entries > 0) {
		first = &z->ents[0].e;
		slash = memchr(first->name, '/', first->name_len);
	}
	if (slash && slash != first->name &&
	    zip_find_join(z, first->name, (size_t)(slash - first->name), pkl,
			  pkl_len)) {
		p = first->name;
		plen = (size_t)(slash - first->name);
		chosen = true;
	}
	if (!chosen && zip_find_join(z, "", 0, pkl, pkl_len))
		chosen = true;
	for (i = 0; !chosen && i < z->info.n_entries; i++) {
		const struct pt_zip_entry *e = &z->ents[i].e;
		size_t dir;

		if (e->name_len <= pkl_len + 1)
			continue;
		dir = e->name_len - pkl_len - 1;
		if (memcmp(e->name + dir, "/data.pkl", pkl_len + 1) != 0)
			continue;
		if (!nested || dir < plen) {
			p = e->name;
			plen = dir;
			nested = true;
		}
	}
	if (!chosen && !nested && slash) {
		p = first->name;
		plen = (size_t)(slash - first->name);
	}
	z->prefix = malloc(plen + 1);
	if (!z->prefix)
		return pt_fail(err, -ENOMEM, "zip: out of memory");
	memcpy(z->prefix, p, plen);
	z->prefix[plen] = '\0';
	z->info.prefix = z->prefix;
	return 0;
}

/*
 * Sources whose every read costs a round trip (src->costly_reads, a remote
 * object) should not have every local header read at open.  When a stored
 * entry's place fits torch's layout exactly (docs/FORMATS.md, "Record
 * alignment": payload at the
 * first multiple of 64 after the name, the optional ZIP64 block and the FB
 * block; a data descriptor of 16 or 24 bytes; the next record or the
 * central directory right after it), take data_off from that layout and
 * read the real local header on the entry's first use (zip_check_lazy).
 * Anything else is read at open as usual.
 */
static bool zip_predict_local(struct pt_zip_entry *e, uint64_t next)
{
	uint64_t z64 = 0, start, data, desc;

	if (e->method != PT_ZIP_STORED || !(e->flags & ZIP_FLAG_DESCRIPTOR))
		return false;
	if (e->usize >= ZIP_U32_SENTINEL || e->lho >= ZIP_U32_SENTINEL) {
		z64 = 4;
		if (e->usize >= ZIP_U32_SENTINEL)
			z64 += 16;
		if (e->lho >= ZIP_U32_SENTINEL)
			z64 += 8;
	}
	start = e->lho + ZIP_LOCAL_LEN + e->name_len + z64 + 4;
	data = (start + 63) / 64 * 64;
	desc = e->csize == 0 ? 0 : e->zip64 ? 24 : 16;
	if (next < data || next - data < desc || next - data - desc != e->csize)
		return false;
	e->data_off = data;
	e->data_end = data + e->csize;
	e->end = e->data_end + desc;
	e->has_descriptor = desc != 0;
	e->lh_extra_len = (uint16_t)(data - e->lho - ZIP_LOCAL_LEN - e->name_len);
	return true;
}

static int zip_cmp_ent_lho(const void *a, const void *b)
{
	const struct pt_zip_entry *x = &(*(struct pt_zip_ent *const *)a)->e;
	const struct pt_zip_entry *y = &(*(struct pt_zip_ent *const *)b)->e;

	return zip_cmp_lho(&x, &y);
}

/* The open-time walk over local headers, or the prediction above. */
static int zip_check_locals(struct pt_zip *z, uint8_t *lbuf,
			    struct pt_error *err)
{
	const uint64_t n = z->info.n_entries;
	struct pt_zip_ent **v = NULL;
	uint64_t i;
	int rc = 0;

	if (z->src->costly_reads && n)
		v = calloc((size_t)n, sizeof(*v));
	if (v) {
		for (i = 0; i < n; i++)
			v[i] = &z->ents[i];
		qsort(v, (size_t)n, sizeof(*v), zip_cmp_ent_lho);
		for (i = 0; i < n; i++) {
			uint64_t next = i + 1 < n ? v[i + 1]->e.lho : z->info.cd_off;

			v[i]->unchecked = zip_predict_local(&v[i]->e, next);
		}
		free(v);
	}
	for (i = 0; i < n && !rc; i++)
		if (!z->ents[i].unchecked)
			rc = zip_check_local(z, &z->ents[i].e, lbuf, err);
	return rc;
}

/* First use of a predicted entry: its local header must say the same.
 * @whole: the caller reads the whole entry next (data.pkl, a deflated
 * record), then one request can bring the header, the payload and the
 * read window that looks for the data descriptor after it; a part of it
 * (a tensor's storage) is fetched as it is read. */
static int zip_check_lazy(struct pt_zip *z, const struct pt_zip_entry *e,
			  bool whole, struct pt_error *err)
{
	struct pt_zip_ent *ze = zip_own(z, e);
	struct pt_zip_entry real;
	struct zip_quote q;
	uint8_t *lbuf;
	bool todo;
	int rc;

	if (!ze)
		return 0;
	pthread_mutex_lock(&z->lock);
	todo = ze->unchecked;
	pthread_mutex_unlock(&z->lock);
	if (!todo)
		return 0;
	if (whole)
		pt_source_prefetch(z->src, e->lho,
				   z->src->size - e->lho < e->end - e->lho + ZIP_WIN_SIZE ?
				   z->src->size - e->lho : e->end - e->lho + ZIP_WIN_SIZE);
	lbuf = malloc(ZIP_LOCAL_LEN + 65535);
	if (!lbuf)
		return pt_fail(err, -ENOMEM, "zip: out of memory");
	real = *e;
	pthread_mutex_lock(&z->lock);   /* zip_read_win's window */
	rc = zip_check_local(z, &real, lbuf, err);
	pthread_mutex_unlock(&z->lock);
	free(lbuf);
	if (rc)
		return rc;
	if (real.data_off != e->data_off || real.end != e->end)
		return pt_fail(err, -EBADMSG,
			       "zip: entry '%s': local header at 0x%llx puts the data at 0x%llx, not where the central directory's layout does (0x%llx)",
			       zip_quote(&q, e->name, e->name_len), ull(e->lho),
			       ull(real.data_off), ull(e->data_off));
	pthread_mutex_lock(&z->lock);
	ze->unchecked = false;
	pthread_mutex_unlock(&z->lock);
	return 0;
}

int pt_zip_open(struct pt_zip **out, const struct pt_source *src,
		const struct pt_limits *lim, struct pt_error *err)
{
	struct pt_zip *z = NULL;
	uint8_t *cd = NULL;
	uint8_t *lbuf = NULL;
	int rc;

	*out = NULL;
	if (src->size > INT64_MAX)
		return pt_fail(err, -EFBIG, "zip: file of %llu bytes too large",
			       ull(src->size));
	z = calloc(1, sizeof(*z));
	if (!z)
		return pt_fail(err, -ENOMEM, "zip: out of memory");
	z->src = src;
	z->lim = *lim;
	z->info.prefix = "";
	if (pthread_mutex_init(&z->lock, NULL) != 0) {
		rc = pt_fail(err, -ENOMEM, "zip: cannot create a mutex");
		goto out;
	}
	z->lock_ok = true;

	rc = zip_find_end(z, err);
	if (rc)
		goto out;
	rc = zip_read_cd(z, &cd, err);
	if (rc)
		goto out;
	rc = zip_parse_cd(z, cd, err);
	if (rc)
		goto out;
	free(cd);
	cd = NULL;

	lbuf = malloc(ZIP_LOCAL_LEN + 65535);
	if (!lbuf) {
		rc = pt_fail(err, -ENOMEM, "zip: out of memory");
		goto out;
	}
	rc = zip_check_locals(z, lbuf, err);
	if (rc)
		goto out;
	rc = zip_check_overlaps(z, err);
	if (rc)
		goto out;
	rc = zip_set_prefix(z, err);
	if (rc)
		goto out;

	free(z->win);
	z->win = NULL;
	z->win_len = 0;
	*out = z;
	z = NULL;
	rc = 0;
out:
	free(lbuf);
	free(cd);
	pt_zip_close(z);
	return rc;
}

void pt_zip_close(struct pt_zip *z)
{
	uint64_t i;

	if (!z)
		return;
	free(z->win);
	free(z->slots);
	if (z->inflated) {
		for (i = 0; i < z->info.n_entries; i++)
			free(z->inflated[i]);
		free(z->inflated);
	}
	free(z->ents);
	free(z->names);
	free(z->prefix);
	if (z->lock_ok)
		pthread_mutex_destroy(&z->lock);
	free(z);
}

const struct pt_zip_info *pt_zip_info(const struct pt_zip *z)
{
	return &z->info;
}

const struct pt_zip_entry *pt_zip_entry_at(const struct pt_zip *z, uint64_t i)
{
	if (i >= z->info.n_entries)
		return NULL;
	return &z->ents[i].e;
}

void pt_zip_set_crc(struct pt_zip *z, const struct pt_zip_entry *e,
		    uint32_t crc)
{
	if (e->index < z->info.n_entries && &z->ents[e->index].e == e)
		z->ents[e->index].e.crc32 = crc;
}

const struct pt_zip_entry *pt_zip_find(const struct pt_zip *z,
				       const char *name)
{
	return zip_find_join(z, "", 0, name, strlen(name));
}

const struct pt_zip_entry *pt_zip_find_rel(const struct pt_zip *z,
					   const char *rel)
{
	return zip_find_join(z, z->prefix, strlen(z->prefix), rel, strlen(rel));
}

const struct pt_source *pt_zip_source(const struct pt_zip *z)
{
	return z->src;
}

/* Inflate @e into a new buffer of e->usize bytes (at least 1 allocated). */
static int zip_inflate(struct pt_zip *z, const struct pt_zip_entry *e,
		       uint8_t **out, struct pt_error *err)
{
	struct libdeflate_decompressor *d = NULL;
	enum libdeflate_result res;
	struct zip_quote q;
	uint8_t *in = NULL;
	uint8_t *buf = NULL;
	size_t actual = 0;
	int rc;

	*out = NULL;
	if (e->usize > z->lim.max_inflate_bytes || e->usize >= SIZE_MAX)
		return pt_fail(err, -EFBIG,
			       "zip: entry '%s': inflated size %llu exceeds the limit of %llu (max_inflate_bytes)",
			       zip_quote(&q, e->name, e->name_len),
			       ull(e->usize), ull(z->lim.max_inflate_bytes));
	if (e->csize > z->lim.max_inflate_bytes || e->csize >= SIZE_MAX)
		return pt_fail(err, -EFBIG,
			       "zip: entry '%s': compressed size %llu exceeds the limit of %llu (max_inflate_bytes)",
			       zip_quote(&q, e->name, e->name_len),
			       ull(e->csize), ull(z->lim.max_inflate_bytes));
	in = malloc(e->csize ? (size_t)e->csize : 1);
	buf = malloc(e->usize ? (size_t)e->usize : 1);
	d = libdeflate_alloc_decompressor();
	if (!in || !buf || !d) {
		rc = pt_fail(err, -ENOMEM,
			     "zip: entry '%s': out of memory inflating %llu bytes",
			     zip_quote(&q, e->name, e->name_len),
			     ull(e->usize));
		goto out;
	}
	rc = pt_source_read(z->src, in, (size_t)e->csize, e->data_off, err);
	if (rc)
		goto out;
	res = libdeflate_deflate_decompress(d, in, (size_t)e->csize, buf,
					    (size_t)e->usize, &actual);
	if (res == LIBDEFLATE_INSUFFICIENT_SPACE) {
		rc = pt_fail(err, -EBADMSG,
			     "zip: entry '%s': deflate stream at 0x%llx inflates to more than %llu bytes",
			     zip_quote(&q, e->name, e->name_len),
			     ull(e->data_off), ull(e->usize));
		goto out;
	}
	if (res != LIBDEFLATE_SUCCESS) {
		rc = pt_fail(err, -EBADMSG,
			     "zip: entry '%s': corrupt deflate stream at 0x%llx",
			     zip_quote(&q, e->name, e->name_len),
			     ull(e->data_off));
		goto out;
	}
	if (actual != e->usize) {
		rc = pt_fail(err, -EBADMSG,
			     "zip: entry '%s': deflate stream at 0x%llx inflates to %zu bytes, expected %llu",
			     zip_quote(&q, e->name, e->name_len),
			     ull(e->data_off), actual, ull(e->usize));
		goto out;
	}
	*out = buf;
	buf = NULL;
	rc = 0;
out:
	libdeflate_free_decompressor(d);
	free(in);
	free(buf);
	return rc;
}

/*
 * Inflation runs outside the lock, so different entries inflate in
 * parallel; if two threads race on one entry, the first result is kept.
 */
int pt_zip_inflated(struct pt_zip *z, const struct pt_zip_entry *e,
		    const uint8_t **out, struct pt_error *err)
{
	struct pt_zip_ent *ze = zip_own(z, e);
	struct zip_quote q;
	uint8_t *buf = NULL;
	uint8_t *cached;
	int rc;

	*out = NULL;
	if (!ze)
		return pt_fail(err, -EINVAL, "zip: entry not in this archive");
	if (e->method != PT_ZIP_DEFLATED)
		return pt_fail(err, -EINVAL, "zip: entry '%s' is not deflated",
			       zip_quote(&q, e->name, e->name_len));
	rc = zip_check_lazy(z, e, true, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&z->lock);
	cached = z->inflated ? z->inflated[e->index] : NULL;
	pthread_mutex_unlock(&z->lock);
	if (cached) {
		*out = cached;
		return 0;
	}
	rc = zip_inflate(z, e, &buf, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&z->lock);
	if (!z->inflated)
		z->inflated = calloc((size_t)z->info.n_entries,
				     sizeof(*z->inflated));
	if (!z->inflated) {
		pthread_mutex_unlock(&z->lock);
		free(buf);
		return pt_fail(err, -ENOMEM, "zip: out of memory");
	}
	if (z->inflated[e->index])
		free(buf);
	else
		z->inflated[e->index] = buf;
	cached = z->inflated[e->index];
	pthread_mutex_unlock(&z->lock);
	*out = cached;
	return 0;
}

int pt_zip_read(struct pt_zip *z, const struct pt_zip_entry *e, uint8_t **out,
		size_t *len, struct pt_error *err)
{
	struct zip_quote q;
	const uint8_t *inf;
	uint8_t *b;
	int rc;

	*out = NULL;
	*len = 0;
	if (!zip_own(z, e))
		return pt_fail(err, -EINVAL, "zip: entry not in this archive");
	if (e->usize >= SIZE_MAX)
		return pt_fail(err, -EFBIG, "zip: entry '%s': %llu bytes too large",
			       zip_quote(&q, e->name, e->name_len),
			       ull(e->usize));
	if (e->method == PT_ZIP_STORED) {
		rc = zip_check_lazy(z, e, true, err);
		if (!rc)
			rc = pt_source_dup(z->src, e->data_off,
					   (size_t)e->usize, out, err);
		if (rc)
			return rc;
		*len = (size_t)e->usize;
		return 0;
	}
	rc = pt_zip_inflated(z, e, &inf, err);
	if (rc)
		return rc;
	b = malloc((size_t)e->usize + 1);
	if (!b)
		return pt_fail(err, -ENOMEM,
			       "zip: entry '%s': out of memory copying %llu bytes",
			       zip_quote(&q, e->name, e->name_len),
			       ull(e->usize));
	memcpy(b, inf, (size_t)e->usize);
	b[e->usize] = 0;
	*out = b;
	*len = (size_t)e->usize;
	return 0;
}

long long pt_zip_pread(struct pt_zip *z, const struct pt_zip_entry *e,
		       void *buf, size_t n, uint64_t off, struct pt_error *err)
{
	const uint8_t *inf;
	uint64_t m;
	int rc;

	if (!zip_own(z, e))
		return pt_fail(err, -EINVAL, "zip: entry not in this archive");
	if (off >= e->usize)
		return 0;
	m = e->usize - off;
	if (m > n)
		m = n;
	if (e->method == PT_ZIP_STORED) {
		/* data_off + usize <= size <= INT64_MAX was checked at open. */
		rc = zip_check_lazy(z, e, false, err);
		if (!rc)
			rc = pt_source_read(z->src, buf, (size_t)m,
					    e->data_off + off, err);
		if (rc)
			return rc;
		return (long long)m;
	}
	rc = pt_zip_inflated(z, e, &inf, err);
	if (rc)
		return rc;
	memcpy(buf, inf + off, (size_t)m);
	return (long long)m;
}

/* ---- after a commit rewrote the archive ---- */

static int remap_cmp(const void *a, const void *b, void *arg)
{
	const struct pt_zip_ent *ents = arg;
	uint64_t x = ents[*(const uint64_t *)a].e.data_off;
	uint64_t y = ents[*(const uint64_t *)b].e.data_off;

	return x < y ? -1 : x > y;
}

/* Move the file offset *@p that pointed into a record's payload in @z's
 * layout to the same byte in @fresh's. */
static void remap_one(const struct pt_zip *z, const struct pt_zip *fresh,
		      const uint64_t *order, uint64_t *p)
{
	uint64_t lo = 0;
	uint64_t hi = z->info.n_entries;

	if (*p == UINT64_MAX)
		return;
	while (lo < hi) {               /* last record starting at or before */
		uint64_t mid = lo + (hi - lo) / 2;

		if (z->ents[order[mid]].e.data_off <= *p)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return;
	{
		const struct pt_zip_entry *o = &z->ents[order[lo - 1]].e;
		const struct pt_zip_entry *nw = &fresh->ents[order[lo - 1]].e;

		if (*p <= o->data_end)
			*p = *p - o->data_off + nw->data_off;
	}
}

int pt_zip_adopt_layout(struct pt_zip *z, const struct pt_zip *fresh,
			uint64_t **offs, size_t n_offs, struct pt_error *err)
{
	uint64_t count = z->info.n_entries;
	uint64_t *order;
	uint64_t i;

	if (fresh->info.n_entries != count)
		return pt_fail(err, -EIO, "reindex after commit: %llu records, expected %llu",
			       (unsigned long long)fresh->info.n_entries,
			       (unsigned long long)count);
	for (i = 0; i < count; i++) {
		const struct pt_zip_entry *a = &z->ents[i].e;
		const struct pt_zip_entry *b = &fresh->ents[i].e;

		if (a->name_len != b->name_len || memcmp(a->name, b->name, a->name_len) ||
		    a->usize != b->usize || a->method != b->method)
			return pt_fail(err, -EIO, "reindex after commit: record %llu differs",
				       (unsigned long long)i);
	}
	order = malloc((count ? (size_t)count : 1) * sizeof(*order));
	if (!order)
		return pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < count; i++)
		order[i] = i;
	qsort_r(order, (size_t)count, sizeof(*order), remap_cmp, z->ents);
	for (i = 0; i < n_offs; i++)
		remap_one(z, fresh, order, offs[i]);
	free(order);
	for (i = 0; i < count; i++) {
		struct pt_zip_entry *a = &z->ents[i].e;
		const struct pt_zip_entry *b = &fresh->ents[i].e;

		a->flags = b->flags;
		a->version_needed = b->version_needed;
		a->crc32 = b->crc32;
		a->csize = b->csize;
		a->lho = b->lho;
		a->data_off = b->data_off;
		a->data_end = b->data_end;
		a->end = b->end;
		a->lh_extra_len = b->lh_extra_len;
		a->has_descriptor = b->has_descriptor;
		a->zip64 = b->zip64;
	}
	z->info.cd_off = fresh->info.cd_off;
	z->info.cd_size = fresh->info.cd_size;
	z->info.eocd_off = fresh->info.eocd_off;
	z->info.zip64 = fresh->info.zip64;
	z->end_start = fresh->end_start;
	return 0;
}
