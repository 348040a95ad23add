/* SPDX-License-Identifier: MIT */
/*
 * accessors.c -- what an exporter (core/export/) reads of a node without
 * parsing its JSON: a tensor's layout and its storage's bytes, what kind
 * of value a node shows, its str key, its class, a scalar as JSON; and
 * whether the checkpoint's files are still those opened.
 */
#include "ckpt/tree_i.h"

#include <errno.h>
#include <string.h>

bool pt_node_tinfo(const struct pt_node *n, struct pt_tinfo *ti)
{
	const struct pt_tensor *t = node_tensor(n);

	if (!t || n->role != R_VALUE)
		return false;
	ti->dtype = t->dtype->name;
	ti->itemsize = t->dtype->size;
	ti->packed = t->dtype->packed;
	ti->rank = t->rank;
	ti->shape = t->shape;
	ti->stride = t->stride;
	ti->offset = t->offset;
	ti->numel = t->numel;
	ti->nbytes = t->nbytes;
	ti->byteorder = t->dtype->size == 1 ? '|' : t->byteorder;
	ti->contiguous = t->contiguous;
	ti->storage = t->st;
	ti->byte_lo = t->byte_lo;
	ti->byte_hi = t->byte_hi;
	ti->ndarray = t->kind == PT_TK_NDARRAY;
	ti->parameter = t->kind == PT_TK_PARAMETER;
	ti->requires_grad = t->requires_grad;
	return true;
}

int pt_node_storage_read(struct pt_ckpt *ck, const struct pt_node *node,
			 void *buf, size_t n, uint64_t off, struct pt_error *err)
{
	const struct pt_tensor *t = node_tensor(node);
	struct pt_tensor whole;
	ssize_t got;

	if (!t || node->role != R_VALUE)
		return -EINVAL;
	memset(&whole, 0, sizeof(whole));
	whole.dtype = t->dtype;
	whole.st = t->st;
	whole.nbytes = t->st->nbytes;
	whole.byte_hi = t->st->nbytes;
	whole.contiguous = true;
	got = pt__tensor_read(ck, &whole, buf, n, off, err);
	if (got < 0)
		return (int)got;
	return (size_t)got == n ? 0 : pt_fail(err, -EIO, "storage read past its end");
}

bool pt_node_str_key(const struct pt_node *n, const uint8_t **p, size_t *len)
{
	if (!n->key || n->key->kind != PT_V_STR)
		return false;
	*p = n->key->u.s.p;
	*len = n->key->u.s.len;
	return true;
}

bool pt_node_is_object(const struct pt_node *n)
{
	return n->role == R_VALUE && n->type == PT_NT_DIR && n->val &&
	       pt__vclass(n->val) == PT_C_OBJECT;
}

enum pt_nkind pt_node_kind(const struct pt_node *n)
{
	const struct pt_node *a;

	if (n->role == R_RECDIR) {
		/* a level of dotted keys (nested), unless under /.ptfs */
		for (a = n->parent; a; a = a->parent)
			if (a->role == R_META)
				return PT_NK_OTHER;
		return PT_NK_DIR;
	}
	if (n->role != R_VALUE)
		return PT_NK_OTHER;
	if (n->type == PT_NT_LINK)
		return PT_NK_LINK;
	if (n->type == PT_NT_DIR)
		return PT_NK_DIR;
	if (node_tensor(n))
		return PT_NK_TENSOR;
	return pt__vclass(n->val) == PT_C_BYTES ? PT_NK_BYTES : PT_NK_SCALAR;
}

bool pt_node_scalar_json(const struct pt_node *n, struct pt_buf *out)
{
	const struct pt_value *v = n->val;

	if (pt_node_kind(n) != PT_NK_SCALAR)
		return false;
	if (pt__vclass(v) == PT_C_TEXT) {
		size_t len = n->size;
		if (len && node_data(n)[len - 1] == '\n')
			len--;
		pt_buf_putc(out, '"');
		pt_json_str(out, node_data(n), len);
		pt_buf_putc(out, '"');
		return true;
	}
	switch (v->kind) {
	case PT_V_NONE:
		pt_buf_puts(out, "null");
		break;
	case PT_V_BOOL:
		pt_buf_puts(out, v->u.b ? "true" : "false");
		break;
	case PT_V_FLOAT:
		if (v->u.f != v->u.f)
			pt_buf_puts(out, "NaN");
		else if (v->u.f > 1.7976931348623157e308)
			pt_buf_puts(out, "Infinity");
		else if (v->u.f < -1.7976931348623157e308)
			pt_buf_puts(out, "-Infinity");
		else
			pt_buf_add(out, node_data(n), n->size - 1);
		break;
	case PT_V_STR:
		pt_buf_putc(out, '"');
		pt_json_str(out, v->u.s.p, v->u.s.len);
		pt_buf_putc(out, '"');
		break;
	default:        /* ints of any size: the decimal text */
		pt_buf_add(out, node_data(n), n->size ? n->size - 1 : 0);
		break;
	}
	return true;
}

bool pt_node_class_is(const struct pt_node *n, const char *module,
		      const char *name)
{
	const struct pt_value *v = n->val, *fn;

	if (n->role != R_VALUE || !v || pt__vclass(v) != PT_C_OBJECT ||
	    (v->kind != PT_V_CALL && v->kind != PT_V_OBJ))
		return false;
	fn = v->u.call.callable;
	return pt__is_global(fn, module, name);
}

static int file_unchanged(const struct pt_ckpt *ck, struct pt_error *err)
{
	int rc;

	if (!ck->src)
		return 0;
	rc = pt_source_check(ck->src, PT_CHECK_NAME, err);
	if (rc && rc != -ENOMEM) {
		pt_error_clear(err);
		return pt_fail(err, -ESTALE, "%s: changed on disk while it was read",
			       ck->path);
	}
	return rc;
}

int pt_ckpt_unchanged(const struct pt_ckpt *ck, struct pt_error *err)
{
	const struct pt_ckpt *last = ck;
	int rc = file_unchanged(ck, err);
	size_t i;

	for (i = 0; i < ck->n_st; i++) {
		const struct pt_storage *s = ck->st_list[i];

		if (rc)
			break;
		if (s->home && s->home != last) {
			last = s->home;
			rc = file_unchanged(last, err);
		}
	}
	return rc;
}
