/* SPDX-License-Identifier: MIT */
/*
 * aws.c -- S3 credentials and settings as the AWS CLI finds them, and what
 * an S3 error code means (aws.h).
 *
 * The files are INI as the CLI reads them: "[NAME]" sections, "KEY = VALUE"
 * or "KEY: VALUE" lines, keys case-insensitive, whole-line comments with
 * '#' or ';', and one level of nesting ("s3 =" followed by indented
 * "KEY = VALUE" lines).  The credentials file names a profile [NAME], the
 * config file [profile NAME] (and [default] for the default profile).
 */
#include "remote/aws.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool rm_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* [@s, @e) without the blanks around it */
static void rm_trim(const char **s, const char **e)
{
	while (*s < *e && rm_blank(**s))
		(*s)++;
	while (*e > *s && rm_blank((*e)[-1]))
		(*e)--;
}

struct rm_ini {
	const char *file;
	rm_ini_fn fn;
	void *ctx;
	struct pt_error *err;
	unsigned line;
	char section[RM_INI_MAX_LINE];
	bool in_section;
	char parent[RM_INI_MAX_LINE];   /* "KEY" of a "KEY =" opening a block */
};

static int rm_ini_bad(struct rm_ini *p, const char *what)
{
	return pt_fail(p->err, -EBADMSG, "%s:%u: %s", p->file, p->line, what);
}

static int rm_ini_pair(struct rm_ini *p, const char *s, const char *e,
		       bool nested)
{
	char key[RM_INI_MAX_LINE * 2 + 2], val[RM_INI_MAX_LINE];
	const char *sep = s, *ks = s, *ke, *vs, *ve = e;
	size_t n = 0, i;

	while (sep < e && *sep != '=' && *sep != ':')
		sep++;
	if (sep == e)
		return rm_ini_bad(p, "expected [SECTION] or KEY = VALUE");
	ke = sep;
	rm_trim(&ks, &ke);
	vs = sep + 1;
	rm_trim(&vs, &ve);
	if (ks == ke)
		return rm_ini_bad(p, "a value without a key");
	if (!p->in_section)
		return rm_ini_bad(p, "a key before any [SECTION]");
	if (nested)
		n = (size_t)snprintf(key, sizeof(key), "%s.", p->parent);
	for (i = 0; ks + i < ke; i++)
		key[n + i] = (char)tolower((unsigned char)ks[i]);
	key[n + i] = '\0';
	memcpy(val, vs, (size_t)(ve - vs));
	val[ve - vs] = '\0';
	if (!nested) {
		/* an empty value opens a block of nested keys */
		if (vs == ve)
			memcpy(p->parent, key, strlen(key) + 1);
		else
			p->parent[0] = '\0';
	}
	return p->fn(p->ctx, p->section, key, val, p->line);
}

static int rm_ini_line(struct rm_ini *p, const char *s, const char *e)
{
	bool indented = s < e && rm_blank(*s);
	const char *ts = s, *te = e;

	rm_trim(&ts, &te);
	if (ts == te || *ts == '#' || *ts == ';')
		return 0;
	if (*ts == '[' && !indented) {
		if (te[-1] != ']' || te - ts < 3)
			return rm_ini_bad(p, "expected [SECTION]");
		ts++;
		te--;
		rm_trim(&ts, &te);
		memcpy(p->section, ts, (size_t)(te - ts));
		p->section[te - ts] = '\0';
		p->in_section = true;
		p->parent[0] = '\0';
		return 0;
	}
	if (indented && p->in_section) {
		/* under "KEY =": a nested key; else the continuation of the
		 * value above, which no setting read here has */
		return p->parent[0] ? rm_ini_pair(p, ts, te, true) : 0;
	}
	return rm_ini_pair(p, ts, te, false);
}

int rm_ini_parse(const char *text, size_t len, const char *file,
		 rm_ini_fn fn, void *ctx, struct pt_error *err)
{
	struct rm_ini *p;
	size_t off = 0;
	int rc = 0;

	if (len > RM_INI_MAX_FILE)
		return pt_fail(err, -EFBIG, "%s: larger than %zu bytes", file,
			       RM_INI_MAX_FILE);
	if (memchr(text, '\0', len))
		return pt_fail(err, -EBADMSG, "%s: not a text file", file);
	p = calloc(1, sizeof(*p));
	if (!p)
		return pt_fail(err, -ENOMEM, "out of memory");
	p->file = file;
	p->fn = fn;
	p->ctx = ctx;
	p->err = err;
	while (off < len && rc == 0) {
		const char *s = text + off;
		const char *nl = memchr(s, '\n', len - off);
		const char *e = nl ? nl : text + len;

		p->line++;
		off = (size_t)(e - text) + (nl ? 1 : 0);
		if (e > s && e[-1] == '\r')
			e--;
		if (e - s >= RM_INI_MAX_LINE)
			rc = rm_ini_bad(p, "line too long");
		else
			rc = rm_ini_line(p, s, e);
	}
	free(p);
	return rc;
}

/* ---- profiles ---- */

struct rm_profile {
	struct rm_aws *a;
	const char *file;
	struct pt_error *err;
	bool config;            /* the config file: [profile NAME] */
	bool found;             /* the profile's section was seen */
	char id[128], secret[256], token[4096];
	char region[64], endpoint[512], s3_endpoint[512], style[16];
};

static bool rm_is_profile(const struct rm_profile *pr, const char *section)
{
	const char *name = pr->a->profile;

	if (!pr->config)
		return !strcmp(section, name);
	if (!strncmp(section, "profile", 7) && rm_blank(section[7])) {
		section += 8;
		while (rm_blank(*section))
			section++;
		return !strcmp(section, name);
	}
	return !strcmp(name, "default") && !strcmp(section, "default");
}

static int rm_profile_kv(void *ctx, const char *section, const char *key,
			 const char *value, unsigned line)
{
	static const struct {
		const char *key;
		size_t off, cap;
	} keys[] = {
#define K(k, f) { k, offsetof(struct rm_profile, f), \
		  sizeof(((struct rm_profile *)0)->f) }
		K("aws_access_key_id", id),
		K("aws_secret_access_key", secret),
		K("aws_session_token", token),
		K("region", region),
		K("endpoint_url", endpoint),
		K("s3.endpoint_url", s3_endpoint),
		K("s3.addressing_style", style),
#undef K
	};
	struct rm_profile *pr = ctx;
	size_t i, n = strlen(value);

	if (!rm_is_profile(pr, section))
		return 0;
	pr->found = true;
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (strcmp(key, keys[i].key))
			continue;
		if (n >= keys[i].cap)
			return pt_fail(pr->err, -EBADMSG,
				       "%s:%u: value of %s too long", pr->file,
				       line, key);
		memcpy((char *)pr + keys[i].off, value, n + 1);
	}
	return 0;
}

/* Read @pr's profile from @path (no file: nothing). */
static int rm_profile_read(struct rm_profile *pr, const char *path,
			   struct pt_error *err)
{
	FILE *f;
	char *text;
	size_t n;
	int rc;

	pr->file = path;
	pr->err = err;
	f = fopen(path, "rb");
	if (!f)
		return errno == ENOENT || errno == ENOTDIR ? 0 :
		       pt_fail(err, -errno, "%s: %s", path, strerror(errno));
	text = malloc(RM_INI_MAX_FILE + 1);
	if (!text) {
		fclose(f);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	n = fread(text, 1, RM_INI_MAX_FILE + 1, f);
	rc = ferror(f) ? pt_fail(err, -EIO, "%s: read error", path) :
	     rm_ini_parse(text, n, path, rm_profile_kv, pr, err);
	fclose(f);
	memset(text, 0, n);
	free(text);
	return rc;
}

static const char *rm_getenv(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* @dst = the first of @a, @b, @c that is set (else left as it is) */
static void rm_pick(char *dst, size_t cap, const char *a, const char *b,
		    const char *c)
{
	const char *v = a ? a : b ? b : c && *c ? c : NULL;

	if (v)
		snprintf(dst, cap, "%s", v);
}

static void rm_path(char *out, size_t cap, const char *env, const char *name)
{
	const char *v = rm_getenv(env);
	const char *home = rm_getenv("HOME");

	if (v)
		snprintf(out, cap, "%s", v);
	else if (home)
		snprintf(out, cap, "%s/.aws/%s", home, name);
	else
		out[0] = '\0';
}

/* The keys of a profile that has both, with where they came from. */
static bool rm_take_keys(struct rm_aws *a, const struct rm_profile *pr)
{
	if (!pr->id[0] || !pr->secret[0])
		return false;
	memcpy(a->id, pr->id, sizeof(a->id));
	memcpy(a->secret, pr->secret, sizeof(a->secret));
	memcpy(a->token, pr->token, sizeof(a->token));
	snprintf(a->source, sizeof(a->source), "profile '%s' of %s",
		 a->profile, pr->file);
	return true;
}

static int rm_style(struct rm_aws *a, const char *v, const char *where,
		    struct pt_error *err)
{
	if (!v || !strcmp(v, "auto"))
		a->style = RM_S3_AUTO;
	else if (!strcmp(v, "virtual"))
		a->style = RM_S3_VIRTUAL;
	else if (!strcmp(v, "path"))
		a->style = RM_S3_PATH;
	else
		return pt_fail(err, -EINVAL,
			       "%s: addressing_style '%.32s' is not auto, "
			       "virtual or path", where, v);
	return 0;
}

static int rm_aws_settle(struct rm_aws *a, struct rm_profile *cred,
			 struct rm_profile *conf, bool named,
			 struct pt_error *err)
{
	const char *env_style = rm_getenv("PTFS_S3_ADDRESSING_STYLE");

	if (named && !cred->found && !conf->found)
		return pt_fail(err, -ENOENT,
			       "AWS_PROFILE: no profile '%s' in %s or %s",
			       a->profile, cred->file ? cred->file : "~/.aws/credentials",
			       conf->file ? conf->file : "~/.aws/config");
	if (rm_getenv("AWS_ACCESS_KEY_ID") && rm_getenv("AWS_SECRET_ACCESS_KEY")) {
		rm_pick(a->id, sizeof(a->id), rm_getenv("AWS_ACCESS_KEY_ID"),
			NULL, NULL);
		rm_pick(a->secret, sizeof(a->secret),
			rm_getenv("AWS_SECRET_ACCESS_KEY"), NULL, NULL);
		rm_pick(a->token, sizeof(a->token),
			rm_getenv("AWS_SESSION_TOKEN"), NULL, NULL);
		snprintf(a->source, sizeof(a->source),
			 "the environment's AWS_ACCESS_KEY_ID");
	} else if (!rm_take_keys(a, cred) && !rm_take_keys(a, conf)) {
		snprintf(a->source, sizeof(a->source),
			 "none (not in the environment, nor in profile '%s' "
			 "of %s or %s)", a->profile,
			 cred->file ? cred->file : "~/.aws/credentials",
			 conf->file ? conf->file : "~/.aws/config");
	}
	rm_pick(a->region, sizeof(a->region), rm_getenv("AWS_REGION"),
		rm_getenv("AWS_DEFAULT_REGION"), conf->region);
	if (!a->region[0])
		snprintf(a->region, sizeof(a->region), "us-east-1");
	rm_pick(a->endpoint, sizeof(a->endpoint), rm_getenv("AWS_ENDPOINT_URL_S3"),
		rm_getenv("AWS_ENDPOINT_URL"),
		conf->s3_endpoint[0] ? conf->s3_endpoint : conf->endpoint);
	if (env_style)
		return rm_style(a, env_style, "PTFS_S3_ADDRESSING_STYLE", err);
	return rm_style(a, conf->style[0] ? conf->style : NULL,
			conf->file ? conf->file : "config", err);
}

int rm_aws_load(struct rm_aws *a, struct pt_error *err)
{
	struct rm_profile *pr = calloc(2, sizeof(*pr));
	const char *name = rm_getenv("AWS_PROFILE");
	char cpath[1024], fpath[1024];
	int rc;

	memset(a, 0, sizeof(*a));
	if (!pr)
		return pt_fail(err, -ENOMEM, "out of memory");
	if (!name)
		name = rm_getenv("AWS_DEFAULT_PROFILE");
	snprintf(a->profile, sizeof(a->profile), "%s", name ? name : "default");
	rm_path(cpath, sizeof(cpath), "AWS_SHARED_CREDENTIALS_FILE", "credentials");
	rm_path(fpath, sizeof(fpath), "AWS_CONFIG_FILE", "config");
	pr[0].a = pr[1].a = a;
	pr[1].config = true;
	rc = cpath[0] ? rm_profile_read(&pr[0], cpath, err) : 0;
	if (!rc && fpath[0])
		rc = rm_profile_read(&pr[1], fpath, err);
	if (!rc)
		rc = rm_aws_settle(a, &pr[0], &pr[1], name != NULL, err);
	memset(pr, 0, 2 * sizeof(*pr));
	free(pr);
	if (rc)
		rm_aws_clear(a);
	return rc;
}

void rm_aws_clear(struct rm_aws *a)
{
	volatile char *p = (volatile char *)a;
	size_t i;

	for (i = 0; i < sizeof(*a); i++)
		p[i] = 0;
}

/* ---- S3's error answers ---- */

void rm_s3_code(const char *body, size_t n, char *out, size_t cap)
{
	static const char open[] = "<Code>";
	size_t i, k;

	if (!cap)
		return;
	out[0] = '\0';
	for (i = 0; i + sizeof(open) - 1 <= n; i++) {
		if (memcmp(body + i, open, sizeof(open) - 1))
			continue;
		i += sizeof(open) - 1;
		for (k = 0; i + k < n && isalnum((unsigned char)body[i + k]); k++)
			;
		if (k == 0 || k >= cap || i + k + 7 > n ||
		    memcmp(body + i + k, "</Code>", 7))
			return;
		memcpy(out, body + i, k);
		out[k] = '\0';
		return;
	}
}

const char *rm_s3_hint(const char *code, const struct rm_aws *a, char *out,
		       size_t cap)
{
	static const struct {
		const char *code, *what;
		bool keys;      /* about the keys: name where they came from */
	} hints[] = {
		{ "InvalidAccessKeyId", "the server knows no such access key "
		  "id: check the key id and the endpoint", true },
		{ "SignatureDoesNotMatch", "the signature does not match: "
		  "check the secret access key", true },
		{ "ExpiredToken", "the session token has expired: renew the "
		  "keys", true },
		{ "InvalidToken", "the session token is not valid: check it",
		  true },
		{ "AccessDenied", "access denied: check the keys' rights and "
		  "the bucket's policy", true },
		{ "NoSuchBucket", "no such bucket: check the bucket's name, "
		  "the region and the endpoint", false },
		{ "NoSuchKey", "no such key in the bucket: check the path",
		  false },
		{ "AuthorizationHeaderMalformed", "signed for the wrong "
		  "region: set AWS_REGION or the profile's region", false },
		{ "PermanentRedirect", "the bucket is in another region: set "
		  "AWS_REGION or the profile's region", false },
	};
	size_t i;

	out[0] = '\0';
	for (i = 0; i < sizeof(hints) / sizeof(hints[0]); i++) {
		if (strcmp(code, hints[i].code))
			continue;
		if (hints[i].keys)
			snprintf(out, cap, "%s: %s (keys: %s)", code,
				 hints[i].what, a->source);
		else
			snprintf(out, cap, "%s: %s", code, hints[i].what);
		break;
	}
	return out;
}
