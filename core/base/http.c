/* SPDX-License-Identifier: MIT */
/*
 * http.c -- parsing one HTTP response head line (http.h).
 */
#include "base/http.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Digits only into *@v (no sign, no overflow); the end, or NULL. */
static const char *http_u64(const char *s, uint64_t *v)
{
	uint64_t x = 0;
	const char *p = s;

	for (; *p >= '0' && *p <= '9'; p++) {
		if (x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return NULL;
		x = x * 10 + (uint64_t)(*p - '0');
	}
	if (p == s)
		return NULL;
	*v = x;
	return p;
}

static void http_range(struct pt_http_line *o)
{
	const char *p = o->value;
	uint64_t a, b, t = 0;

	o->first = 1;
	o->last = 0;
	if (strncasecmp(p, "bytes ", 6))
		return;
	p += 6;
	if (*p == '*') {
		p++;
		if (*p++ != '/' || !(p = http_u64(p, &t)) || *p)
			return;
		o->total = t;
		o->range_ok = true;
		return;
	}
	if (!(p = http_u64(p, &a)) || *p++ != '-' || !(p = http_u64(p, &b)) ||
	    *p++ != '/' || a > b)
		return;
	if (*p == '*' && !p[1]) {
		t = 0;
	} else if (!(p = http_u64(p, &t)) || *p || b >= t) {
		return;
	}
	o->first = a;
	o->last = b;
	o->total = t;
	o->range_ok = true;
}

static int http_month(const char *m)
{
	static const char names[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	int i;

	for (i = 0; i < 12; i++)
		if (!strncmp(m, names + 3 * i, 3) && m[3] == '\0')
			return i;
	return -1;
}

/* An HTTP-date (IMF-fixdate, RFC 850 or asctime form) as Unix seconds;
 * 0 when @s is not one. */
static int64_t pt_http_date(const char *s)
{
	char wd[16], mon[8], tz[8];
	int d, y, hh, mm, ss, n = 0;
	struct tm tm;
	time_t t;

	memset(&tm, 0, sizeof(tm));
	/* Sun, 06 Nov 1994 08:49:37 GMT */
	if (sscanf(s, "%15[A-Za-z], %2d %3s %4d %2d:%2d:%2d %3s%n", wd, &d, mon,
		   &y, &hh, &mm, &ss, tz, &n) == 8 && !s[n]) {
	/* Sunday, 06-Nov-94 08:49:37 GMT */
	} else if (sscanf(s, "%15[A-Za-z], %2d-%3[A-Za-z]-%2d %2d:%2d:%2d %3s%n",
			  wd, &d, mon, &y, &hh, &mm, &ss, tz, &n) == 8 && !s[n]) {
		y += y < 70 ? 2000 : 1900;
	/* Sun Nov  6 08:49:37 1994 */
	} else if (sscanf(s, "%15[A-Za-z] %3s %2d %2d:%2d:%2d %4d%n", wd, mon,
			  &d, &hh, &mm, &ss, &y, &n) == 7 && !s[n]) {
		strcpy(tz, "GMT");
	} else {
		return 0;
	}
	tm.tm_mon = http_month(mon);
	if (strcmp(tz, "GMT") || tm.tm_mon < 0 || d < 1 || d > 31 ||
	    y < 1970 || y > 9999 || hh < 0 || hh > 23 || mm < 0 || mm > 59 ||
	    ss < 0 || ss > 60)
		return 0;
	tm.tm_mday = d;
	tm.tm_year = y - 1900;
	tm.tm_hour = hh;
	tm.tm_min = mm;
	tm.tm_sec = ss;
	t = timegm(&tm);
	return t > 0 ? (int64_t)t : 0;
}

static const struct {
	const char *name;
	enum pt_http_field field;
} http_names[] = {
	{ "etag", PT_HTTP_ETAG },
	{ "x-linked-etag", PT_HTTP_LINKED_ETAG },
	{ "x-repo-commit", PT_HTTP_REPO_COMMIT },
	{ "content-range", PT_HTTP_CONTENT_RANGE },
	{ "last-modified", PT_HTTP_LAST_MODIFIED },
	{ "retry-after", PT_HTTP_RETRY_AFTER },
	{ "location", PT_HTTP_LOCATION },
};

static void http_value(struct pt_http_line *o, const char *v, size_t n)
{
	size_t i, k = 0;

	while (n && (*v == ' ' || *v == '\t'))
		v++, n--;
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' ||
		     v[n - 1] == '\t'))
		n--;
	for (i = 0; i < n && k + 1 < sizeof(o->value); i++)
		if (v[i] != '\0')       /* a NUL would cut it short */
			o->value[k++] = v[i];
	o->value[k] = '\0';
}

enum pt_http_field pt_http_parse_line(const char *p, size_t n,
				      struct pt_http_line *o)
{
	const char *colon = memchr(p, ':', n);
	size_t kl = colon ? (size_t)(colon - p) : 0, i;
	uint64_t v;

	memset(o, 0, sizeof(*o));
	if (n >= 5 && !memcmp(p, "HTTP/", 5)) {
		const char *sp = memchr(p, ' ', n);

		o->field = PT_HTTP_STATUS;
		if (sp && (size_t)(sp - p) + 4 <= n && sp[1] >= '1' &&
		    sp[1] <= '9' && sp[2] >= '0' && sp[2] <= '9' &&
		    sp[3] >= '0' && sp[3] <= '9' &&
		    ((size_t)(sp - p) + 4 == n || sp[4] == ' ' || sp[4] == '\r' ||
		     sp[4] == '\n'))
			o->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 +
				    (sp[3] - '0');
		return o->field;
	}
	if (!colon)
		return o->field;
	for (i = 0; i < sizeof(http_names) / sizeof(http_names[0]); i++)
		if (strlen(http_names[i].name) == kl &&
		    !strncasecmp(p, http_names[i].name, kl))
			o->field = http_names[i].field;
	if (o->field == PT_HTTP_OTHER)
		return o->field;
	http_value(o, colon + 1, n - kl - 1);
	if (o->field == PT_HTTP_CONTENT_RANGE)
		http_range(o);
	else if (o->field == PT_HTTP_LAST_MODIFIED)
		o->time = pt_http_date(o->value);
	else if (o->field == PT_HTTP_RETRY_AFTER && http_u64(o->value, &v) &&
		 !*http_u64(o->value, &v))
		o->seconds = v > 86400 ? 86400 : (double)v;
	return o->field;
}
