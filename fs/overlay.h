/* SPDX-License-Identifier: MIT */
/*
 * overlay.h -- uncommitted writes to tensor storages.
 *
 * Writes through the mount land here, never in the checkpoint, until a
 * commit (fsync of a changed file, unmount, SIGTERM).  The overlay is kept
 * per storage, so tensors that share one storage see each other's
 * writes.  It holds only the 64 KiB chunks that were written.  Readers of
 * a storage nobody has opened for writing never touch a lock.
 */
#ifndef PTFS_FS_OVERLAY_H
#define PTFS_FS_OVERLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

#define OV_CHUNK (64u * 1024)

struct ov;
struct ov_st;

struct ov *ov_new(struct pt_ckpt *ck);
/* Takes the overlay's source off the checkpoint (pt_ckpt_set_layer). */
void ov_free(struct ov *o);

/*
 * The checkpoint's file with the uncommitted writes in place, as a source
 * (io/source.h) over pt_ckpt_source(): the layer the mount lays over the
 * checkpoint (pt_ckpt_set_layer), so that every read of tensor bytes --
 * a tensor file, a view gathered from its storage, a generated file made
 * of tensor bytes -- sees them, through one path.  Its extents refuse a
 * range that holds a written chunk (those reads are copied).  Lives as
 * long as @o.
 */
struct pt_source *ov_source(struct ov *o);

/* The overlay of a storage: NULL when it has none and @create is false.
 * Lock-free when it exists. */
struct ov_st *ov_get(struct ov *o, const struct pt_storage *st, bool create);

/* Whether any write is pending on this storage (lock-free). */
bool ov_dirty(const struct ov_st *s);
bool ov_any_dirty(struct ov *o);

/* Write, zero or revert bytes [@off, @off + @n) of the storage.  0 or
 * -errno. */
int ov_write(struct ov *o, struct ov_st *s, const void *buf, size_t n,
	     uint64_t off);
int ov_zero(struct ov *o, struct ov_st *s, uint64_t off, uint64_t n);
int ov_revert(struct ov *o, struct ov_st *s, uint64_t off, uint64_t n);

/*
 * Bytes [@off, @off + @n) of a storage as they are now (its written
 * chunks copied), so that ov_restore() can give them back: a tensor
 * written at a size other than its own goes back to the bytes it had when
 * it was last whole, uncommitted writes included, not to the file's.
 * NULL with -errno in *@rc.  ov_restore(): 0 or -errno (nothing changed).
 */
struct ov_snap;
struct ov_snap *ov_snapshot(struct ov *o, struct ov_st *s, uint64_t off,
			    uint64_t n, int *rc);
int ov_restore(struct ov *o, struct ov_st *s, const struct ov_snap *sn);
void ov_snap_free(struct ov_snap *sn);

/* Commit every dirty storage; on success the overlays are emptied. */
int ov_commit(struct ov *o, struct pt_error *err);

/* Save every dirty storage's written chunks as the checkpoint's pending
 * file (ckpt/pending.h), when a commit failed where nobody can be told:
 * 0 and its path in *@where (malloc()ed), or -errno with @err. */
int ov_save_pending(struct ov *o, const char *state_dir, char **where,
		    struct pt_error *err);

/*
 * The inodes (tensor files over this storage) opened, so that writes
 * through one file can drop the others' page caches.  ov_note_open(): one
 * more handle of @ino (0, or -ENOMEM), and *@fresh: whether the storage's
 * bytes are as they were when @ino was last opened (what the kernel kept
 * of it is right; a file closed meanwhile had none of the drops that
 * writes make).  ov_note_close(): one fewer.  ov_others(): the inodes
 * open now other than @ino, in a malloc()ed array *@out (NULL when out of
 * memory), and how many.
 */
int ov_note_open(struct ov_st *s, uint64_t ino, bool *fresh);
void ov_note_close(struct ov_st *s, uint64_t ino);
size_t ov_others(struct ov_st *s, uint64_t ino, uint64_t **out);

/* Wait until no commit is running. */
void ov_commit_barrier(struct ov *o);

/* Count handles open for writing; ov_busy(): dirty or being written, so
 * reads must take the overlay path (lock-free test). */
void ov_writers(struct ov_st *s, int delta);
bool ov_busy(const struct ov_st *s);

#endif /* PTFS_FS_OVERLAY_H */
