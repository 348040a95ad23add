/* SPDX-License-Identifier: MIT */
/*
 * pickle.h -- a safe pickle decoder: protocols 0-5, no code execution.
 *
 * pt_pickle_load() runs the pickle machine over a byte range and builds an
 * inert graph of struct pt_value nodes, all in one arena owned by the
 * struct pt_pickle.  GLOBAL/STACK_GLOBAL become name nodes (never imported);
 * REDUCE, NEWOBJ, NEWOBJ_EX, INST and OBJ become call nodes (never run);
 * BUILD attaches its state to the node; persistent ids become PERSID nodes
 * holding the pid value.  The memo holds references, so a dict filled after
 * BINPUT is the same node everywhere it is fetched, and graphs may be
 * cyclic.  The machine is iterative (no recursion) and every count is capped
 * by struct pt_limits.  Opcode names follow CPython's Lib/pickletools.py.
 *
 * A loaded graph is not immutable, and who changes what is fixed:
 * - while the checkpoint opens (one thread): a format's open() may rewrite
 *   nodes whose meaning it owns (fmt/legacy.c turns a module's persistent
 *   id into a GLOBAL, fmt/tar.c and fmt/dcp.c replace values they decode,
 *   `kind` included), and torch.c classifies values, setting `aux16` and
 *   `aux` (tensor, bytes, text);
 * - after open, while threads share it: only ckpt/entries.c writes, setting
 *   `aux` of a directory value (its entry table) once, lazily, under the
 *   tree's lock, published with release/acquire atomics.
 * Nothing else writes a node after open.
 */
#ifndef PTFS_CORE_PICKLE_H
#define PTFS_CORE_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/pt_limits.h"

enum pt_vkind {
	PT_V_NONE,
	PT_V_BOOL,
	PT_V_INT,       /* fits int64: u.i */
	PT_V_BIGINT,    /* u.s: little-endian two's complement bytes (LONG1/4,
			 * or LONG/INT text out of int64 range, converted) */
	PT_V_FLOAT,     /* u.f */
	PT_V_STR,       /* u.s: UTF-8 text (see PT_VF_PY2STR) */
	PT_V_BYTES,     /* u.s */
	PT_V_BYTEARRAY, /* u.s */
	PT_V_TUPLE,     /* u.seq */
	PT_V_LIST,      /* u.seq */
	PT_V_DICT,      /* u.dict */
	PT_V_SET,       /* u.seq (EMPTY_SET + ADDITEMS) */
	PT_V_FROZENSET, /* u.seq */
	PT_V_GLOBAL,    /* u.global: a reference to module.name */
	PT_V_CALL,      /* u.call: REDUCE (callable(*args)) */
	PT_V_OBJ,       /* u.call: NEWOBJ/NEWOBJ_EX/INST/OBJ (cls, args,
			 * kwargs) */
	PT_V_PERSID,    /* u.pid: persistent id (PERSID text as a PT_V_STR,
			 * BINPERSID: the popped value) */
};

/* Flags on a node. */
#define PT_VF_PY2STR 0x1   /* STRING/BINSTRING/SHORT_BINSTRING: bytes that
			    * Python 2 called str; may not be valid UTF-8 */
#define PT_VF_LEAN 0x2     /* a call classified while loading (see
			    * pt_pickle_load_lean): its arguments were
			    * dropped, u.call.args is an empty tuple */
#define PT_VF_INST 0x4     /* a PT_V_OBJ made by INST or OBJ (CPython's
			    * _instantiate: cls(*args), or cls.__new__(cls)
			    * when there are none and cls is a class), not
			    * by NEWOBJ (cls.__new__(cls, *args)) */
#define PT_VF_NEWOBJ_EX 0x8 /* a PT_V_OBJ made by NEWOBJ_EX (its keyword
			     * dict may be empty) */

struct pt_value;

struct pt_vseq {
	struct pt_value **v;    /* elements (arena) */
	size_t n;               /* count */
	size_t cap;             /* allocated */
};

/*
 * The parts of a call that most calls lack (a state dict's 20,000
 * _rebuild_tensor_v2 and OrderedDict() calls have none), kept out of line
 * so that every node is 40 bytes instead of 96.  Made in the arena on
 * first use: NEWOBJ_EX keywords, BUILD, APPEND(S)/SETITEM(S) onto a call.
 */
struct pt_vcall_ext {
	struct pt_value *kwargs;        /* NEWOBJ_EX dict or NULL */
	struct pt_value *state;         /* last BUILD state or NULL */
	struct pt_vseq items;           /* APPEND(S) onto it */
	struct pt_vseq kv;              /* SETITEM(S) onto it, as in
					 * dict.kv */
};

struct pt_value {
	uint8_t kind;           /* enum pt_vkind */
	uint8_t flags;          /* PT_VF_* */
	uint16_t aux16;         /* free for later passes (torch.c) */
	uint32_t id;            /* creation order, 0-based, unique per pickle */
	void *aux;              /* free for later passes (torch.c) */
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const uint8_t *p; /* bytes: inside the input buffer
					   * (zero-copy) or in the arena */
			size_t len;
			uint64_t in_off;  /* offset of p in the input buffer
					   * when p points into it, else
					   * UINT64_MAX */
		} s;
		struct pt_vseq seq;
		struct {
			struct pt_vseq kv; /* kv.v[2i] key, kv.v[2i+1] value;
					    * kv.n counts both (2 * pairs) */
		} dict;
		struct {
			const char *module; /* NUL-terminated (arena) */
			const char *name;   /* NUL-terminated (arena) */
			/* NULL, or when a pickle below protocol 3 named a
			 * Python 2 global that module/name translate (as
			 * CPython's Lib/_compat_pickle.py does): its own
			 * spelling, "module\0name\0" (arena) */
			const char *py2;
		} global;
		struct {
			struct pt_value *callable; /* REDUCE: the callable;
						    * OBJ: the class */
			struct pt_value *args;     /* a TUPLE (never NULL) */
			struct pt_vcall_ext *ext;  /* the rest, or NULL when
						    * it has none: read it
						    * with pt_call_*() */
		} call;
		struct pt_value *pid;
	} u;
};

/* An empty sequence, for calls without items. */
extern const struct pt_vseq pt_vseq_empty;

/* A call's (PT_V_CALL, PT_V_OBJ) keyword arguments, BUILD state, appended
 * items and set items: NULL or empty when it has none. */
static inline struct pt_value *pt_call_kwargs(const struct pt_value *v)
{
	return v->u.call.ext ? v->u.call.ext->kwargs : NULL;
}

static inline struct pt_value *pt_call_state(const struct pt_value *v)
{
	return v->u.call.ext ? v->u.call.ext->state : NULL;
}

static inline const struct pt_vseq *pt_call_items(const struct pt_value *v)
{
	return v->u.call.ext ? &v->u.call.ext->items : &pt_vseq_empty;
}

static inline const struct pt_vseq *pt_call_kv(const struct pt_value *v)
{
	return v->u.call.ext ? &v->u.call.ext->kv : &pt_vseq_empty;
}

/* The text of a str (or Python 2 bytes) value @v, NUL-terminated in @tmp
 * (@cap bytes): false when @v is NULL or another kind, holds a NUL, or
 * does not fit. */
static inline bool pt_value_text(const struct pt_value *v, char *tmp,
				 size_t cap)
{
	if (!v || (v->kind != PT_V_STR && v->kind != PT_V_BYTES) ||
	    v->u.s.len >= cap || memchr(v->u.s.p, '\0', v->u.s.len))
		return false;
	memcpy(tmp, v->u.s.p, v->u.s.len);
	tmp[v->u.s.len] = '\0';
	return true;
}

struct pt_pickle;

/*
 * Decode one pickle from @buf[0..@len) up to and including its STOP opcode.
 * The graph may point into @buf (strings and bytes are not copied), so @buf
 * must outlive the struct pt_pickle.  *@used gets the bytes consumed (the
 * offset just past STOP), for streams of several pickles (the legacy
 * format).  Returns 0 and sets *@out, or a negative errno (-EBADMSG for
 * malformed input naming the opcode and its offset, -EFBIG for a limit,
 * -ENOTSUP for out-of-band buffers and extension codes, -ENOMEM) with *@out
 * NULL.
 */
int pt_pickle_load(struct pt_pickle **out, const uint8_t *buf, size_t len,
		   size_t *used, const struct pt_limits *lim,
		   struct pt_error *err);

/*
 * Called by a lean load after each REDUCE whose argument tuple was built
 * right before it (MARK ... TUPLE), with the new call node: 1 when the
 * callback classified @call for good (its aux and aux16 say what it is) and
 * nothing will read its arguments again, 0 to keep them, or a negative
 * errno that fails the load (@err set).
 */
typedef int (*pt_pickle_reduce_fn)(void *ctx, struct pt_value *call,
				   struct pt_error *err);

/*
 * pt_pickle_load() for a graph that is classified as it is built.  When
 * @reduce claims a call, the nodes made for its arguments since their MARK
 * are given back to the arena at once, unless something else can still
 * reach them (an older container that got items meanwhile, a memo entry a
 * later GET reads that is not a scalar, string or global); those the memo
 * or the shared scalars keep are moved down, and the call gets the flag
 * PT_VF_LEAN.  A state dict then costs its keys and one node per tensor
 * instead of ~10 (size, stride, persistent id...).  Before the run, one
 * scan of the opcodes notes which memo entries are ever read.
 */
int pt_pickle_load_lean(struct pt_pickle **out, const uint8_t *buf,
			size_t len, size_t *used, const struct pt_limits *lim,
			pt_pickle_reduce_fn reduce, void *ctx,
			struct pt_error *err);

/* Free the pickle and every node of its graph (NULL is fine). */
void pt_pickle_free(struct pt_pickle *pk);

/* The value STOP returned (borrowed; valid until pt_pickle_free()). */
struct pt_value *pt_pickle_root(const struct pt_pickle *pk);

/* Number of nodes created (ids are 0 .. count-1). */
uint32_t pt_pickle_count(const struct pt_pickle *pk);

/* The highest protocol seen (PROTO opcode), 0 when there was none: what
 * pt_pickle_emit() (pickle_emit.h) writes it back with. */
int pt_pickle_protocol(const struct pt_pickle *pk);

/*
 * Allocate @n bytes in the pickle's arena (freed with the pickle), for later
 * passes that need to create strings or nodes with the graph's lifetime.
 * Returns NULL when out of memory or past max_memory.
 */
void *pt_pickle_alloc(struct pt_pickle *pk, size_t n);

/*
 * Append a disassembly of the pickle at @buf[0..@len) to @out, one opcode
 * per line, like Python's pickletools.dis: offset, opcode name, argument.
 * Never fails on bad input: it stops with a line naming the problem.
 * Output is capped at @max_bytes (a final "..." line says so).  0, or
 * -EINTR when pt_cancelled() ended it (@out then holds a part).
 */
int pt_pickle_disasm(const uint8_t *buf, size_t len, struct pt_buf *out,
		     size_t max_bytes);

/*
 * A growable stack of values, for walks over a graph without recursion.
 * Zero-initialise it; free it with pt_vstack_free().
 */
struct pt_vstack {
	struct pt_value **v;    /* values (malloc) */
	size_t n;               /* on the stack */
	size_t cap;             /* allocated */
};

/* Push @v (NULL is ignored).  0 or -ENOMEM. */
int pt_vstack_push(struct pt_vstack *s, struct pt_value *v);

/* Push every value @v refers to: elements; keys and values; the callable,
 * arguments, keyword arguments, BUILD state, appended and set items of a
 * call; the id of a persistent id.  0 or -ENOMEM. */
int pt_vstack_push_children(struct pt_vstack *s, const struct pt_value *v);

/* The same without descending into persistent ids (their tuples are not
 * values of the object, only references to storages). */
int pt_vstack_push_values(struct pt_vstack *s, const struct pt_value *v);

/* Free the stack's array (not the values); it is empty again. */
void pt_vstack_free(struct pt_vstack *s);

#endif /* PTFS_CORE_PICKLE_H */
