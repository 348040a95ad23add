/* SPDX-License-Identifier: MIT */
/*
 * mount_write.c -- open files and writes through the mount: a handle per
 * open file, the write state of a tensor file open for writing (its size
 * may differ from the tensor's while cp rewrites it), truncation, the
 * checks of close (FLUSH, RELEASE), and commits (fsync, and the last one
 * when the loop ends).  Writes go to the overlay of uncommitted bytes
 * (overlay.c); the kernel's caches of what they change are dropped through
 * the notifier (notify.c).
 */
#include "mount.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <utlist.h>

#include "log.h"
#include "ptfs.h"
#include "push.h"

/* how long a worker waits for the kernel to drop what a commit or a close
 * made stale: past it (every other worker busy, notify.h) it goes on and
 * the drops follow soon after */

/* Keep @h in fs->handles from its open until its release. */
static void fh_track(struct ptfs *fs, struct fh *h)
{
	pthread_mutex_lock(&fs->wlock);
	DL_PREPEND(fs->handles, h);
	pthread_mutex_unlock(&fs->wlock);
}

static void fh_untrack(struct ptfs *fs, struct fh *h)
{
	pthread_mutex_lock(&fs->wlock);
	DL_DELETE(fs->handles, h);
	pthread_mutex_unlock(&fs->wlock);
}

static void log_err(struct ptfs *fs, struct pt_node *n, const char *what,
		    const char *msg)
{
	fuse_log(FUSE_LOG_ERR, "ptfs: %s: '%s': %s: %s\n", fs->ckpath,
		 n ? pt_node_name(n) : "", what, msg);
}

/* Have the kernel drop what it caches of inode @ino, soon (notify.h);
 * nothing once the loop has ended: the caches go with the mount. */
static void queue_drop(struct ptfs *fs, fuse_ino_t ino)
{
	if (!__atomic_load_n(&fs->draining, __ATOMIC_ACQUIRE))
		ptfs_notify_inval(fs->notify, ino);
}

/* Wait for the drops queued so far when other workers can answer the
 * READs they may wait for (PTFS_DROP_WAIT_MS at most). */
static void wait_drops(struct ptfs *fs)
{
	if (fs->may_wait && !__atomic_load_n(&fs->draining, __ATOMIC_ACQUIRE))
		(void)ptfs_notify_wait(fs->notify, PTFS_DROP_WAIT_MS);
}

/* Have the kernel drop what it caches of the other open files over the
 * same storage, so that views of one storage see each other's writes
 * (soon after, notify.h; files closed now are checked at their next
 * open, ov_note_open). */
static void invalidate_others(struct ptfs *fs, struct ov_st *s, fuse_ino_t ino)
{
	uint64_t *others = NULL;
	size_t i, n;

	if (!s)
		return;
	n = ov_others(s, ino, &others);
	for (i = 0; i < n; i++)
		queue_drop(fs, (fuse_ino_t)others[i]);
	free(others);
}

/* Truncate a tensor file in write state to @size: the bytes past it read
 * as zeros if the file grows again (POSIX), until the tensor is whole. */
int ptfs_wfile_truncate(struct ptfs *fs, struct fh *h, struct wfile *w,
			uint64_t size, fuse_ino_t ino)
{
	int rc = 0;

	if (size > w->nbytes)
		return -EFBIG;
	if (size < w->size && w->size == w->nbytes) {
		/* what a write of another size gives back: these bytes,
		 * uncommitted writes to the storage included */
		struct ov_snap *was = ov_snapshot(fs->ov, h->ov, h->lo, w->nbytes, &rc);

		if (!was)
			return rc;
		ov_snap_free(w->was);
		w->was = was;
	}
	if (size < w->size) {
		rc = ov_zero(fs->ov, h->ov, h->lo + size, w->size - size);
		invalidate_others(fs, h->ov, ino);
	}
	if (rc == 0) {
		w->size = size;
		w->changed = true;
	}
	return rc;
}

/* A scalar's text file opened for writing (mount_edit.c). */
static void open_scalar(fuse_req_t req, struct ptfs *fs, struct pt_node *n,
			struct fuse_file_info *fi)
{
	struct fh *h = calloc(1, sizeof(*h));
	int rc;

	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	h->node = n;
	h->write = (fi->flags & O_ACCMODE) != O_RDONLY;
	h->spec = pt_node_is_sidecar(n);
	rc = ptfs_scalar_open(fs, h, fi->flags & O_TRUNC);
	if (rc) {
		free(h);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->direct_io = 1;      /* the text is the node's until the close */
	fi->fh = (uint64_t)(uintptr_t)h;
	fh_track(fs, h);
	fuse_reply_open(req, fi);
}

/* A tensor whose bytes the mount holds, or a NAME.json, opened for
 * writing (mount_tensor.c); with @e the answer to a create. */
static void open_held(fuse_req_t req, struct ptfs *fs, struct pt_node *n,
		      struct fuse_file_info *fi, const struct fuse_entry_param *e)
{
	struct fh *h = calloc(1, sizeof(*h));
	bool trunc = e || (fi->flags & O_TRUNC);
	int rc;

	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	h->node = n;
	h->write = true;
	h->spec = pt_node_is_sidecar(n);
	h->scalar = h->spec;
	rc = h->spec ? ptfs_scalar_open(fs, h, trunc) : ptfs_tfile_open(fs, h, trunc);
	if (rc) {
		free(h);
		fuse_reply_err(req, -rc);
		return;
	}
	fi->direct_io = 1;      /* its bytes are the mount's until the close */
	fi->fh = (uint64_t)(uintptr_t)h;
	fh_track(fs, h);
	if (e)
		fuse_reply_create(req, e, fi);
	else
		fuse_reply_open(req, fi);
}

static void open_tfile(fuse_req_t req, struct ptfs *fs, struct pt_node *n,
		       struct fuse_file_info *fi)
{
	if (fi->flags & O_APPEND) {
		log_err(fs, n, "open for appending", "write the tensor whole, or in place");
		fuse_reply_err(req, EINVAL);
		return;
	}
	open_held(req, fs, n, fi, NULL);
}

/*
 * create(2) of a new file: a new tensor NAME (uint8, of what is written),
 * or NAME.json declaring a new tensor NAME (mount_tensor.c).  The kernel
 * asks for the attributes afterwards.
 */
void ptfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode, struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct pt_node *n = NULL;
	int rc;

	(void)mode;
	if (fs_readonly(fs)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	rc = ptfs_tfile_create(fs, node_of(fs, parent), name, &n);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = ino_of(fs, n);
	e.entry_timeout = PTFS_TIMEOUT;
	e.attr_timeout = 0;
	e.attr.st_ino = (ino_t)e.ino;
	e.attr.st_mode = S_IFREG | (fs->mode & 0666);
	e.attr.st_nlink = 1;
	e.attr.st_uid = fs->uid;
	e.attr.st_gid = fs->gid;
	open_held(req, fs, n, fi, &e);
}

void ptfs_op_open(fuse_req_t req, fuse_ino_t ino,
		  struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *n = node_of(fs, ino);
	const struct pt_storage *st;
	struct wfile *w = NULL;
	struct pt_nattr a;
	struct fh *h;
	uint64_t lo = 0;
	bool write = (fi->flags & O_ACCMODE) != O_RDONLY;
	bool fresh = true;      /* what the kernel kept of it is right */
	int rc = 0;

	pt_node_attr(n, &a);
	if (a.type == PT_NT_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (fs->no_open && !write && !(fi->flags & O_TRUNC)) {
		/* "open it yourself": the kernel sends no more OPEN/RELEASE */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (write || (fi->flags & O_TRUNC)) {
		if (fs_readonly(fs)) {
			fuse_reply_err(req, EROFS);
			return;
		}
		if (pt_edit_scalar_node(n) || pt_node_is_sidecar(n)) {
			open_scalar(req, fs, n, fi);
			return;
		}
		if (ptfs_tfile_of(fs, n)) {
			open_tfile(req, fs, n, fi);
			return;
		}
		if (!a.writable) {
			if (a.tensor)
				log_err(fs, n, "open for writing",
					"not writable (a non-contiguous view, an array inside the pickle, or a compressed record): write the tensor it views");
			fuse_reply_err(req, EACCES);
			return;
		}
		if (write && (fi->flags & O_APPEND)) {
			/* every write would land at the end and grow it; the
			 * write would say so too, unless a writer before it left
			 * the file short and its RELEASE (sent after close(2)
			 * returns) is still on its way: then the kernel's size
			 * is that short one, and `>>` would write inside */
			log_err(fs, n, "open for appending",
				"a tensor file cannot grow: write it whole, or in place (dd conv=notrunc)");
			fuse_reply_err(req, EINVAL);
			return;
		}
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	h->node = n;
	h->write = write;
	st = pt_node_viewed_storage(n);
	if (st) {
		h->ov = ov_get(fs->ov, st, true);
		if (!h->ov) {
			free(h);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		if (ov_note_open(h->ov, ino, &fresh)) {
			free(h);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		if (pt_node_writable_storage(n, &lo))
			h->lo = lo;
	}
	if (write) {
		pthread_mutex_lock(&fs->wlock);
		HASH_FIND_PTR(fs->wfiles, &n, w);
		if (!w) {
			w = calloc(1, sizeof(*w));
			if (w) {
				w->node = n;
				w->size = w->nbytes = a.size;
				HASH_ADD_PTR(fs->wfiles, node, w);
			}
		}
		if (w) {
			w->writers++;
			ov_writers(h->ov, 1);
			if (fi->flags & O_TRUNC)
				rc = ptfs_wfile_truncate(fs, h, w, 0, ino);
		} else {
			rc = -ENOMEM;
		}
		pthread_mutex_unlock(&fs->wlock);
		if (rc) {
			fuse_reply_err(req, -rc);
			/* the handle is never released: undo the count */
			pthread_mutex_lock(&fs->wlock);
			if (w) {
				w->writers--;
				ov_writers(h->ov, -1);
			}
			pthread_mutex_unlock(&fs->wlock);
			if (h->ov)
				ov_note_close(h->ov, ino);
			free(h);
			return;
		}
	}
	/* the page cache of an unchanged file stays valid between opens;
	 * closing a file that was only read needs no FLUSH round trip */
	fi->keep_cache = !write && fresh;
	fi->noflush = !write;
	fi->fh = (uint64_t)(uintptr_t)h;
	fh_track(fs, h);
	fuse_reply_open(req, fi);
}

void ptfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		   size_t size, off_t off, struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct wfile *w;
	ssize_t n;
	int rc;

	if (h && h->write && (h->scalar || h->tf)) {
		n = h->tf ? ptfs_tfile_write(fs, h, buf, size, off) :
		    ptfs_scalar_write(fs, h, buf, size, off);
		if (n < 0)
			fuse_reply_err(req, (int)-n);
		else
			fuse_reply_write(req, (size_t)n);
		return;
	}
	if (!h || !h->write || !h->ov) {
		fuse_reply_err(req, EBADF);
		return;
	}
	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->wfiles, &h->node, w);
	if (!w || off < 0 || (uint64_t)off > w->nbytes ||
	    size > w->nbytes - (uint64_t)off) {
		pthread_mutex_unlock(&fs->wlock);
		log_err(fs, h->node, "write", "past the end of the tensor (tensor files cannot grow)");
		fuse_reply_err(req, EFBIG);
		return;
	}
	rc = ov_write(fs->ov, h->ov, buf, size, h->lo + (uint64_t)off);
	if (rc == 0) {
		if ((uint64_t)off + size > w->size)
			w->size = (uint64_t)off + size;
		w->changed = true;
	}
	pthread_mutex_unlock(&fs->wlock);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	invalidate_others(fs, h->ov, ino);
	fuse_reply_write(req, size);
}

/* A generated file was forgotten, a record's bytes were written, or
 * metadata states moved offsets: drop the kernel's attributes and pages. */
static void drop_gen_cache(void *ctx, struct pt_node *n)
{
	struct ptfs *fs = ctx;

	queue_drop(fs, ino_of(fs, n));
}

/*
 * close(2).  The kernel sends FLUSH at every close of a descriptor, also of
 * one dup()ed from a descriptor that stays open (the shell closes its own
 * copy in `cat x > FILE` before cat writes a byte), so a FLUSH cannot tell
 * the last close.  A size other than the tensor's fails this close with
 * EINVAL when no other open file writes the tensor (the writer hears of
 * it at its last close), and the change is judged at RELEASE, when the
 * open file is gone: see ptfs_op_release().
 */
void ptfs_op_flush(fuse_req_t req, fuse_ino_t ino,
		   struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct wfile *w = NULL;
	bool wrong = false;

	if (!h) {
		/* opened by the kernel (read-only mount): nothing to check,
		 * and ENOSYS stops further FLUSH requests */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (h->scalar) {
		fuse_reply_err(req, -(h->spec ? ptfs_spec_flush(fs, h) :
				      ptfs_scalar_flush(fs, h, ino)));
		return;
	}
	if (h->tf) {
		fuse_reply_err(req, -ptfs_tfile_flush(fs, h));
		return;
	}
	if (h->write) {
		pthread_mutex_lock(&fs->wlock);
		HASH_FIND_PTR(fs->wfiles, &h->node, w);
		wrong = w && w->writers == 1 && w->changed && w->size != w->nbytes;
		pthread_mutex_unlock(&fs->wlock);
		if (!wrong) {
			/* pictures and stats are made again, gone from the
			 * kernel before close() returns */
			ptfs_view_changed(fs->ck, drop_gen_cache, fs);
			wait_drops(fs);
		}
	}
	fuse_reply_err(req, wrong ? EINVAL : 0);
}

/*
 * The last close of an open file.  When it was the last one writing the
 * tensor and the file's size is not the tensor's, the change cannot be
 * committed (a tensor cannot change size): the tensor gets its old bytes
 * back and the log says so.  A revert that fails keeps the file's state,
 * whose size keeps every commit from taking it.
 */
void ptfs_op_release(fuse_req_t req, fuse_ino_t ino,
		     struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct ov_st *ov = h ? h->ov : NULL;
	uint64_t size = 0, nbytes = 0;
	struct wfile *w;
	bool drop = false;
	int rc = 0;

	if (h && h->ov)
		ov_note_close(h->ov, ino);
	if (h && h->scalar) {
		if (h->spec)
			ptfs_spec_release(fs, h);
		ptfs_scalar_release(fs, h, ino);
	} else if (h && h->tf) {
		ptfs_tfile_release(fs, h);
	} else if (h && h->write) {
		pthread_mutex_lock(&fs->wlock);
		HASH_FIND_PTR(fs->wfiles, &h->node, w);
		if (w && w->writers == 1 && w->changed && w->size != w->nbytes) {
			drop = true;
			size = w->size;
			nbytes = w->nbytes;
			rc = w->was ? ov_restore(fs->ov, h->ov, w->was) :
				ov_revert(fs->ov, h->ov, h->lo, w->nbytes);
			if (rc == 0) {
				w->size = w->nbytes;
				w->changed = false;
			}
		}
		if (w) {
			w->writers--;
			if (w->writers == 0 && rc == 0) {
				HASH_DEL(fs->wfiles, w);
				ov_snap_free(w->was);
				free(w);
			}
		}
		ov_writers(h->ov, -1);
		pthread_mutex_unlock(&fs->wlock);
	}
	if (drop && rc)
		fuse_log(FUSE_LOG_ERR,
			 "ptfs: %s: '%s': closed at %llu bytes but the tensor has %llu, and dropping the change failed (%s): nothing is committed until the file is written whole\n",
			 fs->ckpath, pt_node_name(h->node), (unsigned long long)size,
			 (unsigned long long)nbytes, strerror(-rc));
	else if (drop)
		fuse_log(FUSE_LOG_ERR,
			 "ptfs: %s: '%s': closed at %llu bytes but the tensor has %llu: the write is dropped, the tensor keeps its bytes\n",
			 fs->ckpath, pt_node_name(h->node), (unsigned long long)size,
			 (unsigned long long)nbytes);
	if (drop) {
		queue_drop(fs, ino);
		invalidate_others(fs, ov, ino);
		ptfs_view_changed(fs->ck, drop_gen_cache, fs);
	}
	if (h)
		fh_untrack(fs, h);
	free(h);
	fuse_reply_err(req, 0);
}

/* Commit every pending tensor write; 0 or a negative errno (-EINVAL: a
 * file whose size differs from its tensor's; -ENOSPC, -EDQUOT; else
 * -EIO).  @live: the session loop runs (the kernel's caches are worth
 * keeping right). */
static int commit_writes(struct ptfs *fs, const char *why, bool live)
{
	struct pt_error err;
	struct wfile *w, *tmp;
	uint32_t since;
	int rc;

	if (!ov_any_dirty(fs->ov))
		return 0;
	pthread_mutex_lock(&fs->wlock);
	HASH_ITER(hh, fs->wfiles, w, tmp) {
		if (w->size != w->nbytes) {
			pthread_mutex_unlock(&fs->wlock);
			log_err(fs, w->node, why, "file size differs from the tensor's; not committed");
			return -EINVAL;
		}
	}
	pthread_mutex_unlock(&fs->wlock);
	pt_error_clear(&err);
	since = pt_ckpt_commits(fs->ck);
	ptfs_push_pause(fs->push);
	rc = ov_commit(fs->ov, &err);
	/*
	 * The kernel keeps what it read or was pushed for a day
	 * (PTFS_TIMEOUT, keep_cache): the records under /.ptfs/records whose
	 * bytes the commit wrote now hold other bytes, and when records
	 * moved (the rewriter on an archive not in torch's layout),
	 * sidecars, tree.json and info.txt state other offsets and sizes.
	 * Made again and dropped before fsync returns (with one worker, -s
	 * or max_threads=1, right after: that worker is the one to answer a
	 * READ the drop may wait for), with no lock of ours held.  Without
	 * a loop (unmount) nobody reads them again.
	 */
	if (rc == 0 && live) {
		pt_tree_committed(fs->ck, since, drop_gen_cache, fs);
		/* other workers answer the READs a drop may wait for */
		wait_drops(fs);
	}
	ptfs_push_resume(fs->push);
	if (rc) {
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: commit on %s failed, checkpoint unchanged%s: %s\n",
			 fs->ckpath, why, live ? ", the changes stay in the mount" : "",
			 err.msg);
		/* the reasons a user can act on reach fsync as they are */
		return rc == -ENOSPC || rc == -EDQUOT || rc == -EACCES ||
		       rc == -EPERM || rc == -EROFS || rc == -EBUSY ? rc : -EIO;
	}
	fuse_log(FUSE_LOG_INFO, "ptfs: %s: committed on %s (%s)\n", fs->ckpath, why,
		 pt_ckpt_last_commit(fs->ck));
	return 0;
}

/* Commit every pending change: the tensor writes, then the structural
 * edits (one rewrite of the whole file). */
static int commit_all(struct ptfs *fs, const char *why, bool live)
{
	int rc = ptfs_tfiles_settle(fs, why, false);

	if (rc == 0)
		rc = commit_writes(fs, why, live);

	return rc ? rc : ptfs_edits_commit(fs, why);
}

/*
 * The loop ended (unmount, or a signal): nobody can be told of a failure
 * now.  A file left at a size other than its tensor's (a signal while it
 * was open) is dropped, one line each; what cannot be committed is saved
 * as the checkpoint's pending file (ckpt/pending.h) for `ptfs recover`.
 * 0 when every change is in the checkpoint, else -1.
 */
int ptfs_final_commit(struct ptfs *fs, const char *why)
{
	struct wfile *w, *tmp;
	struct pt_error err;
	char *where = NULL;
	bool lost;
	int rc;

	pthread_mutex_lock(&fs->wlock);
	HASH_ITER(hh, fs->wfiles, w, tmp) {
		const struct pt_storage *st;
		uint64_t lo = 0;

		if (!w->changed || w->size == w->nbytes)
			continue;
		st = pt_node_writable_storage(w->node, &lo);
		if (!st)
			rc = -EIO;
		else if (w->was)
			rc = ov_restore(fs->ov, ov_get(fs->ov, st, false), w->was);
		else
			rc = ov_revert(fs->ov, ov_get(fs->ov, st, false), lo, w->nbytes);
		if (rc == 0)
			w->size = w->nbytes;
		log_err(fs, w->node, why, rc == 0 ?
			"still open at a size other than the tensor's: the write is dropped, the tensor keeps its bytes" :
			"still open at a size other than the tensor's, and dropping the write failed");
	}
	pthread_mutex_unlock(&fs->wlock);
	(void)ptfs_tfiles_settle(fs, why, true);        /* logged */
	rc = commit_writes(fs, why, false);
	if (rc == 0 && ptfs_edits_commit(fs, why) == 0)
		return 0;
	/* the writes (unless committed) and the edits go to the pending
	 * file: recover commits them as this commit would have */
	lost = ptfs_edits_lost(fs);
	if (lost && rc == 0)
		return -1;
	pt_error_clear(&err);
	if (ov_save_pending(fs->ov, ptfs_state_dir(true), &where, &err) == 0)
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: the %s%s are kept in %s: 'ptfs recover %s' applies them\n",
			 fs->ckpath, rc ? "changes" : "structural edits",
			 rc && fs->edits && !lost ? " (tensor writes and structural edits)" : "",
			 where, fs->ckpath);
	else
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: the changes could not be committed nor kept (%s): they are lost\n",
			 fs->ckpath, err.msg);
	free(where);
	return -1;
}

void ptfs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		   struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	fuse_reply_err(req, -commit_all(fs_of(req), "fsync", true));
}
