/* SPDX-License-Identifier: MIT */
/*
 * replace.c -- the copy-and-replace commit for containers without
 * checksums (safetensors): copy the file beside itself (copy_file_range,
 * so copy-on-write filesystems share extents), write the new bytes of each
 * range where they are, fsync, rename over the original, fsync the
 * directory.  Any failure removes the copy and leaves the original
 * untouched.
 */
#include "container/replace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Copy all of @src into @out (copy_file_range from the source's extent, so copy-on-write filesystems share extents; read/write where it
 * is not supported). */
static int copy_all(const struct pt_source *src, int out, const char *tmp,
		    uint8_t *buf, size_t chunk, struct pt_error *err)
{
	uint64_t done = 0, base = 0;
	int e, in = -1;

	if (!pt_source_extent(src, 0, src->size, &in, &base))
		return pt_fail(err, -EROFS, "commit: %s: not a local file",
			       src->name);

	while (done < src->size) {
		loff_t from = (loff_t)(base + done), to = (loff_t)done;
		ssize_t k = copy_file_range(in, &from, out, &to,
					    (size_t)(src->size - done), 0);

		if (k > 0) {
			done += (uint64_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EXDEV && errno != ENOSYS &&
		    errno != EINVAL && errno != EOPNOTSUPP) {
			e = errno;
			return pt_fail(err, -e, "commit: write to %s: %s", tmp, strerror(e));
		}
		k = pread(in, buf, (size_t)(src->size - done < chunk ?
					     src->size - done : chunk),
			  (off_t)(base + done));
		if (k <= 0 || pwrite(out, buf, (size_t)k, (off_t)done) != k) {
			e = k < 0 ? errno : EIO;
			return pt_fail(err, -e, "commit: write to %s: %s", tmp, strerror(e));
		}
		done += (uint64_t)k;
	}
	return 0;
}

int pt_replace_ranges(const struct pt_source *src,
		      const struct pt_replace *r, size_t n,
		      struct pt_error *err)
{
	const char *path = pt_source_local_path(src);
	const size_t chunk = 4u << 20;
	char *dir = NULL, *tmp = NULL, *base;
	uint8_t *buf = NULL;
	struct pt_error e2;
	struct stat st;
	size_t i;
	int out = -1, dfd, rc = 0, e;

	if (!path)
		return pt_fail(err, -EROFS, "commit: %s: not a local file",
			       src->name);
	rc = pt_source_check(src, PT_CHECK_NAME, err);
	if (rc) {
		pt_error_prefix(err, "commit");
		return rc;
	}
	if (stat(path, &st) != 0)
		return pt_fail(err, -errno, "commit: %s: %s", path, strerror(errno));
	dir = strdup(path);
	buf = malloc(chunk);
	if (!dir || !buf) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	base = strrchr(dir, '/');
	if (base) {
		*base++ = '\0';
	} else {
		base = dir;
	}
	if (asprintf(&tmp, "%s/.%s.ptfs-XXXXXX", base == dir ? "." : dir, base) < 0) {
		tmp = NULL;
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	out = mkstemp(tmp);
	if (out < 0) {
		e = errno;
		free(tmp);
		tmp = NULL;
		rc = pt_fail(err, -e, "commit: cannot create a file beside %s: %s",
			     path, strerror(e));
		goto out;
	}
	if (fchmod(out, st.st_mode & 07777) != 0 ||
	    (fchown(out, st.st_uid, st.st_gid) != 0 && errno != EPERM)) {
		e = errno;
		rc = pt_fail(err, -e, "commit: %s: %s", tmp, strerror(e));
		goto out;
	}
	rc = copy_all(src, out, tmp, buf, chunk, err);
	for (i = 0; rc == 0 && i < n; i++) {
		uint64_t off;

		for (off = 0; rc == 0 && off < r[i].len; off += chunk) {
			size_t k = r[i].len - off < chunk ?
				   (size_t)(r[i].len - off) : chunk;

			rc = r[i].read(r[i].ctx, buf, k, off);
			if (rc) {
				pt_fail(err, rc, "commit: reading new contents: %s",
					strerror(-rc));
			} else if (pwrite(out, buf, k, (off_t)(r[i].off + off)) !=
				   (ssize_t)k) {
				e = errno ? errno : EIO;
				rc = pt_fail(err, -e, "commit: write to %s: %s", tmp,
					     strerror(e));
			}
		}
	}
	if (rc)
		goto out;
	if (fsync(out) != 0) {
		e = errno;
		rc = pt_fail(err, -e, "commit: fsync %s: %s", tmp, strerror(e));
		goto out;
	}
	pt_error_clear(&e2);
	if (pt_source_check(src, PT_CHECK_NAME, &e2) != 0) {
		rc = pt_fail(err, -ESTALE, "commit: %s: checkpoint changed on disk during the commit",
			     path);
		goto out;
	}
	if (rename(tmp, path) != 0) {
		e = errno;
		rc = pt_fail(err, -e, "commit: rename %s: %s", tmp, strerror(e));
		goto out;
	}
	free(tmp);
	tmp = NULL;
	dfd = open(base == dir ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd); /* renamed already: that is success */
		close(dfd);
	}
out:
	if (out >= 0)
		close(out);
	if (tmp) {
		unlink(tmp);
		free(tmp);
	}
	free(dir);
	free(buf);
	return rc;
}
