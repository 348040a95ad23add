/* SPDX-License-Identifier: MIT */
/*
 * heap.c -- how the process's heap grows while a checkpoint is opened.
 *
 * Opening a checkpoint of 20,000 tensors allocates ~20 MB in ~200,000
 * small pieces.  In 4 KiB pages (the kernel's default THP mode is
 * "madvise") that is ~4,600 page faults, each a trap and a clear_page,
 * and with them the TLB misses of walking 20 MB: ~30% of `ptfs info`.
 * On a guest whose page tables the hypervisor shadows, the first touch
 * of a page costs more again (7-15 us a page measured here, even after
 * MADV_POPULATE_WRITE).  So the heap first grows in one step of
 * HEAP_RESERVE, advised for huge pages, and the same memory arrives in
 * 2 MiB faults.  Untouched pages of the reserve cost nothing but address
 * space; later growth is glibc's usual (top pad back to its default), so
 * a system with strict overcommit is asked for no more than before.
 *
 * The mount's daemon then calls ptfs_heap_settle(): its resident size is
 * what users watch for the life of the mount, so it takes the hint back,
 * sets thresholds near where glibc's own would be after an open, and
 * gives back what the open freed between blocks that stay
 * (the pickle machine's memo and stack, the central directory; malloc_trim
 * splits the huge pages it frees from).  Later allocations come from the
 * worker threads' arenas, so those pages stay free.  Measured at 20,000 tensors: daemon page
 * faults to mount 4,370 -> 1,150-1,170 (two runs), VmHWM after mount +
 * ls -lR unchanged (20.6 MiB both).
 */
#include "ptfs.h"

#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define HEAP_RESERVE (256u << 20)
#define HUGE_PAGE (2u << 20)
#define GLIBC_TOP_PAD (128 << 10)       /* DEFAULT_TOP_PAD */
/*
 * The daemon's thresholds once settled.  Setting them turns glibc's own
 * adjustment off for good, and at its starting 128 KiB every READ buffer
 * of a view, a compressed record or a remote tensor (up to 1 MiB) would
 * be a fresh mapping, faulted in page by page each time (1 MiB reads of a
 * 64 MiB view: 16,500 faults against ~500).  glibc's adjustment had
 * reached about this after an open (the freed data.pkl, 2 MB here).
 */
#define SETTLED_MMAP_THRESHOLD (4 << 20)
#define SETTLED_TRIM_THRESHOLD (8 << 20)

/* the range advised for huge pages, given back to small pages once the
 * daemon settles */
static uintptr_t advised_lo, advised_hi;

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
	if (lo != (uintptr_t)-1 && hi > lo &&
	    madvise((void *)lo, hi - lo, MADV_HUGEPAGE) == 0) {   /* a hint */
		advised_lo = lo;
		advised_hi = hi;
	}
#endif
}

void ptfs_heap_settle(void)
{
#ifdef __GLIBC__
	mallopt(M_MMAP_THRESHOLD, SETTLED_MMAP_THRESHOLD);
	mallopt(M_TRIM_THRESHOLD, SETTLED_TRIM_THRESHOLD);
	/* without this, khugepaged fills the holes the trim gives back with
	 * huge pages again while the mount sits idle (20.7 -> 23.2 MB in
	 * 30 s at 20,000 tensors) */
	if (advised_hi > advised_lo)
		(void)madvise((void *)advised_lo, advised_hi - advised_lo,
			      MADV_NOHUGEPAGE);
	(void)malloc_trim(0);
#endif
}
