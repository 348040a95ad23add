/* SPDX-License-Identifier: MIT */
/*
 * collect.c -- the flat list an exporter writes: every tensor file of the
 * tree with its dotted key, and every scalar value with its JSON text,
 * depth first in listing order (the order of the checkpoint's pickle).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "export/export.h"

/* Append name @s of the tree with LAYOUT.md's escapes undone ("%2F" ->
 * "/", "%25" -> "%", "%2E" -> ".", "%" alone -> ""); NUL stays "%00". */
static void decode_name(struct pt_buf *b, const char *s)
{
	if (strcmp(s, "%") == 0)
		return;
	while (*s) {
		if (s[0] == '%' && s[1] == '2' && (s[2] == 'F' || s[2] == '5' ||
						   s[2] == 'E')) {
			pt_buf_putc(b, s[2] == 'F' ? '/' : s[2] == '5' ? '%' : '.');
			s += 3;
			continue;
		}
		pt_buf_putc(b, *s++);
	}
}

static int add_item(struct pt_xlist *xl, struct pt_node *n, const char *key,
		    const char *path)
{
	struct pt_xitem *it;

	if (xl->n == xl->cap) {
		size_t nc = xl->cap ? xl->cap * 2 : 64;
		it = realloc(xl->v, nc * sizeof(*it));
		if (!it)
			return -ENOMEM;
		xl->v = it;
		xl->cap = nc;
	}
	it = &xl->v[xl->n];
	it->key = strdup(key);
	it->path = strdup(path);
	it->node = n;
	if (!it->key || !it->path) {
		free(it->key);
		free(it->path);
		return -ENOMEM;
	}
	pt_node_tinfo(n, &it->ti);
	xl->n++;
	return 0;
}

static int add_meta(struct pt_xlist *xl, struct pt_node *n, const char *key)
{
	struct pt_xmeta *m;
	struct pt_buf j;

	if (xl->nm == xl->capm) {
		size_t nc = xl->capm ? xl->capm * 2 : 16;
		m = realloc(xl->m, nc * sizeof(*m));
		if (!m)
			return -ENOMEM;
		xl->m = m;
		xl->capm = nc;
	}
	pt_buf_init(&j);
	pt_node_scalar_json(n, &j);
	m = &xl->m[xl->nm];
	m->key = strdup(key);
	m->json = pt_buf_take(&j, NULL);
	if (!m->key || !m->json) {
		free(m->key);
		free(m->json);
		return -ENOMEM;
	}
	xl->nm++;
	return 0;
}

struct frame {
	struct pt_node *dir;
	size_t next;
	size_t klen, plen;      /* lengths of key and path at this level */
};

/* One entry @c of the walk: a tensor, a value, a directory to enter
 * (1), or something noted and left out. */
static int visit(struct pt_xlist *xl, struct pt_node *c, struct pt_buf *key,
		 struct pt_buf *path, struct pt_buf *notes)
{
	switch (pt_node_kind(c)) {
	case PT_NK_TENSOR:
		return add_item(xl, c, key->p, path->p);
	case PT_NK_SCALAR:
		return add_meta(xl, c, key->p);
	case PT_NK_DIR:
		return 1;
	case PT_NK_BYTES:
		pt_buf_printf(notes, "%s: bytes value left out (no tensor or JSON form)\n",
			      path->p);
		return 0;
	case PT_NK_LINK:
		pt_buf_printf(notes, "%s: repeats a container around it: left out\n",
			      path->p);
		return 0;
	default:
		return 0;
	}
}

int pt_export_collect(struct pt_ckpt *ck, struct pt_xlist *xl,
		      struct pt_buf *notes, struct pt_error *err)
{
	struct frame *st = NULL, *q;
	size_t n = 0, cap = 0;
	struct pt_buf key, path;
	uint64_t visits = 0;
	int rc = 0;

	memset(xl, 0, sizeof(*xl));
	pt_buf_init(&key);
	pt_buf_init(&path);
	st = malloc(16 * sizeof(*st));
	if (!st)
		return pt_fail(err, -ENOMEM, "out of memory");
	cap = 16;
	st[n++] = (struct frame){ pt_tree_root(ck), 0, 0, 0 };
	while (n > 0 && rc >= 0) {
		struct frame *f = &st[n - 1];
		struct pt_node *c;
		size_t cnt = 0;
		int trc = pt_tree_count(ck, f->dir, &cnt);

		if (trc) {
			/* a directory over max_dir_entries: no export that
			 * silently leaves tensors out (the first message
			 * recorded is the one kept) */
			rc = pt_fail(err, trc, "a directory of the tree cannot be listed (%s): not exported",
				     strerror(-trc));
			break;
		}
		if (f->next >= cnt) {
			n--;
			continue;
		}
		if (++visits > PT_EXPORT_MAX_ENTRIES) {
			rc = -EFBIG;
			break;
		}
		c = pt_tree_child(ck, f->dir, f->next++, &trc);
		if (!c) {
			rc = trc ? trc : -ENOMEM;
			break;
		}
		if (pt_node_kind(c) == PT_NK_OTHER)
			continue;
		key.len = f->klen;
		path.len = f->plen;
		if (key.len)
			pt_buf_putc(&key, '.');
		if (path.len)
			pt_buf_putc(&path, '/');
		decode_name(&key, pt_node_name(c));
		pt_buf_puts(&path, pt_node_name(c));
		pt_buf_putc(&key, '\0');
		key.len--;
		if (key.oom || path.oom) {
			rc = -ENOMEM;
			break;
		}
		rc = visit(xl, c, &key, &path, notes);
		if (rc != 1)
			continue;
		rc = 0;
		if (n == cap) {
			q = realloc(st, cap * 2 * sizeof(*st));
			if (!q) {
				rc = -ENOMEM;
				break;
			}
			st = q;
			cap *= 2;
		}
		st[n++] = (struct frame){ c, 0, key.len, path.len };
	}
	free(st);
	pt_buf_free(&key);
	pt_buf_free(&path);
	if (rc == -EFBIG) {
		pt_export_list_free(xl);
		return pt_fail(err, rc, "over %u entries in the tree (references that multiply?): not exported",
			       PT_EXPORT_MAX_ENTRIES);
	}
	if (rc < 0) {
		pt_export_list_free(xl);
		return pt_fail(err, rc, "listing the tree: %s", strerror(-rc));
	}
	return 0;
}

void pt_export_list_free(struct pt_xlist *xl)
{
	size_t i;

	for (i = 0; i < xl->n; i++) {
		free(xl->v[i].key);
		free(xl->v[i].path);
	}
	for (i = 0; i < xl->nm; i++) {
		free(xl->m[i].key);
		free(xl->m[i].json);
	}
	free(xl->v);
	free(xl->m);
	memset(xl, 0, sizeof(*xl));
}
