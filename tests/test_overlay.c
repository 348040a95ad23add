/* SPDX-License-Identifier: MIT */
/*
 * test_overlay.c -- fs/overlay.c, the mount's uncommitted writes, without
 * FUSE: laid over a safetensors checkpoint written into a temporary
 * directory (pt_ckpt_set_layer, as fs/mount_main.c does), every case
 * reads the tensors through the public API and compares exact bytes with
 * a copy of what the file plus the writes must hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ckpt/ckpt.h"
#include "overlay.h"

/* "big" spans three whole chunks and part of a fourth; "small" follows it
 * in the file, a storage of its own. */
#define BIG_N (3 * OV_CHUNK + 3392)
#define SMALL_N 100
#define HDR_FMT "{\"big\":{\"dtype\":\"U8\",\"shape\":[%u],\"data_offsets\":[0,%u]}," \
		"\"small\":{\"dtype\":\"U8\",\"shape\":[%u],\"data_offsets\":[%u,%u]}}"

struct fix {
	char dir[64];
	char path[96];
	uint8_t *file;          /* the file as written */
	size_t flen;
	uint64_t data_off;      /* where the data starts */
	struct pt_ckpt *ck;
	struct ov *o;
	struct pt_node *big, *small;
	struct ov_st *s_big, *s_small;
	uint8_t *want_big;      /* what reads of each must give */
	uint8_t *want_small;
};

static void make_file(struct fix *f)
{
	char hdr[256];
	size_t hl, i;
	int fd;

	hl = (size_t)snprintf(hdr, sizeof(hdr), HDR_FMT, BIG_N, BIG_N, SMALL_N,
			      BIG_N, BIG_N + SMALL_N);
	assert_true(hl < sizeof(hdr));
	f->data_off = 8 + hl;
	f->flen = 8 + hl + BIG_N + SMALL_N;
	f->file = malloc(f->flen);
	assert_non_null(f->file);
	for (i = 0; i < 8; i++)
		f->file[i] = (uint8_t)((uint64_t)hl >> (8 * i));
	memcpy(f->file + 8, hdr, hl);
	/* never zero (zeroed bytes must show), and not periodic in a chunk's
	 * size (a chunk loaded from the wrong offset must show) */
	for (i = 0; i < BIG_N; i++)
		f->file[f->data_off + i] = (uint8_t)(1 + (i * 7 + i / 251) % 255);
	for (i = 0; i < SMALL_N; i++)
		f->file[f->data_off + BIG_N + i] = (uint8_t)(0x80 + i);
	fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, f->file, f->flen), (ssize_t)f->flen);
	assert_int_equal(close(fd), 0);
}

static struct pt_ckpt *open_ckpt(const char *path)
{
	struct pt_ckpt *ck = NULL;
	struct pt_error err;

	pt_error_clear(&err);
	if (pt_ckpt_open(&ck, path, NULL, &err) != 0)
		fail_msg("open %s: %s", path, err.msg);
	return ck;
}

static struct pt_node *node(struct pt_ckpt *ck, const char *name)
{
	int rc = 0;
	struct pt_node *n = pt_tree_path(ck, name, &rc);

	assert_non_null(n);
	return n;
}

/* The overlay of the storage @n views, which starts at the file's first
 * byte. */
static struct ov_st *st_of(struct ov *o, const struct pt_node *n)
{
	uint64_t lo = 1;
	const struct pt_storage *st = pt_node_writable_storage(n, &lo);
	struct ov_st *s;

	assert_non_null(st);
	assert_int_equal(lo, 0);
	s = ov_get(o, st, true);
	assert_non_null(s);
	assert_ptr_equal(ov_get(o, st, false), s);
	return s;
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/ptfs-overlay-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/m.safetensors", f->dir);
	*state = f;
	make_file(f);
	f->ck = open_ckpt(f->path);
	f->o = ov_new(f->ck);
	assert_non_null(f->o);
	pt_ckpt_set_layer(f->ck, ov_source(f->o));
	f->big = node(f->ck, "big");
	f->small = node(f->ck, "small");
	f->s_big = st_of(f->o, f->big);
	f->s_small = st_of(f->o, f->small);
	assert_ptr_not_equal(f->s_big, f->s_small);
	f->want_big = malloc(BIG_N);
	f->want_small = malloc(SMALL_N);
	assert_non_null(f->want_big);
	assert_non_null(f->want_small);
	memcpy(f->want_big, f->file + f->data_off, BIG_N);
	memcpy(f->want_small, f->file + f->data_off + BIG_N, SMALL_N);
	return 0;
}

static int rm_cb(const char *p, const struct stat *st, int flag,
		 struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static int teardown(void **state)
{
	struct fix *f = *state;

	ov_free(f->o);          /* takes the layer off first */
	pt_ckpt_close(f->ck);
	free(f->file);
	free(f->want_big);
	free(f->want_small);
	nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* Bytes [@off, @off + @n) of @nd as pt_node_read gives them equal
 * @want + @off: in one read, and in reads of an odd size that straddle
 * every chunk boundary. */
static void expect_bytes(struct pt_ckpt *ck, struct pt_node *nd,
			 const uint8_t *want, uint64_t off, size_t n)
{
	uint8_t *got = malloc(n ? n : 1);
	struct pt_error err;
	size_t at;

	assert_non_null(got);
	pt_error_clear(&err);
	memset(got, 0xee, n);
	assert_int_equal(pt_node_read(ck, nd, got, n, off, &err), (ssize_t)n);
	assert_memory_equal(got, want + off, n);
	memset(got, 0xee, n);
	for (at = 0; at < n; at += 4099) {
		size_t k = n - at < 4099 ? n - at : 4099;

		assert_int_equal(pt_node_read(ck, nd, got + at, k, off + at, &err),
				 (ssize_t)k);
	}
	assert_memory_equal(got, want + off, n);
	free(got);
}

static void expect_all(struct fix *f)
{
	expect_bytes(f->ck, f->big, f->want_big, 0, BIG_N);
	expect_bytes(f->ck, f->small, f->want_small, 0, SMALL_N);
}

/* pt_node_extent of [@off, @off + @n) of @nd: granted (at the right place
 * of the checkpoint's file) or refused, as @granted says. */
static void expect_extent(struct fix *f, struct pt_node *nd, uint64_t off,
			  uint64_t n, bool granted)
{
	uint64_t base = nd == f->big ? f->data_off : f->data_off + BIG_N;
	uint64_t at = 0;
	int fd = -1;

	if (!granted) {
		assert_false(pt_node_extent(f->ck, nd, off, n, &fd, &at));
		return;
	}
	assert_true(pt_node_extent(f->ck, nd, off, n, &fd, &at));
	assert_true(fd >= 0);
	assert_int_equal(at, base + off);
}

/* The checkpoint's file on disk, read with plain pread. */
static void expect_on_disk(struct fix *f)
{
	uint8_t *got = malloc(f->flen);
	int fd = open(f->path, O_RDONLY);
	struct stat sb;

	assert_non_null(got);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, f->flen);
	assert_int_equal(pread(fd, got, f->flen, 0), (ssize_t)f->flen);
	close(fd);
	assert_memory_equal(got, f->file, f->data_off);        /* the header */
	assert_memory_equal(got + f->data_off, f->want_big, BIG_N);
	assert_memory_equal(got + f->data_off + BIG_N, f->want_small, SMALL_N);
	free(got);
}

/* Write @n bytes of value @v at @off of @s and into @want. */
static void put(struct fix *f, struct ov_st *s, uint8_t *want, uint64_t off,
		size_t n, uint8_t v)
{
	uint8_t buf[256];

	assert_true(n <= sizeof(buf));
	memset(buf, v, n);
	assert_int_equal(ov_write(f->o, s, buf, n, off), 0);
	memcpy(want + off, buf, n);
}

static void test_no_writes(void **state)
{
	struct fix *f = *state;

	expect_all(f);
	assert_false(ov_dirty(f->s_big));
	assert_false(ov_any_dirty(f->o));
	expect_extent(f, f->big, 0, BIG_N, true);
	expect_extent(f, f->big, OV_CHUNK - 1, 2, true);
	expect_extent(f, f->small, 0, SMALL_N, true);
}

static void test_write(void **state)
{
	struct fix *f = *state;
	uint64_t at = OV_CHUNK + 10;    /* inside chunk 1 of big */

	put(f, f->s_big, f->want_big, at, 5, 0x11);
	assert_true(ov_dirty(f->s_big));
	assert_false(ov_dirty(f->s_small));
	assert_true(ov_any_dirty(f->o));
	expect_all(f);
	/* the bytes around the write are the file's */
	assert_int_equal(f->want_big[at - 1], f->file[f->data_off + at - 1]);
	assert_int_equal(f->want_big[at + 5], f->file[f->data_off + at + 5]);
	/* a read that starts in chunk 0 (the file's) and ends in chunk 1 */
	expect_bytes(f->ck, f->big, f->want_big, OV_CHUNK - 50, 100);
	/* extents: refused wherever chunk 1 is touched, granted elsewhere */
	expect_extent(f, f->big, at, 5, false);
	expect_extent(f, f->big, OV_CHUNK, 1, false);
	expect_extent(f, f->big, 2 * OV_CHUNK - 1, 1, false);
	expect_extent(f, f->big, 0, BIG_N, false);
	expect_extent(f, f->big, OV_CHUNK - 1, 2, false);
	expect_extent(f, f->big, 0, OV_CHUNK, true);
	expect_extent(f, f->big, 2 * OV_CHUNK, BIG_N - 2 * OV_CHUNK, true);
	expect_extent(f, f->small, 0, SMALL_N, true);

	/* a write across the boundary of chunks 2 and 3 (the last, short) */
	put(f, f->s_big, f->want_big, 3 * OV_CHUNK - 3, 7, 0x22);
	put(f, f->s_small, f->want_small, SMALL_N - 4, 4, 0x33);
	expect_all(f);
	expect_bytes(f->ck, f->big, f->want_big, 3 * OV_CHUNK - 100, 200);
	expect_extent(f, f->big, 0, OV_CHUNK, true);
	expect_extent(f, f->big, 3 * OV_CHUNK, 1, false);
	expect_extent(f, f->small, 0, SMALL_N - 4, false);
	/* nothing reached the file */
	memcpy(f->want_big, f->file + f->data_off, BIG_N);
	memcpy(f->want_small, f->file + f->data_off + BIG_N, SMALL_N);
	expect_on_disk(f);
}

static void test_zero_revert(void **state)
{
	struct fix *f = *state;
	uint64_t lo = 1000, n = OV_CHUNK + 500;     /* chunks 0 and 1 */

	assert_int_equal(ov_zero(f->o, f->s_big, lo, n), 0);
	memset(f->want_big + lo, 0, n);
	/* and the short last chunk to the storage's end */
	assert_int_equal(ov_zero(f->o, f->s_big, BIG_N - 10, 10), 0);
	memset(f->want_big + BIG_N - 10, 0, 10);
	expect_all(f);
	assert_true(ov_dirty(f->s_big));

	/* a partial revert: those bytes are the file's again, the rest of the
	 * zeroed range stays zero */
	assert_int_equal(ov_revert(f->o, f->s_big, lo, 500), 0);
	memcpy(f->want_big + lo, f->file + f->data_off + lo, 500);
	expect_all(f);
	assert_true(ov_dirty(f->s_big));
	assert_int_equal(f->want_big[lo + 500], 0);

	/* the last chunk reverted whole: granted again, chunk 0 not */
	assert_int_equal(ov_revert(f->o, f->s_big, 3 * OV_CHUNK,
				   BIG_N - 3 * OV_CHUNK), 0);
	memcpy(f->want_big + 3 * OV_CHUNK, f->file + f->data_off + 3 * OV_CHUNK,
	       BIG_N - 3 * OV_CHUNK);
	expect_all(f);
	expect_extent(f, f->big, 3 * OV_CHUNK, BIG_N - 3 * OV_CHUNK, true);
	expect_extent(f, f->big, 0, 1, false);
	assert_true(ov_dirty(f->s_big));

	/* everything reverted: nothing left */
	assert_int_equal(ov_revert(f->o, f->s_big, 0, BIG_N), 0);
	memcpy(f->want_big, f->file + f->data_off, BIG_N);
	expect_all(f);
	assert_false(ov_dirty(f->s_big));
	assert_false(ov_any_dirty(f->o));
	expect_extent(f, f->big, 0, BIG_N, true);
}

static void test_snapshot_restore(void **state)
{
	struct fix *f = *state;
	uint8_t *a = malloc(BIG_N);
	struct ov_snap *sn, *part;
	int rc = 1;

	assert_non_null(a);
	/* A: chunks 0 and 2 */
	put(f, f->s_big, f->want_big, 5, 20, 0xa1);
	put(f, f->s_big, f->want_big, 2 * OV_CHUNK + 7, 3, 0xa2);
	memcpy(a, f->want_big, BIG_N);
	sn = ov_snapshot(f->o, f->s_big, 0, BIG_N, &rc);
	assert_non_null(sn);
	assert_int_equal(rc, 0);
	/* chunk 1 untouched when this one is taken */
	part = ov_snapshot(f->o, f->s_big, OV_CHUNK + 5, 100, &rc);
	assert_non_null(part);
	assert_int_equal(rc, 0);

	/* B: over A in chunk 0, and chunks 1 and 3 fresh */
	put(f, f->s_big, f->want_big, 10, 20, 0xb1);
	put(f, f->s_big, f->want_big, OV_CHUNK + 50, 10, 0xb2);
	put(f, f->s_big, f->want_big, 3 * OV_CHUNK + 1, 4, 0xb3);
	expect_all(f);

	/* the part: bytes [OV_CHUNK + 5, +100) as they were (the file's);
	 * the B bytes of chunk 1 outside it stay */
	assert_int_equal(ov_restore(f->o, f->s_big, part), 0);
	memcpy(f->want_big + OV_CHUNK + 5, a + OV_CHUNK + 5, 100);
	expect_all(f);

	/* the whole: A, uncommitted writes included */
	assert_int_equal(ov_restore(f->o, f->s_big, sn), 0);
	assert_memory_equal(f->want_big + 2 * OV_CHUNK + 7, a + 2 * OV_CHUNK + 7, 3);
	memcpy(f->want_big, a, BIG_N);
	expect_all(f);
	assert_int_equal(f->want_big[5], 0xa1);
	assert_int_not_equal(f->want_big[5], f->file[f->data_off + 5]);
	/* chunks not written in A are the file's again, and zero copy */
	assert_true(ov_dirty(f->s_big));
	expect_extent(f, f->big, OV_CHUNK, OV_CHUNK, true);
	expect_extent(f, f->big, 3 * OV_CHUNK, BIG_N - 3 * OV_CHUNK, true);
	expect_extent(f, f->big, 0, 1, false);

	/* a snapshot of a range outside the storage */
	assert_null(ov_snapshot(f->o, f->s_big, BIG_N - 1, 2, &rc));
	assert_int_equal(rc, -EINVAL);
	ov_snap_free(part);
	ov_snap_free(sn);
	free(a);
}

/* A snapshot's written chunk that is gone when it is restored (reverted
 * meanwhile) is made again: the file's bytes, the snapshot's in its
 * range. */
static void test_restore_after_revert(void **state)
{
	struct fix *f = *state;
	uint64_t lo = 2 * OV_CHUNK + 100;
	struct ov_snap *sn;
	int rc = 1;

	put(f, f->s_big, f->want_big, lo - 10, 80, 0xd1);
	sn = ov_snapshot(f->o, f->s_big, lo, 50, &rc);
	assert_non_null(sn);
	assert_int_equal(ov_revert(f->o, f->s_big, 0, BIG_N), 0);
	assert_false(ov_dirty(f->s_big));
	memcpy(f->want_big, f->file + f->data_off, BIG_N);
	expect_all(f);

	assert_int_equal(ov_restore(f->o, f->s_big, sn), 0);
	memset(f->want_big + lo, 0xd1, 50);
	expect_all(f);
	assert_int_equal(f->want_big[lo - 1], f->file[f->data_off + lo - 1]);
	assert_true(ov_dirty(f->s_big));
	expect_extent(f, f->big, 2 * OV_CHUNK, 1, false);
	expect_extent(f, f->big, 0, 2 * OV_CHUNK, true);
	ov_snap_free(sn);
}

static void test_commit(void **state)
{
	struct fix *f = *state;
	struct pt_ckpt *again;
	struct pt_error err;

	put(f, f->s_big, f->want_big, OV_CHUNK - 2, 4, 0xc1);
	put(f, f->s_big, f->want_big, BIG_N - 1, 1, 0xc2);
	put(f, f->s_small, f->want_small, 0, 3, 0xc3);
	expect_all(f);
	pt_error_clear(&err);
	if (ov_commit(f->o, &err) != 0)
		fail_msg("commit: %s", err.msg);
	expect_on_disk(f);
	assert_false(ov_any_dirty(f->o));
	assert_false(ov_dirty(f->s_big));
	assert_false(ov_dirty(f->s_small));
	/* the open checkpoint reads the committed file, zero copy again */
	expect_all(f);
	expect_extent(f, f->big, 0, BIG_N, true);
	expect_extent(f, f->small, 0, SMALL_N, true);
	/* and so does a fresh open, without any layer */
	again = open_ckpt(f->path);
	expect_bytes(again, node(again, "big"), f->want_big, 0, BIG_N);
	expect_bytes(again, node(again, "small"), f->want_small, 0, SMALL_N);
	pt_ckpt_close(again);
}

static void test_past_the_end(void **state)
{
	struct fix *f = *state;
	uint8_t buf[16];

	memset(buf, 0x5a, sizeof(buf));
	/* partly past, wholly past, starting at the end */
	assert_int_equal(ov_write(f->o, f->s_small, buf, 8, SMALL_N - 4), -EFBIG);
	assert_int_equal(ov_write(f->o, f->s_small, buf, 1, SMALL_N + 1), -EFBIG);
	assert_int_equal(ov_write(f->o, f->s_big, buf, 1, BIG_N), -EFBIG);
	assert_int_equal(ov_zero(f->o, f->s_big, BIG_N - 1, 2), -EFBIG);
	assert_int_equal(ov_revert(f->o, f->s_big, BIG_N - 1, 2), -EINVAL);
	assert_false(ov_dirty(f->s_small));
	assert_false(ov_dirty(f->s_big));
	assert_false(ov_any_dirty(f->o));
	expect_all(f);
	expect_extent(f, f->small, 0, SMALL_N, true);
	expect_extent(f, f->big, 0, BIG_N, true);

	/* with a write pending, a failed one leaves it as it was */
	put(f, f->s_small, f->want_small, SMALL_N - 4, 4, 0x44);
	assert_int_equal(ov_write(f->o, f->s_small, buf, 8, SMALL_N - 4), -EFBIG);
	expect_all(f);
	assert_false(ov_dirty(f->s_big));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_no_writes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write, setup, teardown),
		cmocka_unit_test_setup_teardown(test_zero_revert, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_restore, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_after_revert, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_past_the_end, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
