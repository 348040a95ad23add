/* SPDX-License-Identifier: MIT */
/*
 * editlog_i.h -- the structural edits made since the last commit, in
 * order (editlog.c), so that a mount whose commit fails can keep them in
 * the checkpoint's pending file (pending.h) and `ptfs recover` can make
 * them again, with the same pt_edit_*() calls.
 *
 * edit.c notes each edit that changed the graph; pt_edit_commit() clears
 * the log once the file holds them.  An edit the log cannot keep (a
 * rename of many keys through a rule) marks the log as lost: a pending
 * file then refuses to keep the edits rather than keep some of them.
 */
#ifndef PTFS_CORE_CKPT_EDITLOG_I_H
#define PTFS_CORE_CKPT_EDITLOG_I_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

/* The kinds of edit, as numbered in a pending file (pending.h). */
enum pt_edit_kind {
	PT_EDIT_RM = 1,                 /* path */
	PT_EDIT_MV = 2,                 /* path, arg: the target */
	PT_EDIT_MKDIR = 3,              /* path */
	PT_EDIT_SCALAR = 4,             /* path, arg: the text as given */
	PT_EDIT_TENSOR = 5,             /* path, arg: dtype, shape, bytes */
	PT_EDIT_REPLACE = 6,            /* the same, in place of a tensor */
};

struct pt_edit_rec {
	enum pt_edit_kind kind;
	char *path;
	char *arg;                      /* NUL-terminated copy, or NULL */
	size_t arg_len;
	uint32_t rank;                  /* tensors */
	int64_t *shape;                 /* a copy */
	const void *bytes;              /* the caller's (pt_edit_tensor) */
	uint64_t len;
};

/* Note an edit that changed the graph.  Out of memory, the log is lost
 * (pt__edit_log_lost()): the edit itself stands. */
void pt__edit_log(struct pt_ckpt *ck, enum pt_edit_kind kind, const char *path,
		  const void *arg, size_t arg_len, const struct pt_edit_tensor *t);
/* An edit the log cannot keep: @what names it ("rename"). */
void pt__edit_log_lost(struct pt_ckpt *ck, const char *what);
/* The edits are in the file (or the checkpoint closes): forget them. */
void pt__edit_log_clear(struct pt_ckpt *ck);
/* The log: its edits in *@recs, how many in *@n; NULL when it is lost,
 * with *@lost naming why. */
const struct pt_edit_rec *pt__edit_log_get(const struct pt_ckpt *ck, size_t *n,
					   const char **lost);

#endif /* PTFS_CORE_CKPT_EDITLOG_I_H */
