/* SPDX-License-Identifier: MIT */
/*
 * mount_edit.c -- structural edits in a writable mount: rm, rmdir, mv,
 * mkdir, and new values written to the text files of scalars.
 *
 * Each request is one edit of the checkpoint's graph (ckpt/edit.c), which
 * changes only the listings it touches: every other node, and so every
 * other inode the kernel knows, stays what it is, and a value moved by mv
 * keeps its inode.  Nothing reaches the file until a commit (fsync of any
 * file, unmount, SIGTERM), which writes the pending tensor bytes first
 * and then the whole file again, once, atomically (pt_edit_commit()).
 * After that the tree describes the old file's layout: the mount takes no
 * more writes (README "Surgery").
 */
#include "mount.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/pending.h"
#include "ptfs.h"

/* The tree path of @n ("" for the root) appended to @b. */
static void put_path(struct pt_buf *b, const struct pt_node *n)
{
	const struct pt_node *p = pt_node_parent(n);

	if (!p)
		return;
	put_path(b, p);         /* as deep as the tree: max_depth */
	if (b->len)
		pt_buf_putc(b, '/');
	pt_buf_puts(b, pt_node_name(n));
}

/* The tree path of entry @name of directory @dir, in a malloc()ed
 * string; NULL with *@rc: -ENOMEM, or -ENOENT when @dir is no longer
 * where its names say (an edit removed it meanwhile). */
static char *path_of(struct ptfs *fs, struct pt_node *dir, const char *name,
		     int *rc)
{
	struct pt_buf b;
	size_t len;
	char *p = NULL;

	pt_buf_init(&b);
	put_path(&b, dir);
	pt_buf_putc(&b, '\0');
	if (b.oom || pt_tree_path(fs->ck, b.p, rc) != dir) {
		*rc = b.oom ? -ENOMEM : -ENOENT;
		pt_buf_free(&b);
		return NULL;
	}
	b.len--;
	if (b.len)
		pt_buf_putc(&b, '/');
	pt_buf_puts(&b, name);
	if (!b.oom)
		p = pt_buf_take(&b, &len);
	pt_buf_free(&b);
	*rc = p ? 0 : -ENOMEM;
	return p;
}

static void log_refused(struct ptfs *fs, const char *what, const struct pt_error *err)
{
	fuse_log(FUSE_LOG_ERR, "ptfs: %s: %s: %s\n", fs->ckpath, what, err->msg);
}

/* The start of every edit: refused on a read-only mount; takes elock. */
static int edit_begin(struct ptfs *fs)
{
	if (fs_readonly(fs))
		return -EROFS;
	pthread_mutex_lock(&fs->elock);
	return 0;
}

static int edit_end(struct ptfs *fs, int rc, const char *what,
		    const struct pt_error *err)
{
	if (rc == 0)
		fs->edits++;
	pthread_mutex_unlock(&fs->elock);
	if (rc && err->msg[0])
		log_refused(fs, what, err);
	return rc;
}

static char *gone_key(const struct pt_node *p, const char *name, const char *ext)
{
	char *k = NULL;

	return asprintf(&k, "%p/%s%s", (const void *)p, name, ext) < 0 ? NULL : k;
}

/*
 * A tensor file left with its NAME.json and NAME.png (@sc, their nodes
 * before): their unlink, which `rm -r` sends next from the listing it
 * read, succeeds once, and until then a lookup finds them
 * (ptfs_gone_lookup()), which the kernel makes before that unlink when it
 * has no entry cached.  Listings no longer show them.  Under elock.
 */
static const char *const sidecar_ext[] = { ".json", ".png" };

/* The sidecar nodes of tensor @name of @p into @sc (NULL: none). */
static void sidecars_of(struct ptfs *fs, struct pt_node *p, const char *name,
			struct pt_node *sc[2])
{
	size_t i;

	for (i = 0; i < 2; i++) {
		char *k = NULL;

		sc[i] = NULL;
		if (asprintf(&k, "%s%s", name, sidecar_ext[i]) >= 0)
			sc[i] = pt_tree_lookup(fs->ck, p, k, NULL);
		free(k);
	}
}

static void sidecars_gone(struct ptfs *fs, const struct pt_node *p,
			  const char *name, struct pt_node *sc[2])
{
	size_t i;

	for (i = 0; i < 2; i++) {
		char *k = sc[i] ? gone_key(p, name, sidecar_ext[i]) : NULL;
		struct gone *g, *old;

		if (!k)
			continue;
		HASH_FIND_STR(fs->gone, k, old);
		g = old ? NULL : malloc(sizeof(*g) + strlen(k) + 1);
		if (g) {
			g->node = sc[i];
			strcpy(g->key, k);
			HASH_ADD_STR(fs->gone, key, g);
		}
		free(k);
	}
}

/* Was @name of @p a sidecar of a removed tensor?  Then it is gone now. */
static bool sidecar_taken(struct ptfs *fs, const struct pt_node *p, const char *name)
{
	char *k = gone_key(p, name, "");
	struct gone *g = NULL;

	if (k)
		HASH_FIND_STR(fs->gone, k, g);
	if (g) {
		HASH_DEL(fs->gone, g);
		free(g);
	}
	free(k);
	return g != NULL;
}

struct pt_node *ptfs_gone_lookup(struct ptfs *fs, struct pt_node *dir,
				 const char *name)
{
	char *k = gone_key(dir, name, "");
	struct gone *g = NULL;

	pthread_mutex_lock(&fs->elock);
	if (k)
		HASH_FIND_STR(fs->gone, k, g);
	pthread_mutex_unlock(&fs->elock);
	free(k);
	return g ? g->node : NULL;
}

/* Remove entry @name of @parent; @dir: rmdir (an empty directory). */
static int remove_entry(struct ptfs *fs, fuse_ino_t parent, const char *name,
			bool dir)
{
	struct pt_node *p = node_of(fs, parent), *n, *sc[2] = { NULL, NULL };
	struct pt_error err;
	struct pt_nattr a;
	char *path = NULL;
	size_t count = 0;
	int rc = edit_begin(fs);

	if (rc)
		return rc;
	pt_error_clear(&err);
	n = pt_tree_lookup(fs->ck, p, name, &rc);
	if (n) {
		pt_node_attr(n, &a);
		if (dir && a.type != PT_NT_DIR)
			rc = -ENOTDIR;
		else if (!dir && a.type == PT_NT_DIR)
			rc = -EISDIR;
		else if (dir && pt_tree_entries(fs->ck, n, &count) == 0 && count)
			rc = -ENOTEMPTY;
		else if ((path = path_of(fs, p, name, &rc))) {
			if (a.tensor)
				sidecars_of(fs, p, name, sc);
			rc = pt_edit_remove(fs->ck, path, &err);
		}
		if (rc == 0 && a.tensor)
			sidecars_gone(fs, p, name, sc);
	} else if (rc == -ENOENT && !dir && sidecar_taken(fs, p, name)) {
		pthread_mutex_unlock(&fs->elock);
		return 0;       /* nothing to edit */
	}
	free(path);
	return edit_end(fs, rc, dir ? "rmdir" : "rm", &err);
}

void ptfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -remove_entry(fs_of(req), parent, name, false));
}

void ptfs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, -remove_entry(fs_of(req), parent, name, true));
}

void ptfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		   mode_t mode)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *p = node_of(fs, parent), *n = NULL;
	struct fuse_entry_param e;
	struct pt_error err;
	char *path = NULL;
	int rc = edit_begin(fs);

	(void)mode;
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	pt_error_clear(&err);
	path = path_of(fs, p, name, &rc);
	if (path)
		rc = pt_edit_mkdir(fs->ck, path, &err);
	if (rc == 0)
		n = pt_tree_lookup(fs->ck, p, name, &rc);
	free(path);
	rc = edit_end(fs, rc, "mkdir", &err);
	if (!n) {
		fuse_reply_err(req, rc ? -rc : EIO);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = ino_of(fs, n);
	e.attr_timeout = PTFS_TIMEOUT;
	e.entry_timeout = PTFS_TIMEOUT;
	e.attr.st_ino = (ino_t)e.ino;
	e.attr.st_mode = S_IFDIR | 0755;
	e.attr.st_nlink = 2;
	e.attr.st_uid = fs->uid;
	e.attr.st_gid = fs->gid;
	/* the kernel asks for the rest (mode bits as every directory's) */
	e.attr_timeout = 0;
	fuse_reply_entry(req, &e);
}

/*
 * rename(2) onto an existing entry replaces it: a file a file, an empty
 * directory a directory.  The edit moves the value into the target's
 * slot (or, for a directory, removes the empty one and adds the value
 * under its name).
 */
static int rename_onto(struct ptfs *fs, struct pt_node *src, struct pt_node *dst,
		       const char *to, unsigned int flags, struct pt_error *err)
{
	struct pt_nattr sa, da;
	size_t count = 0;

	if (flags & RENAME_NOREPLACE)
		return -EEXIST;
	pt_node_attr(src, &sa);
	pt_node_attr(dst, &da);
	if (da.type == PT_NT_DIR && sa.type != PT_NT_DIR)
		return -EISDIR;
	if (da.type != PT_NT_DIR && sa.type == PT_NT_DIR)
		return -ENOTDIR;
	if (da.type != PT_NT_DIR)
		return 0;
	if (pt_tree_entries(fs->ck, dst, &count) == 0 && count)
		return -ENOTEMPTY;
	return pt_edit_remove(fs->ck, to, err);
}

void ptfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		    fuse_ino_t newparent, const char *newname,
		    unsigned int flags)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *p = node_of(fs, parent), *np = node_of(fs, newparent);
	struct pt_node *src, *dst;
	struct pt_error err;
	char *from = NULL, *to = NULL;
	int rc;

	if (flags & ~(unsigned int)RENAME_NOREPLACE) {
		/* RENAME_EXCHANGE, RENAME_WHITEOUT */
		fuse_reply_err(req, EINVAL);
		return;
	}
	rc = edit_begin(fs);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	pt_error_clear(&err);
	src = pt_tree_lookup(fs->ck, p, name, &rc);
	if (src && (from = path_of(fs, p, name, &rc)) &&
	    (to = path_of(fs, np, newname, &rc))) {
		dst = pt_tree_lookup(fs->ck, np, newname, NULL);
		rc = dst && dst != src ? rename_onto(fs, src, dst, to, flags, &err) : 0;
		if (rc == 0 && dst != src)
			rc = pt_edit_move(fs->ck, from, to, &err);
	}
	free(from);
	free(to);
	rc = edit_end(fs, rc, "mv", &err);
	fuse_reply_err(req, -rc);
}

/* ---- the text files of scalars ---- */

int ptfs_scalar_open(struct ptfs *fs, struct fh *h, bool trunc)
{
	struct pt_error err;
	struct pt_nattr a;
	struct sfile *s;
	int rc = 0;

	pt_node_attr(h->node, &a);
	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->sfiles, &h->node, s);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s) {
			rc = -ENOMEM;
			goto out;
		}
		s->node = h->node;
		/* the text as it is: a write in the middle keeps the rest */
		s->text = malloc(a.size + 1);
		pt_error_clear(&err);
		if (!s->text ||
		    pt_node_read(fs->ck, h->node, s->text, a.size, 0, &err) != (ssize_t)a.size) {
			rc = s->text ? -EIO : -ENOMEM;
			free(s->text);
			free(s);
			goto out;
		}
		s->len = a.size;
		HASH_ADD_PTR(fs->sfiles, node, s);
	}
	s->writers++;
	if (trunc) {
		s->len = 0;
		s->changed = true;
	}
	h->scalar = true;
out:
	pthread_mutex_unlock(&fs->wlock);
	return rc;
}

ssize_t ptfs_scalar_write(struct ptfs *fs, struct fh *h, const char *buf,
			  size_t size, off_t off)
{
	struct sfile *s;
	char *t = NULL;
	ssize_t rc = (ssize_t)size;
	size_t end = (size_t)off + size;

	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->sfiles, &h->node, s);
	if (!s) {
		rc = -EBADF;
	} else if (end > (64u << 10)) {
		rc = -EFBIG;            /* a scalar's text, not a file */
	} else if (end > s->len && !(t = realloc(s->text, end))) {
		rc = -ENOMEM;
	} else {
		if (end > s->len) {     /* t: the text, grown */
			s->text = t;
			memset(s->text + s->len, 0, end - s->len);
			s->len = end;
		}
		memcpy(s->text + off, buf, size);
		s->changed = true;
		h->wrote = true;
	}
	pthread_mutex_unlock(&fs->wlock);
	return rc;
}

int ptfs_scalar_truncate(struct ptfs *fs, struct pt_node *n, uint64_t size)
{
	struct sfile *s;
	int rc = 0;

	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->sfiles, &n, s);
	if (!s) {
		rc = -EACCES;           /* not open for writing */
	} else if (size > s->len) {
		rc = -EINVAL;
	} else {
		s->len = (size_t)size;
		s->changed = true;
	}
	pthread_mutex_unlock(&fs->wlock);
	return rc;
}

bool ptfs_scalar_size(struct ptfs *fs, struct pt_node *n, uint64_t *size)
{
	struct sfile *s;

	/* every NAME.json's stat asks, in read-only mounts too: no lock
	 * while nothing is open for writing (a file opened meanwhile is
	 * asked again after its open) */
	if (!__atomic_load_n(&fs->sfiles, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->sfiles, &n, s);
	if (s)
		*size = s->len;
	pthread_mutex_unlock(&fs->wlock);
	return s != NULL;
}

char *ptfs_scalar_text(struct ptfs *fs, struct fh *h, size_t *len, int *rc)
{
	struct sfile *s;
	char *text = NULL;

	*rc = 0;
	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->sfiles, &h->node, s);
	if (s && s->writers == 1 && s->changed) {
		text = malloc(s->len + 1);
		if (text) {
			memcpy(text, s->text, s->len);
			text[s->len] = '\0';
			*len = s->len;
			s->changed = false;
		}
		*rc = text ? 0 : -ENOMEM;
	}
	pthread_mutex_unlock(&fs->wlock);
	return text;
}

/* The text written becomes the scalar's value, when @h is its last
 * writer and it changed. */
static int scalar_apply(struct ptfs *fs, struct fh *h, fuse_ino_t ino)
{
	struct pt_node *p = pt_node_parent(h->node);
	struct pt_error err;
	char *path = NULL, *text;
	size_t len = 0;
	int rc;

	text = ptfs_scalar_text(fs, h, &len, &rc);
	if (!text)
		return rc;
	rc = edit_begin(fs);
	if (rc == 0) {
		pt_error_clear(&err);
		path = path_of(fs, p, pt_node_name(h->node), &rc);
		if (path)
			rc = pt_edit_scalar(fs->ck, path, text, len, &err);
		rc = edit_end(fs, rc, "new value", &err);
	}
	if (rc == 0) {
		/* the name shows the new value's node: the kernel looks it
		 * up again before close() returns */
		ptfs_notify_inval_entry(fs->notify, ino_of(fs, p), pt_node_name(h->node));
		ptfs_notify_inval(fs->notify, ino);
		if (fs->may_wait)
			(void)ptfs_notify_wait(fs->notify, PTFS_DROP_WAIT_MS);
	}
	free(path);
	free(text);
	return rc;
}

int ptfs_scalar_flush(struct ptfs *fs, struct fh *h, fuse_ino_t ino)
{
	/* the shell's `echo 8 > FILE` closes a descriptor of it before
	 * writing: an empty text is no value yet */
	return h->wrote ? scalar_apply(fs, h, ino) : 0;
}

void ptfs_scalar_release(struct ptfs *fs, struct fh *h, fuse_ino_t ino)
{
	struct sfile *s;

	(void)scalar_apply(fs, h, ino);
	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->sfiles, &h->node, s);
	if (s && --s->writers == 0) {
		HASH_DEL(fs->sfiles, s);
		free(s->text);
		free(s);
	}
	pthread_mutex_unlock(&fs->wlock);
}

void ptfs_edits_free(struct ptfs *fs)
{
	struct sfile *s, *tmp;
	struct gone *g, *gtmp;

	HASH_ITER(hh, fs->sfiles, s, tmp) {
		HASH_DEL(fs->sfiles, s);
		free(s->text);
		free(s);
	}
	HASH_ITER(hh, fs->gone, g, gtmp) {
		HASH_DEL(fs->gone, g);
		free(g);
	}
}

bool ptfs_edits_lost(struct ptfs *fs)
{
	const char *lost = fs->edits ? pt_pending_edits_lost(fs->ck) : NULL;

	if (lost)
		fuse_log(FUSE_LOG_ERR,
			 "ptfs: %s: the structural edits (%u) cannot be kept in a pending file (%s): they are lost\n",
			 fs->ckpath, fs->edits, lost);
	return lost != NULL;
}

int ptfs_edits_commit(struct ptfs *fs, const char *why)
{
	struct pt_error err;
	unsigned n;
	int rc = 0;

	pthread_mutex_lock(&fs->elock);
	n = fs->edits;
	if (n) {
		pt_error_clear(&err);
		rc = pt_edit_commit(fs->ck, &err);
		if (rc == 0) {
			fs->edits = 0;
			__atomic_store_n(&fs->restructured, true, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&fs->elock);
	if (!n)
		return 0;
	if (rc) {
		fuse_log(FUSE_LOG_ERR,
			 "ptfs: %s: the structural edits (%u) could not be committed on %s, checkpoint unchanged: %s\n",
			 fs->ckpath, n, why, err.msg);
		return rc == -ENOSPC || rc == -EDQUOT || rc == -EACCES ||
		       rc == -EPERM || rc == -EROFS ? rc : -EIO;
	}
	fuse_log(FUSE_LOG_INFO,
		 "ptfs: %s: %u structural edits committed on %s (%s); the mount takes no more writes: remount to write again\n",
		 fs->ckpath, n, why, pt_ckpt_last_commit(fs->ck));
	return 0;
}

/* ---- for mount_tensor.c ---- */

int ptfs_edit_begin(struct ptfs *fs)
{
	return edit_begin(fs);
}

int ptfs_edit_end(struct ptfs *fs, int rc, const char *what,
		  const struct pt_error *err)
{
	return edit_end(fs, rc, what, err);
}

char *ptfs_edit_path(struct ptfs *fs, struct pt_node *dir, const char *name,
		     int *rc)
{
	return path_of(fs, dir, name, rc);
}
