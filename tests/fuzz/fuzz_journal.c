/* SPDX-License-Identifier: MIT */
/*
 * fuzz_journal.c -- libFuzzer target for the in-place commit journal's
 * reader (core/container/journal.c), through its read-only entry point.
 *
 * The input is written as CK.ptfs-journal beside a fixed 8 KiB checkpoint
 * CK in a private temporary directory, and pt_journal_recover(CK, false)
 * judges it: what read-only commands and mounts do with a journal they
 * find.  Invariants: the result is 0, 1 with a note, or a negative errno
 * with one line; nothing on disk changes (the checkpoint's bytes, the
 * journal's bytes, no file added or removed: a read-only judgement writes
 * nothing, whatever the journal says).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "container/journal.h"
#include "container/replace.h"
#include "fuzz.h"

#define CK_SIZE 8192

static char dir[64], ck[96], jpath[128];
static uint8_t ck_bytes[CK_SIZE];

static void write_all(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(write(fd, p, n) == (ssize_t)n);
	FUZZ_CHECK(close(fd) == 0);
}

static bool same_bytes(const char *path, const void *p, size_t n)
{
	static uint8_t buf[1u << 20];
	int fd = open(path, O_RDONLY);
	ssize_t got;

	if (fd < 0)
		return false;
	got = read(fd, buf, sizeof(buf));
	close(fd);
	return got == (ssize_t)n && memcmp(buf, p, n) == 0;
}

static size_t entries(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0;

	FUZZ_CHECK(d != NULL);
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

/* The directory goes when the process ends (replay, or libFuzzer). */
static void cleanup(void)
{
	unlink(jpath);
	unlink(ck);
	rmdir(dir);
}

static void setup(void)
{
	size_t i;

	if (dir[0])
		return;
	snprintf(dir, sizeof(dir), "/tmp/ptfs-fuzz-journal-XXXXXX");
	FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(ck, sizeof(ck), "%s/ck.pt", dir);
	snprintf(jpath, sizeof(jpath), "%s/ck.pt.ptfs-journal", dir);
	for (i = 0; i < CK_SIZE; i++)
		ck_bytes[i] = (uint8_t)(i * 131 + 7);
	write_all(ck, ck_bytes, CK_SIZE);
	atexit(cleanup);
	pt_journal_lock_wait_ms = 0;    /* nobody else holds it */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_error err = { 0 };
	char note[512] = "";
	int rc;

	if (size > (1u << 20))
		return 0;
	setup();
	write_all(jpath, data, size);
	rc = pt_journal_recover(ck, false, note, sizeof(note), &err);
	FUZZ_CHECK(rc == 0 || rc == 1 || rc < 0);
	if (rc == 1)
		FUZZ_CHECK(note[0] != '\0');
	if (rc < 0)
		FUZZ_CHECK(err.msg[0] != '\0');
	/* read-only: nothing written, renamed or removed */
	FUZZ_CHECK(same_bytes(ck, ck_bytes, CK_SIZE));
	FUZZ_CHECK(same_bytes(jpath, data, size));
	FUZZ_CHECK(entries() == 2);
	return 0;
}
