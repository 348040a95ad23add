/* SPDX-License-Identifier: MIT */
/*
 * hash.h -- the one string hash of core's name indexes (the ZIP record
 * index, the tree's directory tables).
 */
#ifndef PTFS_CORE_BASE_HASH_H
#define PTFS_CORE_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/*
 * FNV-1a over the @n bytes at @p, then a final mix: FNV's low bits (the
 * slot of an open-addressing table) depend only on the low bits of each
 * byte, which for names that differ in their digits ("0" .. "19999",
 * "data/17") are few.
 *
 * In two steps for names that share a prefix (NAME, NAME.json,
 * NAME.png): pt_hash_more() goes on from the state @h of the bytes before
 * (PT_HASH_SEED for none), pt_hash_end() mixes a state into the hash.
 */
#define PT_HASH_SEED 2166136261u

static inline uint32_t pt_hash_more(uint32_t h, const char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= (uint8_t)p[i];
		h *= 16777619u;
	}
	return h;
}

static inline uint32_t pt_hash_end(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	return h;
}

static inline uint32_t pt_hash_name(const char *p, size_t n)
{
	return pt_hash_end(pt_hash_more(PT_HASH_SEED, p, n));
}

/*
 * The name indexes are open-addressing tables of uint32 slots (0: empty;
 * what else a slot holds is the index's: a position + 1, a hash tag),
 * @nslots a power of two, probed linearly from the hash: put @v in the
 * first empty slot for hash @h.  Each index keeps its own find, which
 * compares what its entries hold.
 */
static inline void pt_slot_put(uint32_t *slots, size_t nslots, uint32_t h,
			       uint32_t v)
{
	size_t i, mask = nslots - 1;

	for (i = h & mask; slots[i]; i = (i + 1) & mask)
		;
	slots[i] = v;
}

#endif /* PTFS_CORE_BASE_HASH_H */
