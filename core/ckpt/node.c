/* SPDX-License-Identifier: MIT */
/*
 * node.c -- what a node of the tree is and holds: its attributes (stat),
 * its contents (read, and the zero-copy extent of a tensor or a stored
 * record), a tensor's metadata (NAME.json, extended attributes, the
 * listing's description) and the storage a writable tensor file views.
 */
#include "ckpt/tree_i.h"

#include <errno.h>
#include <string.h>

void pt_node_attr(const struct pt_node *n, struct pt_nattr *a)
{
	a->type = (enum pt_ntype)n->type;
	a->size = node_pic(n) ? pt__pic_size(n) : n->size;
	a->id = n->id;
	a->tensor = node_tensor(n) && n->role == R_VALUE;
	{
		uint64_t lo;
		a->writable = pt_node_writable_storage(n, &lo) != NULL;
	}
}

const char *pt_node_name(const struct pt_node *n)
{
	return n->name;
}

struct pt_node *pt_node_parent(const struct pt_node *n)
{
	return n->parent;
}

int pt_node_send(struct pt_ckpt *ck, struct pt_node *node, uint64_t off,
		 size_t n, int (*send)(void *ctx, const void *p, size_t n),
		 void *ctx)
{
	bool gen = node->role == R_GEN;
	int rc;

	if (node->type == PT_NT_DIR || node_pic(node) || !node_data(node) ||
	    node->role == R_RECORD || node->role == R_JSON ||
	    node->role == R_VFILE)
		return -ENOENT;
	if (gen)        /* pt_tree_committed() may swap the text */
		pthread_mutex_lock(&ck->tree->glock);
	if (off >= node->size)
		n = 0;
	else if (n > node->size - off)
		n = (size_t)(node->size - off);
	rc = send(ctx, node_data(node) + (n ? off : 0), n);
	if (gen)
		pthread_mutex_unlock(&ck->tree->glock);
	return rc;
}

ssize_t pt_node_read(struct pt_ckpt *ck, struct pt_node *node, void *buf,
		     size_t n, uint64_t off, struct pt_error *err)
{
	if (node->type == PT_NT_DIR)
		return -EISDIR;
	if (node_pic(node))
		return pt__pic_read(node, buf, n, off, err);
	if (off >= node->size)
		return 0;
	if (n > node->size - off)
		n = (size_t)(node->size - off);
	if (node->role == R_VALUE && node_tensor(node))
		return pt__tensor_read(ck, node_tensor(node), buf, n, off, err);
	if (node->role == R_RECORD) {
		long long got = pt_zip_pread(ck->zip, node_entry(node), buf, n, off, err);
		return (ssize_t)got;
	}
	if (node->role == R_JSON) {
		struct pt_buf b;

		pt_buf_init(&b);
		pt__tensor_json(ck, node_tensor(node), &b);
		if (b.oom || b.len != node->size) {
			bool oom = b.oom;

			pt_buf_free(&b);
			return oom ? pt_fail(err, -ENOMEM, "out of memory") :
				     pt_fail(err, -EIO, "tensor metadata changed size");
		}
		memcpy(buf, b.p + off, n);
		pt_buf_free(&b);
		return (ssize_t)n;
	}
	if (node->role == R_VFILE) {
		int rc = node_vf(node)->read(node_vf(node)->ctx, buf, n, off, err);
		return rc ? rc : (ssize_t)n;
	}
	if (node->role == R_GEN) {
		/* tree.json may be made again meanwhile (pt_tree_committed) */
		pthread_mutex_lock(&ck->tree->glock);
		if (off >= node->size)
			n = 0;
		else if (n > node->size - off)
			n = (size_t)(node->size - off);
		memcpy(buf, node_data(node) + off, n);
		pthread_mutex_unlock(&ck->tree->glock);
		return (ssize_t)n;
	}
	memcpy(buf, node_data(node) + off, n);
	return (ssize_t)n;
}

/* Where a file's bytes lie, when they lie in one piece of one file: the
 * checkpoint's, or for a sharded checkpoint the shard that holds the
 * tensor (struct pt_storage.home). */
bool pt_node_extent(struct pt_ckpt *ck, const struct pt_node *node,
		    uint64_t off, uint64_t n, int *fd, uint64_t *file_off)
{
	const struct pt_tensor *t = node_tensor(node);

	if (off > node->size || n > node->size - off)
		return false;
	if (node->role == R_VALUE && t) {
		const struct pt_ckpt *home = t->st->home ? t->st->home : ck;

		if (!t->contiguous || t->st->kind != PT_ST_FILE)
			return false;
		/* as tensor_read.c: the storage is one region */
		pt_source_region(pt__tensor_source(home), t->st->file_off,
				 t->st->nbytes);
		if (!pt_source_extent(pt__tensor_source(home),
				      t->st->file_off + t->byte_lo + off, n, fd, file_off))
			return false;
		/* the caller reads them: counted as pt__tensor_read() counts */
		__atomic_add_fetch(&ck->tensor_reads, 1, __ATOMIC_RELAXED);
		return true;
	}
	if (node->role == R_RECORD && node_entry(node)->method == PT_ZIP_STORED) {
		const struct pt_zip_entry *e = node_entry(node);

		pt_source_region(ck->src, e->data_off, e->data_end - e->data_off);
		return pt_source_extent(ck->src, e->data_off + off, n, fd,
					file_off);
	}
	if (node->role == R_VFILE && node_vf(node)->extent)
		return node_vf(node)->extent(node_vf(node)->ctx, off, n, fd, file_off);
	return false;
}

bool pt_node_tensor_json(struct pt_ckpt *ck, const struct pt_node *node,
			 struct pt_buf *out)
{
	if (!node_tensor(node) || (node->role != R_JSON && node->role != R_VALUE))
		return false;
	pt__tensor_json(ck, node_tensor(node), out);
	return true;
}

int pt_node_xattrs(struct pt_ckpt *ck, struct pt_node *node, struct pt_buf *out)
{
	const struct pt_tensor *t = node_tensor(node);
	struct pt_buf v;
	int count = 0;

	(void)ck;
	if (!t || node->role != R_VALUE)
		return 0;
	pt_buf_init(&v);
#define XA(name)                                                    \
	do {                                                        \
		pt_buf_puts(out, "user.ptfs." name);                \
		pt_buf_putc(out, '\0');                             \
		pt_buf_add(out, v.p ? v.p : "", v.len);             \
		pt_buf_putc(out, '\0');                             \
		v.len = 0;                                          \
		count++;                                            \
	} while (0)
	pt_buf_puts(&v, t->dtype_name);
	XA("dtype");
	pt_json_ints(&v, t->shape, t->rank);
	XA("shape");
	pt_json_ints(&v, t->stride, t->rank);
	XA("stride");
	pt_buf_printf(&v, "%lld", (long long)(t->kind == PT_TK_NDARRAY ? 0 : t->offset));
	XA("storage_offset");
	pt_buf_printf(&v, "%llu", (unsigned long long)t->nbytes);
	XA("nbytes");
	pt_buf_puts(&v, t->byteorder == '>' ? "big" : "little");
	XA("byteorder");
	pt_buf_puts(&v, t->kind == PT_TK_PARAMETER ? "parameter" :
			t->kind == PT_TK_NDARRAY ? "ndarray" : "tensor");
	XA("kind");
	if (t->st->entry) {
		pt_buf_add(&v, t->st->entry->name, t->st->entry->name_len);
		XA("storage_record");
	}
	if (t->st->kind == PT_ST_FILE && t->contiguous) {
		pt_buf_printf(&v, "%llu", (unsigned long long)(t->st->file_off + t->byte_lo));
		XA("file_offset");
	}
#undef XA
	pt_buf_free(&v);
	return count;
}

void pt_node_describe(struct pt_ckpt *ck, struct pt_node *node,
		      struct pt_buf *out)
{
	const struct pt_tensor *t = node_tensor(node);

	(void)ck;
	if (!t || node->role != R_VALUE)
		return;
	pt_buf_puts(out, t->dtype_name);
	pt_buf_putc(out, ' ');
	pt_json_ints(out, t->shape, t->rank);
	if (!t->contiguous)
		pt_buf_puts(out, " (view)");
}

const struct pt_storage *pt_node_writable_storage(const struct pt_node *n, uint64_t *lo)
{
	const struct pt_tensor *t = node_tensor(n);

	if (!t || n->role != R_VALUE || !t->contiguous || !t->st->writable ||
	    (t->st->home && !t->st->home->data_name) ||
	    t->st->kind != PT_ST_FILE || t->kind == PT_TK_NDARRAY ||
	    t->dtype->packed)
		return NULL;
	*lo = t->byte_lo;
	return t->st;
}

const struct pt_storage *pt_node_viewed_storage(const struct pt_node *n)
{
	const struct pt_tensor *t = node_tensor(n);

	/* a shard's storage (st->home) belongs to another checkpoint; an
	 * ONNX model's external data is written by the model's commits */
	if (!t || n->role != R_VALUE || !t->st->writable ||
	    t->st->kind != PT_ST_FILE || (t->st->home && !t->st->home->data_name))
		return NULL;
	return t->st;
}
