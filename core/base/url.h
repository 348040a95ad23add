/* SPDX-License-Identifier: MIT */
/*
 * url.h -- the two things every layer needs to know about a URL: how it
 * is shown (one redaction for every message and log line) and which
 * origin it names (the only place credentials may go).
 */
#ifndef PTFS_CORE_URL_H
#define PTFS_CORE_URL_H

#include <stdbool.h>
#include <stddef.h>

/*
 * @s as it may be printed or logged, into @out (always terminated,
 * truncated to @cap): a "scheme://" URL loses its userinfo ("***@"), its
 * query ("?***") and its fragment ("#***"); anything else (a local path)
 * is copied as it is.  Returns @out.
 */
char *pt_url_redact(const char *s, char *out, size_t cap);

/* The origin of an http(s) URL: scheme and host in lower case, the port
 * (80 or 443 when none is given).  False when @url is not one. */
struct pt_origin {
	char scheme[8];
	char host[256];
	unsigned port;
};
bool pt_url_origin(const char *url, struct pt_origin *o);

/* True when both are http(s) URLs of the same scheme, host and port. */
bool pt_url_same_origin(const char *a, const char *b);

#endif /* PTFS_CORE_URL_H */
