/* SPDX-License-Identifier: MIT */
/*
 * gathered.c -- the non-contiguous tensors kept gathered whole.
 *
 * A part of a non-contiguous tensor needs elements from all over its
 * storage window (a transposed matrix: every row of the storage for each
 * 128 KiB of the file), and tensor_read.c's gather reads the whole window
 * for it: reading a 32 MiB transposed tensor in the kernel's 128 KiB READs
 * read 8 GiB (5.4-5.9 s; its contiguous twin: 30 ms).  So the first partial
 * read of such a tensor gathers all of it once and keeps the bytes here
 * (not only until its last byte is served: the kernel's READs of a file's
 * end run in parallel, and those answered after the last one gathered it
 * all again), least recently used first out, up to PT_GATHERED_MAX_BYTES
 * in all (a bigger tensor is gathered per read).  One gather at a time
 * (pt__gathered_fill_begin), so readers racing for one tensor gather it
 * once and memory stays bounded by one tensor and its window beyond the
 * cache.  A change of the storage's bytes, or of every storage's (a
 * commit), makes a kept copy useless: pt_ckpt_bytes_changed() counts
 * them, and a copy is kept with the count it was gathered at.
 */
#include "ckpt/ckpt_i.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PT_GATHERED_SLOTS 16

struct pt_gathered {
	pthread_mutex_t mu;             /* the slots */
	pthread_mutex_t fill;           /* one gather at a time */
	uint64_t total, tick;
	struct {
		const struct pt_tensor *t;
		uint8_t *bytes;
		uint64_t gen, used;     /* gen: pt__gathered_gen() when gathered */
	} slot[PT_GATHERED_SLOTS];
};

void pt_ckpt_bytes_changed(struct pt_ckpt *ck, const struct pt_storage *st)
{
	if (st)         /* its own counter: other views stay kept */
		__atomic_add_fetch(&((struct pt_storage *)(uintptr_t)st)->bytes_gen,
				   1, __ATOMIC_ACQ_REL);
	else
		__atomic_add_fetch(&ck->bytes_gen, 1, __ATOMIC_ACQ_REL);
}

uint64_t pt__gathered_gen(const struct pt_ckpt *ck, const struct pt_tensor *t)
{
	return __atomic_load_n(&ck->bytes_gen, __ATOMIC_ACQUIRE) << 32 |
	       __atomic_load_n(&t->st->bytes_gen, __ATOMIC_ACQUIRE);
}

static struct pt_gathered *gathered_of(struct pt_ckpt *ck)
{
	struct pt_gathered *g = __atomic_load_n(&ck->gathered, __ATOMIC_ACQUIRE);
	struct pt_gathered *none = NULL;

	if (g)
		return g;
	g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	pthread_mutex_init(&g->mu, NULL);
	pthread_mutex_init(&g->fill, NULL);
	if (__atomic_compare_exchange_n(&ck->gathered, &none, g, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return g;
	pthread_mutex_destroy(&g->fill);        /* another thread's came first */
	pthread_mutex_destroy(&g->mu);
	free(g);
	return none;
}

static void slot_drop(struct pt_gathered *g, size_t i)
{
	g->total -= g->slot[i].t->nbytes;
	free(g->slot[i].bytes);
	g->slot[i].bytes = NULL;
	g->slot[i].t = NULL;
}

void pt__gathered_free(struct pt_ckpt *ck)
{
	struct pt_gathered *g = ck->gathered;
	size_t i;

	if (!g)
		return;
	for (i = 0; i < PT_GATHERED_SLOTS; i++)
		free(g->slot[i].bytes);
	pthread_mutex_destroy(&g->fill);
	pthread_mutex_destroy(&g->mu);
	free(g);
	ck->gathered = NULL;
}

/* Copy [@off, @off + @n) of @t from the cache; false when it is not there
 * as of generation @gen.  Out of date copies are let go on the way.
 * Under g->mu. */
static bool gathered_copy(struct pt_ckpt *ck, struct pt_gathered *g,
			  const struct pt_tensor *t, uint64_t gen, void *buf,
			  size_t n, uint64_t off)
{
	size_t i;

	for (i = 0; i < PT_GATHERED_SLOTS; i++) {
		const struct pt_tensor *u = g->slot[i].t;

		if (u && g->slot[i].gen != pt__gathered_gen(ck, u)) {
			slot_drop(g, i);
			continue;
		}
		if (u != t || g->slot[i].gen != gen)
			continue;
		memcpy(buf, g->slot[i].bytes + off, n);
		g->slot[i].used = ++g->tick;
		return true;
	}
	return false;
}

/* gathered_keep() under g->mu. */
static void keep_locked(struct pt_ckpt *ck, struct pt_gathered *g,
			const struct pt_tensor *t, uint64_t gen, uint8_t *bytes)
{
	size_t i, free_slot;

	if (gen != pt__gathered_gen(ck, t)) {     /* changed meanwhile */
		free(bytes);
		return;
	}
	for (;;) {
		size_t lru = PT_GATHERED_SLOTS;

		free_slot = PT_GATHERED_SLOTS;
		for (i = 0; i < PT_GATHERED_SLOTS; i++) {
			if (!g->slot[i].bytes)
				free_slot = i;
			else if (lru == PT_GATHERED_SLOTS ||
				 g->slot[i].used < g->slot[lru].used)
				lru = i;
		}
		if (free_slot < PT_GATHERED_SLOTS &&
		    g->total + t->nbytes <= PT_GATHERED_MAX_BYTES)
			break;
		slot_drop(g, lru);
	}
	g->slot[free_slot].t = t;
	g->slot[free_slot].bytes = bytes;
	g->slot[free_slot].gen = gen;
	g->slot[free_slot].used = ++g->tick;
	g->total += t->nbytes;
}

bool pt__gathered_copy(struct pt_ckpt *ck, const struct pt_tensor *t,
			void *buf, size_t n, uint64_t off)
{
	struct pt_gathered *g = __atomic_load_n(&ck->gathered, __ATOMIC_ACQUIRE);
	bool hit;

	if (!g)
		return false;
	pthread_mutex_lock(&g->mu);
	hit = gathered_copy(ck, g, t, pt__gathered_gen(ck, t), buf, n, off);
	pthread_mutex_unlock(&g->mu);
	return hit;
}

bool pt__gathered_fill_begin(struct pt_ckpt *ck)
{
	struct pt_gathered *g = gathered_of(ck);

	if (!g)
		return false;
	pthread_mutex_lock(&g->fill);
	return true;
}

void pt__gathered_fill_end(struct pt_ckpt *ck)
{
	pthread_mutex_unlock(&ck->gathered->fill);
}

void pt__gathered_keep(struct pt_ckpt *ck, const struct pt_tensor *t,
		       uint64_t gen, uint8_t *bytes)
{
	struct pt_gathered *g = ck->gathered;

	pthread_mutex_lock(&g->mu);
	keep_locked(ck, g, t, gen, bytes);
	pthread_mutex_unlock(&g->mu);
}
