/* SPDX-License-Identifier: MIT */
/* cancel.c -- the calling thread's "stop now?" check (cancel.h). */
#include "base/cancel.h"

#include <errno.h>
#include <stddef.h>
#include <time.h>

static _Thread_local const struct pt_cancel *cur;
static unsigned long said_yes;

void pt_cancel_push(struct pt_cancel *c, pt_cancel_fn fn, void *ctx)
{
	c->fn = fn;
	c->ctx = ctx;
	c->prev = cur;
	cur = c;
}

void pt_cancel_pop(struct pt_cancel *c)
{
	if (cur == c)
		cur = c->prev;
}

bool pt_cancelled(void)
{
	const struct pt_cancel *c = cur;

	if (!c || !c->fn || !c->fn(c->ctx))
		return false;
	__atomic_add_fetch(&said_yes, 1, __ATOMIC_RELAXED);
	return true;
}

unsigned long pt_cancel_count(void)
{
	return __atomic_load_n(&said_yes, __ATOMIC_RELAXED);
}

int pt_lock_or_cancel(pthread_mutex_t *mu)
{
	struct timespec ts;

	while (pthread_mutex_trylock(mu) != 0) {
		if (pt_cancelled())
			return -EINTR;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		if (pthread_mutex_timedlock(mu, &ts) == 0)
			break;
	}
	return 0;
}
