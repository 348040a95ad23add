/* SPDX-License-Identifier: MIT */
/*
 * pending.h -- writes a mount could not commit, kept for a person to apply
 * or discard: FILE.ptfs-pending beside the checkpoint.
 *
 * A mount commits at unmount or on a signal, where no program can be told
 * that the commit failed (no space, the file changed under the mount, an
 * I/O error).  The bytes are then saved here instead of being dropped, and
 * every ptfs command that opens the checkpoint says so until
 * `ptfs recover FILE` applies them (pt_pending_apply(), through the same
 * safe commit as every write) or `ptfs recover --discard FILE` removes them.
 *
 * The file is created O_EXCL with mode 0600, owned by the checkpoint's
 * owner, written whole, fsynced, and given its name only then (a crash
 * leaves ".FILE.ptfs-pending.XXXXXX", never a partial pending file).  It
 * is read only when it is a regular file with one link, owned by the
 * checkpoint's owner (or by the reader), writable by nobody else, and
 * every CRC holds: one planted by another user is refused, never applied.
 * When the directory cannot take it (the commit may have failed for want
 * of space there) it goes to @state_dir as NAME-HASH.ptfs-pending, named
 * by the checkpoint's real path (a replaced checkpoint keeps its path).
 *
 * It is bound to the checkpoint as the mount last knew it (device, inode,
 * size, mtime): the bytes are applied by storage key and offset only while
 * that still holds, or with @force (the file was changed by another
 * program; the keys and sizes are still checked).
 *
 * Writes to an ONNX model's external data lie in data files beside it:
 * the pending file then names each such file (as the model names it) with
 * its identity as the mount knew it, every record says which file its
 * storage lies in, and each is checked like the checkpoint (changed
 * meanwhile: refused unless @force; a storage now in another file:
 * refused).
 *
 * Layout (little-endian): "PTFSPEND", u32 version (1, or 2 when data
 * files are named), u32 header size 64, u64 device, u64 inode, u64 size,
 * i64 mtime seconds, u32 nanoseconds, u32 record count, u32 CRC-32 of
 * bytes 0..55, u32 data file count (version 1: 0).  Version 2: then per
 * data file u32 name length (1..4096), u32 0, u64 device, u64 inode, u64
 * size, i64 mtime seconds, u32 nanoseconds, u32 0, the name padded with
 * zeros to 8 bytes; then u32 CRC-32 of the u32 count and the entries, u32
 * 0.  Then per record u32 key length (1..4096), u32 file (0: the
 * checkpoint's own; i: data file i, 1-based; always 0 in version 1), u64
 * storage offset, u64 length, the key padded with zeros to 8 bytes, the
 * bytes, u32 CRC-32 of the record so far, u32 0; then "PTFSPEOF".  A
 * storage's records come together, sorted and disjoint.  A file without
 * data files is written as version 1, which every ptfs reads.
 *
 * Version 3 keeps the structural edits too (a mount's rm, mv, mkdir, new
 * scalar values and tensors: ckpt/editlog_i.h), in the order they were
 * made: version 2's layout (the table of data files always there, maybe
 * empty), and after the records, before "PTFSPEOF": u32 edit count
 * (>= 1), u32 layout (1: the paths name a --nested tree, 2: -o suffix,
 * 4: a removed list item left a hole, as in a mount), u32 CRC-32 of
 * these 8 bytes, u32 0; then per edit u32 kind (1 rm, 2 mv, 3 mkdir, 4
 * scalar, 5 new tensor, 6 tensor in place of one), u32 field count (1,
 * 2, 1, 2, 4, 4), each field a u64 length and its bytes padded with
 * zeros to 8, then u32 CRC-32 of the edit so far, u32 0.  The fields:
 * the tree path; then mv's target path, a scalar's text as written (up
 * to 1 MiB, no NUL), or a tensor's dtype, its shape (rank u64 values,
 * rank <= 64) and its bytes.  pt_pending_apply() makes the edits again
 * in memory (any refused: nothing written), commits the writes, then the
 * edits (pt_edit_commit()); when only that fails the edits are written
 * alone over the file, bound to the checkpoint as it is then.
 */
#ifndef PTFS_CORE_CKPT_PENDING_H
#define PTFS_CORE_CKPT_PENDING_H

#include <stdbool.h>
#include <stddef.h>

#include "ckpt/ckpt.h"

/*
 * Save the new bytes of @c[0 .. @n) (their ranges, or whole storages),
 * and the structural edits made on @ck since its last commit (unless
 * pt_pending_edits_lost()), as the pending file of @ck.  *@where gets its path (malloc()ed).  0, or
 * -errno with one line in @err when neither place could take them.
 */
int pt_pending_save(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		    const char *state_dir, char **where, struct pt_error *err);

/*
 * Whether the checkpoint at @path has a pending file (beside it, or in
 * @state_dir): 0 none, 1 with its path in @found (@cap bytes).
 */
int pt_pending_find(const char *path, const char *state_dir, char *found,
		    size_t cap);

/*
 * Apply the pending file @pending to @ck (opened for writing) and remove
 * it.  0 with one line in @note (what was applied), or -errno with one
 * line in @err and both files as they were: -ESTALE when the checkpoint
 * changed since the mount saved it and !@force, -EBADMSG for a damaged
 * file, -EPERM for one this user must not trust.
 */
int pt_pending_apply(struct pt_ckpt *ck, const char *pending, bool force,
		     char *note, size_t cap, struct pt_error *err);

/*
 * Why the structural edits made on @ck since its last commit cannot be
 * kept by pt_pending_save() (an edit its log cannot hold, editlog_i.h),
 * or NULL: none were made, or they are kept with the writes.
 */
const char *pt_pending_edits_lost(const struct pt_ckpt *ck);

/* Remove @pending after the same trust checks: 0 or -errno. */
int pt_pending_discard(const struct pt_ckpt *ck, const char *pending,
		       struct pt_error *err);

#endif /* PTFS_CORE_CKPT_PENDING_H */
