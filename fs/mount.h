/* SPDX-License-Identifier: MIT */
/*
 * mount.h -- what the daemon's files share (fs/mount*.c): the mount's
 * state, an open file's handle, a written file's state.
 *
 *   mount.c        the FUSE operations: lookups, attributes, listings,
 *                  reads, extended attributes
 *   mount_write.c  open files and writes: handles, write state,
 *                  truncation, close, commits
 *   mount_main.c   the daemon: command line, mount, serve, drain, unmount
 *
 * mount_main.c calls the other two, mount.c calls mount_write.c.
 */
#ifndef PTFS_FS_MOUNT_H
#define PTFS_FS_MOUNT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <fuse_lowlevel.h>
#include <uthash.h>

#include "ckpt/ckpt.h"
#include "notify.h"
#include "overlay.h"

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

/* The mount a request is for; the node of inode @ino and back (the inode
 * number is the node's address, the root's FUSE_ROOT_ID). */
static inline struct ptfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static inline struct pt_node *node_of(struct ptfs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return pt_tree_root(fs->ck);
	return (struct pt_node *)(uintptr_t)ino;
}

static inline fuse_ino_t ino_of(struct ptfs *fs, struct pt_node *n)
{
	if (n == pt_tree_root(fs->ck))
		return FUSE_ROOT_ID;
	return (fuse_ino_t)(uintptr_t)n;
}

/* mount.c: every request the daemon answers. */
extern const struct fuse_lowlevel_ops ptfs_ops;

/* mount_write.c: the requests of open files and writes. */
void ptfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ptfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		   size_t size, off_t off, struct fuse_file_info *fi);
void ptfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ptfs_op_release(fuse_req_t req, fuse_ino_t ino,
		     struct fuse_file_info *fi);
void ptfs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		   struct fuse_file_info *fi);

/* Truncate tensor file @w (open through @h, inode @ino) to @size: 0 or a
 * negative errno.  Call with fs->wlock held. */
int ptfs_wfile_truncate(struct ptfs *fs, struct fh *h, struct wfile *w,
			uint64_t size, fuse_ino_t ino);

/* The loop ended: commit what is pending, or keep it for `ptfs recover`;
 * 0 when every change is in the checkpoint, else -1 (logged). */
int ptfs_final_commit(struct ptfs *fs, const char *why);

#endif /* PTFS_FS_MOUNT_H */
