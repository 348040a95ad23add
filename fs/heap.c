/* SPDX-License-Identifier: MIT */
/*
 * heap.c -- how the process's heap grows while a checkpoint is opened.
 *
 * Opening a checkpoint of 20,000 tensors allocates ~20 MB in ~200,000
 * small pieces.  In 4 KiB pages (the kernel's default THP mode is
 * "madvise") that is ~4,600 page faults, each a trap and a clear_page,
 * and with them the TLB misses of walking 20 MB: ~30% of `ptfs info`.
 * On a guest whose page tables the hypervisor shadows, the first touch
 * of a page costs more again (~15 us a page measured here, even after
 * MADV_POPULATE_WRITE).  So the heap first grows in one step of
 * HEAP_RESERVE, advised for huge pages, and the same memory arrives in
 * 2 MiB faults.  Untouched pages of the reserve cost nothing but address
 * space; later growth is glibc's usual (top pad back to its default), so
 * a system with strict overcommit is asked for no more than before.
 *
 * The mount's daemon then calls ptfs_heap_settle(): its resident size is
 * what users watch for the life of the mount, so it goes back to glibc's
 * thresholds and gives back what the open freed between blocks that stay
 * (the pickle machine's memo and stack, the central directory; malloc_trim
 * splits the huge pages it frees from).  Later allocations come from the
 * worker threads' arenas, so those pages stay free.  Measured at 20,000 tensors: daemon page
 * faults to mount 4,370 -> 1,170, VmHWM after mount + ls -lR unchanged
 * (21.0 MB both).
 */
#include "ptfs.h"

#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define HEAP_RESERVE (256u << 20)
#define HUGE_PAGE (2u << 20)
/* glibc's defaults: DEFAULT_TOP_PAD, DEFAULT_MMAP_THRESHOLD_MIN and the
 * trim threshold that goes with it */
#define GLIBC_TOP_PAD (128 << 10)
#define GLIBC_MMAP_THRESHOLD (128 << 10)
#define GLIBC_TRIM_THRESHOLD (128 << 10)

void ptfs_heap_reserve(void)
{
#ifdef __GLIBC__
	uintptr_t lo, hi;
	void *p;

	if (!mallopt(M_MMAP_THRESHOLD, (int)(32u << 20)) ||
	    !mallopt(M_TRIM_THRESHOLD, (int)(2 * HEAP_RESERVE)) ||
	    !mallopt(M_TOP_PAD, (int)HEAP_RESERVE))
		return;
	lo = (uintptr_t)sbrk(0);
	p = malloc(HUGE_PAGE);          /* grows the heap by the reserve now */
	mallopt(M_TOP_PAD, GLIBC_TOP_PAD);
	if (!p)
		return;
	*(volatile char *)p = 0;        /* a use: the pair is not optimised away */
	hi = (uintptr_t)sbrk(0);
	free(p);
	lo = (lo + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	if (lo != (uintptr_t)-1 && hi > lo)
		madvise((void *)lo, hi - lo, MADV_HUGEPAGE);    /* a hint */
#endif
}

void ptfs_heap_settle(void)
{
#ifdef __GLIBC__
	mallopt(M_MMAP_THRESHOLD, GLIBC_MMAP_THRESHOLD);
	mallopt(M_TRIM_THRESHOLD, GLIBC_TRIM_THRESHOLD);
	(void)malloc_trim(0);
#endif
}
