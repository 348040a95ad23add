/* SPDX-License-Identifier: MIT */
/*
 * diff_values.c -- the values of two checkpoints that are not tensors
 * (epoch, lr, a config string, a Namespace's fields, list items), compared
 * by dotted key as `ptfs diff` compares tensors: a value that changed,
 * appeared or went away is a difference like any other.
 *
 * The values are the ones an exporter collects (export/export.h: every
 * scalar file of the tree with its JSON text, through the one bounded
 * walk); two values are equal when their JSON texts are.
 */
#include "diff_values.h"

#include <stdlib.h>
#include <string.h>

#include "base/json.h"

static int by_key(const void *x, const void *y)
{
	const struct pt_xmeta *a = x, *b = y;

	return strcmp(a->key, b->key);
}

int ptfs_values_diff(struct pt_ckpt *a, struct pt_ckpt *b,
		     struct ptfs_vdiff *v, struct pt_error *err)
{
	struct pt_buf notes;
	int rc;

	memset(v, 0, sizeof(*v));
	pt_buf_init(&notes);    /* what an export would leave out: not ours */
	rc = pt_export_collect(a, &v->xa, &notes, err);
	if (!rc) {
		rc = pt_export_collect(b, &v->xb, &notes, err);
		v->have_b = rc == 0;
	}
	v->have_a = true;
	pt_buf_free(&notes);
	if (rc)
		return rc;
	if (v->xa.nm)       /* no values: no array */
		qsort(v->xa.m, v->xa.nm, sizeof(*v->xa.m), by_key);
	if (v->xb.nm)
		qsort(v->xb.m, v->xb.nm, sizeof(*v->xb.m), by_key);
	return 0;
}

/* One difference: "~ KEY  A -> B", "- KEY  A", "+ KEY  B", or its JSON. */
static void one(struct pt_buf *o, const struct pt_xmeta *x,
		const struct pt_xmeta *y, bool json, bool *first)
{
	const struct pt_xmeta *k = x ? x : y;
	const char *what = x && y ? "changed" : x ? "removed" : "added";

	if (json) {
		pt_buf_puts(o, *first ? "\n  {\"key\": \"" : ",\n  {\"key\": \"");
		pt_json_str(o, (const uint8_t *)k->key, strlen(k->key));
		pt_buf_printf(o, "\", \"status\": \"%s\"", what);
		if (x)
			pt_buf_printf(o, ", \"a\": %s", x->json);
		if (y)
			pt_buf_printf(o, ", \"b\": %s", y->json);
		pt_buf_putc(o, '}');
	} else {
		pt_buf_printf(o, "%c %s  %s%s%s\n", x && y ? '~' : x ? '-' : '+',
			      k->key, x ? x->json : "", x && y ? " -> " : "",
			      y ? y->json : "");
	}
	*first = false;
}

void ptfs_values_print(struct ptfs_vdiff *v, struct pt_buf *o, bool json)
{
	size_t i = 0, k = 0;
	bool first = true;

	v->same = v->changed = v->added = v->removed = 0;
	if (json)
		pt_buf_puts(o, "\"values\": [");
	while (i < v->xa.nm || k < v->xb.nm) {
		int c = i == v->xa.nm ? 1 : k == v->xb.nm ? -1 :
			strcmp(v->xa.m[i].key, v->xb.m[k].key);
		const struct pt_xmeta *x = c <= 0 ? &v->xa.m[i++] : NULL;
		const struct pt_xmeta *y = c >= 0 ? &v->xb.m[k++] : NULL;

		if (x && y && strcmp(x->json, y->json) == 0) {
			v->same++;
			continue;
		}
		if (x && y)
			v->changed++;
		else if (x)
			v->removed++;
		else
			v->added++;
		one(o, x, y, json, &first);
	}
	if (json)
		pt_buf_puts(o, first ? "]" : "\n]");
}

void ptfs_values_summary(const struct ptfs_vdiff *v, struct pt_buf *o, bool json)
{
	size_t n = v->same + v->changed + v->added + v->removed;

	if (json) {
		pt_buf_printf(o, "{\"same\": %zu, \"changed\": %zu, \"added\": %zu, \"removed\": %zu}",
			      v->same, v->changed, v->added, v->removed);
		return;
	}
	if (n == 0)
		return;         /* a plain state dict: the tensors' line alone */
	pt_buf_printf(o, "; %zu other value%s, %zu same", n, n == 1 ? "" : "s", v->same);
	if (v->changed)
		pt_buf_printf(o, ", %zu changed", v->changed);
	if (v->added)
		pt_buf_printf(o, ", %zu added", v->added);
	if (v->removed)
		pt_buf_printf(o, ", %zu removed", v->removed);
}

bool ptfs_values_differ(const struct ptfs_vdiff *v)
{
	return v->changed || v->added || v->removed;
}

void ptfs_values_free(struct ptfs_vdiff *v)
{
	if (v->have_a)
		pt_export_list_free(&v->xa);
	if (v->have_b)
		pt_export_list_free(&v->xb);
	memset(v, 0, sizeof(*v));
}
