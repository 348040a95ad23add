/* SPDX-License-Identifier: MIT */
/*
 * collect.c -- the flat list an exporter writes: every tensor file of the
 * tree with its dotted key, and every scalar value with its JSON text,
 * depth first in listing order (the order of the checkpoint's pickle).
 */
#include <errno.h>
#include <stdio.h>
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

/* A value by its JSON text @json (malloc()ed; taken, also on failure). */
static int add_meta_json(struct pt_xlist *xl, const char *key, char *json)
{
	struct pt_xmeta *m;

	if (xl->nm == xl->capm) {
		size_t nc = xl->capm ? xl->capm * 2 : 16;
		m = realloc(xl->m, nc * sizeof(*m));
		if (!m) {
			free(json);
			return -ENOMEM;
		}
		xl->m = m;
		xl->capm = nc;
	}
	m = &xl->m[xl->nm];
	m->key = strdup(key);
	m->json = json;
	if (!m->key || !m->json) {
		free(m->key);
		free(m->json);
		return -ENOMEM;
	}
	xl->nm++;
	return 0;
}

/* A scalar file's value by its JSON text. */
static int add_meta(struct pt_xlist *xl, struct pt_node *n, const char *key)
{
	struct pt_buf j;

	pt_buf_init(&j);
	pt_node_scalar_json(n, &j);
	return add_meta_json(xl, key, pt_buf_take(&j, NULL));
}

/* A pickled nn.Module shows its attributes: _modules/0/_parameters/weight.
 * Keys follow state_dict() instead ("0.weight"): those three attribute
 * levels of an object add nothing to the key. */
static bool module_level(const struct pt_node *dir, const char *name)
{
	return pt_node_is_object(dir) &&
	       (strcmp(name, "_modules") == 0 || strcmp(name, "_parameters") == 0 ||
		strcmp(name, "_buffers") == 0);
}

/*
 * torch._utils._rebuild_sparse_tensor(layout, data): data holds the
 * component tensors in this order, then the size (torch/_utils.py).  An
 * exporter writes the components under KEY.PART and the size as the value
 * KEY.size, and says so: no target form has sparse tensors.
 */
static const struct {
	const char *layout;             /* JSON text of the layout value */
	const char *part[3];
} sparse_layouts[] = {
	{ "\"torch.sparse_coo\"", { "indices", "values", NULL } },
	{ "\"torch.sparse_csr\"", { "crow_indices", "col_indices", "values" } },
	{ "\"torch.sparse_csc\"", { "ccol_indices", "row_indices", "values" } },
	{ "\"torch.sparse_bsr\"", { "crow_indices", "col_indices", "values" } },
	{ "\"torch.sparse_bsc\"", { "ccol_indices", "row_indices", "values" } },
};

/* The node at @path/@rel, or NULL. */
static struct pt_node *below(struct pt_ckpt *ck, struct pt_buf *path,
			     const char *rel)
{
	size_t len = path->len;
	struct pt_node *n;
	int rc = 0;

	pt_buf_printf(path, "/%s", rel);
	n = path->oom ? NULL : pt_tree_path(ck, path->p, &rc);
	path->len = len;
	path->p[len] = '\0';
	return n;
}

/* The JSON list of the scalars in directory @d ("[2,3]"), or NULL. */
static char *size_json(struct pt_ckpt *ck, struct pt_node *d)
{
	struct pt_buf j;
	size_t cnt = 0, i;

	if (!d || pt_node_kind(d) != PT_NK_DIR || pt_tree_count(ck, d, &cnt))
		return NULL;
	pt_buf_init(&j);
	pt_buf_putc(&j, '[');
	for (i = 0; i < cnt; i++) {
		int rc = 0;
		struct pt_node *c = pt_tree_child(ck, d, i, &rc);

		if (i)
			pt_buf_putc(&j, ',');
		if (!c || !pt_node_scalar_json(c, &j)) {
			pt_buf_free(&j);
			return NULL;
		}
	}
	pt_buf_putc(&j, ']');
	return pt_buf_take(&j, NULL);
}

/* A sparse tensor at directory @c: its components and size added, one
 * note; 1 when @c is no sparse tensor (walk into it), 0 or -errno. */
static int add_sparse(struct pt_ckpt *ck, struct pt_xlist *xl,
		      struct pt_node *c, struct pt_buf *key, struct pt_buf *path,
		      struct pt_buf *notes)
{
	struct pt_node *parts[3] = { NULL }, *lay;
	struct pt_buf j;
	size_t L, k, klen = key->len;
	char *size;
	int rc = 0;

	if (!pt_node_is_object(c) || !pt_node_class_is(c, "torch._utils", "_rebuild_sparse_tensor"))
		return 1;
	lay = below(ck, path, "args/0/args/0");
	pt_buf_init(&j);
	if (lay)
		pt_node_scalar_json(lay, &j);
	for (L = 0; L < sizeof(sparse_layouts) / sizeof(sparse_layouts[0]); L++)
		if (j.p && strcmp(j.p, sparse_layouts[L].layout) == 0)
			break;
	pt_buf_free(&j);
	if (L == sizeof(sparse_layouts) / sizeof(sparse_layouts[0]))
		return 1;       /* a layout we do not know: shown as it is */
	for (k = 0; k < 3 && sparse_layouts[L].part[k]; k++) {
		char rel[32];

		snprintf(rel, sizeof(rel), "args/1/%zu", k);
		parts[k] = below(ck, path, rel);
		if (!parts[k] || pt_node_kind(parts[k]) != PT_NK_TENSOR)
			return 1;
	}
	{
		char rel[32];

		snprintf(rel, sizeof(rel), "args/1/%zu", k);
		size = size_json(ck, below(ck, path, rel));
	}
	for (k = 0; !rc && k < 3 && parts[k]; k++) {
		pt_buf_printf(key, ".%s", sparse_layouts[L].part[k]);
		rc = key->oom ? -ENOMEM : add_item(xl, parts[k], key->p, path->p);
		key->len = klen;
		key->p[klen] = '\0';
	}
	if (!rc && size) {
		pt_buf_puts(key, ".size");
		rc = key->oom ? -ENOMEM : add_meta_json(xl, key->p, size);
		key->len = klen;
		key->p[klen] = '\0';
		size = NULL;
	}
	free(size);
	pt_buf_printf(notes, "%s: a sparse tensor (layout %.*s): written as its components",
		      path->p, (int)strlen(sparse_layouts[L].layout) - 2,
		      sparse_layouts[L].layout + 1);
	for (k = 0; k < 3 && sparse_layouts[L].part[k]; k++)
		pt_buf_printf(notes, "%s %s.%s", k ? "," : "", key->p,
			      sparse_layouts[L].part[k]);
	pt_buf_printf(notes, " and its size %s.size\n", key->p);
	return rc;
}

/* The walk's state: the key (dotted, names decoded) of every directory
 * on the way down, by depth. */
struct cwalk {
	struct pt_ckpt *ck;
	struct pt_xlist *xl;
	struct pt_buf *notes;
	struct pt_buf key, path;
	size_t *klen;           /* key length below the directory at depth d */
	size_t cap;
};

/* One entry @c of the walk: a tensor, a value, a directory to enter
 * (1), or something noted and left out. */
static int visit(struct pt_ckpt *ck, struct pt_xlist *xl, struct pt_node *c,
		 struct pt_buf *key, struct pt_buf *path, struct pt_buf *notes)
{
	switch (pt_node_kind(c)) {
	case PT_NK_TENSOR:
		return add_item(xl, c, key->p, path->p);
	case PT_NK_SCALAR:
		return add_meta(xl, c, key->p);
	case PT_NK_DIR:
		return add_sparse(ck, xl, c, key, path, notes);
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

/* Room for the key length of depth @depth. */
static int klen_room(struct cwalk *cw, size_t depth)
{
	size_t nc, *q;

	if (depth < cw->cap)
		return 0;
	nc = cw->cap ? cw->cap * 2 : 64;
	while (nc <= depth)
		nc *= 2;
	q = realloc(cw->klen, nc * sizeof(*q));
	if (!q)
		return -ENOMEM;
	cw->klen = q;
	cw->cap = nc;
	return 0;
}

static int collect_entry(void *ctx, const struct pt_walk *w)
{
	struct cwalk *cw = ctx;
	struct pt_node *c = w->node, *dir = pt_node_parent(c);
	struct pt_buf *key = &cw->key;
	int rc;

	if (pt_node_kind(c) == PT_NK_OTHER)
		return PT_WALK_SKIP;
	if (klen_room(cw, w->depth))
		return -ENOMEM;
	key->len = w->depth > 1 ? cw->klen[w->depth - 1] : 0;
	if (!module_level(dir, pt_node_name(c))) {
		const uint8_t *kp;
		size_t kn;

		if (key->len)
			pt_buf_putc(key, '.');
		if (pt_node_str_key(c, &kp, &kn))
			pt_buf_add(key, kp, kn);        /* cut or renamed */
		else
			decode_name(key, pt_node_name(c));
	}
	pt_buf_putc(key, '\0');
	key->len--;
	cw->path.len = 0;
	pt_buf_add(&cw->path, w->path, w->path_len);
	pt_buf_putc(&cw->path, '\0');
	cw->path.len--;
	if (key->oom || cw->path.oom)
		return -ENOMEM;
	rc = visit(cw->ck, cw->xl, c, key, &cw->path, cw->notes);
	if (rc == 1) {
		cw->klen[w->depth] = key->len;
		return 0;
	}
	return rc < 0 ? rc : PT_WALK_SKIP;
}

static const struct pt_xmeta *meta_base;

static int meta_by_key(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	int c = strcmp(meta_base[x].key, meta_base[y].key);

	return c ? c : x < y ? -1 : x > y;
}

/* Values whose keys coincide (the int key 1 and the str key "1" both
 * read "1"): the first in tree order stays, the others are noted. */
static int dedupe_meta(struct pt_xlist *xl, struct pt_buf *notes)
{
	size_t *idx, i, n = 0;
	bool *drop;

	if (xl->nm < 2)
		return 0;
	idx = malloc(xl->nm * sizeof(*idx));
	drop = calloc(xl->nm, sizeof(*drop));
	if (!idx || !drop) {
		free(idx);
		free(drop);
		return -ENOMEM;
	}
	for (i = 0; i < xl->nm; i++)
		idx[i] = i;
	meta_base = xl->m;
	qsort(idx, xl->nm, sizeof(*idx), meta_by_key);
	for (i = 1; i < xl->nm; i++)
		if (strcmp(xl->m[idx[i]].key, xl->m[idx[i - 1]].key) == 0)
			drop[idx[i]] = true;
	for (i = 0; i < xl->nm; i++) {
		if (drop[i]) {
			pt_buf_printf(notes, "%s: a second value under this key: left out\n",
				      xl->m[i].key);
			free(xl->m[i].key);
			free(xl->m[i].json);
			continue;
		}
		xl->m[n++] = xl->m[i];
	}
	xl->nm = n;
	free(idx);
	free(drop);
	return 0;
}

int pt_export_collect(struct pt_ckpt *ck, struct pt_xlist *xl,
		      struct pt_buf *notes, struct pt_error *err)
{
	struct cwalk cw = { ck, xl, notes, { 0 }, { 0 }, NULL, 0 };
	struct pt_error werr;
	int rc;

	memset(xl, 0, sizeof(*xl));
	pt_buf_init(&cw.key);
	pt_buf_init(&cw.path);
	pt_error_clear(&werr);
	/* the one bounded walk: a tree whose references multiply has no flat
	 * form, and its budget says so (-E2BIG); a directory that cannot be
	 * listed fails the export too (no export that silently leaves
	 * tensors out) */
	rc = pt_tree_walk(ck, pt_tree_root(ck), "", PT_WALK_WHOLE, collect_entry,
			  &cw, &werr);
	free(cw.klen);
	pt_buf_free(&cw.key);
	pt_buf_free(&cw.path);
	if (rc >= 0)
		rc = dedupe_meta(xl, notes);
	if (rc < 0) {
		pt_export_list_free(xl);
		if (werr.msg[0] && rc != -ENOMEM)
			return pt_fail(err, rc, "%s: not exported", werr.msg);
		return pt_fail(err, rc, "listing the tree: %s", strerror(-rc));
	}
	{
		uint64_t total = 0;
		size_t i;

		for (i = 0; i < xl->n; i++)
			total += xl->v[i].ti.nbytes;
		pt_ckpt_progress(ck, PT_PROGRESS_TOTAL, total);
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
