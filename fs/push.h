/* SPDX-License-Identifier: MIT */
/*
 * push.h -- NAME.json sidecars pushed into the kernel's page cache ahead
 * of a program that reads them one after the other (push.c).
 */
#ifndef PTFS_FS_PUSH_H
#define PTFS_FS_PUSH_H

#include <fuse_lowlevel.h>

#include "ckpt/ckpt.h"

struct ptfs_push;

/* A pusher for the mount of @ck served by @se; NULL when out of memory
 * (the mount then works without it). */
struct ptfs_push *ptfs_push_new(struct fuse_session *se, struct pt_ckpt *ck);

/*
 * Sidecar @n was just read from its start through a request (the kernel
 * had no copy): store the next sidecars in walk order in the kernel's
 * page cache, so that reading them needs no request.  Call before the
 * reply to @n's request (the reader then finds them cached), from a
 * worker of a multithreaded loop with at least two workers: a store may
 * wait for the page lock of a file whose READ another worker must
 * answer.  Never waits for another push: a miss during one is handed
 * over to it, and its caller answers at once.
 */
void ptfs_push_after(struct ptfs_push *p, struct pt_node *n);

/*
 * Around a commit, and the dropping of the kernel's copies of what it
 * moved (pt_tree_committed): nothing is pushed in between, and a store
 * that was under way when it began is dropped again.  Pauses may
 * overlap; @p may be NULL.
 */
void ptfs_push_pause(struct ptfs_push *p);
void ptfs_push_resume(struct ptfs_push *p);

void ptfs_push_free(struct ptfs_push *p);

#endif /* PTFS_FS_PUSH_H */
