/* SPDX-License-Identifier: MIT */
/*
 * zip.h -- read-only index of a ZIP archive (APPNOTE.TXT 6.3.x), as torch
 * writes it (docs/FORMATS.md, "The ZIP container") and as other tools
 * re-zip it.
 *
 * pt_zip_open() reads the end records (classic and ZIP64), the central
 * directory and every local header once, validates all of it against the
 * file (offsets, sizes, overlaps, duplicates, encryption) and builds a
 * name -> entry hash.  After a successful open the index is immutable and
 * may be shared by any number of threads.  Stored records are never copied:
 * callers read [data_off, data_off + usize) from the source.  Deflated
 * records are inflated on demand by pt_zip_read().
 */
#ifndef PTFS_CORE_ZIP_H
#define PTFS_CORE_ZIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/pt_limits.h"
#include "io/source.h"

#define PT_ZIP_STORED 0
#define PT_ZIP_DEFLATED 8

struct pt_zip;

/* One record, as the central directory describes it, plus what the local
 * header says.  Read-only; valid until pt_zip_close(). */
struct pt_zip_entry {
	const char *name;       /* full name, NUL-terminated (no NUL inside) */
	uint32_t name_len;      /* bytes in name (< 65536) */
	uint32_t index;         /* position in the central directory */
	uint32_t crc32;         /* CRC-32 from the central directory */
	uint16_t method;        /* PT_ZIP_STORED or PT_ZIP_DEFLATED */
	uint16_t flags;         /* general purpose bit flags (CD) */
	uint16_t version_made;  /* CD "version made by" */
	uint16_t version_needed; /* CD "version needed to extract" */
	uint16_t mtime;         /* DOS time (CD) */
	uint16_t mdate;         /* DOS date (CD) */
	uint16_t lh_extra_len;  /* local header extra field length */
	bool has_descriptor;    /* a data descriptor follows the payload */
	bool zip64;             /* the CD entry carries a ZIP64 extra */
	uint64_t csize;         /* compressed size (ZIP64 resolved) */
	uint64_t usize;         /* uncompressed size (ZIP64 resolved) */
	uint64_t lho;           /* offset of the local header */
	uint64_t data_off;      /* offset of the payload: lho + 30 + n + e */
	uint64_t data_end;      /* data_off + csize */
	uint64_t end;           /* end of the record incl. data descriptor */
};

/* Summary of the archive as a whole.  Read-only. */
struct pt_zip_info {
	uint64_t cd_off;        /* central directory offset */
	uint64_t cd_size;       /* central directory size */
	uint64_t eocd_off;      /* classic EOCD offset */
	bool zip64;             /* ZIP64 end records present */
	uint64_t n_entries;     /* records */
	const char *prefix;     /* archive prefix ("archive", stem, ...) or ""
				 * when data.pkl sits at the root; see below */
};

/*
 * Open the archive in @src (borrowed; must outlive the index).
 *
 * The prefix is the folder that holds the record "data.pkl" (or, for
 * TorchScript or other layouts with no data.pkl, the part before the first
 * '/' of the first central-directory entry, torch's own rule); "" when
 * "data.pkl" is at the root or no entry has a '/'.  It is never derived from
 * the file name.
 *
 * Rejects (with -EBADMSG and a message naming the entry and the offset): no
 * end record, sentinels without ZIP64 records, counts beyond the central
 * directory, names past the end, local headers that do not match, payloads
 * outside the file or overlapping another record or the central directory,
 * duplicate names, names with NUL bytes; encrypted entries and methods other
 * than stored/deflated give -ENOTSUP; more than @lim->max_records -EFBIG.
 *
 * Returns 0 and sets *@out, or a negative errno with *@out NULL.
 */
int pt_zip_open(struct pt_zip **out, const struct pt_source *src,
		const struct pt_limits *lim, struct pt_error *err);

/* Free the index (NULL is fine).  Inflated buffers are freed too. */
void pt_zip_close(struct pt_zip *z);

/* What the index found (entries, prefix, ...); valid until close. */
const struct pt_zip_info *pt_zip_info(const struct pt_zip *z);

/* Entries in central-directory order: 0 <= i < info->n_entries. */
const struct pt_zip_entry *pt_zip_entry_at(const struct pt_zip *z, uint64_t i);

/* Find an entry by its full name, in O(1).  NULL if absent. */
const struct pt_zip_entry *pt_zip_find(const struct pt_zip *z,
				       const char *name);

/* Find "<prefix>/<rel>" (or "<rel>" when the prefix is ""). */
const struct pt_zip_entry *pt_zip_find_rel(const struct pt_zip *z,
					   const char *rel);

/*
 * The uncompressed bytes of a deflated entry, inflated once (on first call,
 * thread-safe) and kept until pt_zip_close().  *@out is borrowed.  For a
 * stored entry this returns -EINVAL: read those from the source instead.
 * Inflating more than @lim->max_inflate_bytes, or a stream whose size does
 * not match usize, fails.
 */
int pt_zip_inflated(struct pt_zip *z, const struct pt_zip_entry *e,
		    const uint8_t **out, struct pt_error *err);

/*
 * Read a whole entry (stored or deflated) into a new malloc()ed buffer with
 * one NUL byte appended (not counted in *@len).  For small records
 * (data.pkl, version, byteorder, JSON).  Caller frees *@out.
 */
int pt_zip_read(struct pt_zip *z, const struct pt_zip_entry *e,
		uint8_t **out, size_t *len, struct pt_error *err);

/*
 * Copy @n bytes at offset @off of the entry's uncompressed contents into
 * @buf.  Returns the bytes copied (short at the end of the entry) or -errno.
 * Stored entries are pread() from the source; deflated ones come from the
 * inflated buffer.
 */
long long pt_zip_pread(struct pt_zip *z, const struct pt_zip_entry *e,
		       void *buf, size_t n, uint64_t off, struct pt_error *err);

/*
 * Record that entry @e now has CRC-32 @crc (after a commit rewrote its
 * payload at the same offset and size).  Not thread-safe against a
 * concurrent commit; readers never look at CRCs.
 */
void pt_zip_set_crc(struct pt_zip *z, const struct pt_zip_entry *e,
		    uint32_t crc);

/* The source the index reads (borrowed). */
const struct pt_source *pt_zip_source(const struct pt_zip *z);

/*
 * After a commit rewrote the archive with the same records (names, sizes,
 * methods, order) at possibly new offsets: take @fresh's layout (offsets,
 * CRCs, flags, end records) into @z, whose entries stay where they are in
 * memory, and move each file offset *@offs[i] (UINT64_MAX: skipped) that
 * pointed into a record's payload to the same byte in the new layout.
 * -EIO when @fresh does not hold the same records; @z is then unchanged.
 */
int pt_zip_adopt_layout(struct pt_zip *z, const struct pt_zip *fresh,
			uint64_t **offs, size_t n_offs, struct pt_error *err);

#endif /* PTFS_CORE_ZIP_H */
