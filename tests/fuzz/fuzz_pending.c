/* SPDX-License-Identifier: MIT */
/*
 * fuzz_pending.c -- libFuzzer target for the reader of a mount's pending
 * file (core/ckpt/pending.c): the tensor writes and structural edits a
 * failed commit kept, as `ptfs recover --force` applies them.
 *
 * The input is written as CK.ptfs-pending beside a fixed safetensors
 * checkpoint CK (tensors "a" and "b", float32[4], and "c", int64[2]) in
 * a private temporary directory; CK is opened editable and the file
 * applied with force (its recorded identity is the fuzzer's to choose, so
 * the records and edits are what is judged).  Invariants: the result is 0
 * with a note and the pending file gone, or a negative errno with one
 * line (no newline in it); a damaged file (-EBADMSG) changes nothing:
 * the checkpoint's bytes and the pending file stay as they were.  The
 * checkpoint is written again before every input.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "ckpt/ckpt.h"
#include "ckpt/pending.h"
#include "fuzz.h"
#include "fuzz_limits.h"

static char dir[64], ck[96], ppath[128];
static uint8_t ck_bytes[512];
static size_t ck_size;

static const char header[] =
	"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
	"\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]},"
	"\"c\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[32,48]}}";

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

/* Everything but the checkpoint and the pending file goes: what a failed
 * commit may leave (its temporary files) must not pile up. */
static void sweep(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[sizeof(dir) + 260];

	FUZZ_CHECK(d != NULL);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' && (!e->d_name[1] || strcmp(e->d_name, "..") == 0))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (strcmp(path, ck) != 0)
			unlink(path);
	}
	closedir(d);
}

static void cleanup(void)
{
	sweep();
	unlink(ck);
	rmdir(dir);
}

static void setup(void)
{
	size_t hl = sizeof(header) - 1, i;

	if (dir[0])
		return;
	snprintf(dir, sizeof(dir), "/tmp/ptfs-fuzz-pending-XXXXXX");
	FUZZ_CHECK(mkdtemp(dir) != NULL);
	snprintf(ck, sizeof(ck), "%s/ck.safetensors", dir);
	snprintf(ppath, sizeof(ppath), "%s.ptfs-pending", ck);
	for (i = 0; i < 8; i++)
		ck_bytes[i] = (uint8_t)(hl >> (8 * i));
	memcpy(ck_bytes + 8, header, hl);
	for (i = 0; i < 48; i++)
		ck_bytes[8 + hl + i] = (uint8_t)(i * 37 + 1);
	ck_size = 8 + hl + 48;
	atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_ckpt_opts opts;
	struct pt_ckpt *c = NULL;
	struct pt_error err = { 0 };
	char note[1024] = "";
	int rc;

	if (size > (1u << 20))
		return 0;
	setup();
	sweep();
	write_all(ck, ck_bytes, ck_size);
	write_all(ppath, data, size);
	fuzz_ckpt_opts(&opts);
	opts.editable = true;
	opts.recover = true;
	FUZZ_CHECK(pt_ckpt_open(&c, ck, &opts, &err) == 0);
	rc = pt_pending_apply(c, ppath, true, note, sizeof(note), &err);
	pt_ckpt_close(c);
	if (rc == 0) {
		FUZZ_CHECK(note[0] != '\0');
		FUZZ_CHECK(access(ppath, F_OK) != 0);
		return 0;
	}
	FUZZ_CHECK(rc < 0 && err.msg[0] != '\0' && !strchr(err.msg, '\n'));
	if (rc == -EBADMSG) {
		FUZZ_CHECK(same_bytes(ck, ck_bytes, ck_size));
		FUZZ_CHECK(same_bytes(ppath, data, size));
	}
	return 0;
}
