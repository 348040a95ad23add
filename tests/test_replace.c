/* SPDX-License-Identifier: MIT */
/*
 * test_replace.c -- core/container/replace.c: symlink chains (relative,
 * absolute, dangling, looping), owner/mode/xattrs of the new file, and a
 * fault injected at every step leaves the original byte-identical with no
 * temporary file left behind, with the injected errno reported.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "require.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "container/replace.h"

static char g_dir[64];

static int rm_cb(const char *p, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static int setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/ptfs-rp-XXXXXX");
	pt_fault_set(NULL, 0, 0);
	return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	pt_fault_set(NULL, 0, 0);
	return nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void pathf(char *buf, size_t cap, const char *rel)
{
	int k = snprintf(buf, cap, "%s/%s", g_dir, rel);

	assert_true(k > 0 && (size_t)k < cap);
}

static void put(const char *rel, const char *text)
{
	char p[256];
	FILE *f;

	pathf(p, sizeof(p), rel);
	f = fopen(p, "wb");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void expect_text(const char *rel, const char *text)
{
	char p[256];
	char got[256];
	size_t n;
	FILE *f;

	pathf(p, sizeof(p), rel);
	f = fopen(p, "rb");
	assert_non_null(f);
	n = fread(got, 1, sizeof(got) - 1, f);
	fclose(f);
	got[n] = '\0';
	assert_string_equal(got, text);
}

/* Files in a directory whose name contains ".ptfs-" (temporaries). */
static int temporaries(const char *rel)
{
	char p[256];
	struct dirent *d;
	DIR *dir;
	int n = 0;

	pathf(p, sizeof(p), rel);
	dir = opendir(p);
	assert_non_null(dir);
	while ((d = readdir(dir)))
		if (strstr(d->d_name, ".ptfs-"))
			n++;
	closedir(dir);
	return n;
}

/* Replace @rel's contents with @text through the module. */
static int replace_text(const char *rel, const char *text,
			struct pt_error *err)
{
	struct pt_replace r;
	char p[256];
	int rc;

	pathf(p, sizeof(p), rel);
	pt_error_clear(err);
	rc = pt_replace_begin(&r, p, NULL, err);
	if (rc)
		return rc;
	rc = pt_replace_write(&r, text, strlen(text), 0, err);
	if (rc) {
		pt_replace_abort(&r);
		return rc;
	}
	return pt_replace_commit(&r, err);
}

static void is_link(const char *rel)
{
	char p[256];
	struct stat st;

	pathf(p, sizeof(p), rel);
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
}

/* HF cache layout: snapshots/REV/f -> ../../blobs/H (relative), a second
 * absolute link to that link, and the blob is what changes. */
static void test_symlink_chain(void **state)
{
	struct pt_error err;
	char blob[256];

	(void)state;
	pathf(blob, sizeof(blob), "blobs");
	assert_int_equal(mkdir(blob, 0755), 0);
	pathf(blob, sizeof(blob), "snapshots");
	assert_int_equal(mkdir(blob, 0755), 0);
	pathf(blob, sizeof(blob), "snapshots/rev");
	assert_int_equal(mkdir(blob, 0755), 0);
	put("blobs/abc", "old");
	assert_int_equal(symlink("../../blobs/abc",
				 (pathf(blob, sizeof(blob), "snapshots/rev/m"), blob)), 0);
	pathf(blob, sizeof(blob), "snapshots/rev/m");
	{
		char abs_link[256];

		pathf(abs_link, sizeof(abs_link), "top");
		assert_int_equal(symlink(blob, abs_link), 0);
	}
	assert_int_equal(replace_text("top", "new", &err), 0);
	is_link("top");
	is_link("snapshots/rev/m");
	expect_text("blobs/abc", "new");
	expect_text("top", "new");
	assert_int_equal(temporaries("blobs"), 0);
	assert_int_equal(temporaries("snapshots/rev"), 0);
	assert_int_equal(replace_text("snapshots/rev/m", "newer", &err), 0);
	expect_text("blobs/abc", "newer");
	is_link("snapshots/rev/m");
}

static void test_bad_links(void **state)
{
	struct pt_error err;
	char a[256];
	char b[256];

	(void)state;
	pathf(a, sizeof(a), "dangling");
	assert_int_equal(symlink("nowhere", a), 0);
	assert_int_equal(replace_text("dangling", "x", &err), -ENOENT);
	assert_non_null(strstr(err.msg, "nowhere"));
	pathf(a, sizeof(a), "loop1");
	pathf(b, sizeof(b), "loop2");
	assert_int_equal(symlink("loop2", a), 0);
	assert_int_equal(symlink("loop1", b), 0);
	assert_int_equal(replace_text("loop1", "x", &err), -ELOOP);
	is_link("loop1");
	assert_int_equal(temporaries("."), 0);
}

static void test_mode_owner(void **state)
{
	struct pt_error err;
	struct stat st;
	char p[256];

	(void)state;
	put("f", "old");
	pathf(p, sizeof(p), "f");
	if (geteuid() == 0)
		assert_int_equal(chown(p, 65534, 65534), 0);
	assert_int_equal(chmod(p, 02640), 0);
	assert_int_equal(replace_text("f", "new", &err), 0);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 02640);
	if (geteuid() == 0) {
		assert_int_equal(st.st_uid, 65534);
		assert_int_equal(st.st_gid, 65534);
	}
	expect_text("f", "new");
}

/* File capabilities survive the replacement (every write to a file drops
 * them, so the new file is given them again). */
static void test_keeps_caps(void **state)
{
	/* cap_net_raw+ep (VFS_CAP_REVISION_2): only root may set it */
	static const unsigned char cap[20] = { 1, 0, 0, 2, 0, 0x20 };
	struct pt_error err;
	char p[256];
	char v[64];

	(void)state;
	put("f", "old");
	pathf(p, sizeof(p), "f");
	if (setxattr(p, "security.capability", cap, sizeof(cap), 0) != 0)
		PTFS_SKIP("PTFS_REQUIRE_ROOT", "cannot set security.capability "
			  "here (%s; needs root)", strerror(errno));
	assert_int_equal(replace_text("f", "new", &err), 0);
	assert_int_equal(getxattr(p, "security.capability", v, sizeof(v)), 20);
	assert_memory_equal(v, cap, sizeof(cap));
	expect_text("f", "new");
}

/* User extended attributes are copied to the new file. */
static void test_keeps_user_xattr(void **state)
{
	struct pt_error err;
	char p[256];
	char v[64];

	(void)state;
	put("f", "old");
	pathf(p, sizeof(p), "f");
	if (setxattr(p, "user.origin", "hub", 3, 0) != 0)
		PTFS_SKIP("PTFS_REQUIRE_XATTR", "user xattrs unsupported in %s (%s)",
			  g_dir, strerror(errno));
	assert_int_equal(replace_text("f", "new", &err), 0);
	assert_int_equal(getxattr(p, "user.origin", v, sizeof(v)), 3);
	assert_memory_equal(v, "hub", 3);
	expect_text("f", "new");
}

static void test_stale(void **state)
{
	struct pt_replace_expect ex;
	struct pt_replace r;
	struct pt_error err;
	char p[256];

	(void)state;
	put("f", "old");
	pathf(p, sizeof(p), "f");
	memset(&ex, 0, sizeof(ex));
	ex.size = 99;
	pt_error_clear(&err);
	assert_int_equal(pt_replace_begin(&r, p, &ex, &err), -ESTALE);
	/* changed between begin and commit */
	assert_int_equal(pt_replace_begin(&r, p, NULL, &err), 0);
	assert_int_equal(pt_replace_write(&r, "new", 3, 0, &err), 0);
	put("f", "other writer");
	assert_int_equal(pt_replace_commit(&r, &err), -ESTALE);
	expect_text("f", "other writer");
	assert_int_equal(temporaries("."), 0);
}

/* Every step, failed with a distinct errno: the original stays. */
static void test_faults(void **state)
{
	static const struct {
		const char *step;
		int e;
	} steps[] = {
		{ "create", EACCES }, { "owner", EPERM }, { "mode", EROFS },
		{ "write", ENOSPC }, { "fsync", EIO }, { "close", EDQUOT },
		{ "rename", EXDEV },
	};
	struct pt_error err;
	size_t i;

	(void)state;
	put("f", "original");
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		pt_fault_set(steps[i].step, 1, steps[i].e);
		assert_int_equal(replace_text("f", "replaced", &err),
				 -steps[i].e);
		assert_non_null(strstr(err.msg, strerror(steps[i].e)));
		expect_text("f", "original");
		assert_int_equal(temporaries("."), 0);
	}
	/* the second write of a large file */
	{
		struct pt_replace r;
		char p[256];
		static char big[1 << 16];

		pathf(p, sizeof(p), "f");
		pt_fault_set("write", 2, ENOSPC);
		pt_error_clear(&err);
		assert_int_equal(pt_replace_begin(&r, p, NULL, &err), 0);
		assert_int_equal(pt_replace_write(&r, big, sizeof(big), 0, &err), 0);
		assert_int_equal(pt_replace_write(&r, big, sizeof(big),
						  sizeof(big), &err), -ENOSPC);
		pt_replace_abort(&r);
		expect_text("f", "original");
		assert_int_equal(temporaries("."), 0);
	}
	/* after the rename nothing is a failure */
	pt_fault_set("dirfsync", 1, EIO);
	assert_int_equal(replace_text("f", "replaced", &err), 0);
	assert_int_equal(pt_fault_count("dirfsync"), 1);
	expect_text("f", "replaced");
	pt_fault_set(NULL, 0, 0);
}

static void test_copy_and_clone(void **state)
{
	struct pt_replace r;
	struct pt_error err;
	char p[256];
	char q[256];
	FILE *f;
	int in;
	int rc;

	(void)state;
	put("src", "0123456789");
	put("dst", "abcdefghij");
	pathf(p, sizeof(p), "src");
	pathf(q, sizeof(q), "dst");
	in = open(p, O_RDONLY);
	assert_true(in >= 0);
	pt_error_clear(&err);
	assert_int_equal(pt_replace_begin(&r, q, NULL, &err), 0);
	assert_int_equal(pt_replace_copy(&r, in, 2, 6, 0, &err), 0);
	assert_int_equal(pt_replace_commit(&r, &err), 0);
	expect_text("dst", "234567");
	assert_int_equal(pt_replace_begin(&r, q, NULL, &err), 0);
	rc = pt_replace_clone(&r, in, &err);
	if (rc == 0) {
		assert_int_equal(pt_replace_commit(&r, &err), 0);
		expect_text("dst", "0123456789");
	} else {
		/* tmpfs/ext4: no clone, and no message either */
		assert_true(rc == -EOPNOTSUPP || rc == -EXDEV ||
			    rc == -EINVAL || rc == -ENOTTY);
		assert_int_equal(err.code, 0);
		pt_replace_abort(&r);
		expect_text("dst", "234567");
	}
	close(in);
	(void)f;
}

static void age(const char *p)
{
	struct timespec t[2];

	clock_gettime(CLOCK_REALTIME, &t[0]);
	t[0].tv_sec -= 3600;
	t[1] = t[0];
	assert_int_equal(utimensat(AT_FDCWD, p, t, 0), 0);
}

/* Temporaries of a killed writer are swept whatever their age; a live
 * writer's (locked) are not, nor another file's, nor another user's; a
 * read-only sweep only counts them; nothing is swept while a writer holds
 * the checkpoint's lock unless the caller is the one holding it. */
static void test_sweep(void **state)
{
	struct pt_replace r;
	struct pt_error err;
	char p[256];
	char dead[256];
	char other[256];
	char note[512];

	(void)state;
	put("m.pt", "data");
	put(".m.pt.ptfs-AbC123", "half a copy");        /* brand new */
	put(".other.pt.ptfs-AbC123", "not ours");
	pathf(dead, sizeof(dead), ".m.pt.ptfs-AbC123");
	pathf(other, sizeof(other), ".m.pt.ptfs-XyZ789");
	if (geteuid() == 0) {
		put(".m.pt.ptfs-XyZ789", "someone else's");
		assert_int_equal(chown(other, 65534, 65534), 0);
	}
	pathf(p, sizeof(p), ".other.pt.ptfs-AbC123");
	age(p);
	pathf(p, sizeof(p), "m.pt");
	pt_error_clear(&err);
	assert_int_equal(pt_replace_begin(&r, p, NULL, &err), 0);
	age(r.tmp);                     /* old, but locked by us */
	/* a writer holds the checkpoint's lock: nothing swept */
	assert_int_equal(pt_replace_sweep(p, false, true, note, sizeof(note)), 0);
	assert_int_equal(access(dead, F_OK), 0);
	/* read-only: counted, kept */
	assert_int_equal(pt_replace_sweep(p, true, false, note, sizeof(note)), 1);
	assert_non_null(strstr(note, "found 1 temporary file"));
	assert_int_equal(access(dead, F_OK), 0);
	assert_int_equal(pt_replace_sweep(p, true, true, note, sizeof(note)), 1);
	assert_non_null(strstr(note, "removed 1 temporary file"));
	assert_int_equal(access(dead, F_OK), -1);
	assert_int_equal(access(r.tmp, F_OK), 0);
	pathf(dead, sizeof(dead), ".other.pt.ptfs-AbC123");
	assert_int_equal(access(dead, F_OK), 0);
	if (geteuid() == 0)
		assert_int_equal(access(other, F_OK), 0);
	pt_replace_abort(&r);
	assert_int_equal(pt_replace_sweep(p, false, true, note, sizeof(note)), 0);
	expect_text("m.pt", "data");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_symlink_chain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_links, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mode_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keeps_caps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keeps_user_xattr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale, setup, teardown),
		cmocka_unit_test_setup_teardown(test_faults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_and_clone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sweep, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
