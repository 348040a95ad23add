/* SPDX-License-Identifier: MIT */
/*
 * cancel.h -- long work that a caller may call off.
 *
 * A front end that serves requests (the FUSE daemon) installs a check for
 * the calling thread before it starts work on behalf of someone who may
 * go away: the request was interrupted (its program was killed), or the
 * daemon is ending.  Long loops of the core (walks of the tree, generated
 * files, statistics, pictures, waits for remote bytes) call
 * pt_cancelled() between steps and end with -EINTR when it says so.  The
 * core knows nothing of FUSE: the check is a plain callback, kept per
 * thread, so it reaches every layer without changing their signatures.
 */
#ifndef PTFS_CORE_CANCEL_H
#define PTFS_CORE_CANCEL_H

#include <pthread.h>
#include <stdbool.h>

typedef bool (*pt_cancel_fn)(void *ctx);

/* One installed check; the previous one is kept inside and put back by
 * pt_cancel_pop() (checks nest). */
struct pt_cancel {
	pt_cancel_fn fn;
	void *ctx;
	const struct pt_cancel *prev;
};

/* Install @fn(@ctx) as the calling thread's check, in @c (which must live
 * until pt_cancel_pop(@c)). */
void pt_cancel_push(struct pt_cancel *c, pt_cancel_fn fn, void *ctx);
void pt_cancel_pop(struct pt_cancel *c);

/* True when the calling thread's current work should end now (with
 * -EINTR); false without an installed check.  Cheap: one call. */
bool pt_cancelled(void);

/* Take @mu, or give up with -EINTR (0 when taken) when pt_cancelled()
 * says so while another thread holds it (a long fill in progress): looks
 * again every 20 ms. */
int pt_lock_or_cancel(pthread_mutex_t *mu);

/* How many times pt_cancelled() said true in this process (tests count
 * it instead of timing anything). */
unsigned long pt_cancel_count(void);

#endif /* PTFS_CORE_CANCEL_H */
