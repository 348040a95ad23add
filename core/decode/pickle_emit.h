/* SPDX-License-Identifier: MIT */
/*
 * pickle_emit.h -- write a decoded pickle graph back as pickle bytes.
 *
 * pt_pickle_emit() turns a graph of struct pt_value nodes (from
 * pt_pickle_load(), possibly edited since) into a complete pickle,
 * PROTO n ... STOP, with the opcodes CPython's pickler (Lib/pickle.py,
 * _Pickler) writes at protocol 2, which torch's weights-only unpickler
 * reads; a node that only a newer protocol can make (bytes, bytearray,
 * set, frozenset, keyword arguments) gets its own opcode.  Every node
 * keeps its meaning: the same globals (a Python 2 spelling is written back
 * below protocol 3), the same opcode for calls (REDUCE, NEWOBJ, NEWOBJ_EX,
 * OBJ), the same bytes of every string and number, and the same sharing:
 * a node reached more than once (a tied tensor, a cycle) is put in the
 * memo once and fetched afterwards.  An unedited pickle that CPython made
 * at protocol 2 or 3 comes back as pickletools.optimize() would make it
 * (the memo entries no GET reads dropped).  See docs/FORMATS.md,
 * "Re-emitting a pickle".
 *
 * The graph is untrusted and may be cyclic: the walk is iterative, its
 * depth is capped by max_depth, the number of nodes by max_values, the
 * output by max_pickle_bytes (-EFBIG each), and a node whose arguments a
 * lean load dropped (PT_VF_LEAN) cannot be written (-EINVAL): write a
 * graph of pt_pickle_load(), not pt_pickle_load_lean().
 */
#ifndef PTFS_CORE_DECODE_PICKLE_EMIT_H
#define PTFS_CORE_DECODE_PICKLE_EMIT_H

#include "base/buf.h"
#include "base/error.h"
#include "base/pt_limits.h"
#include "decode/pickle.h"

/* One emission in progress (opaque); a persistent-id hook gets it. */
struct pt_pkemit;

/*
 * Write the value of the persistent id @persid (a PT_V_PERSID node) with
 * pt_pkemit_value(): one or more calls whose values leave exactly one
 * object on the pickle stack (usually one call for a tuple).  The emitter
 * then writes BINPERSID.  0, or a negative errno with @err set, which ends
 * the emission with that error.  The graph is written in two passes (the
 * first learns which memo entries are read), so the hook is called twice
 * for each persistent id, in the same order, and must write the same
 * value both times (a function of the node, or a table filled on first
 * sight, is).
 */
typedef int (*pt_pkemit_pid_fn)(void *ctx, struct pt_pkemit *e,
				const struct pt_value *persid,
				struct pt_error *err);

struct pt_pkemit_opts {
	/* PROTO to write, 2..5; 0 writes 2.  The opcodes are protocol 2's
	 * whatever the number (plus those that only a newer protocol has,
	 * for nodes that need them). */
	unsigned proto;
	/* max_depth, max_values, max_memo and max_pickle_bytes (of the
	 * output); NULL: pt_limits_default(). */
	const struct pt_limits *lim;
	/* NULL: the persistent id's value is written as it is. */
	pt_pkemit_pid_fn pid;
	void *pid_ctx;
};

/*
 * Append the pickle of the graph at @root to @out: PROTO, the value, STOP.
 * @o may be NULL (protocol 2, default limits, no hook).  Returns 0, or a
 * negative errno with @err set (@out then holds a part, to be dropped):
 * -EINVAL for a node that cannot be written (lean, an unknown kind, a
 * call without arguments), -EFBIG past a limit, -ENOMEM, or what the hook
 * returned.
 */
int pt_pickle_emit(const struct pt_value *root,
		   const struct pt_pkemit_opts *o, struct pt_buf *out,
		   struct pt_error *err);

/*
 * For a persistent-id hook: write the value @v (and what it refers to) at
 * the current place of the emission, sharing its memo: a node of the
 * graph given to pt_pickle_emit() that is reached more than once is put
 * and fetched as everywhere else.  @v may also be a node the hook made
 * (on its own stack, say): it is written by value, never memoized.  A
 * persistent id inside @v is refused (-EINVAL).  0 or a negative errno
 * (the emission's error is set; return it from the hook).
 */
int pt_pkemit_value(struct pt_pkemit *e, const struct pt_value *v);

#endif /* PTFS_CORE_DECODE_PICKLE_EMIT_H */
