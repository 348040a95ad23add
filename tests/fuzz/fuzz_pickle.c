/* SPDX-License-Identifier: MIT */
/*
 * fuzz_pickle.c -- libFuzzer target for the safe pickle machine
 * (core/decode/pickle.c) and its disassembler.
 *
 * Loads the input with small limits (so that hostile counts hit a cap
 * quickly rather than exhausting memory), checks the result's contract and
 * walks the graph it built with an explicit stack, then disassembles the
 * same bytes with a capped output.
 */
#include <string.h>

#include "fuzz.h"
#include "decode/pickle.h"
#include "base/pt_limits.h"

#define FUZZ_WALK_MAX 20000

/* Visit up to FUZZ_WALK_MAX nodes reachable from @root: every pointer in
 * the graph must lead to a valid node of this pickle. */
static void walk(const struct pt_pickle *pk, struct pt_value *root)
{
	struct pt_value **st = malloc(FUZZ_WALK_MAX * sizeof(*st));
	uint32_t count = pt_pickle_count(pk);
	size_t n = 0;
	size_t seen = 0;

	if (!st)
		return;
	st[n++] = root;
	while (n > 0 && seen < FUZZ_WALK_MAX) {
		struct pt_value *v = st[--n];
		const struct pt_vseq *seqs[3] = { NULL, NULL, NULL };
		struct pt_value *kids[5] = { NULL, NULL, NULL, NULL, NULL };
		size_t j;
		size_t k;

		seen++;
		FUZZ_CHECK(v != NULL);
		FUZZ_CHECK(v->id < count);
		switch (v->kind) {
		case PT_V_STR:
		case PT_V_BYTES:
		case PT_V_BYTEARRAY:
		case PT_V_BIGINT:
			FUZZ_CHECK(v->u.s.len == 0 || v->u.s.p != NULL);
			break;
		case PT_V_TUPLE:
		case PT_V_LIST:
		case PT_V_SET:
		case PT_V_FROZENSET:
			seqs[0] = &v->u.seq;
			break;
		case PT_V_DICT:
			FUZZ_CHECK(v->u.dict.kv.n % 2 == 0);
			seqs[0] = &v->u.dict.kv;
			break;
		case PT_V_GLOBAL:
			FUZZ_CHECK(v->u.global.module && v->u.global.name);
			break;
		case PT_V_CALL:
		case PT_V_OBJ:
			FUZZ_CHECK(v->u.call.args != NULL);
			FUZZ_CHECK(v->u.call.args->kind == PT_V_TUPLE);
			FUZZ_CHECK(pt_call_kv(v)->n % 2 == 0);
			kids[0] = v->u.call.callable;
			kids[1] = v->u.call.args;
			kids[2] = pt_call_kwargs(v);
			kids[3] = pt_call_state(v);
			seqs[0] = pt_call_items(v);
			seqs[1] = pt_call_kv(v);
			break;
		case PT_V_PERSID:
			kids[0] = v->u.pid;
			break;
		default:
			FUZZ_CHECK(v->kind <= PT_V_PERSID);
			break;
		}
		for (j = 0; j < 3; j++)
			for (k = 0; seqs[j] && k < seqs[j]->n; k++)
				if (n < FUZZ_WALK_MAX)
					st[n++] = seqs[j]->v[k];
		for (j = 0; j < 5; j++)
			if (kids[j] && n < FUZZ_WALK_MAX)
				st[n++] = kids[j];
	}
	free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_limits lim;
	struct pt_error err = { 0 };
	struct pt_pickle *pk = NULL;
	struct pt_buf dis;
	size_t used = 0;
	int rc;

	pt_limits_default(&lim);
	lim.max_values = 100000;
	lim.max_memo = 100000;
	lim.max_memory = 64u << 20;
	lim.max_depth = 1000;
	rc = pt_pickle_load(&pk, data, size, &used, &lim, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0);
		FUZZ_CHECK(pk == NULL);
		FUZZ_CHECK(err.msg[0] != '\0');
	} else {
		FUZZ_CHECK(pk != NULL);
		FUZZ_CHECK(used >= 1 && used <= size);
		FUZZ_CHECK(data[used - 1] == '.');
		FUZZ_CHECK(pt_pickle_count(pk) <= lim.max_values);
		FUZZ_CHECK(pt_pickle_root(pk) != NULL);
		walk(pk, pt_pickle_root(pk));
		pt_pickle_free(pk);
	}

	pt_buf_init(&dis);
	pt_pickle_disasm(data, size, &dis, 1u << 20);
	FUZZ_CHECK(!dis.oom);
	/* The cap is on the text; allow the final lines past it. */
	FUZZ_CHECK(dis.len <= (1u << 20) + 4096);
	FUZZ_CHECK(dis.len == 0 || strlen(dis.p) == dis.len);
	pt_buf_free(&dis);
	return 0;
}
