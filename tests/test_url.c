/* SPDX-License-Identifier: MIT */
/* test_url.c -- base/url.c: how a URL is shown (never a secret) and which
 * origin it names (where credentials may go), with look-alikes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/url.h"

static const struct {
	const char *in, *out;
} redact_cases[] = {
	{ "http://h/x.pt", "http://h/x.pt" },
	{ "https://h:8443/a/b.pt?X-Amz-Signature=SECRET&a=b",
	  "https://h:8443/a/b.pt?***" },
	{ "http://user:pw@h/x.pt", "http://***@h/x.pt" },
	{ "http://user:p@w@h/x.pt?t=1#frag", "http://***@h/x.pt?***#***" },
	{ "http://h/x.pt#tok", "http://h/x.pt#***" },
	{ "http://u:pw@h?tok", "http://***@h?***" },
	{ "http://h/a@b/x.pt", "http://h/a@b/x.pt" },   /* '@' in the path */
	{ "s3://bkt/run/x.pt", "s3://bkt/run/x.pt" },
	{ "hf://org/repo@v1/x.pt", "hf://org/repo@v1/x.pt" },
	{ "/local/path?x@y", "/local/path?x@y" },        /* not a URL */
	{ "", "" },
};

static void redacts(void **state)
{
	char out[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(redact_cases) / sizeof(redact_cases[0]); i++)
		assert_string_equal(pt_url_redact(redact_cases[i].in, out,
						  sizeof(out)),
				    redact_cases[i].out);
}

static void redaction_truncates_safely(void **state)
{
	char out[12];

	(void)state;
	pt_url_redact("http://user:SECRET@host/x?SECRET", out, sizeof(out));
	assert_null(strstr(out, "SECRET"));
	assert_int_equal(strlen(out), sizeof(out) - 1);
}

static void origins(void **state)
{
	struct pt_origin o;

	(void)state;
	assert_true(pt_url_origin("HTTPS://Hub.Example.COM/x", &o));
	assert_string_equal(o.scheme, "https");
	assert_string_equal(o.host, "hub.example.com");
	assert_int_equal(o.port, 443);
	assert_true(pt_url_origin("http://u:p@[::1]:8080/x", &o));
	assert_string_equal(o.host, "[::1]");
	assert_int_equal(o.port, 8080);
	assert_false(pt_url_origin("ftp://h/x", &o));
	assert_false(pt_url_origin("http:///x", &o));
	assert_false(pt_url_origin("http://h:99999/x", &o));
	assert_false(pt_url_origin("http://h:8x/x", &o));
}

static void same_origin_and_look_alikes(void **state)
{
	const char *hub = "https://hf.example.com/org/repo/resolve/";

	(void)state;
	assert_true(pt_url_same_origin(hub, "https://hf.example.com:443/x"));
	assert_true(pt_url_same_origin(hub, "https://HF.example.com./x?q"));
	assert_false(pt_url_same_origin(hub, "https://hf.example.com.cdn.net/x"));
	assert_false(pt_url_same_origin(hub, "https://hf.example.com@evil/x"));
	assert_false(pt_url_same_origin(hub, "https://hf.example.com:444/x"));
	assert_false(pt_url_same_origin(hub, "http://hf.example.com/x"));
	assert_false(pt_url_same_origin(hub, "https://cdn.example.com/x"));
	assert_false(pt_url_same_origin("http://127.0.0.1:8000/",
					"http://127.0.0.1:8000@127.0.0.2:8000/"));
	assert_false(pt_url_same_origin("http://127.0.0.1:80/",
					"http://127.0.0.1:8000/"));
	assert_true(pt_url_same_origin("http://127.0.0.1/", "http://127.0.0.1:80/"));
	assert_false(pt_url_same_origin("s3://b/k", "s3://b/k"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(redacts),
		cmocka_unit_test(redaction_truncates_safely),
		cmocka_unit_test(origins),
		cmocka_unit_test(same_origin_and_look_alikes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
