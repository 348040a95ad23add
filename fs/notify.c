/* SPDX-License-Identifier: MIT */
/*
 * notify.c -- dropping the kernel's caches from a thread of its own.
 *
 * fuse_lowlevel_notify_inval_inode() takes the lock of every cached page
 * of the inode, and a page stays locked while the kernel waits for the
 * READ that fills it.  A worker that drops another file's pages can thus
 * wait for a READ that is queued behind it: with one worker (-s) that is
 * a hang at the first such overlap, with many it is a worker lost until
 * some other worker answers, and a steady stream of writes to one file
 * while another file over the same storage is read ties up every worker
 * (writes through `w` while `tied` is read, one drop per write).
 *
 * So workers only queue the inode here and go on; this thread drops.  It
 * may wait for a page, but never for something a worker waits for: the
 * READ it waits for is answered by the loop as usual.  A burst of writes
 * to one file queues each other open file once.
 */
#include "notify.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uthash.h>

struct queued {
	uint64_t ino;                   /* key */
	UT_hash_handle hh;
};

/* A name whose lookup the kernel must make again. */
struct qname {
	struct qname *next;
	uint64_t parent;
	size_t len;
	char name[];
};

struct ptfs_notify {
	struct fuse_session *se;
	pthread_t thread;
	pthread_mutex_t mu;             /* guards the rest */
	pthread_cond_t more;            /* something was queued, or stop */
	pthread_cond_t done;            /* a batch ran */
	struct queued *set;             /* queued, not taken yet */
	struct qname *names;            /* and names, newest first */
	uint64_t asked;                 /* ptfs_notify_inval() calls */
	uint64_t ran;                   /* those whose drop has run */
	bool stop;
	bool stopped;                   /* the thread returned */
};

static void *run(void *arg)
{
	struct ptfs_notify *q = arg;
	struct queued *batch, *e, *tmp;
	struct qname *names;
	uint64_t upto;

	pthread_mutex_lock(&q->mu);
	while (!q->stop) {
		if (!q->set && !q->names) {
			pthread_cond_wait(&q->more, &q->mu);
			continue;
		}
		batch = q->set;
		names = q->names;
		q->set = NULL;
		q->names = NULL;
		upto = q->asked;
		pthread_mutex_unlock(&q->mu);
		while (names) {
			struct qname *nx = names->next;

			/* -ENOENT: the kernel has no such entry cached */
			fuse_lowlevel_notify_inval_entry(q->se, (fuse_ino_t)names->parent,
							 names->name, names->len);
			free(names);
			names = nx;
		}
		HASH_ITER(hh, batch, e, tmp) {
			/* -ENOENT: the kernel has forgotten the inode */
			fuse_lowlevel_notify_inval_inode(q->se, (fuse_ino_t)e->ino, 0, 0);
			HASH_DEL(batch, e);
			free(e);
		}
		pthread_mutex_lock(&q->mu);
		q->ran = upto;
		pthread_cond_broadcast(&q->done);
	}
	q->stopped = true;
	pthread_cond_broadcast(&q->done);
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

struct ptfs_notify *ptfs_notify_new(struct fuse_session *se)
{
	struct ptfs_notify *q = calloc(1, sizeof(*q));
	pthread_condattr_t ca;
	sigset_t all, old;
	bool made;

	if (!q)
		return NULL;
	q->se = se;
	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->more, NULL);
	pthread_cond_init(&q->done, &ca);
	pthread_condattr_destroy(&ca);
	/* signals go to the loop's threads, which end the loop on them
	 * (libfuse blocks them in its workers alike) */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	made = pthread_create(&q->thread, NULL, run, q) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!made) {
		pthread_cond_destroy(&q->done);
		pthread_cond_destroy(&q->more);
		pthread_mutex_destroy(&q->mu);
		free(q);
		return NULL;
	}
	return q;
}

int ptfs_notify_inval(struct ptfs_notify *q, fuse_ino_t ino)
{
	uint64_t key = (uint64_t)ino;
	struct queued *e;
	int rc = 0;

	if (!q)
		return 0;
	pthread_mutex_lock(&q->mu);
	HASH_FIND(hh, q->set, &key, sizeof(key), e);
	if (!e) {
		e = malloc(sizeof(*e));
		if (e) {
			e->ino = key;
			HASH_ADD(hh, q->set, ino, sizeof(e->ino), e);
		}
	}
	if (e) {
		q->asked++;
		pthread_cond_signal(&q->more);
	} else {
		rc = -ENOMEM;
	}
	pthread_mutex_unlock(&q->mu);
	if (rc)
		fuse_log(FUSE_LOG_ERR,
			 "ptfs: out of memory: the kernel may keep a stale copy of inode %llu until its next open or the cache timeout\n",
			 (unsigned long long)ino);
	return rc;
}

int ptfs_notify_inval_entry(struct ptfs_notify *q, fuse_ino_t parent,
			    const char *name)
{
	size_t len = strlen(name);
	struct qname *e;

	if (!q)
		return 0;
	e = malloc(sizeof(*e) + len + 1);
	if (!e) {
		fuse_log(FUSE_LOG_ERR,
			 "ptfs: out of memory: the kernel may show '%s' as it was until the cache timeout\n",
			 name);
		return -ENOMEM;
	}
	e->parent = (uint64_t)parent;
	e->len = len;
	memcpy(e->name, name, len + 1);
	pthread_mutex_lock(&q->mu);
	e->next = q->names;
	q->names = e;
	q->asked++;
	pthread_cond_signal(&q->more);
	pthread_mutex_unlock(&q->mu);
	return 0;
}

bool ptfs_notify_wait(struct ptfs_notify *q, unsigned ms)
{
	struct timespec until;
	uint64_t target;
	bool done;

	if (!q)
		return true;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (long)(ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&q->mu);
	target = q->asked;
	while (q->ran < target && !q->stopped &&
	       pthread_cond_timedwait(&q->done, &q->mu, &until) == 0)
		;
	done = q->ran >= target;
	pthread_mutex_unlock(&q->mu);
	return done;
}

bool ptfs_notify_idle(struct ptfs_notify *q)
{
	bool idle;

	if (!q)
		return true;
	pthread_mutex_lock(&q->mu);
	idle = !q->set && !q->names && q->ran == q->asked;
	pthread_mutex_unlock(&q->mu);
	return idle;
}

bool ptfs_notify_free(struct ptfs_notify *q)
{
	struct queued *e, *tmp;
	struct timespec until;

	if (!q)
		return true;
	pthread_mutex_lock(&q->mu);
	q->stop = true;
	pthread_cond_signal(&q->more);
	pthread_mutex_unlock(&q->mu);
	/* a drop under way waits for a READ that the ended loop will never
	 * answer: then leave the thread (and the session it uses) alone */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(q->thread, NULL, &until) != 0)
		return false;
	HASH_ITER(hh, q->set, e, tmp) {
		HASH_DEL(q->set, e);
		free(e);
	}
	while (q->names) {
		struct qname *nx = q->names->next;

		free(q->names);
		q->names = nx;
	}
	pthread_cond_destroy(&q->done);
	pthread_cond_destroy(&q->more);
	pthread_mutex_destroy(&q->mu);
	free(q);
	return true;
}
