/* SPDX-License-Identifier: MIT */
/*
 * test_journal.c -- core/container/journal.c: in-place patches behind the
 * undo journal and clone patches.  A fault at every step leaves the old
 * file; a child killed (SIGKILL) at every step leaves, after
 * pt_journal_recover(), the old or the new file and never a mix; a
 * truncated, corrupt, finished or foreign journal is handled as journal.h
 * says; a commit of two files leaves both old on any failure before the
 * first rename.
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

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "container/journal.h"
#include "ckpt/ckpt.h"

#define FSIZE (3u << 20)

static char g_dir[64];
static char g_file[128];
static char g_jrnl[160];
static char g_aside[200];
static uint8_t *g_old;
static uint8_t *g_new;

static int rm_cb(const char *p, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void write_file(const char *p, const uint8_t *b, size_t n)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
}

static uint8_t *read_file(const char *p, size_t *n)
{
	struct stat st;
	uint8_t *b;
	int fd = open(p, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	b = malloc((size_t)st.st_size + 1);
	assert_non_null(b);
	assert_int_equal(read(fd, b, (size_t)st.st_size), st.st_size);
	close(fd);
	*n = (size_t)st.st_size;
	return b;
}

static bool exists(const char *p)
{
	return access(p, F_OK) == 0;
}

/* Three ranges: 100 bytes at 10, 2 MiB at 300000, 4 bytes at the end. */
static struct pt_patch g_p[3];

static void make_patches(void)
{
	size_t i;

	g_p[0].off = 10;
	g_p[0].len = 100;
	g_p[1].off = 300000;
	g_p[1].len = 2u << 20;
	g_p[2].off = FSIZE - 4;
	g_p[2].len = 4;
	for (i = 0; i < 3; i++) {
		g_p[i].data = g_new + g_p[i].off;
		g_p[i].read = NULL;
	}
}

static int setup(void **state)
{
	size_t i;

	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/ptfs-jr-XXXXXX");
	if (!mkdtemp(g_dir))
		return -1;
	snprintf(g_file, sizeof(g_file), "%s/model.safetensors", g_dir);
	snprintf(g_jrnl, sizeof(g_jrnl), "%s.ptfs-journal", g_file);
	snprintf(g_aside, sizeof(g_aside), "%s.invalid", g_jrnl);
	g_old = malloc(FSIZE);
	g_new = malloc(FSIZE);
	if (!g_old || !g_new)
		return -1;
	for (i = 0; i < FSIZE; i++)
		g_old[i] = (uint8_t)(i * 7 + 3);
	memcpy(g_new, g_old, FSIZE);
	make_patches();
	for (i = 0; i < 3; i++)
		memset(g_new + g_p[i].off, 0xA5, (size_t)g_p[i].len);
	write_file(g_file, g_old, FSIZE);
	pt_fault_set(NULL, 0, 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	pt_fault_set(NULL, 0, 0);
	free(g_old);
	free(g_new);
	return nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* 0 old, 1 new, -1 a mix. */
static int which(void)
{
	size_t n;
	uint8_t *b = read_file(g_file, &n);
	int r = -1;

	assert_int_equal(n, FSIZE);
	if (memcmp(b, g_old, FSIZE) == 0)
		r = 0;
	else if (memcmp(b, g_new, FSIZE) == 0)
		r = 1;
	free(b);
	return r;
}

static void test_inplace(void **state)
{
	struct pt_error err;
	struct stat a;
	struct stat b;
	char note[1024];

	(void)state;
	assert_int_equal(stat(g_file, &a), 0);
	pt_error_clear(&err);
	assert_int_equal(pt_patch_inplace(g_file, g_p, 3, NULL, &err), 0);
	assert_int_equal(which(), 1);
	assert_false(exists(g_jrnl));
	assert_int_equal(stat(g_file, &b), 0);
	assert_int_equal(a.st_ino, b.st_ino);     /* in place */
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 0);
}

/* A patch in place writes the file: the kernel then drops its file
 * capabilities (and, for other users, set-id bits); they come back. */
static void test_inplace_keeps_privs(void **state)
{
	static const unsigned char cap[20] = { 1, 0, 0, 2, 0, 0x20 };
	struct pt_error err;
	struct stat st;
	char v[32];

	(void)state;
	assert_int_equal(chmod(g_file, 02755), 0);
	if (setxattr(g_file, "security.capability", cap, sizeof(cap), 0) != 0)
		PTFS_SKIP("PTFS_REQUIRE_ROOT", "cannot set security.capability "
			  "here (%s; needs root)", strerror(errno));
	pt_error_clear(&err);
	assert_int_equal(pt_patch_inplace(g_file, g_p, 3, NULL, &err), 0);
	assert_int_equal(which(), 1);
	assert_int_equal(stat(g_file, &st), 0);
	assert_int_equal(st.st_mode & 07777, 02755);
	assert_int_equal(getxattr(g_file, "security.capability", v, sizeof(v)), 20);
}

static void test_faults(void **state)
{
	static const struct {
		const char *step;
		unsigned nth;
		int e;
	} f[] = {
		{ "jcreate", 1, EACCES }, { "jwrite", 1, ENOSPC },
		{ "jwrite", 3, ENOSPC }, { "jfsync", 1, EIO },
		{ "dirfsync", 1, EIO }, { "patch", 1, ENOSPC },
		{ "patch", 3, EIO }, { "pfsync", 1, EIO },
	};
	struct pt_error err;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		pt_fault_set(f[i].step, f[i].nth, f[i].e);
		pt_error_clear(&err);
		assert_int_equal(pt_patch_inplace(g_file, g_p, 3, NULL, &err),
				 -f[i].e);
		assert_non_null(strstr(err.msg, strerror(f[i].e)));
		assert_int_equal(which(), 0);
		assert_false(exists(g_jrnl));
	}
	/* the journal cannot be marked finished: removing it commits */
	pt_fault_set("jdone", 1, EIO);
	assert_int_equal(pt_patch_inplace(g_file, g_p, 3, NULL, &err), 0);
	assert_int_equal(which(), 1);
	assert_false(exists(g_jrnl));
	/* marked finished but cannot be removed: committed, and the next
	 * open removes the finished journal */
	write_file(g_file, g_old, FSIZE);
	pt_fault_set("jremove", 1, EIO);
	assert_int_equal(pt_patch_inplace(g_file, g_p, 3, NULL, &err), 0);
	assert_int_equal(which(), 1);
	assert_true(exists(g_jrnl));
	{
		char note[1024];

		assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
		assert_non_null(strstr(note, "finished"));
	}
	assert_false(exists(g_jrnl));
	assert_int_equal(which(), 1);
}

/* Kill a child at @step's @nth call; recover; old or new, never a mix. */
static int crash_at(const char *step, unsigned nth)
{
	struct pt_error err;
	char note[1024];
	pid_t pid;
	int st;
	int rc;

	write_file(g_file, g_old, FSIZE);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set(step, nth, -1);
		pt_error_clear(&err);
		_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	pt_error_clear(&err);
	rc = pt_journal_recover(g_file, true, note, sizeof(note), &err);
	assert_true(rc == 0 || rc == 1);
	if (rc == 1)
		print_message("%s:%u: %s\n", step, nth, note);
	assert_false(exists(g_jrnl));
	rc = which();
	assert_true(rc == 0 || rc == 1);
	/* a second recovery has nothing to do */
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 0);
	return WIFSIGNALED(st) ? rc : 2 + rc;
}

static void test_crash_everywhere(void **state)
{
	static const struct {
		const char *step;
		unsigned nth;
		int want;       /* 0 old after recovery, 1 new, 3 finished */
	} c[] = {
		{ "jwrite", 1, 0 }, { "jwrite", 4, 0 }, { "jwrite", 7, 0 },
		{ "jfsync", 1, 0 }, { "dirfsync", 1, 0 }, { "patch", 1, 0 },
		{ "patch", 2, 0 }, { "patch", 3, 0 }, { "pfsync", 1, 0 },
		{ "jdone", 1, 0 }, { "jremove", 1, 1 }, { "dirfsync", 2, 1 },
		{ "nothing", 1, 3 },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		assert_int_equal(crash_at(c[i].step, c[i].nth), c[i].want);
}

/* Crash in the middle of the patch, then damage the journal: only a
 * journal that never was complete may be set aside, so the damage here
 * is made before the checkpoint is touched (killed while writing it). */
static void test_incomplete_journal(void **state)
{
	struct pt_error err;
	char note[1024];
	char aside[200];
	pid_t pid;
	int st;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set("jwrite", 5, -1);
		_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_true(exists(g_jrnl));
	/* an earlier set-aside journal is evidence too: not overwritten */
	snprintf(aside, sizeof(aside), "%s.invalid", g_jrnl);
	write_file(aside, (const uint8_t *)"earlier", 7);
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "incomplete journal"));
	assert_non_null(strstr(note, ".invalid.1"));
	{
		size_t k;
		uint8_t *e = read_file(aside, &k);

		assert_int_equal(k, 7);
		free(e);
	}
	snprintf(aside, sizeof(aside), "%s.invalid.1", g_jrnl);
	assert_true(exists(aside));
	assert_false(exists(g_jrnl));
	assert_int_equal(which(), 0);
}

/* A complete journal truncated by one byte, and one with a flipped byte:
 * both fail their checks and are set aside, the file is not written. */
static void test_damaged_journal(void **state)
{
	struct pt_error err;
	char note[1024];
	size_t n;
	uint8_t *j;
	pid_t pid;
	int st;
	int round;

	(void)state;
	for (round = 0; round < 2; round++) {
		char aside[200];

		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			pt_fault_set("patch", 1, -1);
			_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		j = read_file(g_jrnl, &n);
		if (round == 0)
			n--;
		else
			j[n / 2] ^= 1;
		write_file(g_jrnl, j, n);
		free(j);
		/* the checkpoint was not touched yet (killed at the 1st
		 * patch write), as journal.h reasons for any such journal */
		assert_int_equal(which(), 0);
		pt_error_clear(&err);
		assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
		assert_non_null(strstr(note, round ? "checksum" : "truncated"));
		assert_int_equal(which(), 0);
		snprintf(aside, sizeof(aside), "%s.invalid", g_jrnl);
		assert_int_equal(unlink(aside), 0);
	}
}

/* The journal is input too: 300 random damages of a complete journal
 * (one flipped byte anywhere, a random truncation, random garbage) never
 * crash recovery and never change the checkpoint, which that journal's
 * commit had not touched yet. */
static void test_fuzzed_journal(void **state)
{
	struct pt_error err;
	char note[1024];
	char aside[200];
	uint8_t *good;
	size_t n;
	pid_t pid;
	int st;
	int i;
	uint64_t x = 88172645463325252ull;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set("patch", 1, -1);
		_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	good = read_file(g_jrnl, &n);
	snprintf(aside, sizeof(aside), "%s.invalid", g_jrnl);
	for (i = 0; i < 300; i++) {
		uint8_t *j = malloc(n);
		size_t len = n;
		int rc;

		assert_non_null(j);
		memcpy(j, good, n);
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (i % 3 == 0)
			j[x % n] ^= (uint8_t)(1u << (x >> 40) % 8);
		else if (i % 3 == 1)
			len = (size_t)(x % n);
		else
			memset(j + x % n, (int)(x >> 32), (size_t)((x >> 20) % 64) < n - x % n ?
			       (size_t)((x >> 20) % 64) : n - x % n);
		write_file(g_jrnl, j, len);
		free(j);
		pt_error_clear(&err);
		rc = pt_journal_recover(g_file, true, note, sizeof(note), &err);
		assert_true(rc == 1);   /* rolled back (no-op) or set aside */
		assert_int_equal(which(), 0);
		assert_false(exists(g_jrnl));
		(void)unlink(aside);
	}
	free(good);
}

/* A recovery while another process is in the middle of an in-place
 * commit (stopped after its journal, holding the lock) waits and then
 * refuses (-EBUSY), touching neither the journal nor the file; the
 * committer then finishes normally. */
static void test_live_committer(void **state)
{
	struct pt_error err;
	char note[1024];
	pid_t pid;
	int st;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set("patch", 2, -2);
		_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, WUNTRACED), pid);
	assert_true(WIFSTOPPED(st));
	assert_true(exists(g_jrnl));
	pt_journal_lock_wait_ms = 200;
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), -EBUSY);
	assert_non_null(strstr(err.msg, "another process"));
	assert_true(exists(g_jrnl));
	assert_int_equal(which(), -1);  /* half-patched, as the committer left it */
	assert_int_equal(kill(pid, SIGCONT), 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(which(), 1);
	assert_false(exists(g_jrnl));
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 0);
	pt_journal_lock_wait_ms = 30000;
}

/* An interrupted commit, then the file is written again in place (same
 * inode, same size: torch.save to the same path): recovery must not put
 * the old bytes into the newer file. */
static void test_rewritten_after_crash(void **state)
{
	struct pt_error err;
	char note[1024];
	uint8_t *other = malloc(FSIZE);
	uint8_t *got;
	size_t n;
	pid_t pid;
	int st;

	(void)state;
	assert_non_null(other);
	memset(other, 0x3C, FSIZE);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set("patch", 2, -1);
		_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(exists(g_jrnl));
	write_file(g_file, other, FSIZE);       /* O_TRUNC: same inode */
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "written by another program"));
	assert_null(strchr(note, '\n'));
	got = read_file(g_file, &n);
	assert_int_equal(n, FSIZE);
	assert_memory_equal(got, other, FSIZE);
	assert_false(exists(g_jrnl));
	assert_true(exists(g_aside));
	free(got);
	free(other);
}

static void *resume_later(void *arg)
{
	usleep(300000);
	kill(*(pid_t *)arg, SIGCONT);
	return NULL;
}

/* Two in-place commits of one file: the second waits for the first's lock
 * and then finds the file changed (-ESTALE) instead of patching it with
 * CRCs and bytes planned against the old one. */
static void test_second_committer(void **state)
{
	struct pt_replace_expect ex;
	struct pt_error err;
	struct stat st;
	pthread_t t;
	pid_t pid;
	int ws;

	(void)state;
	assert_int_equal(stat(g_file, &st), 0);
	memset(&ex, 0, sizeof(ex));
	ex.size = st.st_size;
	ex.mtime = st.st_mtim;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set("patch", 1, -2);
		_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &ws, WUNTRACED), pid);
	assert_true(WIFSTOPPED(ws));
	assert_int_equal(pthread_create(&t, NULL, resume_later, &pid), 0);
	pt_error_clear(&err);
	assert_int_equal(pt_patch_inplace(g_file, g_p, 1, &ex, &err), -ESTALE);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	assert_int_equal(which(), 1);
	assert_false(exists(g_jrnl));
}

static void test_foreign_journal(void **state)
{
	struct pt_error err;
	char note[1024];
	pid_t pid;
	int st;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set("patch", 2, -1);
		_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	/* someone replaced the checkpoint by another file meanwhile */
	assert_int_equal(unlink(g_file), 0);
	write_file(g_file, g_new, FSIZE - 1);
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "another file"));
	assert_false(exists(g_jrnl));
	assert_true(exists(g_aside));
	{
		size_t n;
		uint8_t *b = read_file(g_file, &n);

		assert_int_equal(n, FSIZE - 1);
		assert_memory_equal(b, g_new, FSIZE - 1);
		free(b);
	}
}

static void test_symlink_and_clone(void **state)
{
	struct pt_error err;
	char link[200];
	int rc;

	(void)state;
	snprintf(link, sizeof(link), "%s/link", g_dir);
	assert_int_equal(symlink("model.safetensors", link), 0);
	pt_error_clear(&err);
	rc = pt_patch_clone(link, g_p, 3, NULL, &err);
	if (rc == -EOPNOTSUPP || rc == -EXDEV || rc == -EINVAL || rc == -ENOTTY) {
		print_message("clone unsupported in /tmp (%s): in-place only\n",
			      strerror(-rc));
		assert_int_equal(pt_patch_inplace(link, g_p, 3, NULL, &err), 0);
	} else {
		assert_int_equal(rc, 0);
	}
	assert_int_equal(which(), 1);
	{
		struct stat st;

		assert_int_equal(lstat(link, &st), 0);
		assert_true(S_ISLNK(st.st_mode));
	}
	assert_false(exists(g_jrnl));
}

/* ---- untrusted, damaged and read-only recovery ---- */

/* Kill an in-place commit of g_p at @step's @nth call (a child). */
static void crash_child(const char *step, unsigned nth)
{
	struct pt_error err;
	pid_t pid;
	int st;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set(step, nth, -1);
		_exit(pt_patch_inplace(g_file, g_p, 3, NULL, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_true(exists(g_jrnl));
}

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
	uint32_t c = 0xFFFFFFFFu;
	size_t i;
	int k;

	for (i = 0; i < n; i++) {
		c ^= p[i];
		for (k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
	}
	return ~c;
}

static void put32(uint8_t *p, uint32_t v)
{
	int i;

	for (i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Give the journal image @j (@n bytes) valid checksums again, as a forger
 * would: the header's (over "PTFSJRNL") and the body's (journal.h). */
static void reseal(uint8_t *j, size_t n)
{
	uint8_t h[80];

	memcpy(h, j, 80);
	memcpy(h, "PTFSJRNL", 8);
	put32(j + 72, crc32_of(h, 72));
	put32(j + n - 12, crc32_of(j + 80, n - 80 - 12));
}

/* The half-patched file a kill at the 2nd patch write leaves (the first
 * range new, the rest old). */
static bool is_half(void)
{
	size_t n;
	uint8_t *b = read_file(g_file, &n);
	bool r = n == FSIZE && memcmp(b + 10, g_new + 10, 100) == 0 &&
		 memcmp(b + 300000, g_old + 300000, 1000) == 0;

	free(b);
	return r;
}

/* A valid journal of an interrupted commit, but not owned by the
 * checkpoint's owner or root (a forgery planted by another user), or
 * writable by group or others, or a symlink, or hard-linked: set aside,
 * never applied.  Owned right, the same journal is applied. */
static void test_untrusted_journal(void **state)
{
	static const char *const why[] = {
		"owned by uid 65534", "writable by group or others",
		"not a regular file", "hard links",
	};
	struct pt_error err;
	char note[1024];
	char elsewhere[200];
	int i;

	(void)state;
	snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", g_dir);
	for (i = geteuid() == 0 ? 0 : 1; i < 4; i++) {
		write_file(g_file, g_old, FSIZE);
		crash_child("patch", 2);
		assert_true(is_half());
		if (i == 0)
			assert_int_equal(chown(g_jrnl, 65534, 65534), 0);
		else if (i == 1)
			assert_int_equal(chmod(g_jrnl, 0620), 0);
		else if (i == 2) {
			assert_int_equal(rename(g_jrnl, elsewhere), 0);
			assert_int_equal(symlink(elsewhere, g_jrnl), 0);
		} else
			assert_int_equal(link(g_jrnl, elsewhere), 0);
		pt_error_clear(&err);
		if (i == 0) {
			/* read-only: not kept waiting by whoever holds the
			 * checkpoint's lock (any reader may) */
			int lk = open(g_file, O_RDONLY);

			assert_true(lk >= 0);
			assert_int_equal(flock(lk, LOCK_EX), 0);
			assert_int_equal(pt_journal_recover(g_file, false, note, sizeof(note), &err), 1);
			assert_non_null(strstr(note, "ignored"));
			close(lk);
		}
		assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
		print_message("%s\n", note);
		assert_non_null(strstr(note, "untrusted journal"));
		assert_non_null(strstr(note, why[i]));
		assert_null(strchr(note, '\n'));
		assert_true(is_half());         /* not applied */
		assert_false(exists(g_jrnl));
		assert_true(exists(g_aside));
		if (i == 2) {
			struct stat st;

			assert_int_equal(lstat(g_aside, &st), 0);
			assert_true(S_ISLNK(st.st_mode));
		}
		assert_int_equal(unlink(g_aside), 0);
		(void)unlink(elsewhere);
	}
	/* the same journal, trusted: rolled back */
	write_file(g_file, g_old, FSIZE);
	crash_child("patch", 2);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "rolled back"));
	assert_int_equal(which(), 0);
	assert_false(exists(g_jrnl));
}

/* As root: the journal of a root commit to another user's file is made
 * 0600 and given to that user, who may then recover it. */
static void test_journal_owner(void **state)
{
	struct pt_error err;
	struct stat st;
	char note[1024];

	(void)state;
	if (geteuid() != 0)
		PTFS_SKIP("PTFS_REQUIRE_ROOT", "needs root: not running as root");
	assert_int_equal(chown(g_file, 65534, 65534), 0);
	crash_child("patch", 2);
	assert_int_equal(lstat(g_jrnl, &st), 0);
	assert_int_equal(st.st_uid, 65534);
	assert_int_equal(st.st_mode & 07777, 0600);
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "rolled back"));
	assert_int_equal(which(), 0);
}

/* Read a journal image, change it with @edit, write it back resealed
 * (@seal) or not. */
static void edit_journal(void (*edit)(uint8_t *j, size_t *n), bool seal)
{
	size_t n;
	uint8_t *j = read_file(g_jrnl, &n);

	edit(j, &n);
	if (seal)
		reseal(j, n);
	write_file(g_jrnl, j, n);
	chmod(g_jrnl, 0600);
	free(j);
}

static void other_dev(uint8_t *j, size_t *n)
{
	uint64_t d = 0;
	int i;

	(void)n;
	for (i = 7; i >= 0; i--)
		d = d << 8 | j[56 + i];
	put64(j + 56, d + 1);
}

static void bad_count(uint8_t *j, size_t *n)
{
	(void)n;
	put64(j + 24, (uint64_t)1 << 40);
}

static void relabel_done(uint8_t *j, size_t *n)
{
	(void)n;
	memcpy(j, "PTFSDONE", 8);
}

static void flip_old(uint8_t *j, size_t *n)
{
	(void)n;
	j[80 + 3 * 16 + 50] ^= 0x10;    /* in the first range's old bytes */
}

static void flip_header(uint8_t *j, size_t *n)
{
	(void)n;
	j[66] ^= 0x01;                  /* a reserved byte: checksum fails */
}

static void cut_one(uint8_t *j, size_t *n)
{
	(void)j;
	*n -= 1;
}

static void cut_half(uint8_t *j, size_t *n)
{
	(void)j;
	*n = 80 + 3 * 16 + 100 + 4096;  /* old bytes in part, no CRCs */
}

/* A journal bound to another device (valid checksums): set aside. */
static void test_other_device(void **state)
{
	struct pt_error err;
	char note[1024];

	(void)state;
	crash_child("patch", 2);
	edit_journal(other_dev, true);
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "another file"));
	assert_non_null(strstr(note, "TORN"));
	assert_true(is_half());
	assert_true(exists(g_aside));
}

/* Bad size fields in a resealed header: never block the open, read-only
 * or not; reported, set aside only by a writable recovery. */
static void test_bad_size_field(void **state)
{
	struct pt_error err;
	char note[1024];

	(void)state;
	crash_child("patch", 1);
	edit_journal(bad_count, true);
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, false, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "bad size fields"));
	assert_true(exists(g_jrnl));
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "bad size fields"));
	assert_null(strstr(note, "never"));
	assert_false(exists(g_jrnl));
	assert_true(exists(g_aside));
	assert_int_equal(which(), 0);
}

/* A half-patched file whose journal was damaged after the fact: either
 * rolled back (relabelled "finished": still valid, and the file is not
 * all new) or reported TORN with the byte range that is new; never
 * silently left half-written, never "not touched". */
static void test_damaged_over_torn(void **state)
{
	static const struct {
		void (*edit)(uint8_t *, size_t *);
		bool seal;
		const char *say;
	} c[] = {
		{ relabel_done, false, "rolled back" },
		{ flip_old, false, "is TORN: bytes [10, 110)" },
		{ cut_one, false, "is TORN: bytes [10, 110)" },
		{ flip_header, false, "is TORN: bytes [10, 110)" },
		{ cut_half, false, "is TORN: bytes [10, 110) are not the journal's old" },
	};
	struct pt_error err;
	char note[1024];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		write_file(g_file, g_old, FSIZE);
		crash_child("patch", 2);
		edit_journal(c[i].edit, c[i].seal);
		pt_error_clear(&err);
		assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
		print_message("%s\n", note);
		assert_non_null(strstr(note, c[i].say));
		assert_null(strstr(note, "never"));
		assert_null(strstr(note, "untouched"));
		assert_false(exists(g_jrnl));
		if (i == 0) {
			assert_int_equal(which(), 0);
		} else {
			assert_true(is_half());
			assert_int_equal(unlink(g_aside), 0);
		}
	}
}

static void stat_eq(const struct stat *a, const struct stat *b)
{
	assert_int_equal(a->st_ino, b->st_ino);
	assert_int_equal(a->st_size, b->st_size);
	assert_int_equal(a->st_mtim.tv_sec, b->st_mtim.tv_sec);
	assert_int_equal(a->st_mtim.tv_nsec, b->st_mtim.tv_nsec);
	assert_int_equal(a->st_ctim.tv_sec, b->st_ctim.tv_sec);
	assert_int_equal(a->st_ctim.tv_nsec, b->st_ctim.tv_nsec);
}

/* recover=false (read-only opens): a valid journal to roll back fails
 * with -EUCLEAN and changes nothing (bytes, mtimes, names); so does
 * pt_ckpt_open() with the default options.  A finished commit's journal
 * over a wholly new file is only mentioned. */
static void test_read_only(void **state)
{
	struct pt_ckpt_opts o;
	struct pt_ckpt *ck = NULL;
	struct pt_error err;
	struct stat f0, j0, f1, j1;
	char note[1024];
	char tmp[200];
	size_t n0, n1;
	uint8_t *b0, *b1;

	(void)state;
	crash_child("patch", 2);
	snprintf(tmp, sizeof(tmp), "%s/.model.safetensors.ptfs-Dead00", g_dir);
	write_file(tmp, (const uint8_t *)"x", 1);
	assert_int_equal(stat(g_file, &f0), 0);
	assert_int_equal(stat(g_jrnl, &j0), 0);
	b0 = read_file(g_jrnl, &n0);
	usleep(20000);
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, false, note, sizeof(note), &err), -EUCLEAN);
	assert_non_null(strstr(err.msg, "needs recovery: run 'ptfs recover "));
	pt_ckpt_opts_default(&o);
	assert_false(o.recover);
	pt_error_clear(&err);
	assert_int_equal(pt_ckpt_open(&ck, g_file, &o, &err), -EUCLEAN);
	assert_null(ck);
	assert_non_null(strstr(err.msg, "needs recovery"));
	assert_int_equal(pt_ckpt_open(&ck, g_file, NULL, &err), -EUCLEAN);
	assert_int_equal(stat(g_file, &f1), 0);
	assert_int_equal(stat(g_jrnl, &j1), 0);
	stat_eq(&f0, &f1);
	stat_eq(&j0, &j1);
	b1 = read_file(g_jrnl, &n1);
	assert_int_equal(n0, n1);
	assert_memory_equal(b0, b1, n0);
	free(b0);
	free(b1);
	assert_true(is_half());
	assert_true(exists(tmp));
	assert_false(exists(g_aside));
	/* finished: the file is the new one, the journal only mentioned */
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	pt_fault_set("jremove", 1, EIO);
	assert_int_equal(pt_patch_inplace(g_file, g_p, 3, NULL, &err), 0);
	pt_fault_set(NULL, 0, 0);
	assert_int_equal(stat(g_jrnl, &j0), 0);
	assert_int_equal(pt_journal_recover(g_file, false, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "finished commit"));
	assert_non_null(strstr(note, "ignored"));
	assert_int_equal(stat(g_jrnl, &j1), 0);
	stat_eq(&j0, &j1);
	assert_int_equal(which(), 1);
	/* recover=true: the open rolls back; the file (not a checkpoint)
	 * then fails to load, and the error still says what was done */
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_false(exists(g_jrnl));
	write_file(g_file, g_old, FSIZE);
	crash_child("patch", 2);
	o.recover = true;
	pt_error_clear(&err);
	assert_true(pt_ckpt_open(&ck, g_file, &o, &err) < 0);
	assert_null(ck);
	assert_non_null(strstr(err.msg, "rolled back an interrupted commit"));
	assert_int_equal(which(), 0);
	assert_false(exists(g_jrnl));
}

/* Temporary files of a killed rewrite: removed at the next writable
 * recovery whatever their age unless a live writer holds their lock;
 * only mentioned by a read-only one. */
static void test_temporaries(void **state)
{
	struct pt_error err;
	char note[1024];
	char dead[200];
	char live[200];
	int fd;

	(void)state;
	snprintf(dead, sizeof(dead), "%s/.model.safetensors.ptfs-Dead00", g_dir);
	snprintf(live, sizeof(live), "%s/.model.safetensors.ptfs-Live00", g_dir);
	write_file(dead, (const uint8_t *)"half", 4);       /* brand new */
	write_file(live, (const uint8_t *)"busy", 4);
	fd = open(live, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, false, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "found 1 temporary file"));
	assert_true(exists(dead));
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_non_null(strstr(note, "removed 1 temporary file"));
	assert_false(exists(dead));
	assert_true(exists(live));
	close(fd);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_false(exists(live));
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 0);
}

/* 200 random damages of the journal of a half-patched file: recovery
 * never crashes, never writes the file (unless the damage left the
 * journal valid: then it rolls back), and says TORN or that it cannot
 * tell -- never that the file was not touched. */
static void test_fuzzed_torn_journal(void **state)
{
	struct pt_error err;
	char note[1024];
	uint8_t *good;
	size_t n;
	int i;
	uint64_t x = 0x9E3779B97F4A7C15ull;

	(void)state;
	crash_child("patch", 2);
	good = read_file(g_jrnl, &n);
	for (i = 0; i < 200; i++) {
		uint8_t *j = malloc(n);
		size_t len = n;

		assert_non_null(j);
		memcpy(j, good, n);
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (i % 3 == 0)
			j[x % n] ^= (uint8_t)(1u << (x >> 40) % 8);
		else if (i % 3 == 1)
			len = (size_t)(x % n);
		else
			memset(j + x % n, (int)(x >> 32), (size_t)((x >> 20) % 64) < n - x % n ?
			       (size_t)((x >> 20) % 64) : n - x % n);
		write_file(g_jrnl, j, len);
		chmod(g_jrnl, 0600);
		free(j);
		pt_error_clear(&err);
		assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
		if (strstr(note, "rolled back")) {
			/* the damage changed nothing (same bytes written) */
			assert_int_equal(which(), 0);
			crash_child("patch", 2);
			continue;
		}
		if (!strstr(note, "TORN") && !strstr(note, "cannot"))
			fail_msg("%d: %s", i, note);
		assert_null(strstr(note, "untouched"));
		assert_null(strstr(note, "never"));
		assert_true(is_half());
		assert_false(exists(g_jrnl));
		(void)unlink(g_aside);
	}
	free(good);
}

/* As root: a trusted journal another user cannot read (root's, 0600)
 * makes that user's read-only open refuse with the needs-recovery error,
 * and a writable one fail (-EACCES): never ignored as untrusted. */
static void test_unreadable_journal(void **state)
{
	pid_t pid;
	int st;

	(void)state;
	if (geteuid() != 0)
		PTFS_SKIP("PTFS_REQUIRE_ROOT", "needs root: not running as root");
	assert_int_equal(chmod(g_dir, 0755), 0);
	crash_child("patch", 2);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct pt_error err;
		char note[1024];
		int a, b;

		if (setgid(65534) != 0 || setuid(65534) != 0)
			_exit(2);
		pt_error_clear(&err);
		a = pt_journal_recover(g_file, false, note, sizeof(note), &err);
		if (a != -EUCLEAN || !strstr(err.msg, "needs recovery"))
			_exit(3);
		pt_error_clear(&err);
		b = pt_journal_recover(g_file, true, note, sizeof(note), &err);
		_exit(b == -EACCES ? 0 : 4);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(is_half());
	assert_true(exists(g_jrnl));
}

/* Files in g_dir whose name starts with '.' (temporary copies). */
static int temporaries(void)
{
	char cmd[128];
	FILE *f;
	int n = 0, c;

	snprintf(cmd, sizeof(cmd), "ls -A %s | grep -c '^\\.'", g_dir);
	f = popen(cmd, "r");
	assert_non_null(f);
	if (fscanf(f, "%d", &n) != 1)
		n = -1;
	while ((c = fgetc(f)) != EOF)
		;
	pclose(f);
	return n;
}

/* A commit of two files (pt_patch_apply_files): both new; a fault at any
 * step before the first rename leaves both old and no copy; the second
 * rename failing leaves the first new, and says so; a file changed
 * meanwhile refuses the commit; inplace is refused for two. */
static void test_several_files(void **state)
{
	static const struct {
		const char *step;
		unsigned nth;
	} f[] = {
		{ "create", 1 }, { "create", 2 }, { "copy", 2 }, { "patch", 1 },
		{ "fsync", 1 }, { "fsync", 2 }, { "close", 2 }, { "rename", 1 },
	};
	struct pt_patch_file pf[2];
	enum pt_commit_way used;
	struct pt_error err;
	char second[160];
	bool no_clone = true;
	struct stat st;
	size_t i, n;
	uint8_t *b;

	(void)state;
	snprintf(second, sizeof(second), "%s/weights.bin", g_dir);
	memset(pf, 0, sizeof(pf));
	pf[0].path = second;
	pf[1].path = g_file;
	for (i = 0; i < 2; i++) {
		pf[i].p = g_p;
		pf[i].n = 3;
	}
	for (i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		write_file(g_file, g_old, FSIZE);
		write_file(second, g_old, FSIZE);
		pt_fault_set(f[i].step, f[i].nth, EIO);
		pt_error_clear(&err);
		assert_int_equal(pt_patch_apply_files(pf, 2, PT_COMMIT_REWRITE,
						      &no_clone, &used, &err), -EIO);
		assert_int_equal(which(), 0);
		b = read_file(second, &n);
		assert_memory_equal(b, g_old, FSIZE);
		free(b);
		assert_int_equal(temporaries(), 0);
	}
	pt_fault_set("rename", 2, EIO);
	pt_error_clear(&err);
	assert_int_equal(pt_patch_apply_files(pf, 2, PT_COMMIT_REWRITE, &no_clone,
					      &used, &err), -EIO);
	assert_non_null(strstr(err.msg, "only"));
	assert_non_null(strstr(err.msg, "weights.bin replaced"));
	assert_int_equal(which(), 0);
	assert_int_equal(temporaries(), 0);
	/* another program wrote the model meanwhile */
	write_file(second, g_old, FSIZE);
	assert_int_equal(stat(g_file, &st), 0);
	pf[1].expect.size = st.st_size;
	pf[1].expect.mtime = st.st_mtim;
	pf[1].expect.mtime.tv_sec--;
	pt_fault_set(NULL, 0, 0);
	assert_int_equal(pt_patch_apply_files(pf, 2, PT_COMMIT_AUTO, &no_clone,
					      &used, &err), -ESTALE);
	assert_int_equal(which(), 0);
	pf[1].expect.mtime.tv_sec++;
	assert_int_equal(pt_patch_apply_files(pf, 2, PT_COMMIT_INPLACE, &no_clone,
					      &used, &err), -EOPNOTSUPP);
	assert_int_equal(which(), 0);
	assert_int_equal(pt_patch_apply_files(pf, 2, PT_COMMIT_AUTO, &no_clone,
					      &used, &err), 0);
	assert_int_equal(which(), 1);
	b = read_file(second, &n);
	assert_memory_equal(b, g_new, FSIZE);
	free(b);
	assert_int_equal(temporaries(), 0);
}

/* The documented window: killed between the two renames, the first file
 * is new and the second old, each whole; the next recovery removes the
 * second's copy. */
static void test_several_files_crash(void **state)
{
	struct pt_patch_file pf[2];
	enum pt_commit_way used;
	struct pt_error err;
	char second[160], note[1024];
	bool no_clone = true;
	size_t n;
	uint8_t *b;
	pid_t pid;
	int st;

	(void)state;
	snprintf(second, sizeof(second), "%s/weights.bin", g_dir);
	write_file(second, g_old, FSIZE);
	memset(pf, 0, sizeof(pf));
	pf[0].path = second;
	pf[1].path = g_file;
	pf[0].p = pf[1].p = g_p;
	pf[0].n = pf[1].n = 3;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pt_fault_set("rename", 2, -1);
		pt_error_clear(&err);
		_exit(pt_patch_apply_files(pf, 2, PT_COMMIT_REWRITE, &no_clone,
					   &used, &err) ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	b = read_file(second, &n);
	assert_memory_equal(b, g_new, FSIZE);
	free(b);
	assert_int_equal(which(), 0);
	assert_int_equal(temporaries(), 1);
	pt_error_clear(&err);
	assert_int_equal(pt_journal_recover(g_file, true, note, sizeof(note), &err), 1);
	assert_int_equal(temporaries(), 0);
	assert_int_equal(which(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_inplace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inplace_keeps_privs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_faults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_everywhere, setup, teardown),
		cmocka_unit_test_setup_teardown(test_incomplete_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fuzzed_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_committer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_committer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewritten_after_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_and_clone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_untrusted_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_journal_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_device, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_size_field, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged_over_torn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_temporaries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unreadable_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fuzzed_torn_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_several_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_several_files_crash, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
