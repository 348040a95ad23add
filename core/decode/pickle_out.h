/* SPDX-License-Identifier: MIT */
/*
 * pickle_out.h -- pickle opcodes, written as CPython's pickler
 * (Lib/pickle.py) writes them at protocol 2, for the two pickle writers:
 * pickle_emit.c (a decoded graph back to bytes) and export/ptsave.c (a
 * checkpoint as a torch.save ZIP).  The protocol 2 opcodes are those that
 * torch's weights-only unpickler accepts (torch/_weights_only_unpickler.py:
 * PROTO, STOP, GLOBAL, REDUCE, BUILD, MARK, TUPLE/TUPLE1-3, EMPTY_TUPLE/
 * LIST/DICT, APPEND(S), SETITEM(S), NONE, NEWTRUE/NEWFALSE, BININT/1/2,
 * LONG1, BINFLOAT, BINUNICODE, BINPERSID, BINPUT/LONG_BINPUT, BINGET/
 * LONG_BINGET); the rest are for values only a newer protocol (or
 * Python 2) could make: bytes, bytearray, sets, Python 2 strings.
 */
#ifndef PTFS_CORE_DECODE_PICKLE_OUT_H
#define PTFS_CORE_DECODE_PICKLE_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

void pko_proto(struct pt_buf *b, unsigned proto);
void pko_stop(struct pt_buf *b);
void pko_op(struct pt_buf *b, char op);      /* one-byte opcodes */
void pko_none(struct pt_buf *b);
void pko_bool(struct pt_buf *b, bool v);
void pko_int(struct pt_buf *b, int64_t v);
/* A little-endian two's complement integer of @n bytes: LONG1 (n < 256),
 * else LONG4 (n < 2^31: the caller checks). */
void pko_long(struct pt_buf *b, const uint8_t *p, size_t n);
void pko_float(struct pt_buf *b, double v);
/* UTF-8 text: BINUNICODE (BINUNICODE8 past 4 GiB). */
void pko_str(struct pt_buf *b, const void *p, size_t n);
void pko_cstr(struct pt_buf *b, const char *s);
/* Python 2 str: SHORT_BINSTRING (n < 256), else BINSTRING (n < 2^31: the
 * caller checks). */
void pko_py2str(struct pt_buf *b, const void *p, size_t n);
/* bytes: SHORT_BINBYTES, BINBYTES or BINBYTES8; bytearray: BYTEARRAY8. */
void pko_bytes(struct pt_buf *b, const void *p, size_t n);
void pko_bytearray(struct pt_buf *b, const void *p, size_t n);
/* GLOBAL "module\nname\n" (neither may hold a newline). */
void pko_global(struct pt_buf *b, const char *module, const char *name);
void pko_put(struct pt_buf *b, uint32_t idx);
void pko_get(struct pt_buf *b, uint32_t idx);
/* Close a tuple of @n items pushed after pko_mark() (n > 3) or without a
 * mark (n <= 3: EMPTY_TUPLE, TUPLE1-3). */
void pko_tuple(struct pt_buf *b, size_t n);

#define PKO_MARK '('
#define PKO_POP '0'
#define PKO_POP_MARK '1'
#define PKO_TUPLE 't'
#define PKO_EMPTY_LIST ']'
#define PKO_EMPTY_DICT '}'
#define PKO_APPEND 'a'
#define PKO_APPENDS 'e'
#define PKO_SETITEM 's'
#define PKO_SETITEMS 'u'
#define PKO_REDUCE 'R'
#define PKO_BUILD 'b'
#define PKO_OBJ 'o'
#define PKO_BINPERSID 'Q'
#define PKO_NEWOBJ '\x81'
#define PKO_EMPTY_SET '\x8f'
#define PKO_ADDITEMS '\x90'
#define PKO_FROZENSET '\x91'
#define PKO_NEWOBJ_EX '\x92'
#define PKO_STACK_GLOBAL '\x93'

#endif /* PTFS_CORE_DECODE_PICKLE_OUT_H */
