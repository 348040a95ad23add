/* SPDX-License-Identifier: MIT */
/*
 * buf.h -- a growable byte buffer for generated text (JSON, listings).
 *
 * Appends never fail silently: on allocation failure the buffer remembers it
 * (b->oom) and later appends do nothing; check it once at the end.
 */
#ifndef PTFS_CORE_BUF_H
#define PTFS_CORE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct pt_buf {
	char *p;                /* bytes, NUL-terminated when len > 0 */
	size_t len;             /* bytes used */
	size_t cap;             /* bytes allocated */
	bool oom;               /* an append failed */
};

/* An empty buffer (no allocation yet). */
void pt_buf_init(struct pt_buf *b);

/* Room for @n more bytes now (a size known ahead: one allocation instead
 * of doublings); a hint, an allocation failure shows later as oom. */
void pt_buf_expect(struct pt_buf *b, size_t n);
/* Free the bytes; the buffer is empty again. */
void pt_buf_free(struct pt_buf *b);
/* pt_buf_add() when the bytes do not fit: grow, then append. */
void pt__buf_add_grow(struct pt_buf *b, const void *p, size_t n);

/* Room for element @n of the array *@arr, of *@cap elements of @elem
 * bytes: when it is full, its capacity doubles (16 at first), checked
 * against overflow.  False when out of memory; the array is then as it
 * was. */
bool pt_grow(void **arr, size_t *cap, size_t n, size_t elem);

/* Append @n bytes at @p, a NUL-terminated string, one byte, or printf()
 * output.  Cannot fail: out of memory sets b->oom and later appends do
 * nothing.  Inline: bytes go in place while there is room, and the
 * length of a literal is known where it is put (tree.json of 20,000
 * tensors is ~1 million pieces). */
static inline void pt_buf_add(struct pt_buf *b, const void *p, size_t n)
{
	if (!b->oom && b->cap - b->len > n) {
		if (n)
			memcpy(b->p + b->len, p, n);
		b->len += n;
		b->p[b->len] = '\0';
		return;
	}
	pt__buf_add_grow(b, p, n);
}

static inline void pt_buf_puts(struct pt_buf *b, const char *s)
{
	pt_buf_add(b, s, strlen(s));
}

static inline void pt_buf_putc(struct pt_buf *b, char c)
{
	pt_buf_add(b, &c, 1);
}

void pt_buf_printf(struct pt_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Append a number in decimal, like printf's %llu and %lld without its
 * cost (metadata of 20,000 tensors is mostly numbers). */
void pt_buf_put_u64(struct pt_buf *b, uint64_t v);
void pt_buf_put_i64(struct pt_buf *b, int64_t v);
/* Take the bytes (caller frees) and reset the buffer. */
char *pt_buf_take(struct pt_buf *b, size_t *len);

/*
 * Fault in the whole pages of [@p, @p + @n) with one system call
 * (MADV_POPULATE_WRITE, Linux 5.14) instead of one trap per page, for
 * fresh memory that is about to be filled whole anyway: the resident
 * size ends the same, the traps go.  Under a hypervisor a trap costs
 * 7-15 us (measured on the guests this was built on), and opening a
 * 20,000-tensor checkpoint in the daemon took ~2,700 of them before
 * fs/heap.c.  From 4 MiB on, the whole 2 MiB pages
 * inside the range are also advised for huge pages (MADV_HUGEPAGE) first:
 * on a guest whose page tables the hypervisor shadows, each 4 KiB page
 * still costs a trap on its first write after MADV_POPULATE_WRITE (9 MiB
 * filled: 20-38 ms; in huge pages 2-6 ms).  A hint: ranges under 64 KiB
 * and kernels without it are left alone.
 */
void pt_populate(void *p, size_t n);

#endif /* PTFS_CORE_BUF_H */
