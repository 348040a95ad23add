/* SPDX-License-Identifier: MIT */
/*
 * pickle_arena.c -- the arena of a loaded pickle: every node, string copy
 * and sequence of the graph, in blocks that double from 64 KiB to 2 MiB
 * (huge pages), all charged to max_memory with the VM's scratch, freed
 * at once by pt_pickle_free().  A lean load cuts the block being filled
 * back to a mark (pickle.c), so the block layout is in pickle_i.h.
 */
#include "decode/pickle_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/buf.h"
#include "base/rd.h"

#define PT_ARENA_BLOCK ((size_t)64 * 1024)
#define PT_ARENA_HUGE ((size_t)2 * 1024 * 1024)

/* Reserve @n bytes of the memory budget; false when over max_memory. */
bool pt__pickle_mem_take(struct pt_pickle *pk, uint64_t n)
{
	uint64_t sum;

	if (!pt_add_u64(pk->mem, n, &sum) || sum > pk->mem_max)
		return false;
	pk->mem = sum;
	return true;
}

/* 0, -ENOMEM, or -EFBIG (max_memory); *out is zeroed memory. */
int pt__arena_alloc(struct pt_pickle *pk, size_t n, void **out)
{
	struct pt_arena_blk *b = pk->blk;
	size_t want, bsize;
	uint8_t *p;

	*out = NULL;
	if (n == 0)
		n = 1;
	if (n > SIZE_MAX - PT_ARENA_ALIGN - PT_BLK_HDR - PT_ARENA_BLOCK)
		return -EFBIG;
	want = (n + PT_ARENA_ALIGN - 1) & ~(PT_ARENA_ALIGN - 1);
	if (b && b->size - b->used >= want) {
		p = (uint8_t *)b + PT_BLK_HDR + b->used;
		b->used += want;
		memset(p, 0, n);
		*out = p;
		return 0;
	}
	/*
	 * Blocks double from 64 KiB up to 2 MiB: a small pickle stays small,
	 * and a big one (a state dict of 20,000 tensors makes ~40 MB of
	 * nodes) gets 2 MiB blocks aligned for transparent huge pages, one
	 * page fault per block instead of 512.
	 */
	if (pk->blk_size < PT_ARENA_BLOCK)
		pk->blk_size = PT_ARENA_BLOCK;
	bsize = pk->blk_size - PT_BLK_HDR;
	if (want > bsize / 4)
		bsize = want;
	if (!pt__pickle_mem_take(pk, PT_BLK_HDR + bsize))
		return -EFBIG;
	if (bsize + PT_BLK_HDR == PT_ARENA_HUGE) {
		b = aligned_alloc(PT_ARENA_HUGE, PT_ARENA_HUGE);
#ifdef MADV_HUGEPAGE
		if (b)
			(void)madvise(b, PT_ARENA_HUGE, MADV_HUGEPAGE);
#endif
	} else {
		b = malloc(PT_BLK_HDR + bsize);
		if (b)
			pt_populate(b, PT_BLK_HDR + bsize);
	}
	if (!b) {
		pk->mem -= PT_BLK_HDR + bsize;
		return -ENOMEM;
	}
	if (bsize != want && pk->blk_size < PT_ARENA_HUGE)
		pk->blk_size *= 2;
	b->size = bsize;
	b->used = want;
	pk->n_blk++;
	if (bsize == want && pk->blk) {
		/* a big one-off: keep filling the current block */
		b->next = pk->blk->next;
		pk->blk->next = b;
	} else {
		b->next = pk->blk;
		pk->blk = b;
	}
	p = (uint8_t *)b + PT_BLK_HDR;
	memset(p, 0, n);
	*out = p;
	return 0;
}

/*
 * After a load: the pages of the block being filled that hold nothing yet
 * go back to the kernel.  A 2 MiB block is backed by one huge page, so a
 * graph that spills 60 KB into a fresh block would keep all 2 MiB
 * resident; when 64 KiB or more are empty, the block stops asking for
 * huge pages (else khugepaged could fill it again) and its empty tail is
 * dropped.  Later allocations in the tail fault in zeroed pages as usual.
 */
void pt__arena_trim(struct pt_pickle *pk)
{
#if defined(MADV_HUGEPAGE) && defined(MADV_DONTNEED)
	struct pt_arena_blk *b = pk->blk;
	uintptr_t lo, hi;

	if (!b || b->size + PT_BLK_HDR != PT_ARENA_HUGE)
		return;
	lo = ((uintptr_t)b + PT_BLK_HDR + b->used + 4095) & ~(uintptr_t)4095;
	hi = (uintptr_t)b + PT_ARENA_HUGE;
	if (hi <= lo || hi - lo < PT_ARENA_BLOCK)
		return;
	(void)madvise(b, PT_ARENA_HUGE, MADV_NOHUGEPAGE);
	(void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
#else
	(void)pk;
#endif
}

void *pt_pickle_alloc(struct pt_pickle *pk, size_t n)
{
	void *p;

	if (!pk || pt__arena_alloc(pk, n, &p) != 0)
		return NULL;
	return p;
}

void pt_pickle_free(struct pt_pickle *pk)
{
	struct pt_arena_blk *b, *next;
	size_t i;

	if (!pk)
		return;
	for (i = 0; i < pk->n_grown; i++)
		free(pk->grown[i]);
	free(pk->grown);
	for (b = pk->blk; b; b = next) {
		next = b->next;
		free(b);
	}
	free(pk);
}

struct pt_value *pt_pickle_root(const struct pt_pickle *pk)
{
	return pk ? pk->root : NULL;
}

uint32_t pt_pickle_count(const struct pt_pickle *pk)
{
	return pk ? pk->count : 0;
}

int pt_pickle_protocol(const struct pt_pickle *pk)
{
	return pk ? pk->proto : 0;
}
