/* SPDX-License-Identifier: MIT */
/*
 * journal.c -- patch a file in a clone or in place behind an undo journal,
 * and recover from an interrupted in-place patch (journal.h).
 */
#include "container/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/rd.h"
#include "io/fd.h"

#define J_MAGIC "PTFSJRNL"
#define J_DONE "PTFSDONE"
#define J_END "PTFSJEND"
#define J_HDR 80u
#define J_TRAILER 12u
#define J_VERSION 2u
#define J_CHUNK (1u << 20)
#define J_MAX_RANGES (1u << 20)
#define J_SECTOR 512u           /* new-bytes CRC granularity (disk sector) */

/* Sectors that [@off, @off + @len) of the file touches: pieces split at
 * multiples of J_SECTOR of the FILE offset, where page-cache writeback and
 * the disk tear a write (never inside one). */
static uint64_t sectors(uint64_t off, uint64_t len)
{
	return len ? (off + len - 1) / J_SECTOR - off / J_SECTOR + 1 : 0;
}

/* The next chunk of a range at file offset @at, @left bytes to go: at most
 * J_CHUNK and ending on a sector boundary unless it ends the range. */
static size_t chunk_at(uint64_t at, uint64_t left)
{
	uint64_t k = J_CHUNK - at % J_SECTOR;

	return (size_t)(left < k ? left : k);
}

/* Length of the sector piece at file offset @at, @left bytes to go. */
static size_t piece_at(uint64_t at, size_t left)
{
	size_t k = J_SECTOR - (size_t)(at % J_SECTOR);

	return left < k ? left : k;
}

/* Stream the new bytes of @p into @fd (step "patch" per write). */
static int write_patch(int fd, const struct pt_patch *p, uint8_t *buf,
		       const char *what, struct pt_error *err)
{
	uint64_t at = 0;
	int rc;

	if (!p->read)
		rc = pt_pwrite_step(fd, p->data, (size_t)p->len, p->off, "patch");
	else
		rc = 0;
	while (rc == 0 && p->read && at < p->len) {
		/* each write ends on a sector of the file, so a crash tears
		 * only there (the journal's sector CRCs: verify_sectors) */
		size_t k = chunk_at(p->off + at, p->len - at);

		rc = p->read(p->ctx, buf, k, at);
		if (rc)
			return pt_fail(err, rc, "new contents at %llu: %s",
				       (unsigned long long)(p->off + at),
				       strerror(-rc));
		rc = pt_pwrite_step(fd, buf, k, p->off + at, "patch");
		at += k;
	}
	if (rc)
		return pt_fail(err, rc, "write to %s at %llu: %s", what,
			       (unsigned long long)p->off, strerror(-rc));
	return 0;
}

/* Patch a copy of @path beside it in @r (a reflink clone when @clone,
 * else a full copy), not yet put in place: 0, or -errno with @r freed. */
static int patch_stage(struct pt_replace *r, const char *path,
		       const struct pt_patch *p, size_t n,
		       const struct pt_replace_expect *expect, bool clone,
		       struct pt_error *err)
{
	uint8_t *buf = NULL;
	size_t i;
	int rc;

	rc = pt_replace_begin(r, path, expect, err);
	if (rc)
		return rc;
	/* r->orig: the file begin() checked, locked until the rename */
	rc = clone ? pt_replace_clone(r, r->orig, err) :
		     pt_replace_copy(r, r->orig, 0, (uint64_t)r->st.st_size, 0, err);
	buf = rc ? NULL : malloc(J_CHUNK);
	if (!rc && !buf)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < n && rc == 0; i++)
		rc = write_patch(r->fd, &p[i], buf, r->tmp, err);
	free(buf);
	if (rc)
		pt_replace_abort(r);
	return rc;
}

/* Patch a copy of @path beside it, then put it in place: the two
 * replacing ways. */
static int patch_replaced(const char *path, const struct pt_patch *p,
			  size_t n, const struct pt_replace_expect *expect,
			  bool clone, struct pt_error *err)
{
	struct pt_replace r;
	int rc = patch_stage(&r, path, p, n, expect, clone, err);

	return rc ? rc : pt_replace_commit(&r, err);
}

int pt_patch_clone(const char *path, const struct pt_patch *p, size_t n,
		   const struct pt_replace_expect *expect,
		   struct pt_error *err)
{
	return patch_replaced(path, p, n, expect, true, err);
}

/*
 * The full rewrite: copy the whole file to a temporary beside it
 * (copy_file_range(): shared extents where the filesystem can), patch the
 * copy, fsync, rename (pt_replace_*).  0 or -errno, the file untouched.
 */
static int pt_patch_copy(const char *path, const struct pt_patch *p,
			 size_t n, const struct pt_replace_expect *expect,
			 struct pt_error *err)
{
	return patch_replaced(path, p, n, expect, false, err);
}

static const char *const way_names[] = {
	[PT_COMMIT_AUTO] = "auto", [PT_COMMIT_REWRITE] = "rewrite",
	[PT_COMMIT_CLONE] = "clone", [PT_COMMIT_INPLACE] = "inplace",
};

int pt_commit_way_parse(const char *s, enum pt_commit_way *out)
{
	size_t i;

	for (i = 0; i < sizeof(way_names) / sizeof(way_names[0]); i++)
		if (strcmp(s, way_names[i]) == 0) {
			*out = (enum pt_commit_way)i;
			return 0;
		}
	return -EINVAL;
}

const char *pt_commit_way_name(enum pt_commit_way w)
{
	return (size_t)w < sizeof(way_names) / sizeof(way_names[0]) ?
	       way_names[w] : "?";
}

int pt_patch_apply(const char *path, enum pt_commit_way way,
		   const struct pt_patch *p, size_t n,
		   const struct pt_replace_expect *expect, bool own_rewrite,
		   bool *no_clone, enum pt_commit_way *used,
		   struct pt_error *err)
{
	int rc;

	if (way == PT_COMMIT_CLONE || (way == PT_COMMIT_AUTO && !*no_clone)) {
		*used = PT_COMMIT_CLONE;
		rc = pt_patch_clone(path, p, n, expect, err);
		if (rc != -EOPNOTSUPP && rc != -EXDEV && rc != -EINVAL &&
		    rc != -ENOTTY)
			return rc;
		if (way == PT_COMMIT_CLONE)
			return pt_fail(err, -EOPNOTSUPP,
				       "the filesystem of %s cannot clone files (%s); use commit=inplace or commit=rewrite",
				       path, strerror(-rc));
		*no_clone = true;
	}
	if (way == PT_COMMIT_INPLACE) {
		*used = PT_COMMIT_INPLACE;
		return pt_patch_inplace(path, p, n, expect, err);
	}
	*used = PT_COMMIT_REWRITE;
	if (own_rewrite)
		return 1;
	return pt_patch_copy(path, p, n, expect, err);
}

static bool cannot_clone(int rc)
{
	return rc == -EOPNOTSUPP || rc == -EXDEV || rc == -EINVAL ||
	       rc == -ENOTTY;
}

/* Every file's patched copy written and sealed (journal.h), one after the
 * other (a sealed copy holds no descriptor: only its target's, and lock):
 * 0, or -errno with every copy removed and every file untouched. */
static int stage_all(const struct pt_patch_file *f, size_t n, bool clone,
		     struct pt_replace *r, struct pt_error *err)
{
	size_t i, k;
	int rc = 0;

	for (i = 0; i < n && rc == 0; i++) {
		rc = patch_stage(&r[i], f[i].path, f[i].p, f[i].n,
				 &f[i].expect, clone, err);
		if (rc == 0)
			rc = pt_replace_seal(&r[i], err);
	}
	/* the failed one (i - 1) freed itself */
	for (k = 0; rc && k + 1 < i; k++)
		pt_replace_abort(&r[k]);
	return rc;
}

/* The renames, in order.  One failing after others succeeded (the kernel
 * refusing a rename it allowed beside it: an I/O error) leaves those
 * replaced: the message names them. */
static int rename_all(struct pt_replace *r, size_t n, struct pt_error *err)
{
	struct pt_buf done;
	size_t i, k;
	int rc = 0;

	pt_buf_init(&done);
	for (i = 0; i < n && rc == 0; i++) {
		char *real = strdup(r[i].real ? r[i].real : "");

		rc = pt_replace_rename(&r[i], err);
		if (rc == 0)
			pt_buf_printf(&done, "%s%s", done.len ? ", " : "", real ? real : "?");
		free(real);
	}
	if (rc) {
		for (k = i; k < n; k++)
			pt_replace_abort(&r[k]);
		if (done.len)
			pt_error_prefix(err, "only %s replaced (the others are as they were)",
					done.p);
	}
	pt_buf_free(&done);
	return rc;
}

int pt_patch_apply_files(const struct pt_patch_file *f, size_t n,
			 enum pt_commit_way way, bool *no_clone,
			 enum pt_commit_way *used, struct pt_error *err)
{
	struct pt_replace *r;
	bool clone = way == PT_COMMIT_CLONE || (way == PT_COMMIT_AUTO && !*no_clone);
	int rc;

	if (n == 1)
		return pt_patch_apply(f[0].path, way, f[0].p, f[0].n, &f[0].expect,
				      false, no_clone, used, err);
	*used = way == PT_COMMIT_INPLACE ? way : PT_COMMIT_REWRITE;
	if (n == 0)
		return 0;
	if (way == PT_COMMIT_INPLACE)
		return pt_fail(err, -EOPNOTSUPP,
			       "commit=inplace patches one file at a time, and this commit writes %zu (%s, ...): with commit=clone or commit=rewrite they are replaced together",
			       n, f[0].path);
	r = calloc(n, sizeof(*r));
	if (!r)
		return pt_fail(err, -ENOMEM, "out of memory");
	*used = clone ? PT_COMMIT_CLONE : PT_COMMIT_REWRITE;
	rc = stage_all(f, n, clone, r, err);
	if (clone && cannot_clone(rc) && way == PT_COMMIT_AUTO) {
		pt_error_clear(err);
		*no_clone = true;
		*used = PT_COMMIT_REWRITE;
		rc = stage_all(f, n, false, r, err);
	} else if (clone && cannot_clone(rc)) {
		rc = pt_fail(err, -EOPNOTSUPP,
			     "the filesystem of %s cannot clone files (%s); use commit=rewrite",
			     f[0].path, strerror(-rc));
	}
	if (rc == 0)
		rc = rename_all(r, n, err);
	free(r);
	return rc;
}

/* Sectors of a range of @len bytes (CRC'd one by one). */
/* Append the CRC-32 of each J_SECTOR bytes of @p's NEW contents: recovery
 * then knows every sector of the range must hold its old or its new bytes,
 * and anything else means the file was rewritten since (journal.h). */
static int write_new_crcs(int jfd, const struct pt_patch *p, uint8_t *buf,
			  uint64_t *pos, uint32_t *crc)
{
	uint8_t out[4 * (J_CHUNK / J_SECTOR + 1)];
	uint64_t at;
	int rc = 0;

	for (at = 0; rc == 0 && at < p->len;) {
		size_t k = chunk_at(p->off + at, p->len - at);
		const uint8_t *src = buf;
		size_t o, sl, m = 0;

		if (p->read)
			rc = p->read(p->ctx, buf, k, at);
		else
			src = (const uint8_t *)p->data + at;
		for (o = 0; rc == 0 && o < k; o += sl, m += 4) {
			sl = piece_at(p->off + at + o, k - o);
			pt_put32(out + m, libdeflate_crc32(0, src + o, sl));
		}
		if (rc)
			break;
		*crc = libdeflate_crc32(*crc, out, m);
		rc = pt_pwrite_step(jfd, out, m, *pos, "jwrite");
		*pos += m;
		at += k;
	}
	return rc;
}

/* Write the journal for @p into @jfd: header, ranges, old bytes of @in,
 * the new bytes' sector CRCs, trailer; then fsync it. */
static int journal_write(int jfd, int in, const struct stat *st,
			 const struct pt_patch *p, size_t n, uint8_t *buf,
			 const char *jpath, struct pt_error *err)
{
	uint8_t h[J_HDR];
	uint8_t t[J_TRAILER];
	uint64_t pos = J_HDR;
	uint64_t old = 0;
	uint32_t crc = 0;
	size_t i;
	int rc = 0;

	for (i = 0; i < n; i++)
		old += p[i].len;
	memset(h, 0, sizeof(h));
	memcpy(h, J_MAGIC, 8);
	pt_put32(h + 8, J_VERSION);
	pt_put32(h + 12, J_HDR);
	pt_put64(h + 16, (uint64_t)st->st_size);
	pt_put64(h + 24, n);
	pt_put64(h + 32, old);
	pt_put64(h + 40, (uint64_t)st->st_ino);
	pt_put64(h + 48, J_SECTOR);
	pt_put64(h + 56, (uint64_t)st->st_dev);
	pt_put32(h + 72, libdeflate_crc32(0, h, 72));
	for (i = 0; i < n && rc == 0; i++) {
		uint8_t r[16];

		pt_put64(r, p[i].off);
		pt_put64(r + 8, p[i].len);
		crc = libdeflate_crc32(crc, r, 16);
		rc = pt_pwrite_step(jfd, r, 16, pos, "jwrite");
		pos += 16;
	}
	for (i = 0; i < n && rc == 0; i++) {
		uint64_t at;

		for (at = 0; rc == 0 && at < p[i].len;) {
			size_t k = p[i].len - at < J_CHUNK ? (size_t)(p[i].len - at) : J_CHUNK;

			rc = pt_pread_full(in, buf, k, p[i].off + at);
			if (rc)
				return pt_fail(err, rc, "read old bytes at %llu: %s",
					       (unsigned long long)(p[i].off + at),
					       strerror(-rc));
			crc = libdeflate_crc32(crc, buf, k);
			rc = pt_pwrite_step(jfd, buf, k, pos, "jwrite");
			pos += k;
			at += k;
		}
	}
	for (i = 0; i < n && rc == 0; i++)
		rc = write_new_crcs(jfd, &p[i], buf, &pos, &crc);
	pt_put32(t, crc);
	memcpy(t + 4, J_END, 8);
	if (!rc)
		rc = pt_pwrite_step(jfd, t, sizeof(t), pos, "jwrite");
	/* the header last: a journal without it is plainly incomplete */
	if (!rc)
		rc = pt_pwrite_step(jfd, h, sizeof(h), 0, "jwrite");
	if (!rc)
		rc = pt_fault("jfsync");
	if (!rc && fsync(jfd) != 0)
		rc = -errno;
	if (rc)
		return pt_fail(err, rc, "write journal %s: %s", jpath,
			       strerror(-rc));
	return 0;
}

/*
 * Mark the journal finished and remove it, then fsync the directory.  The
 * removal is the commit point (as in SQLite): once it is gone the new
 * bytes stay.  Marking it first means that a journal which reappears after
 * a crash (the directory not yet synced) is removed, not rolled back.
 * 0 when the commit stands (journal gone, or marked finished: the next
 * open removes it), or -errno when the journal is still valid (the caller
 * rolls back).
 */
static int journal_finish(int jfd, const char *jpath)
{
	bool done = pt_pwrite_step(jfd, J_DONE, 8, 0, "jdone") == 0 &&
		    fdatasync(jfd) == 0;
	int rc = pt_fault("jremove");

	if (!rc && unlink(jpath) != 0)
		rc = -errno;
	if (rc && !done)
		return rc;      /* still a valid journal */
	(void)pt_fsync_parent(jpath);
	return 0;
}

/* Check @p: ranges inside a file of @size bytes, sorted, disjoint. */
static int check_ranges(const struct pt_patch *p, size_t n, uint64_t size,
			const char *path, struct pt_error *err)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i].off > size || p[i].len > size - p[i].off ||
		    (i > 0 && p[i].off < p[i - 1].off + p[i - 1].len))
			return pt_fail(err, -EINVAL,
				       "%s: patch %zu [%llu, +%llu) outside the file or overlapping",
				       path, i, (unsigned long long)p[i].off,
				       (unsigned long long)p[i].len);
	return n > J_MAX_RANGES ? pt_fail(err, -E2BIG, "%s: too many ranges", path) : 0;
}

static int roll_back(int jfd, const char *jpath, const char *real, int fd,
		     struct pt_error *err);

/*
 * Writing to a file clears its set-id bits (unless the writer may keep
 * them) and its file capabilities (always): what a patch or a rollback
 * writes in place must not change more than the bytes.  Saved before,
 * put back after the writes (best effort: only who could set them can).
 */
struct privs {
	mode_t mode;
	uint8_t cap[64];
	ssize_t caplen;
};

static void privs_save(int fd, struct privs *pv)
{
	struct stat st;

	pv->mode = fstat(fd, &st) == 0 ? st.st_mode & 07777 : 0;
	pv->caplen = fgetxattr(fd, "security.capability", pv->cap, sizeof(pv->cap));
}

static void privs_put(int fd, const struct privs *pv)
{
	if (pv->mode & 06000)
		(void)fchmod(fd, pv->mode);
	if (pv->caplen > 0)
		(void)fsetxattr(fd, "security.capability", pv->cap, (size_t)pv->caplen, 0);
}

static int patch_all(int fd, int jfd, const char *real, const char *jpath,
		     const struct pt_patch *p, size_t n, uint8_t *buf,
		     struct pt_error *err)
{
	struct privs pv;
	size_t i;
	int rc = 0;

	privs_save(fd, &pv);
	for (i = 0; i < n && rc == 0; i++)
		rc = write_patch(fd, &p[i], buf, real, err);
	privs_put(fd, &pv);
	if (!rc) {
		rc = pt_fault("pfsync");
		if (!rc && fsync(fd) != 0)
			rc = -errno;
		if (rc)
			pt_fail(err, rc, "fsync %s: %s", real, strerror(-rc));
	}
	if (!rc) {
		rc = journal_finish(jfd, jpath);
		if (!rc)
			return 0;
		pt_fail(err, rc, "remove journal %s: %s", jpath, strerror(-rc));
	}
	/* undo now; if that fails too, the journal stays for the next open */
	{
		struct pt_error e2;

		pt_error_clear(&e2);
		if (roll_back(jfd, jpath, real, fd, &e2) != 0)
			pt_error_prefix(err, "%s; the journal %s stays: 'ptfs recover %s' (or the next writable open) rolls it back",
					e2.msg, jpath, real);
	}
	return rc;
}

int pt_patch_inplace(const char *path, const struct pt_patch *p, size_t n,
		     const struct pt_replace_expect *expect,
		     struct pt_error *err)
{
	struct pt_replace_expect none;
	struct stat st;
	char *real = NULL;
	char *jpath = NULL;
	uint8_t *buf = NULL;
	int fd = -1;
	int jfd = -1;
	int rc;

	memset(&none, 0, sizeof(none));
	if (!expect)
		expect = &none;
	rc = pt_resolve_path(path, &real, err);
	if (rc)
		return rc;
	fd = open(real, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		rc = pt_fail(err, -errno, "%s: %s", real, strerror(errno));
		goto out;
	}
	rc = pt_lock_file(fd, real, err);   /* released by close() */
	if (rc)
		goto out;
	/* after the lock: another commit may have finished while we waited */
	if (fstat(fd, &st) != 0) {
		rc = pt_fail(err, -errno, "%s: %s", real, strerror(errno));
		goto out;
	}
	if ((expect->dev && expect->dev != st.st_dev) ||
	    (expect->ino && expect->ino != st.st_ino) ||
	    (expect->size && expect->size != st.st_size) ||
	    ((expect->mtime.tv_sec || expect->mtime.tv_nsec) &&
	     (expect->mtime.tv_sec != st.st_mtim.tv_sec ||
	      expect->mtime.tv_nsec != st.st_mtim.tv_nsec))) {
		rc = pt_fail(err, -ESTALE, "%s: checkpoint changed on disk since it was opened",
			     real);
		goto out;
	}
	rc = check_ranges(p, n, (uint64_t)st.st_size, real, err);
	buf = malloc(J_CHUNK);
	if (!rc && (!buf || asprintf(&jpath, "%s.ptfs-journal", real) < 0)) {
		jpath = NULL;
		rc = pt_fail(err, -ENOMEM, "out of memory");
	}
	if (rc)
		goto out;
	rc = pt_fault("jcreate");
	jfd = rc ? -1 : open(jpath, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (jfd < 0) {
		rc = rc ? rc : -errno;
		pt_fail(err, rc == -EEXIST ? -EBUSY : rc, "create journal %s: %s", jpath,
			rc == -EEXIST ? "something is already there (an interrupted commit: run 'ptfs recover' on the checkpoint)"
				      : strerror(-rc));
		rc = rc == -EEXIST ? -EBUSY : rc;
		goto out;
	}
	/* the checkpoint's owner must be able to roll it back after a crash,
	 * and recovery trusts no journal of another owner (journal.h): root
	 * gives it away, anyone else owns it or cannot give it */
	if (fchown(jfd, st.st_uid, st.st_gid) != 0 && geteuid() == 0) {
		struct stat js;
		int e = errno;

		/* a filesystem that cannot chown may have made it theirs */
		if (fstat(jfd, &js) != 0 || js.st_uid != st.st_uid) {
			rc = pt_fail(err, -e, "give journal %s to the checkpoint's owner: %s",
				     jpath, strerror(e));
			unlink(jpath);
			goto out;
		}
	}
	rc = journal_write(jfd, fd, &st, p, n, buf, jpath, err);
	if (!rc) {
		rc = pt_fsync_parent(jpath);
		if (rc)
			pt_fail(err, rc, "fsync the directory of %s: %s", jpath,
				strerror(-rc));
	}
	if (rc) {
		/* the checkpoint was not touched */
		unlink(jpath);
		goto out;
	}
	rc = patch_all(fd, jfd, real, jpath, p, n, buf, err);
out:
	if (jfd >= 0)
		close(jfd);
	if (fd >= 0)
		close(fd);
	free(buf);
	free(jpath);
	free(real);
	return rc;
}

/* ---- recovery ---- */

/* A journal read: the ranges are in memory, the old bytes stay in the
 * file (they may be large). */
struct jinfo {
	uint64_t size;          /* the file's size it was made for */
	uint64_t ino;
	uint64_t dev;
	uint64_t n;
	uint64_t old;
	uint64_t *ranges;       /* 2n: off, len */
	uint64_t crc_off;       /* where the new bytes' sector CRCs start */
	bool done;              /* marked finished */
	bool zero;              /* its header was never written */
	bool fields_ok;         /* the header's fields are sane */
	bool ranges_ok;         /* header and range table read: the file's
				 * sectors can be compared (even when the
				 * rest is damaged) */
};

/* The range table of @j (already sized) from @jfd: sorted, disjoint,
 * inside the file, adding up to the old bytes; the sector CRCs' size. */
static int read_ranges(int jfd, struct jinfo *j, uint64_t *crc_bytes,
		       char *why, size_t cap)
{
	uint64_t i, sum = 0, end = 0;
	uint8_t *raw = (uint8_t *)j->ranges;

	if (pt_pread_full(jfd, raw, (size_t)(16 * j->n), J_HDR) != 0) {
		snprintf(why, cap, "truncated range table");
		return -EBADMSG;
	}
	*crc_bytes = 0;
	for (i = 0; i < 2 * j->n; i++)
		j->ranges[i] = pt_le64(raw + 8 * i);
	for (i = 0; i < j->n; i++) {
		uint64_t off = j->ranges[2 * i], len = j->ranges[2 * i + 1];

		if (off > j->size || len > j->size - off || off < end) {
			snprintf(why, cap, "range %llu outside the file or out of order",
				 (unsigned long long)i);
			return -EBADMSG;
		}
		end = off + len;
		sum += len;             /* <= size: the ranges are disjoint */
		*crc_bytes += 4 * sectors(off, len);
	}
	if (sum != j->old) {
		snprintf(why, cap, "ranges add up to %llu bytes, not %llu",
			 (unsigned long long)sum, (unsigned long long)j->old);
		return -EBADMSG;
	}
	return 0;
}

/* CRC-32 of the journal body [J_HDR, @end) against the trailer's. */
static int check_body(int jfd, uint64_t end, char *why, size_t cap)
{
	uint8_t t[J_TRAILER];
	uint8_t *buf = malloc(J_CHUNK);
	uint32_t crc = 0;
	uint64_t pos;

	if (!buf) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	for (pos = J_HDR; pos < end;) {
		size_t k = end - pos < J_CHUNK ? (size_t)(end - pos) : J_CHUNK;

		if (pt_pread_full(jfd, buf, k, pos) != 0)
			break;
		crc = libdeflate_crc32(crc, buf, k);
		pos += k;
	}
	free(buf);
	if (pos != end || pt_pread_full(jfd, t, J_TRAILER, end) != 0 ||
	    pt_le32(t) != crc || memcmp(t + 4, J_END, 8) != 0) {
		snprintf(why, cap, "checksum mismatch");
		return -EBADMSG;
	}
	return 0;
}

/* The header @h (@got bytes of it read) into @j; -EBADMSG with @why. */
static int parse_header(const uint8_t *h, ssize_t got, struct jinfo *j,
			char *why, size_t cap)
{
	uint8_t c[J_HDR];
	ssize_t i;

	for (i = 0; i < got && h[i] == 0; i++)
		;
	if (i == got) {
		j->zero = true;
		snprintf(why, cap, "its header was never written");
		return -EBADMSG;
	}
	if (got < (ssize_t)J_HDR) {
		snprintf(why, cap, "truncated (%lld bytes)", (long long)got);
		return -EBADMSG;
	}
	/* the CRC covers the header as first written, "PTFSJRNL" */
	memcpy(c, h, J_HDR);
	memcpy(c, J_MAGIC, 8);
	j->done = memcmp(h, J_DONE, 8) == 0;
	if (pt_le32(h + 8) != J_VERSION || pt_le32(h + 12) != J_HDR ||
	    pt_le64(h + 48) != J_SECTOR) {
		snprintf(why, cap, "bad header (not a version %u journal)", J_VERSION);
		return -EBADMSG;
	}
	j->size = pt_le64(h + 16);
	j->n = pt_le64(h + 24);
	j->old = pt_le64(h + 32);
	j->ino = pt_le64(h + 40);
	j->dev = pt_le64(h + 56);
	if (j->n > J_MAX_RANGES || j->size > (uint64_t)INT64_MAX ||
	    j->old > j->size) {
		snprintf(why, cap, "bad size fields (%llu ranges, %llu bytes)",
			 (unsigned long long)j->n, (unsigned long long)j->old);
		return -EBADMSG;
	}
	/* damaged, but its fields may still say where to look (the caller
	 * reads the ranges to tell what the file holds, nothing more) */
	j->fields_ok = true;
	if ((!j->done && memcmp(h, J_MAGIC, 8) != 0) || pt_le64(h + 64) != 0 ||
	    pt_le32(h + 72) != libdeflate_crc32(0, c, 72) || pt_le32(h + 76) != 0) {
		snprintf(why, cap, "bad header checksum");
		return -EBADMSG;
	}
	return 0;
}

/* Read and check the journal @jfd.  0 valid; -EBADMSG with a reason in
 * @why when incomplete or damaged (j->ranges_ok says whether its range
 * table could still be read); -ENOMEM. */
static int journal_read(int jfd, struct jinfo *j, char *why, size_t cap)
{
	struct stat st;
	uint8_t h[J_HDR];
	uint64_t crc_bytes = 0;
	char w2[128];
	ssize_t got;
	int hrc;
	int rc;

	memset(j, 0, sizeof(*j));
	got = fstat(jfd, &st) == 0 ? pt_pread_upto(jfd, h, J_HDR, 0) : -errno;
	if (got < 0) {
		snprintf(why, cap, "%s", strerror((int)-got));
		return -EBADMSG;
	}
	hrc = parse_header(h, got, j, why, cap);
	if (hrc && !j->fields_ok)
		return hrc;
	if (16 * j->n > (uint64_t)st.st_size) {
		if (!hrc)
			snprintf(why, cap, "truncated or bad size fields (%lld bytes, %llu ranges)",
				 (long long)st.st_size, (unsigned long long)j->n);
		return -EBADMSG;
	}
	j->ranges = malloc((size_t)(16 * j->n + 1));
	if (!j->ranges) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	rc = read_ranges(jfd, j, &crc_bytes, hrc ? w2 : why, hrc ? sizeof(w2) : cap);
	j->crc_off = J_HDR + 16 * j->n + j->old;
	j->ranges_ok = rc == 0;
	if (rc || hrc)
		return -EBADMSG;
	if (j->crc_off + crc_bytes + J_TRAILER != (uint64_t)st.st_size) {
		snprintf(why, cap, "truncated or damaged (%lld bytes, %llu expected)",
			 (long long)st.st_size,
			 (unsigned long long)(j->crc_off + crc_bytes + J_TRAILER));
		return -EBADMSG;
	}
	return check_body(jfd, (uint64_t)st.st_size - J_TRAILER, why, cap);
}

/*
 * What the file holds in the journal's ranges, sector by sector: its old
 * bytes, its new ones (or both: a patch may write what was there),
 * neither (written by someone else since), not the old ones but maybe the
 * new (a damaged journal without their CRC), or cannot tell (the journal
 * has lost that sector's old bytes and new CRC).  The sectors known not
 * to hold the old bytes are named as byte ranges, the first few.
 */
struct census {
	uint64_t sectors;
	uint64_t old;           /* hold the old bytes */
	uint64_t new_;          /* hold the new bytes */
	uint64_t other;         /* neither */
	uint64_t changed;       /* not the old bytes; the new ones? unknown */
	uint64_t blind;         /* cannot tell */
	uint64_t other_at;      /* the first byte of the first "other" */
	uint64_t run_at;        /* the run of not-old sectors being built */
	uint64_t run_end;
	unsigned runs;          /* not-old runs in all */
	char list[160];         /* the first of them, "[a, b) ..." */
};

static void census_flush(struct census *c)
{
	size_t l = strlen(c->list);

	if (c->run_end == c->run_at)
		return;
	if (c->runs < 4 && l + 48 < sizeof(c->list))
		snprintf(c->list + l, sizeof(c->list) - l, "%s[%llu, %llu)",
			 l ? " " : "", (unsigned long long)c->run_at,
			 (unsigned long long)c->run_end);
	c->runs++;
	c->run_at = c->run_end = 0;
}

/* Judge the sector of @sl bytes at file offset @at: @cur its bytes now,
 * @old its old bytes (NULL: not in the journal), @crc its new bytes' CRC
 * (NULL: not in the journal). */
static void census_add(struct census *c, const uint8_t *cur,
		       const uint8_t *old, const uint8_t *crc, uint64_t at,
		       size_t sl)
{
	bool is_old = old && memcmp(cur, old, sl) == 0;
	bool is_new = crc && libdeflate_crc32(0, cur, sl) == pt_le32(crc);

	c->sectors++;
	c->old += is_old;
	c->new_ += is_new;
	if (!is_old && !is_new && old && crc && c->other++ == 0)
		c->other_at = at;
	else if (!is_old && !is_new && old)
		c->changed++;
	else if (!is_old && !is_new)
		c->blind++;
	if (is_old || (!old && !is_new))
		return;
	if (c->run_end != at)
		census_flush(c);
	if (c->run_end == c->run_at)
		c->run_at = at;
	c->run_end = at + sl;
}

/* Take the census of @fd (the file) against the journal @jfd. */
static int census_take(int jfd, int fd, const struct jinfo *j,
		       struct census *c)
{
	uint8_t *old = malloc(J_CHUNK), *cur = malloc(J_CHUNK);
	uint8_t crcs[4 * (J_CHUNK / J_SECTOR + 1)];
	uint64_t pos = J_HDR + 16 * j->n, cpos = j->crc_off, i;
	int rc = old && cur ? 0 : -ENOMEM;

	memset(c, 0, sizeof(*c));
	for (i = 0; i < j->n && rc == 0; i++) {
		uint64_t off = j->ranges[2 * i], len = j->ranges[2 * i + 1], at;

		for (at = 0; rc == 0 && at < len;) {
			size_t k = chunk_at(off + at, len - at);
			size_t ns = (size_t)sectors(off + at, k);
			ssize_t go = pt_pread_upto(jfd, old, k, pos);
			ssize_t gc = pt_pread_upto(jfd, crcs, 4 * ns, cpos);
			size_t o, sl, m;

			rc = pt_pread_full(fd, cur, k, off + at);
			for (o = m = 0; rc == 0 && o < k; o += sl, m += 4) {
				sl = piece_at(off + at + o, k - o);
				census_add(c, cur + o,
					   go >= (ssize_t)(o + sl) ? old + o : NULL,
					   gc >= (ssize_t)(m + 4) ? crcs + m : NULL,
					   off + at + o, sl);
			}
			pos += k;
			cpos += 4 * ns;
			at += k;
		}
	}
	census_flush(c);
	free(old);
	free(cur);
	return rc;
}

/* One clause saying what the census found, for a journal not applied;
 * @damaged: its checksums failed, so a sector that matches neither its
 * old bytes nor its new CRC may be the journal's fault. */
static void census_say(struct census c, bool damaged, char *out, size_t cap)
{
	const char *more = c.runs > 4 ? " ..." : "";
	char neither[96] = "";

	if (c.other && !damaged) {
		snprintf(out, cap, "the checkpoint was written by another program after the interrupted commit (bytes at %llu are neither the old nor the new ones)",
			 (unsigned long long)c.other_at);
		return;
	}
	if (c.other)
		snprintf(neither, sizeof(neither), " (at %llu neither the old nor the new ones)",
			 (unsigned long long)c.other_at);
	c.changed += c.other;
	if (c.old == c.sectors)
		snprintf(out, cap, "the checkpoint holds the old bytes in every range the journal covers");
	else if (c.new_ == c.sectors)
		snprintf(out, cap, "the checkpoint holds the new bytes in every range the journal covers");
	else if (!c.changed && !c.blind)
		snprintf(out, cap, "the checkpoint is TORN: bytes %s%s hold the new contents, the rest of the journal's ranges the old",
			 c.list, more);
	else if (!c.runs)
		snprintf(out, cap, "the checkpoint holds the old bytes in the %llu sectors the journal can tell of; %llu more cannot be told",
			 (unsigned long long)c.old, (unsigned long long)c.blind);
	else
		snprintf(out, cap, "the checkpoint %s TORN: bytes %s%s are not the journal's old bytes%s, and whether they are the new ones the damaged journal cannot tell; %llu of %llu sectors cannot be told at all",
			 c.old ? "is" : "may be", c.list, more, neither,
			 (unsigned long long)c.blind, (unsigned long long)c.sectors);
}

/* Write the journal's old bytes back into @fd and fsync it. */
static int restore(int jfd, int fd, const struct jinfo *j, const char *real,
		   struct pt_error *err)
{
	struct privs pv;
	uint8_t *buf = malloc(J_CHUNK);
	uint64_t pos = J_HDR + 16 * j->n;
	uint64_t i;
	int rc = 0;

	if (!buf)
		return pt_fail(err, -ENOMEM, "out of memory");
	privs_save(fd, &pv);
	for (i = 0; i < j->n && rc == 0; i++) {
		uint64_t off = j->ranges[2 * i];
		uint64_t len = j->ranges[2 * i + 1];
		uint64_t at;

		for (at = 0; rc == 0 && at < len;) {
			size_t k = chunk_at(off + at, len - at);

			rc = pt_pread_full(jfd, buf, k, pos);
			if (!rc)
				rc = pt_pwrite_step(fd, buf, k, off + at, "restore");
			pos += k;
			at += k;
		}
	}
	free(buf);
	privs_put(fd, &pv);
	if (!rc && fsync(fd) != 0)
		rc = -errno;
	if (rc)
		return pt_fail(err, rc, "roll back %s: %s", real, strerror(-rc));
	return 0;
}

/* Roll @real (open as @fd) back from its own journal @jfd, just written
 * by this process and still open (a failed commit undone at once). */
static int roll_back(int jfd, const char *jpath, const char *real, int fd,
		     struct pt_error *err)
{
	struct census c;
	struct jinfo j;
	char why[128];
	int rc;

	rc = journal_read(jfd, &j, why, sizeof(why));
	if (rc)
		pt_fail(err, rc, "%s: %s", jpath, why);
	if (rc == 0)
		rc = census_take(jfd, fd, &j, &c);
	if (rc == 0 && c.other)
		rc = pt_fail(err, -EBUSY, "%s: changed during the commit (bytes at %llu are neither the old nor the new ones): not rolled back",
			     real, (unsigned long long)c.other_at);
	if (rc == 0)
		rc = restore(jfd, fd, &j, real, err);
	else
		pt_fail(err, rc, "%s: %s", real, strerror(-rc));
	if (rc == 0) {
		rc = journal_finish(jfd, jpath);
		if (rc)
			pt_fail(err, rc, "remove journal %s after rolling back: %s",
				jpath, strerror(-rc));
	}
	free(j.ranges);
	return rc;
}

/* Rename @jpath aside, never over an earlier one (each is evidence):
 * .invalid, .invalid.1, ...; 0 with the name in *@aside, or -errno. */
static int set_aside(const char *jpath, char **aside)
{
	int rc = -EEXIST;
	int i;

	*aside = NULL;
	for (i = 0; rc == -EEXIST && i < 1000; i++) {
		free(*aside);
		if ((i ? asprintf(aside, "%s.invalid.%d", jpath, i)
		       : asprintf(aside, "%s.invalid", jpath)) < 0) {
			*aside = NULL;
			return -ENOMEM;
		}
		rc = renameat2(AT_FDCWD, jpath, AT_FDCWD, *aside, RENAME_NOREPLACE) == 0 ? 0 : -errno;
		if (rc == -EINVAL || rc == -ENOSYS) {
			/* no RENAME_NOREPLACE here: link + unlink */
			rc = link(jpath, *aside) == 0 ? 0 : -errno;
			if (rc == 0)
				rc = unlink(jpath) == 0 ? 0 : -errno;
		}
	}
	if (rc == 0)
		(void)pt_fsync_parent(jpath);
	return rc;
}

/* One recovery under way. */
struct rec {
	const char *path;       /* as the caller named it */
	char *real;
	char *jpath;
	bool apply;
	bool locked;            /* lfd holds the writers' lock */
	bool journal;           /* one is there (lstat) */
	bool parsed;            /* journal_read() ran */
	bool valid;             /* and found every checksum right */
	int lfd;                /* the checkpoint, read-only */
	int jfd;                /* the journal, read-only, or -1 */
	struct stat cst;        /* the checkpoint */
	struct stat jst;        /* the journal (lstat, then fstat) */
	struct jinfo j;
	char *note;
	size_t cap;
};

/* Append "; "-separated text to the note. */
static void note_add(struct rec *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void note_add(struct rec *r, const char *fmt, ...)
{
	size_t l = strlen(r->note);
	va_list ap;

	if (l && l + 2 < r->cap) {
		memcpy(r->note + l, "; ", 3);
		l += 2;
	}
	if (l + 1 >= r->cap)
		return;
	va_start(ap, fmt);
	vsnprintf(r->note + l, r->cap - l, fmt, ap);
	va_end(ap);
}

/* Find the checkpoint and its journal, and take the writers' lock: waiting
 * when there is a journal (its writer may be alive), not otherwise (only
 * the sweep needs it then).  1: nothing to look at. */
static int rec_open(struct rec *r, struct pt_error *err)
{
	struct pt_error e2;
	int rc;

	if (pt_resolve_path(r->path, &r->real, &e2) != 0)
		return 1;       /* the open proper reports it */
	if (asprintf(&r->jpath, "%s.ptfs-journal", r->real) < 0) {
		r->jpath = NULL;
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	r->lfd = open(r->real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (r->lfd < 0 || fstat(r->lfd, &r->cst) != 0 || !S_ISREG(r->cst.st_mode))
		return 1;
	if (lstat(r->jpath, &r->jst) != 0) {
		r->locked = flock(r->lfd, LOCK_EX | LOCK_NB) == 0;
		return 0;
	}
	if (!r->apply && (!S_ISREG(r->jst.st_mode) || (r->jst.st_mode & 022) ||
			  (r->jst.st_uid != r->cst.st_uid && r->jst.st_uid != 0 &&
			   r->jst.st_uid != geteuid()))) {
		/* a journal read-only recovery will not trust: no reason to
		 * wait for whoever holds the lock (any reader can take it) */
		r->locked = flock(r->lfd, LOCK_EX | LOCK_NB) == 0;
		r->journal = true;
		return 0;
	}
	rc = pt_lock_file(r->lfd, r->real, err);
	if (rc)
		return rc;
	r->locked = true;
	/* a live commit may have finished while we waited */
	r->journal = lstat(r->jpath, &r->jst) == 0;
	return 0;
}

/*
 * May the journal be trusted as a file (journal.h)?  0 yes, with r->jfd
 * open; 1 no, with the reason in @why (r->jfd open when it is a regular
 * file that could be read); -errno when it is trusted but unreadable.
 */
static int rec_trust(struct rec *r, char *why, size_t cap,
		     struct pt_error *err)
{
	const struct stat *s = &r->jst;
	struct stat st;
	int e;

	if (!S_ISREG(s->st_mode)) {
		snprintf(why, cap, "not a regular file");
		return 1;
	}
	r->jfd = open(r->jpath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	e = errno;
	if (r->jfd >= 0 && (fstat(r->jfd, &st) != 0 || st.st_dev != s->st_dev ||
			    st.st_ino != s->st_ino)) {
		close(r->jfd);
		r->jfd = -1;
		snprintf(why, cap, "replaced while being looked at");
		return 1;
	}
	if (r->jfd >= 0)
		r->jst = st;    /* the file open, not the name looked at */
	if (s->st_uid != r->cst.st_uid && s->st_uid != 0 && s->st_uid != geteuid())
		snprintf(why, cap, "owned by uid %lu, not by the checkpoint's owner (uid %lu) or root",
			 (unsigned long)s->st_uid, (unsigned long)r->cst.st_uid);
	else if (s->st_mode & 022)
		snprintf(why, cap, "writable by group or others (mode %04o)",
			 (unsigned)(s->st_mode & 07777));
	else if (s->st_nlink != 1)
		snprintf(why, cap, "%lu hard links", (unsigned long)s->st_nlink);
	else if (r->jfd < 0)
		return pt_fail(err, r->apply ? -e : -EUCLEAN,
			       "%sthe journal %s of an interrupted commit cannot be read (%s): run 'ptfs recover %s' as its owner",
			       r->apply ? "" : "needs recovery: ", r->jpath,
			       strerror(e), r->path);
	else
		return 0;
	return 1;
}

/*
 * Not applied: say why and what the checkpoint holds, and set the journal
 * aside (@apply) or leave it (read-only).  The checkpoint may be opened.
 */
static int rec_reject(struct rec *r, const char *what, const char *why,
		      bool trusted)
{
	char said[512];
	struct census c;
	char *aside = NULL;
	int rc;

	if (!r->parsed && r->jfd >= 0) {
		char w2[160];

		r->parsed = true;
		r->valid = journal_read(r->jfd, &r->j, w2, sizeof(w2)) == 0;
	}
	/* written last: without it the commit never reached the file */
	if (r->j.zero && trusted)
		snprintf(said, sizeof(said), "its header, written last, is missing: the commit most likely stopped before writing the checkpoint, which cannot be checked without it");
	else if (r->j.ranges_ok && r->j.size == (uint64_t)r->cst.st_size &&
		 census_take(r->jfd, r->lfd, &r->j, &c) == 0)
		census_say(c, !r->valid, said, sizeof(said));
	else
		snprintf(said, sizeof(said), "whether it changed the checkpoint cannot be told");
	if (!r->apply) {
		note_add(r, "%s: %s (%s), ignored: %s; 'ptfs recover %s' sets it aside",
			 r->jpath, what, why, said, r->path);
		return 0;
	}
	rc = set_aside(r->jpath, &aside);
	if (rc)
		note_add(r, "%s: %s (%s), not applied: %s; cannot set it aside: %s",
			 r->jpath, what, why, said, strerror(-rc));
	else
		note_add(r, "%s: %s (%s), not applied: %s; kept as %s",
			 r->jpath, what, why, said, aside);
	free(aside);
	return 0;
}

/* A valid journal that needs nothing written: remove it (@apply) or
 * ignore it (read-only: the file is wholly old or wholly new). */
static int rec_drop(struct rec *r, const char *what)
{
	if (!r->apply) {
		note_add(r, "%s: %s: ignored (the next writable open or 'ptfs recover' removes it)",
			 r->jpath, what);
		return 0;
	}
	if (unlink(r->jpath) != 0) {
		note_add(r, "%s: %s; cannot remove it: %s", r->jpath, what,
			 strerror(errno));
		return 0;
	}
	(void)pt_fsync_parent(r->jpath);
	note_add(r, "%s: %s: removed", r->jpath, what);
	return 0;
}

/* Roll the checkpoint back from the valid journal r->jfd. */
static int rec_rollback(struct rec *r, struct pt_error *err)
{
	struct stat st;
	int fd;
	int rc;

	if (!r->apply)
		return pt_fail(err, -EUCLEAN,
			       "needs recovery: run 'ptfs recover %s' (an interrupted in-place commit left %s)",
			       r->path, r->jpath);
	fd = open(r->real, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return pt_fail(err, -errno,
			       "%s: an interrupted commit must be rolled back from %s first, and this user cannot write the checkpoint: %s",
			       r->real, r->jpath, strerror(errno));
	if (fstat(fd, &st) != 0 || st.st_dev != r->cst.st_dev ||
	    st.st_ino != r->cst.st_ino) {
		close(fd);
		return pt_fail(err, -EBUSY, "%s: replaced while being recovered",
			       r->real);
	}
	rc = restore(r->jfd, fd, &r->j, r->real, err);
	close(fd);
	if (rc)
		return rc;
	note_add(r, "%s: rolled back an interrupted commit%s (%llu ranges, %llu bytes restored from %s)",
		 r->real, r->j.done ? " marked finished over a checkpoint not all new" : "",
		 (unsigned long long)r->j.n, (unsigned long long)r->j.old,
		 r->jpath);
	if (unlink(r->jpath) != 0)
		note_add(r, "cannot remove the journal: %s (the next recovery removes it)",
			 strerror(errno));
	else
		(void)pt_fsync_parent(r->jpath);
	return 0;
}

/* The journal beside the checkpoint: trust, read, bind, census, act. */
static int rec_journal(struct rec *r, struct pt_error *err)
{
	char why[200];
	struct census c;
	int rc;

	rc = rec_trust(r, why, sizeof(why), err);
	if (rc)
		return rc < 0 ? rc : rec_reject(r, "untrusted journal", why, false);
	r->parsed = true;
	rc = journal_read(r->jfd, &r->j, why, sizeof(why));
	r->valid = rc == 0;
	if (rc == -ENOMEM)
		return pt_fail(err, rc, "out of memory");
	if (rc)
		return rec_reject(r, r->j.zero ? "incomplete journal" : "damaged journal",
				  why, true);
	if (r->j.dev != (uint64_t)r->cst.st_dev || r->j.ino != (uint64_t)r->cst.st_ino ||
	    r->j.size != (uint64_t)r->cst.st_size) {
		snprintf(why, sizeof(why), "made for device %llu inode %llu of %llu bytes, this is device %llu inode %llu of %llu bytes",
			 (unsigned long long)r->j.dev, (unsigned long long)r->j.ino,
			 (unsigned long long)r->j.size, (unsigned long long)r->cst.st_dev,
			 (unsigned long long)r->cst.st_ino, (unsigned long long)r->cst.st_size);
		return rec_reject(r, "journal for another file", why, true);
	}
	rc = census_take(r->jfd, r->lfd, &r->j, &c);
	if (rc)
		return pt_fail(err, rc, "%s: %s", r->real, strerror(-rc));
	if (c.other) {
		snprintf(why, sizeof(why), "bytes at %llu are neither the old nor the new ones",
			 (unsigned long long)c.other_at);
		return rec_reject(r, "stale journal", why, true);
	}
	if (c.old == c.sectors)
		return rec_drop(r, "journal of an interrupted commit that had not written the checkpoint yet (every range holds its old bytes)");
	if (r->j.done && c.new_ == c.sectors)
		return rec_drop(r, "journal of a finished commit (every range holds its new bytes)");
	return rec_rollback(r, err);
}

int pt_journal_recover(const char *path, bool apply, char *note, size_t cap,
		       struct pt_error *err)
{
	struct rec r;
	char swept[400];
	int rc;

	memset(&r, 0, sizeof(r));
	r.path = path;
	r.apply = apply;
	r.lfd = r.jfd = -1;
	r.note = note;
	r.cap = cap;
	note[0] = '\0';
	rc = rec_open(&r, err);
	if (rc > 0)
		rc = 0;         /* nothing to look at */
	if (rc == 0 && r.journal)
		rc = rec_journal(&r, err);
	/* under the lock: no writer is between creating its temporary file
	 * and locking it */
	if (rc == 0 && r.locked &&
	    pt_replace_sweep(r.real, true, apply, swept, sizeof(swept)) > 0)
		note_add(&r, "%s", swept);
	if (r.jfd >= 0)
		close(r.jfd);
	if (r.lfd >= 0)
		close(r.lfd);
	free(r.j.ranges);
	free(r.real);
	free(r.jpath);
	if (rc < 0)
		return rc;
	return note[0] != '\0';
}
