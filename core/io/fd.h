/* SPDX-License-Identifier: MIT */
/*
 * fd.h -- the one loop that reads or writes a whole byte range of a file
 * descriptor with pread(2)/pwrite(2): a call may move fewer bytes than
 * asked (a signal, a pipe, a file that ends) and is then continued, and
 * EINTR is retried.  Every module that wants "all of it" calls these
 * instead of its own loop.
 */
#ifndef PTFS_CORE_IO_FD_H
#define PTFS_CORE_IO_FD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Up to @n bytes at @off of @fd into @p: how many, fewer only where the
 * file ends, or -errno. */
ssize_t pt_pread_upto(int fd, void *p, size_t n, uint64_t off);

/* Exactly @n bytes at @off of @fd into @p: 0, -errno, or -EIO when the
 * file ends first. */
int pt_pread_full(int fd, void *p, size_t n, uint64_t off);

/* All @n bytes of @p to @fd at @off: 0, -errno, or -EIO when a write
 * makes no progress. */
int pt_pwrite_full(int fd, const void *p, size_t n, uint64_t off);

#endif /* PTFS_CORE_IO_FD_H */
