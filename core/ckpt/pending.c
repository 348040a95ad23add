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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/rd.h"
#include "ckpt/ckpt_i.h"
#include "ckpt/editlog_i.h"
#include "container/replace.h"
#include "io/fd.h"

#define PEND_MAGIC "PTFSPEND"
#define PEND_END "PTFSPEOF"
#define PEND_HDR 64u
#define PEND_KEY_MAX 4096u
#define PEND_COPY (1u << 20)
#define PEND_NAMES 9            /* NAME, then NAME-2 .. NAME-9 */
#define PEND_TEXT_MAX (1u << 20) /* a path, a scalar's text, a dtype */
#define PEND_RANK_MAX 64u
#define PEND_EDIT_MIN 32u       /* the smallest edit: rm of a 1-byte path */

/* The layout the paths of a pending file's edits name (version 3). */
#define PEND_NESTED 1u          /* -o nested */
#define PEND_SUFFIX 2u          /* -o suffix */
#define PEND_HOLES 4u           /* a list's removed items left holes
				 * (pt_edit_keep_names(): a mount) */

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

/* A structural edit (version 3), as read back: editlog_i.h's fields. */
struct pend_edit {
	enum pt_edit_kind kind;
	char *path, *arg;               /* NUL-terminated */
	uint64_t arg_len;
	uint32_t rank;                  /* tensors */
	int64_t *shape;
	uint64_t data, len;             /* where its bytes are in the file */
	void *map;                      /* them, mapped for the replay */
	size_t map_len, map_skip;
};

struct pend {
	int fd;
	struct stat id;                 /* the checkpoint as the mount knew it */
	struct pend_file *files;
	uint32_t n_files;
	struct pend_rec *recs;
	size_t n;
	struct pend_edit *edits;        /* grown as they are read */
	size_t cap_edits;
	uint32_t n_edits, layout;       /* layout: PEND_NESTED ... */
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
		   uint32_t n_files, uint32_t version)
{
	memset(h, 0, PEND_HDR);
	memcpy(h, PEND_MAGIC, 8);
	pt_put32(h + 8, version);
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

/* One field of an edit: u64 length, the bytes padded to 8. */
static int put_field(int fd, const void *p, uint64_t len, uint32_t *crc,
		     uint64_t *at)
{
	uint8_t l[8], zero[8] = { 0 };
	size_t pad = (size_t)((8 - len % 8) % 8);
	int rc;

	pt_put64(l, len);
	*crc = libdeflate_crc32(*crc, l, sizeof(l));
	if (len)        /* libdeflate: a NULL buffer gives 0, whatever @crc */
		*crc = libdeflate_crc32(*crc, p, (size_t)len);
	*crc = libdeflate_crc32(*crc, zero, pad);
	rc = write_all(fd, l, sizeof(l), at);
	if (!rc && len)
		rc = write_all(fd, p, (size_t)len, at);
	return rc ? rc : write_all(fd, zero, pad, at);
}

/* The number of fields an edit of @kind has, 0 for no kind. */
static uint32_t edit_fields(uint32_t kind)
{
	switch (kind) {
	case PT_EDIT_RM:
	case PT_EDIT_MKDIR:
		return 1;
	case PT_EDIT_MV:
	case PT_EDIT_SCALAR:
		return 2;
	case PT_EDIT_TENSOR:
	case PT_EDIT_REPLACE:
		return 4;
	}
	return 0;
}

/* One edit: u32 kind, u32 field count, the fields, u32 CRC, u32 0. */
static int put_edit(int fd, const struct pt_edit_rec *e, uint64_t *at)
{
	uint8_t h[8], *shape = NULL;
	uint32_t crc;
	uint32_t k;
	int rc;

	pt_put32(h, e->kind);
	pt_put32(h + 4, edit_fields(e->kind));
	crc = libdeflate_crc32(0, h, sizeof(h));
	rc = write_all(fd, h, sizeof(h), at);
	if (!rc)
		rc = put_field(fd, e->path, strlen(e->path), &crc, at);
	if (!rc && edit_fields(e->kind) >= 2)
		rc = put_field(fd, e->arg, e->arg_len, &crc, at);
	if (!rc && edit_fields(e->kind) == 4) {
		shape = malloc(e->rank ? 8u * e->rank : 1);
		if (!shape)
			return -ENOMEM;
		for (k = 0; k < e->rank; k++)
			pt_put64(shape + 8u * k, (uint64_t)e->shape[k]);
		rc = put_field(fd, shape, 8u * e->rank, &crc, at);
		free(shape);
		if (!rc)
			rc = put_field(fd, e->bytes, e->len, &crc, at);
	}
	pt_put32(h, crc);
	pt_put32(h + 4, 0);
	return rc ? rc : write_all(fd, h, sizeof(h), at);
}

/* The layout @ck's tree paths name (PEND_NESTED ...). */
static uint32_t layout_of(const struct pt_ckpt *ck)
{
	return (ck->opts.nested ? PEND_NESTED : 0) |
	       (ck->opts.suffix ? PEND_SUFFIX : 0) |
	       (ck->edits.holes ? PEND_HOLES : 0);
}

/* The edits (version 3): u32 count, u32 layout, u32 CRC of both, u32 0;
 * then each edit. */
static int put_edits(const struct pt_ckpt *ck, int fd,
		     const struct pt_edit_rec *e, size_t n, uint64_t *at)
{
	uint8_t h[16];
	size_t i;
	int rc;

	if (n > UINT32_MAX)
		return -E2BIG;
	pt_put32(h, (uint32_t)n);
	pt_put32(h + 4, layout_of(ck));
	pt_put32(h + 8, libdeflate_crc32(0, h, 8));
	pt_put32(h + 12, 0);
	rc = write_all(fd, h, sizeof(h), at);
	for (i = 0; !rc && i < n; i++)
		rc = put_edit(fd, &e[i], at);
	return rc;
}

static int put_all(struct pt_ckpt *ck, int fd, const struct pt_commit *c,
		   size_t n, const struct stat *id)
{
	uint8_t h[PEND_HDR], *buf = malloc(PEND_COPY);
	uint64_t at = PEND_HDR, whole[1][2];
	const struct pt_ckpt **files = NULL;
	const struct pt_edit_rec *edits;
	const char *lost;
	uint32_t count = 0, version;
	size_t i, k, n_edits;
	int rc = buf ? 0 : -ENOMEM, n_files = 0;

	edits = pt__edit_log_get(ck, &n_edits, &lost);
	if (!edits)
		n_edits = 0;    /* the caller said they are lost */
	if (!rc)
		n_files = data_files(ck, c, n, &files);
	version = n_edits ? 3 : n_files > 0 ? 2 : 1;
	if (n_files < 0)
		rc = n_files;
	else if (version >= 2)
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
	if (!rc && n_edits)
		rc = put_edits(ck, fd, edits, n_edits, &at);
	if (!rc)
		rc = write_all(fd, PEND_END, 8, &at);
	if (!rc) {
		uint64_t zero = 0;

		header(h, id, count, n_files > 0 ? (uint32_t)n_files : 0, version);
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
	for (i = 0; i < p->n_edits; i++) {
		free(p->edits[i].path);
		free(p->edits[i].arg);
		free(p->edits[i].shape);
		if (p->edits[i].map)
			munmap(p->edits[i].map, p->edits[i].map_len);
	}
	free(p->edits);
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

/* The length of the field at *@at, at most @max, its bytes, padding and
 * the edit's CRC within @size: 0 and *@len (*@at past it), or -EBADMSG. */
static int field_len(struct pend *p, uint64_t size, uint64_t max,
		     uint64_t *at, uint64_t *len, uint32_t *crc)
{
	uint8_t l[8];

	if (size - *at < sizeof(l) || pt_pread_full(p->fd, l, sizeof(l), *at))
		return -EBADMSG;
	*at += sizeof(l);
	*len = pt_le64(l);
	*crc = libdeflate_crc32(*crc, l, sizeof(l));
	if (*len > max || *len > size - *at ||
	    size - *at - *len < (8 - *len % 8) % 8 + 8)
		return -EBADMSG;
	return 0;
}

/* Fold the bytes [@at, @at + @len) of the file into *@crc. */
static int crc_span(int fd, uint64_t at, uint64_t len, uint32_t *crc,
		    uint8_t *buf)
{
	uint64_t done = 0;

	while (done < len) {
		size_t k = len - done < PEND_COPY ? (size_t)(len - done) : PEND_COPY;

		if (pt_pread_full(fd, buf, k, at + done))
			return -EBADMSG;
		*crc = libdeflate_crc32(*crc, buf, k);
		done += k;
	}
	return 0;
}

/* A text field (a path, a scalar's text, a dtype: no NUL byte, padded
 * with zeros) into *@out; @empty: it may be empty. */
static int get_text(struct pend *p, uint64_t size, uint64_t *at, bool empty,
		    char **out, uint64_t *out_len, uint32_t *crc)
{
	uint64_t len, pad, k;
	int rc = field_len(p, size, PEND_TEXT_MAX, at, &len, crc);

	if (rc)
		return rc;
	pad = (len + 7) & ~(uint64_t)7;
	if (!len && !empty)
		return -EBADMSG;
	*out = calloc(1, (size_t)pad + 1);
	if (!*out)
		return -ENOMEM;
	if (pt_pread_full(p->fd, *out, (size_t)pad, *at) || strlen(*out) != len)
		return -EBADMSG;
	for (k = len; k < pad; k++)
		if ((*out)[k])
			return -EBADMSG;
	*crc = libdeflate_crc32(*crc, *out, (size_t)pad);
	*at += pad;
	if (out_len)
		*out_len = len;
	return 0;
}

/* A tensor's shape and bytes (the third and fourth fields). */
static int get_tensor(struct pend *p, struct pend_edit *e, uint64_t size,
		      uint64_t *at, uint32_t *crc, uint8_t *buf)
{
	uint64_t len, pad;
	uint32_t k;
	int rc = field_len(p, size, 8u * PEND_RANK_MAX, at, &len, crc);

	if (rc || len % 8 || pt_pread_full(p->fd, buf, (size_t)len, *at))
		return -EBADMSG;
	e->rank = (uint32_t)(len / 8);
	e->shape = malloc(len ? (size_t)len : 1);
	if (!e->shape)
		return -ENOMEM;
	for (k = 0; k < e->rank; k++)
		e->shape[k] = (int64_t)pt_le64(buf + 8u * k);
	*crc = libdeflate_crc32(*crc, buf, (size_t)len);
	*at += len;
	rc = field_len(p, size, UINT64_MAX, at, &e->len, crc);
	if (rc)
		return rc;
	pad = (8 - e->len % 8) % 8;
	e->data = *at;
	rc = crc_span(p->fd, *at, e->len + pad, crc, buf);
	*at += e->len + pad;
	return rc;
}

/* Check one edit at *@at and add it: 0 or -EBADMSG/-ENOMEM. */
static int get_edit(struct pend *p, uint64_t size, uint64_t *at, uint8_t *buf)
{
	struct pend_edit *e;
	uint8_t h[8];
	uint32_t crc, fields;
	int rc;

	if (size - *at < sizeof(h) || pt_pread_full(p->fd, h, sizeof(h), *at))
		return -EBADMSG;
	*at += sizeof(h);
	if (!pt_grow((void **)&p->edits, &p->cap_edits, p->n_edits, sizeof(*p->edits)))
		return -ENOMEM;
	e = &p->edits[p->n_edits];
	memset(e, 0, sizeof(*e));
	e->kind = (enum pt_edit_kind)pt_le32(h);
	fields = edit_fields(pt_le32(h));
	if (!fields || pt_le32(h + 4) != fields)
		return -EBADMSG;
	p->n_edits++;
	crc = libdeflate_crc32(0, h, sizeof(h));
	rc = get_text(p, size, at, false, &e->path, NULL, &crc);
	if (!rc && fields >= 2)
		rc = get_text(p, size, at, e->kind == PT_EDIT_SCALAR, &e->arg,
			      &e->arg_len, &crc);
	if (!rc && fields == 4)
		rc = get_tensor(p, e, size, at, &crc, buf);
	if (rc)
		return rc;
	if (size - *at < sizeof(h) || pt_pread_full(p->fd, h, sizeof(h), *at) ||
	    pt_le32(h) != crc)
		return -EBADMSG;
	*at += sizeof(h);
	return 0;
}

/* The edits at *@at (version 3), checked: 0 or -EBADMSG, -ENOMEM. */
static int get_edits(struct pend *p, uint64_t size, uint64_t *at, uint8_t *buf)
{
	uint8_t h[16];
	uint32_t count, i;
	int rc = 0;

	if (size - *at < sizeof(h) || pt_pread_full(p->fd, h, sizeof(h), *at) ||
	    pt_le32(h + 8) != libdeflate_crc32(0, h, 8) ||
	    (pt_le32(h + 4) & ~(PEND_NESTED | PEND_SUFFIX | PEND_HOLES)))
		return -EBADMSG;
	*at += sizeof(h);
	count = pt_le32(h);
	p->layout = pt_le32(h + 4);
	/* a count the size cannot hold is damage, not an allocation */
	if (count == 0 || count > (size - *at) / PEND_EDIT_MIN)
		return -EBADMSG;
	for (i = 0; !rc && i < count; i++)
		rc = get_edit(p, size, at, buf);
	return rc;
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
	    (version = pt_le32(h + 8)) < 1 || version > 3 ||
	    pt_le32(h + 12) != PEND_HDR ||
	    pt_le32(h + 56) != libdeflate_crc32(0, h, 56))
		return pt_fail(err, -EBADMSG, "%s: damaged (its header)", pending);
	if (version >= 2) {
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
	if (!rc && version == 3) {
		rc = get_edits(p, size - 8, &at, buf);
		if (rc == -EBADMSG) {
			free(buf);
			return pt_fail(err, rc, "%s: damaged (structural edit %u, or the list of them)",
				       pending, p->n_edits);
		}
	}
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

/* The bytes of tensor edit @e, mapped from the pending file. */
static int map_bytes(const struct pend *p, struct pend_edit *e)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t start;

	if (e->len == 0)
		return 0;
	start = e->data - e->data % (uint64_t)(page > 0 ? page : 4096);
	e->map_skip = (size_t)(e->data - start);
	if (e->len > SIZE_MAX - e->map_skip)
		return -EFBIG;
	e->map_len = (size_t)e->len + e->map_skip;
	e->map = mmap(NULL, e->map_len, PROT_READ, MAP_PRIVATE, p->fd, (off_t)start);
	if (e->map == MAP_FAILED) {
		e->map = NULL;
		return -errno;
	}
	return 0;
}

/* Make edit @e again on @ck: 0 or -errno with one line in @err. */
static int replay_one(struct pt_ckpt *ck, const struct pend *p,
		      struct pend_edit *e, struct pt_error *err)
{
	struct pt_edit_tensor t;
	int rc;

	switch (e->kind) {
	case PT_EDIT_RM:
		return pt_edit_remove(ck, e->path, err);
	case PT_EDIT_MV:
		return pt_edit_move(ck, e->path, e->arg, err);
	case PT_EDIT_MKDIR:
		return pt_edit_mkdir(ck, e->path, err);
	case PT_EDIT_SCALAR:
		return pt_edit_scalar(ck, e->path, e->arg, (size_t)e->arg_len, err);
	case PT_EDIT_TENSOR:
	case PT_EDIT_REPLACE:
		rc = map_bytes(p, e);
		if (rc)
			return pt_fail(err, rc, "%s", strerror(-rc));
		t.dtype = e->arg;
		t.rank = e->rank;
		t.shape = e->shape;
		t.bytes = e->map ? (const void *)((const uint8_t *)e->map + e->map_skip) : (const void *)"";
		t.len = e->len;
		return pt_edit_tensor(ck, e->path, &t, e->kind == PT_EDIT_REPLACE, err);
	}
	return pt_fail(err, -EBADMSG, "no such kind of edit");
}

/* Make @p's edits again on @ck, in order, as the mount made them: 0, or
 * -errno with one line in @err (the graph then holds some of them: the
 * caller commits nothing). */
static int replay(struct pt_ckpt *ck, struct pend *p, const char *pending,
		  struct pt_error *err)
{
	static const char *const word[] = { "", "rm", "mv", "mkdir", "new value of",
					    "new tensor", "new tensor in place of" };
	uint32_t want = p->layout & (PEND_NESTED | PEND_SUFFIX), i;
	struct pt_error e2;
	int rc;

	if (want != (layout_of(ck) & (PEND_NESTED | PEND_SUFFIX)))
		return pt_fail(err, -EINVAL,
			       "%s: its structural edits name the tree as a mount %s showed it: run 'ptfs recover%s%s' with the checkpoint",
			       pending, want ? "with these options" : "without -o nested or suffix",
			       want & PEND_NESTED ? " --nested" : "",
			       want & PEND_SUFFIX ? " -o suffix" : "");
	if (p->layout & PEND_HOLES)
		pt_edit_keep_names(ck);
	for (i = 0; i < p->n_edits; i++) {
		struct pend_edit *e = &p->edits[i];

		pt_error_clear(&e2);
		rc = replay_one(ck, p, e, &e2);
		if (rc)
			return pt_fail(err, rc,
				       "%s: structural edit %u of %u (%s %s) cannot be made again: %s: nothing applied",
				       pending, i + 1, p->n_edits, word[e->kind], e->path,
				       e2.msg[0] ? e2.msg : strerror(-rc));
	}
	return 0;
}

/* Write @ck's edit log alone over @pending, bound to the file as it is
 * now (its writes are in it): 0 or -errno. */
static int save_over(struct pt_ckpt *ck, const char *pending)
{
	struct stat id, old;
	char *tmp = NULL;
	int fd, rc = 0;

	if (pt_source_identity(ck->src, &id) != 0)
		return -EINVAL;
	if (lstat(pending, &old) != 0 || asprintf(&tmp, "%s.XXXXXX", pending) < 0)
		return -errno ? -errno : -ENOMEM;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		free(tmp);
		return rc;
	}
	if (geteuid() == 0 && fchown(fd, old.st_uid, old.st_gid) != 0)
		rc = -errno;
	if (!rc)
		rc = put_all(ck, fd, NULL, 0, &id);
	if (close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, pending) != 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	else
		(void)pt_fsync_parent(pending);
	free(tmp);
	return rc;
}

/* Commit the edits replayed on @ck.  When that fails after the pending
 * writes reached the file (@wrote), the edits are kept alone in @pending,
 * bound to the file as it is now. */
static int commit_edits(struct pt_ckpt *ck, const char *pending, bool wrote,
			struct pt_error *err)
{
	char why[sizeof(err->msg)];
	int rc = pt_edit_commit(ck, err), rc2;

	if (!rc)
		return 0;
	snprintf(why, sizeof(why), "%s", err->msg);
	if (!wrote)
		return pt_fail_over(err, rc, "the structural edits kept in %s could not be committed: %s",
			       pending, why);
	rc2 = save_over(ck, pending);
	if (rc2 == 0)
		return pt_fail_over(err, rc,
			       "the writes are applied, but the structural edits could not be committed (%s): they are kept in %s, 'ptfs recover' applies them",
			       why, pending);
	return pt_fail_over(err, rc,
		       "the writes are applied, but the structural edits could not be committed (%s) nor kept alone (%s): %s still holds them with the writes, 'ptfs recover --force' applies both again",
		       why, strerror(-rc2), pending);
}

/* Keep @msg one line: the keys and paths it quotes come from the file,
 * and a name may hold any byte but '/' and NUL. */
static void one_line(char *msg)
{
	for (; *msg; msg++)
		if ((unsigned char)*msg < 0x20 || *msg == 0x7f)
			*msg = '?';
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
	/* the edits first, in memory, as the mount had them when it
	 * committed the writes: a refused one leaves the file alone */
	rc = p.n_edits ? replay(ck, &p, pending, err) : 0;
	if (rc)
		goto out;
	cs = calloc(p.n ? p.n : 1, sizeof(*cs));
	pc = calloc(p.n ? p.n : 1, sizeof(*pc));
	if (!cs || !pc) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	n = group(ck, &p, pending, force, cs, pc, err);
	rc = n < 0 ? n : n || !p.n_edits ? commit_groups(ck, cs, pc, (size_t)n, err) : 0;
	if (!rc && p.n_edits)
		rc = commit_edits(ck, pending, n > 0, err);
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
	if (p.n_edits)
		snprintf(note, cap, "applied %llu bytes in %d storage%s and %u structural edit%s from %s (%s)",
			 (unsigned long long)bytes, n, n == 1 ? "" : "s", p.n_edits,
			 p.n_edits == 1 ? "" : "s", pending, pt_ckpt_last_commit(ck));
	else
		snprintf(note, cap, "applied %llu bytes in %d storage%s from %s (%s)",
			 (unsigned long long)bytes, n, n == 1 ? "" : "s", pending,
			 pt_ckpt_last_commit(ck));
out:
	if (rc)
		one_line(err->msg);
	free(cs);
	free(pc);
	pend_free(&p);
	return rc;
}

const char *pt_pending_edits_lost(const struct pt_ckpt *ck)
{
	size_t n;
	const char *lost;

	(void)pt__edit_log_get(ck, &n, &lost);
	return lost;
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
