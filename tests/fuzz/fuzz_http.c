/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http.c -- libFuzzer target for what a server's answer makes of
 * core/remote without the network: response head lines (status lines,
 * ETag, Content-Range, Last-Modified, Retry-After, Location,
 * base/http.c) and the URLs a redirect hands over (redaction and origin,
 * base/url.c).
 *
 * The input is split into lines; each is parsed as a head line and, as a
 * string, redacted and given an origin.  Checked: values are terminated
 * and fit; a Content-Range taken is FIRST <= LAST < TOTAL; a status is
 * 100..999; Retry-After is 0..86400; a redacted URL keeps no byte of its
 * userinfo, query or fragment; an origin has a host and a port.
 */
#include <string.h>

#include "fuzz.h"
#include "base/http.h"
#include "base/url.h"

static void check_line(const char *p, size_t n)
{
	struct pt_http_line h;
	enum pt_http_field f = pt_http_parse_line(p, n, &h);

	FUZZ_CHECK(f == h.field);
	FUZZ_CHECK(memchr(h.value, '\0', sizeof(h.value)) != NULL);
	if (f == PT_HTTP_STATUS)
		FUZZ_CHECK(h.status == 0 || (h.status >= 100 && h.status <= 999));
	if (f == PT_HTTP_CONTENT_RANGE && h.range_ok && h.first <= h.last)
		FUZZ_CHECK(h.total == 0 || h.last < h.total);
	if (f == PT_HTTP_CONTENT_RANGE && h.range_ok && h.first > h.last)
		FUZZ_CHECK(h.total > 0 || !strncmp(h.value + 6, "*/0", 3));
	FUZZ_CHECK(h.seconds >= 0 && h.seconds <= 86400);
	FUZZ_CHECK(h.time >= 0);
}

static void check_url(const char *s)
{
	char out[4096];
	const char *sep, *auth, *end, *q;
	struct pt_origin o;

	pt_url_redact(s, out, sizeof(out));
	FUZZ_CHECK(strlen(out) < sizeof(out));
	sep = strstr(out, "://");
	if (sep && sep != out && strstr(s, "://") &&
	    strcspn(s, ":/?#@") == (size_t)(strstr(s, "://") - s)) {
		auth = sep + 3;
		end = auth + strcspn(auth, "/?#");
		/* userinfo shown as "***@" only */
		q = memchr(auth, '@', (size_t)(end - auth));
		FUZZ_CHECK(!q || (q == auth + 3 && !strncmp(auth, "***@", 4)));
		FUZZ_CHECK(!q || !memchr(q + 1, '@', (size_t)(end - q - 1)));
		q = strpbrk(end, "?#");
		if (q)  /* a query, a fragment: "?***", "#***" and no more */
			FUZZ_CHECK(!strcmp(q, "?***") || !strcmp(q, "#***") ||
				   !strcmp(q, "?***#***"));
	}
	if (pt_url_origin(s, &o)) {
		FUZZ_CHECK(o.host[0] != '\0');
		FUZZ_CHECK(o.port >= 1 && o.port <= 65535);
		FUZZ_CHECK(pt_url_same_origin(s, s));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;
	char line[2048];

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);

		check_line(p, n);
		if (n < sizeof(line)) {
			memcpy(line, p, n);
			line[n] = '\0';
			line[strcspn(line, "\r\n")] = '\0';
			check_url(line);
		}
		p += n;
	}
	return 0;
}
