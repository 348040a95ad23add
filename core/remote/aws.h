/* SPDX-License-Identifier: MIT */
/*
 * aws.h -- S3 credentials, region, endpoint and addressing the way the AWS
 * CLI finds them (aws.c): the environment first, then the profile of
 * ~/.aws/credentials and ~/.aws/config; and the <Code> of an S3 error
 * answer turned into what to check.  Pure C and libc: the INI parser and
 * the error reader run in the fuzzer (tests/fuzz/fuzz_ini.c).
 */
#ifndef PTFS_CORE_REMOTE_AWS_H
#define PTFS_CORE_REMOTE_AWS_H

#include <stddef.h>

#include "base/error.h"

#define RM_INI_MAX_FILE ((size_t)1 << 20)  /* larger: refused */
#define RM_INI_MAX_LINE 8192               /* a session token fits */

/*
 * One KEY = VALUE of an INI file, in the order written.  @section is the
 * name between brackets, trimmed; @key is lowercased, and a nested key
 * (an indented "KEY = VALUE" under "s3 =") is "s3.KEY".  @line counts from
 * 1.  Returns 0 to go on, else that value is rm_ini_parse()'s result.
 */
typedef int (*rm_ini_fn)(void *ctx, const char *section, const char *key,
			 const char *value, unsigned line);

/* Parse @len bytes of @text.  A malformed line fails with "FILE:LINE: what"
 * (@file names it; the line's text is never shown: it may hold a secret). */
int rm_ini_parse(const char *text, size_t len, const char *file,
		 rm_ini_fn fn, void *ctx, struct pt_error *err);

enum rm_s3_style { RM_S3_AUTO, RM_S3_VIRTUAL, RM_S3_PATH };

struct rm_aws {
	char id[128];           /* "" for anonymous requests */
	char secret[256];
	char token[4096];       /* session token, or "" */
	char region[64];
	char endpoint[512];     /* "" for AWS itself */
	enum rm_s3_style style;
	char profile[128];
	char source[640];       /* where the keys came from, for messages */
};

/*
 * Fill @a: keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and
 * AWS_SESSION_TOKEN), else from the profile (AWS_PROFILE, else "default")
 * of the credentials file, else of the config file; region from
 * AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1;
 * endpoint from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
 * s3.endpoint_url or endpoint_url; addressing from PTFS_S3_ADDRESSING_STYLE
 * or the profile's s3.addressing_style.  The files are
 * AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE, else ~/.aws/credentials
 * and ~/.aws/config; a missing file is no error, a malformed one is, and so
 * is an AWS_PROFILE found in neither.
 */
int rm_aws_load(struct rm_aws *a, struct pt_error *err);

/* Forget @a's secrets. */
void rm_aws_clear(struct rm_aws *a);

/* The first <Code>...</Code> of an S3 error body (@n bytes) into @out, ""
 * when there is none or it is not a plain word. */
void rm_s3_code(const char *body, size_t n, char *out, size_t cap);

/* What an S3 error @code means and what to check, naming @a's source of
 * keys (never a key): "" for a code it does not know. */
const char *rm_s3_hint(const char *code, const struct rm_aws *a, char *out,
		       size_t cap);

#endif
