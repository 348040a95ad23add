/* SPDX-License-Identifier: MIT */
/*
 * pickle_i.h -- what the pickle machine's files share (not an API):
 *
 *   pickle_arena.c   the arena every node of a loaded graph lives in
 *   pickle.c         the machine: opcodes run into a graph, lean loads
 *   pickle_disasm.c  the disassembler (/.ptfs/pickle.txt)
 *
 * pickle.c calls pickle_arena.c; pickle_disasm.c calls pickle.c (the
 * opcode table).  The block layout of the arena is here because a lean
 * load cuts the block being filled back to a mark.
 */
#ifndef PTFS_CORE_DECODE_PICKLE_I_H
#define PTFS_CORE_DECODE_PICKLE_I_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/rd.h"
#include "decode/pickle.h"

/* ---- arena (pickle_arena.c) ---- */

/* 8, not 16: nothing in the arena needs more than a pointer's alignment,
 * and a 40-byte node padded to 48 cost a state dict of 20,000 tensors
 * 1.4 MB. */
#define PT_ARENA_ALIGN ((size_t)8)

struct pt_arena_blk {
	struct pt_arena_blk *next; /* older blocks */
	size_t size;               /* usable bytes after the header */
	size_t used;               /* bytes handed out */
};

#define PT_BLK_HDR \
	((sizeof(struct pt_arena_blk) + PT_ARENA_ALIGN - 1) & \
	 ~(PT_ARENA_ALIGN - 1))

struct pt_pickle {
	struct pt_arena_blk *blk; /* arena blocks, the one being filled first */
	size_t blk_size;          /* size of the next block (grows) */
	uint64_t mem;             /* bytes allocated (arena + VM scratch) */
	uint64_t mem_max;         /* lim->max_memory at load time */
	void **grown;             /* sequences grown past PT_SEQ_HEAP_MIN:
				   * while loading their struct pt_vseq *,
				   * after it their malloc'd arrays */
	size_t n_grown, cap_grown;
	uint32_t n_blk;           /* blocks made (a lean load's marks note it) */
	uint32_t count;           /* nodes created */
	int proto;                /* highest PROTO seen */
	struct pt_value *root;    /* what STOP returned */
};

/* ---- opcodes: numbers, argument kinds, the argument decoder ---- */

enum pt_argk {
	PT_A_NONE,
	PT_A_U8,
	PT_A_U16,
	PT_A_U32,
	PT_A_I32,
	PT_A_U64,
	PT_A_F8BE,  /* 8-byte big-endian double */
	PT_A_LINE,  /* text up to '\n' */
	PT_A_LINE2, /* two lines (GLOBAL, INST) */
	PT_A_LEN1,  /* u8 length + bytes */
	PT_A_LEN4,  /* u32 length + bytes */
	PT_A_LEN4S, /* i32 length (negative is an error) + bytes */
	PT_A_LEN8,  /* u64 length + bytes */
};

enum {
	OP_MARK = '(',
	OP_STOP = '.',
	OP_POP = '0',
	OP_POP_MARK = '1',
	OP_DUP = '2',
	OP_FLOAT = 'F',
	OP_INT = 'I',
	OP_BININT = 'J',
	OP_BININT1 = 'K',
	OP_LONG = 'L',
	OP_BININT2 = 'M',
	OP_NONE = 'N',
	OP_PERSID = 'P',
	OP_BINPERSID = 'Q',
	OP_REDUCE = 'R',
	OP_STRING = 'S',
	OP_BINSTRING = 'T',
	OP_SHORT_BINSTRING = 'U',
	OP_UNICODE = 'V',
	OP_BINUNICODE = 'X',
	OP_APPEND = 'a',
	OP_BUILD = 'b',
	OP_GLOBAL = 'c',
	OP_DICT = 'd',
	OP_EMPTY_DICT = '}',
	OP_APPENDS = 'e',
	OP_GET = 'g',
	OP_BINGET = 'h',
	OP_INST = 'i',
	OP_LONG_BINGET = 'j',
	OP_LIST = 'l',
	OP_EMPTY_LIST = ']',
	OP_OBJ = 'o',
	OP_PUT = 'p',
	OP_BINPUT = 'q',
	OP_LONG_BINPUT = 'r',
	OP_SETITEM = 's',
	OP_TUPLE = 't',
	OP_EMPTY_TUPLE = ')',
	OP_SETITEMS = 'u',
	OP_BINFLOAT = 'G',
	OP_BINBYTES = 'B',
	OP_SHORT_BINBYTES = 'C',
	OP_PROTO = 0x80,
	OP_NEWOBJ = 0x81,
	OP_EXT1 = 0x82,
	OP_EXT2 = 0x83,
	OP_EXT4 = 0x84,
	OP_TUPLE1 = 0x85,
	OP_TUPLE2 = 0x86,
	OP_TUPLE3 = 0x87,
	OP_NEWTRUE = 0x88,
	OP_NEWFALSE = 0x89,
	OP_LONG1 = 0x8a,
	OP_LONG4 = 0x8b,
	OP_SHORT_BINUNICODE = 0x8c,
	OP_BINUNICODE8 = 0x8d,
	OP_BINBYTES8 = 0x8e,
	OP_EMPTY_SET = 0x8f,
	OP_ADDITEMS = 0x90,
	OP_FROZENSET = 0x91,
	OP_NEWOBJ_EX = 0x92,
	OP_STACK_GLOBAL = 0x93,
	OP_MEMOIZE = 0x94,
	OP_FRAME = 0x95,
	OP_BYTEARRAY8 = 0x96,
	OP_NEXT_BUFFER = 0x97,
	OP_READONLY_BUFFER = 0x98,
};

struct pt_opinfo {
	const char *name; /* pickletools name; NULL: not an opcode */
	uint8_t arg;      /* enum pt_argk */
};

/* A decoded opcode argument. */
struct pt_arg {
	uint64_t u;           /* unsigned integer, length, or raw BINFLOAT */
	int64_t i;            /* BININT, EXT4 */
	const uint8_t *p;     /* bytes, or the first line without '\n' */
	size_t n;             /* bytes at p */
	const uint8_t *p2;    /* second line (GLOBAL, INST) */
	size_t n2;            /* bytes at p2 */
	size_t off;           /* input offset of p */
};

static inline bool pt_read_line(struct pt_rd *rd, const uint8_t **p, size_t *n)
{
	const uint8_t *start = rd->p + rd->pos;
	const uint8_t *nl;

	if (pt_rd_left(rd) == 0)
		return false;
	nl = memchr(start, '\n', pt_rd_left(rd));
	if (!nl)
		return false;
	*p = start;
	*n = (size_t)(nl - start);
	rd->pos += *n + 1;
	return true;
}

/* Take @len bytes declared by the input, checked before anything else. */
static inline bool pt_read_counted(struct pt_rd *rd, uint64_t len,
				   struct pt_arg *a, char *why, size_t whylen)
{
	if (len > (uint64_t)pt_rd_left(rd)) {
		snprintf(why, whylen,
			 "length %llu past end of input (%zu bytes left)",
			 (unsigned long long)len, pt_rd_left(rd));
		return false;
	}
	a->u = len;
	a->off = rd->pos;
	a->n = (size_t)len;
	a->p = pt_rd_take(rd, a->n);
	return true;
}

/* Decode the argument of an opcode of kind @k; false with @why on error.
 * Inlined into the machine's loop: a call per opcode (618,051 for a
 * state dict of 20,000 tensors) was 13 M of `ptfs info`'s 225 M
 * instructions. */
static inline __attribute__((always_inline)) bool
pt_read_arg(struct pt_rd *rd, uint8_t k, struct pt_arg *a, char *why,
	    size_t whylen)
{
	const uint8_t *q = NULL;
	uint8_t b = 0;
	uint16_t h = 0;
	uint32_t w = 0;
	uint64_t d = 0;
	size_t i;

	memset(a, 0, sizeof(*a));
	switch (k) {
	case PT_A_NONE:
		return true;
	case PT_A_U8:
	case PT_A_LEN1:
		if (!pt_rd_u8(rd, &b))
			break;
		if (k == PT_A_LEN1)
			return pt_read_counted(rd, b, a, why, whylen);
		a->u = b;
		return true;
	case PT_A_U16:
		if (!pt_rd_u16(rd, &h))
			break;
		a->u = h;
		return true;
	case PT_A_U32:
	case PT_A_I32:
	case PT_A_LEN4:
	case PT_A_LEN4S:
		if (!pt_rd_u32(rd, &w))
			break;
		a->u = w;
		a->i = (int32_t)w;
		if (k == PT_A_LEN4)
			return pt_read_counted(rd, w, a, why, whylen);
		if (k != PT_A_LEN4S)
			return true;
		if (a->i < 0) {
			snprintf(why, whylen, "negative length %lld",
				 (long long)a->i);
			return false;
		}
		return pt_read_counted(rd, w, a, why, whylen);
	case PT_A_U64:
	case PT_A_LEN8:
		if (!pt_rd_u64(rd, &d))
			break;
		if (k == PT_A_LEN8)
			return pt_read_counted(rd, d, a, why, whylen);
		a->u = d;
		return true;
	case PT_A_F8BE:
		q = pt_rd_take(rd, 8);
		if (!q)
			break;
		for (i = 0; i < 8; i++)
			a->u = a->u << 8 | q[i];
		return true;
	case PT_A_LINE:
	case PT_A_LINE2:
		a->off = rd->pos;
		if (!pt_read_line(rd, &a->p, &a->n))
			goto noline;
		if (k == PT_A_LINE2 && !pt_read_line(rd, &a->p2, &a->n2))
			goto noline;
		return true;
	default:
		break;
	}
	snprintf(why, whylen, "truncated argument (%zu bytes left)",
		 pt_rd_left(rd));
	return false;
noline:
	snprintf(why, whylen, "argument line without newline");
	return false;
}

/* pickle_arena.c: reserve @n bytes of the memory budget (false when over
 * max_memory); @n zeroed bytes of the arena in *@out (0, -ENOMEM, or
 * -EFBIG past max_memory); after a load, give the empty tail of the
 * block being filled back to the kernel. */
bool pt__pickle_mem_take(struct pt_pickle *pk, uint64_t n);
int pt__arena_alloc(struct pt_pickle *pk, size_t n, void **out);
void pt__arena_trim(struct pt_pickle *pk);

/* pickle.c: every opcode's name and argument kind, by opcode. */
extern const struct pt_opinfo pt__pickle_ops[256];

/* pickle.c: is the @n-byte two's complement little-endian integer in
 * int64 range?  Its value in *@out when it is. */
bool pt__le_fits_i64(const uint8_t *p, size_t n, int64_t *out);

#endif /* PTFS_CORE_DECODE_PICKLE_I_H */
