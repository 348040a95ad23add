/* SPDX-License-Identifier: MIT */
/*
 * url.c -- the three URL forms and where their bytes are requested.
 *
 *   http(s)://HOST/PATH[?QUERY]   as given (a query, e.g. a presigned
 *                                 URL, is sent but never shown)
 *   s3://BUCKET/KEY               https://BUCKET.s3.REGION.amazonaws.com/KEY
 *                                 (virtual-hosted) or ENDPOINT/BUCKET/KEY
 *                                 (path style, the default for an
 *                                 S3-compatible store); the profile's
 *                                 s3.addressing_style chooses (aws.c)
 *   hf://[datasets/]ORG/REPO[@REV]/PATH
 *                                 ENDPOINT/ORG/REPO/resolve/REV/PATH (the
 *                                 hub's resolve URL); REV defaults to main
 *                                 and is pinned to a commit at open
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/url.h"
#include "remote/remote_i.h"

static char *rm_cat(const char *a, const char *b, const char *c)
{
	size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
	char *s = malloc(la + lb + lc + 1);

	if (!s)
		return NULL;
	memcpy(s, a, la);
	memcpy(s + la, b, lb);
	memcpy(s + la + lb, c, lc + 1);
	return s;
}

static char *rm_ndup(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

/* @s %-escaped for a URL path, keeping '/' (malloc()ed). */
static char *rm_escape_path(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *d = malloc(3 * n + 1);
	char *p = d;

	if (!d)
		return NULL;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (isalnum(c) || strchr("-._~/", c)) {
			*p++ = (char)c;
		} else {
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 15];
		}
	}
	*p = '\0';
	return d;
}

/* A path is usable when it is not empty and has no empty, "." or ".."
 * component (a shard name must stay beside its index). */
static bool rm_path_ok(const char *p)
{
	const char *c = p;

	if (!*p || *p == '/')
		return false;
	while (*c) {
		size_t n = strcspn(c, "/");

		if (n == 0 || (n == 1 && c[0] == '.') ||
		    (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c += n;
		if (*c == '/')
			c++;
		else
			break;
	}
	return p[strlen(p) - 1] != '/';
}

static const char *rm_env(const char *a, const char *b)
{
	const char *v = getenv(a);

	if ((!v || !*v) && b)
		v = getenv(b);
	return v && *v ? v : NULL;
}

static int rm_parse_http(struct rm_url *u, const char *url,
			 const char *shown, struct pt_error *err)
{
	char buf[2048];

	const char *host = strstr(url, "://") + 3;
	const char *path = strchr(host, '/');
	size_t plen;

	if (!path || path == host)
		return pt_fail(err, -EINVAL, "%s: URL names no object", shown);
	plen = strcspn(path + 1, "?#");
	if (plen == 0 || path[plen] == '/')
		return pt_fail(err, -EINVAL, "%s: URL names no object", shown);
	u->kind = RM_HTTP;
	u->prefix = rm_ndup(url, (size_t)(path + 1 - url));
	u->rel = rm_ndup(path + 1, plen);
	u->query = rm_ndup(path + 1 + plen, strcspn(path + 1 + plen, "#"));
	u->display = strdup(shown);
	/* the object's identity: no query, no credentials */
	u->key = rm_ndup(url, (size_t)(path + 1 + plen - url));
	if (u->key) {
		pt_url_redact(u->key, buf, sizeof(buf));
		free(u->key);
		u->key = strdup(buf);
	}
	return 0;
}

/* The bucket's prefix at @ep ("" for AWS itself), in @style. */
static void rm_s3_prefix(char *buf, size_t cap, const struct rm_aws *a,
			 const char *ep, const char *bucket)
{
	bool path = a->style == RM_S3_PATH ||
		    (a->style == RM_S3_AUTO && (*ep || strchr(bucket, '.')));
	size_t el = strlen(ep);
	const char *host;

	while (el && ep[el - 1] == '/')
		el--;
	if (!*ep && path)
		snprintf(buf, cap, "https://s3.%s.amazonaws.com/%s/", a->region,
			 bucket);
	else if (!*ep)
		snprintf(buf, cap, "https://%s.s3.%s.amazonaws.com/", bucket,
			 a->region);
	else if (path)
		snprintf(buf, cap, "%.*s/%s/", (int)el, ep, bucket);
	else {  /* virtual-hosted at an endpoint: BUCKET. before its host */
		host = strstr(ep, "://");
		host = host ? host + 3 : ep;
		snprintf(buf, cap, "%.*s%s.%.*s/", (int)(host - ep), ep, bucket,
			 (int)(el - (size_t)(host - ep)), host);
	}
}

/* A prefix of keys: "" (the bucket's root) or a path ending in '/'. */
static bool rm_prefix_ok(const char *p)
{
	size_t n = strlen(p);
	char *path;
	bool ok;

	if (!n)
		return true;
	if (p[n - 1] != '/' || !(path = rm_ndup(p, n - 1)))
		return false;
	ok = rm_path_ok(path);
	free(path);
	return ok;
}

/* s3://BUCKET/KEY, or with @dir s3://BUCKET/PREFIX/ (rel is then the
 * prefix, escaped). */
static int rm_parse_s3(struct rm_url *u, const char *url, const char *ep,
		       const char *shown, bool dir, struct pt_error *err)
{
	const char *b = url + 5;
	const char *slash = strchr(b, '/');
	char bucket[64];
	char buf[1024];
	size_t blen;
	int rc;

	if (!slash || slash == b ||
	    !(dir ? rm_prefix_ok(slash + 1) : rm_path_ok(slash + 1)))
		return pt_fail(err, -EINVAL, dir ?
			       "%s: expected s3://BUCKET/PREFIX/" :
			       "%s: expected s3://BUCKET/KEY", shown);
	blen = (size_t)(slash - b);
	if (blen > 63)
		return pt_fail(err, -EINVAL, "%s: bucket name too long", shown);
	memcpy(bucket, b, blen);
	bucket[blen] = '\0';
	u->kind = RM_S3;
	u->aws = malloc(sizeof(*u->aws));
	if (!u->aws)
		return -ENOMEM;
	rc = rm_aws_load(u->aws, err);
	if (rc)
		return rc;
	if (ep)
		snprintf(u->aws->endpoint, sizeof(u->aws->endpoint), "%s", ep);
	ep = u->aws->endpoint;
	u->region = strdup(u->aws->region);
	rm_s3_prefix(buf, sizeof(buf), u->aws, ep, bucket);
	u->prefix = strdup(buf);
	u->rel = rm_escape_path(slash + 1);
	u->query = strdup("");
	u->display = strdup(shown);
	u->key = *ep ? rm_cat(ep, " ", url) : strdup(url);
	if (u->key && *ep) {    /* the endpoint's credentials, if any, go */
		pt_url_redact(u->key, buf, sizeof(buf));
		free(u->key);
		u->key = strdup(buf);
	}
	return 0;
}

static bool rm_is_commit(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return false;
	return i == 40;
}

/* hf://[KIND/]ORG/REPO[@REV]/PATH, or with @dir a directory of the
 * repository: nothing after the repository, or a PATH ending in '/' (rel
 * is then "" or that path, escaped). */
static int rm_parse_hf(struct rm_url *u, const char *url, const char *shown,
		       bool dir, struct pt_error *err)
{
	const char *p = url + 5;
	const char *ep = rm_env("HF_ENDPOINT", NULL);
	const char *kind = "";
	const char *org, *repo_end, *path;
	char *rev;
	char buf[1024];

	if (!strncmp(p, "datasets/", 9) || !strncmp(p, "spaces/", 7)) {
		kind = p[0] == 'd' ? "datasets/" : "spaces/";
		p += strlen(kind);
	}
	org = p;
	p = strchr(org, '/');
	if (!p || p == org)
		return pt_fail(err, -EINVAL,
			       "%s: expected hf://ORG/REPO[@REVISION]/PATH", shown);
	repo_end = p + 1 + strcspn(p + 1, "@/");
	if (repo_end == p + 1 || (!*repo_end && !dir))
		return pt_fail(err, -EINVAL,
			       "%s: expected hf://ORG/REPO[@REVISION]/PATH", shown);
	if (*repo_end == '@') {
		path = strchr(repo_end, '/');
		if (!path && dir)
			path = repo_end + strlen(repo_end);
		if (!path || path == repo_end + 1)
			return pt_fail(err, -EINVAL,
				       "%s: expected hf://ORG/REPO@REVISION/PATH",
				       shown);
		rev = rm_ndup(repo_end + 1, (size_t)(path - repo_end - 1));
	} else {
		path = repo_end;
		rev = strdup("main");
	}
	if (!rev)
		return -ENOMEM;
	if (dir ? *path && !rm_prefix_ok(path + 1) : !rm_path_ok(path + 1)) {
		free(rev);
		return pt_fail(err, -EINVAL, dir ? "%s: URL names no directory" :
			       "%s: URL names no file", shown);
	}
	if (!ep)
		ep = "https://huggingface.co";
	snprintf(buf, sizeof(buf), "%.*s/%s%.*s/resolve/",
		 (int)(strlen(ep) - (ep[strlen(ep) - 1] == '/')), ep, kind,
		 (int)(repo_end - org), org);
	u->kind = RM_HF;
	u->hf_base = strdup(buf);
	u->rev = rev;
	u->pinned = rm_is_commit(rev);
	u->prefix = rm_cat(buf, rev, "/");
	snprintf(buf, sizeof(buf), "%.*s/api/%s%.*s/revision/",
		 (int)(strlen(ep) - (ep[strlen(ep) - 1] == '/')), ep,
		 *kind ? kind : "models/", (int)(repo_end - org), org);
	u->hf_api = strdup(buf);
	u->rel = rm_escape_path(*path ? path + 1 : path);
	u->query = strdup("");
	u->display = strdup(shown);
	snprintf(buf, sizeof(buf), "%s hf://%s%.*s/%s", ep, kind,
		 (int)(repo_end - org), org, *path ? path + 1 : path);
	u->key = strdup(buf);
	return 0;
}

/* rm_url_parse(), and with @dir rm_url_parse_prefix(). */
static int rm_parse(struct rm_url *u, const char *url, const char *s3_endpoint,
		    bool dir, struct pt_error *err)
{
	char shown[2048];
	int rc;

	memset(u, 0, sizeof(*u));
	pt_url_redact(url, shown, sizeof(shown));
	if (strlen(url) > 1500)
		return pt_fail(err, -ENAMETOOLONG, "URL too long (%zu bytes)",
			       strlen(url));
	if (dir && strncmp(url, "s3://", 5) && strncmp(url, "hf://", 5))
		rc = pt_fail(err, -EISDIR,
			     "%s: names a directory, and only s3:// and hf:// directories can be listed: give the URL of the checkpoint's file (its *.index.json, or .metadata for DCP)",
			     shown);
	else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8))
		rc = rm_parse_http(u, url, shown, err);
	else if (!strncmp(url, "s3://", 5))
		rc = rm_parse_s3(u, url, s3_endpoint, shown, dir, err);
	else if (!strncmp(url, "hf://", 5))
		rc = rm_parse_hf(u, url, shown, dir, err);
	else
		rc = pt_fail(err, -EINVAL, "%s: not an http(s)://, s3:// or hf:// URL",
			     shown);
	if (!rc && (!u->prefix || !u->rel || !u->query || !u->display ||
		    !u->key || (u->kind == RM_S3 && !u->region) ||
		    (u->kind == RM_HF && (!u->hf_base || !u->hf_api))))
		rc = pt_fail(err, -ENOMEM, "out of memory");
	if (rc)
		rm_url_free(u);
	return rc;
}

int rm_url_parse(struct rm_url *u, const char *url, const char *s3_endpoint,
		 struct pt_error *err)
{
	return rm_parse(u, url, s3_endpoint, false, err);
}

int rm_url_parse_prefix(struct rm_url *u, const char *url,
			const char *s3_endpoint, struct pt_error *err)
{
	return rm_parse(u, url, s3_endpoint, true, err);
}

/* @s with its last '/'-component replaced by @name (malloc()ed). */
static char *rm_beside(const char *s, const char *name)
{
	const char *slash = strrchr(s, '/');
	size_t n = slash ? (size_t)(slash + 1 - s) : 0;
	char *head = rm_ndup(s, n);
	char *r;

	if (!head)
		return NULL;
	r = rm_cat(head, name, "");
	free(head);
	return r;
}

int rm_url_sibling(struct rm_url *out, const struct rm_url *u,
		   const char *rel, struct pt_error *err)
{
	char *esc;

	memset(out, 0, sizeof(*out));
	if (!rm_path_ok(rel))
		return pt_fail(err, -EINVAL,
			       "%s: '%s' does not name a file beside it",
			       u->display, rel);
	esc = rm_escape_path(rel);
	if (!esc)
		return pt_fail(err, -ENOMEM, "out of memory");
	out->kind = u->kind;
	out->prefix = strdup(u->prefix);
	out->rel = rm_beside(u->rel, esc);
	out->query = strdup("");
	out->display = rm_beside(u->display, rel);
	out->key = rm_beside(u->key, rel);
	out->region = u->region ? strdup(u->region) : NULL;
	out->aws = u->aws ? malloc(sizeof(*out->aws)) : NULL;
	if (out->aws)
		memcpy(out->aws, u->aws, sizeof(*out->aws));
	out->hf_base = u->hf_base ? strdup(u->hf_base) : NULL;
	out->hf_api = u->hf_api ? strdup(u->hf_api) : NULL;
	out->rev = u->rev ? strdup(u->rev) : NULL;
	out->pinned = u->pinned;
	free(esc);
	if (!out->prefix || !out->rel || !out->query || !out->display ||
	    !out->key || (u->region && !out->region) ||
	    (u->aws && !out->aws) ||
	    (u->hf_base && (!out->hf_base || !out->hf_api || !out->rev))) {
		rm_url_free(out);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	return 0;
}

char *rm_url_request(const struct rm_url *u)
{
	return rm_cat(u->prefix, u->rel, u->query);
}

void rm_url_pin(struct rm_url *u, const char *commit)
{
	char *rev = strdup(commit);
	char *prefix;

	if (!rev || u->kind != RM_HF || !rm_is_commit(commit)) {
		free(rev);
		return;
	}
	prefix = rm_cat(u->hf_base, rev, "/");
	if (!prefix) {
		free(rev);
		return;
	}
	free(u->rev);
	free(u->prefix);
	u->rev = rev;
	u->prefix = prefix;
	u->pinned = true;
}

void rm_url_free(struct rm_url *u)
{
	free(u->prefix);
	free(u->rel);
	free(u->query);
	free(u->key);
	free(u->display);
	free(u->region);
	free(u->hf_base);
	free(u->hf_api);
	free(u->rev);
	if (u->aws)
		rm_aws_clear(u->aws);
	free(u->aws);
	memset(u, 0, sizeof(*u));
}
