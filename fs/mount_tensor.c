/* SPDX-License-Identifier: MIT */
/*
 * mount_tensor.c -- new tensors and new shapes or dtypes in a writable
 * mount (docs/LAYOUT.md, "New tensors, new shapes").
 *
 * A file made by create(2) is a new tensor: NAME alone is uint8, one
 * dimension, of whatever is written to it; NAME.json made first adds NAME
 * as an empty placeholder whose dtype and shape the JSON written then
 * declares.  NAME.json written for an existing tensor declares another
 * dtype or shape: of the same byte size, the stored bytes are taken as
 * they are (a reinterpretation, as the CLI's `set` never converts
 * values); of another size, the tensor is zeros until NAME is written
 * whole.  The bytes written to such a tensor are kept by the mount
 * (struct tfile) and become the tensor, one edit of the graph
 * (ckpt/edit.c), at the last writer's close when their size is dtype x
 * shape; a close at another size fails with EINVAL and drops them.  A
 * tensor declared and never written whole reaches no file: fsync fails
 * with EINVAL, the unmount drops it (removed, or its old value put back).
 */
#include "mount.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptfs.h"

static void log_line(struct ptfs *fs, const struct pt_node *n, const char *ext,
		     const char *msg)
{
	fuse_log(FUSE_LOG_ERR, "ptfs: %s: '%s%s': %s\n", fs->ckpath,
		 n ? pt_node_name(n) : "", ext, msg);
}

/* The length of NAME in "NAME.json", or 0 when @name is not one. */
static size_t spec_name(const char *name)
{
	size_t n = strlen(name);

	return n > 5 && strcmp(name + n - 5, ".json") == 0 ? n - 5 : 0;
}

static struct tfile *tf_find(struct ptfs *fs, struct pt_node *n)
{
	struct tfile *t = NULL;

	HASH_FIND_PTR(fs->tfiles, &n, t);
	return t;
}

/* @t's tensor is at entry @name of @dir now (a new node): key it so. */
static void tf_rekey(struct ptfs *fs, struct tfile *t, struct pt_node *dir,
		     const char *name)
{
	if (t->node && tf_find(fs, t->node) == t)
		HASH_DEL(fs->tfiles, t);
	t->node = pt_tree_lookup(fs->ck, dir, name, NULL);
	if (t->node)
		HASH_ADD_PTR(fs->tfiles, node, t);
}

/* Have the kernel forget NAME and NAME.json of @dir, soon (notify.h):
 * their nodes are new.  No lock of ours is needed. */
static void queue_forget(struct ptfs *fs, struct pt_node *dir, const char *name)
{
	char *j = NULL;

	if (__atomic_load_n(&fs->draining, __ATOMIC_ACQUIRE))
		return;
	ptfs_notify_inval_entry(fs->notify, ino_of(fs, dir), name);
	if (asprintf(&j, "%s.json", name) >= 0)
		ptfs_notify_inval_entry(fs->notify, ino_of(fs, dir), j);
	free(j);
}

/* Wait until the kernel forgot them, when other workers can answer the
 * lookups that may wait for (with no lock of ours held). */
static void wait_forgotten(struct ptfs *fs)
{
	if (fs->may_wait && !__atomic_load_n(&fs->draining, __ATOMIC_ACQUIRE))
		(void)ptfs_notify_wait(fs->notify, PTFS_DROP_WAIT_MS);
}

/* The kernel forgets NAME and NAME.json of @dir before this returns. */
static void forget_names(struct ptfs *fs, struct pt_node *dir, const char *name)
{
	queue_forget(fs, dir, name);
	wait_forgotten(fs);
}

/* Is @t's node still in the tree (not removed by rm since)? */
static bool tf_live(struct ptfs *fs, const struct tfile *t)
{
	struct pt_node *dir = t->node ? pt_node_parent(t->node) : NULL;

	return dir && pt_tree_lookup(fs->ck, dir, pt_node_name(t->node), NULL) == t->node;
}

/*
 * Make @bytes (malloc()ed, or NULL for none) the tensor @et at entry
 * @name of @dir: a new entry when @add, else in
 * place of the value there.  The bytes belong to the graph from then on
 * (freed at unmount); on failure they are the caller's still.  Under
 * elock.
 */
static int put_tensor(struct ptfs *fs, struct pt_node *dir, const char *name,
		      struct pt_edit_tensor *et, uint8_t *bytes, bool add,
		      struct pt_error *err)
{
	struct held *h = malloc(sizeof(*h));
	char *path;
	int rc = 0;

	path = h ? ptfs_edit_path(fs, dir, name, &rc) : NULL;
	if (!path) {
		free(h);
		return pt_fail(err, rc ? rc : -ENOMEM, "%s", strerror(rc ? -rc : ENOMEM));
	}
	et->bytes = bytes;
	rc = pt_edit_tensor(fs->ck, path, et, !add, err);
	free(path);
	if (rc) {
		free(h);
		return rc;
	}
	h->p = bytes;
	h->next = fs->held;
	fs->held = h;
	return 0;
}

/* The tensor file's bytes as the graph has them, into @t's buffer. */
static int tf_load(struct ptfs *fs, struct tfile *t)
{
	struct pt_error err;
	struct pt_nattr a;
	uint8_t *b;
	ssize_t got = 0;

	if (t->loaded)
		return 0;
	pt_node_attr(t->node, &a);
	b = malloc(a.size ? a.size : 1);
	if (!b)
		return -ENOMEM;
	pt_error_clear(&err);
	if (a.size)
		got = pt_node_read(fs->ck, t->node, b, a.size, 0, &err);
	if (got != (ssize_t)a.size) {
		free(b);
		return got < 0 ? (int)got : -EIO;
	}
	free(t->buf);
	t->buf = b;
	t->size = t->cap = a.size;
	t->loaded = true;
	return 0;
}

/* @t's buffer holds at least @end bytes, those past its size zeros. */
static int tf_grow(struct tfile *t, uint64_t end)
{
	uint64_t cap = t->any_size ? (end > 2 * t->cap ? end : 2 * t->cap) : t->nbytes;
	uint8_t *b;

	if (end > t->cap) {
		b = realloc(t->buf, cap ? cap : 1);
		if (!b)
			return -ENOMEM;
		t->buf = b;
		t->cap = cap;
	}
	if (end > t->size)
		memset(t->buf + t->size, 0, end - t->size);
	return 0;
}

static bool tf_size_right(const struct tfile *t)
{
	return t->any_size || t->size == t->nbytes;
}

/* What @t's writers wrote becomes the tensor.  Under elock. */
static int tf_apply(struct ptfs *fs, struct tfile *t, struct pt_error *err)
{
	struct pt_node *dir = pt_node_parent(t->node);
	const char *name = pt_node_name(t->node);
	struct pt_edit_tensor et = {
		.dtype = t->any_size ? "uint8" : t->dtype,
		.rank = t->any_size ? 1 : t->rank,
		.shape = t->shape,
		.len = t->size,
	};
	int rc;

	if (t->any_size)
		t->shape[0] = (int64_t)t->size;
	rc = put_tensor(fs, dir, name, &et, t->buf, false, err);
	if (rc)
		return rc;
	fs->edits++;
	t->buf = NULL;
	t->size = t->cap = 0;
	t->loaded = t->changed = false;
	t->whole = true;
	t->was = NULL;
	tf_rekey(fs, t, dir, name);
	return 0;
}

/* What @t's writers wrote is dropped: the tensor stays as it is. */
static void tf_drop_writes(struct tfile *t)
{
	free(t->buf);
	t->buf = NULL;
	t->size = t->cap = 0;
	t->loaded = t->changed = false;
}

int ptfs_tfile_create(struct ptfs *fs, struct pt_node *dir, const char *name,
		      struct pt_node **n)
{
	size_t k = spec_name(name);
	char *tname = strndup(name, k ? k : strlen(name));
	struct tfile *t = calloc(1, sizeof(*t));
	struct pt_edit_tensor et = { .dtype = "uint8", .rank = 1 };
	struct pt_error err;
	int rc = tname && t ? ptfs_edit_begin(fs) : -ENOMEM;

	*n = NULL;
	if (rc) {
		free(tname);
		free(t);
		return rc;
	}
	pt_error_clear(&err);
	et.shape = t->shape;
	rc = put_tensor(fs, dir, tname, &et, NULL, true, &err);
	if (rc == 0) {
		t->dtype = "uint8";
		t->rank = 1;
		t->any_size = k == 0;   /* else NAME.json says */
		tf_rekey(fs, t, dir, tname);
		*n = t->node ? pt_tree_lookup(fs->ck, dir, name, &rc) : NULL;
		if (t->node)
			t = NULL;       /* fs->tfiles's */
	}
	rc = ptfs_edit_end(fs, rc, "create", &err);
	free(tname);
	free(t);
	return *n ? 0 : rc ? rc : -EIO;
}

/* Does the mount hold any tensor?  Read without elock, which a commit
 * holds while it writes the file: a stat then waits only when there is
 * something to find (a tensor made meanwhile is made by a request the
 * kernel waits for, with its attributes asked again afterwards). */
static bool any_tfile(struct ptfs *fs)
{
	return __atomic_load_n(&fs->tfiles, __ATOMIC_ACQUIRE) != NULL;
}

struct tfile *ptfs_tfile_of(struct ptfs *fs, struct pt_node *n)
{
	struct tfile *t;

	if (!any_tfile(fs))
		return NULL;
	pthread_mutex_lock(&fs->elock);
	t = tf_find(fs, n);
	pthread_mutex_unlock(&fs->elock);
	return t;
}

bool ptfs_tfile_size(struct ptfs *fs, struct pt_node *n, uint64_t *size)
{
	struct tfile *t;

	if (!any_tfile(fs))
		return false;
	pthread_mutex_lock(&fs->elock);
	t = tf_find(fs, n);
	if (t && t->loaded)
		*size = t->size;
	pthread_mutex_unlock(&fs->elock);
	return t != NULL;
}

int ptfs_tfile_open(struct ptfs *fs, struct fh *h, bool trunc)
{
	struct tfile *t;

	pthread_mutex_lock(&fs->elock);
	t = tf_find(fs, h->node);
	if (t) {
		t->writers++;
		h->tf = t;
		if (trunc) {
			tf_drop_writes(t);
			t->loaded = t->changed = true;
		}
	}
	pthread_mutex_unlock(&fs->elock);
	return t ? 0 : -ENOENT;
}

ssize_t ptfs_tfile_write(struct ptfs *fs, struct fh *h, const char *buf,
			 size_t size, off_t off)
{
	struct tfile *t = h->tf;
	uint64_t end = (uint64_t)off + size;
	int rc;

	pthread_mutex_lock(&fs->elock);
	rc = off < 0 ? -EINVAL : tf_load(fs, t);
	if (rc == 0 && !t->any_size && end > t->nbytes)
		rc = -EFBIG;
	if (rc == 0)
		rc = tf_grow(t, end);
	if (rc == 0) {
		memcpy(t->buf + off, buf, size);
		if (end > t->size)
			t->size = end;
		t->changed = true;
		h->wrote = true;
	}
	pthread_mutex_unlock(&fs->elock);
	if (rc == -EFBIG)
		log_line(fs, h->node, "", "write past the size its NAME.json gives (write NAME.json first for another shape)");
	return rc ? rc : (ssize_t)size;
}

int ptfs_tfile_truncate(struct ptfs *fs, struct pt_node *n, uint64_t size)
{
	struct tfile *t;
	int rc;

	pthread_mutex_lock(&fs->elock);
	t = tf_find(fs, n);
	if (!t || !t->writers)
		rc = -EACCES;           /* not open for writing */
	else
		rc = !t->any_size && size > t->nbytes ? -EFBIG : tf_load(fs, t);
	if (rc == 0)
		rc = tf_grow(t, size);
	if (rc == 0) {
		t->size = size;
		t->changed = true;
	}
	pthread_mutex_unlock(&fs->elock);
	return rc;
}

/* A close of @h: the last writer's applies what was written; @release:
 * the handle goes, and a wrong size drops the bytes (else EINVAL). */
static int tf_close(struct ptfs *fs, struct fh *h, bool release)
{
	struct tfile *t = h->tf;
	struct pt_node *dir = NULL;
	struct pt_error err;
	char *name = NULL, msg[160];
	int rc = 0;

	pt_error_clear(&err);
	msg[0] = '\0';
	pthread_mutex_lock(&fs->elock);
	if (t->writers == 1 && t->changed && (release || h->wrote)) {
		if (tf_size_right(t)) {
			dir = pt_node_parent(t->node);
			name = strdup(pt_node_name(t->node));
			rc = name ? tf_apply(fs, t, &err) : -ENOMEM;
		} else if (release) {
			snprintf(msg, sizeof(msg), "closed at %llu bytes but its NAME.json gives %llu: the write is dropped",
				 (unsigned long long)t->size, (unsigned long long)t->nbytes);
			tf_drop_writes(t);
		} else {
			rc = -EINVAL;
		}
	}
	if (release)
		t->writers--;
	pthread_mutex_unlock(&fs->elock);
	if (msg[0])
		log_line(fs, h->node, "", msg);
	else if (rc && err.msg[0])
		log_line(fs, h->node, "", err.msg);
	if (rc == 0 && name)
		forget_names(fs, dir, name);
	free(name);
	return rc;
}

int ptfs_tfile_flush(struct ptfs *fs, struct fh *h)
{
	return tf_close(fs, h, false);
}

void ptfs_tfile_release(struct ptfs *fs, struct fh *h)
{
	(void)tf_close(fs, h, true);
}

/* ---- NAME.json written ---- */

/* Is the tensor file @n open for writing (a write of the same size)? */
static bool being_written(struct ptfs *fs, struct pt_node *n)
{
	struct wfile *w;

	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->wfiles, &n, w);
	pthread_mutex_unlock(&fs->wlock);
	return w && w->writers;
}

static bool same_spec(const struct pt_tinfo *ti, const struct pt_edit_spec *sp)
{
	return strcmp(ti->dtype, sp->dtype) == 0 && ti->rank == sp->rank &&
	       memcmp(ti->shape, sp->shape, sp->rank * sizeof(*sp->shape)) == 0;
}

/* The bytes tensor @n gets for @sp: its own when the sizes agree, else
 * zeros; NULL with *@rc on failure (or for no bytes). */
static uint8_t *spec_bytes(struct ptfs *fs, struct pt_node *n, uint64_t had,
			   const struct pt_edit_spec *sp, int *rc)
{
	struct pt_error err;
	uint8_t *b;
	ssize_t got;

	*rc = 0;
	if (!sp->nbytes)
		return NULL;
	b = had == sp->nbytes ? malloc(had) : calloc(1, sp->nbytes);
	if (!b) {
		*rc = -ENOMEM;
		return NULL;
	}
	if (had != sp->nbytes)
		return b;
	pt_error_clear(&err);
	got = pt_node_read(fs->ck, n, b, had, 0, &err);
	if (got != (ssize_t)had) {
		free(b);
		*rc = got < 0 ? (int)got : -EIO;
		return NULL;
	}
	return b;
}

/* @t follows the new spec of its tensor (@had bytes before, its value
 * @was), which is whole when its bytes were taken as they are. */
static void tf_declared(struct tfile *t, const struct pt_edit_spec *sp,
			uint64_t had, struct pt_value *was)
{
	bool kept = had == sp->nbytes;

	if (!kept && t->whole)
		t->was = was;
	t->whole = kept ? t->whole : sp->nbytes == 0;
	if (t->whole)
		t->was = NULL;
	t->dtype = sp->dtype;
	t->rank = sp->rank;
	memcpy(t->shape, sp->shape, sizeof(t->shape));
	t->nbytes = sp->nbytes;
	t->any_size = false;
}

/*
 * Tensor @tname of @dir takes the dtype and shape of @sp.  1 when it has
 * them already, 0 when edited, else -errno (@err).  Under elock.
 */
static int declare(struct ptfs *fs, struct pt_node *dir, const char *tname,
		   const struct pt_edit_spec *sp, struct pt_error *err)
{
	struct pt_node *n = pt_tree_lookup(fs->ck, dir, tname, NULL);
	struct pt_edit_tensor et = { .dtype = sp->dtype, .rank = sp->rank,
				     .shape = sp->shape, .len = sp->nbytes };
	struct pt_value *was = NULL;
	struct pt_tinfo ti;
	uint8_t *bytes;
	struct tfile *t;
	char *path;
	int rc = 0;

	if (!n || !pt_node_tinfo(n, &ti))
		return pt_fail(err, -ENOENT, "no tensor '%s' any more", tname);
	t = tf_find(fs, n);
	if ((t && t->writers) || being_written(fs, n))
		return pt_fail(err, -EBUSY, "'%s' is open for writing: close it first", tname);
	if (same_spec(&ti, sp))
		return 1;
	path = ptfs_edit_path(fs, dir, tname, &rc);
	if (path)
		was = pt_edit_value(fs->ck, path);
	free(path);
	if (!t && !(t = calloc(1, sizeof(*t))))
		return pt_fail(err, -ENOMEM, "out of memory");
	if (!t->node)
		t->whole = true;        /* a tensor of the file, whole */
	bytes = spec_bytes(fs, n, ti.nbytes, sp, &rc);
	if (rc == 0)
		rc = put_tensor(fs, dir, tname, &et, bytes, false, err);
	if (rc) {
		free(bytes);
		if (!t->node)
			free(t);
		return rc == -ENOMEM || rc == -EIO ? pt_fail(err, rc, "%s", strerror(-rc)) : rc;
	}
	tf_declared(t, sp, ti.nbytes, was);
	tf_rekey(fs, t, dir, tname);
	return 0;
}

/* The NAME.json text written through @h becomes its tensor's dtype and
 * shape (see above). */
static int spec_apply(struct ptfs *fs, struct fh *h)
{
	struct pt_node *dir = pt_node_parent(h->node);
	const char *file = pt_node_name(h->node);
	struct pt_edit_spec sp;
	struct pt_error err;
	size_t len = 0;
	char *tname, *text = ptfs_scalar_text(fs, h, &len, &(int){ 0 });
	int rc;

	if (!text)
		return 0;
	pt_error_clear(&err);
	tname = strndup(file, spec_name(file));
	rc = tname ? pt_edit_spec_parse(text, len, &sp, &err) : -ENOMEM;
	if (rc == 0)
		rc = ptfs_edit_begin(fs);
	else if (err.msg[0])
		log_line(fs, h->node, "", err.msg);
	if (rc == 0) {
		rc = declare(fs, dir, tname, &sp, &err);
		if (rc > 0)
			pthread_mutex_unlock(&fs->elock);       /* no edit */
		else
			rc = ptfs_edit_end(fs, rc, file, &err);
		if (rc == 0)
			forget_names(fs, dir, tname);
	}
	free(tname);
	free(text);
	return rc > 0 ? 0 : rc;
}

int ptfs_spec_flush(struct ptfs *fs, struct fh *h)
{
	/* as a scalar's: `echo ... > NAME.json` closes a copy first */
	return h->wrote ? spec_apply(fs, h) : 0;
}

void ptfs_spec_release(struct ptfs *fs, struct fh *h)
{
	(void)spec_apply(fs, h);
}

/* ---- before a commit ---- */

/* The tensor @t declared and never written whole leaves the graph: its
 * old value back, or the entry removed.  Under elock. */
static int tf_undeclare(struct ptfs *fs, struct tfile *t, struct pt_error *err)
{
	struct pt_node *dir = pt_node_parent(t->node);
	char *path;
	int rc = 0;

	path = ptfs_edit_path(fs, dir, pt_node_name(t->node), &rc);
	if (!path)
		return rc;
	rc = t->was ? pt_edit_put_back(fs->ck, path, t->was, err) :
		      pt_edit_remove(fs->ck, path, err);
	free(path);
	if (rc == 0) {
		fs->edits++;
		t->whole = true;        /* nothing more to settle */
		t->was = NULL;
	}
	return rc;
}

/* One tensor before a commit (see ptfs_tfiles_settle()). */
static int tf_settle(struct ptfs *fs, struct tfile *t, bool last)
{
	struct pt_error err;
	struct pt_node *n = t->node, *dir = n ? pt_node_parent(n) : NULL;
	bool was = t->was != NULL;
	int rc = 0;

	if (!tf_live(fs, t)) {
		t->whole = true;        /* removed since: nothing to settle */
		tf_drop_writes(t);
		return 0;
	}
	pt_error_clear(&err);
	if (t->changed && tf_size_right(t)) {
		rc = tf_apply(fs, t, &err);
		if (rc == 0)
			queue_forget(fs, dir, pt_node_name(n));
	} else if (t->changed && last) {
		log_line(fs, n, "", "still open at a size other than its NAME.json gives: the write is dropped");
		tf_drop_writes(t);
	} else if (t->changed) {
		log_line(fs, n, "", "open at a size other than its NAME.json gives; not committed");
		return -EINVAL;
	}
	if (rc == 0 && !t->whole && last) {
		rc = tf_undeclare(fs, t, &err);
		if (rc == 0)
			log_line(fs, n, "", was ? "declared by NAME.json but never written whole: it keeps its old value" :
				 "declared by NAME.json but never written whole: not added");
	} else if (rc == 0 && !t->whole) {
		log_line(fs, n, "", "declared by NAME.json but not written whole (dtype x shape bytes); not committed");
		return -EINVAL;
	}
	if (rc && err.msg[0])
		log_line(fs, n, "", err.msg);
	return rc;
}

int ptfs_tfiles_settle(struct ptfs *fs, const char *why, bool last)
{
	struct tfile *t, *tmp;
	int rc = 0, r;

	(void)why;
	pthread_mutex_lock(&fs->elock);
	HASH_ITER(hh, fs->tfiles, t, tmp) {
		r = tf_settle(fs, t, last);
		if (r && !rc)
			rc = r;
	}
	pthread_mutex_unlock(&fs->elock);
	wait_forgotten(fs);
	return rc;
}

void ptfs_tfiles_free(struct ptfs *fs)
{
	struct tfile *t, *tmp;
	struct held *h;

	HASH_ITER(hh, fs->tfiles, t, tmp) {
		HASH_DEL(fs->tfiles, t);
		free(t->buf);
		free(t);
	}
	while ((h = fs->held)) {
		fs->held = h->next;
		free(h->p);
		free(h);
	}
}
