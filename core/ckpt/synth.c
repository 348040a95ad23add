/* SPDX-License-Identifier: MIT */
/*
 * synth.c -- value nodes made outside any pickle: the one dict builder the
 * formats use for trees that no pickle describes (safetensors, sharded
 * indexes, DCP metadata, .pt2 and TorchScript model descriptions,
 * TorchScript constants), and tensor nodes.  Declared in ckpt/ckpt_i.h.
 */
#include "ckpt/ckpt_i.h"

#include <stdio.h>
#include <stdlib.h>

struct pt_value *pt__value_dict(struct pt_ckpt *ck, size_t n)
{
	struct pt_value *v, **kv;
	size_t i;

	if (n > (SIZE_MAX / sizeof(*v) - 1) / 2)
		return NULL;
	v = calloc(2 * n + 1, sizeof(*v));
	if (!v || !pt__own(ck, v))
		return NULL;
	kv = calloc(2 * n + 1, sizeof(*kv));
	if (!kv || !pt__own(ck, kv))
		return NULL;
	v[0].kind = PT_V_DICT;
	v[0].u.dict.kv.v = kv;
	v[0].u.dict.kv.n = 2 * n;
	v[0].u.dict.kv.cap = 2 * n;
	for (i = 0; i < 2 * n; i++) {
		kv[i] = &v[i + 1];
		v[i + 1].id = (uint32_t)(i + 1);
	}
	for (i = 0; i < n; i++) {
		struct pt_value *k = kv[2 * i];

		k->kind = PT_V_STR;
		k->aux16 = PT_C_SCALAR;
		k->u.s.p = (const uint8_t *)"";
		k->u.s.in_off = UINT64_MAX;
	}
	return v;
}

void pt__value_dict_set(struct pt_value *d, size_t i, const uint8_t *name,
			size_t len, struct pt_value *val)
{
	struct pt_value *k = d->u.dict.kv.v[2 * i];

	k->u.s.p = name;
	k->u.s.len = len;
	if (val)
		d->u.dict.kv.v[2 * i + 1] = val;
}

/* A node showing tensor @t: a persistent id without a pid. */
static void tensor_node(struct pt_value *v, struct pt_tensor *t)
{
	v->kind = PT_V_PERSID;
	v->u.pid = NULL;
	v->aux16 = PT_C_TENSOR;
	v->aux = t;
}

void pt__value_dict_set_tensor(struct pt_value *d, size_t i,
			       const uint8_t *name, size_t len,
			       struct pt_tensor *t)
{
	pt__value_dict_set(d, i, name, len, NULL);
	tensor_node(d->u.dict.kv.v[2 * i + 1], t);
}

struct pt_value *pt__tensor_value(struct pt_ckpt *ck, struct pt_tensor *t)
{
	struct pt_value *v = calloc(1, sizeof(*v));

	if (!v || !pt__own(ck, v))
		return NULL;
	tensor_node(v, t);
	return v;
}

struct pt_value *pt__numbered_dict(struct pt_ckpt *ck,
				   struct pt_value *const *vals, size_t n)
{
	struct pt_value *d;
	char *names;
	size_t i, at = 0;

	if (n > SIZE_MAX / 32)
		return NULL;
	d = pt__value_dict(ck, n);
	names = calloc(n + 1, 24);
	if (!d || !names || !pt__own(ck, names))
		return NULL;
	for (i = 0; i < n; i++) {
		int w = snprintf(names + at, 24, "c%zu", i);

		pt__value_dict_set(d, i, (const uint8_t *)names + at, (size_t)w,
				   vals[i]);
		at += (size_t)w + 1;
	}
	return d;
}
