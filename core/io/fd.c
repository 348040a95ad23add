/* SPDX-License-Identifier: MIT */
/*
 * fd.c -- whole-range pread/pwrite (see fd.h).
 */
#include "io/fd.h"

#include <errno.h>
#include <unistd.h>

ssize_t pt_pread_upto(int fd, void *p, size_t n, uint64_t off)
{
	uint8_t *b = p;
	size_t got = 0;

	while (got < n) {
		ssize_t k = pread(fd, b + got, n - got, (off_t)(off + got));

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		got += (size_t)k;
	}
	return (ssize_t)got;
}

int pt_pread_full(int fd, void *p, size_t n, uint64_t off)
{
	ssize_t got = pt_pread_upto(fd, p, n, off);

	if (got < 0)
		return (int)got;
	return (size_t)got == n ? 0 : -EIO;
}

int pt_pwrite_full(int fd, const void *p, size_t n, uint64_t off)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t k = pwrite(fd, b, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -EIO;
		b += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}
