/* SPDX-License-Identifier: MIT */
/*
 * pickle_disasm.c -- pt_pickle_disasm(): a pickle as text, one opcode a
 * line with its offset and argument, indented by open MARKs, in the
 * manner of Python's pickletools.dis() (what /.ptfs/pickle.txt holds).
 * It reads the opcodes with the machine's own argument decoder
 * (pickle_i.h), runs nothing, and stops at the first error, which it
 * names.
 */
#include "decode/pickle_i.h"

#include <errno.h>
#include <string.h>

#include "base/cancel.h"
#include "base/rd.h"
#include "base/text.h"

#define PT_DIS_STR_MAX 200 /* characters of a string argument shown */

/* Python-like repr body (no quotes) of @n bytes, at most @max shown. */
static void pt_dis_repr_body(struct pt_buf *b, const uint8_t *p, size_t n,
			     bool bytes, size_t max)
{
	size_t i = 0, shown = 0, k;

	while (i < n && shown < max) {
		uint8_t c = p[i];

		shown++;
		if (c == '\\' || c == '\'') {
			pt_buf_putc(b, '\\');
			pt_buf_putc(b, (char)c);
		} else if (c == '\n') {
			pt_buf_puts(b, "\\n");
		} else if (c == '\r') {
			pt_buf_puts(b, "\\r");
		} else if (c == '\t') {
			pt_buf_puts(b, "\\t");
		} else if (c >= 0x20 && c < 0x7f) {
			pt_buf_putc(b, (char)c);
		} else if (c >= 0x80 && !bytes) {
			for (k = 2; k <= 4 && k <= n - i; k++)
				if (pt_utf8_valid(p + i, k))
					break;
			if (k <= 4 && k <= n - i) {
				pt_buf_add(b, p + i, k);
				i += k;
				continue;
			}
			pt_buf_printf(b, "\\x%02x", c);
		} else {
			pt_buf_printf(b, "\\x%02x", c);
		}
		i++;
	}
	if (i < n)
		pt_buf_puts(b, "...");
}

/* Python-like repr: 'text' (valid UTF-8 kept) or b'bytes', truncated. */
static void pt_dis_repr(struct pt_buf *b, const uint8_t *p, size_t n,
			bool bytes)
{
	if (bytes)
		pt_buf_putc(b, 'b');
	pt_buf_putc(b, '\'');
	pt_dis_repr_body(b, p, n, bytes, PT_DIS_STR_MAX);
	pt_buf_putc(b, '\'');
	if (n > PT_DIS_STR_MAX)
		pt_buf_printf(b, " (%zu bytes)", n);
}

static void pt_dis_arg(struct pt_buf *b, uint8_t op, const struct pt_arg *a)
{
	double f;
	int64_t i;
	size_t k;

	switch (pt__pickle_ops[op].arg) {
	case PT_A_NONE:
		return;
	case PT_A_I32:
		pt_buf_printf(b, "%lld", (long long)a->i);
		return;
	case PT_A_U8:
	case PT_A_U16:
	case PT_A_U32:
	case PT_A_U64:
		pt_buf_printf(b, "%llu", (unsigned long long)a->u);
		return;
	case PT_A_F8BE:
		memcpy(&f, &a->u, sizeof(f));
		pt_buf_printf(b, "%.17g", f);
		return;
	case PT_A_LINE2:
		pt_buf_putc(b, '\'');
		pt_dis_repr_body(b, a->p, a->n, false, 100);
		pt_buf_putc(b, ' ');
		pt_dis_repr_body(b, a->p2, a->n2, false, 100);
		pt_buf_putc(b, '\'');
		return;
	default:
		break;
	}
	if (op == OP_LONG1 || op == OP_LONG4) {
		if (pt__le_fits_i64(a->p, a->n, &i)) {
			pt_buf_printf(b, "%lld", (long long)i);
			return;
		}
		pt_buf_printf(b, "<%zu-byte int 0x", a->n);
		for (k = a->n; k > 0 && a->n - k < 32; k--)
			pt_buf_printf(b, "%02x", a->p[k - 1]);
		pt_buf_puts(b, k > 0 ? "...>" : ">");
		return;
	}
	pt_dis_repr(b, a->p, a->n, op == OP_BINBYTES ||
		    op == OP_SHORT_BINBYTES || op == OP_BINBYTES8 ||
		    op == OP_BYTEARRAY8);
}

static int pt_dis_depth_change(uint8_t op)
{
	switch (op) {
	case OP_MARK:
		return 1;
	case OP_TUPLE:
	case OP_LIST:
	case OP_DICT:
	case OP_APPENDS:
	case OP_SETITEMS:
	case OP_ADDITEMS:
	case OP_FROZENSET:
	case OP_INST:
	case OP_OBJ:
	case OP_POP_MARK:
		return -1;
	default:
		return 0;
	}
}

/* Add @line to @out if it fits, keeping room for the "..." line. */
static bool pt_dis_emit(struct pt_buf *out, size_t start, size_t max_bytes,
			struct pt_buf *line)
{
	size_t used = out->len - start;

	if (line->oom || used > max_bytes || line->len + 4 > max_bytes - used) {
		pt_buf_puts(out, "...\n");
		return false;
	}
	pt_buf_add(out, line->p, line->len);
	return true;
}

int pt_pickle_disasm(const uint8_t *buf, size_t len, struct pt_buf *out,
		     size_t max_bytes)
{
	struct pt_rd rd = pt_rd_make(buf, len);
	struct pt_buf line;
	struct pt_arg a;
	size_t start = out->len, off;
	int depth = 0, d, rc = 0;
	unsigned long ops = 0;
	char why[128];
	uint8_t op;

	pt_buf_init(&line);
	for (;;) {
		line.len = 0;
		off = rd.pos;
		/* a pickle of 100 MB is millions of lines: a reader that went
		 * away stops it (one check every 4096 opcodes) */
		if (++ops % 4096 == 0 && pt_cancelled()) {
			rc = -EINTR;
			break;
		}
		if (!pt_rd_u8(&rd, &op)) {
			pt_buf_printf(&line, "error at offset %zu: input ends without STOP\n",
				      off);
			pt_dis_emit(out, start, max_bytes, &line);
			break;
		}
		if (!pt__pickle_ops[op].name) {
			pt_buf_printf(&line, "error at offset %zu: unknown opcode 0x%02x\n",
				      off, op);
			pt_dis_emit(out, start, max_bytes, &line);
			break;
		}
		if (!pt_read_arg(&rd, pt__pickle_ops[op].arg, &a, why, sizeof(why))) {
			pt_buf_printf(&line, "error at offset %zu: %s: %s\n",
				      off, pt__pickle_ops[op].name, why);
			pt_dis_emit(out, start, max_bytes, &line);
			break;
		}
		d = pt_dis_depth_change(op);
		if (d < 0 && depth > 0)
			depth--;
		pt_buf_printf(&line, "%6zu: %*s%-16s ", off,
			      2 * (depth < 20 ? depth : 20), "",
			      pt__pickle_ops[op].name);
		pt_dis_arg(&line, op, &a);
		while (line.len > 0 && line.p[line.len - 1] == ' ')
			line.len--;
		pt_buf_putc(&line, '\n');
		if (d > 0)
			depth++;
		if (!pt_dis_emit(out, start, max_bytes, &line))
			break;
		if (op == OP_STOP) {
			if (rd.pos < len) {
				line.len = 0;
				pt_buf_printf(&line, "(%zu bytes after STOP)\n",
					      len - rd.pos);
				pt_dis_emit(out, start, max_bytes, &line);
			}
			break;
		}
	}
	pt_buf_free(&line);
	return rc;
}
