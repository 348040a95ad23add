/* SPDX-License-Identifier: MIT */
/*
 * remote_get.c -- a small client of core/remote for the tests: reads byte
 * ranges of a remote object through the library (cache, retries,
 * read-ahead) and writes them to stdout; one JSON line of statistics on
 * stderr.
 *
 *   remote_get [--cache DIR] [--timeout S] [--prefetch] URL [OFF LEN]...
 *   (no range: the whole object, in 128 KiB reads like FUSE's)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remote/remote.h"

static int emit(struct pt_remote *r, uint64_t off, uint64_t len, bool pf,
		struct pt_error *err)
{
	static char buf[128 << 10];
	uint64_t done = 0;

	if (pf)
		pt_remote_prefetch(r, off, len);
	while (done < len) {
		size_t n = len - done < sizeof(buf) ? (size_t)(len - done) :
						      sizeof(buf);
		int rc = pt_remote_read(r, buf, n, off + done, err);

		if (rc)
			return rc;
		if (fwrite(buf, 1, n, stdout) != n)
			return -EIO;
		done += n;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct pt_remote_opts o;
	struct pt_remote_stats st;
	struct pt_error err = { 0 };
	struct pt_remote *r;
	bool pf = false;
	int i = 1, rc;

	pt_remote_opts_default(&o);
	for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
		if (!strcmp(argv[i], "--cache") && i + 1 < argc)
			o.cache_dir = argv[++i];
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			o.timeout_s = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--cafile") && i + 1 < argc)
			o.cafile = argv[++i];
		else if (!strcmp(argv[i], "--prefetch"))
			pf = true;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: remote_get [--cache DIR] [--timeout S] [--prefetch] URL [OFF LEN]...\n");
		return 2;
	}
	rc = pt_remote_open(&r, argv[i], &o, &err);
	if (rc) {
		fprintf(stderr, "remote_get: %s\n", err.msg);
		return 1;
	}
	if (i + 1 == argc)
		rc = emit(r, 0, pt_remote_size(r), pf, &err);
	for (i++; !rc && i + 1 < argc; i += 2)
		rc = emit(r, strtoull(argv[i], NULL, 0),
			  strtoull(argv[i + 1], NULL, 0), pf, &err);
	fflush(stdout);
	pt_remote_stats(r, &st);
	fprintf(stderr,
		"{\"size\": %" PRIu64 ", \"requests\": %" PRIu64
		", \"bytes\": %" PRIu64 ", \"retries\": %" PRIu64
		", \"rc\": %d, \"error\": \"%s\"}\n",
		pt_remote_size(r), st.requests, st.bytes, st.retries, rc,
		rc ? err.msg : "");
	pt_remote_close(r);
	return rc ? 1 : 0;
}
