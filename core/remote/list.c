/* SPDX-License-Identifier: MIT */
/*
 * list.c -- the names in a remote "directory", so that a sharded or
 * distributed checkpoint stored there opens by the directory's URL, as a
 * local directory does (ckpt.h, pt_ckpt_pick()):
 *
 *   s3://BUCKET/PREFIX/    S3's ListObjectsV2 with the delimiter '/',
 *                          page after page (a continuation token);
 *   hf://ORG/REPO[@REV][/PATH/]  the hub's tree API, page after page (a
 *                          Link header's rel="next", on the hub only).
 *
 * Each page bounded (LS_MAX_PAGE), read by listing.c.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/url.h"
#include "remote/listing.h"
#include "remote/remote_i.h"

#define LS_MAX_PAGE (8u << 20)  /* bytes of one page's XML */
#define LS_ATTEMPTS 4           /* a page sent again after a 5xx/429/reset */
#define LS_MAX_PAGES 10000

struct ls_page {
	struct pt_buf body;
	char code[48];          /* S3's error code, when it failed */
	char *next;             /* the hub: the next page's URL, or NULL */
	long status;
};

bool pt_remote_is_prefix(const char *url)
{
	size_t n = strcspn(url, "?#");
	const char *p = url + 5;

	if (n && url[n - 1] == '/')
		return true;
	if (strncmp(url, "hf://", 5))
		return false;
	/* hf://[KIND/]ORG/REPO[@REV]: the repository itself */
	if (!strncmp(p, "datasets/", 9) || !strncmp(p, "spaces/", 7))
		p = strchr(p, '/') + 1;
	p = strchr(p, '/');
	return p && !strchr(p + 1, '/');
}

static size_t ls_header(char *p, size_t size, size_t n, void *ud)
{
	struct ls_page *pg = ud;

	if (!pg->next && rm_link_next(p, size * n, &pg->next))
		return 0;
	return size * n;
}

static size_t ls_body(char *p, size_t size, size_t n, void *ud)
{
	struct pt_buf *b = ud;

	if (b->len + size * n > LS_MAX_PAGE)
		return 0;       /* stops the transfer: a page too big */
	pt_buf_add(b, p, size * n);
	return b->oom ? 0 : size * n;
}

/* @s %-escaped as a query value (RFC 3986 unreserved kept: the form
 * SigV4 signs) onto @b. */
static void ls_put_escaped(struct pt_buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (isalnum(c) || strchr("-._~", c)) {
			pt_buf_putc(b, (char)c);
		} else {
			pt_buf_putc(b, '%');
			pt_buf_putc(b, hex[c >> 4]);
			pt_buf_putc(b, hex[c & 15]);
		}
	}
}

/* The request of one page: parameters in their sorted order, as SigV4's
 * canonical query string has them. */
static char *ls_request(const struct rm_url *u, const char *prefix,
			const char *token)
{
	struct pt_buf b;

	pt_buf_init(&b);
	pt_buf_puts(&b, u->prefix);
	pt_buf_putc(&b, '?');
	if (token) {
		pt_buf_puts(&b, "continuation-token=");
		ls_put_escaped(&b, token);
		pt_buf_putc(&b, '&');
	}
	pt_buf_puts(&b, "delimiter=%2F&list-type=2&prefix=");
	ls_put_escaped(&b, prefix);
	if (b.oom) {
		pt_buf_free(&b);
		return NULL;
	}
	return b.p;
}

static bool ls_transient(CURLcode cc, long status)
{
	return cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_RECV_ERROR ||
	       cc == CURLE_SEND_ERROR || cc == CURLE_GOT_NOTHING ||
	       cc == CURLE_PARTIAL_FILE || cc == CURLE_COULDNT_CONNECT ||
	       (cc == CURLE_OK && (status >= 500 || status == 429));
}

/* GET one page into @pg: 0, 1 when the server answered with an error
 * (S3's code in pg->code), or -errno with one line. */
static int ls_get(struct pt_remote *r, const char *url, struct ls_page *pg,
		  struct pt_error *err)
{
	CURLcode cc = CURLE_OK;
	unsigned a;

	for (a = 0; a < LS_ATTEMPTS; a++) {
		struct curl_slist *hdrs = NULL;
		CURL *h = curl_easy_init();

		if (!h)
			return pt_fail(err, -ENOMEM, "libcurl: no handle");
		if (a)
			usleep(250000u << a);
		pt_buf_free(&pg->body);
		free(pg->next);
		pg->next = NULL;
		pg->status = 0;
		rm_http_setup(h, r, url, &hdrs);
		if (hdrs)
			curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ls_body);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &pg->body);
		curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, ls_header);
		curl_easy_setopt(h, CURLOPT_HEADERDATA, pg);
		curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)r->o.timeout_s);
		cc = curl_easy_perform(h);
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &pg->status);
		curl_easy_cleanup(h);
		curl_slist_free_all(hdrs);
		if (!ls_transient(cc, pg->status))
			break;
	}
	if (cc == CURLE_WRITE_ERROR)
		return pt_fail(err, pg->body.oom ? -ENOMEM : -EFBIG,
			       "%s: a page of the listing exceeds %u bytes",
			       r->u.display, LS_MAX_PAGE);
	if (cc != CURLE_OK)
		return pt_fail(err, -EIO, "%s: listing: %s", r->u.display,
			       curl_easy_strerror(cc));
	if (pg->status == 200)
		return 0;
	rm_s3_code(pg->body.p, pg->body.len, pg->code, sizeof(pg->code));
	return 1;
}

/* One line for a page the server refused, as an open's (remote.c
 * rm_open_fail). */
static int ls_refused(const struct pt_remote *r, const struct ls_page *pg,
		      struct pt_error *err)
{
	char hint[800];

	hint[0] = '\0';
	if (r->u.kind == RM_S3)
		rm_s3_hint(pg->code, r->u.aws, hint, sizeof(hint));
	else if (pg->status == 401 || pg->status == 403)
		snprintf(hint, sizeof(hint), "HTTP %ld%s", pg->status,
			 getenv("HF_TOKEN") ? " (HF_TOKEN has no access to it)" :
			 " (gated or private? set HF_TOKEN)");
	if (!*hint)
		snprintf(hint, sizeof(hint), "HTTP %ld%s", pg->status,
			 pg->status == 404 ? " (not found)" : "");
	return pt_fail(err, pg->status == 404 ? -ENOENT : -EACCES,
		       "%s: cannot list: %s", r->u.display, hint);
}

/* The hub's tree URL of @u's directory: <endpoint>/api/KIND/ORG/REPO/
 * tree/REV[/PATH] (hf_api ends in "revision/"), malloc()ed. */
static char *ls_tree_url(const struct rm_url *u)
{
	size_t base = strlen(u->hf_api) - strlen("revision/");
	size_t rel = strlen(u->rel);
	struct pt_buf b;

	pt_buf_init(&b);
	pt_buf_add(&b, u->hf_api, base);
	pt_buf_puts(&b, "tree/");
	pt_buf_puts(&b, u->rev);
	if (rel > 1) {
		pt_buf_putc(&b, '/');
		pt_buf_add(&b, u->rel, rel - 1);        /* no final '/' */
	}
	if (b.oom) {
		pt_buf_free(&b);
		return NULL;
	}
	return b.p;
}

/* The directory's path as the listing names it: S3's PREFIX/, the hub's
 * PATH/ ("" for the repository's root); it lies in @url, checked by
 * rm_url_parse_prefix(). */
static const char *ls_dir(const char *url, enum rm_kind kind)
{
	const char *p = url + 5;

	if (kind == RM_S3)
		return strchr(p, '/') + 1;
	if (!strncmp(p, "datasets/", 9) || !strncmp(p, "spaces/", 7))
		p = strchr(p, '/') + 1;
	p = strchr(strchr(p, '/') + 1, '/');
	return p ? p + 1 : "";
}

/* The names of page @pg into @l; *@next the next page's URL or NULL. */
static int ls_page_names(const struct pt_remote *r, const struct ls_page *pg,
			 const char *dir, struct pt_dir_list *l, char **next)
{
	char *token = NULL;
	int rc;

	*next = NULL;
	if (r->u.kind == RM_HF) {
		rc = rm_hf_tree_parse(pg->body.p, pg->body.len, dir, l);
		/* the next page only from the hub itself: its token goes there */
		if (!rc && pg->next && pt_url_same_origin(pg->next, r->u.hf_api))
			*next = strdup(pg->next);
		else if (!rc && pg->next)
			rc = -EBADMSG;
		return !rc && pg->next && !*next ? -ENOMEM : rc;
	}
	rc = rm_s3_list_parse(pg->body.p, pg->body.len, dir, l, &token);
	if (!rc && token && !(*next = ls_request(&r->u, dir, token)))
		rc = -ENOMEM;
	free(token);
	return rc;
}

static int ls_pages(struct pt_remote *r, const char *dir,
		    struct pt_dir_list *l, struct pt_error *err)
{
	struct ls_page pg;
	unsigned pages = 0;
	char *url;
	int rc = 0;

	memset(&pg, 0, sizeof(pg));
	pt_buf_init(&pg.body);
	url = r->u.kind == RM_HF ? ls_tree_url(&r->u) :
	      ls_request(&r->u, dir, NULL);
	if (!url)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	while (!rc && url) {
		char *next = NULL;

		if (++pages > LS_MAX_PAGES) {
			rc = pt_fail(err, -EFBIG, "%s: the listing goes on past %u pages",
				     r->u.display, LS_MAX_PAGES);
			break;
		}
		rc = ls_get(r, url, &pg, err);
		if (rc == 1)
			rc = ls_refused(r, &pg, err);
		if (!rc)
			rc = ls_page_names(r, &pg, dir, l, &next);
		if (rc == -EFBIG)
			rc = pt_fail(err, rc, "%s: lists more than %u names (or %zu MiB of them), not a checkpoint",
				     r->u.display, PT_MAX_DIR_ENTRIES,
				     PT_MAX_DIR_BYTES >> 20);
		else if (rc == -EBADMSG)
			rc = pt_fail(err, rc, "%s: the server's listing cannot be read (%s)",
				     r->u.display, r->u.kind == RM_HF ?
				     "the hub's tree API" : "S3 ListObjectsV2");
		else if (rc == -ENOMEM)
			rc = pt_fail(err, rc, "out of memory");
		free(url);
		url = next;
	}
	free(url);
	free(pg.next);
	pt_buf_free(&pg.body);
	return rc;
}

int pt_remote_list(const char *url, const struct pt_remote_opts *o,
		   struct pt_dir_list *l, struct pt_error *err)
{
	struct pt_remote *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return pt_fail(err, -ENOMEM, "out of memory");
	r->o = *o;
	rc = rm_url_parse_prefix(&r->u, url, o->s3_endpoint, err);
	if (!rc)
		rc = rm_engine_get(err);        /* libcurl, loaded and set up */
	if (rc) {
		rm_url_free(&r->u);
		free(r);
		return rc;
	}
	rc = ls_pages(r, ls_dir(url, r->u.kind), l, err);
	if (!rc && pt_dir_list_end(l))
		rc = pt_fail(err, -ENOMEM, "out of memory");
	rm_engine_put();
	rm_url_free(&r->u);
	free(r);
	return rc;
}
