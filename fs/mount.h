/* SPDX-License-Identifier: MIT */
/*
 * mount.h -- what the daemon's files share (fs/mount*.c): the mount's
 * state, an open file's handle, a written file's state.
 *
 *   mount.c        the FUSE operations: lookups, attributes, listings,
 *                  reads, extended attributes
 *   mount_write.c  open files and writes: handles, write state,
 *                  truncation, close, commits
 *   mount_edit.c   structural edits: rm, rmdir, mv, mkdir, and the text
 *                  files of scalars; their commit
 *   mount_tensor.c new tensors and new shapes or dtypes: files made by
 *                  create, NAME.json written, tensors written whole
 *   mount_main.c   the daemon: command line, mount, serve, drain, unmount
 *
 * mount_main.c calls the other three, mount.c calls mount_write.c, and
 * mount.c, mount_write.c and mount_main.c call mount_edit.c and
 * mount_tensor.c, which calls mount_edit.c.
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

/* How long the kernel keeps entries and attributes (s), and how long a
 * worker waits for the kernel's caches to be dropped (ms). */
#define PTFS_TIMEOUT 86400.0
#define PTFS_DROP_WAIT_MS 1000

/* A scalar's text file while handles are open for writing: the text
 * written, which becomes the value at the last writer's close
 * (mount_edit.c). */
struct sfile {
	struct pt_node *node;           /* key */
	char *text;                     /* len bytes (malloc()ed) */
	size_t len;
	int writers;
	bool changed;                   /* written or truncated */
	UT_hash_handle hh;
};

/* NAME.json (or NAME.png) of a tensor that rm removed: `rm -r` read it
 * in the listing and removes it next (mount_edit.c). */
struct gone {
	UT_hash_handle hh;
	struct pt_node *node;           /* its node before the rm */
	char key[];                     /* "PARENT-ADDRESS/NAME.json" */
};

/*
 * A tensor whose bytes the mount holds (mount_tensor.c): one made by
 * create(2), or one a NAME.json gave another shape or dtype.  Its file is
 * written into @buf, which becomes the tensor (a new value, a new node)
 * at the last writer's close when its size is right.  Kept until unmount.
 */
struct tfile {
	struct pt_node *node;           /* key: the tensor file's node now */
	const char *dtype;              /* what it must be written as */
	uint32_t rank;
	int64_t shape[PT_EDIT_MAX_RANK];
	uint64_t nbytes;
	bool any_size;                  /* made without NAME.json: uint8,
					 * one dimension, any size */
	bool whole;                     /* holds bytes written for it (else
					 * zeros a NAME.json declared) */
	struct pt_value *was;           /* not whole: the value to put back
					 * at unmount, NULL: remove it */
	uint8_t *buf;                   /* the file as written, size bytes */
	uint64_t size, cap;
	bool loaded;                    /* buf is the file (else the node) */
	bool changed;                   /* written or truncated */
	int writers;
	UT_hash_handle hh;
};

/* Bytes handed to the graph (a tensor's storage until unmount). */
struct held {
	struct held *next;
	uint8_t *p;
};

/* Per open file (fi->fh). */
struct fh {
	struct pt_node *node;
	struct ov_st *ov;               /* storage overlay (tensor files) */
	uint64_t lo;                    /* file's first byte in the storage */
	bool write;                     /* opened for writing */
	bool scalar;                    /* a scalar's text (struct sfile) */
	bool wrote;                     /* written through this handle */
	bool spec;                      /* a NAME.json (with scalar) */
	struct tfile *tf;               /* a tensor the mount holds */
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
	struct sfile *sfiles;           /* under wlock */
	pthread_mutex_t elock;          /* one structural edit at a time;
					 * guards edits */
	unsigned edits;                 /* structural edits not committed */
	struct gone *gone;              /* sidecars of removed tensors */
	bool restructured;              /* a structural commit rewrote the
					 * file: no more writes (atomic) */
	struct tfile *tfiles;           /* under elock */
	struct held *held;              /* under elock */
};

/* Writes are refused: a read-only mount, or one whose checkpoint a
 * structural commit rewrote (the tree describes the old file's layout). */
static inline bool fs_readonly(struct ptfs *fs)
{
	return fs->ro || __atomic_load_n(&fs->restructured, __ATOMIC_ACQUIRE);
}

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
void ptfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		    mode_t mode, struct fuse_file_info *fi);
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

/* mount_edit.c: structural edits, committed with the writes. */
void ptfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void ptfs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void ptfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		   mode_t mode);
void ptfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		    fuse_ino_t newparent, const char *newname,
		    unsigned int flags);
/* A scalar's text file opened for writing through @h (@trunc: O_TRUNC):
 * 0 or a negative errno. */
int ptfs_scalar_open(struct ptfs *fs, struct fh *h, bool trunc);
/* Write to / truncate the text of @h's scalar: bytes written or 0, or a
 * negative errno. */
ssize_t ptfs_scalar_write(struct ptfs *fs, struct fh *h, const char *buf,
			  size_t size, off_t off);
int ptfs_scalar_truncate(struct ptfs *fs, struct pt_node *n, uint64_t size);
/* The size of @n's text while it is being written, into *@size. */
bool ptfs_scalar_size(struct ptfs *fs, struct pt_node *n, uint64_t *size);
/* The text written to @h's file (a scalar's, a NAME.json) when @h is its
 * last writer and it changed since last asked (malloc()ed,
 * NUL-terminated, *@len bytes), else NULL with *@rc 0 (-ENOMEM). */
char *ptfs_scalar_text(struct ptfs *fs, struct fh *h, size_t *len, int *rc);
/* A close of @h (inode @ino) after it wrote: the last writer's makes the
 * text the scalar's new value; 0, or -EINVAL (logged) with the old value
 * kept.  The handle's end (RELEASE) takes a change no close took (a
 * truncation alone), its failure only logged. */
int ptfs_scalar_flush(struct ptfs *fs, struct fh *h, fuse_ino_t ino);
void ptfs_scalar_release(struct ptfs *fs, struct fh *h, fuse_ino_t ino);
/* Commit the structural edits (one rewrite of the file), after the
 * tensor writes: 0 or a negative errno (logged). */
int ptfs_edits_commit(struct ptfs *fs, const char *why);
/* Whether the uncommitted structural edits cannot be kept in a pending
 * file (their log lost one, ckpt/pending.h): then logged as lost. */
bool ptfs_edits_lost(struct ptfs *fs);
/* The node of @name in @dir when it is the sidecar of a tensor rm removed
 * (a lookup finds it, for its unlink), else NULL. */
struct pt_node *ptfs_gone_lookup(struct ptfs *fs, struct pt_node *dir,
				 const char *name);
/* Free what the scalar files and removed sidecars kept (after the loop). */
void ptfs_edits_free(struct ptfs *fs);
/* For mount_tensor.c: an edit's start and end (edit_begin(), edit_end()),
 * and the tree path of @name in @dir (malloc()ed; NULL with *@rc). */
int ptfs_edit_begin(struct ptfs *fs);
int ptfs_edit_end(struct ptfs *fs, int rc, const char *what,
		  const struct pt_error *err);
char *ptfs_edit_path(struct ptfs *fs, struct pt_node *dir, const char *name,
		     int *rc);

/* mount_tensor.c: new tensors, new shapes and dtypes. */
/* A new file @name in @dir: a tensor NAME (uint8, any size), or NAME.json
 * of a new tensor NAME to be declared; its node in *@n.  0 or -errno. */
int ptfs_tfile_create(struct ptfs *fs, struct pt_node *dir, const char *name,
		      struct pt_node **n);
/* The tensor the mount holds at @n, or NULL. */
struct tfile *ptfs_tfile_of(struct ptfs *fs, struct pt_node *n);
/* Its size while written, into *@size (false: not one of them). */
bool ptfs_tfile_size(struct ptfs *fs, struct pt_node *n, uint64_t *size);
/* Open for writing through @h (@trunc: O_TRUNC); write; truncate. */
int ptfs_tfile_open(struct ptfs *fs, struct fh *h, bool trunc);
ssize_t ptfs_tfile_write(struct ptfs *fs, struct fh *h, const char *buf,
			 size_t size, off_t off);
int ptfs_tfile_truncate(struct ptfs *fs, struct pt_node *n, uint64_t size);
/* A close of @h: the last writer's makes what it wrote the tensor, or
 * fails with -EINVAL at a wrong size (RELEASE drops it, logged). */
int ptfs_tfile_flush(struct ptfs *fs, struct fh *h);
void ptfs_tfile_release(struct ptfs *fs, struct fh *h);
/* A NAME.json written: applied at its last writer's close (flush) or at
 * its release: a tensor of that dtype and shape at NAME. */
int ptfs_spec_flush(struct ptfs *fs, struct fh *h);
void ptfs_spec_release(struct ptfs *fs, struct fh *h);
/* Before a commit: tensors written whole become the tensor; -EINVAL
 * (logged) while one is declared but not written whole, or open at
 * another size.  @last (unmount): those are dropped instead, logged. */
int ptfs_tfiles_settle(struct ptfs *fs, const char *why, bool last);
void ptfs_tfiles_free(struct ptfs *fs);

#endif /* PTFS_FS_MOUNT_H */
