/* SPDX-License-Identifier: MIT */
/*
 * file.c -- the local file source: pread() on a descriptor we own, fstat()
 * and stat() for "changed since open?", siblings in the same directory.
 */
#include "io/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/fd.h"

struct file_source {
	struct pt_source s;
	int fd;
	char *path;                     /* as given; also s.name */
	dev_t dev;                      /* identity at open (or reopen) */
	ino_t ino;
};

static int file_read(const struct pt_source *s, void *buf, size_t n,
		     uint64_t off, struct pt_error *err)
{
	const struct file_source *f = s->priv;
	ssize_t got = pt_pread_upto(f->fd, buf, n, off);

	if (got < 0)
		return pt_fail(err, (int)got, "read at 0x%llx: %s",
			       (unsigned long long)off, strerror((int)-got));
	if ((size_t)got < n)
		return pt_fail(err, -EIO,
			       "read at 0x%llx: file shrank while open",
			       (unsigned long long)(off + (uint64_t)got));
	return 0;
}

static bool file_extent(const struct pt_source *s, uint64_t off, uint64_t n,
			int *fd, uint64_t *file_off)
{
	const struct file_source *f = s->priv;

	(void)n;
	*fd = f->fd;
	*file_off = off;
	return true;
}

static bool same_time(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static int file_check(const struct pt_source *s, enum pt_check how,
		      struct pt_error *err)
{
	const struct file_source *f = s->priv;
	struct stat st;
	int rc = how == PT_CHECK_NAME ? stat(f->path, &st) : fstat(f->fd, &st);

	if (rc != 0)
		return pt_fail(err, -errno, "%s: %s", f->path, strerror(errno));
	if ((uint64_t)st.st_size != s->size ||
	    !same_time(&st.st_mtim, &s->mtime) ||
	    (how == PT_CHECK_NAME &&
	     (st.st_dev != f->dev || st.st_ino != f->ino)))
		return pt_fail(err, -ESTALE,
			       "%s: checkpoint changed on disk since it was opened",
			       f->path);
	return 0;
}

static int file_open_sibling(const struct pt_source *s, const char *rel,
			     struct pt_source **out, struct pt_error *err)
{
	const struct file_source *f = s->priv;
	const char *slash = strrchr(f->path, '/');
	char *path;
	int rc;

	*out = NULL;
	if (!slash)
		rc = asprintf(&path, "./%s", rel);
	else if (slash == f->path)
		rc = asprintf(&path, "/%s", rel);
	else
		rc = asprintf(&path, "%.*s/%s", (int)(slash - f->path),
			      f->path, rel);
	if (rc < 0)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = pt_source_open_file(path, out, err);
	free(path);
	return rc;
}

static void file_close(struct pt_source *s)
{
	struct file_source *f = s->priv;

	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	free(f);
}

static const struct pt_source_ops file_ops = {
	.read = file_read,
	.extent = file_extent,
	.check = file_check,
	.open_sibling = file_open_sibling,
	.close = file_close,
};

static void file_identity(struct file_source *f, const struct stat *st)
{
	f->s.size = (uint64_t)st->st_size;
	f->s.mtime = st->st_mtim;
	f->dev = st->st_dev;
	f->ino = st->st_ino;
}

int pt_source_open_file(const char *path, struct pt_source **out,
			struct pt_error *err)
{
	struct file_source *f = calloc(1, sizeof(*f));
	struct stat st;

	*out = NULL;
	if (!f || !(f->path = strdup(path))) {
		free(f);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	f->s.ops = &file_ops;
	f->s.name = f->path;
	f->s.priv = f;
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0 || fstat(f->fd, &st) != 0) {
		int e = errno;

		file_close(&f->s);
		return pt_fail(err, -e, "%s", strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		file_close(&f->s);
		return pt_fail(err, -EINVAL, "%s: not a regular file", path);
	}
	file_identity(f, &st);
	*out = &f->s;
	return 0;
}

const char *pt_source_local_path(const struct pt_source *s)
{
	return s->ops == &file_ops ? ((const struct file_source *)s->priv)->path
				   : NULL;
}

int pt_source_reopen(struct pt_source *s, struct pt_error *err)
{
	struct file_source *f = s->priv;
	struct stat st;
	int fd, rc = 0;

	if (s->ops != &file_ops)
		return pt_fail(err, -EINVAL, "%s: not a local file", s->name);
	fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0)
		rc = pt_fail(err, -errno, "reopening after commit: %s",
			     strerror(errno));
	else if (dup2(fd, f->fd) < 0)
		rc = pt_fail(err, -errno, "reopening after commit: %s",
			     strerror(errno));
	else
		file_identity(f, &st);  /* the size too: a rewrite may move records */
	if (fd >= 0)
		close(fd);
	return rc;
}

int pt_source_identity(const struct pt_source *s, struct stat *st)
{
	const struct file_source *f = s->priv;

	if (s->ops != &file_ops)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->st_dev = f->dev;
	st->st_ino = f->ino;
	st->st_size = (off_t)s->size;
	st->st_mtim = s->mtime;
	return 0;
}

int pt_source_reaffirm(struct pt_source *s)
{
	struct file_source *f = s->priv;
	struct stat st;

	if (s->ops != &file_ops)
		return -EINVAL;
	if (stat(f->path, &st) != 0 || st.st_dev != f->dev ||
	    st.st_ino != f->ino || (uint64_t)st.st_size != s->size)
		return -ESTALE;
	s->mtime = st.st_mtim;
	return 0;
}
