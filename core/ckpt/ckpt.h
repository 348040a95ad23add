/* SPDX-License-Identifier: MIT */
/*
 * ckpt.h -- an opened checkpoint and the tree of LAYOUT.md over it.
 *
 * This is the API the front ends use (the FUSE daemon in fs/, the ls/cat/
 * info subcommands).  pt_ckpt_open() detects the container from its bytes,
 * runs the safe pickle decoder, interprets tensors and validates every
 * tensor's byte range against its storage: after it returns, nothing about
 * the file is trusted that has not been checked.
 *
 * The tree is built lazily: a node exists once it has been looked up or
 * listed.  Nodes live until pt_ckpt_close(), so their addresses are stable
 * identifiers (the FUSE front end uses them as inode numbers).  All
 * functions here are thread-safe once pt_ckpt_open() has returned; node
 * creation takes a short internal lock, reads of existing nodes and of file
 * contents take none.
 */
#ifndef PTFS_CORE_CKPT_H
#define PTFS_CORE_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "container/journal.h"  /* enum pt_commit_way */
#include "base/buf.h"
#include "base/dirlist.h"
#include "base/error.h"
#include "base/pt_limits.h"

struct pt_ckpt;
struct pt_node;

struct pt_ckpt_opts {
	struct pt_limits limits;   /* caps; pt_ckpt_opts_default() fills them */
	enum pt_commit_way commit; /* -o commit=WAY */
	bool nested;               /* show dotted str keys ("a.b.c") as
				    * directories a/b/c (LAYOUT.md allows it
				    * as an option; off by default) */
	bool previews;             /* NAME.png beside tensors of >= 1
				    * element */
	bool suffix;               /* tensor files are NAME.tensor, so
				    * file managers type them by name
				    * (LAYOUT.md "NAME.tensor with -o
				    * suffix") */
	bool lean;                 /* the checkpoint stays open (a mount):
				    * what the file can give again is not
				    * kept in memory (data.pkl's bytes, read
				    * again for /.ptfs/pickle.txt) */
	bool editable;             /* keep every argument of the pickle,
				    * for structural edits (pt_edit_*()):
				    * a torch.save archive's tensors then
				    * cost their argument nodes too */
	bool recover;              /* may write to recover from an
				    * interrupted commit (writable mounts,
				    * `ptfs set`, `ptfs recover`): roll back
				    * or remove its journal, set a bad one
				    * aside, remove dead temporary files.
				    * false (the default, read-only uses):
				    * nothing on disk changes, and a file
				    * that needs a roll-back fails to open
				    * with -EUCLEAN (pt_ckpt_open()) */
};

/* The defaults: limits of pt_limits_default(), nested off, recover off. */
void pt_ckpt_opts_default(struct pt_ckpt_opts *o);

/*
 * Which file of the directory listed in @e[0 .. @n) stands for its
 * checkpoint (docs/FORMATS.md, "Recognition"): a DCP .metadata, else the
 * sharded index (*.index.json, one naming safetensors shards first), else
 * the only weights file.  Its name, malloc()ed, in *@file; or -errno
 * with one line saying why the directory is no checkpoint.
 */
int pt_ckpt_pick(const struct pt_dir_entry *e, size_t n, char **file,
		 struct pt_error *err);

/*
 * Open the checkpoint at @path.  On failure *@out is NULL and @err holds one
 * line naming the problem (the caller adds the file name).  The file stays
 * open (read-only) until pt_ckpt_close().
 *
 * First an interrupted commit's leftovers beside the file are dealt with
 * (pt_journal_recover(), container/journal.h): with opts.recover, a
 * journal is rolled back, removed or set aside and dead temporary files
 * are removed; without it nothing on disk changes, and a file whose
 * valid journal must be rolled back fails with -EUCLEAN and "needs
 * recovery: run 'ptfs recover FILE'".  What was done or found is one line
 * in pt_ckpt_recovery().
 */
int pt_ckpt_open(struct pt_ckpt **out, const char *path,
		 const struct pt_ckpt_opts *opts, struct pt_error *err);

/* Same over a memory buffer (tests and fuzzers); @mem is borrowed. */
int pt_ckpt_open_mem(struct pt_ckpt **out, const void *mem, size_t len,
		     const char *name, const struct pt_ckpt_opts *opts,
		     struct pt_error *err);

/*
 * Open the checkpoint whose bytes @src gives (any source: a remote object,
 * core/remote).  @src is owned from here on, also on failure; a directory
 * form (DCP, a directory of shards) needs a path: open its .metadata or
 * *.index.json instead.
 */
struct pt_source;
int pt_ckpt_open_source(struct pt_ckpt **out, struct pt_source *src,
			const struct pt_ckpt_opts *opts, struct pt_error *err);

/* Close the checkpoint and free everything it owns, its tree included
 * (NULL is fine).  No node or storage of it may be used afterwards. */
void pt_ckpt_close(struct pt_ckpt *ck);

/* Human-readable summary (what `ptfs info` prints), appended to @out. */
void pt_ckpt_info(struct pt_ckpt *ck, struct pt_buf *out);

/* Warnings (dangerous globals, ...), one per line, or "" (borrowed). */
const char *pt_ckpt_warnings(const struct pt_ckpt *ck);

/* Container name: "torch.save zip", "legacy", ... (static string). */
const char *pt_ckpt_format(const struct pt_ckpt *ck);

/* Read exactly @n bytes at @off of the checkpoint's file (its source,
 * io/source.h); 0 or -errno with a message in @err. */
int pt_ckpt_read(const struct pt_ckpt *ck, void *buf, size_t n,
		 uint64_t off, struct pt_error *err);

/* 0 while the bytes the checkpoint reads are those it opened (or last
 * committed); -ESTALE when another program rewrote or truncated the file
 * in place; another -errno when that cannot be told.  One fstat. */
int pt_ckpt_check(const struct pt_ckpt *ck, struct pt_error *err);

/* Modification time of the checkpoint when it was opened (or last
 * committed); 0 when unknown. */
struct timespec pt_ckpt_mtime(const struct pt_ckpt *ck);

/* ---- the tree ---- */

enum pt_ntype {
	PT_NT_DIR,
	PT_NT_FILE,
	PT_NT_LINK,
};

/* What a node is, for stat() and for the front ends. */
struct pt_nattr {
	enum pt_ntype type;
	uint64_t size;          /* st_size: bytes of the file, or of the link
				 * target, or entries for a directory */
	uint64_t id;            /* small unique number (st_ino) */
	bool tensor;            /* a tensor or array file (has metadata) */
	bool writable;          /* a tensor file that writes may change */
};

/* The root directory (never NULL; made at open). */
struct pt_node *pt_tree_root(struct pt_ckpt *ck);
/* A node's attributes (type, size, id, tensor, writable) into *@a. */
void pt_node_attr(const struct pt_node *n, struct pt_nattr *a);
/* Its encoded name ("" for the root), valid until close. */
const char *pt_node_name(const struct pt_node *n);
/* Its directory, NULL for the root. */
struct pt_node *pt_node_parent(const struct pt_node *n);

/* The child of directory @dir named @name, creating it on first use;
 * NULL (with errno-style *@rc = -ENOENT or -ENOTDIR, -ENOMEM) if none. */
struct pt_node *pt_tree_lookup(struct pt_ckpt *ck, struct pt_node *dir,
			       const char *name, int *rc);

/* The number of entries of directory @dir (without "." and "..") in *@n:
 * the indexes pt_tree_child() takes, an entry a structural edit removed
 * among them (its index stays until the commit: offsets of a listing
 * under way stay right).
 * Returns 0, or -ENOTDIR, -EFBIG (more than max_dir_entries: the
 * directory cannot be listed, every call says so at once), -ENOMEM, with
 * *@n 0. */
int pt_tree_count(struct pt_ckpt *ck, struct pt_node *dir, size_t *n);
/* The same without the entries edits removed: what a listing shows. */
int pt_tree_entries(struct pt_ckpt *ck, struct pt_node *dir, size_t *n);

/* Entry @i (0-based, listing order) of @dir, created on first use; NULL
 * with *@rc (may be NULL) = -ENOENT past the end or for an entry an edit
 * removed (listings skip it), or the error of pt_tree_count(), or -EFBIG
 * past max_depth, -ENOMEM. */
struct pt_node *pt_tree_child(struct pt_ckpt *ck, struct pt_node *dir,
			      size_t i, int *rc);

/* What pt_tree_walk() shows its visitor for each entry. */
struct pt_walk {
	struct pt_node *node;
	const char *path;               /* @top_path + '/' + names, no
					 * leading '/' when @top_path is "" */
	size_t path_len;
	uint32_t depth;                 /* 1 for the entries of the top */
};

/* Visitor results besides 0 (go on, into directories too) and a negative
 * errno (stop; pt_tree_walk() returns it). */
#define PT_WALK_SKIP 1                  /* do not enter this directory */
#define PT_WALK_STOP 2                  /* stop; pt_tree_walk() returns 0 */

/* pt_tree_walk() flags.  PT_WALK_ALL: also sidecars (NAME.json) and
 * /.ptfs, which are otherwise skipped without making their nodes.
 * PT_WALK_ONCE: a value shown at several places (references that
 * multiply, tied modules) is entered at the first only; the visitor still
 * sees every place, but not what lies below the later ones.  For
 * consumers that need each node once, not each path. */
#define PT_WALK_ALL 1u
#define PT_WALK_ONCE 2u
/* PT_WALK_CUT: when the budget is spent the walk just ends, returning
 * PT_WALK_STOP (a positive 2) instead of -E2BIG (tree.json says
 * "truncated": true then). */
#define PT_WALK_CUT 4u
/* PT_WALK_WHOLE: the consumer needs every entry or none (stat, diff,
 * export, /.ptfs/stats): a directory whose entries alone pass what is
 * left of the budget fails the walk (-E2BIG) as it is entered. */
#define PT_WALK_WHOLE 8u

typedef int (*pt_walk_fn)(void *ctx, const struct pt_walk *w);

/*
 * The one walk of the tree: every consumer that visits more than one
 * directory (ptfs ls, stat, diff, export, /.ptfs/tree.json, /.ptfs/stats
 * and /.ptfs/export in a mount, the fuzzers) goes through it.  Depth
 * first, in listing order, below directory @top, with an explicit stack
 * (no recursion over untrusted nesting; the tree is cut at max_depth).
 *
 * One budget, from the checkpoint's limits: at most max_walk_entries
 * entries and max_walk_bytes bytes of their paths; past either the walk
 * stops with -E2BIG and one line in @err, before the node of the entry
 * over the cap is made (-E2BIG, not -EFBIG: a consumer can tell a spent
 * budget, which ends everything, from a directory over max_dir_entries,
 * which is only left out; front ends show both as "too large").  Every 256 entries it asks pt_cancelled()
 * (base/cancel.h) and stops with -EINTR ("interrupted") when told to.
 *
 * A directory that cannot be listed (-EFBIG past max_dir_entries or
 * max_depth, ...) is left out and the walk goes on; the first such error
 * is returned at the end, its line in @err ("/PATH: cannot be listed:
 * ...").  Returns 0, the visitor's negative errno, or those; -ENOTDIR
 * when @top is not a directory.  @err may be NULL.
 */
int pt_tree_walk(struct pt_ckpt *ck, struct pt_node *top, const char *top_path,
		 unsigned flags, pt_walk_fn fn, void *ctx, struct pt_error *err);

/* Resolve a '/'-separated path from the root (no symlinks followed). */
struct pt_node *pt_tree_path(struct pt_ckpt *ck, const char *path, int *rc);

/*
 * When the contents of @node are held in memory (text, bytes, links,
 * generated files such as tree.json), call @send with its bytes at @off,
 * at most @n of them, where they are (no copy; a commit cannot swap them
 * meanwhile), and return what @send returns; -ENOENT for every other
 * file, which pt_node_read() copies out.
 */
int pt_node_send(struct pt_ckpt *ck, struct pt_node *node, uint64_t off,
		 size_t n, int (*send)(void *ctx, const void *p, size_t n),
		 void *ctx);

/*
 * Read @n bytes at @off of file (or link target) @node into @buf.  Returns
 * the bytes read (short only at the end of the file) or a negative errno
 * (-EIO when the checkpoint cannot be read any more).
 */
ssize_t pt_node_read(struct pt_ckpt *ck, struct pt_node *node, void *buf,
		     size_t n, uint64_t off, struct pt_error *err);

/*
 * When bytes [@off, @off + @n) of @node are one contiguous range of a file
 * (the checkpoint, or the shard holding the tensor), store that file's
 * descriptor in *@fd and the range's offset in *@file_off and return true:
 * the caller may then splice or pread it directly (zero copy).
 */
bool pt_node_extent(struct pt_ckpt *ck, const struct pt_node *node,
		    uint64_t off, uint64_t n, int *fd, uint64_t *file_off);

/* Append the tensor metadata JSON (NAME.json's text) of a tensor file or
 * its sidecar to @out; false (nothing appended) for other nodes. */
bool pt_node_tensor_json(struct pt_ckpt *ck, const struct pt_node *node,
			 struct pt_buf *out);

/* Extended attributes of a tensor file: fill @out with "name\0value\0"...
 * pairs (user.ptfs.dtype, user.ptfs.shape, ...).  Returns the count. */
int pt_node_xattrs(struct pt_ckpt *ck, struct pt_node *node,
		   struct pt_buf *out);

/* Short description for listings: "float32 [4096, 4096]" (empty if not a
 * tensor); appended to @out. */
void pt_node_describe(struct pt_ckpt *ck, struct pt_node *node,
		      struct pt_buf *out);

/* Write the whole tree with metadata as JSON (what /.ptfs/tree.json holds),
 * bounded by @max_entries entries and by the walk's budget (a multiplying
 * tree is cut there and says "truncated": true).  0, or -EINTR (@err) when
 * pt_cancelled() ended it: @out then holds no valid document. */
int pt_tree_json(struct pt_ckpt *ck, struct pt_buf *out, uint64_t max_entries,
		 struct pt_error *err);

/* ---- writing ---- */

struct pt_storage;

/*
 * The storage a writable tensor file views: *@lo gets the offset of the
 * file's first byte inside the storage.  NULL for anything that cannot be
 * written (not a tensor, a non-contiguous view, a deflated record, an
 * array inside the pickle, a container without the rewriter).
 */
const struct pt_storage *pt_node_writable_storage(const struct pt_node *n, uint64_t *lo);

/* Bytes of a storage, and a small unique index (0 .. count-1). */
uint64_t pt_storage_size(const struct pt_storage *st);
size_t pt_storage_index(const struct pt_storage *st);
size_t pt_ckpt_storage_count(const struct pt_ckpt *ck);
/* Offset of the storage's first byte in the file that holds it. */
uint64_t pt_storage_file_offset(const struct pt_storage *st);

/*
 * The file a storage lies in.  Writable storages lie in the checkpoint's
 * own file, or, for an ONNX model, in a data file beside it (external
 * data): pt_storage_file_ckpt() is then the checkpoint over that file (its
 * source, its layer: pt_ckpt_set_layer()) and pt_storage_file_name() the
 * name the model gives it; else @ck and NULL.  pt_storage_read_file():
 * bytes [@off, @off + @n) of the storage as that file holds them (under
 * any layer); 0 or -errno with @err.
 */
struct pt_ckpt *pt_storage_file_ckpt(struct pt_ckpt *ck,
				     const struct pt_storage *st);
const char *pt_storage_file_name(const struct pt_storage *st);
int pt_storage_read_file(const struct pt_ckpt *ck, const struct pt_storage *st,
			 void *buf, size_t n, uint64_t off,
			 struct pt_error *err);

/* New contents for one storage. */
struct pt_commit {
	const struct pt_storage *st;
	/* Fill @buf with bytes [@off, @off + @n) of the new contents; 0 or
	 * a negative errno.  May be called more than once for a range. */
	int (*read)(void *ctx, void *buf, size_t n, uint64_t off);
	void *ctx;
	/* Optional: the only bytes that may differ from the file, as
	 * @n_ranges sorted, disjoint (offset, length) pairs inside the
	 * storage; NULL: any byte may.  Commits then cost these bytes. */
	const uint64_t (*ranges)[2];
	size_t n_ranges;
};

/*
 * Commit new storage contents into the checkpoint file atomically, through
 * its format's commit hook (fmt/fmt.h: the ZIP64 rewriter for torch.save
 * archives, copy-and-replace for safetensors; both write a temporary file
 * beside it, fsync, rename, fsync the directory; an ONNX model's external
 * data files are written the same way, all of a commit's files together:
 * pt_patch_apply_files(), container/journal.h).  Refuses with -ESTALE when the file changed on disk since it
 * was opened (size, mtime or inode), and leaves the original untouched on
 * any failure.  On success the checkpoint reads the new file from then on
 * (same layout: sizes never change) and later commits compare against it.
 * Not thread-safe against reads of the same storages' bytes: the caller
 * holds its own lock over its overlay.
 */
int pt_ckpt_commit(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		   struct pt_error *err);

/* ---- structural edits (surgery) ----
 *
 * On a checkpoint opened with opts.editable.  Each edit changes the value
 * graph the way the same edit of the loaded object in Python would, and
 * the tree at once (paths name the edited tree); nothing reaches the file
 * before pt_edit_commit().  Each returns 0, or a negative errno with one
 * line naming the path: -ENOENT, -EEXIST, -ENOTDIR (the directory is not
 * a mapping), -EPERM (not a value of the object, the root, an object's
 * args), -EINVAL (a name the tree cannot show as it is, a value of the
 * wrong type), -EROFS (a format that cannot be restructured, TorchScript).
 *
 *   pt_edit_remove()  the entry leaves its dict, list or set
 *   pt_edit_move()    rename a key in place, move a value to another
 *                     mapping (into it, when @to is a mapping), or onto
 *                     an existing file's entry
 *   pt_edit_mkdir()   a new empty dict
 *   pt_edit_scalar()  a new value for an int, float, bool, str or None,
 *                     as text (one final newline dropped): see README
 *   pt_edit_tensor()  a new tensor at a new @path, or with @replace in
 *                     place of the tensor there (a Parameter stays one)
 *   pt_edit_rename()  every str key of the mapping @dir through @fn,
 *                     refused when two keys would be one; a state dict's
 *                     _metadata prefixes follow
 *   pt_edit_commit()  the format's restructure: a new file, atomically
 *   pt_edit_size()    the size the new file would have
 */
struct pt_edit_tensor {
	const char *dtype;              /* torch name: "float32", "bfloat16" */
	uint32_t rank;
	const int64_t *shape;
	const void *bytes;              /* numel * itemsize bytes, in the
					 * checkpoint's byte order; the
					 * caller's, kept until the commit */
	uint64_t len;
};

/* Append @key's new text to @out and return 1, or 0 to keep it (nothing
 * appended), or a negative errno. */
typedef int (*pt_rename_fn)(void *ctx, const uint8_t *key, size_t len,
			    struct pt_buf *out);

int pt_edit_remove(struct pt_ckpt *ck, const char *path, struct pt_error *err);
int pt_edit_move(struct pt_ckpt *ck, const char *from, const char *to,
		 struct pt_error *err);
int pt_edit_mkdir(struct pt_ckpt *ck, const char *path, struct pt_error *err);
int pt_edit_scalar(struct pt_ckpt *ck, const char *path, const void *text,
		   size_t len, struct pt_error *err);
int pt_edit_tensor(struct pt_ckpt *ck, const char *path,
		   const struct pt_edit_tensor *t, bool replace,
		   struct pt_error *err);
int pt_edit_rename(struct pt_ckpt *ck, const char *dir, pt_rename_fn fn,
		   void *ctx, struct pt_buf *log, struct pt_error *err);
int pt_edit_commit(struct pt_ckpt *ck, struct pt_error *err);
/* From now on an item removed from a list (pt_edit_remove(), or moved
 * away) leaves a hole: the other items keep their names (indexes) until
 * pt_edit_commit() closes the holes, as a mount's inodes need (`rm -r`
 * of a list removes 0, 1, 2, ... in turn).  Without it the items after
 * it move up at once, as `del l[i]` does.  A tuple's items may then be
 * removed too (`rm -r` of the tuple): one that keeps some is written as
 * the shorter tuple. */
void pt_edit_keep_names(struct pt_ckpt *ck);
/* Is @n the text file of a scalar that pt_edit_scalar() can change (an
 * int, float, bool, str or None in a dict, list or object's state)? */
bool pt_edit_scalar_node(const struct pt_node *n);
int pt_edit_size(struct pt_ckpt *ck, uint64_t *size, struct pt_error *err);

/* ---- a mount's new tensors ----
 *
 * pt_edit_spec_parse() reads the text written to a NAME.json: "dtype" (a
 * torch dtype, not a packed one) and "shape" are needed, "stride" may be
 * given and must then be C order, every other key (those ptfs's own
 * NAME.json carries) is ignored; 0, or -EINVAL with one line.
 * pt_edit_value() is the value a path names now (NULL: none), which
 * pt_edit_put_back() puts back in that path's slot, undoing a
 * pt_edit_tensor() with @replace (the value keeps what it shared).
 */
#define PT_EDIT_MAX_RANK 64
struct pt_edit_spec {
	const char *dtype;              /* static torch name */
	uint32_t rank;
	int64_t shape[PT_EDIT_MAX_RANK];
	uint64_t nbytes;                /* dtype x shape */
};
struct pt_value;
int pt_edit_spec_parse(const void *text, size_t len, struct pt_edit_spec *sp,
		       struct pt_error *err);
struct pt_value *pt_edit_value(struct pt_ckpt *ck, const char *path);
int pt_edit_put_back(struct pt_ckpt *ck, const char *path, struct pt_value *v,
		     struct pt_error *err);

/* Storages of every tensor file (views too): NULL if not in the file. */
const struct pt_storage *pt_node_viewed_storage(const struct pt_node *n);

/*
 * The source the checkpoint's own file is read from (io/source.h), and a
 * layer over it.  After pt_ckpt_set_layer(), every read of tensor bytes
 * in that file goes through @layer: contiguous tensors, views gathered
 * from their storages, and the zero-copy extents of pt_node_extent() (a
 * tensor file, a generated file made of tensor bytes).  @layer is a
 * source of the same size over pt_ckpt_source() that changes the bytes
 * it must and reads the rest from below (the mount's uncommitted writes,
 * fs/overlay.c); its extent op must refuse ranges it changes.  Records
 * (/.ptfs/records), headers and pickles are read from the file itself.
 * Set it once, before the first read; it stays the caller's, to close
 * after pt_ckpt_close().  NULL: no layer.
 */
const struct pt_source *pt_ckpt_source(const struct pt_ckpt *ck);
void pt_ckpt_set_layer(struct pt_ckpt *ck, struct pt_source *layer);

/*
 * Progress of long work on @ck (statistics, diffs, exports, applying kept
 * writes), for a front end that shows it: core never prints.  @fn(@ctx,
 * PT_PROGRESS_TOTAL, n) announces n more bytes of work, @fn(@ctx,
 * PT_PROGRESS_DONE, n) says n more bytes are done.  Called from whichever
 * thread does the work, several at once: @fn must be thread-safe.  NULL
 * (the default) reports nothing.
 */
enum pt_progress_kind { PT_PROGRESS_TOTAL, PT_PROGRESS_DONE };
typedef void (*pt_progress_fn)(void *ctx, enum pt_progress_kind kind, uint64_t n);
void pt_ckpt_set_progress(struct pt_ckpt *ck, pt_progress_fn fn, void *ctx);
/* Report to the hook of @ck, if any (for core's long loops). */
void pt_ckpt_progress(const struct pt_ckpt *ck, enum pt_progress_kind kind,
		      uint64_t n);

/* The bytes of storage @st (NULL: of any) may read differently from now
 * on (a write to the mount's overlay, a revert of one; commits call it
 * themselves): what was gathered from them for non-contiguous tensors is
 * not used again.  Call after the change is visible to reads; takes no
 * lock. */
void pt_ckpt_bytes_changed(struct pt_ckpt *ck, const struct pt_storage *st);

/* How the last successful pt_ckpt_commit() wrote, one line ("clone, 12296
 * bytes written"), or "" before any. */
const char *pt_ckpt_last_commit(const struct pt_ckpt *ck);

/* How many reads of tensor bytes the checkpoint has served: pt_node_read()
 * of a tensor file (a picture's sampling, statistics, a gathered tensor)
 * and pt_node_extent() of one (a mount's spliced reads).  A test's count
 * of what a listing costs. */
uint64_t pt_ckpt_tensor_reads(const struct pt_ckpt *ck);

/* How many pt_ckpt_commit() calls succeeded so far: taken before a
 * commit, it tells pt_tree_committed() what came after. */
uint32_t pt_ckpt_commits(const struct pt_ckpt *ck);

/* The number (pt_ckpt_commits()) of the last commit that moved records or
 * changed the file's size (the ZIP64 rewriter on an archive not in torch's
 * layout), 0 before any: when it changed, what was made from the old
 * layout is out of date (pt_tree_committed()). */
uint64_t pt_ckpt_layout_gen(const struct pt_ckpt *ck);

/* What opening did about an interrupted commit's journal (one line: rolled
 * back, removed, set aside), or "". */
const char *pt_ckpt_recovery(const struct pt_ckpt *ck);

/* Whether pt_ckpt_commit() can work for this container. */
bool pt_ckpt_writable(const struct pt_ckpt *ck);

/* ---- what exporters read of a node (core/export/) ---- */

/* A tensor file's layout, without parsing its JSON.  Pointers borrowed
 * from the checkpoint (valid until pt_ckpt_close()). */
struct pt_tinfo {
	const char *dtype;      /* torch name of the bytes' type ("float32",
				 * "bfloat16", "quint4x2", ...) */
	unsigned itemsize;      /* bytes per element (packed types: 1) */
	bool packed;            /* several values per byte */
	uint32_t rank;
	const int64_t *shape;   /* rank entries */
	const int64_t *stride;  /* rank entries, in elements */
	int64_t offset;         /* first element in the storage */
	uint64_t numel;
	uint64_t nbytes;        /* bytes of the file (C order) */
	char byteorder;         /* '<', '>' or '|' (one byte per element) */
	bool contiguous;        /* C-contiguous in its storage */
	const void *storage;    /* identity of the storage (ties) */
	uint64_t byte_lo;       /* first and one past the last byte it */
	uint64_t byte_hi;       /* touches in that storage */
	bool ndarray;           /* a numpy array (not a torch tensor) */
	bool parameter;         /* torch.nn.Parameter */
	bool requires_grad;
};

/* Fill @ti for a tensor file (not its sidecar); false for other nodes. */
bool pt_node_tinfo(const struct pt_node *n, struct pt_tinfo *ti);

/* Read @n bytes at @off of the whole storage tensor file @node views
 * (element e of the tensor is at (offset + sum idx * stride) * itemsize);
 * 0 or -errno with @err.  For readers that gather views themselves. */
int pt_node_storage_read(struct pt_ckpt *ck, const struct pt_node *node,
			 void *buf, size_t n, uint64_t off, struct pt_error *err);

/* What a node is for an exporter. */
enum pt_nkind {
	PT_NK_TENSOR,   /* tensor or array file */
	PT_NK_SCALAR,   /* None, bool, int, float, str, or a value shown as
			 * text (device, dtype, complex, a global) */
	PT_NK_BYTES,    /* bytes or bytearray */
	PT_NK_DIR,      /* dict, list, tuple, object, or a folder of dotted
			 * keys */
	PT_NK_LINK,     /* a container repeating an ancestor */
	PT_NK_OTHER,    /* NAME.json sidecars, /.ptfs and what is under it */
};

enum pt_nkind pt_node_kind(const struct pt_node *n);

/* The str dict key of @n when its name does not spell it (a key cut to
 * 240 bytes, or renamed NAME~2 by a collision): true, with the key's
 * bytes in *@p, *@len (borrowed).  False otherwise (the name is the key). */
bool pt_node_str_key(const struct pt_node *n, const uint8_t **p, size_t *len);

/* Is directory @n an object of a class (not a dict, list, tuple, set)? */
bool pt_node_is_object(const struct pt_node *n);

/* Is directory @n an object made by the global @module.@name (a class, or
 * the function a REDUCE called: "torch._utils", "_rebuild_sparse_tensor")? */
bool pt_node_class_is(const struct pt_node *n, const char *module,
		      const char *name);

/* Append the JSON text of a scalar file's value (null, true, 7, 0.1,
 * "text"; NaN and Infinity as Python's json writes them); false (nothing
 * appended) for other nodes. */
bool pt_node_scalar_json(const struct pt_node *n, struct pt_buf *out);

/* 0 when the checkpoint's file (and the files of its shards) are the ones
 * opened, unchanged (device, inode, size, mtime); -ESTALE with one line in
 * @err naming the file otherwise. */
int pt_ckpt_unchanged(const struct pt_ckpt *ck, struct pt_error *err);

/* ---- generated directories and files under /.ptfs ---- */

/*
 * A generated file: its exact size is known before any read; @read fills
 * [@off, @off + @n) (inside the file) or fails with -errno and @err;
 * @extent (may be NULL) says when such a range is one contiguous range of
 * a local file, for zero-copy replies.  @free (may be NULL) releases @ctx
 * when the checkpoint closes.  Reads may come from several threads.
 */
struct pt_vfile {
	uint64_t size;
	int (*read)(void *ctx, void *buf, size_t n, uint64_t off,
		    struct pt_error *err);
	bool (*extent)(void *ctx, uint64_t off, uint64_t n, int *fd,
		       uint64_t *file_off);
	void (*free)(void *ctx);
	void *ctx;
	/* Optional, for contents that state offsets in the checkpoint: make
	 * them again after a commit moved records (pt_tree_committed());
	 * returns the new size.  Reads may run meanwhile. */
	uint64_t (*remake)(void *ctx);
};

struct pt_vdir;

/* Fill a generated directory with pt_vdir_add(); 0 or -errno (@err). */
typedef int (*pt_vdir_fill)(void *ctx, struct pt_ckpt *ck,
			    struct pt_vdir *d, struct pt_error *err);

/* Add /.ptfs/@name (a static string), a directory @fill fills the first
 * time it is used (lookup, listing).  Call once, right after opening,
 * before /.ptfs is used: -EBUSY otherwise. */
int pt_tree_set_vdir(struct pt_ckpt *ck, const char *name, pt_vdir_fill fill,
		     void *ctx);

/* Add the file @rel ("a/b/c.npy": folders made as needed) holding @vf
 * (copied) to the directory being filled.  -EEXIST if taken. */
int pt_vdir_add(struct pt_vdir *d, const char *rel, const struct pt_vfile *vf);

/* A generated directory whose fill failed (its walk over budget, or
 * interrupted): copy the line saying why into @buf and return true, once
 * per failure (the front end logs it once); false otherwise. */
bool pt_tree_take_error(struct pt_ckpt *ck, const struct pt_node *dir,
			char *buf, size_t n);

/* ---- pictures beside tensors (-o previews) ---- */

/*
 * With opts.previews, NAME.png beside every tensor file of at least one
 * element (a tensor claims NAME, NAME.json and NAME.png together).  Its
 * size comes from @size_fn, which must answer from the tensor's shape and
 * dtype without reading an element (a stat never draws); the picture is
 * made by @fn on its first read (*@data malloc'ed, *@len, which must be
 * the size promised), then kept.  Both get the tensor file; @fn a
 * negative errno with one line in @err when it cannot be drawn, @size_fn
 * a negative errno when there is no picture.
 */
typedef int (*pt_picture_fn)(void *ctx, struct pt_ckpt *ck, struct pt_node *tensor,
			     uint8_t **data, size_t *len, struct pt_error *err);
typedef int (*pt_picture_size_fn)(void *ctx, struct pt_node *tensor, uint64_t *size);
void pt_ckpt_set_picture_maker(struct pt_ckpt *ck, pt_picture_fn fn,
			       pt_picture_size_fn size_fn, void *ctx);

/* Tensor bytes changed (writes through the mount): every picture made so
 * far is forgotten and made again on its next use; @fn(@ctx, n) is called
 * for each of them (the front end drops the kernel's caches). */
void pt_ckpt_pictures_reset(struct pt_ckpt *ck,
			    void (*fn)(void *ctx, struct pt_node *n), void *ctx);


/* ---- the tree after a commit ---- */

/*
 * Commits succeeded since pt_ckpt_commits() returned @since: call
 * @fn(@ctx, n), outside every lock, for each node made so far whose
 * contents or size they changed (the front end drops the kernel's caches
 * of them).  Those are the records under /.ptfs whose bytes they wrote
 * (a written storage's record), and, when one of them moved records
 * (pt_ckpt_layout_gen() changed), what states offsets or the file's size,
 * made again first: the size of every NAME.json made so far (their text
 * is made for each read), /.ptfs/tree.json and info.txt if made,
 * generated files with a remake op.  Sidecars may then be returned again
 * by pt_tree_next_sidecars().  Cost: nothing when no record was written
 * and none moved, else a look at every node made so far, and after a move
 * the JSON of each sidecar and generated file among them.
 */
void pt_tree_committed(struct pt_ckpt *ck, uint32_t since,
		       void (*fn)(void *ctx, struct pt_node *n), void *ctx);

/* ---- pushing sidecars ahead of a reader ---- */

/* Is @n a NAME.json sidecar? */
bool pt_node_is_sidecar(const struct pt_node *n);

/*
 * The sidecars a program walking the tree is likely to read after @from,
 * in walk order (depth first, listing order: the rest of @from's
 * directory, then the entries after it in its ancestors), into
 * @out[0..@max), each at most once per mount (later calls skip what an
 * earlier one returned): only nodes that already exist (the kernel can
 * only cache files it has been shown), without building a table or
 * taking a lock.  At most @max_steps entries are looked at.  Returns how
 * many were stored.  Calls must not overlap (one caller at a time).
 */
size_t pt_tree_next_sidecars(struct pt_node *from, struct pt_node **out,
			     size_t max, size_t max_steps);

#endif /* PTFS_CORE_CKPT_H */
