/* SPDX-License-Identifier: MIT */
/* source.c -- pread() or memcpy() from the checkpoint. */
#include "io/source.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int pt_source_fd(struct pt_source *s, int fd, const char *name,
		 struct pt_error *err)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return pt_fail(err, -errno, "%s: %s", name, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return pt_fail(err, -EINVAL, "%s: not a regular file", name);
	s->fd = fd;
	s->mem = NULL;
	s->size = (uint64_t)st.st_size;
	s->name = name;
	s->base = 0;
	return 0;
}

void pt_source_mem(struct pt_source *s, const void *mem, uint64_t len,
		   const char *name)
{
	s->fd = -1;
	s->mem = mem;
	s->size = len;
	s->name = name;
	s->base = 0;
}

int pt_source_sub(struct pt_source *s, const struct pt_source *parent,
		  uint64_t off, uint64_t len, const char *name,
		  struct pt_error *err)
{
	if (off > parent->size || len > parent->size - off)
		return pt_fail(err, -EIO,
			       "%s: bytes [%llu, +%llu) lie beyond the end of %s (%llu bytes)",
			       name, (unsigned long long)off,
			       (unsigned long long)len, parent->name,
			       (unsigned long long)parent->size);
	s->fd = parent->fd;
	s->mem = parent->fd < 0 ? parent->mem + off : NULL;
	s->size = len;
	s->name = name;
	s->base = parent->fd < 0 ? 0 : parent->base + off;
	return 0;
}

int pt_source_read(const struct pt_source *s, void *buf, size_t n,
		   uint64_t off, struct pt_error *err)
{
	uint8_t *dst = buf;
	size_t done = 0;

	if (off > s->size || n > s->size - off)
		return pt_fail(err, -EIO,
			       "read of %zu bytes at 0x%llx beyond end of file (%llu bytes)",
			       n, (unsigned long long)off,
			       (unsigned long long)s->size);
	if (s->fd < 0) {
		if (n)
			memcpy(dst, s->mem + off, n);
		return 0;
	}
	while (done < n) {
		ssize_t got = pread(s->fd, dst + done, n - done,
				    (off_t)(s->base + off + done));
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return pt_fail(err, -errno, "read at 0x%llx: %s",
				       (unsigned long long)(off + done),
				       strerror(errno));
		}
		if (got == 0)
			return pt_fail(err, -EIO,
				       "read at 0x%llx: file shrank while open",
				       (unsigned long long)(off + done));
		done += (size_t)got;
	}
	return 0;
}

int pt_source_dup(const struct pt_source *s, uint64_t off, size_t n,
		  uint8_t **out, struct pt_error *err)
{
	uint8_t *b;
	int rc;

	*out = NULL;
	if (n == SIZE_MAX)
		return pt_fail(err, -EFBIG, "record too large");
	b = malloc(n + 1);
	if (!b)
		return pt_fail(err, -ENOMEM, "out of memory reading %zu bytes", n);
	rc = pt_source_read(s, b, n, off, err);
	if (rc) {
		free(b);
		return rc;
	}
	b[n] = 0;
	*out = b;
	return 0;
}
