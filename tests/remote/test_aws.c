/* SPDX-License-Identifier: MIT */
/*
 * test_aws.c -- core/remote/aws.c: where S3 keys, region, endpoint and
 * addressing come from (the environment, then the AWS_PROFILE profile of the
 * credentials and config files, as the AWS CLI reads them), the INI
 * parser's errors (file and line, never the line's text), and the <Code> of
 * S3 error answers with the hint each gives.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "remote/aws.h"

static char cred_path[64], conf_path[64];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void clear_env(void)
{
	static const char *const vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
		"AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
		"PTFS_S3_ADDRESSING_STYLE",
	};
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_SHARED_CREDENTIALS_FILE", cred_path, 1);
	setenv("AWS_CONFIG_FILE", conf_path, 1);
}

static const struct {
	const char *name;
	const char *cred, *conf;  /* NULL: no such file */
	const char *env;          /* "VAR=value;VAR=value" */
	const char *id, *region, *endpoint;
	enum rm_s3_style style;
	const char *source;       /* a part of it */
} cases[] = {
	{ "default profile of the credentials file",
	  "[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = s1\n",
	  NULL, "", "AKIDDEF", "us-east-1", "", RM_S3_AUTO,
	  "profile 'default' of " },
	{ "AWS_PROFILE: [NAME] and [profile NAME], nested s3 block",
	  "[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = s1\n"
	  "[dev]\naws_access_key_id = AKIDDEV\naws_secret_access_key = s2\n",
	  "[default]\nregion = us-west-2\n"
	  "[profile dev]\nregion = eu-central-1\ns3 =\n"
	  "  addressing_style = virtual\n  endpoint_url = http://s3.test:9000\n"
	  "endpoint_url = http://other:1\n",
	  "AWS_PROFILE=dev", "AKIDDEV", "eu-central-1", "http://s3.test:9000",
	  RM_S3_VIRTUAL, "profile 'dev' of " },
	{ "the environment's keys and region win",
	  "[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = s1\n",
	  "[default]\nregion = us-west-2\nendpoint_url = http://e:1\n",
	  "AWS_ACCESS_KEY_ID=AKIDENV;AWS_SECRET_ACCESS_KEY=s3;AWS_REGION=ap-south-1",
	  "AKIDENV", "ap-south-1", "http://e:1", RM_S3_AUTO, "environment" },
	{ "AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 before AWS_ENDPOINT_URL",
	  NULL, NULL,
	  "AWS_DEFAULT_REGION=eu-north-1;AWS_ENDPOINT_URL=http://a:1;"
	  "AWS_ENDPOINT_URL_S3=http://b:2",
	  "", "eu-north-1", "http://b:2", RM_S3_AUTO, "none (" },
	{ "keys in the config file; comments, CRLF, KEY: VALUE, upper case",
	  "# nothing here\n",
	  "; the config\r\n[ default ]\r\nAWS_Access_Key_ID: AKIDCONF\r\n"
	  "  # indented comment\r\naws_secret_access_key=s4\r\n"
	  "s3 =\r\n\taddressing_style = path\r\n",
	  "", "AKIDCONF", "us-east-1", "", RM_S3_PATH, "profile 'default' of " },
	{ "[dev] in the config file is not profile dev",
	  "[other]\n", "[dev]\nregion = eu-west-3\n[profile dev]\noutput = json\n",
	  "AWS_PROFILE=dev", "", "us-east-1", "", RM_S3_AUTO, "none (" },
	{ "PTFS_S3_ADDRESSING_STYLE before the profile's",
	  NULL, "[default]\ns3 =\n addressing_style = virtual\n",
	  "PTFS_S3_ADDRESSING_STYLE=path", "", "us-east-1", "", RM_S3_PATH,
	  "none (" },
};

static void set_env_list(const char *list)
{
	char buf[512], *save = NULL, *kv;

	snprintf(buf, sizeof(buf), "%s", list);
	for (kv = strtok_r(buf, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(kv, '=');

		assert_non_null(eq);
		*eq = '\0';
		setenv(kv, eq + 1, 1);
	}
}

static void test_profiles(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rm_aws a;
		struct pt_error err = { 0 };

		print_message("case: %s\n", cases[i].name);
		clear_env();
		unlink(cred_path);
		unlink(conf_path);
		if (cases[i].cred)
			write_file(cred_path, cases[i].cred);
		if (cases[i].conf)
			write_file(conf_path, cases[i].conf);
		set_env_list(cases[i].env);
		assert_int_equal(rm_aws_load(&a, &err), 0);
		assert_string_equal(a.id, cases[i].id);
		assert_int_equal(a.secret[0] != '\0', cases[i].id[0] != '\0');
		assert_string_equal(a.region, cases[i].region);
		assert_string_equal(a.endpoint, cases[i].endpoint);
		assert_int_equal(a.style, cases[i].style);
		assert_non_null(strstr(a.source, cases[i].source));
		assert_null(strstr(a.source, "s1"));
	}
}

static const struct {
	const char *text;
	const char *msg;   /* after "FILE" */
} bad[] = {
	{ "[default\n", ":1: expected [SECTION]" },
	{ "aws_access_key_id = AKID\n", ":1: a key before any [SECTION]" },
	{ "[default]\naws_secret_access_key = SECRETA\nSECRETB\n",
	  ":3: expected [SECTION] or KEY = VALUE" },
	{ "[default]\n= SECRETC\n", ":2: a value without a key" },
	{ "[default]\nregion = a\0b\n", ": not a text file" },
	{ "[default]\ns3 =\n  addressing_style = sideways\n",
	  ": addressing_style 'sideways' is not auto, virtual or path" },
	{ "[default]\nregion = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	  ":2: value of region too long" },
};

/* A malformed file: one line naming the file and line, no secret. */
static void test_malformed(void **state)
{
	char want[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct rm_aws a;
		struct pt_error err = { 0 };
		FILE *f;

		clear_env();
		unlink(cred_path);
		f = fopen(conf_path, "w");
		assert_non_null(f);
		/* the text may hold a NUL: written by its length */
		fwrite(bad[i].text, 1, i == 4 ? 23 : strlen(bad[i].text), f);
		fclose(f);
		assert_int_not_equal(rm_aws_load(&a, &err), 0);
		snprintf(want, sizeof(want), "%s%s", conf_path, bad[i].msg);
		assert_string_equal(err.msg, want);
		assert_null(strstr(err.msg, "SECRET"));
		assert_string_equal(a.secret, "");
	}
	/* a line of RM_INI_MAX_LINE bytes, and an AWS_PROFILE found nowhere */
	{
		char *text = malloc(RM_INI_MAX_LINE + 16);
		struct pt_error err = { 0 };

		assert_non_null(text);
		memset(text, 'a', RM_INI_MAX_LINE + 15);
		text[RM_INI_MAX_LINE + 15] = '\0';
		memcpy(text, "[x]\nk=", 6);
		assert_int_equal(rm_ini_parse(text, strlen(text), "F", NULL, NULL, &err),
				 -EBADMSG);
		assert_string_equal(err.msg, "F:2: line too long");
		free(text);
	}
	{
		struct rm_aws a;
		struct pt_error err = { 0 };

		clear_env();
		unlink(conf_path);
		setenv("AWS_PROFILE", "ghost", 1);
		assert_int_equal(rm_aws_load(&a, &err), -ENOENT);
		assert_non_null(strstr(err.msg, "no profile 'ghost' in "));
	}
}

static void test_s3_codes(void **state)
{
	static const struct {
		const char *body, *code;
	} codes[] = {
		{ "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code>"
		  "<Message>x</Message></Error>", "NoSuchKey" },
		{ "<Error>\n  <Code>SignatureDoesNotMatch</Code>", "SignatureDoesNotMatch" },
		{ "<Error><Code>NoSuchBucket", "" },       /* cut short */
		{ "<Code>a b</Code>", "" },
		{ "<Code></Code>", "" },
		{ "Forbidden", "" },
		{ "", "" },
	};
	struct rm_aws a = { 0 };
	char code[48], hint[800];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		rm_s3_code(codes[i].body, strlen(codes[i].body), code, sizeof(code));
		assert_string_equal(code, codes[i].code);
	}
	rm_s3_code("<Code>ThisCodeIsLongerThanTheBufferGiven</Code>", 46, code, 8);
	assert_string_equal(code, "");
	snprintf(a.secret, sizeof(a.secret), "SECRETKEY");
	snprintf(a.source, sizeof(a.source), "profile 'dev' of /h/.aws/credentials");
	assert_non_null(strstr(rm_s3_hint("SignatureDoesNotMatch", &a, hint,
					  sizeof(hint)),
			       "check the secret access key (keys: profile 'dev' of "));
	assert_non_null(strstr(rm_s3_hint("InvalidAccessKeyId", &a, hint,
					  sizeof(hint)), "no such access key id"));
	assert_non_null(strstr(rm_s3_hint("NoSuchBucket", &a, hint, sizeof(hint)),
			       "no such bucket"));
	assert_non_null(strstr(rm_s3_hint("NoSuchKey", &a, hint, sizeof(hint)),
			       "no such key"));
	assert_non_null(strstr(rm_s3_hint("ExpiredToken", &a, hint, sizeof(hint)),
			       "expired"));
	assert_non_null(strstr(rm_s3_hint("AccessDenied", &a, hint, sizeof(hint)),
			       "access denied"));
	assert_null(strstr(hint, "SECRETKEY"));
	assert_string_equal(rm_s3_hint("SlowDown", &a, hint, sizeof(hint)), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_profiles),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_s3_codes),
	};
	int fd, rc;

	snprintf(cred_path, sizeof(cred_path), "/tmp/ptfs-aws-cred-XXXXXX");
	snprintf(conf_path, sizeof(conf_path), "/tmp/ptfs-aws-conf-XXXXXX");
	fd = mkstemp(cred_path);
	if (fd >= 0)
		close(fd);
	fd = mkstemp(conf_path);
	if (fd >= 0)
		close(fd);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(cred_path);
	unlink(conf_path);
	return rc;
}
