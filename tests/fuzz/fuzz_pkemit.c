/* SPDX-License-Identifier: MIT */
/*
 * fuzz_pkemit.c -- libFuzzer target for the pickle writer
 * (core/decode/pickle_emit.c).
 *
 * Decodes the input with small limits; when it decodes, writes the graph
 * back (at its own protocol, at least 2), decodes that and checks that
 * the two graphs are the same, sharing included (tests/pickle_eq.h).  The
 * writer may refuse only past a cap (-EFBIG: a graph nested deeper than
 * its max_depth, a bigger output than max_pickle_bytes); its depth cap is
 * a quarter of the decoder's, so what it writes never fills the second
 * decoder's stack (a node pushes at most a MARK, a key, its value and a
 * callable).
 */
#include <string.h>

#include "fuzz.h"
#include "base/pt_limits.h"
#include "decode/pickle.h"
#include "decode/pickle_emit.h"
#include "../pickle_eq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_limits lim, elim;
	struct pt_pkemit_opts o = { .lim = &elim };
	struct pt_error err = { 0 };
	struct pt_pickle *a = NULL, *b = NULL;
	struct pt_buf out;
	size_t used = 0;
	char why[512];
	int rc, proto;

	pt_limits_default(&lim);
	lim.max_values = 100000;
	lim.max_memo = 100000;
	lim.max_memory = 64u << 20;
	lim.max_depth = 1000;
	if (pt_pickle_load(&a, data, size, &used, &lim, &err))
		return 0;
	elim = lim;
	elim.max_depth = lim.max_depth / 4;
	elim.max_pickle_bytes = 16u << 20;
	proto = pt_pickle_protocol(a);
	o.proto = proto < 2 ? 2 : (unsigned)proto;
	pt_buf_init(&out);
	rc = pt_pickle_emit(pt_pickle_root(a), &o, &out, &err);
	if (rc) {
		FUZZ_CHECK(rc == -EFBIG);
		FUZZ_CHECK(strncmp(err.msg, "pickle emit: ", 13) == 0);
	} else {
		/* the second decode gets the same node budget plus what a
		 * tuple or call written again inside itself adds */
		lim.max_values = 4 * lim.max_values;
		lim.max_memory = 4 * lim.max_memory;
		rc = pt_pickle_load(&b, (const uint8_t *)out.p, out.len, &used,
				    &lim, &err);
		if (rc)
			fprintf(stderr, "fuzz_pkemit: written pickle does not "
				"decode: %s\n", err.msg);
		FUZZ_CHECK(rc == 0);
		FUZZ_CHECK(used == out.len);
		rc = pickle_eq(pt_pickle_root(a), pt_pickle_root(b), why,
			       sizeof(why));
		if (rc)
			fprintf(stderr, "fuzz_pkemit: %s\n", why);
		FUZZ_CHECK(rc == 0);
	}
	pt_pickle_free(a);
	pt_pickle_free(b);
	pt_buf_free(&out);
	return 0;
}
