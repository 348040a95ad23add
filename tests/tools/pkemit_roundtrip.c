/* SPDX-License-Identifier: MIT */
/*
 * pkemit_roundtrip.c -- decode a pickle, write it back with
 * pt_pickle_emit(), and check that the result decodes to the same graph
 * (tests/pickle_eq.h).  For tests/py/test_pickle_emit.py, which then loads
 * both with Python and torch.
 *
 * Usage: pkemit_roundtrip [--proto N] IN OUT
 * Writes OUT (the written pickle) and one line to stdout; exits 1 with a
 * line on stderr when IN does not decode, cannot be written, or decodes
 * differently.  The protocol written is IN's (at least 2) unless --proto.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/pickle.h"
#include "decode/pickle_emit.h"
#include "../pickle_eq.h"

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		p = malloc((size_t)n + 1);
		if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
			free(p);
			p = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return p;
}

static int roundtrip(const char *in, const char *out, unsigned proto)
{
	struct pt_pkemit_opts o = { .proto = proto };
	struct pt_pickle *a = NULL, *b = NULL;
	struct pt_error err = { 0 };
	struct pt_buf buf;
	char why[512];
	size_t len = 0, used = 0, used2;
	uint8_t *p = slurp(in, &len);
	FILE *f;
	int rc = 1;

	pt_buf_init(&buf);
	if (!p) {
		fprintf(stderr, "pkemit_roundtrip: %s: cannot read\n", in);
		return 1;
	}
	if (pt_pickle_load(&a, p, len, &used, NULL, &err))
		goto fail;
	if (!o.proto)
		o.proto = pt_pickle_protocol(a) < 2 ? 2 :
			  (unsigned)pt_pickle_protocol(a);
	if (pt_pickle_emit(pt_pickle_root(a), &o, &buf, &err) ||
	    pt_pickle_load(&b, (const uint8_t *)buf.p, buf.len, &used2, NULL,
			   &err))
		goto fail;
	if (pickle_eq(pt_pickle_root(a), pt_pickle_root(b), why, sizeof(why))) {
		fprintf(stderr, "pkemit_roundtrip: %s: graphs differ: %s\n", in,
			why);
		goto out;
	}
	f = fopen(out, "wb");
	if (!f || fwrite(buf.p, 1, buf.len, f) != buf.len || fclose(f)) {
		fprintf(stderr, "pkemit_roundtrip: %s: cannot write\n", out);
		goto out;
	}
	printf("pkemit_roundtrip: %s: %u nodes, %zu bytes in, %zu bytes out "
	       "(protocol %u)\n", in, (unsigned)pt_pickle_count(a), used,
	       buf.len, o.proto);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "pkemit_roundtrip: %s: %s\n", in, err.msg);
out:
	pt_pickle_free(a);
	pt_pickle_free(b);
	pt_buf_free(&buf);
	free(p);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned proto = 0;

	if (argc == 5 && !strcmp(argv[1], "--proto")) {
		proto = (unsigned)atoi(argv[2]);
		argv += 2;
		argc -= 2;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: pkemit_roundtrip [--proto N] IN OUT\n");
		return 2;
	}
	return roundtrip(argv[1], argv[2], proto);
}
