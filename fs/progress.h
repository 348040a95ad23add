/* SPDX-License-Identifier: MIT */
/*
 * progress.h -- the progress bar of the long subcommands (stat, diff,
 * export, set, recover), on stderr:
 *
 *     export  412.0 MiB / 1.0 GiB  40%  823.1 MiB/s  0:01 left
 *
 * Shown when stderr is a terminal (or with --progress), never otherwise
 * (--no-progress, a pipe, a file); redrawn at most ten times a second and
 * cleared when the work ends, so it never stays in the output.  Core
 * reports bytes through pt_ckpt_set_progress() with ptfs_progress_hook;
 * every function takes NULL (no bar) and may be called from any thread.
 */
#ifndef PTFS_FS_PROGRESS_H
#define PTFS_FS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

enum { PTFS_PROGRESS_AUTO, PTFS_PROGRESS_ON, PTFS_PROGRESS_OFF };
/* --progress (ON), --no-progress (OFF); AUTO by default. */
void ptfs_progress_mode(int mode);

struct ptfs_progress;
/* A bar labelled @what, or NULL when none is to be shown. */
struct ptfs_progress *ptfs_progress_start(const char *what);
/* @n more bytes of work, @n more done (redraws when due). */
void ptfs_progress_total(struct ptfs_progress *p, uint64_t n);
void ptfs_progress_done(struct ptfs_progress *p, uint64_t n);
/* The pt_progress_fn for core, @ctx the bar. */
void ptfs_progress_hook(void *ctx, enum pt_progress_kind kind, uint64_t n);
/* Write @n bytes of output lines to stdout and flush them, the bar taken
 * away first and drawn again after (stdout and stderr are often the same
 * terminal).  Without a bar, a plain fwrite + fflush. */
void ptfs_progress_print(struct ptfs_progress *p, const char *buf, size_t n);
/* Clear the bar and free it. */
void ptfs_progress_end(struct ptfs_progress *p);

#endif /* PTFS_FS_PROGRESS_H */
