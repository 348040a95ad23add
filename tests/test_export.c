/* SPDX-License-Identifier: MIT */
/*
 * test_export.c -- core/export: a tiny checkpoint (safetensors, two float32
 * tensors) exported to safetensors (one file and shards), torch.save and
 * .npy files, each read back: the outputs open as checkpoints again with
 * the same bytes, the .npy files hold numpy's header and the data.  And
 * the failures: an output where none can be written, a non-empty .npy
 * directory -- with their errno and message, and nothing left behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "ckpt/ckpt.h"
#include "export/export.h"

static char g_dir[64];

/* a = [1, 2, 3, 4], b = [5, 6, 7, 8] (float32, little-endian) */
static const float g_a[4] = { 1, 2, 3, 4 };
static const float g_b[4] = { 5, 6, 7, 8 };

static int rm_cb(const char *p, const struct stat *st, int flag,
		 struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void pathf(char *buf, size_t cap, const char *rel)
{
	snprintf(buf, cap, "%s/%s", g_dir, rel);
}

static int setup(void **state)
{
	static const char h[] =
		"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
		"\"b\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,32]}}";
	uint8_t len[8];
	char p[128];
	FILE *f;
	size_t i;

	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/ptfs-export-XXXXXX");
	if (!mkdtemp(g_dir))
		return -1;
	pathf(p, sizeof(p), "in.safetensors");
	f = fopen(p, "wb");
	if (!f)
		return -1;
	for (i = 0; i < 8; i++)
		len[i] = (uint8_t)((sizeof(h) - 1) >> (8 * i));
	fwrite(len, 1, 8, f);
	fwrite(h, 1, sizeof(h) - 1, f);
	fwrite(g_a, 1, 16, f);
	fwrite(g_b, 1, 16, f);
	return fclose(f);
}

static int teardown(void **state)
{
	(void)state;
	return nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static struct pt_ckpt *open_rel(const char *rel)
{
	struct pt_ckpt_opts o;
	struct pt_ckpt *ck = NULL;
	struct pt_error err;
	char p[128];

	pathf(p, sizeof(p), rel);
	pt_ckpt_opts_default(&o);
	pt_error_clear(&err);
	if (pt_ckpt_open(&ck, p, &o, &err) != 0)
		fail_msg("%s: %s", rel, err.msg);
	return ck;
}

/* @err's message is "<g_dir>/@rel: @what". */
static void expect_msg(const struct pt_error *err, const char *rel,
		       const char *what)
{
	char want[256];

	snprintf(want, sizeof(want), "%s/%s: %s", g_dir, rel, what);
	if (strcmp(err->msg, want) != 0)
		fail_msg("message \"%s\", want \"%s\"", err->msg, want);
}

/* @ck holds tensor @name with the 16 bytes @want. */
static void expect_tensor(struct pt_ckpt *ck, const char *name,
			  const float *want)
{
	struct pt_error err;
	struct pt_node *n;
	uint8_t got[32];
	int rc = 0;

	n = pt_tree_path(ck, name, &rc);
	if (!n)
		fail_msg("no tensor '%s' (%d)", name, rc);
	pt_error_clear(&err);
	assert_int_equal(pt_node_read(ck, n, got, sizeof(got), 0, &err), 16);
	assert_memory_equal(got, want, 16);
}

/* The names in @rel (a directory), sorted, joined by spaces. */
static void listing(const char *rel, char *out, size_t cap)
{
	struct dirent **v;
	char p[128];
	int n, i;

	pathf(p, sizeof(p), rel);
	n = scandir(p, &v, NULL, alphasort);
	assert_true(n >= 0);
	out[0] = '\0';
	for (i = 0; i < n; i++) {
		if (v[i]->d_name[0] != '.')
			snprintf(out + strlen(out), cap - strlen(out), "%s%s",
				 out[0] ? " " : "", v[i]->d_name);
		free(v[i]);
	}
	free(v);
}

static void test_safetensors_round_trip(void **state)
{
	struct pt_export_opts o = { 0 };
	struct pt_ckpt *ck = open_rel("in.safetensors"), *back;
	struct pt_error err;
	struct pt_buf notes;
	char p[128];

	(void)state;
	pt_buf_init(&notes);
	pathf(p, sizeof(p), "out.safetensors");
	o.no_fsync = true;
	assert_int_equal(pt_export_safetensors(ck, p, &o, &notes, &err), 0);
	back = open_rel("out.safetensors");
	assert_string_equal(pt_ckpt_format(back), pt_ckpt_format(ck));
	expect_tensor(back, "a", g_a);
	expect_tensor(back, "b", g_b);
	pt_ckpt_close(back);
	/* one shard per tensor: an index and two files, read back as one */
	pathf(p, sizeof(p), "shards");
	o.shard_size = 16;
	assert_int_equal(pt_export_safetensors(ck, p, &o, &notes, &err), 0);
	listing("shards", p, sizeof(p));
	assert_string_equal(p, "model-00001-of-00002.safetensors "
			    "model-00002-of-00002.safetensors "
			    "model.safetensors.index.json");
	back = open_rel("shards");
	expect_tensor(back, "a", g_a);
	expect_tensor(back, "b", g_b);
	pt_ckpt_close(back);
	pt_buf_free(&notes);
	pt_ckpt_close(ck);
}

static void test_pt_round_trip(void **state)
{
	struct pt_export_opts o = { .no_fsync = true };
	struct pt_ckpt *ck = open_rel("in.safetensors"), *back;
	struct pt_error err;
	struct pt_buf notes;
	char p[128];

	(void)state;
	pt_buf_init(&notes);
	pathf(p, sizeof(p), "out.pt");
	assert_int_equal(pt_export_pt(ck, p, &o, &notes, &err), 0);
	back = open_rel("out.pt");
	assert_string_equal(pt_ckpt_format(back), "torch.save zip");
	expect_tensor(back, "a", g_a);
	expect_tensor(back, "b", g_b);
	/* what torch >= 2.6 loads with weights_only=True */
	assert_int_equal(pt_weights_only(back, &notes), 1);
	pt_ckpt_close(back);
	pt_buf_free(&notes);
	pt_ckpt_close(ck);
}

static void test_npy(void **state)
{
	struct pt_export_opts o = { .no_fsync = true };
	struct pt_ckpt *ck = open_rel("in.safetensors");
	struct pt_error err;
	struct pt_buf notes;
	uint8_t buf[256];
	char p[128];
	ssize_t n;
	size_t hl;
	int fd;

	(void)state;
	pt_buf_init(&notes);
	pathf(p, sizeof(p), "npy");
	assert_int_equal(pt_export_npy(ck, p, &o, &notes, &err), 0);
	listing("npy", p, sizeof(p));
	assert_string_equal(p, "a.json a.npy b.json b.npy");
	pathf(p, sizeof(p), "npy/b.npy");
	fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	/* version 1.0, a header padded to a multiple of 64 bytes, then the
	 * data */
	assert_true(n > 10);
	assert_memory_equal(buf, "\x93NUMPY\x01\x00", 8);
	hl = 10 + (size_t)(buf[8] | buf[9] << 8);
	assert_int_equal(hl % 64, 0);
	assert_int_equal(n, hl + 16);
	assert_int_equal(buf[hl - 1], '\n');
	assert_non_null(memmem(buf, hl, "'descr': '<f4'", 14));
	assert_non_null(memmem(buf, hl, "'shape': (2, 2)", 15));
	assert_memory_equal(buf + hl, g_b, 16);
	pt_buf_free(&notes);
	pt_ckpt_close(ck);
}

static void test_export_failures(void **state)
{
	struct pt_export_opts o = { .no_fsync = true };
	struct pt_ckpt *ck = open_rel("in.safetensors");
	struct pt_error err;
	struct pt_buf notes;
	char p[128], names[256];

	(void)state;
	pt_buf_init(&notes);
	pathf(p, sizeof(p), "no/such/dir/out.safetensors");
	pt_error_clear(&err);
	assert_int_equal(pt_export_safetensors(ck, p, &o, &notes, &err), -ENOENT);
	expect_msg(&err, "no/such/dir/out.safetensors", "No such file or directory");
	pathf(p, sizeof(p), "no/such/dir/out.pt");
	pt_error_clear(&err);
	assert_int_equal(pt_export_pt(ck, p, &o, &notes, &err), -ENOENT);
	expect_msg(&err, "no/such/dir/out.pt", "No such file or directory");
	/* a directory in the way of the output file */
	pathf(p, sizeof(p), "taken");
	assert_int_equal(mkdir(p, 0755), 0);
	pt_error_clear(&err);
	assert_int_equal(pt_export_safetensors(ck, p, &o, &notes, &err), -EISDIR);
	expect_msg(&err, "taken", "Is a directory");
	/* .npy into a directory that holds something already */
	pathf(p, sizeof(p), "taken/x");
	assert_int_equal(mkdir(p, 0755), 0);
	pathf(p, sizeof(p), "taken");
	pt_error_clear(&err);
	assert_int_equal(pt_export_npy(ck, p, &o, &notes, &err), -ENOTEMPTY);
	expect_msg(&err, "taken", "exists and is not empty");
	/* nothing was left behind: no temporary, no partial output */
	listing("", names, sizeof(names));
	assert_string_equal(names, "in.safetensors taken");
	listing("taken", names, sizeof(names));
	assert_string_equal(names, "x");
	pt_buf_free(&notes);
	pt_ckpt_close(ck);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_safetensors_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pt_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_npy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_export_failures, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
