/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ini.c -- libFuzzer target for what a user's files and a server's
 * error answer make of core/remote/aws.c: the INI parser of
 * ~/.aws/credentials and ~/.aws/config, the <Code> reader of S3 error
 * bodies, and the readers of listings (remote/listing.h: S3's
 * ListObjectsV2 pages, the hub's tree pages and their Link headers).
 *
 * Checked: every section, key and value handed over is terminated, shorter
 * than a line, free of '\n' and of blanks at its ends; a key is lower case;
 * a failure has a message naming the file; a code read is a plain word
 * found in the input; a listing's names are not empty, hold no '/' and
 * are no longer than the input, its token is bounded.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "remote/aws.h"
#include "remote/listing.h"

static int on_pair(void *ctx, const char *section, const char *key,
		   const char *value, unsigned line)
{
	const char *const parts[] = { section, key, value };
	unsigned *lines = ctx;
	size_t i, n;

	FUZZ_CHECK(line > *lines || line == *lines);
	*lines = line;
	for (i = 0; i < 3; i++) {
		n = strlen(parts[i]);
		FUZZ_CHECK(n < RM_INI_MAX_LINE * 2 + 2);
		FUZZ_CHECK(!strchr(parts[i], '\n'));
		FUZZ_CHECK(n == 0 || (parts[i][0] != ' ' && parts[i][0] != '\t'));
		FUZZ_CHECK(n == 0 || (parts[i][n - 1] != ' ' &&
				      parts[i][n - 1] != '\t'));
	}
	FUZZ_CHECK(*key);
	for (i = 0; key[i]; i++)
		FUZZ_CHECK(!isupper((unsigned char)key[i]));
	return 0;
}

static void check_names(struct pt_dir_list *l, int rc, size_t size)
{
	size_t i;

	FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -EFBIG || rc == -ENOMEM);
	if (rc == 0 && pt_dir_list_end(l) == 0)
		for (i = 0; i < l->n; i++) {
			FUZZ_CHECK(l->e[i].name[0]);
			FUZZ_CHECK(!strchr(l->e[i].name, '/'));
			FUZZ_CHECK(strlen(l->e[i].name) < size);
		}
	pt_dir_list_free(l);
}

static void listing(const char *p, size_t size)
{
	struct pt_dir_list l;
	char *token = NULL, *next = NULL;
	int rc;

	pt_dir_list_init(&l);
	rc = rm_s3_list_parse(p, size, "run/", &l, &token);
	FUZZ_CHECK(!token || (rc == 0 && strlen(token) <= 4096));
	check_names(&l, rc, size);
	free(token);
	rc = rm_hf_tree_parse(p, size, size & 1 ? "" : "sub/", &l);
	check_names(&l, rc, size);
	FUZZ_CHECK(rm_link_next(p, size, &next) == 0);
	FUZZ_CHECK(!next || strlen(next) < size);
	free(next);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	struct pt_error err = { 0 };
	unsigned lines = 0;
	char code[48];
	int rc;

	rc = rm_ini_parse(p, size, "fuzz", on_pair, &lines, &err);
	FUZZ_CHECK(rc <= 0);
	FUZZ_CHECK(rc == 0 || !strncmp(err.msg, "fuzz", 4));
	rm_s3_code(p, size, code, sizeof(code));
	FUZZ_CHECK(strlen(code) < sizeof(code));
	for (size_t i = 0; code[i]; i++)
		FUZZ_CHECK(isalnum((unsigned char)code[i]));
	FUZZ_CHECK(!code[0] || memmem(p, size, code, strlen(code)));
	listing(p, size);
	return 0;
}
