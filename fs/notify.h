/* SPDX-License-Identifier: MIT */
/*
 * notify.h -- the kernel's cached pages and attributes dropped by a thread
 * of their own (notify.c).
 */
#ifndef PTFS_FS_NOTIFY_H
#define PTFS_FS_NOTIFY_H

#include <stdbool.h>

#include <fuse_lowlevel.h>

struct ptfs_notify;

/* A dropper for the mount served by @se, with its thread started; NULL
 * when out of memory or no thread can be made. */
struct ptfs_notify *ptfs_notify_new(struct fuse_session *se);

/*
 * Drop what the kernel caches of inode @ino (its pages and attributes),
 * soon: the request is queued and this returns at once, so a worker never
 * waits for a page that a READ in the queue behind it holds locked.  The
 * same inode queued again before its drop runs is dropped once.  Returns
 * 0, or -ENOMEM when it could not be queued.  @q may be NULL (nothing
 * is cached that would need dropping).
 */
int ptfs_notify_inval(struct ptfs_notify *q, fuse_ino_t ino);

/*
 * Have the kernel look up @name in directory @parent again (its cached
 * entry dropped), soon, the same way: an edit gave the name another node.
 * 0, or -ENOMEM (logged).
 */
int ptfs_notify_inval_entry(struct ptfs_notify *q, fuse_ino_t parent,
			    const char *name);

/*
 * Wait until every drop queued before this call has run, at most @ms
 * milliseconds: true when they have.  A drop may wait for a page that a
 * queued READ holds, so only a worker of a loop with others to answer it
 * may wait (never with -s or max_threads=1), and the bound keeps a pool
 * whose every worker waits here from hanging.
 */
bool ptfs_notify_wait(struct ptfs_notify *q, unsigned ms);

/* Nothing queued, no drop under way. */
bool ptfs_notify_idle(struct ptfs_notify *q);

/*
 * Stop the thread (what is still queued is not dropped) and free @q; call
 * after the loop ended, before the session is destroyed.  False when a
 * drop under way did not end within 2 s (it waits for a READ nobody will
 * answer now): the thread still uses the session, so neither @q nor the
 * session may be freed; exiting the process ends both.
 */
bool ptfs_notify_free(struct ptfs_notify *q);

#endif /* PTFS_FS_NOTIFY_H */
