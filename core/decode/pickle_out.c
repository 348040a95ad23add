/* SPDX-License-Identifier: MIT */
/*
 * pickle_out.c -- the opcodes of pickle_out.h, written as Python's pickle
 * module writes them at protocol 2.
 */
#include "decode/pickle_out.h"

#include <string.h>

static void u32le(struct pt_buf *b, uint32_t v)
{
	char c[4] = { (char)(v & 0xff), (char)((v >> 8) & 0xff),
		      (char)((v >> 16) & 0xff), (char)(v >> 24) };

	pt_buf_add(b, c, 4);
}

void pko_proto(struct pt_buf *b, unsigned proto)
{
	pt_buf_putc(b, '\x80');
	pt_buf_putc(b, (char)proto);
}

static void u64le(struct pt_buf *b, uint64_t v)
{
	u32le(b, (uint32_t)v);
	u32le(b, (uint32_t)(v >> 32));
}

/* An opcode with a length of 1 (@n < 256), 4 or 8 bytes before the data:
 * @ops lists the three opcodes, 0 for a form that does not exist. */
static void counted(struct pt_buf *b, const char ops[3], const void *p,
		    size_t n)
{
	if (ops[0] && n < 256) {
		pt_buf_putc(b, ops[0]);
		pt_buf_putc(b, (char)n);
	} else if (ops[1] && (uint64_t)n <= UINT32_MAX) {
		pt_buf_putc(b, ops[1]);
		u32le(b, (uint32_t)n);
	} else {
		pt_buf_putc(b, ops[2]);
		u64le(b, n);
	}
	pt_buf_add(b, p, n);
}

void pko_stop(struct pt_buf *b)
{
	pt_buf_putc(b, '.');
}

void pko_op(struct pt_buf *b, char op)
{
	pt_buf_putc(b, op);
}

void pko_none(struct pt_buf *b)
{
	pt_buf_putc(b, 'N');
}

void pko_bool(struct pt_buf *b, bool v)
{
	pt_buf_putc(b, v ? '\x88' : '\x89');
}

void pko_long(struct pt_buf *b, const uint8_t *p, size_t n)
{
	if (n < 256) {
		pt_buf_putc(b, '\x8a');
		pt_buf_putc(b, (char)n);
	} else {
		pt_buf_putc(b, '\x8b');
		u32le(b, (uint32_t)n);
	}
	pt_buf_add(b, p, n);
}

void pko_int(struct pt_buf *b, int64_t v)
{
	uint8_t le[8];
	size_t n = 8;
	int i;

	if (v >= 0 && v < 256) {
		pt_buf_putc(b, 'K');
		pt_buf_putc(b, (char)v);
	} else if (v >= 0 && v < 65536) {
		pt_buf_putc(b, 'M');
		pt_buf_putc(b, (char)(v & 0xff));
		pt_buf_putc(b, (char)(v >> 8));
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		pt_buf_putc(b, 'J');
		u32le(b, (uint32_t)(int32_t)v);
	} else {
		for (i = 0; i < 8; i++)
			le[i] = (uint8_t)((uint64_t)v >> (8 * i));
		/* shortest two's complement form */
		while (n > 1 && ((le[n - 1] == 0 && !(le[n - 2] & 0x80)) ||
				 (le[n - 1] == 0xff && (le[n - 2] & 0x80))))
			n--;
		pko_long(b, le, n);
	}
}

void pko_float(struct pt_buf *b, double v)
{
	uint64_t u;
	char c[9];
	int i;

	memcpy(&u, &v, 8);
	c[0] = 'G';
	for (i = 0; i < 8; i++)
		c[1 + i] = (char)(u >> (56 - 8 * i));
	pt_buf_add(b, c, 9);
}

void pko_str(struct pt_buf *b, const void *p, size_t n)
{
	counted(b, "\0X\x8d", p, n);
}

void pko_py2str(struct pt_buf *b, const void *p, size_t n)
{
	counted(b, "UT", p, n);
}

void pko_bytes(struct pt_buf *b, const void *p, size_t n)
{
	counted(b, "CB\x8e", p, n);
}

void pko_bytearray(struct pt_buf *b, const void *p, size_t n)
{
	counted(b, "\0\0\x96", p, n);
}

void pko_cstr(struct pt_buf *b, const char *s)
{
	pko_str(b, s, strlen(s));
}

void pko_global(struct pt_buf *b, const char *module, const char *name)
{
	pt_buf_putc(b, 'c');
	pt_buf_puts(b, module);
	pt_buf_putc(b, '\n');
	pt_buf_puts(b, name);
	pt_buf_putc(b, '\n');
}

void pko_put(struct pt_buf *b, uint32_t idx)
{
	if (idx < 256) {
		pt_buf_putc(b, 'q');
		pt_buf_putc(b, (char)idx);
	} else {
		pt_buf_putc(b, 'r');
		u32le(b, idx);
	}
}

void pko_get(struct pt_buf *b, uint32_t idx)
{
	if (idx < 256) {
		pt_buf_putc(b, 'h');
		pt_buf_putc(b, (char)idx);
	} else {
		pt_buf_putc(b, 'j');
		u32le(b, idx);
	}
}

void pko_tuple(struct pt_buf *b, size_t n)
{
	static const char op[] = { ')', '\x85', '\x86', '\x87' };

	pt_buf_putc(b, n <= 3 ? op[n] : 't');
}
