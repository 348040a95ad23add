/* SPDX-License-Identifier: MIT */
/*
 * fmt.h -- the format plug-in contract.
 *
 * A container format is one file in core/fmt/ that defines a struct
 * pt_format and is listed in pt_formats[] (fmt.c), in probe order.  ckpt.c
 * drives it:
 *
 *   1. a directory's listing is offered to every probe_dir() in order; the
 *      first that claims it names the file to open in it (DCP: .metadata;
 *      sharded: the *.index.json);
 *   2. the file's source (io/source.h) and its first bytes are offered to
 *      every probe() in order; the first that claims it opens it;
 *   3. open() decodes the container: sets ck->root (and the pickles,
 *      meta files...) and resolves persistent ids to storages through
 *      storage() while ckpt.c classifies the values;
 *   4. a write is committed through commit(), after which ckpt.c reopens
 *      the source (pt_source_reopen); NULL commit means read-only;
 *   5. close() frees what open() kept in ck->fmt_state.
 *
 * Everything after open() -- tensor interpretation, the tree, metadata --
 * is shared.  A format reads its bytes only through ck->src (never a path
 * or a descriptor) and finds files beside its own with
 * pt_source_open_sibling(ck->src, ...), so it works the same over a local
 * file, a memory buffer or a remote object.
 */
#ifndef PTFS_CORE_FMT_H
#define PTFS_CORE_FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dirlist.h"
#include "base/error.h"
#include "container/journal.h"

struct pt_ckpt;
struct pt_commit;
struct pt_storage;
struct pt_value;

#define PT_PROBE_HEAD 512       /* bytes of the file given to probe() */

struct pt_format {
	const char *name;               /* "torch.save zip", ... */
	/* Does this format claim the file?  @head: its first @n bytes (@n <
	 * PT_PROBE_HEAD only for shorter files; never 0); ck->src the whole
	 * file.  1 claims it, 0 leaves it to the next format, -errno (with
	 * a message) stops probing: the file cannot be opened.  The ZIP
	 * family (TorchScript 2019 layout, .pt2, torch.save) indexes the
	 * archive through pt__zip_probe() and tells itself apart by record
	 * names.  Must not be NULL. */
	int (*probe)(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		     struct pt_error *err);
	/* Does this format claim the directory listed in @e[0 .. @n)?  1
	 * with the name of the file in it to open instead in *@file
	 * (malloc()ed), 0 when not, or -errno with a message saying why it
	 * is no checkpoint.  NULL for formats that are one file. */
	int (*probe_dir)(const struct pt_dir_entry *e, size_t n, char **file,
			 struct pt_error *err);
	/* Decode the container: set ck->root.  0 or -errno with a message. */
	int (*open)(struct pt_ckpt *ck, struct pt_error *err);
	/* Resolve the persistent id value @pid (a PT_V_PERSID's payload,
	 * as the pickle gave it) to the storage it names, created on first
	 * use; 0 or -errno with a message.  NULL when the format makes its
	 * tensors itself (no pickle persistent ids). */
	int (*storage)(struct pt_ckpt *ck, const struct pt_value *pid,
		       struct pt_storage **out, struct pt_error *err);
	/* Free ck->fmt_state (may be NULL). */
	void (*close)(struct pt_ckpt *ck);
	/* Replace the bytes of the @n storages in @c (each writable, a
	 * PT_ST_FILE of this checkpoint or of a data file beside it whose
	 * checkpoint has data_name set (ONNX external data: ckpt_i.h); the
	 * list checked by ckpt.c) in the local files atomically: the
	 * originals untouched on any failure, -ESTALE when one changed on
	 * disk since it was opened.  ckpt.c reopens the sources afterwards
	 * (the data files' too).  NULL: the format is read-only. */
	int (*commit)(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		      struct pt_error *err);
	/* Write the edited value graph (ckpt/edit.c) as the new file,
	 * atomically: what ck->root shows, every storage it still names
	 * and none other.  The edits the format cannot hold are refused
	 * with one line (-EINVAL, -EROFS), the original untouched.  With
	 * @dry nothing is written and *@size gets the new file's size.
	 * NULL: the format is never restructured. */
	int (*restructure)(struct pt_ckpt *ck, bool dry, uint64_t *size,
			   struct pt_error *err);
	/* restructure() as one file of a commit that writes several (the
	 * shards of a sharded checkpoint: sharded_edit.c): the new file
	 * written beside the old one and sealed into *@sealed
	 * (pt_replace_seal(), container/replace.h), for the caller to
	 * rename or abort; the original untouched.  NULL: the format cannot
	 * be part of such a commit. */
	int (*stage)(struct pt_ckpt *ck, struct pt_replace *sealed,
		     struct pt_error *err);
	/* The root is one flat mapping of names to tensors (a sharded
	 * index's weight_map): no directory can be made in it. */
	bool flat;
};

/* Every format, in probe order (fmt.c); NULL-terminated. */
extern const struct pt_format *const pt_formats[];

extern const struct pt_format pt_fmt_ts_json;     /* torchscript_json.c */
extern const struct pt_format pt_fmt_pt2;         /* pt2.c */
extern const struct pt_format pt_fmt_zip;         /* zip.c */
extern const struct pt_format pt_fmt_tar;         /* tar.c */
extern const struct pt_format pt_fmt_legacy;      /* legacy.c */
extern const struct pt_format pt_fmt_pickle;      /* legacy.c */
extern const struct pt_format pt_fmt_safetensors; /* safetensors.c */
extern const struct pt_format pt_fmt_sharded;     /* sharded.c */
extern const struct pt_format pt_fmt_dcp;         /* dcp.c */
extern const struct pt_format pt_fmt_onnx;        /* onnx.c */

/*
 * zip.c: the first step of every ZIP-family probe.  0 when @head is not a
 * ZIP local header; else index the archive into ck->zip once (later calls
 * reuse it) and return 1, or -errno with the index's message (a corrupt
 * archive stops probing).
 */
int pt__zip_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		  struct pt_error *err);

/* zip_edit.c, safetensors_edit.c: struct pt_format.restructure of
 * torch.save archives and of safetensors files. */
int pt__zip_restructure(struct pt_ckpt *ck, bool dry, uint64_t *size,
			struct pt_error *err);
int pt__st_restructure(struct pt_ckpt *ck, bool dry, uint64_t *size,
		       struct pt_error *err);
/* ... and their struct pt_format.stage. */
int pt__zip_stage(struct pt_ckpt *ck, struct pt_replace *sealed,
		  struct pt_error *err);
int pt__st_stage(struct pt_ckpt *ck, struct pt_replace *sealed,
		 struct pt_error *err);

/*
 * sharded_edit.c: struct pt_format.restructure of sharded checkpoints,
 * called by sharded.c with the shards of @ck in the index's order: each
 * one's checkpoint and file name as the index writes it.
 */
struct pt_shard_ref {
	struct pt_ckpt *ck;
	const uint8_t *name;            /* not NUL-terminated */
	size_t name_len;
};

int pt__sh_restructure(struct pt_ckpt *ck, const struct pt_shard_ref *sh,
		       size_t n, bool dry, uint64_t *size,
		       struct pt_error *err);

/*
 * commit.c: what the writing formats (zip.c, safetensors.c) share around
 * a commit.  pt__commit_patch(): pt_patch_apply() (container/journal.h) of
 * @p on ck's file, the way -o commit says, expecting the file still to be
 * the size and mtime the source opened.  pt__commit_end(): @rc of the
 * commit, which wrote @bytes the way @used says (a rewrite: the whole
 * new file, or files): on success ck->last_commit says how, on failure
 * @err's line is prefixed with the way; returns @rc.
 */
/* pt__commit_plan(): the patches of @c[0 .. @n): each storage's changed
 * ranges (all of it when the commit does not say) at the storage's
 * file_off, in file order, in *@p (*@np of them), and the bytes they
 * write; free() *@p and *@ctx (what the patches read through) after.  0
 * or -ENOMEM. */
int pt__commit_plan(const struct pt_commit *c, size_t n, struct pt_patch **p,
		    void **ctx, size_t *np, uint64_t *bytes);
int pt__commit_patch(struct pt_ckpt *ck, const struct pt_patch *p, size_t n,
		     bool own_rewrite, enum pt_commit_way *used,
		     struct pt_error *err);
int pt__commit_end(struct pt_ckpt *ck, int rc, enum pt_commit_way used,
		   uint64_t bytes, struct pt_error *err);

#endif /* PTFS_CORE_FMT_H */
