/* SPDX-License-Identifier: MIT */
/*
 * pickle_out.h -- a small pickle writer (protocol 2) for the opcodes that
 * torch's weights-only unpickler accepts (torch/_weights_only_unpickler.py:
 * PROTO, STOP, GLOBAL, REDUCE, BUILD, MARK, TUPLE/TUPLE1-3, EMPTY_TUPLE/
 * LIST/DICT, APPENDS, SETITEMS, NONE, NEWTRUE/NEWFALSE, BININT/1/2, LONG1,
 * BINFLOAT, BINUNICODE, BINPERSID, BINPUT/LONG_BINPUT, BINGET/
 * LONG_BINGET).  Nothing else is ever written.
 */
#ifndef PTFS_CORE_EXPORT_PICKLE_OUT_H
#define PTFS_CORE_EXPORT_PICKLE_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

void pko_proto(struct pt_buf *b);
void pko_stop(struct pt_buf *b);
void pko_op(struct pt_buf *b, char op);      /* one-byte opcodes */
void pko_none(struct pt_buf *b);
void pko_bool(struct pt_buf *b, bool v);
void pko_int(struct pt_buf *b, int64_t v);
/* A little-endian two's complement integer of @n bytes (LONG1, n < 256). */
void pko_long(struct pt_buf *b, const uint8_t *p, size_t n);
void pko_float(struct pt_buf *b, double v);
void pko_str(struct pt_buf *b, const void *p, size_t n);
void pko_cstr(struct pt_buf *b, const char *s);
void pko_global(struct pt_buf *b, const char *module, const char *name);
void pko_put(struct pt_buf *b, uint32_t idx);
void pko_get(struct pt_buf *b, uint32_t idx);
/* Close a tuple of @n items pushed after pko_mark() (n > 3) or without a
 * mark (n <= 3: EMPTY_TUPLE, TUPLE1-3). */
void pko_tuple(struct pt_buf *b, size_t n);

#define PKO_MARK '('
#define PKO_TUPLE 't'
#define PKO_EMPTY_LIST ']'
#define PKO_EMPTY_DICT '}'
#define PKO_APPENDS 'e'
#define PKO_SETITEMS 'u'
#define PKO_REDUCE 'R'
#define PKO_BUILD 'b'
#define PKO_BINPERSID 'Q'

#endif /* PTFS_CORE_EXPORT_PICKLE_OUT_H */
