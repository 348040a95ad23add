/* SPDX-License-Identifier: MIT */
/*
 * vfiles.c -- the export forms as generated files of the mount:
 * /.ptfs/export/model.safetensors (the same bytes `ptfs export --to
 * safetensors --skip-unsupported` writes) and /.ptfs/export/npy/PATH.npy
 * with PATH.json for every tensor (what `ptfs export --to npy` writes).
 * Sizes are exact before any read; a read is served from the header in
 * memory and the tensors' bytes through pt_node_read(), and ranges that
 * lie in one contiguous tensor are offered as extents (zero copy).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "export/export.h"

struct st_item {
	struct pt_node *node;
	struct pt_tinfo ti;
	uint64_t start;                 /* offset in the generated file */
};

struct st_vf {
	struct pt_ckpt *ck;
	uint8_t *head;                  /* 8-byte length + header */
	size_t hlen;
	struct st_item *it;
	size_t n;
};

struct npy_vf {
	struct pt_ckpt *ck;
	struct pt_node *node;
	struct pt_tinfo ti;
	struct pt_npy np;
	uint8_t *head;
	size_t hlen;
};

/* PATH.json of an .npy: the sidecar's text, which states where the
 * tensor lies in the checkpoint, so a commit that moves records has it
 * made again (text_remake) while reads go on. */
struct text_vf {
	pthread_mutex_t mu;             /* guards p and len */
	char *p;
	size_t len;
	struct pt_ckpt *ck;
	struct pt_node *node;
	struct pt_npy np;
};

/* Bytes [@rel, @rel + @n) of @node in elements of @unit bytes,
 * byte-swapped per @swap (complex: per half). */
static int read_elems(struct pt_ckpt *ck, struct pt_node *node,
		      const struct pt_tinfo *ti, uint8_t *dst, size_t n,
		      uint64_t rel, bool swap, struct pt_error *err)
{
	unsigned es = ti->itemsize, unit = es;
	uint64_t a = rel - rel % es, b = rel + n;
	uint8_t *tmp;
	int rc;

	if (!swap)
		return pt_view_read(ck, node, ti, dst, n, rel, err);
	if (strncmp(ti->dtype, "complex", 7) == 0)
		unit /= 2;
	b = b + (es - b % es) % es;
	tmp = malloc((size_t)(b - a));
	if (!tmp)
		return -ENOMEM;
	rc = pt_view_read(ck, node, ti, tmp, (size_t)(b - a), a, err);
	if (!rc) {
		pt_swap_elems(tmp, (size_t)(b - a) / unit, unit);
		memcpy(dst, tmp + (rel - a), n);
	}
	free(tmp);
	return rc;
}

/* The last item starting at or before @off. */
static size_t st_find(const struct st_vf *v, uint64_t off)
{
	size_t lo = 0, hi = v->n;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (v->it[mid].start <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static int st_read(void *ctx, void *buf, size_t n, uint64_t off,
		   struct pt_error *err)
{
	const struct st_vf *v = ctx;
	uint8_t *p = buf;
	int rc;

	if (off < v->hlen) {
		size_t k = v->hlen - off < n ? (size_t)(v->hlen - off) : n;
		memcpy(p, v->head + off, k);
		p += k;
		n -= k;
		off += k;
	}
	while (n > 0) {
		const struct st_item *it = &v->it[st_find(v, off)];
		uint64_t rel = off - it->start, left = it->ti.nbytes - rel;
		size_t k = left < n ? (size_t)left : n;

		if (rel >= it->ti.nbytes)
			return pt_fail(err, -EIO, "generated safetensors: offset %llu outside its tensors",
				       (unsigned long long)off);
		rc = read_elems(v->ck, it->node, &it->ti, p, k, rel,
				it->ti.byteorder == '>', err);
		if (rc)
			return rc;
		p += k;
		n -= k;
		off += k;
	}
	return 0;
}

static bool st_extent(void *ctx, uint64_t off, uint64_t n, int *fd,
		      uint64_t *file_off)
{
	const struct st_vf *v = ctx;
	const struct st_item *it;

	if (off < v->hlen || v->n == 0)
		return false;
	it = &v->it[st_find(v, off)];
	if (it->ti.byteorder == '>' || off - it->start + n > it->ti.nbytes)
		return false;
	return pt_node_extent(v->ck, it->node, off - it->start, n, fd, file_off);
}

static void st_free(void *ctx)
{
	struct st_vf *v = ctx;

	free(v->head);
	free(v->it);
	free(v);
}

static int npy_read(void *ctx, void *buf, size_t n, uint64_t off,
		    struct pt_error *err)
{
	const struct npy_vf *v = ctx;
	const unsigned os = v->np.out_size, is = v->np.in_size;
	uint8_t *p = buf, *in, *out;
	uint64_t rel, e0, e1;
	int rc = 0;

	if (off < v->hlen) {
		size_t k = v->hlen - off < n ? (size_t)(v->hlen - off) : n;
		memcpy(p, v->head + off, k);
		p += k;
		n -= k;
		off += k;
	}
	if (n == 0)
		return 0;
	rel = off - v->hlen;
	if (!v->np.conv)
		return read_elems(v->ck, v->node, &v->ti, p, n, rel, false, err);
	/* converted: whole elements around the range, in rounds */
	while (n > 0 && !rc) {
		e0 = rel / os;
		e1 = (rel + n + os - 1) / os;
		if (e1 - e0 > 65536)
			e1 = e0 + 65536;
		in = malloc((size_t)(e1 - e0) * is);
		out = malloc((size_t)(e1 - e0) * os);
		if (!in || !out) {
			rc = -ENOMEM;
		} else {
			rc = pt_view_read(v->ck, v->node, &v->ti, in,
					  (size_t)(e1 - e0) * is, e0 * is, err);
			if (!rc) {
				size_t skip = (size_t)(rel - e0 * os);
				size_t k = (size_t)((e1 - e0) * os) - skip;

				if (k > n)
					k = n;
				pt_npy_convert(&v->np, in, out, (size_t)(e1 - e0));
				memcpy(p, out + skip, k);
				p += k;
				n -= k;
				rel += k;
			}
		}
		free(in);
		free(out);
	}
	return rc;
}

static bool npy_extent(void *ctx, uint64_t off, uint64_t n, int *fd,
		       uint64_t *file_off)
{
	const struct npy_vf *v = ctx;

	if (v->np.conv || off < v->hlen)
		return false;
	return pt_node_extent(v->ck, v->node, off - v->hlen, n, fd, file_off);
}

static void npy_free(void *ctx)
{
	struct npy_vf *v = ctx;

	free(v->head);
	free(v);
}

static int text_read(void *ctx, void *buf, size_t n, uint64_t off,
		     struct pt_error *err)
{
	struct text_vf *v = ctx;
	size_t k;

	(void)err;
	pthread_mutex_lock(&v->mu);
	/* a read sized before a remake may ask for more than there is */
	k = off < v->len ? (size_t)(v->len - off) : 0;
	k = k < n ? k : n;
	memcpy(buf, v->p + off, k);
	memset((char *)buf + k, 0, n - k);
	pthread_mutex_unlock(&v->mu);
	return 0;
}

static char *text_make(struct text_vf *v, size_t *len)
{
	struct pt_buf b;

	pt_buf_init(&b);
	pt__npy_json(v->ck, v->node, &v->np, &b);
	if (b.oom) {
		pt_buf_free(&b);
		return NULL;
	}
	return pt_buf_take(&b, len);
}

static uint64_t text_remake(void *ctx)
{
	struct text_vf *v = ctx;
	size_t len;
	char *p = text_make(v, &len);

	pthread_mutex_lock(&v->mu);
	if (p) {                        /* out of memory: the old text */
		free(v->p);
		v->p = p;
		v->len = len;
	}
	len = v->len;
	pthread_mutex_unlock(&v->mu);
	return len;
}

static void text_free(void *ctx)
{
	struct text_vf *v = ctx;

	pthread_mutex_destroy(&v->mu);
	free(v->p);
	free(v);
}

static int add_safetensors(struct pt_ckpt *ck, struct pt_vdir *d,
			   const struct pt_xlist *xl, struct pt_error *err)
{
	struct pt_export_opts o = { .skip_unsupported = true };
	struct pt_vfile vf = { 0 };
	struct pt_buf notes, h;
	struct st_vf *v = NULL;
	size_t *idx = NULL, n = 0, i;
	uint64_t at;
	int rc;

	pt_buf_init(&notes);
	pt_buf_init(&h);
	rc = pt__st_plan(xl, &o, &idx, &n, &notes, err);
	pt_buf_free(&notes);
	if (rc) {                       /* colliding keys: no such file */
		pt_error_clear(err);
		return rc == -ENOMEM ? rc : 0;
	}
	pt_buf_add(&h, "\0\0\0\0\0\0\0\0", 8);
	pt__st_header(xl, idx, n, &h);
	v = calloc(1, sizeof(*v));
	if (h.oom || !v || !(v->it = calloc(n ? n : 1, sizeof(*v->it)))) {
		rc = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < 8; i++)
		h.p[i] = (char)((uint64_t)(h.len - 8) >> (8 * i));
	v->ck = ck;
	v->n = n;
	v->hlen = h.len;
	v->head = (uint8_t *)pt_buf_take(&h, NULL);
	for (i = 0, at = v->hlen; i < n; i++) {
		v->it[i].node = xl->v[idx[i]].node;
		v->it[i].ti = xl->v[idx[i]].ti;
		v->it[i].start = at;
		at += v->it[i].ti.nbytes;
	}
	free(idx);
	vf = (struct pt_vfile){ at, st_read, st_extent, st_free, v, NULL };
	rc = pt_vdir_add(d, "model.safetensors", &vf);
	if (rc)
		st_free(v);
	return rc;
fail:
	pt_buf_free(&h);
	if (v)
		free(v->it);
	free(v);
	free(idx);
	return rc;
}

static int add_npy_one(struct pt_ckpt *ck, struct pt_vdir *d,
		       const struct pt_xitem *it, struct pt_buf *name)
{
	struct pt_error e2;
	struct pt_vfile vf;
	struct npy_vf *v;
	struct text_vf *t;
	struct pt_buf b;
	size_t base;
	int rc;

	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	pt_error_clear(&e2);
	if (!pt_npy_plan(&it->ti, &v->np, &e2)) {
		free(v);
		return 0;               /* no .npy form */
	}
	v->ck = ck;
	v->node = it->node;
	v->ti = it->ti;
	pt_buf_init(&b);
	pt_npy_header(&it->ti, &v->np, &b);
	v->hlen = b.len;
	v->head = (uint8_t *)pt_buf_take(&b, NULL);
	if (!v->head) {
		free(v);
		return -ENOMEM;
	}
	name->len = 0;
	pt_buf_printf(name, "npy/%s", it->path);
	base = name->len;
	pt_buf_puts(name, ".npy");
	vf = (struct pt_vfile){ v->hlen + v->np.data_bytes, npy_read, npy_extent,
				npy_free, v, NULL };
	rc = name->oom ? -ENOMEM : pt_vdir_add(d, name->p, &vf);
	if (rc) {
		npy_free(v);
		return rc == -EEXIST ? 0 : rc;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->mu, NULL);
	t->ck = ck;
	t->node = it->node;
	t->np = v->np;
	t->p = text_make(t, &t->len);
	vf = (struct pt_vfile){ t->len, text_read, NULL, text_free, t,
				text_remake };
	name->len = base;
	pt_buf_puts(name, ".json");
	rc = !t->p || name->oom ? -ENOMEM : pt_vdir_add(d, name->p, &vf);
	if (rc)
		text_free(t);
	return rc == -EEXIST ? 0 : rc;
}

static int fill_export(void *ctx, struct pt_ckpt *ck, struct pt_vdir *d,
		       struct pt_error *err)
{
	struct pt_xlist xl;
	struct pt_buf notes, name;
	size_t i;
	int rc;

	(void)ctx;
	pt_buf_init(&notes);
	rc = pt_export_collect(ck, &xl, &notes, err);
	pt_buf_free(&notes);
	if (rc)
		return rc;
	rc = add_safetensors(ck, d, &xl, err);
	pt_buf_init(&name);
	for (i = 0; i < xl.n && !rc; i++)
		rc = add_npy_one(ck, d, &xl.v[i], &name);
	pt_buf_free(&name);
	pt_export_list_free(&xl);
	return rc;
}

int pt_export_mount_files(struct pt_ckpt *ck)
{
	return pt_tree_set_vdir(ck, "export", fill_export, NULL);
}
