/* SPDX-License-Identifier: MIT */
/*
 * mount.c -- the daemon's FUSE low-level operations: lookups, attributes,
 * listings, reads, extended attributes (open files and writes are
 * mount_write.c's; the command line and the session mount_main.c's).
 *
 * Why the low-level API: the tree is lazy and may multiply (a pickle whose
 * references fan out has more paths than atoms), so the daemon must not
 * resolve paths on every call the way the high-level API does, nor keep a
 * path -> inode table.  With the low-level API the inode number is the
 * address of a core tree node (stable until unmount), lookups are one hash
 * probe per component, and reads of tensor data go straight from the
 * node's byte range to a spliced reply without a path in sight.
 *
 * Reads of contiguous tensors are answered with a FUSE_BUF_IS_FD buffer
 * over the checkpoint file, so libfuse splices the bytes from the page
 * cache of the checkpoint into /dev/fuse: no private copy.  The tree's
 * shape never changes while mounted, so attributes and entries are cached
 * by the kernel for a day, and file pages are kept between opens
 * (keep_cache) unless a write changed them since (notify.c drops them).
 */
#include "mount.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/cancel.h"
#include "log.h"
#include "ptfs.h"
#include "push.h"

/* Names and sizes never change while mounted: let the kernel cache them. */

/* The largest request libfuse can take (FUSE_MAX_MAX_PAGES pages). */
#define PTFS_MAX_IO (1u << 20)

/*
 * The request size that still splices.  libfuse splices a reply through a
 * pipe that must hold the data plus a header; pipes grow in powers of two
 * up to /proc/sys/fs/pipe-max-size (1 MiB by default), so 1 MiB requests
 * would need a 2 MiB pipe, fail to grow it, and fall back to copying every
 * reply.  Half the pipe limit (512 KiB by default) keeps the zero-copy
 * path: measured 2.5x faster than 1 MiB requests that copy
 * (docs/BENCHMARKS.md).
 */
static unsigned io_size(void)
{
	unsigned long max = 0;
	FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");

	if (f) {
		if (fscanf(f, "%lu", &max) != 1)
			max = 0;
		fclose(f);
	}
	if (max < 2 * 65536)
		return 65536;
	return max / 2 < PTFS_MAX_IO ? (unsigned)(max / 2) : PTFS_MAX_IO;
}

/* The size a file shows: its write state's, else the node's. */
static uint64_t file_size(struct ptfs *fs, struct pt_node *n, uint64_t size)
{
	const struct pt_storage *st = pt_node_viewed_storage(n);
	struct wfile *w;

	if (!st || !ov_busy(ov_get(fs->ov, st, false)))
		return size;
	pthread_mutex_lock(&fs->wlock);
	HASH_FIND_PTR(fs->wfiles, &n, w);
	if (w)
		size = w->size;
	pthread_mutex_unlock(&fs->wlock);
	return size;
}

/*
 * Permissions (the kernel enforces them: the mount always passes
 * default_permissions).  Every file and directory is owned by the
 * checkpoint's owner and group; a tensor file has the checkpoint's read
 * and write bits (write only when it can be written and the mount is not
 * read-only), other files its read bits, a directory its read bits plus
 * search where it may be read.  A 0600 checkpoint gives 0600 tensors and
 * 0500 directories: other users see nothing, even with allow_other.
 */
static mode_t dir_mode(mode_t m)
{
	mode_t r = m & 0444;

	return r | (r >> 2);
}

static void fill_stat(struct ptfs *fs, struct pt_node *n, struct stat *st)
{
	struct timespec mt = pt_ckpt_mtime(fs->ck);
	struct pt_nattr a;

	pt_node_attr(n, &a);
	if (a.writable)
		a.size = file_size(fs, n, a.size);
	else if (a.type == PT_NT_FILE && (pt_edit_scalar_node(n) || pt_node_is_sidecar(n))) {
		/* a scalar's text: a new value is written as text; a
		 * NAME.json: a new dtype or shape (mount_tensor.c) */
		(void)ptfs_scalar_size(fs, n, &a.size);
		a.writable = true;
	} else if (a.tensor && ptfs_tfile_size(fs, n, &a.size)) {
		a.writable = true;      /* bytes the mount holds */
	}
	memset(st, 0, sizeof(*st));
	st->st_ino = (ino_t)a.id;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_size = (off_t)a.size;
	st->st_blksize = 4096;
	st->st_blocks = (blkcnt_t)((a.size + 511) / 512);
	st->st_atim = mt;
	st->st_mtim = mt;
	st->st_ctim = mt;
	switch (a.type) {
	case PT_NT_DIR:
		/* entries may be removed, renamed and made (mount_edit.c) */
		st->st_mode = S_IFDIR | dir_mode(fs->mode) |
			      (fs_readonly(fs) ? 0 : (fs->mode & 0200));
		st->st_nlink = 2;
		st->st_size = 0;
		st->st_blocks = 0;
		break;
	case PT_NT_LINK:
		st->st_mode = S_IFLNK | 0777;
		st->st_nlink = 1;
		break;
	case PT_NT_FILE:
		st->st_mode = S_IFREG | (fs->mode & (a.writable && !fs_readonly(fs) ? 0666 : 0444));
		st->st_nlink = 1;
		break;
	}
}

static void ptfs_op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct ptfs *fs = userdata;

	/* A read-only mount needs no per-open state: open() answers ENOSYS
	 * and the kernel stops sending OPEN and RELEASE for files (and FLUSH
	 * after flush() answers ENOSYS), while still keeping each file's
	 * page cache between opens.  Reading every NAME.json of a
	 * 20,000-tensor tree: 60,000 requests become 20,000.  A writable
	 * mount keeps them: a writer's handle carries its write state. */
	if (fs->ro && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT)) {
		conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
		fs->no_open = true;
	}
	/* Listings keep the kernel's adaptive READDIRPLUS (libfuse's
	 * default): a lister that stats gets attributes with the entries
	 * and the kernel then knows every file (no LOOKUP per file, and
	 * sidecars can be pushed, push.c); a plain `ls` or os.walk() gets
	 * names only.  Forcing READDIRPLUS for every listing was measured:
	 * reading every NAME.json after os.walk() of 20,000 tensors 1.58 s
	 * -> 0.96 s, but mount + `ls` + unmount 0.13 s -> 0.31 s (the
	 * kernel makes and later evicts 40,000 inodes), so it is not. */
	/* symlinks (cycles in the pickle) never change: one READLINK each */
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	if (conn->capable & FUSE_CAP_SPLICE_MOVE)
		conn->want |= FUSE_CAP_SPLICE_MOVE;
	/* max_write sets max_pages, which also bounds reads; readahead is
	 * capped by what the kernel offers */
	conn->max_write = io_size();
	conn->max_readahead = PTFS_MAX_IO;
	conn->time_gran = 1;
}

/*
 * Interruption.  A program killed while it waits for a request (SIGKILL
 * of `cat`, `find`) stays in D state until the request is answered: the
 * kernel sends INTERRUPT and waits.  Work that can take long (a generated
 * directory filled by a walk of the tree, tree.json, statistics, a
 * picture, remote bytes) runs under a check installed per request
 * (base/cancel.h): it asks libfuse whether the request was interrupted,
 * or the loop is ending (SIGTERM), and the core ends its work with -EINTR,
 * answered at once.  libfuse marks a request interrupted when INTERRUPT
 * names it whether or not a callback is registered, so none is: a
 * registration takes the session's lock, on every READ.
 */

struct req_guard {
	struct pt_cancel c;
	fuse_req_t req;
	struct fuse_session *se;
};

static bool req_cancelled(void *ctx)
{
	struct req_guard *g = ctx;

	return fuse_req_interrupted(g->req) || (g->se && fuse_session_exited(g->se));
}

/* Before the work of @req; req_end() before its reply frees it. */
static void req_begin(struct req_guard *g, struct ptfs *fs, fuse_req_t req)
{
	g->req = req;
	g->se = fs->se;
	pt_cancel_push(&g->c, req_cancelled, g);
}

static void req_end(struct req_guard *g)
{
	pt_cancel_pop(&g->c);
}

/* The errno a request answers for the core's -@rc: a spent walk budget
 * (-E2BIG) is "too large" to programs, as a directory over its cap is. */
static int reply_errno(int rc)
{
	return rc == -E2BIG ? EFBIG : -rc;
}

/* A generated directory (/.ptfs/stats, /.ptfs/export) that could not be
 * filled: its line, logged once per failure. */
static void log_fill_error(struct ptfs *fs, const struct pt_node *dir)
{
	char msg[512];

	if (pt_tree_take_error(fs->ck, dir, msg, sizeof(msg)))
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: '/.ptfs/%s': %s\n", fs->ckpath,
			 pt_node_name(dir), msg);
}

static void ptfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ptfs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct req_guard g;
	struct pt_node *n;
	int rc = 0;

	req_begin(&g, fs, req);
	n = pt_tree_lookup(fs->ck, node_of(fs, parent), name, &rc);
	if (!n && rc == -ENOENT)
		n = ptfs_gone_lookup(fs, node_of(fs, parent), name);
	if (!n) {
		log_fill_error(fs, node_of(fs, parent));
		req_end(&g);
		fuse_reply_err(req, rc ? reply_errno(rc) : ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = ino_of(fs, n);
	e.attr_timeout = PTFS_TIMEOUT;
	e.entry_timeout = PTFS_TIMEOUT;
	fill_stat(fs, n, &e.attr);      /* may draw a picture */
	req_end(&g);
	fuse_reply_entry(req, &e);
}

static void ptfs_op_getattr(fuse_req_t req, fuse_ino_t ino,
			    struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct req_guard g;
	struct stat st;

	(void)fi;
	req_begin(&g, fs, req);
	fill_stat(fs, node_of(fs, ino), &st);
	req_end(&g);
	fuse_reply_attr(req, &st, PTFS_TIMEOUT);
}

static void ptfs_op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *n = node_of(fs, ino);
	struct pt_nattr a;
	char buf[PATH_MAX];
	ssize_t got;

	pt_node_attr(n, &a);
	if (a.type != PT_NT_LINK || a.size >= sizeof(buf)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	got = pt_node_read(fs->ck, n, buf, sizeof(buf) - 1, 0, NULL);
	if (got < 0) {
		fuse_reply_err(req, (int)-got);
		return;
	}
	buf[got] = '\0';
	fuse_reply_readlink(req, buf);
}

static void ptfs_op_opendir(fuse_req_t req, fuse_ino_t ino,
			    struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct pt_nattr a;

	pt_node_attr(node_of(fs, ino), &a);
	if (a.type != PT_NT_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/*
 * Directory offsets: 1 and 2 are "." and "..", entry i of the table is
 * i + 3.  With readdirplus every entry carries its attributes, so `ls -l`
 * needs no lookup per file.
 */
static void do_readdir(fuse_req_t req, struct req_guard *g, fuse_ino_t ino,
		       size_t size, off_t off, bool plus)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *dir = node_of(fs, ino);
	size_t count = 0, used = 0;
	int rc = pt_tree_count(fs->ck, dir, &count);
	char *buf;
	off_t i;

	if (rc) {
		/* -EFBIG: more entries than max_dir_entries; -E2BIG: a
		 * generated directory whose walk is over budget; -EINTR */
		log_fill_error(fs, dir);
		req_end(g);
		fuse_reply_err(req, reply_errno(rc));
		return;
	}
	buf = malloc(size);
	if (!buf) {
		req_end(g);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (i = off; (uint64_t)i < count + 2; i++) {
		struct fuse_entry_param e;
		struct pt_node *n;
		const char *name;
		size_t need;

		memset(&e, 0, sizeof(e));
		if (i == 0) {
			n = dir;
			name = ".";
		} else if (i == 1) {
			n = pt_node_parent(dir) ? pt_node_parent(dir) : dir;
			name = "..";
		} else {
			n = pt_tree_child(fs->ck, dir, (size_t)(i - 2), &rc);
			if (!n && rc == -ENOENT) {
				rc = 0;         /* removed by an edit: its offset
						 * stays, listed as nothing */
				continue;
			}
			if (!n)
				break;
			name = pt_node_name(n);
		}
		/* a NAME.png too: its size follows from the tensor's
		 * shape, nothing is drawn (core/view/png.c) */
		fill_stat(fs, n, &e.attr);
		if (plus) {
			e.ino = i < 2 || !n ? 0 : ino_of(fs, n);
			e.attr_timeout = PTFS_TIMEOUT;
			e.entry_timeout = PTFS_TIMEOUT;
			need = fuse_add_direntry_plus(req, buf + used, size - used,
						      name, &e, i + 1);
		} else {
			need = fuse_add_direntry(req, buf + used, size - used,
						 name, &e.attr, i + 1);
		}
		if (need > size - used)
			break;
		used += need;
	}
	/* an entry that cannot be made (past max_depth, out of memory)
	 * fails the call when it is the first one, else ends the batch */
	req_end(g);
	if (rc && used == 0)
		fuse_reply_err(req, reply_errno(rc));
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
}

static void ptfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	struct req_guard g;

	(void)fi;
	req_begin(&g, fs_of(req), req);
	do_readdir(req, &g, ino, size, off, false);
}

static void ptfs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
				off_t off, struct fuse_file_info *fi)
{
	struct req_guard g;

	(void)fi;
	req_begin(&g, fs_of(req), req);
	do_readdir(req, &g, ino, size, off, true);
}

/*
 * The checkpoint must not change under the mount: another program that
 * truncates or rewrites it in place would make us serve bytes that do not
 * belong to the tensor.  One fstat per read (cheap next to 1 MiB of data)
 * catches a change of size or mtime; the read then fails with EIO and the
 * problem is logged once.  A file replaced by rename keeps serving the
 * old, consistent bytes through our descriptor.
 */
static bool stat_differs(struct ptfs *fs)
{
	struct pt_error err;

	pt_error_clear(&err);
	return pt_ckpt_check(fs->ck, &err) != 0;
}

/* The one line for a checkpoint that changed under the mount. */
static void log_changed(struct ptfs *fs)
{
	struct pt_error err;

	pt_error_clear(&err);
	if (ptfs_is_url(fs->ckpath) && pt_ckpt_check(fs->ck, &err) != 0)
		/* read-only, nothing to commit: what the server showed */
		fuse_log(FUSE_LOG_ERR,
			 "ptfs: %s; reads now fail with EIO, never mixing two versions; remount it\n",
			 err.msg);
	else
		fuse_log(FUSE_LOG_ERR,
			 "ptfs: %s: the checkpoint changed on disk while mounted (another program truncated or rewrote it); reads fail with EIO, commits are refused; remount it\n",
			 fs->ckpath);
}

static bool checkpoint_changed(struct ptfs *fs)
{
	bool changed = stat_differs(fs);

	if (changed) {
		/* our own commit swaps the file: wait for it and look again */
		ov_commit_barrier(fs->ov);
		changed = stat_differs(fs);
	}
	if (changed && !__atomic_exchange_n(&fs->warned_changed, true, __ATOMIC_ACQ_REL))
		log_changed(fs);
	return changed;
}

static int reply_bytes(void *req, const void *p, size_t n)
{
	fuse_reply_buf(req, p, n);
	return 0;
}

static void do_read(fuse_req_t req, fuse_ino_t ino, size_t size,
		    off_t off, struct fuse_file_info *fi);

/* Reads of generated files may make them (statistics, pictures, export
 * headers): interruptible.  The check is only asked before the reply. */
static void ptfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size,
			 off_t off, struct fuse_file_info *fi)
{
	struct req_guard g;

	req_begin(&g, fs_of(req), req);
	do_read(req, ino, size, off, fi);
	req_end(&g);
}

static void do_read(fuse_req_t req, fuse_ino_t ino, size_t size,
		    off_t off, struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	/* no handle: a file the kernel opened itself (read-only mount) */
	struct fh none = { .node = node_of(fs, ino) };
	struct fh *h = fi->fh ? (struct fh *)(uintptr_t)fi->fh : &none;
	struct pt_node *n = h->node;
	struct pt_nattr a;
	struct pt_error err;
	uint64_t file_off;
	bool extent;
	int fd;
	ssize_t got;
	char *buf;

	pt_node_attr(n, &a);
	if (ov_busy(h->ov) && a.writable)
		a.size = file_size(fs, n, a.size);
	if ((uint64_t)off >= a.size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > a.size - (uint64_t)off)
		size = (size_t)(a.size - (uint64_t)off);
	/* bytes in one piece of the checkpoint's file, with no uncommitted
	 * write among them (the overlay's source refuses those extents):
	 * spliced; every other read of tensor bytes goes through the same
	 * source (pt_node_read), which lays the writes over the file */
	extent = pt_node_extent(fs->ck, n, (uint64_t)off, size, &fd, &file_off);
	if ((a.tensor || extent) && checkpoint_changed(fs)) {
		fuse_reply_err(req, EIO);
		return;
	}
	if (extent) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);

		bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
		bv.buf[0].fd = fd;
		bv.buf[0].pos = (off_t)file_off;
		fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
		return;
	}
	/* held in memory (tree.json...): sent from where it is */
	if (pt_node_send(fs->ck, n, (uint64_t)off, size, reply_bytes, req) != -ENOENT)
		return;
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pt_error_clear(&err);
	got = pt_node_read(fs->ck, n, buf, size, (uint64_t)off, &err);
	if (got == -EINTR) {
		fuse_reply_err(req, EINTR);     /* the reader went away */
	} else if (got < 0 && checkpoint_changed(fs)) {
		fuse_reply_err(req, EIO);       /* said once, by the above */
	} else if (got < 0) {
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: read of '%s' at %lld: %s\n",
			 fs->ckpath, pt_node_name(n), (long long)off,
			 err.msg[0] ? err.msg : strerror((int)-got));
		fuse_reply_err(req, EIO);
	} else {
		if (off == 0 && pt_node_is_sidecar(n))
			ptfs_push_after(fs->push, n);
		fuse_reply_buf(req, buf, (size_t)got);
	}
	free(buf);
}

/* The answer to a truncation of @n that gave @rc. */
static void reply_truncated(fuse_req_t req, struct ptfs *fs, struct pt_node *n,
			    int rc)
{
	struct stat st;

	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	fill_stat(fs, n, &st);
	fuse_reply_attr(req, &st, PTFS_TIMEOUT);
}

static void ptfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			    int to_set, struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *n = node_of(fs, ino);
	struct stat st;
	int rc = 0;

	if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		struct fh tmp, *h = fi ? (struct fh *)(uintptr_t)fi->fh : NULL;
		struct wfile *w;
		uint64_t lo = 0;

		if (fs_readonly(fs)) {
			fuse_reply_err(req, EROFS);
			return;
		}
		if (h ? h->tf != NULL : ptfs_tfile_of(fs, n) != NULL) {
			reply_truncated(req, fs, n, ptfs_tfile_truncate(fs, n,
					(uint64_t)attr->st_size));
			return;
		}
		if (h ? h->scalar : pt_edit_scalar_node(n) || pt_node_is_sidecar(n)) {
			reply_truncated(req, fs, n, ptfs_scalar_truncate(fs, n,
					(uint64_t)attr->st_size));
			return;
		}
		if (!h) {
			/* truncate(2) by path: only while a writer has it open */
			memset(&tmp, 0, sizeof(tmp));
			tmp.node = n;
			if (pt_node_writable_storage(n, &lo)) {
				tmp.lo = lo;
				tmp.ov = ov_get(fs->ov, pt_node_viewed_storage(n), true);
			}
			h = &tmp;
		}
		pthread_mutex_lock(&fs->wlock);
		HASH_FIND_PTR(fs->wfiles, &n, w);
		if (!w || !h->ov)
			rc = -EACCES;
		else
			rc = ptfs_wfile_truncate(fs, h, w, (uint64_t)attr->st_size, ino);
		pthread_mutex_unlock(&fs->wlock);
		if (rc) {
			fuse_reply_err(req, -rc);
			return;
		}
	}
	fill_stat(fs, n, &st);
	fuse_reply_attr(req, &st, PTFS_TIMEOUT);
}

/* An attribute's value @val, or its size when the caller asks (@size 0). */
static void reply_xattr(fuse_req_t req, const char *val, size_t vlen, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, vlen);
	else if (size < vlen)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, vlen);
}

static void ptfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			     size_t size)
{
	struct ptfs *fs = fs_of(req);
	struct pt_buf b;
	const char *p, *end;
	int count;

	/* Only the user namespace is ours.  `ls -l` asks every file for
	 * security.selinux and system.posix_acl_access, and the kernel
	 * caches neither answer for a FUSE file system without POSIX ACLs:
	 * ENODATA would cost two round trips per file (80,000 for a
	 * 20,000-tensor tree).  EOPNOTSUPP is also the truth (no security
	 * labels, no ACLs here), and ls, cp and tar remember it per device
	 * and stop asking. */
	if (strncmp(name, "user.", 5) != 0) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	/* `ptfs umount` asks the root which process to wait for and where
	 * it leaves its verdict (log.h); not listed */
	if (ino == FUSE_ROOT_ID && strcmp(name, "user.ptfs.daemon") == 0 &&
	    ptfs_status_path()) {
		char val[PATH_MAX + 32];
		size_t vlen = (size_t)snprintf(val, sizeof(val), "%ld %s",
					       (long)getpid(), ptfs_status_path());

		reply_xattr(req, val, vlen, size);
		return;
	}
	/* how many reads of tensor bytes the daemon has served, a count
	 * for tests ("ls -l reads no tensor"); not listed */
	if (ino == FUSE_ROOT_ID && strcmp(name, "user.ptfs.tensor_reads") == 0) {
		char val[32];
		size_t vlen = (size_t)snprintf(val, sizeof(val), "%llu",
					       (unsigned long long)pt_ckpt_tensor_reads(fs->ck));

		reply_xattr(req, val, vlen, size);
		return;
	}
	pt_buf_init(&b);
	count = pt_node_xattrs(fs->ck, node_of(fs, ino), &b);
	p = b.p;
	end = b.p ? b.p + b.len : NULL;
	while (count-- > 0 && p < end) {
		const char *val = p + strlen(p) + 1;
		size_t vlen = strlen(val);

		if (strcmp(p, name) == 0) {
			reply_xattr(req, val, vlen, size);
			pt_buf_free(&b);
			return;
		}
		p = val + vlen + 1;
	}
	pt_buf_free(&b);
	fuse_reply_err(req, ENODATA);
}

static void ptfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct ptfs *fs = fs_of(req);
	struct pt_buf b, names;
	const char *p;
	int count;

	pt_buf_init(&b);
	pt_buf_init(&names);
	count = pt_node_xattrs(fs->ck, node_of(fs, ino), &b);
	p = b.p;
	while (count-- > 0) {
		const char *val = p + strlen(p) + 1;

		pt_buf_add(&names, p, strlen(p) + 1);
		p = val + strlen(val) + 1;
	}
	reply_xattr(req, names.p, names.len, size);
	pt_buf_free(&b);
	pt_buf_free(&names);
}

static void ptfs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_namemax = 255;
	fuse_reply_statfs(req, &sv);
}

const struct fuse_lowlevel_ops ptfs_ops = {
	.init = ptfs_op_init,
	.lookup = ptfs_op_lookup,
	.getattr = ptfs_op_getattr,
	.readlink = ptfs_op_readlink,
	.opendir = ptfs_op_opendir,
	.readdir = ptfs_op_readdir,
	.readdirplus = ptfs_op_readdirplus,
	.open = ptfs_op_open,
	.create = ptfs_op_create,
	.read = ptfs_op_read,
	.write = ptfs_op_write,
	.setattr = ptfs_op_setattr,
	.flush = ptfs_op_flush,
	.release = ptfs_op_release,
	.fsync = ptfs_op_fsync,
	.unlink = ptfs_op_unlink,
	.rmdir = ptfs_op_rmdir,
	.mkdir = ptfs_op_mkdir,
	.rename = ptfs_op_rename,
	.getxattr = ptfs_op_getxattr,
	.listxattr = ptfs_op_listxattr,
	.statfs = ptfs_op_statfs,
};
