/* SPDX-License-Identifier: MIT */
/*
 * test_io.c -- core/io: the memory, sub-range and file sources on bad
 * ranges and files that change under them.  Every failure is checked for
 * its exact negative errno and for a message naming the problem.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/source.h"

static char g_dir[64];
static char g_file[128];
static const char g_bytes[] = "0123456789abcdef";     /* 16 bytes */

/* @rc is @want and the message holds @what (one line). */
static void expect_fail(int rc, const struct pt_error *err, int want,
			const char *what)
{
	if (rc != want || !strstr(err->msg, what) || strchr(err->msg, '\n'))
		fail_msg("got %d \"%s\", want %d and \"%s\"", rc, err->msg,
			 want, what);
}

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/ptfs-io-XXXXXX");
	if (!mkdtemp(g_dir))
		return -1;
	snprintf(g_file, sizeof(g_file), "%s/f.bin", g_dir);
	write_file(g_file, g_bytes, 16);
	return 0;
}

static int teardown(void **state)
{
	char p[160];

	(void)state;
	unlink(g_file);
	snprintf(p, sizeof(p), "%s/sib.bin", g_dir);
	unlink(p);
	return rmdir(g_dir);
}

/* Reads that leave a 16-byte source: each -EIO naming offset and size. */
static const struct {
	uint64_t off;
	size_t n;
	const char *msg;
} bad_reads[] = {
	{ 16, 1, "read of 1 bytes at 0x10 beyond end of file (16 bytes)" },
	{ 15, 2, "read of 2 bytes at 0xf beyond end of file (16 bytes)" },
	{ 0, 17, "read of 17 bytes at 0x0 beyond end of file (16 bytes)" },
	{ UINT64_MAX, 1, "at 0xffffffffffffffff beyond end of file" },
	{ 8, SIZE_MAX, "beyond end of file (16 bytes)" },         /* wraps */
	{ UINT64_MAX - 3, 8, "beyond end of file (16 bytes)" },   /* wraps */
};

static void bad_reads_of(const struct pt_source *s)
{
	struct pt_error err;
	char buf[32];
	size_t i;

	for (i = 0; i < sizeof(bad_reads) / sizeof(bad_reads[0]); i++) {
		pt_error_clear(&err);
		expect_fail(pt_source_read(s, buf, bad_reads[i].n,
					   bad_reads[i].off, &err),
			    &err, -EIO, bad_reads[i].msg);
	}
	/* the edges that are inside */
	assert_int_equal(pt_source_read(s, buf, 0, 16, &err), 0);
	assert_int_equal(pt_source_read(s, buf, 16, 0, &err), 0);
	assert_memory_equal(buf, g_bytes, 16);
	assert_int_equal(pt_source_read(s, buf, 1, 15, &err), 0);
	assert_int_equal(buf[0], 'f');
	assert_false(pt_source_extent(s, 8, 9, &(int){ 0 }, &(uint64_t){ 0 }));
}

static void test_mem_ranges(void **state)
{
	struct pt_source *s, *sib;
	struct pt_error err;
	uint8_t *dup;

	(void)state;
	pt_error_clear(&err);
	assert_int_equal(pt_source_mem(g_bytes, 16, "mem", &s, &err), 0);
	bad_reads_of(s);
	pt_error_clear(&err);
	expect_fail(pt_source_dup(s, 10, 7, &dup, &err), &err, -EIO,
		    "read of 7 bytes at 0xa beyond end of file");
	assert_null(dup);
	pt_error_clear(&err);
	expect_fail(pt_source_dup(s, 0, SIZE_MAX, &dup, &err), &err, -EFBIG,
		    "record too large");
	assert_int_equal(pt_source_dup(s, 10, 6, &dup, &err), 0);
	assert_string_equal((char *)dup, "abcdef");        /* NUL appended */
	free(dup);
	/* memory has no neighbours and never changes */
	assert_false(pt_source_has_siblings(s));
	pt_error_clear(&err);
	expect_fail(pt_source_open_sibling(s, "x.bin", &sib, &err), &err,
		    -ENOTSUP, "mem: has no files beside it");
	assert_null(sib);
	assert_int_equal(pt_source_check(s, PT_CHECK_NAME, &err), 0);
	assert_null(pt_source_local_path(s));
	pt_source_close(s);
}

static void test_sub_ranges(void **state)
{
	static const struct {
		uint64_t off, len;
		const char *msg;
	} bad[] = {
		{ 17, 0, "blob: bytes [17, +0) lie beyond the end of mem (16 bytes)" },
		{ 8, 9, "blob: bytes [8, +9) lie beyond the end of mem (16 bytes)" },
		{ 1, UINT64_MAX, "blob: bytes [1, +18446744073709551615) lie beyond" },
		{ UINT64_MAX, 2, "lie beyond the end of mem" },
	};
	struct pt_source *s, *sub, *inner, *sib;
	struct pt_error err;
	char buf[8];
	size_t i;

	(void)state;
	assert_int_equal(pt_source_mem(g_bytes, 16, "mem", &s, &err), 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		pt_error_clear(&err);
		expect_fail(pt_source_sub(s, bad[i].off, bad[i].len, "blob",
					  &sub, &err), &err, -EIO, bad[i].msg);
		assert_null(sub);
	}
	/* [4, 12): offsets count from 4, and stay inside 8 bytes */
	assert_int_equal(pt_source_sub(s, 4, 8, "blob", &sub, &err), 0);
	assert_int_equal(sub->size, 8);
	assert_int_equal(pt_source_read(sub, buf, 8, 0, &err), 0);
	assert_memory_equal(buf, "456789ab", 8);
	pt_error_clear(&err);
	expect_fail(pt_source_read(sub, buf, 1, 8, &err), &err, -EIO,
		    "read of 1 bytes at 0x8 beyond end of file (8 bytes)");
	/* a range of a range: checked against its own parent */
	pt_error_clear(&err);
	expect_fail(pt_source_sub(sub, 4, 5, "inner", &inner, &err), &err,
		    -EIO, "inner: bytes [4, +5) lie beyond the end of blob (8 bytes)");
	assert_int_equal(pt_source_sub(sub, 4, 4, "inner", &inner, &err), 0);
	assert_int_equal(pt_source_read(inner, buf, 4, 0, &err), 0);
	assert_memory_equal(buf, "89ab", 4);
	/* a sub-range of memory has no siblings either */
	pt_error_clear(&err);
	expect_fail(pt_source_open_sibling(inner, "x", &sib, &err), &err,
		    -ENOTSUP, "mem: has no files beside it");
	assert_null(sib);
	pt_source_close(inner);
	pt_source_close(sub);
	pt_source_close(s);
}

static void test_file_open_errors(void **state)
{
	struct pt_source *s;
	struct pt_error err;
	char p[160];

	(void)state;
	snprintf(p, sizeof(p), "%s/missing.bin", g_dir);
	pt_error_clear(&err);
	expect_fail(pt_source_open_file(p, &s, &err), &err, -ENOENT,
		    "No such file or directory");
	assert_null(s);
	pt_error_clear(&err);
	expect_fail(pt_source_open_file(g_dir, &s, &err), &err, -EINVAL,
		    "not a regular file");
	assert_null(s);
	snprintf(p, sizeof(p), "%s/f.bin/x", g_dir);
	pt_error_clear(&err);
	expect_fail(pt_source_open_file(p, &s, &err), &err, -ENOTDIR,
		    "Not a directory");
}

static void test_file_ranges_and_siblings(void **state)
{
	struct pt_source *s, *sib;
	struct pt_error err;
	uint64_t fo;
	char p[160];
	char buf[4];
	int fd;

	(void)state;
	assert_int_equal(pt_source_open_file(g_file, &s, &err), 0);
	assert_string_equal(pt_source_local_path(s), g_file);
	bad_reads_of(s);
	assert_true(pt_source_extent(s, 2, 14, &fd, &fo));
	assert_int_equal(fo, 2);
	assert_false(pt_source_extent(s, 2, 15, &fd, &fo));
	pt_error_clear(&err);
	expect_fail(pt_source_open_sibling(s, "sib.bin", &sib, &err), &err,
		    -ENOENT, "No such file or directory");
	snprintf(p, sizeof(p), "%s/sib.bin", g_dir);
	write_file(p, "sib", 3);
	assert_int_equal(pt_source_open_sibling(s, "sib.bin", &sib, &err), 0);
	assert_int_equal(sib->size, 3);
	assert_int_equal(pt_source_read(sib, buf, 3, 0, &err), 0);
	assert_memory_equal(buf, "sib", 3);
	pt_source_close(sib);
	pt_source_close(s);
}

/* The file shrinks after open: the size recorded at open still admits the
 * read, which comes back short: -EIO, "file shrank", and the check says
 * the file changed. */
static void test_file_short_read(void **state)
{
	struct pt_source *s;
	struct pt_error err;
	char buf[16];

	(void)state;
	assert_int_equal(pt_source_open_file(g_file, &s, &err), 0);
	assert_int_equal(pt_source_check(s, PT_CHECK_READS, &err), 0);
	assert_int_equal(truncate(g_file, 10), 0);
	pt_error_clear(&err);
	expect_fail(pt_source_read(s, buf, 8, 6, &err), &err, -EIO,
		    "read at 0xa: file shrank while open");
	assert_int_equal(pt_source_read(s, buf, 4, 6, &err), 0);
	pt_error_clear(&err);
	expect_fail(pt_source_check(s, PT_CHECK_READS, &err), &err, -ESTALE,
		    "checkpoint changed on disk since it was opened");
	pt_source_close(s);
}

/* Replaced by rename: the reads still see the old bytes (PT_CHECK_READS
 * passes), the name does not (PT_CHECK_NAME: -ESTALE). */
static void test_file_replaced(void **state)
{
	struct pt_source *s;
	struct pt_error err;
	char p[160];
	char buf[16];

	(void)state;
	assert_int_equal(pt_source_open_file(g_file, &s, &err), 0);
	snprintf(p, sizeof(p), "%s/sib.bin", g_dir);
	write_file(p, "new bytes, same size", 16);
	assert_int_equal(rename(p, g_file), 0);
	assert_int_equal(pt_source_check(s, PT_CHECK_READS, &err), 0);
	assert_int_equal(pt_source_read(s, buf, 16, 0, &err), 0);
	assert_memory_equal(buf, g_bytes, 16);
	pt_error_clear(&err);
	expect_fail(pt_source_check(s, PT_CHECK_NAME, &err), &err, -ESTALE,
		    "changed on disk since it was opened");
	unlink(g_file);
	pt_error_clear(&err);
	expect_fail(pt_source_check(s, PT_CHECK_NAME, &err), &err, -ENOENT,
		    "No such file or directory");
	pt_source_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mem_ranges),
		cmocka_unit_test(test_sub_ranges),
		cmocka_unit_test_setup_teardown(test_file_open_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_ranges_and_siblings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_short_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_replaced, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
