/* SPDX-License-Identifier: MIT */
/*
 * url.c -- redaction and origins of URLs (url.h).  Pure string work: no
 * allocation, no locale, so that it serves every message and the fuzzer.
 */
#include "base/url.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

char *pt_url_redact(const char *s, char *out, size_t cap)
{
	const char *sep = strstr(s, "://");
	const char *auth, *end, *at, *q;
	size_t n, k;

	if (!cap)
		return out;
	if (!sep || sep == s || strcspn(s, ":/?#@") != (size_t)(sep - s)) {
		snprintf(out, cap, "%s", s);
		return out;
	}
	auth = sep + 3;
	end = auth + strcspn(auth, "/?#");
	/* the last '@' of the authority ends the userinfo */
	at = NULL;
	for (q = auth; q < end; q++)
		if (*q == '@')
			at = q;
	n = (size_t)(auth - s);
	k = (size_t)snprintf(out, cap, "%.*s%s", (int)n, s, at ? "***@" : "");
	if (at)
		auth = at + 1;
	if (k < cap) {
		n = strcspn(auth, "?#");
		k += (size_t)snprintf(out + k, cap - k, "%.*s", (int)n, auth);
		q = auth + n;
		if (k < cap && *q == '?')
			k += (size_t)snprintf(out + k, cap - k, "?***");
		if (k < cap && strchr(q, '#'))
			snprintf(out + k, cap - k, "#***");
	}
	return out;
}

bool pt_url_origin(const char *url, struct pt_origin *o)
{
	const char *h, *end, *at, *p, *colon = NULL;
	size_t n, i;

	memset(o, 0, sizeof(*o));
	if (!strncasecmp(url, "http://", 7)) {
		strcpy(o->scheme, "http");
		o->port = 80;
		h = url + 7;
	} else if (!strncasecmp(url, "https://", 8)) {
		strcpy(o->scheme, "https");
		o->port = 443;
		h = url + 8;
	} else {
		return false;
	}
	end = h + strcspn(h, "/?#");
	at = NULL;
	for (p = h; p < end; p++)
		if (*p == '@')
			at = p;
	if (at)
		h = at + 1;
	if (*h == '[') {                /* [v6]:port */
		p = memchr(h, ']', (size_t)(end - h));
		if (!p)
			return false;
		colon = p + 1 < end && p[1] == ':' ? p + 1 : NULL;
		if (p + 1 < end && !colon)
			return false;
	} else {
		colon = memchr(h, ':', (size_t)(end - h));
	}
	n = (size_t)((colon ? colon : end) - h);
	if (n == 0 || n >= sizeof(o->host))
		return false;
	for (i = 0; i < n; i++)
		o->host[i] = (char)(h[i] >= 'A' && h[i] <= 'Z' ? h[i] + 32 : h[i]);
	/* "host." names the same host as "host" */
	if (n > 1 && o->host[n - 1] == '.')
		o->host[n - 1] = '\0';
	if (colon && colon + 1 < end) {
		unsigned long v = 0;

		for (p = colon + 1; p < end; p++) {
			if (*p < '0' || *p > '9' || v > 65535)
				return false;
			v = v * 10 + (unsigned long)(*p - '0');
		}
		if (v == 0 || v > 65535)
			return false;
		o->port = (unsigned)v;
	}
	return true;
}

bool pt_url_same_origin(const char *a, const char *b)
{
	struct pt_origin x, y;

	return pt_url_origin(a, &x) && pt_url_origin(b, &y) &&
	       !strcmp(x.scheme, y.scheme) && !strcmp(x.host, y.host) &&
	       x.port == y.port;
}
