/* SPDX-License-Identifier: MIT */
/*
 * replay.c -- a plain main() that runs one fuzz target's
 * LLVMFuzzerTestOneInput() over files, so the seed corpus and every past
 * crasher run in CTest under gcc (and under ASan/UBSan in the sanitizer
 * build) without libFuzzer.
 *
 * Usage: replay [-q] [--shared=REL] PATH...  Each PATH is a file or a
 * directory, read recursively (hidden entries skipped).  --shared=REL names
 * $PTFS_SHARED/REL (the shared real fixtures, never copied into the
 * project).  A PATH that does not exist, or --shared without PTFS_SHARED,
 * is skipped with a note, so optional corpora can be named
 * unconditionally; with PTFS_REQUIRE_FIXTURES=1 (CI) a missing --shared
 * corpus is an error instead.  Exits 1 when no file was run at all, so a
 * misconfigured test cannot pass by doing nothing; a finding aborts.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* libFuzzer's default -max_len is far lower; the fuzz script uses 1 MiB,
 * the real fixtures go up to a few MiB.  Larger files are skipped. */
#define REPLAY_MAX (64u << 20)

static unsigned long n_run;
static bool quiet;

static int run_file(const char *path, off_t size)
{
	uint8_t *buf;
	FILE *f;
	size_t len = (size_t)size;

	if (size < 0 || (uint64_t)size > REPLAY_MAX) {
		fprintf(stderr, "replay: %s: skipped (%lld bytes)\n", path,
			(long long)size);
		return 0;
	}
	/* An exact-size heap copy, so ASan sees reads past the end. */
	buf = malloc(len ? len : 1);
	if (!buf) {
		fprintf(stderr, "replay: %s: out of memory\n", path);
		return -1;
	}
	f = fopen(path, "rb");
	if (!f || fread(buf, 1, len, f) != len) {
		fprintf(stderr, "replay: %s: %s\n", path,
			f ? "short read" : strerror(errno));
		if (f)
			fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	if (!quiet)
		fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
	(void)LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	n_run++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Run @path: a file, or every file under a directory in name order. */
static int run_path(const char *path, int depth)
{
	struct stat st;
	struct dirent *de;
	char **names = NULL;
	size_t n = 0;
	size_t cap = 0;
	size_t i;
	DIR *d;
	int rc = 0;

	if (stat(path, &st) != 0) {
		if (depth == 0 && errno == ENOENT) {
			fprintf(stderr, "replay: %s: absent, skipped\n", path);
			return 0;
		}
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return S_ISREG(st.st_mode) ? run_file(path, st.st_size) : 0;
	if (depth > 16)
		return 0;
	d = opendir(path);
	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			char **q;

			cap = cap ? cap * 2 : 64;
			q = realloc(names, cap * sizeof(*q));
			if (!q) {
				rc = -1;
				break;
			}
			names = q;
		}
		names[n] = malloc(strlen(path) + strlen(de->d_name) + 2);
		if (!names[n]) {
			rc = -1;
			break;
		}
		snprintf(names[n], strlen(path) + strlen(de->d_name) + 2,
			 "%s/%s", path, de->d_name);
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), cmp_str);
	for (i = 0; i < n; i++) {
		if (rc == 0)
			rc = run_path(names[i], depth + 1);
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	int i;
	int rc = 0;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-q") == 0) {
			quiet = true;
			continue;
		}
		if (strncmp(argv[i], "--shared=", 9) == 0) {
			const char *sh = getenv("PTFS_SHARED");
			const char *req = getenv("PTFS_REQUIRE_FIXTURES");
			bool required = req && strcmp(req, "1") == 0;
			struct stat st;
			char path[4096];

			snprintf(path, sizeof(path), "%s/%s", sh ? sh : "", argv[i] + 9);
			if (!sh || !*sh || stat(path, &st) != 0) {
				fprintf(stderr, "replay: skipped: no fixture corpus (%s)%s\n",
					sh && *sh ? path : "PTFS_SHARED unset",
					required ? ", required by PTFS_REQUIRE_FIXTURES=1" : "");
				if (required)
					rc = 1;
				continue;
			}
			if (run_path(path, 0) != 0)
				rc = 1;
			continue;
		}
		if (run_path(argv[i], 0) != 0)
			rc = 1;
	}
	fprintf(stderr, "replay: %lu inputs run\n", n_run);
	if (n_run == 0) {
		fprintf(stderr, "replay: no input files\n");
		return 1;
	}
	return rc;
}
