/* SPDX-License-Identifier: MIT */
/* pending.c -- writes a mount could not commit (pending.h). */
#include "ckpt/pending.h"

#include <errno.h>
#include <fcntl.h>
#include <libdeflate.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/rd.h"
#include "ckpt/ckpt_i.h"
#include "container/replace.h"
#include "io/fd.h"

#define PEND_MAGIC "PTFSPEND"
#define PEND_END "PTFSPEOF"
#define PEND_HDR 64u
#define PEND_KEY_MAX 4096u
#define PEND_COPY (1u << 20)
#define PEND_NAMES 9            /* NAME, then NAME-2 .. NAME-9 */

/* One record of a pending file, as read back. */
struct pend_rec {
	char *key;
	uint32_t file;                  /* 0: the checkpoint's; i: files[i - 1] */
	uint64_t off, len;
	uint64_t data;                  /* where its bytes are in the file */
};

/* A data file beside the checkpoint that records write (version 2). */
struct pend_file {
	char *name;                     /* as the checkpoint names it */
	struct stat id;                 /* as the mount knew it */
};

struct pend {
	int fd;
	struct stat id;                 /* the checkpoint as the mount knew it */
	struct pend_file *files;
	uint32_t n_files;
	struct pend_rec *recs;
	size_t n;
};

/* The data files @c[0 .. @n) write besides the checkpoint's own (an ONNX
 * model's external data), each once, in *@out (NULL when none): how many,
 * or -ENOMEM. */
static int data_files(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		      const struct pt_ckpt ***out)
{
	const struct pt_ckpt **v = NULL;
	size_t i, k, m = 0;

	*out = NULL;
	for (i = 0; i < n; i++) {
		const struct pt_ckpt *f = pt_storage_file_ckpt(ck, c[i].st);

		if (f == ck)
			continue;
		for (k = 0; k < m && v[k] != f; k++)
			;
		if (k < m)
			continue;
		if (!v && !(v = calloc(n, sizeof(*v))))
			return -ENOMEM;
		v[m++] = f;
	}
	*out = v;
	return (int)m;
}

/* The number (0: the checkpoint's own) of the file @st lies in among
 * @files. */
static uint32_t file_number(struct pt_ckpt *ck, const struct pt_storage *st,
			    const struct pt_ckpt **files, int n_files)
{
	const struct pt_ckpt *f = pt_storage_file_ckpt(ck, st);
	int k;

	for (k = 0; k < n_files; k++)
		if (files[k] == f)
			return (uint32_t)k + 1;
	return 0;
}

/* Write all @n bytes at *@at and move *@at past them (fault step
 * "pending", container/replace.h). */
static int write_all(int fd, const void *p, size_t n, uint64_t *at)
{
	int rc = pt_pwrite_step(fd, p, n, *at, "pending");

	if (!rc)
		*at += n;
	return rc;
}

static void header(uint8_t h[PEND_HDR], const struct stat *id, uint32_t n,
		   uint32_t n_files)
{
	memset(h, 0, PEND_HDR);
	memcpy(h, PEND_MAGIC, 8);
	pt_put32(h + 8, n_files ? 2 : 1);
	pt_put32(h + 12, PEND_HDR);
	pt_put64(h + 16, (uint64_t)id->st_dev);
	pt_put64(h + 24, (uint64_t)id->st_ino);
	pt_put64(h + 32, (uint64_t)id->st_size);
	pt_put64(h + 40, (uint64_t)id->st_mtim.tv_sec);
	pt_put32(h + 48, (uint32_t)id->st_mtim.tv_nsec);
	pt_put32(h + 52, n);
	pt_put32(h + 56, libdeflate_crc32(0, h, 56));
	pt_put32(h + 60, n_files);
}

/* The table of data files (version 2): each one's name and identity. */
static int put_files(int fd, const struct pt_ckpt **files, int n_files,
		     uint64_t *at)
{
	uint8_t e[48], zero[8] = { 0 }, tail[8];
	uint32_t crc;
	struct stat id;
	int k, rc = 0;

	pt_put32(tail, (uint32_t)n_files);
	crc = libdeflate_crc32(0, tail, 4);
	for (k = 0; !rc && k < n_files; k++) {
		const char *name = files[k]->data_name;
		size_t len = name ? strlen(name) : 0, pad = (len + 7) & ~(size_t)7;

		if (len == 0 || len > PEND_KEY_MAX ||
		    pt_source_identity(files[k]->src, &id) != 0)
			return -EINVAL;
		memset(e, 0, sizeof(e));
		pt_put32(e, (uint32_t)len);
		pt_put64(e + 8, (uint64_t)id.st_dev);
		pt_put64(e + 16, (uint64_t)id.st_ino);
		pt_put64(e + 24, (uint64_t)id.st_size);
		pt_put64(e + 32, (uint64_t)id.st_mtim.tv_sec);
		pt_put32(e + 40, (uint32_t)id.st_mtim.tv_nsec);
		crc = libdeflate_crc32(crc, e, sizeof(e));
		crc = libdeflate_crc32(crc, name, len);
		crc = libdeflate_crc32(crc, zero, pad - len);
		rc = write_all(fd, e, sizeof(e), at);
		if (!rc)
			rc = write_all(fd, name, len, at);
		if (!rc)
			rc = write_all(fd, zero, pad - len, at);
	}
	pt_put32(tail, crc);
	pt_put32(tail + 4, 0);
	return rc ? rc : write_all(fd, tail, sizeof(tail), at);
}

/* The (offset, length) runs of commit @c: its ranges, or all of it. */
static size_t runs(const struct pt_commit *c, uint64_t whole[1][2],
		   const uint64_t (**out)[2])
{
	if (c->ranges) {
		*out = c->ranges;
		return c->n_ranges;
	}
	whole[0][0] = 0;
	whole[0][1] = pt_storage_size(c->st);
	*out = (const uint64_t (*)[2])whole;
	return 1;
}

/* Write one record: header, key, the new bytes, CRC. */
static int put_record(int fd, const struct pt_commit *c, uint32_t file,
		      uint64_t off, uint64_t len, uint8_t *buf, uint64_t *at)
{
	const char *key = c->st->key;
	size_t klen = strlen(key), kpad = (klen + 7) & ~(size_t)7;
	uint8_t h[24], tail[8], zero[8] = { 0 };
	uint32_t crc;
	uint64_t done = 0;
	int rc;

	if (klen == 0 || klen > PEND_KEY_MAX)
		return -ENAMETOOLONG;
	pt_put32(h, (uint32_t)klen);
	pt_put32(h + 4, file);
	pt_put64(h + 8, off);
	pt_put64(h + 16, len);
	crc = libdeflate_crc32(0, h, sizeof(h));
	crc = libdeflate_crc32(crc, key, klen);
	crc = libdeflate_crc32(crc, zero, kpad - klen);
	rc = write_all(fd, h, sizeof(h), at);
	if (!rc)
		rc = write_all(fd, key, klen, at);
	if (!rc)
		rc = write_all(fd, zero, kpad - klen, at);
	while (!rc && done < len) {
		size_t k = len - done < PEND_COPY ? (size_t)(len - done) : PEND_COPY;

		rc = c->read(c->ctx, buf, k, off + done);
		if (!rc)
			rc = write_all(fd, buf, k, at);
		crc = libdeflate_crc32(crc, buf, k);
		done += k;
	}
	pt_put32(tail, crc);
	pt_put32(tail + 4, 0);
	return rc ? rc : write_all(fd, tail, sizeof(tail), at);
}

static int put_all(struct pt_ckpt *ck, int fd, const struct pt_commit *c,
		   size_t n, const struct stat *id)
{
	uint8_t h[PEND_HDR], *buf = malloc(PEND_COPY);
	uint64_t at = PEND_HDR, whole[1][2];
	const struct pt_ckpt **files = NULL;
	uint32_t count = 0;
	size_t i, k;
	int rc = buf ? 0 : -ENOMEM, n_files = 0;

	if (!rc)
		n_files = data_files(ck, c, n, &files);
	if (n_files < 0)
		rc = n_files;
	else if (n_files > 0)
		rc = put_files(fd, files, n_files, &at);
	for (i = 0; !rc && i < n; i++) {
		const uint64_t (*r)[2];
		size_t nr = runs(&c[i], whole, &r);
		uint32_t file = file_number(ck, c[i].st, files, n_files);

		for (k = 0; !rc && k < nr; k++, count++)
			rc = put_record(fd, &c[i], file, r[k][0], r[k][1], buf, &at);
	}
	free(files);
	free(buf);
	if (!rc)
		rc = write_all(fd, PEND_END, 8, &at);
	if (!rc) {
		uint64_t zero = 0;

		header(h, id, count, n_files > 0 ? (uint32_t)n_files : 0);
		rc = write_all(fd, h, sizeof(h), &zero);
	}
	if (!rc && fsync(fd) != 0)
		rc = -errno;
	return rc;
}

/* Write the records into a new file named @final (or @final-2 ... -9 when
 * that exists): 0 and *@where, or -errno. */
static int save_as(struct pt_ckpt *ck, const char *final,
		   const struct pt_commit *c, size_t n, const struct stat *id,
		   const struct stat *owner, char **where)
{
	char *tmp = NULL, *name = NULL;
	int fd, rc, k;

	if (asprintf(&tmp, "%s.XXXXXX", final) < 0)
		return -ENOMEM;
	fd = mkostemp(tmp, O_CLOEXEC);     /* O_EXCL, mode 0600 */
	if (fd < 0) {
		rc = -errno;
		free(tmp);
		return rc;
	}
	rc = 0;
	if (geteuid() == 0 && fchown(fd, owner->st_uid, owner->st_gid) != 0)
		rc = -errno;
	if (!rc)
		rc = put_all(ck, fd, c, n, id);
	if (close(fd) != 0 && !rc)
		rc = -errno;
	for (k = 1; !rc && k <= PEND_NAMES; k++) {
		free(name);
		name = NULL;
		if ((k == 1 ? asprintf(&name, "%s", final) :
			      asprintf(&name, "%s-%d", final, k)) < 0) {
			rc = -ENOMEM;
			break;
		}
		/* never over another pending file */
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, name, RENAME_NOREPLACE) == 0)
			break;
		if (errno == EINVAL || errno == ENOSYS) {
			if (link(tmp, name) == 0) {
				unlink(tmp);
				break;
			}
		}
		if (errno != EEXIST)
			rc = -errno;
		else if (k == PEND_NAMES)
			rc = -EEXIST;
	}
	if (rc) {
		unlink(tmp);
		free(name);
	} else {
		(void)pt_fsync_parent(name);
		*where = name;
	}
	free(tmp);
	return rc;
}

/*
 * The two places a pending file of the checkpoint at @path may be, from
 * its real path (one realpath()): *@beside "<real path>.ptfs-pending",
 * and *@kept "<state dir>/NAME-HASH.ptfs-pending", named by that path
 * (its file name, cut to 100 bytes, and the 64-bit FNV-1a hash of the
 * whole path), not by its inode: a checkpoint another program replaced
 * (the very reason a commit may fail) has another inode but the same
 * path, and `ptfs recover PATH` must find what was kept for it.  NULL
 * for a place that cannot be named (no state directory).
 */
static void places(const char *path, const char *dir, char **beside,
		   char **kept)
{
	char *real = realpath(path, NULL);
	const char *base;
	uint64_t h = 0xcbf29ce484222325ull;
	const unsigned char *c;

	*beside = *kept = NULL;
	if (!real)
		return;
	if (asprintf(beside, "%s.ptfs-pending", real) < 0)
		*beside = NULL;
	for (c = (const unsigned char *)real; *c; c++)
		h = (h ^ *c) * 0x100000001b3ull;
	base = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
	if (dir && *dir && asprintf(kept, "%s/%.100s-%016llx.ptfs-pending", dir,
				    base, (unsigned long long)h) < 0)
		*kept = NULL;
	free(real);
}

int pt_pending_save(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		    const char *state_dir, char **where, struct pt_error *err)
{
	struct stat id, owner;
	char *first = NULL, *second = NULL;
	int rc, rc2 = -ENOENT;

	*where = NULL;
	if (pt_source_identity(ck->src, &id) != 0 || stat(ck->path, &owner) != 0)
		return pt_fail(err, -EINVAL, "not a local file");
	places(ck->path, state_dir, &first, &second);
	rc = first ? save_as(ck, first, c, n, &id, &owner, where) : -ENOMEM;
	if (rc && second)
		rc2 = save_as(ck, second, c, n, &id, &owner, where);
	if (rc && rc2)
		pt_fail(err, rc, "cannot save the writes beside it (%s)%s%s%s%s",
			strerror(-rc), second ? " nor in " : "",
			second ? second : "", second ? ": " : "",
			second ? strerror(-rc2) : "");
	free(first);
	free(second);
	return rc && rc2 ? rc : 0;
}

int pt_pending_find(const char *path, const char *state_dir, char *found,
		    size_t cap)
{
	char *at[2], name[PATH_MAX + 32];
	struct stat st;
	int hit = 0, i, k;

	places(path, state_dir, &at[0], &at[1]);
	for (i = 0; i < 2 && !hit; i++)
		for (k = 1; at[i] && !hit && k <= PEND_NAMES; k++) {
			snprintf(name, sizeof(name), k == 1 ? "%s" : "%s-%d", at[i], k);
			if (lstat(name, &st) == 0) {
				snprintf(found, cap, "%s", name);
				hit = 1;
			}
		}
	free(at[0]);
	free(at[1]);
	return hit;
}

/* Open @pending if this user may trust it for @ck's file: a regular file
 * with one link, owned by the checkpoint's owner or by us, writable by
 * nobody else. */
static int open_trusted(const struct pt_ckpt *ck, const char *pending,
			struct pt_error *err)
{
	struct stat st, cs;
	int fd = open(pending, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return pt_fail(err, errno == ELOOP ? -EPERM : -errno,
			       "%s: %s", pending,
			       errno == ELOOP ? "a symbolic link: not trusted"
					      : strerror(errno));
	if (fstat(fd, &st) != 0 || stat(ck->path, &cs) != 0) {
		close(fd);
		return pt_fail(err, -errno, "%s: %s", pending, strerror(errno));
	}
	if (!S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	    (st.st_uid != cs.st_uid && st.st_uid != geteuid()) ||
	    (st.st_mode & 022)) {
		close(fd);
		return pt_fail(err, -EPERM,
			       "%s: not trusted (it must be a regular file of the checkpoint's owner, writable by nobody else): left alone",
			       pending);
	}
	return fd;
}

static void pend_free(struct pend *p)
{
	size_t i;

	for (i = 0; i < p->n; i++)
		free(p->recs[i].key);
	for (i = 0; i < p->n_files; i++)
		free(p->files[i].name);
	free(p->files);
	free(p->recs);
	if (p->fd >= 0)
		close(p->fd);
}

/* Check one record at *@at and add it: 0 or -EBADMSG/-ENOMEM. */
static int get_record(struct pend *p, uint64_t size, uint64_t *at,
		      uint8_t *buf)
{
	uint8_t h[24], tail[8];
	struct pend_rec *r = &p->recs[p->n];
	uint64_t klen, kpad, done = 0;
	uint32_t crc;

	if (size - *at < sizeof(h) || pt_pread_full(p->fd, h, sizeof(h), *at))
		return -EBADMSG;
	klen = pt_le32(h);
	kpad = (klen + 7) & ~(uint64_t)7;
	r->file = pt_le32(h + 4);
	r->off = pt_le64(h + 8);
	r->len = pt_le64(h + 16);
	*at += sizeof(h);
	if (klen == 0 || klen > PEND_KEY_MAX || r->file > p->n_files ||
	    size - *at < kpad ||
	    r->len > size - *at - kpad || size - *at - kpad - r->len < sizeof(tail) ||
	    r->off > UINT64_MAX - r->len)
		return -EBADMSG;
	r->key = calloc(1, kpad + 1);
	if (!r->key)
		return -ENOMEM;
	p->n++;
	if (pt_pread_full(p->fd, r->key, (size_t)kpad, *at) ||
	    strlen(r->key) != klen)
		return -EBADMSG;
	crc = libdeflate_crc32(libdeflate_crc32(0, h, sizeof(h)), r->key, (size_t)kpad);
	*at += kpad;
	r->data = *at;
	while (done < r->len) {
		size_t k = r->len - done < PEND_COPY ? (size_t)(r->len - done) : PEND_COPY;

		if (pt_pread_full(p->fd, buf, k, *at + done))
			return -EBADMSG;
		crc = libdeflate_crc32(crc, buf, k);
		done += k;
	}
	*at += r->len;
	if (pt_pread_full(p->fd, tail, sizeof(tail), *at) || pt_le32(tail) != crc)
		return -EBADMSG;
	*at += sizeof(tail);
	return 0;
}

/* The table of data files at *@at (version 2), checked: 0 or -EBADMSG,
 * -ENOMEM. */
static int get_files(struct pend *p, uint32_t count, uint64_t size,
		     uint64_t *at)
{
	uint8_t e[48], tail[8];
	uint32_t crc, k;

	/* every entry takes 56 bytes at least */
	if (count > (size - *at) / 56)
		return -EBADMSG;
	p->files = calloc(count ? count : 1, sizeof(*p->files));
	if (!p->files)
		return -ENOMEM;
	pt_put32(tail, count);
	crc = libdeflate_crc32(0, tail, 4);
	for (k = 0; k < count; k++) {
		struct pend_file *f = &p->files[k];
		uint64_t len, pad;

		if (size - *at < sizeof(e) || pt_pread_full(p->fd, e, sizeof(e), *at))
			return -EBADMSG;
		*at += sizeof(e);
		len = pt_le32(e);
		pad = (len + 7) & ~(uint64_t)7;
		if (len == 0 || len > PEND_KEY_MAX || size - *at < pad)
			return -EBADMSG;
		f->name = calloc(1, pad + 1);
		if (!f->name)
			return -ENOMEM;
		p->n_files = k + 1;
		if (pt_pread_full(p->fd, f->name, (size_t)pad, *at) ||
		    strlen(f->name) != len)
			return -EBADMSG;
		*at += pad;
		f->id.st_dev = (dev_t)pt_le64(e + 8);
		f->id.st_ino = (ino_t)pt_le64(e + 16);
		f->id.st_size = (off_t)pt_le64(e + 24);
		f->id.st_mtim.tv_sec = (time_t)pt_le64(e + 32);
		f->id.st_mtim.tv_nsec = (long)pt_le32(e + 40);
		crc = libdeflate_crc32(libdeflate_crc32(crc, e, sizeof(e)),
				       f->name, (size_t)pad);
	}
	if (size - *at < sizeof(tail) || pt_pread_full(p->fd, tail, sizeof(tail), *at) ||
	    pt_le32(tail) != crc)
		return -EBADMSG;
	*at += sizeof(tail);
	return 0;
}

/* Read and check every CRC of the pending file open on p->fd. */
static int pend_read(struct pend *p, const char *pending, struct pt_error *err)
{
	uint8_t h[PEND_HDR], end[8], *buf;
	struct stat st;
	uint64_t at = PEND_HDR, size;
	uint32_t count, i, version;
	int rc = 0;

	if (fstat(p->fd, &st) != 0)
		return pt_fail(err, -errno, "%s: %s", pending, strerror(errno));
	size = (uint64_t)st.st_size;
	if (size < PEND_HDR + 8 || pt_pread_full(p->fd, h, PEND_HDR, 0) ||
	    memcmp(h, PEND_MAGIC, 8) != 0 ||
	    (version = pt_le32(h + 8)) < 1 || version > 2 ||
	    pt_le32(h + 12) != PEND_HDR ||
	    pt_le32(h + 56) != libdeflate_crc32(0, h, 56))
		return pt_fail(err, -EBADMSG, "%s: damaged (its header)", pending);
	if (version == 2) {
		rc = get_files(p, pt_le32(h + 60), size - 8, &at);
		if (rc == -ENOMEM)
			return pt_fail(err, rc, "out of memory");
		if (rc)
			return pt_fail(err, rc, "%s: damaged (its table of data files)",
				       pending);
	}
	p->id.st_dev = (dev_t)pt_le64(h + 16);
	p->id.st_ino = (ino_t)pt_le64(h + 24);
	p->id.st_size = (off_t)pt_le64(h + 32);
	p->id.st_mtim.tv_sec = (time_t)pt_le64(h + 40);
	p->id.st_mtim.tv_nsec = (long)pt_le32(h + 48);
	count = pt_le32(h + 52);
	/* every record takes at least 40 bytes: a count the size cannot
	 * hold is damage, not an allocation */
	if (count > (size - at) / 40)
		return pt_fail(err, -EBADMSG, "%s: damaged (record count)", pending);
	p->recs = calloc(count ? count : 1, sizeof(*p->recs));
	buf = malloc(PEND_COPY);
	if (!p->recs || !buf) {
		free(buf);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	for (i = 0; !rc && i < count; i++)
		rc = get_record(p, size, &at, buf);
	free(buf);
	if (rc == -ENOMEM)
		return pt_fail(err, rc, "out of memory");
	if (rc || size - at != 8 || pt_pread_full(p->fd, end, 8, at) ||
	    memcmp(end, PEND_END, 8) != 0)
		return pt_fail(err, -EBADMSG, "%s: damaged (record %u of %u, or its end)",
			       pending, i, count);
	return 0;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
	       a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The records of one storage, for its commit. */
struct pend_commit {
	const struct pt_ckpt *ck;
	const struct pend *p;
	const struct pt_storage *st;
	size_t first, n;                /* p->recs[first .. first + n) */
	uint64_t (*ranges)[2];
};

static int pend_commit_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	const struct pend_commit *c = ctx;
	struct pt_error err;
	uint8_t *q = buf;
	size_t i;
	int rc;

	pt_error_clear(&err);
	rc = pt_storage_read_file(c->ck, c->st, buf, n, off, &err);
	for (i = 0; !rc && i < c->n; i++) {
		const struct pend_rec *r = &c->p->recs[c->first + i];
		uint64_t a = off > r->off ? off : r->off;
		uint64_t b = off + n < r->off + r->len ? off + n : r->off + r->len;

		if (a < b)
			rc = pt_pread_full(c->p->fd, q + (a - off), (size_t)(b - a),
				      r->data + (a - r->off));
	}
	if (!rc)
		pt_ckpt_progress(c->ck, PT_PROGRESS_DONE, n);
	return rc;
}

/* Whether record @r's storage @st lies in the file the record names, and
 * that data file is still as the mount knew it (unless @force; the
 * checkpoint's own file is checked by the caller). */
static int check_file(struct pt_ckpt *ck, const struct pend *p,
		      const struct pend_rec *r, const struct pt_storage *st,
		      bool force, const char *pending, struct pt_error *err)
{
	const char *name = pt_storage_file_name(st);
	const struct pend_file *f = r->file ? &p->files[r->file - 1] : NULL;
	struct stat now;

	if (!f != !name || (f && strcmp(f->name, name) != 0))
		return pt_fail(err, -ESTALE, "%s: storage '%s' does not lie in %s any more",
			       pending, r->key, f ? f->name : "the checkpoint's own file");
	if (!f || force)
		return 0;
	if (pt_source_identity(pt_ckpt_source(pt_storage_file_ckpt(ck, st)), &now) != 0)
		return pt_fail(err, -EINVAL, "%s: not a local file", name);
	if (!same_file(&f->id, &now))
		return pt_fail(err, -ESTALE,
			       "%s changed since the writes were saved in %s (another program wrote it): 'ptfs recover --force' applies them anyway, '--discard' drops them",
			       name, pending);
	return 0;
}

/* Group the records by storage into @cs/@pc (sorted, disjoint, inside
 * writable storages, in the files they name): how many, or -errno with
 * @err. */
static int group(struct pt_ckpt *ck, const struct pend *p, const char *pending,
		 bool force, struct pt_commit *cs, struct pend_commit *pc,
		 struct pt_error *err)
{
	size_t i, n = 0;

	for (i = 0; i < p->n; i++) {
		const struct pend_rec *r = &p->recs[i];
		struct pend_commit *g = n ? &pc[n - 1] : NULL;

		if (!g || strcmp(p->recs[g->first].key, r->key) != 0) {
			const struct pt_storage *st = pt__storage_find(ck, r->key);
			size_t k;
			int rc;

			for (k = 0; k < n; k++)
				if (pc[k].st == st)
					return pt_fail(err, -EBADMSG, "%s: damaged (storage '%s' twice)", pending, r->key);
			if (!st || !st->writable || st->kind != PT_ST_FILE)
				return pt_fail(err, -ESTALE, "%s: the checkpoint has no writable storage '%s'", pending, r->key);
			rc = check_file(ck, p, r, st, force, pending, err);
			if (rc)
				return rc;
			g = &pc[n++];
			g->ck = ck;
			g->p = p;
			g->st = st;
			g->first = i;
			cs[n - 1].st = st;
			cs[n - 1].read = pend_commit_read;
			cs[n - 1].ctx = g;
		} else if (r->file != p->recs[i - 1].file) {
			return pt_fail(err, -EBADMSG, "%s: damaged (storage '%s' in two files)", pending, r->key);
		} else if (r->off < p->recs[i - 1].off + p->recs[i - 1].len) {
			return pt_fail(err, -EBADMSG, "%s: damaged (ranges of '%s' out of order)", pending, r->key);
		}
		if (r->off + r->len > pt_storage_size(g->st))
			return pt_fail(err, -ESTALE, "%s: storage '%s' is smaller than its pending bytes", pending, r->key);
		g->n++;
	}
	return (int)n;
}

static int commit_groups(struct pt_ckpt *ck, struct pt_commit *cs,
			 struct pend_commit *pc, size_t n, struct pt_error *err)
{
	size_t i, k;
	int rc = 0;

	for (i = 0; i < n && !rc; i++) {
		pc[i].ranges = calloc(pc[i].n ? pc[i].n : 1, sizeof(*pc[i].ranges));
		if (!pc[i].ranges) {
			rc = pt_fail(err, -ENOMEM, "out of memory");
			break;
		}
		for (k = 0; k < pc[i].n; k++) {
			pc[i].ranges[k][0] = pc[i].p->recs[pc[i].first + k].off;
			pc[i].ranges[k][1] = pc[i].p->recs[pc[i].first + k].len;
		}
		cs[i].ranges = (const uint64_t (*)[2])pc[i].ranges;
		cs[i].n_ranges = pc[i].n;
	}
	for (i = 0; i < n && !rc; i++)
		pt_ckpt_progress(ck, PT_PROGRESS_TOTAL, pt_storage_size(cs[i].st));
	if (!rc)
		rc = pt_ckpt_commit(ck, cs, n, err);
	for (i = 0; i < n; i++)
		free(pc[i].ranges);
	return rc;
}

int pt_pending_apply(struct pt_ckpt *ck, const char *pending, bool force,
		     char *note, size_t cap, struct pt_error *err)
{
	struct pend p = { .fd = -1 };
	struct pt_commit *cs = NULL;
	struct pend_commit *pc = NULL;
	struct stat now;
	uint64_t bytes = 0;
	size_t i;
	int rc, n;

	p.fd = open_trusted(ck, pending, err);
	if (p.fd < 0)
		return p.fd;
	rc = pend_read(&p, pending, err);
	if (rc)
		goto out;
	if (pt_source_identity(ck->src, &now) != 0) {
		rc = pt_fail(err, -EINVAL, "not a local file");
		goto out;
	}
	if (!force && !same_file(&p.id, &now)) {
		rc = pt_fail(err, -ESTALE,
			     "the checkpoint changed since the writes were saved in %s (another program wrote it): 'ptfs recover --force' applies them anyway, '--discard' drops them",
			     pending);
		goto out;
	}
	cs = calloc(p.n ? p.n : 1, sizeof(*cs));
	pc = calloc(p.n ? p.n : 1, sizeof(*pc));
	if (!cs || !pc) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	n = group(ck, &p, pending, force, cs, pc, err);
	rc = n < 0 ? n : commit_groups(ck, cs, pc, (size_t)n, err);
	if (rc)
		goto out;
	for (i = 0; i < p.n; i++)
		bytes += p.recs[i].len;
	if (unlink(pending) != 0) {
		rc = pt_fail(err, -errno, "applied, but removing %s: %s", pending,
			     strerror(errno));
		goto out;
	}
	(void)pt_fsync_parent(pending);
	snprintf(note, cap, "applied %llu bytes in %d storage%s from %s (%s)",
		 (unsigned long long)bytes, n, n == 1 ? "" : "s", pending,
		 pt_ckpt_last_commit(ck));
out:
	free(cs);
	free(pc);
	pend_free(&p);
	return rc;
}

int pt_pending_discard(const struct pt_ckpt *ck, const char *pending,
		       struct pt_error *err)
{
	int fd = open_trusted(ck, pending, err);

	if (fd < 0)
		return fd;
	close(fd);
	if (unlink(pending) != 0)
		return pt_fail(err, -errno, "%s: %s", pending, strerror(errno));
	(void)pt_fsync_parent(pending);
	return 0;
}
