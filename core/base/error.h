/* SPDX-License-Identifier: MIT */
/*
 * error.h -- how core/ reports failure.
 *
 * Core functions return 0 or a negative errno value and, on failure, leave a
 * one-line message in a caller-supplied struct pt_error.  Core never prints:
 * the front ends (fs/, the CLI) turn the message into a log line.
 *
 * Codes: -EBADMSG malformed input, -ENOTSUP valid but unsupported, -EFBIG a
 * struct pt_limits cap was hit, -ENOMEM, -EIO (and other errno from syscalls).
 */
#ifndef PTFS_CORE_ERROR_H
#define PTFS_CORE_ERROR_H

#include <errno.h>
#include <stddef.h>

#define PT_ERROR_MSG_MAX 512

struct pt_error {
	int code;                       /* negative errno, 0 when no error */
	char msg[PT_ERROR_MSG_MAX];     /* one line, no trailing period */
};

/*
 * Record an error and return @code, so that a failure is one expression:
 *     return pt_fail(err, -EBADMSG, "zip: entry %u: name past end", i);
 * @err may be NULL.  The first error recorded wins: a later pt_fail() on the
 * same struct keeps the earlier, more specific message (the code is kept too).
 */
int pt_fail(struct pt_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like pt_fail(), but always overwrites a message already recorded. */
int pt_fail_over(struct pt_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefix the recorded message with "what: " (used to add context). */
void pt_error_prefix(struct pt_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Clear @err. */
void pt_error_clear(struct pt_error *err);

#endif /* PTFS_CORE_ERROR_H */
