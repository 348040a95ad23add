/* SPDX-License-Identifier: MIT */
/*
 * http.h -- one line of an HTTP response head, parsed without the network
 * (core/remote's engine feeds it what libcurl receives; the fuzzer feeds it
 * anything).  Strict where a loose reading could mix versions or bytes:
 * a Content-Range must be "bytes FIRST-LAST/TOTAL" with FIRST <= LAST <
 * TOTAL (or "bytes *" "/TOTAL"), digits only, no sign, no overflow.
 */
#ifndef PTFS_CORE_HTTP_H
#define PTFS_CORE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pt_http_field {
	PT_HTTP_OTHER,          /* a header not listed here, or no header */
	PT_HTTP_STATUS,         /* "HTTP/x y ...": a new response begins */
	PT_HTTP_ETAG,
	PT_HTTP_LINKED_ETAG,    /* X-Linked-Etag (the Hugging Face hub) */
	PT_HTTP_REPO_COMMIT,    /* X-Repo-Commit (the hub) */
	PT_HTTP_CONTENT_RANGE,
	PT_HTTP_LAST_MODIFIED,
	PT_HTTP_RETRY_AFTER,
	PT_HTTP_LOCATION,
};

struct pt_http_line {
	enum pt_http_field field;
	char value[512];        /* the value, trimmed (truncated to fit) */
	long status;            /* STATUS: 100..999, else 0 */
	bool range_ok;          /* CONTENT_RANGE: well formed */
	uint64_t first, last;   /* CONTENT_RANGE: the bytes (none: 1, 0) */
	uint64_t total;         /* CONTENT_RANGE: the size, 0 when "*" */
	int64_t time;           /* LAST_MODIFIED: Unix seconds, 0 when bad */
	double seconds;         /* RETRY_AFTER: 0..86400 (delta seconds) */
};

/* Parse @n bytes at @p (one line, CRLF or not, NULs allowed) into @out;
 * returns out->field. */
enum pt_http_field pt_http_parse_line(const char *p, size_t n,
				      struct pt_http_line *out);

#endif /* PTFS_CORE_HTTP_H */
