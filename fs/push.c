/* SPDX-License-Identifier: MIT */
/*
 * push.c -- readahead across files, for sidecars.
 *
 * A program that looks at every tensor's metadata (a script reading each
 * NAME.json, cat of every sidecar, a file manager's preview) costs one FUSE
 * round trip per sidecar, and a round trip costs far more than making
 * the few hundred bytes of JSON.  FUSE cannot answer a read without a
 * request, but the daemon may fill the page cache of a file the kernel
 * knows with fuse_lowlevel_notify_store(): its next read is then served
 * by the kernel alone, like any cached page (the mount keeps page caches
 * between opens).
 *
 * What to push is guessed the way the kernel's readahead guesses within
 * a file: a sidecar read through a request (a miss) pushes the sidecars
 * that follow it in walk order (the tree's listing order, depth first:
 * what os.walk, find and ls -R visit next), skipping those pushed
 * before.  The window starts at PUSH_MIN files and doubles with every
 * miss that follows the last within PUSH_IDLE_MS, up to PUSH_MAX: a
 * reader in listing order misses once per window; one in another order
 * (sorted names: layer.1, layer.10, layer.100) misses more often at
 * first, and the growing windows soon cover the rest.  Only files the
 * kernel has been shown (listed or looked up) can be stored; nothing is
 * pushed for a program that only lists, and a single `cat` of one
 * sidecar pushes PUSH_MIN.  Cost: one page of page cache per pushed
 * sidecar, what reading it would cost anyway, and ~2 us of a worker
 * thread per file instead of a round trip of the reader (who waits for
 * the window its miss starts, see ptfs_push_after()).
 *
 * A commit that moves records changes the offsets the sidecars state; the
 * mount then drops the kernel's copies (pt_tree_committed).  A text made
 * before that must not be stored after it: nothing is pushed while a
 * commit runs (ptfs_push_pause), and a store that a commit began during
 * is dropped again at once, since its drop may have come first.
 */
#include "push.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "base/buf.h"

#define PUSH_MIN 16
#define PUSH_MAX 1024
#define PUSH_IDLE_MS 1000

struct ptfs_push {
	struct fuse_session *se;
	struct pt_ckpt *ck;
	pthread_mutex_t lock;           /* guards pending and running */
	struct pt_node *pending;        /* a miss to push after */
	bool running;                   /* a worker is pushing */
	unsigned commits;               /* running now (atomic) */
	uint64_t gen;                   /* begun so far (atomic) */
	/* the pushing worker's own: */
	uint64_t last_ms;               /* when the last window was pushed */
	size_t win;                     /* its size */
	bool off;                       /* the kernel refused a store */
	struct pt_buf json;
	struct pt_node *out[PUSH_MAX];
};

struct ptfs_push *ptfs_push_new(struct fuse_session *se, struct pt_ckpt *ck)
{
	struct ptfs_push *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->se = se;
	p->ck = ck;
	pthread_mutex_init(&p->lock, NULL);
	pt_buf_init(&p->json);
	return p;
}

/* Store sidecar @n's whole text in the kernel's cache: false when
 * pushing should stop for good. */
static bool store(struct ptfs_push *p, struct pt_node *n)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	/* gen before commits: a commit counts itself in first */
	uint64_t gen = __atomic_load_n(&p->gen, __ATOMIC_SEQ_CST);
	/* a sidecar is never the root: its inode number is its address
	 * (mount.c, ino_of()) */
	fuse_ino_t ino = (fuse_ino_t)(uintptr_t)n;
	int rc;

	if (__atomic_load_n(&p->commits, __ATOMIC_SEQ_CST))
		return true;
	p->json.len = 0;
	if (!pt_node_tensor_json(p->ck, n, &p->json) || p->json.oom)
		return !p->json.oom;
	if (__atomic_load_n(&p->gen, __ATOMIC_SEQ_CST) != gen)
		return true;
	bv.buf[0].size = p->json.len;
	bv.buf[0].mem = p->json.p;
	rc = fuse_lowlevel_notify_store(p->se, ino, 0, &bv, 0);
	if (__atomic_load_n(&p->gen, __ATOMIC_SEQ_CST) != gen)
		fuse_lowlevel_notify_inval_inode(p->se, ino, 0, 0);
	/* -ENOENT: the kernel has forgotten that file; go on */
	return rc == 0 || rc == -ENOENT;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Push the window after miss @n (only the running worker), never
 * @self: the miss whose READ the running worker has yet to answer. */
static void push_window(struct ptfs_push *p, struct pt_node *n,
			struct pt_node *self)
{
	uint64_t now = now_ms();
	size_t got, i;

	if (__atomic_load_n(&p->commits, __ATOMIC_SEQ_CST))
		return;                 /* none marked pushed meanwhile */
	if (p->last_ms && now - p->last_ms <= PUSH_IDLE_MS)
		p->win = p->win < PUSH_MAX ? 2 * p->win : PUSH_MAX;
	else
		p->win = PUSH_MIN;
	got = pt_tree_next_sidecars(n, p->out, p->win, 8 * p->win + 64);
	for (i = 0; i < got && !p->off; i++)
		if (p->out[i] != self)  /* cached by its reply */
			p->off = !store(p, p->out[i]);
	p->last_ms = now_ms();
}

/*
 * One worker pushes, before it answers its own miss: a reader that waits
 * for nothing else then finds the window cached when its read returns,
 * and its next miss starts the next window (pushing after the reply let
 * the reader run ahead of the stores, one READ per file it overtook: 500
 * sidecars read in sorted order took 6 to 14 READs here, and 59 on a
 * loaded machine; now 6 every time).  A miss that comes meanwhile
 * is handed to the running worker and its own worker answers at once.
 * No worker ever waits for another here: that matters, because a store
 * waits for the page lock of a file whose READ may be queued behind it,
 * and that READ needs a free worker.  The only READ the running worker
 * holds back is its own, and the file it reads is never stored.
 */
void ptfs_push_after(struct ptfs_push *p, struct pt_node *n)
{
	struct pt_node *self = n;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->pending = n;
	if (p->running) {
		pthread_mutex_unlock(&p->lock);
		return;
	}
	p->running = true;
	while ((n = p->pending) != NULL) {
		p->pending = NULL;
		pthread_mutex_unlock(&p->lock);
		if (!p->off)
			push_window(p, n, self);
		pthread_mutex_lock(&p->lock);
	}
	p->running = false;
	pthread_mutex_unlock(&p->lock);
}

void ptfs_push_pause(struct ptfs_push *p)
{
	if (!p)
		return;
	__atomic_add_fetch(&p->commits, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&p->gen, 1, __ATOMIC_SEQ_CST);
}

void ptfs_push_resume(struct ptfs_push *p)
{
	if (p)
		__atomic_sub_fetch(&p->commits, 1, __ATOMIC_SEQ_CST);
}

void ptfs_push_free(struct ptfs_push *p)
{
	if (!p)
		return;
	pt_buf_free(&p->json);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
