/* SPDX-License-Identifier: MIT */
/*
 * pictures.c -- NAME.png beside tensors (-o previews): sized by the front
 * end from the tensor's shape on the first stat, drawn by its maker on the
 * first read, kept until close or until tensor bytes change
 * (pt_ckpt_pictures_reset()).
 */
#include "ckpt/tree_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cancel.h"

void pt_ckpt_set_picture_maker(struct pt_ckpt *ck, pt_picture_fn fn,
			       pt_picture_size_fn size_fn, void *ctx)
{
	ck->tree->pic_fn = fn;
	ck->tree->pic_size_fn = size_fn;
	ck->tree->pic_ctx = ctx;
}

/* The tensor file of picture @n (NAME.png): NAME, or NAME.tensor in the
 * suffix layout (LAYOUT.md "NAME.tensor with -o suffix"); or NULL. */
static struct pt_node *pic_tensor(const struct pt_node *n)
{
	struct pt_pic *g = node_pic(n);
	size_t len = strlen(n->name), keep;
	char name[4096];
	int rc = 0;

	if (len <= 4 || len - 4 + sizeof(PT_TENSOR_SFX) > sizeof(name))
		return NULL;
	keep = len - 4;
	memcpy(name, n->name, keep);
	name[keep] = '\0';
	if (g->ck->tree->suffix)
		memcpy(name + keep, PT_TENSOR_SFX, sizeof(PT_TENSOR_SFX));
	return pt_tree_lookup(g->ck, g->parent, name, &rc);
}

/* The size promised for the picture; called with g->mu held. */
static void pic_size_locked(const struct pt_node *n)
{
	struct pt_pic *g = node_pic(n);
	struct pt_tree *t = g->ck->tree;
	struct pt_node *tn;

	if (g->sized)
		return;
	tn = pic_tensor(n);
	if (!t->pic_size_fn || !tn || t->pic_size_fn(t->pic_ctx, tn, &g->size) != 0)
		g->size = 0;
	g->sized = true;
}

/* Make the picture if it is not made; called with g->mu held. */
static void pic_make_locked(const struct pt_node *n, struct pt_error *err)
{
	struct pt_pic *g = node_pic(n);
	struct pt_tree *t = g->ck->tree;
	struct pt_node *tn;

	if (g->done)
		return;
	if (pt_cancelled()) {
		g->rc = pt_fail(err, -EINTR, "interrupted");
		return;         /* not done: made on the next use */
	}
	pic_size_locked(n);
	tn = pic_tensor(n);
	if (!t->pic_fn || !tn)
		g->rc = pt_fail(err, -EIO, "%s: nothing draws it", n->name);
	else
		g->rc = t->pic_fn(t->pic_ctx, g->ck, tn, &g->data, &g->len, err);
	if (g->rc == 0 && g->len != g->size) {
		g->rc = pt_fail(err, -EIO, "%s: drawn in %zu bytes, %llu promised", n->name,
				g->len, (unsigned long long)g->size);
		free(g->data);
		g->data = NULL;
		g->len = 0;
	}
	/* an interrupted drawing is made again on the next use */
	g->done = g->rc != -EINTR;
}

/* From the tensor's shape, never by drawing; 0 when there is no picture
 * (a read then says why). */
uint64_t pt__pic_size(const struct pt_node *n)
{
	struct pt_pic *g = node_pic(n);
	uint64_t size;

	pthread_mutex_lock(&g->mu);
	pic_size_locked(n);
	size = g->size;
	pthread_mutex_unlock(&g->mu);
	return size;
}

ssize_t pt__pic_read(const struct pt_node *n, void *buf, size_t len,
		     uint64_t off, struct pt_error *err)
{
	struct pt_pic *g = node_pic(n);
	ssize_t got = pt_lock_or_cancel(&g->mu);

	if (got)
		return pt_fail(err, (int)got, "interrupted");
	pic_make_locked(n, err);
	if (g->rc) {
		got = pt_fail(err, g->rc, "%s: could not be drawn", n->name);
		if (!g->done)
			g->rc = 0;
	} else if (off >= g->len) {
		got = 0;
	} else {
		if (len > g->len - off)
			len = (size_t)(g->len - off);
		memcpy(buf, g->data + off, len);
		got = (ssize_t)len;
	}
	pthread_mutex_unlock(&g->mu);
	return got;
}

static bool is_pic(struct pt_ckpt *ck, struct pt_node *n, void *ctx)
{
	(void)ck;
	(void)ctx;
	return node_pic(n) != NULL;
}

void pt_ckpt_pictures_reset(struct pt_ckpt *ck,
			    void (*fn)(void *ctx, struct pt_node *n), void *ctx)
{
	struct pt_node **pics;
	size_t i, n = 0;

	/* collected under the tree lock (nodes are being made), then each
	 * picture's own lock is taken without it (lock order above) */
	pics = pt__tree_nodes_where(ck, is_pic, NULL, &n);
	for (i = 0; i < n; i++) {
		struct pt_pic *g = node_pic(pics[i]);
		bool made;

		pthread_mutex_lock(&g->mu);
		made = g->done;
		free(g->data);
		g->data = NULL;
		g->len = 0;
		g->rc = 0;
		g->done = false;
		g->sized = false;
		pthread_mutex_unlock(&g->mu);
		if (made && fn)
			fn(ctx, pics[i]);
	}
	free(pics);
}
