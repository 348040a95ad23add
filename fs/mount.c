/* SPDX-License-Identifier: MIT */
/*
 * mount.c -- the FUSE daemon: `ptfs [options] CHECKPOINT MOUNTPOINT`.
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
#include "ptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include <fuse_lowlevel.h>
#ifdef __GLIBC__
#endif

#include <poll.h>
#include <pthread.h>
#include <uthash.h>
#include <utlist.h>

#include "base/cancel.h"
#include "ckpt/ckpt.h"
#include "ckpt/pending.h"
#include "export/export.h"
#include "log.h"
#include "opts.h"
#include "overlay.h"
#include "notify.h"
#include "push.h"

/* Names and sizes never change while mounted: let the kernel cache them. */
#define PTFS_TIMEOUT 86400.0
/* how long a worker waits for the kernel to drop what a commit or a close
 * made stale: past it (every other worker busy, notify.h) it goes on and
 * the drops follow soon after */
#define PTFS_DROP_WAIT_MS 1000
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

/* A tensor file while handles are open for writing: its size may differ
 * from the tensor's (cp truncates first). */
struct wfile {
	struct pt_node *node;           /* key */
	uint64_t size;                  /* current size */
	uint64_t nbytes;                /* the tensor's size */
	int writers;                    /* handles open for writing */
	bool changed;                   /* written or truncated */
	struct ov_snap *was;            /* the bytes when it was last whole */
	UT_hash_handle hh;
};

/* Per open file (fi->fh). */
struct fh {
	struct pt_node *node;
	struct ov_st *ov;               /* storage overlay (tensor files) */
	uint64_t lo;                    /* file's first byte in the storage */
	bool write;                     /* opened for writing */
	struct fh *prev, *next;         /* fs->handles */
};

struct ptfs {
	struct pt_ckpt *ck;
	const char *ckpath;             /* as given on the command line */
	bool ro;
	bool no_open;                   /* the kernel opens files itself */
	bool singlethread;
	bool draining;                  /* the loop ended: drop nothing (atomic) */
	unsigned conn;                  /* /sys/fs/fuse/connections/N, 0: ? */
	bool may_wait;                  /* a worker may wait for the notifier:
					 * others answer the READs it waits
					 * for (not -s, not max_threads=1) */
	uid_t uid;                      /* the checkpoint's owner ... */
	gid_t gid;
	mode_t mode;                    /* ... and permission bits */
	struct fuse_session *se;
	struct ptfs_push *push;         /* sidecars ahead of readers (not
					 * with one worker: see push.h) */
	struct ptfs_notify *notify;     /* drops the kernel's caches */
	struct ov *ov;
	bool warned_changed;            /* logged that it changed (atomic) */
	pthread_mutex_t wlock;          /* guards wfiles and handles */
	struct wfile *wfiles;
	struct fh *handles;             /* open files: a signal can end the
					 * loop before their RELEASE comes */
	const char *logfile;            /* -o log=FILE, or NULL */
};

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

static struct ptfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct pt_node *node_of(struct ptfs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return pt_tree_root(fs->ck);
	return (struct pt_node *)(uintptr_t)ino;
}

static fuse_ino_t ino_of(struct ptfs *fs, struct pt_node *n)
{
	if (n == pt_tree_root(fs->ck))
		return FUSE_ROOT_ID;
	return (fuse_ino_t)(uintptr_t)n;
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
		st->st_mode = S_IFDIR | dir_mode(fs->mode);
		st->st_nlink = 2;
		st->st_size = 0;
		st->st_blocks = 0;
		break;
	case PT_NT_LINK:
		st->st_mode = S_IFLNK | 0777;
		st->st_nlink = 1;
		break;
	case PT_NT_FILE:
		st->st_mode = S_IFREG | (fs->mode & (a.writable && !fs->ro ? 0666 : 0444));
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
			if (!n)
				break;
			name = pt_node_name(n);
		}
		if (i >= 2 && pt_node_lazy_size(n)) {
			/* made on first lookup, not by a listing: no
			 * attributes here (ino 0: the kernel looks it up) */
			e.attr.st_mode = S_IFREG;
			e.attr.st_ino = (ino_t)pt_node_id(n);
			n = NULL;
		} else {
			fill_stat(fs, n, &e.attr);
		}
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
static int do_truncate(struct ptfs *fs, struct fh *h, struct wfile *w,
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

static void ptfs_op_open(fuse_req_t req, fuse_ino_t ino,
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
		if (fs->ro) {
			fuse_reply_err(req, EROFS);
			return;
		}
		if (!a.writable) {
			if (a.tensor)
				log_err(fs, n, "open for writing",
					"not writable (a non-contiguous view, an array inside the pickle, or a compressed record): write the tensor it views");
			fuse_reply_err(req, EACCES);
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
				rc = do_truncate(fs, h, w, 0, ino);
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

/* Reply to a read of a tensor whose storage has pending writes: file
 * segments spliced, overlay segments copied. */
static void read_overlay(fuse_req_t req, struct ptfs *fs, struct fh *h,
			 size_t size, off_t off)
{
	struct ov_st *ov = h->ov; /* @h may be freed once we have replied */
	struct ov_seg segs[40];
	struct fuse_bufvec *bv;
	size_t i, n;

	bv = calloc(1, sizeof(*bv) + 40 * sizeof(struct fuse_buf));
	if (!bv) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n = ov_read_begin(ov, h->lo + (uint64_t)off, size, segs, 40);
	bv->count = n;
	for (i = 0; i < n; i++) {
		int fd;
		uint64_t pos;

		bv->buf[i].size = segs[i].len;
		if (segs[i].mem) {
			bv->buf[i].mem = (void *)(uintptr_t)segs[i].mem;
		} else if (pt_ckpt_extent(fs->ck, segs[i].file_off,
					  segs[i].len, &fd, &pos)) {
			bv->buf[i].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
			bv->buf[i].fd = fd;
			bv->buf[i].pos = (off_t)pos;
		} else {
			break;  /* writable checkpoints are local files */
		}
	}
	if (i < n)
		fuse_reply_err(req, EIO);
	else
		fuse_reply_data(req, bv, 0);
	ov_read_done(ov);
	free(bv);
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
	uint64_t file_off, lo;
	bool busy = ov_busy(h->ov);
	int fd;
	ssize_t got;
	char *buf;

	pt_node_attr(n, &a);
	if (busy && a.writable)
		a.size = file_size(fs, n, a.size);
	if ((uint64_t)off >= a.size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > a.size - (uint64_t)off)
		size = (size_t)(a.size - (uint64_t)off);
	if ((a.tensor || pt_node_extent(fs->ck, n, (uint64_t)off, size, &fd, &file_off)) &&
	    checkpoint_changed(fs)) {
		fuse_reply_err(req, EIO);
		return;
	}
	if (busy && pt_node_writable_storage(n, &lo)) {
		read_overlay(req, fs, h, size, off);
		return;
	}
	/* a generated file's extent is the checkpoint's bytes: not while
	 * uncommitted writes are pending (reads apply them) */
	if (!busy && !(pt_node_generated(n) && ov_any_dirty(fs->ov)) &&
	    pt_node_extent(fs->ck, n, (uint64_t)off, size, &fd, &file_off)) {
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

static void ptfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
			  size_t size, off_t off, struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct wfile *w;
	int rc;

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

		if (fs->ro) {
			fuse_reply_err(req, EROFS);
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
			rc = do_truncate(fs, h, w, (uint64_t)attr->st_size, ino);
		pthread_mutex_unlock(&fs->wlock);
		if (rc) {
			fuse_reply_err(req, -rc);
			return;
		}
	}
	fill_stat(fs, n, &st);
	fuse_reply_attr(req, &st, PTFS_TIMEOUT);
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
static void ptfs_op_flush(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct fh *h = (struct fh *)(uintptr_t)fi->fh;
	struct wfile *w = NULL;
	bool wrong = false;

	(void)ino;
	if (!h) {
		/* opened by the kernel (read-only mount): nothing to check,
		 * and ENOSYS stops further FLUSH requests */
		fuse_reply_err(req, ENOSYS);
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
static void ptfs_op_release(fuse_req_t req, fuse_ino_t ino,
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
	if (h && h->write) {
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

/* Commit every pending change; 0 or a negative errno (-EINVAL: a file
 * whose size differs from its tensor's; -ENOSPC, -EDQUOT; else -EIO).
 * @live: the session loop runs (the kernel's caches are worth keeping
 * right). */
static int commit_all(struct ptfs *fs, const char *why, bool live)
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

/*
 * The loop ended (unmount, or a signal): nobody can be told of a failure
 * now.  A file left at a size other than its tensor's (a signal while it
 * was open) is dropped, one line each; what cannot be committed is saved
 * as the checkpoint's pending file (ckpt/pending.h) for `ptfs recover`.
 * 0 when every change is in the checkpoint, else -1.
 */
static int final_commit(struct ptfs *fs, const char *why)
{
	struct wfile *w, *tmp;
	struct pt_error err;
	char *where = NULL;
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
	if (commit_all(fs, why, false) == 0)
		return 0;
	pt_error_clear(&err);
	if (ov_save_pending(fs->ov, ptfs_state_dir(true), &where, &err) == 0)
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: the changes are kept in %s: 'ptfs recover %s' applies them\n",
			 fs->ckpath, where, fs->ckpath);
	else
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: the changes could not be committed nor kept (%s): they are lost\n",
			 fs->ckpath, err.msg);
	free(where);
	return -1;
}

static void ptfs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
			  struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	(void)fi;
	fuse_reply_err(req, -commit_all(fs_of(req), "fsync", true));
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

static const struct fuse_lowlevel_ops ptfs_ops = {
	.init = ptfs_op_init,
	.lookup = ptfs_op_lookup,
	.getattr = ptfs_op_getattr,
	.readlink = ptfs_op_readlink,
	.opendir = ptfs_op_opendir,
	.readdir = ptfs_op_readdir,
	.readdirplus = ptfs_op_readdirplus,
	.open = ptfs_op_open,
	.read = ptfs_op_read,
	.write = ptfs_op_write,
	.setattr = ptfs_op_setattr,
	.flush = ptfs_op_flush,
	.release = ptfs_op_release,
	.fsync = ptfs_op_fsync,
	.getxattr = ptfs_op_getxattr,
	.listxattr = ptfs_op_listxattr,
	.statfs = ptfs_op_statfs,
};

/* Reads of views (gathered by core) see the overlay too. */
static int storage_hook(void *ctx, const struct pt_storage *st, void *buf,
			size_t n, uint64_t off)
{
	struct ptfs *fs = ctx;
	struct ov_st *s = ov_get(fs->ov, st, false);

	if (!ov_dirty(s))
		return 1;
	return ov_read_copy(fs->ov, s, buf, n, off);
}

/* ---- command line ---- */

struct cmdline {
	const char *checkpoint;
	const char *mountpoint;
	int nonopts;
	bool ro;
	bool help;
	bool version;
	bool bad;
	bool fsname;
	struct pt_ckpt_opts copts;      /* nested, commit= and the limits
					 * (opts.c) */
	char *remote_opt[5];    /* cache_dir= ... s3_endpoint= (fs/remote.c) */
	int previews;                   /* -o previews */
	int nonempty;                   /* -o nonempty (mountpoint.c) */
	char *logfile;                  /* -o log=FILE (log.h) */
};

enum { KEY_HELP, KEY_VERSION, KEY_RO, KEY_RW, KEY_IGNORE, KEY_FSNAME };

static const struct fuse_opt ptfs_opts[] = {
#define PTFS_OPT(t, p) { t, offsetof(struct cmdline, p), 1 }
	PTFS_OPT("cache_dir=%s", remote_opt[0]),
	PTFS_OPT("cache_size=%s", remote_opt[1]),
	PTFS_OPT("timeout=%s", remote_opt[2]),
	PTFS_OPT("cafile=%s", remote_opt[3]),
	PTFS_OPT("s3_endpoint=%s", remote_opt[4]),
	PTFS_OPT("previews", previews),
	PTFS_OPT("nonempty", nonempty),
	PTFS_OPT("log=%s", logfile),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("ro", KEY_RO),
	FUSE_OPT_KEY("rw", KEY_RW),
	FUSE_OPT_KEY("fsname=", KEY_FSNAME),
	/*
	 * mount(8) and fstab options that mean nothing to a FUSE daemon:
	 * mount.fuse3 strips some (user, _netdev, nofail, ...), mount(8)
	 * others (defaults, x-*), but not when called another way, and
	 * libfuse rejects what it does not know.  The atime family is moot:
	 * every file shows the checkpoint's own times.
	 */
	FUSE_OPT_KEY("defaults", KEY_IGNORE),
	FUSE_OPT_KEY("auto", KEY_IGNORE),
	FUSE_OPT_KEY("noauto", KEY_IGNORE),
	FUSE_OPT_KEY("user", KEY_IGNORE),
	FUSE_OPT_KEY("nouser", KEY_IGNORE),
	FUSE_OPT_KEY("users", KEY_IGNORE),
	FUSE_OPT_KEY("owner", KEY_IGNORE),
	FUSE_OPT_KEY("group", KEY_IGNORE),
	FUSE_OPT_KEY("nofail", KEY_IGNORE),
	FUSE_OPT_KEY("_netdev", KEY_IGNORE),
	FUSE_OPT_KEY("comment=", KEY_IGNORE),
	FUSE_OPT_KEY("relatime", KEY_IGNORE),
	FUSE_OPT_KEY("norelatime", KEY_IGNORE),
	FUSE_OPT_KEY("strictatime", KEY_IGNORE),
	FUSE_OPT_KEY("nostrictatime", KEY_IGNORE),
	FUSE_OPT_KEY("lazytime", KEY_IGNORE),
	FUSE_OPT_KEY("nolazytime", KEY_IGNORE),
	FUSE_OPT_KEY("diratime", KEY_IGNORE),
	FUSE_OPT_KEY("nodiratime", KEY_IGNORE),
	FUSE_OPT_KEY("iversion", KEY_IGNORE),
	FUSE_OPT_KEY("noiversion", KEY_IGNORE),
	FUSE_OPT_KEY("mand", KEY_IGNORE),
	FUSE_OPT_KEY("nomand", KEY_IGNORE),
	FUSE_OPT_KEY("silent", KEY_IGNORE),
	FUSE_OPT_KEY("loud", KEY_IGNORE),
	FUSE_OPT_END
};

static int opt_proc(void *data, const char *arg, int key,
		    struct fuse_args *outargs)
{
	struct cmdline *c = data;

	(void)outargs;
	switch (key) {
	case KEY_HELP:
		c->help = true;
		return 0;
	case KEY_VERSION:
		c->version = true;
		return 0;
	case KEY_RO:
		c->ro = true;
		return 1; /* also a kernel mount option */
	case KEY_RW:
		c->ro = false; /* the last of ro/rw wins, as in mount(8) */
		return 1;
	case KEY_FSNAME:
		c->fsname = true;
		return 1;
	case KEY_IGNORE:
		return 0;
	case FUSE_OPT_KEY_NONOPT:
		if (c->nonopts == 0)
			c->checkpoint = arg;
		else if (c->nonopts == 1)
			c->mountpoint = arg;
		else if (!c->bad) {
			fprintf(stderr, "ptfs: extra argument '%s'\n", arg);
			c->bad = true;
		}
		c->nonopts++;
		return 0;
	case FUSE_OPT_KEY_OPT:
		/* -o nested, -o max_depth=N ...: ours; the rest libfuse's */
		switch (ptfs_opt_apply(&c->copts, arg)) {
		case 1:
			return 0;
		case -1:
			c->bad = true;
			return 0;
		}
		/* fall through */
	default:
		if (strncmp(arg, "x-", 2) == 0)
			return 0; /* fstab notes for other tools (x-systemd.*) */
		if (arg[0] == '-' && strcmp(arg, "-f") != 0 &&
		    strcmp(arg, "-d") != 0 && strcmp(arg, "-s") != 0 &&
		    strcmp(arg, "-o") != 0 && strncmp(arg, "-o", 2) != 0) {
			if (!c->bad)    /* the first problem only: one line */
				fprintf(stderr, "ptfs: unknown option '%s'\n", arg);
			c->bad = true;
		}
		return 1;
	}
}

/*
 * The kernel's FUSE readahead is capped at the bdi default (128 KiB); the
 * per-mount bdi can be raised by root, as mergerfs does.  Find the mount's
 * device number in mountinfo (no FUSE request involved) and ask for 1 MiB;
 * failure only costs speed.  Returns the device's minor number, which
 * names the connection under /sys/fs/fuse/connections (0: not found).
 */
static unsigned raise_readahead(const char *mountpoint)
{
	char real[PATH_MAX], line[4096], path[128];
	unsigned conn = 0;
	FILE *f;

	if (!realpath(mountpoint, real))
		return 0;
	f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		char mp[PATH_MAX];

		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, mp) != 3)
			continue;
		if (strcmp(mp, real) != 0 || !strstr(line, " - fuse"))
			continue;
		conn = min;
		snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb",
			 maj, min);
		{
			FILE *w = fopen(path, "w");
			if (w) {
				fputs("1024\n", w);
				fclose(w);
			}
		}
	}
	fclose(f);
	return conn;
}

/*
 * Name the mount after the checkpoint (-o fsname=/abs/model.pt), as
 * sshfs names it after the remote path: mount(8), findmnt and df then show
 * which file is mounted.  The user's own fsname= wins.
 */
static int add_fsname(struct fuse_args *args, const char *checkpoint)
{
	char real[PATH_MAX + 8] = "fsname=";
	char *opts = NULL;
	int rc;

	if (!realpath(checkpoint, real + 7))
		return 0; /* pt_ckpt_open reports the problem */
	rc = fuse_opt_add_opt_escaped(&opts, real);
	if (rc == 0)
		rc = fuse_opt_add_arg(args, "-o");
	if (rc == 0)
		rc = fuse_opt_add_arg(args, opts);
	free(opts);
	return rc;
}

/* Before detaching: a rolled-back commit, then the checkpoint's warnings. */
static void print_open_notes(struct pt_ckpt *ck, const char *ckpath)
{
	const char *warn = pt_ckpt_warnings(ck);

	if (*pt_ckpt_recovery(ck))
		fprintf(stderr, "ptfs: %s\n", pt_ckpt_recovery(ck));
	while (*warn) {
		const char *e = strchr(warn, '\n');
		int len = e ? (int)(e - warn) : (int)strlen(warn);

		fprintf(stderr, "ptfs: %s: warning: %.*s\n", ckpath, len, warn);
		warn += len + (e ? 1 : 0);
	}
}

/* The mount shows the checkpoint's owner and modes (see dir_mode()), and
 * the kernel checks every caller against them (default_permissions). */
static int take_permissions(struct ptfs *fs, const char *ckpath,
			    struct fuse_args *args)
{
	struct stat st;
	bool was_ro;

	if (ptfs_is_url(ckpath)) {
		/* a remote object has no owner here: the mounting user's,
		 * readable by all (remote mounts are read-only) */
		fs->uid = getuid();
		fs->gid = getgid();
		fs->mode = 0444;
		fs->ro = true;
		return fuse_opt_add_arg(args, "-odefault_permissions");
	}
	if (stat(ckpath, &st) != 0) {
		fprintf(stderr, "ptfs: %s: %s\n", ckpath, strerror(errno));
		return -1;
	}
	fs->uid = st.st_uid;
	fs->gid = st.st_gid;
	fs->mode = st.st_mode & 0777;
	was_ro = fs->ro;
	if (!fs->ro && faccessat(AT_FDCWD, ckpath, W_OK, AT_EACCESS) != 0) {
		fprintf(stderr, "ptfs: %s: %s: mounted read-only\n", ckpath,
			errno == EROFS ? "on a read-only filesystem" :
					 "not writable by this user");
		fs->ro = true;
	}
	if (!fs->ro && S_ISREG(st.st_mode)) {
		/* every commit writes beside the real file (a temporary or
		 * the journal): a directory we cannot write would make every
		 * write fail at fsync and be lost at unmount */
		char *real = realpath(ckpath, NULL);
		char *slash = real ? strrchr(real, '/') : NULL;

		if (slash)
			*(slash == real ? slash + 1 : slash) = '\0';
		if (real && faccessat(AT_FDCWD, real, W_OK, AT_EACCESS) != 0) {
			fprintf(stderr, "ptfs: %s: its directory %s is %s (commits write beside the file): mounted read-only\n",
				ckpath, real, errno == EROFS ? "on a read-only filesystem" :
				"not writable by this user");
			fs->ro = true;
		}
		free(real);
	}
	/* what the kernel's mount table shows (findmnt, /proc/mounts) is
	 * what the mount does */
	if (fs->ro && !was_ro && fuse_opt_add_arg(args, "-oro") != 0)
		return -1;
	return fuse_opt_add_arg(args, "-odefault_permissions");
}

/* The command line into @c and @fopts: PTFS_EXIT_OK to go on (or, with
 * c->version, to stop: the version was printed), else the exit code. */
static int parse_cmdline(struct fuse_args *args, struct cmdline *c,
			 struct fuse_cmdline_opts *fopts)
{
	memset(c, 0, sizeof(*c));
	pt_ckpt_opts_default(&c->copts);
	if (fuse_opt_parse(args, c, ptfs_opts, opt_proc) != 0 || c->bad)
		return PTFS_EXIT_USAGE;
	if (c->help)
		return PTFS_EXIT_HELP;
	if (c->version) {
		ptfs_version(stdout);
		return PTFS_EXIT_OK;
	}
	if (!c->checkpoint || !c->mountpoint) {
		fprintf(stderr, "ptfs: %s\n", !c->checkpoint ? "missing CHECKPOINT" : "missing MOUNTPOINT");
		return PTFS_EXIT_USAGE;
	}
	/* not a usage error: the command line was right */
	if (ptfs_mountpoint_check(c->mountpoint, c->nonempty != 0) != 0)
		return PTFS_EXIT_ERROR;
	if (fuse_opt_add_arg(args, c->mountpoint) != 0 ||
	    fuse_parse_cmdline(args, fopts) != 0)
		return PTFS_EXIT_USAGE;
	return PTFS_EXIT_OK;
}

/* Serve requests until unmounted or signalled; the loop's result. */
static int serve(struct fuse_session *se, const struct fuse_cmdline_opts *fopts)
{
	struct fuse_loop_config *loop;
	int rc;

	if (fopts->singlethread) {
		rc = fuse_session_loop(se);
	} else {
		loop = fuse_loop_cfg_create();
		if (!loop) {
			rc = -ENOMEM;
		} else {
			fuse_loop_cfg_set_clone_fd(loop, (unsigned)fopts->clone_fd);
			/* UINT_MAX means "not given": keep libfuse's default */
			if (fopts->max_idle_threads <= 100000)
				fuse_loop_cfg_set_idle_threads(loop, fopts->max_idle_threads);
			if (fopts->max_threads > 0 && fopts->max_threads <= 100000)
				fuse_loop_cfg_set_max_threads(loop, fopts->max_threads);
			rc = fuse_session_loop_mt(se, loop);
			fuse_loop_cfg_destroy(loop);
		}
	}
	return rc;
}

/* The remote options given with -o, to fs/remote.c ("key=value"). */
static int remote_options(const struct cmdline *c)
{
	static const char *const keys[] = { "cache_dir", "cache_size",
		"timeout", "cafile", "s3_endpoint" };
	static char buf[5][4200];   /* kept: the options point into it */
	size_t k;

	for (k = 0; k < 5; k++) {
		if (!c->remote_opt[k])
			continue;
		snprintf(buf[k], sizeof(buf[k]), "%s=%s", keys[k],
			 c->remote_opt[k]);
		if (ptfs_remote_option(buf[k]) != 1)
			return -1;
	}
	return 0;
}

/*
 * A drop still waits: the request holding its page was lost (libfuse
 * drops a request read as the loop ends), and nothing but the end of the
 * connection frees the page, its program, and our thread.  The process
 * exit cannot end it: the thread's write to /dev/fuse holds the device
 * open.  The kernel's control file system can (root or the mount's owner;
 * mounted by systemd at boot).
 */
static void abort_connection(struct ptfs *fs)
{
	char path[96];
	FILE *f;

	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", fs->conn);
	f = fs->conn ? fopen(path, "w") : NULL;
	if (f) {
		fputs("1\n", f);
		fclose(f);
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: requests were lost as the loop ended: connection aborted\n",
			 fs->ckpath);
	} else {
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: requests were lost as the loop ended and %s cannot be written: programs waiting on the mount stay blocked until it is\n",
			 fs->ckpath, fs->conn ? path : "/sys/fs/fuse/connections/N/abort");
	}
}

/*
 * The loop ended (a signal) while the notifier may be dropping pages: a
 * drop can wait for a page that a WRITE or READ still queued in the
 * kernel holds locked (a partial page being written, a readahead), and
 * nobody reads the queue now.  Answer requests here, one at a time,
 * queueing no more drops, until the notifier is idle (at most 5 s: the
 * commit and the unmount come next).  libfuse hands out no request of a
 * session marked as ended: the mark is reset first.
 */
static void drain(struct ptfs *fs)
{
	struct fuse_buf buf;
	struct timespec t0, t;
	int fd = fuse_session_fd(fs->se);
	int res;

	__atomic_store_n(&fs->draining, true, __ATOMIC_RELEASE);
	if (ptfs_notify_idle(fs->notify))
		return;
	fuse_session_reset(fs->se);
	memset(&buf, 0, sizeof(buf));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!ptfs_notify_idle(fs->notify)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec >= 5)
			break;
		if (poll(&p, 1, 50) <= 0)
			continue;
		res = fuse_session_receive_buf(fs->se, &buf);
		if (res == -EINTR || res == -EAGAIN)
			continue;
		if (res <= 0)
			break;
		fuse_session_process_buf(fs->se, &buf);
	}
	free(buf.mem);
	fuse_session_exit(fs->se);
	/* a drop under way on a connection that is already gone ends on
	 * its own: give it a moment before deciding it is stuck */
	if (!ptfs_notify_idle(fs->notify) &&
	    !ptfs_notify_wait(fs->notify, 1000))
		abort_connection(fs);
}

/* Mount @fs on the mountpoint, serve until unmounted or signalled, commit
 * what is pending and unmount: an exit code. */
static int mount_and_serve(struct ptfs *fs, const struct fuse_cmdline_opts *fopts)
{
	struct fuse_session *se = fs->se;
	int rc;

	if (fuse_set_signal_handlers(se) != 0)
		return PTFS_EXIT_ERROR;
	if (ptfs_log_open(fs->logfile, !fopts->foreground) != 0) {
		fuse_remove_signal_handlers(se);
		return PTFS_EXIT_ERROR;
	}
	if (fuse_session_mount(se, fopts->mountpoint) != 0) {
		fprintf(stderr, "ptfs: cannot mount on %s\n", fopts->mountpoint);
		fuse_remove_signal_handlers(se);
		return PTFS_EXIT_ERROR;
	}
	fs->conn = raise_readahead(fopts->mountpoint);
	if (fuse_daemonize(fopts->foreground) != 0) {
		fuse_session_unmount(se);
		fuse_remove_signal_handlers(se);
		return PTFS_EXIT_ERROR;
	}
	if (!fopts->foreground || fs->logfile)
		ptfs_log_detached();
	if (ptfs_status_init() != 0)
		fuse_log(FUSE_LOG_WARNING, "ptfs: %s: no state directory for the status file: 'ptfs umount' cannot wait for this mount\n",
			 fs->ckpath);
	/* its thread is made after fuse_daemonize(): a fork keeps none */
	fs->notify = ptfs_notify_new(se);
	if (!fs->notify) {
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: out of memory\n", fs->ckpath);
		rc = PTFS_EXIT_ERROR;
	} else {
		rc = serve(se, fopts);
		ptfs_log_keep();        /* the lines from here on: the verdict's */
		drain(fs);
		/* the loop returns the signal number after SIGTERM/SIGINT/SIGHUP */
		if (final_commit(fs, rc > 0 ? "signal" : "unmount") != 0 || rc < 0)
			rc = PTFS_EXIT_ERROR;
		else
			rc = PTFS_EXIT_OK;
	}
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	ptfs_status_write(rc == PTFS_EXIT_OK);
	return rc;
}

int ptfs_mount_main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts fopts;
	struct fuse_session *se = NULL;
	struct cmdline c;
	struct pt_error err;
	struct ptfs fs;
	char found[PATH_MAX];
	int rc = PTFS_EXIT_ERROR;

	memset(&fs, 0, sizeof(fs));
	memset(&fopts, 0, sizeof(fopts));
	rc = parse_cmdline(&args, &c, &fopts);
	if (rc != PTFS_EXIT_OK || c.version) {
		fuse_opt_free_args(&args);
		return rc;
	}
	rc = PTFS_EXIT_ERROR;
	c.checkpoint = ptfs_url_hide(c.checkpoint);   /* never a secret */
	if (!c.fsname && add_fsname(&args, c.checkpoint) != 0) {
		fuse_opt_free_args(&args);
		return PTFS_EXIT_ERROR;
	}
	if (remote_options(&c) != 0) {
		rc = PTFS_EXIT_USAGE;
		goto out;
	}
	c.copts.previews = c.previews != 0;
	c.copts.lean = true;    /* a daemon keeps what it reads for long */
	/* a writable mount may roll an interrupted commit back; a read-only
	 * one never writes (ckpt.h) */
	c.copts.recover = !c.ro;
	ptfs_heap_reserve();
	pt_error_clear(&err);
	if (ptfs_open_checkpoint(c.checkpoint, &c.copts, &fs.ck, &err) != 0) {
		ptfs_report_open(c.checkpoint, &err);
		goto out;
	}
	ptfs_view_attach(fs.ck);
	ptfs_heap_settle();      /* the open's scratch goes back */
	print_open_notes(fs.ck, c.checkpoint);
	fs.ckpath = c.checkpoint;
	fs.ro = c.ro || !pt_ckpt_writable(fs.ck);
	if (!c.ro && !pt_ckpt_writable(fs.ck)) {
		if (ptfs_is_url(c.checkpoint))
			fprintf(stderr, "ptfs: %s: remote checkpoint: mounted read-only\n",
				c.checkpoint);
		else
			fprintf(stderr, "ptfs: %s: %s: mounted read-only\n",
				c.checkpoint, pt_ckpt_format(fs.ck));
		/* a read-only kernel mount: opens for writing fail with
		 * EROFS in the VFS, before any request */
		if (fuse_opt_add_arg(&args, "-oro") != 0)
			goto out;
	}
	if (!fs.ro && !ptfs_is_url(c.checkpoint) &&
	    pt_pending_find(c.checkpoint, ptfs_state_dir(false), found, sizeof(found))) {
		/* a new commit would make the saved writes older than the
		 * file they are for */
		fprintf(stderr, "ptfs: %s: mounted read-only until 'ptfs recover %s' applies or discards the writes kept in %s\n",
			c.checkpoint, c.checkpoint, found);
		fs.ro = true;
		if (fuse_opt_add_arg(&args, "-oro") != 0)
			goto out;
	}
	fs.logfile = c.logfile;
	fs.singlethread = fopts.singlethread;
	fs.may_wait = !fopts.singlethread && fopts.max_threads != 1;
	pthread_mutex_init(&fs.wlock, NULL);
	fs.ov = ov_new(fs.ck);
	if (!fs.ov)
		goto out;
	pt_ckpt_set_storage_hook(fs.ck, storage_hook, &fs);
	if (take_permissions(&fs, c.checkpoint, &args) != 0)
		goto out;
	/* /.ptfs/export: the export forms as generated files (issue 14) */
	(void)pt_export_mount_files(fs.ck);
	se = fuse_session_new(&args, &ptfs_ops, sizeof(ptfs_ops), &fs);
	if (!se) {
		rc = PTFS_EXIT_USAGE;
		goto out;
	}
	fs.se = se;
	/* pushes need a second worker (push.h) */
	if (!fopts.singlethread && fopts.max_threads != 1)
		fs.push = ptfs_push_new(se, fs.ck);
	rc = mount_and_serve(&fs, &fopts);
out:
	/* a thread left waiting keeps the session (notify.h) */
	if (ptfs_notify_free(fs.notify) && se)
		fuse_session_destroy(se);
	ptfs_push_free(fs.push);
	ov_free(fs.ov);
	{
		struct wfile *w, *tmp;
		HASH_ITER(hh, fs.wfiles, w, tmp) {
			HASH_DEL(fs.wfiles, w);
			ov_snap_free(w->was);
			free(w);
		}
	}
	while (fs.handles) {
		struct fh *h = fs.handles;

		fs.handles = h->next;
		free(h);
	}
	pt_ckpt_close(fs.ck);
	for (size_t k = 0; k < 5; k++)
		free(c.remote_opt[k]);
	free(c.logfile);
	free(fopts.mountpoint);
	fuse_opt_free_args(&args);
	return rc;
}
