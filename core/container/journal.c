/* SPDX-License-Identifier: MIT */
/*
 * journal.c -- patch a file in a clone or in place behind an undo journal,
 * and recover from an interrupted in-place patch (journal.h).
 */
#include "container/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "base/rd.h"

#define J_MAGIC "PTFSJRNL"
#define J_DONE "PTFSDONE"
#define J_END "PTFSJEND"
#define J_HDR 64u
#define J_TRAILER 12u
#define J_VERSION 1u
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
		rc = pt_pwrite_full(fd, p->data, (size_t)p->len, p->off, "patch");
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
		rc = pt_pwrite_full(fd, buf, k, p->off + at, "patch");
		at += k;
	}
	if (rc)
		return pt_fail(err, rc, "write to %s at %llu: %s", what,
			       (unsigned long long)p->off, strerror(-rc));
	return 0;
}

/* Patch a copy of @path beside it (a reflink clone when @clone, else a
 * full copy), then put it in place: the two replacing ways. */
static int patch_replaced(const char *path, const struct pt_patch *p,
			  size_t n, const struct pt_replace_expect *expect,
			  bool clone, struct pt_error *err)
{
	struct pt_replace r;
	uint8_t *buf = NULL;
	size_t i;
	int rc;

	rc = pt_replace_begin(&r, path, expect, err);
	if (rc)
		return rc;
	/* r.orig: the file begin() checked, locked until the rename */
	rc = clone ? pt_replace_clone(&r, r.orig, err) :
		     pt_replace_copy(&r, r.orig, 0, (uint64_t)r.st.st_size, 0, err);
	buf = rc ? NULL : malloc(J_CHUNK);
	if (!rc && !buf)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	for (i = 0; i < n && rc == 0; i++)
		rc = write_patch(r.fd, &p[i], buf, r.tmp, err);
	free(buf);
	if (rc) {
		pt_replace_abort(&r);
		return rc;
	}
	return pt_replace_commit(&r, err);
}

int pt_patch_clone(const char *path, const struct pt_patch *p, size_t n,
		   const struct pt_replace_expect *expect,
		   struct pt_error *err)
{
	return patch_replaced(path, p, n, expect, true, err);
}

int pt_patch_copy(const char *path, const struct pt_patch *p, size_t n,
		  const struct pt_replace_expect *expect, struct pt_error *err)
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

char *pt_journal_path(const char *path)
{
	struct pt_error err;
	char *real = NULL;
	char *j;

	if (pt_resolve_path(path, &real, &err) != 0)
		return NULL;
	if (asprintf(&j, "%s.ptfs-journal", real) < 0)
		j = NULL;
	free(real);
	return j;
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
		rc = pt_pwrite_full(jfd, out, m, *pos, "jwrite");
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
	pt_put32(h + 56, libdeflate_crc32(0, h, 56));
	for (i = 0; i < n && rc == 0; i++) {
		uint8_t r[16];

		pt_put64(r, p[i].off);
		pt_put64(r + 8, p[i].len);
		crc = libdeflate_crc32(crc, r, 16);
		rc = pt_pwrite_full(jfd, r, 16, pos, "jwrite");
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
			rc = pt_pwrite_full(jfd, buf, k, pos, "jwrite");
			pos += k;
			at += k;
		}
	}
	for (i = 0; i < n && rc == 0; i++)
		rc = write_new_crcs(jfd, &p[i], buf, &pos, &crc);
	pt_put32(t, crc);
	memcpy(t + 4, J_END, 8);
	if (!rc)
		rc = pt_pwrite_full(jfd, t, sizeof(t), pos, "jwrite");
	/* the header last: a journal without it is plainly incomplete */
	if (!rc)
		rc = pt_pwrite_full(jfd, h, sizeof(h), 0, "jwrite");
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
	bool done = pt_pwrite_full(jfd, J_DONE, 8, 0, "jdone") == 0 &&
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

static int roll_back(const char *jpath, const char *real, int fd,
		     struct pt_error *err);

/* The in-place patch proper, between the journal and its removal. */
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
		if (roll_back(jpath, real, fd, &e2) != 0)
			pt_error_prefix(err, "%s; the journal %s stays and the next ptfs command that opens the checkpoint rolls it back",
					e2.msg, jpath);
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
	jfd = rc ? -1 : open(jpath, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (jfd < 0) {
		rc = rc ? rc : -errno;
		pt_fail(err, rc == -EEXIST ? -EBUSY : rc, "create journal %s: %s", jpath,
			rc == -EEXIST ? "a journal is already there (an interrupted commit: open the checkpoint with ptfs to roll it back)"
				      : strerror(-rc));
		rc = rc == -EEXIST ? -EBUSY : rc;
		goto out;
	}
	/* the checkpoint's owner must be able to roll it back after a crash
	 * (best effort: only root can give a file away) */
	(void)fchown(jfd, st.st_uid, st.st_gid);
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

/* A journal read and checked: the ranges are in memory, the old bytes
 * stay in the file (they may be large). */
struct jinfo {
	uint64_t size;          /* the file's size it was made for */
	uint64_t ino;
	uint64_t n;
	uint64_t old;
	uint64_t *ranges;       /* 2n: off, len */
	uint64_t crc_off;       /* where the new bytes' sector CRCs start */
	bool done;              /* marked finished */
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

/* 0 valid, -EBADMSG with a reason in @why when incomplete or damaged. */
static int journal_read(int jfd, struct jinfo *j, char *why, size_t cap)
{
	struct stat st;
	uint8_t h[J_HDR];
	uint64_t crc_bytes = 0;
	int rc;

	memset(j, 0, sizeof(*j));
	if (fstat(jfd, &st) != 0 || (uint64_t)st.st_size < J_HDR + J_TRAILER ||
	    pt_pread_full(jfd, h, J_HDR, 0) != 0) {
		snprintf(why, cap, "truncated (%lld bytes)", (long long)st.st_size);
		return -EBADMSG;
	}
	j->done = memcmp(h, J_DONE, 8) == 0;
	if ((!j->done && memcmp(h, J_MAGIC, 8) != 0) ||
	    pt_le32(h + 8) != J_VERSION || pt_le32(h + 12) != J_HDR ||
	    pt_le64(h + 48) != J_SECTOR ||
	    pt_le32(h + 56) != libdeflate_crc32(0, h, 56) || pt_le32(h + 60) != 0) {
		snprintf(why, cap, "bad header");
		return j->done ? 0 : -EBADMSG;
	}
	if (j->done)
		return 0;
	j->size = pt_le64(h + 16);
	j->n = pt_le64(h + 24);
	j->old = pt_le64(h + 32);
	j->ino = pt_le64(h + 40);
	if (j->n > J_MAX_RANGES || j->old > (uint64_t)st.st_size ||
	    J_HDR + 16 * j->n + j->old + J_TRAILER > (uint64_t)st.st_size) {
		snprintf(why, cap, "truncated or damaged (%lld bytes)",
			 (long long)st.st_size);
		return -EBADMSG;
	}
	j->ranges = malloc((size_t)(16 * j->n + 1));
	if (!j->ranges) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	rc = read_ranges(jfd, j, &crc_bytes, why, cap);
	if (rc)
		return rc;
	j->crc_off = J_HDR + 16 * j->n + j->old;
	if (j->crc_off + crc_bytes + J_TRAILER != (uint64_t)st.st_size) {
		snprintf(why, cap, "truncated or damaged (%lld bytes)",
			 (long long)st.st_size);
		return -EBADMSG;
	}
	return check_body(jfd, (uint64_t)st.st_size - J_TRAILER, why, cap);
}

/*
 * Before writing anything back: every sector of every range must hold
 * either its old bytes (in the journal) or its new ones (their CRC is in
 * the journal).  Anything else means the file was written since the
 * interrupted commit (say, torch.save again to the same inode): rolling
 * back would put stale bytes into a newer checkpoint.  -EBUSY then.
 */
static int verify_sectors(int jfd, int fd, const struct jinfo *j,
			  const char *real, struct pt_error *err)
{
	uint8_t *old = malloc(J_CHUNK), *cur = malloc(J_CHUNK);
	uint8_t crcs[4 * (J_CHUNK / J_SECTOR + 1)];
	uint64_t pos = J_HDR + 16 * j->n, cpos = j->crc_off, i;
	int rc = old && cur ? 0 : -ENOMEM;

	for (i = 0; i < j->n && rc == 0; i++) {
		uint64_t off = j->ranges[2 * i], len = j->ranges[2 * i + 1], at;

		for (at = 0; rc == 0 && at < len;) {
			size_t k = chunk_at(off + at, len - at);
			size_t ns = (size_t)sectors(off + at, k);
			size_t o, sl, m = 0;

			rc = pt_pread_full(jfd, old, k, pos);
			if (!rc)
				rc = pt_pread_full(fd, cur, k, off + at);
			if (!rc)
				rc = pt_pread_full(jfd, crcs, 4 * ns, cpos);
			for (o = 0; rc == 0 && o < k; o += sl, m += 4) {
				sl = piece_at(off + at + o, k - o);
				if (memcmp(cur + o, old + o, sl) != 0 &&
				    libdeflate_crc32(0, cur + o, sl) != pt_le32(crcs + m))
					rc = pt_fail(err, -EBUSY,
						     "%s: changed since the interrupted commit of its journal (bytes at %llu are neither the old nor the new ones): not rolled back; move the journal away once the checkpoint is known good",
						     real, (unsigned long long)(off + at + o));
			}
			pos += k;
			cpos += 4 * ns;
			at += k;
		}
	}
	free(old);
	free(cur);
	if (rc && rc != -EBUSY)
		return pt_fail(err, rc, "%s: %s", real, strerror(-rc));
	return rc;
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
				rc = pt_pwrite_full(fd, buf, k, off + at, "restore");
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

/* Roll @real (open as @fd, or -1) back from the valid journal @jpath. */
static int roll_back(const char *jpath, const char *real, int fd,
		     struct pt_error *err)
{
	struct jinfo j;
	char why[128];
	int jfd = open(jpath, O_RDWR | O_CLOEXEC);
	int rc;

	if (jfd < 0)
		return pt_fail(err, -errno, "%s: %s", jpath, strerror(errno));
	rc = journal_read(jfd, &j, why, sizeof(why));
	if (rc == 0 && !j.done)
		rc = verify_sectors(jfd, fd, &j, real, err);
	if (rc == 0 && !j.done)
		rc = restore(jfd, fd, &j, real, err);
	else if (rc)
		pt_fail(err, rc, "%s: %s", jpath, why);
	if (rc == 0) {
		rc = journal_finish(jfd, jpath);
		if (rc)
			pt_fail(err, rc, "remove journal %s after rolling back: %s",
				jpath, strerror(-rc));
	}
	free(j.ranges);
	close(jfd);
	return rc;
}

/* A journal that was never completed: keep it aside, say why. */
static int set_aside(const char *jpath, const char *why, char *note,
		     size_t cap, struct pt_error *err)
{
	char *aside = NULL;
	int rc = -EEXIST;
	int i;

	/* never over an earlier one: each is evidence */
	for (i = 0; rc == -EEXIST && i < 1000; i++) {
		free(aside);
		aside = NULL;
		if ((i ? asprintf(&aside, "%s.invalid.%d", jpath, i)
		       : asprintf(&aside, "%s.invalid", jpath)) < 0)
			return pt_fail(err, -ENOMEM, "out of memory");
		rc = renameat2(AT_FDCWD, jpath, AT_FDCWD, aside, RENAME_NOREPLACE) == 0 ? 0 : -errno;
		if (rc == -EINVAL || rc == -ENOSYS) {
			/* no RENAME_NOREPLACE here: link + unlink */
			rc = link(jpath, aside) == 0 ? 0 : -errno;
			if (rc == 0)
				rc = unlink(jpath) == 0 ? 0 : -errno;
		}
	}
	if (rc)
		rc = pt_fail(err, rc, "%s: incomplete journal (%s), cannot set it aside: %s",
			     jpath, why, strerror(-rc));
	else
		snprintf(note, cap,
			 "%s: incomplete journal (%s): the commit that wrote it never touched the checkpoint; kept as %s",
			 jpath, why, aside);
	free(aside);
	return rc ? rc : 1;
}

int pt_journal_recover(const char *path, char *note, size_t cap,
		       struct pt_error *err)
{
	char *jpath = pt_journal_path(path);
	char *real = NULL;
	char why[128];
	struct jinfo j;
	struct stat st;
	int jfd = -1;
	int fd = -1;
	int lfd = -1;
	int rc;

	note[0] = '\0';
	memset(&j, 0, sizeof(j));
	if (!jpath || access(jpath, F_OK) != 0) {
		free(jpath);
		/* the rewrite and clone ways leave only temporaries */
		return pt_replace_sweep(path, note, cap) > 0;
	}
	rc = pt_resolve_path(path, &real, err);
	if (rc)
		goto out;
	/* a live committer holds the lock: wait for it to finish (its
	 * journal is then gone) rather than take its journal for ours */
	lfd = open(real, O_RDONLY | O_CLOEXEC);
	if (lfd < 0) {
		rc = pt_fail(err, -errno, "%s: %s", real, strerror(errno));
		goto out;
	}
	rc = pt_lock_file(lfd, real, err);
	if (rc)
		goto out;
	jfd = open(jpath, O_RDONLY | O_CLOEXEC);
	if (jfd < 0 && errno == ENOENT) {
		rc = 0;                 /* that commit finished meanwhile */
		goto out;
	}
	if (jfd < 0) {
		rc = pt_fail(err, -errno, "%s: %s", jpath, strerror(errno));
		goto out;
	}
	rc = journal_read(jfd, &j, why, sizeof(why));
	if (rc == -EBADMSG) {
		rc = set_aside(jpath, why, note, cap, err);
		goto out;
	}
	if (rc) {
		rc = pt_fail(err, rc, "%s: %s", jpath, why);
		goto out;
	}
	if (j.done) {
		(void)unlink(jpath);
		snprintf(note, cap, "%s: removed the journal of a finished commit", jpath);
		rc = 1;
		goto out;
	}
	if (stat(real, &st) != 0 || (uint64_t)st.st_size != j.size ||
	    (uint64_t)st.st_ino != j.ino) {
		rc = pt_fail(err, -EBUSY,
			     "%s: journal of an interrupted commit made for another file (%llu bytes, inode %llu): not rolled back; move it away once the checkpoint is known good",
			     jpath, (unsigned long long)j.size, (unsigned long long)j.ino);
		goto out;
	}
	fd = open(real, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		rc = pt_fail(err, -errno,
			     "%s: an interrupted commit must be rolled back from %s first, and this user cannot write the checkpoint: %s",
			     real, jpath, strerror(errno));
		goto out;
	}
	rc = roll_back(jpath, real, fd, err);
	if (rc == 0) {
		snprintf(note, cap,
			 "%s: rolled back an interrupted commit (%llu ranges, %llu bytes restored from %s)",
			 real, (unsigned long long)j.n, (unsigned long long)j.old, jpath);
		rc = 1;
	}
out:
	if (lfd >= 0)
		close(lfd);
	if (fd >= 0)
		close(fd);
	if (jfd >= 0)
		close(jfd);
	free(j.ranges);
	free(real);
	free(jpath);
	return rc;
}
