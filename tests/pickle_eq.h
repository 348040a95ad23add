/* SPDX-License-Identifier: MIT */
/*
 * pickle_eq.h -- are two decoded pickle graphs the same, sharing included?
 * For the tests of core/decode/pickle_emit.c (test_pickle_emit.c,
 * fuzz/fuzz_pkemit.c, tools/pkemit_roundtrip.c): a graph decoded, written
 * back and decoded again must equal the first.
 *
 * Both graphs are walked in parallel from their roots with an explicit
 * stack of node pairs.  Paired nodes have the same kind, the same flags
 * that change a meaning (PT_VF_PY2STR, PT_VF_INST, PT_VF_NEWOBJ_EX), the
 * same payload (bytes of strings and big ints, bits of floats, names of
 * globals, their Python 2 spellings where both have one) and pairwise
 * equal parts.  Nodes whose identity a pickle
 * carries (all but None, bools, numbers and the empty tuple, which the
 * decoder shares on its own) are mapped both ways: a node reached twice
 * in one graph must meet the same node of the other graph both times, so
 * sharing and cycles compare exactly and the walk ends.
 */
#ifndef PTFS_TESTS_PICKLE_EQ_H
#define PTFS_TESTS_PICKLE_EQ_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/pickle.h"

#define PKEQ_FLAGS (PT_VF_PY2STR | PT_VF_INST | PT_VF_NEWOBJ_EX)

/* An open-addressing map from nodes to nodes. */
struct pkeq_map {
	const struct pt_value **k, **v;
	size_t cap, n;
};

struct pkeq {
	struct pkeq_map ab, ba;
	const struct pt_value **st;     /* pairs: st[2i] of a, st[2i+1] of b */
	size_t sn, scap;
	char *why;
	size_t whylen;
};

static inline size_t pkeq_hash(const struct pt_value *p, size_t cap)
{
	return (size_t)(((uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull) >>
			17) & (cap - 1);
}

static inline const struct pt_value *pkeq_get(const struct pkeq_map *m,
					      const struct pt_value *k)
{
	size_t i;

	if (!m->cap)
		return NULL;
	for (i = pkeq_hash(k, m->cap); m->k[i]; i = (i + 1) & (m->cap - 1))
		if (m->k[i] == k)
			return m->v[i];
	return NULL;
}

static inline int pkeq_set(struct pkeq_map *m, const struct pt_value *k,
			   const struct pt_value *v)
{
	size_t i, j, cap;
	const struct pt_value **nk, **nv;

	if (2 * (m->n + 1) > m->cap) {
		cap = m->cap ? 2 * m->cap : 256;
		nk = calloc(cap, sizeof(*nk));
		nv = calloc(cap, sizeof(*nv));
		if (!nk || !nv) {
			free(nk);
			free(nv);
			return -ENOMEM;
		}
		for (i = 0; i < m->cap; i++) {
			if (!m->k[i])
				continue;
			for (j = pkeq_hash(m->k[i], cap); nk[j];
			     j = (j + 1) & (cap - 1))
				;
			nk[j] = m->k[i];
			nv[j] = m->v[i];
		}
		free(m->k);
		free(m->v);
		m->k = nk;
		m->v = nv;
		m->cap = cap;
	}
	for (i = pkeq_hash(k, m->cap); m->k[i]; i = (i + 1) & (m->cap - 1))
		;
	m->k[i] = k;
	m->v[i] = v;
	m->n++;
	return 0;
}

__attribute__((format(printf, 4, 5)))
static inline int pkeq_differ(struct pkeq *q, const struct pt_value *a,
			      const struct pt_value *b, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(q->why, q->whylen, "node %u (kind %d) vs node %u (kind %d): %s",
		 a ? (unsigned)a->id : 0u, a ? a->kind : -1,
		 b ? (unsigned)b->id : 0u, b ? b->kind : -1, what);
	return 1;
}

static inline int pkeq_push(struct pkeq *q, const struct pt_value *a,
			    const struct pt_value *b)
{
	if (q->sn + 2 > q->scap) {
		size_t cap = q->scap ? 2 * q->scap : 256;
		const struct pt_value **st = realloc(q->st, cap * sizeof(*st));

		if (!st)
			return -ENOMEM;
		q->st = st;
		q->scap = cap;
	}
	q->st[q->sn++] = a;
	q->st[q->sn++] = b;
	return 0;
}

static inline int pkeq_push_seq(struct pkeq *q, const struct pt_value *a,
				const struct pt_value *b,
				const struct pt_vseq *sa,
				const struct pt_vseq *sb)
{
	size_t i;

	if (sa->n != sb->n)
		return pkeq_differ(q, a, b, "%zu items vs %zu", sa->n, sb->n);
	for (i = 0; i < sa->n; i++)
		if (pkeq_push(q, sa->v[i], sb->v[i]))
			return -ENOMEM;
	return 0;
}

static inline bool pkeq_identity(const struct pt_value *v)
{
	return !(v->kind == PT_V_NONE || v->kind == PT_V_BOOL ||
		 v->kind == PT_V_INT || v->kind == PT_V_BIGINT ||
		 v->kind == PT_V_FLOAT ||
		 (v->kind == PT_V_TUPLE && v->u.seq.n == 0));
}

/* Two Python 2 spellings of a global: equal, or one is missing (a pickle
 * whose PROTO 3 came after the global: the name was translated, and is
 * written translated at protocol 3). */
static inline bool pkeq_py2_eq(const char *x, const char *y)
{
	size_t nx, ny;

	if (!x || !y)
		return true;
	nx = strlen(x) + 1;
	ny = strlen(y) + 1;
	/* a Python 2 spelling is "module\0name\0" */
	return nx == ny && !strcmp(x, y) && !strcmp(x + nx, y + ny);
}

/* The payload and the parts of a pair of the same kind. */
static inline int pkeq_node(struct pkeq *q, const struct pt_value *a,
			    const struct pt_value *b)
{
	int rc = 0;

	switch (a->kind) {
	case PT_V_BOOL:
		return a->u.b == b->u.b ? 0 : pkeq_differ(q, a, b, "bool");
	case PT_V_INT:
		return a->u.i == b->u.i ? 0 : pkeq_differ(q, a, b, "int");
	case PT_V_FLOAT:
		return !memcmp(&a->u.f, &b->u.f, sizeof(double)) ? 0 :
		       pkeq_differ(q, a, b, "float bits");
	case PT_V_BIGINT:
	case PT_V_STR:
	case PT_V_BYTES:
	case PT_V_BYTEARRAY:
		return a->u.s.len == b->u.s.len &&
		       (!a->u.s.len ||
			!memcmp(a->u.s.p, b->u.s.p, a->u.s.len)) ? 0 :
		       pkeq_differ(q, a, b, "bytes of %zu vs %zu", a->u.s.len,
				   b->u.s.len);
	case PT_V_GLOBAL:
		return !strcmp(a->u.global.module, b->u.global.module) &&
		       !strcmp(a->u.global.name, b->u.global.name) &&
		       pkeq_py2_eq(a->u.global.py2, b->u.global.py2) ? 0 :
		       pkeq_differ(q, a, b, "global %s.%s vs %s.%s",
				   a->u.global.module, a->u.global.name,
				   b->u.global.module, b->u.global.name);
	case PT_V_TUPLE:
	case PT_V_LIST:
	case PT_V_SET:
	case PT_V_FROZENSET:
		return pkeq_push_seq(q, a, b, &a->u.seq, &b->u.seq);
	case PT_V_DICT:
		return pkeq_push_seq(q, a, b, &a->u.dict.kv, &b->u.dict.kv);
	case PT_V_CALL:
	case PT_V_OBJ:
		if (pkeq_push(q, a->u.call.callable, b->u.call.callable) ||
		    pkeq_push(q, a->u.call.args, b->u.call.args) ||
		    pkeq_push(q, pt_call_kwargs(a), pt_call_kwargs(b)) ||
		    pkeq_push(q, pt_call_state(a), pt_call_state(b)))
			return -ENOMEM;
		rc = pkeq_push_seq(q, a, b, pt_call_items(a), pt_call_items(b));
		return rc ? rc : pkeq_push_seq(q, a, b, pt_call_kv(a),
					       pt_call_kv(b));
	case PT_V_PERSID:
		return pkeq_push(q, a->u.pid, b->u.pid) ? -ENOMEM : 0;
	default:
		return 0;
	}
}

/*
 * Compare the graphs at @a and @b: 0 when equal, 1 when not (a line in
 * @why), -ENOMEM.
 */
static inline int pickle_eq(const struct pt_value *a, const struct pt_value *b,
			    char *why, size_t whylen)
{
	struct pkeq q = { .why = why, .whylen = whylen };
	int rc = pkeq_push(&q, a, b) ? -ENOMEM : 0;

	why[0] = '\0';
	while (!rc && q.sn) {
		b = q.st[--q.sn];
		a = q.st[--q.sn];
		if (!a || !b) {
			if (a != b)
				rc = pkeq_differ(&q, a, b, "one is missing");
			continue;
		}
		if (a->kind != b->kind ||
		    (a->flags & PKEQ_FLAGS) != (b->flags & PKEQ_FLAGS)) {
			rc = pkeq_differ(&q, a, b, "kind or flags (%#x vs %#x)",
					 a->flags, b->flags);
			break;
		}
		if (pkeq_identity(a)) {
			const struct pt_value *ma = pkeq_get(&q.ab, a);
			const struct pt_value *mb = pkeq_get(&q.ba, b);

			if (ma || mb) {
				if (ma != b || mb != a)
					rc = pkeq_differ(&q, a, b,
							 "shared differently");
				continue;
			}
			if (pkeq_set(&q.ab, a, b) || pkeq_set(&q.ba, b, a)) {
				rc = -ENOMEM;
				break;
			}
		}
		rc = pkeq_node(&q, a, b);
	}
	free(q.ab.k);
	free(q.ab.v);
	free(q.ba.k);
	free(q.ba.v);
	free(q.st);
	return rc;
}

#endif /* PTFS_TESTS_PICKLE_EQ_H */
