/* SPDX-License-Identifier: MIT */
/*
 * listing.c -- what a server says a "directory" holds (listing.h): a page
 * of S3's ListObjectsV2 (XML) or of the hub's tree API (JSON).  Plain C,
 * no libcurl: list.c fetches the pages, the fuzzers feed these directly.
 */
#include "remote/listing.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/json.h"

/* The text of the next <@tag>...</@tag> in [*@p, @end), entities kept;
 * *@p moves past it.  NULL when there is none. */
static const char *ls_elem(const char **p, const char *end, const char *tag,
			   size_t *len)
{
	char open[40], close[40];
	const char *a, *z;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = memmem(*p, (size_t)(end - *p), open, strlen(open));
	if (!a)
		return NULL;
	a += strlen(open);
	z = memmem(a, (size_t)(end - a), close, strlen(close));
	if (!z)
		return NULL;
	*p = z + strlen(close);
	*len = (size_t)(z - a);
	return a;
}

/* XML character data @s (@n bytes) with its five entities and numeric
 * references replaced, into @out (NUL-terminated, at most @n + 1 bytes);
 * false for a reference that is not one of those or not a character
 * below U+0080 that is no control. */
static bool ls_unescape(const char *s, size_t n, char *out)
{
	static const struct { const char *e; char c; } ents[] = {
		{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' },
		{ "&quot;", '"' }, { "&apos;", '\'' },
	};
	size_t i = 0, k;

	while (i < n) {
		if (s[i] != '&') {
			*out++ = s[i++];
			continue;
		}
		for (k = 0; k < sizeof(ents) / sizeof(ents[0]); k++)
			if (n - i >= strlen(ents[k].e) &&
			    !memcmp(s + i, ents[k].e, strlen(ents[k].e)))
				break;
		if (k < sizeof(ents) / sizeof(ents[0])) {
			*out++ = ents[k].c;
			i += strlen(ents[k].e);
			continue;
		}
		if (n - i >= 4 && s[i + 1] == '#') {
			char *stop;
			bool hex = s[i + 2] == 'x';
			unsigned long c = strtoul(s + i + 2 + hex, &stop,
						  hex ? 16 : 10);

			if (stop < s + n && *stop == ';' && c >= 0x20 && c < 0x7f) {
				*out++ = (char)c;
				i = (size_t)(stop + 1 - s);
				continue;
			}
		}
		return false;
	}
	*out = '\0';
	return true;
}

/* Add the name below @prefix that @raw (@n bytes, escaped XML) names:
 * "" and the prefix itself are skipped, a "subdirectory" loses its '/'. */
static int ls_add(struct pt_dir_list *l, const char *prefix, const char *raw,
		  size_t n, bool regular)
{
	size_t pl = strlen(prefix);
	char *key = malloc(n + 1);
	const char *name;
	size_t len;
	int rc = 0;

	if (!key)
		return -ENOMEM;
	if (!ls_unescape(raw, n, key) || strncmp(key, prefix, pl)) {
		free(key);
		return -EBADMSG;
	}
	name = key + pl;
	len = strlen(name);
	if (!regular && len && name[len - 1] == '/')
		len--;
	if (len && !memchr(name, '/', len))
		rc = pt_dir_list_add(l, name, len, regular);
	free(key);
	return rc;
}

int rm_s3_list_parse(const char *xml, size_t n, const char *prefix,
		     struct pt_dir_list *l, char **token)
{
	const char *end = xml + n, *p = xml, *blk, *v;
	size_t bn, vn;
	int rc = 0;

	*token = NULL;
	if (!n || !memmem(xml, n, "<ListBucketResult", 17))
		return -EBADMSG;
	while (!rc && (blk = ls_elem(&p, end, "Contents", &bn)) != NULL) {
		const char *q = blk;

		v = ls_elem(&q, blk + bn, "Key", &vn);
		rc = v ? ls_add(l, prefix, v, vn, true) : -EBADMSG;
	}
	p = xml;
	while (!rc && (blk = ls_elem(&p, end, "CommonPrefixes", &bn)) != NULL) {
		const char *q = blk;

		v = ls_elem(&q, blk + bn, "Prefix", &vn);
		rc = v ? ls_add(l, prefix, v, vn, false) : -EBADMSG;
	}
	p = xml;
	v = ls_elem(&p, end, "IsTruncated", &vn);
	if (rc || !v || vn != 4 || memcmp(v, "true", 4))
		return rc;
	p = xml;
	v = ls_elem(&p, end, "NextContinuationToken", &vn);
	if (!v || !vn || vn > 4096)
		return -EBADMSG;
	*token = malloc(vn + 1);
	if (!*token)
		return -ENOMEM;
	if (!ls_unescape(v, vn, *token)) {
		free(*token);
		*token = NULL;
		return -EBADMSG;
	}
	return 0;
}

/* ---- the hub's tree API ---- */

/* Add @path (@n bytes) when it is a name directly in @dir. */
static int hf_add(struct pt_dir_list *l, const char *dir, const uint8_t *path,
		  size_t n, bool regular)
{
	size_t dl = strlen(dir);

	if (n <= dl || memcmp(path, dir, dl) || memchr(path + dl, '/', n - dl) ||
	    memchr(path + dl, '\0', n - dl))
		return 0;
	return pt_dir_list_add(l, (const char *)path + dl, n - dl, regular);
}

/* One {"type": ..., "path": ...} of the array. */
static int hf_entry(struct pt_js *j, const char *dir, struct pt_dir_list *l)
{
	const uint8_t *k, *type = NULL, *path = NULL;
	size_t kn, tn = 0, pn = 0;
	bool empty, more = true;
	int rc = pt__js_open(j, '{', &empty);

	while (!rc && !empty && more) {
		rc = pt__js_key(j, &k, &kn);
		if (!rc && kn == 4 && !memcmp(k, "type", 4))
			rc = pt__js_str(j, &type, &tn);
		else if (!rc && kn == 4 && !memcmp(k, "path", 4))
			rc = pt__js_str(j, &path, &pn);
		else if (!rc)
			rc = pt__js_skip(j);
		if (!rc)
			rc = pt__js_next(j, '}', &more);
	}
	if (rc || !type || !path)
		return -EBADMSG;
	if (tn == 4 && !memcmp(type, "file", 4))
		return hf_add(l, dir, path, pn, true);
	if (tn == 9 && !memcmp(type, "directory", 9))
		return hf_add(l, dir, path, pn, false);
	return 0;
}

int rm_hf_tree_parse(const char *json, size_t n, const char *dir,
		     struct pt_dir_list *l)
{
	struct pt_error err = { 0 };
	struct pt_js j;
	bool empty, more = true;
	int rc;

	rc = pt__js_init(&j, (const uint8_t *)json, n, "tree", &err);
	if (rc)
		return rc;
	rc = pt__js_open(&j, '[', &empty);
	while (!rc && !empty && more) {
		rc = hf_entry(&j, dir, l);
		if (!rc)
			rc = pt__js_next(&j, ']', &more);
	}
	if (!rc && pt__js_peek(&j) != -1)
		rc = -EBADMSG;
	pt__js_free(&j);
	return rc;
}

int rm_link_next(const char *line, size_t n, char **next)
{
	const char *end = line + n, *p, *a, *z;

	*next = NULL;
	if (n < 5 || strncasecmp(line, "link:", 5))
		return 0;
	/* Link: <URL>; rel="next", <URL>; rel="prev" */
	for (p = line + 5; p < end; p = z + 1) {
		const char *stop;

		a = memchr(p, '<', (size_t)(end - p));
		if (!a)
			return 0;
		z = memchr(a, '>', (size_t)(end - a));
		if (!z)
			return 0;
		stop = memchr(z, ',', (size_t)(end - z));
		if (!stop)
			stop = end;
		if (memmem(z, (size_t)(stop - z), "rel=\"next\"", 10)) {
			*next = strndup(a + 1, (size_t)(z - a - 1));
			return *next ? 0 : -ENOMEM;
		}
	}
	return 0;
}
