/* SPDX-License-Identifier: MIT */
/*
 * pickle_emit.c -- a decoded pickle graph written back as pickle bytes;
 * see pickle_emit.h and docs/FORMATS.md, "Re-emitting a pickle".
 *
 * Each node is written as CPython's pickler writes the object it stands
 * for, with an explicit stack of frames, one per node being written.  The
 * memo is CPython's followed by pickletools.optimize(): CPython puts
 * every object of a memoized kind (all but None, bools, numbers and the
 * empty tuple) once made -- a list, dict or set right after its EMPTY_*
 * opcode, a call right after REDUCE/NEWOBJ/OBJ, before its items and its
 * BUILD state -- and fetches it with GET when it meets it again; only
 * the entries some GET reads are kept.  So the graph is written twice:
 * a first pass puts every node and notes which ones a GET reads (its
 * bytes are dropped as they come), the second puts only those, numbered
 * from 0.  Both passes take the same path, a GET of the first being a
 * GET of the second.
 *
 * A tuple, frozenset, call or persistent id met again while its own parts
 * are being written (a cycle through a list among them) is written again
 * there, as CPython does; when the outer writing ends, the node is in the
 * memo already, so the parts pushed for it are popped and it is fetched.
 * Which nodes the memo may hold is decided first, by a walk from the
 * root in a table keyed by the node's address (an editor's nodes have no
 * id of the pickle): nodes a persistent-id hook makes are never memoized.
 */
#include "decode/pickle_emit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "decode/pickle_out.h"

#define PK_NOMEMO UINT32_MAX
#define PK_BATCH 1000   /* items per APPENDS/SETITEMS (CPython _BATCHSIZE) */

/* A node reachable from the root: its memo index, and whether the first
 * pass fetched it. */
struct pk_node {
	const struct pt_value *v;       /* NULL: a free slot */
	uint32_t memo;                  /* PK_NOMEMO until put */
	bool seen;                      /* its parts are in the table */
	bool fetched;                   /* a GET of the first pass read it */
};

/* A node being written: where it is (its kind's steps, below) and, for
 * a sequence of items, the next item and the open batch. */
struct pk_frame {
	const struct pt_value *v;
	struct pk_node *n;              /* its entry, NULL for a hook's node */
	uint8_t step;
	bool open;                      /* a batch of items is open */
	size_t i;                       /* next item */
	size_t start, end;              /* the open batch */
};

struct pt_pkemit {
	struct pt_buf *out;             /* where the pass writes */
	struct pt_buf *dest;            /* the caller's buffer */
	struct pt_buf scratch;          /* the first pass's, emptied as it goes */
	size_t start;                   /* dest->len before the emission */
	uint64_t dropped;               /* bytes the first pass emptied */
	bool first;                     /* the first pass is running */
	struct pt_error *err;
	const struct pt_limits *lim;
	unsigned proto;
	pt_pkemit_pid_fn pid;
	void *pid_ctx;
	bool in_pid;                    /* the hook is running */
	struct pk_node *tab;            /* open addressing, by address */
	size_t tcap, tn;
	uint32_t memo_n;                /* memo entries put in this pass */
	struct pk_frame *fr;            /* the nodes being written */
	size_t fn, fcap;
};

/* The steps of a call (PT_V_CALL, PT_V_OBJ); containers use 0 and 1. */
enum {
	PK_C_FN,        /* the callable (INST/OBJ: after MARK) */
	PK_C_ARGS,      /* the argument tuple (INST/OBJ: its items) */
	PK_C_KW,        /* NEWOBJ_EX's keyword dict */
	PK_C_MAKE,      /* REDUCE, NEWOBJ, NEWOBJ_EX or OBJ */
	PK_C_ITEMS,     /* APPEND(S) onto it */
	PK_C_KV,        /* SETITEM(S) onto it */
	PK_C_STATE,     /* its BUILD state */
	PK_C_BUILD,
};

static const char *pk_kind(const struct pt_value *v)
{
	static const char *const names[] = {
		"None", "bool", "int", "int", "float", "str", "bytes",
		"bytearray", "tuple", "list", "dict", "set", "frozenset",
		"global", "call", "object", "persistent id",
	};

	return v->kind < sizeof(names) / sizeof(*names) ? names[v->kind] :
	       "unknown kind";
}

static int pk_fail(struct pt_pkemit *e, const struct pt_value *v, int code,
		   const char *why)
{
	return pt_fail(e->err, code, "pickle emit: %s node %u: %s",
		       pk_kind(v), (unsigned)v->id, why);
}

/* ---- the table of nodes ---------------------------------------------- */

/*
 * A node's first slot: its address in 8-byte units, high bits folded in
 * (arena blocks far apart do not land on the same slots).  The nodes of
 * one arena block lie at least 40 bytes apart in creation order, which is
 * roughly the order they are written in, so the walk reads the table
 * nearly in order; a multiplicative hash scattered it, and cache misses
 * on the table were half of the time of writing a state dict.
 */
static size_t pk_hash(const struct pt_value *v, size_t cap)
{
	uintptr_t a = (uintptr_t)v;

	return (size_t)((a >> 3) ^ (a >> 29)) & (cap - 1);
}

static struct pk_node *pk_find(const struct pt_pkemit *e,
			       const struct pt_value *v)
{
	size_t i;

	if (!e->tcap)
		return NULL;
	for (i = pk_hash(v, e->tcap); e->tab[i].v; i = (i + 1) & (e->tcap - 1))
		if (e->tab[i].v == v)
			return &e->tab[i];
	return NULL;
}

static struct pk_node *pk_slot(struct pk_node *tab, size_t cap,
			       const struct pt_value *v)
{
	size_t i = pk_hash(v, cap);

	while (tab[i].v && tab[i].v != v)
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

/* Twice the room, at most half full afterwards.  0 or -ENOMEM. */
static int pk_rehash(struct pt_pkemit *e)
{
	size_t cap = e->tcap ? 2 * e->tcap : 1024, i;
	struct pk_node *tab;

	if (cap > SIZE_MAX / sizeof(*tab) || !(tab = calloc(cap, sizeof(*tab))))
		return pt_fail(e->err, -ENOMEM, "pickle emit: out of memory");
	for (i = 0; i < e->tcap; i++)
		if (e->tab[i].v)
			*pk_slot(tab, cap, e->tab[i].v) = e->tab[i];
	free(e->tab);
	e->tab = tab;
	e->tcap = cap;
	return 0;
}

/* The entry of @v, added when new.  0, -ENOMEM or -EFBIG. */
static int pk_add(struct pt_pkemit *e, const struct pt_value *v,
		  struct pk_node **out)
{
	struct pk_node *n;
	int rc;

	if (2 * (e->tn + 1) > e->tcap) {
		rc = pk_rehash(e);
		if (rc)
			return rc;
	}
	n = pk_slot(e->tab, e->tcap, v);
	if (!n->v) {
		if (e->tn >= e->lim->max_values)
			return pt_fail(e->err, -EFBIG,
				       "pickle emit: more than %llu nodes",
				       (unsigned long long)e->lim->max_values);
		n->v = v;
		n->memo = PK_NOMEMO;
		e->tn++;
	}
	*out = n;
	return 0;
}

/* The nodes reachable from @root: the only ones the memo may hold (a
 * node the hook made may live on its stack, its address reused). */
static int pk_reach(struct pt_pkemit *e, const struct pt_value *root)
{
	struct pt_vstack st = { 0 };
	struct pk_node *n = NULL;
	struct pt_value *v;
	int rc;

	rc = pk_add(e, root, &n);
	if (!rc) {
		n->seen = true;
		if (pt_vstack_push_children(&st, root))
			rc = -ENOMEM;
	}
	while (!rc && st.n) {
		v = st.v[--st.n];
		rc = pk_add(e, v, &n);
		if (rc || n->seen)
			continue;
		n->seen = true;
		if (pt_vstack_push_children(&st, v))
			rc = -ENOMEM;
	}
	pt_vstack_free(&st);
	if (rc == -ENOMEM)
		return pt_fail(e->err, rc, "pickle emit: out of memory");
	return rc;
}

/* ---- memo --------------------------------------------------------------- */

static bool pk_memoizable(const struct pt_value *v)
{
	switch (v->kind) {
	case PT_V_NONE:
	case PT_V_BOOL:
	case PT_V_INT:
	case PT_V_BIGINT:
	case PT_V_FLOAT:
		return false;
	case PT_V_TUPLE:
		return v->u.seq.n > 0;
	default:
		return true;
	}
}

/* Put @v (entry @n, just made, on top of the stack) in the memo: in the
 * first pass every node of the graph of a kind CPython puts, in the
 * second only those that the first pass fetched again.  A node the hook
 * made (no entry) is never put. */
static int pk_put(struct pt_pkemit *e, struct pk_node *n,
		  const struct pt_value *v)
{
	if (!n || n->memo != PK_NOMEMO || !pk_memoizable(v) ||
	    (!e->first && !n->fetched))
		return 0;
	if ((!e->first && e->memo_n >= e->lim->max_memo) ||
	    e->memo_n == PK_NOMEMO)
		return pt_fail(e->err, -EFBIG,
			       "pickle emit: more than %llu memo entries",
			       (unsigned long long)e->lim->max_memo);
	n->memo = e->memo_n++;
	pko_put(e->out, n->memo);
	return 0;
}

/* GET the node of entry @n, which is in the memo. */
static void pk_get(struct pt_pkemit *e, struct pk_node *n)
{
	if (e->first)
		n->fetched = true;
	pko_get(e->out, n->memo);
}

/*
 * The end of frame @f's tuple, frozenset, call or persistent id, whose
 * parts are on the stack: when it is in the memo already (written
 * meanwhile by a reference inside its parts), drop the parts -- @pops
 * POPs, or POP_MARK when @pops is 0 -- fetch it, and return true; else
 * false.
 */
static bool pk_made_meanwhile(struct pt_pkemit *e, const struct pk_frame *f,
			      size_t pops)
{
	if (!f->n || f->n->memo == PK_NOMEMO)
		return false;
	if (!pops)
		pko_op(e->out, PKO_POP_MARK);
	while (pops--)
		pko_op(e->out, PKO_POP);
	pk_get(e, f->n);
	return true;
}

/* ---- leaves ------------------------------------------------------------ */

static int pk_global(struct pt_pkemit *e, const struct pt_value *v)
{
	const char *mod = v->u.global.module, *name = v->u.global.name;

	if (!mod || !name)
		return pk_fail(e, v, -EINVAL, "global without a name");
	if (e->proto < 3 && v->u.global.py2) {
		/* the Python 2 spelling, which the unpickler translates
		 * again below protocol 3 */
		mod = v->u.global.py2;
		name = mod + strlen(mod) + 1;
	}
	if (!strchr(mod, '\n') && !strchr(name, '\n')) {
		pko_global(e->out, mod, name);
		return 0;
	}
	/* a name GLOBAL's lines cannot hold (from STACK_GLOBAL) */
	pko_cstr(e->out, mod);
	pko_cstr(e->out, name);
	pko_op(e->out, PKO_STACK_GLOBAL);
	return 0;
}

/* A node without parts: write it (and put it in the memo, pk_put). */
static int pk_leaf(struct pt_pkemit *e, const struct pt_value *v,
		   struct pk_node *node)
{
	const uint8_t *p = v->u.s.p;
	size_t n = v->u.s.len;
	int rc = 0;

	switch (v->kind) {
	case PT_V_NONE:
		pko_none(e->out);
		return 0;
	case PT_V_BOOL:
		pko_bool(e->out, v->u.b);
		return 0;
	case PT_V_INT:
		pko_int(e->out, v->u.i);
		return 0;
	case PT_V_FLOAT:
		pko_float(e->out, v->u.f);
		return 0;
	case PT_V_BIGINT:
		if (n > INT32_MAX)
			return pk_fail(e, v, -EFBIG, "integer too long");
		pko_long(e->out, p, n);
		return 0;
	case PT_V_STR:
		if (!(v->flags & PT_VF_PY2STR))
			pko_str(e->out, p, n);
		else if (n <= INT32_MAX)
			pko_py2str(e->out, p, n);
		else
			return pk_fail(e, v, -EFBIG, "Python 2 string too long");
		break;
	case PT_V_BYTES:
		pko_bytes(e->out, p, n);
		break;
	case PT_V_BYTEARRAY:
		pko_bytearray(e->out, p, n);
		break;
	case PT_V_TUPLE:
		pko_tuple(e->out, 0);
		return 0;
	case PT_V_GLOBAL:
		rc = pk_global(e, v);
		break;
	default:
		return pk_fail(e, v, -EINVAL, "not a leaf");
	}
	return rc ? rc : pk_put(e, node, v);
}

/* ---- nodes with parts ------------------------------------------------- */

static int pk_push(struct pt_pkemit *e, const struct pt_value *v,
		   struct pk_node *n)
{
	if (e->fn >= e->lim->max_depth)
		return pt_fail(e->err, -EFBIG,
			       "pickle emit: nested deeper than %u",
			       (unsigned)e->lim->max_depth);
	if (!pt_grow((void **)&e->fr, &e->fcap, e->fn, sizeof(*e->fr)))
		return pt_fail(e->err, -ENOMEM, "pickle emit: out of memory");
	memset(&e->fr[e->fn], 0, sizeof(*e->fr));
	e->fr[e->fn].v = v;
	e->fr[e->fn++].n = n;
	return 0;
}

/* Start writing @v: a GET when it is in the memo, a leaf at once, else a
 * frame that pk_run() goes through.  Its entry is looked up once, here:
 * the table does not move while the graph is written. */
static int pk_begin(struct pt_pkemit *e, const struct pt_value *v)
{
	struct pk_node *n;

	if (!v)
		return pt_fail(e->err, -EINVAL,
			       "pickle emit: a missing value (NULL)");
	n = pk_find(e, v);
	if (n && n->memo != PK_NOMEMO) {
		pk_get(e, n);
		return 0;
	}
	switch (v->kind) {
	case PT_V_TUPLE:
		if (v->u.seq.n == 0)
			return pk_leaf(e, v, n);
		return pk_push(e, v, n);
	case PT_V_LIST:
	case PT_V_DICT:
	case PT_V_SET:
	case PT_V_FROZENSET:
	case PT_V_CALL:
	case PT_V_OBJ:
		return pk_push(e, v, n);
	case PT_V_PERSID:
		if (e->in_pid)
			return pk_fail(e, v, -EINVAL,
				       "a persistent id inside a persistent id");
		return pk_push(e, v, n);
	default:
		return pk_leaf(e, v, n);
	}
}

/*
 * One step through the items @q of @f's node, written in batches of
 * PK_BATCH times @per items (@per: 2 for key-value pairs), each closed by
 * @many after a MARK, or by @one alone when it holds a single item (@one
 * 0: never).  The next item in *@child, or true when every batch is
 * closed (f->i is 0 again).
 */
static bool pk_batch(struct pt_pkemit *e, struct pk_frame *f,
		     const struct pt_vseq *q, size_t per, char one, char many,
		     const struct pt_value **child)
{
	size_t left;

	if (f->open) {
		if (f->i < f->end) {
			*child = q->v[f->i++];
			return false;
		}
		pko_op(e->out, one && f->end - f->start == per ? one : many);
		f->open = false;
	}
	if (f->i >= q->n) {
		f->i = 0;
		return true;
	}
	left = q->n - f->i;
	f->start = f->i;
	f->end = f->i + (left < PK_BATCH * per ? left : PK_BATCH * per);
	if (!one || f->end - f->start != per)
		pko_op(e->out, PKO_MARK);
	f->open = true;
	*child = q->v[f->i++];
	return false;
}

/*
 * A list, dict or set: EMPTY_*, put, then its items in batches.  As
 * CPython's C pickler (Modules/_pickle.c, batch_list_exact and
 * batch_dict_exact; what pickle.dumps and torch.save run) writes a list
 * or dict: APPEND/SETITEM when it holds one item, else MARK ... APPENDS/
 * SETITEMS for every batch, a last one of one item too (Lib/pickle.py
 * would write APPEND/SETITEM there; both load the same).  A set: MARK ...
 * ADDITEMS always.
 */
static int pk_container(struct pt_pkemit *e, struct pk_frame *f,
			const struct pt_value **child, bool *done)
{
	const struct pt_value *v = f->v;
	int rc;

	if (f->step == 0) {
		if (v->kind == PT_V_DICT && v->u.dict.kv.n % 2)
			return pk_fail(e, v, -EINVAL, "odd number of keys and "
				       "values");
		pko_op(e->out, v->kind == PT_V_LIST ? PKO_EMPTY_LIST :
			       v->kind == PT_V_DICT ? PKO_EMPTY_DICT :
			       PKO_EMPTY_SET);
		rc = pk_put(e, f->n, v);
		if (rc)
			return rc;
		f->step = 1;
	}
	if (v->kind == PT_V_LIST)
		*done = pk_batch(e, f, &v->u.seq, 1,
				 v->u.seq.n == 1 ? PKO_APPEND : 0, PKO_APPENDS,
				 child);
	else if (v->kind == PT_V_DICT)
		*done = pk_batch(e, f, &v->u.dict.kv, 2,
				 v->u.dict.kv.n == 2 ? PKO_SETITEM : 0,
				 PKO_SETITEMS, child);
	else
		*done = pk_batch(e, f, &v->u.seq, 1, 0, PKO_ADDITEMS, child);
	return 0;
}

/* A tuple (TUPLE1-3 without a MARK) or a frozenset. */
static int pk_tuple(struct pt_pkemit *e, struct pk_frame *f,
		    const struct pt_value **child, bool *done)
{
	const struct pt_value *v = f->v;
	size_t n = v->u.seq.n;
	bool small = v->kind == PT_V_TUPLE && n <= 3;

	if (f->step == 0) {
		if (!small)
			pko_op(e->out, PKO_MARK);
		f->step = 1;
	}
	if (f->i < n) {
		*child = v->u.seq.v[f->i++];
		return 0;
	}
	*done = true;
	if (pk_made_meanwhile(e, f, small ? n : 0))
		return 0;
	if (v->kind == PT_V_TUPLE)
		pko_tuple(e->out, n);
	else
		pko_op(e->out, PKO_FROZENSET);
	return pk_put(e, f->n, v);
}

/* The hook writes the persistent id's value; it may push frames, so
 * nothing of the caller's frame is used after it. */
static int pk_hook(struct pt_pkemit *e, const struct pt_value *v)
{
	size_t depth = e->fn;
	int rc;

	e->in_pid = true;
	rc = e->pid(e->pid_ctx, e, v, e->err);
	e->in_pid = false;
	if (rc < 0)
		return pt_fail(e->err, rc, "pickle emit: persistent id hook "
			       "failed");
	if (e->fn != depth)
		return pk_fail(e, v, -EINVAL, "the hook left a value "
			       "unfinished");
	return 0;
}

/* A persistent id: its value (or what the hook writes), BINPERSID. */
static int pk_persid(struct pt_pkemit *e, struct pk_frame *f,
		     const struct pt_value **child, bool *done)
{
	const struct pt_value *v = f->v;

	if (f->step == 0) {
		f->step = 1;
		if (e->pid)
			return pk_hook(e, v);   /* f may move: not used */
		*child = v->u.pid;
		return 0;
	}
	*done = true;
	if (pk_made_meanwhile(e, f, 1))
		return 0;
	pko_op(e->out, PKO_BINPERSID);
	return pk_put(e, f->n, v);
}

/* The opcode that makes call @v and the parts it pops (0: to a MARK). */
static char pk_call_op(const struct pt_value *v, size_t *pops)
{
	*pops = 2;
	if (v->kind == PT_V_CALL)
		return PKO_REDUCE;
	if (v->flags & PT_VF_INST) {
		*pops = 0;
		return PKO_OBJ;
	}
	if ((v->flags & PT_VF_NEWOBJ_EX) || pt_call_kwargs(v)) {
		*pops = 3;
		return PKO_NEWOBJ_EX;
	}
	return PKO_NEWOBJ;
}

/* A call's callable and arguments, up to the opcode that makes it. */
static int pk_call_make(struct pt_pkemit *e, struct pk_frame *f,
			const struct pt_value **child, bool *done)
{
	static const struct pt_value no_kwargs = { .kind = PT_V_DICT };
	const struct pt_value *v = f->v, *args = v->u.call.args;
	size_t pops;
	char op = pk_call_op(v, &pops);

	switch (f->step) {
	case PK_C_FN:
		if (v->flags & PT_VF_LEAN)
			return pk_fail(e, v, -EINVAL, "loaded lean: its "
				       "arguments were dropped");
		if (!args || args->kind != PT_V_TUPLE)
			return pk_fail(e, v, -EINVAL, "arguments are not a "
				       "tuple");
		if (v->kind == PT_V_CALL && pt_call_kwargs(v))
			return pk_fail(e, v, -EINVAL, "REDUCE takes no "
				       "keyword arguments");
		if (op == PKO_OBJ)
			pko_op(e->out, PKO_MARK);
		f->step = PK_C_ARGS;
		*child = v->u.call.callable;
		return 0;
	case PK_C_ARGS:
		if (op == PKO_OBJ && f->i < args->u.seq.n) {
			*child = args->u.seq.v[f->i++];
			return 0;
		}
		f->i = 0;
		f->step = op == PKO_NEWOBJ_EX ? PK_C_KW : PK_C_MAKE;
		if (op != PKO_OBJ)
			*child = args;
		return 0;
	case PK_C_KW:
		f->step = PK_C_MAKE;
		*child = pt_call_kwargs(v) ? pt_call_kwargs(v) : &no_kwargs;
		return 0;
	default:
		break;
	}
	if (pk_made_meanwhile(e, f, pops)) {
		*done = true;
		return 0;
	}
	pko_op(e->out, op);
	f->step = PK_C_ITEMS;
	return pk_put(e, f->n, v);
}

/* A call: made, put, then its appended items, set items and BUILD state,
 * in CPython's save_reduce order; the items come from an iterator there,
 * whose batch of one item is written APPEND/SETITEM (batch_list and
 * batch_dict of Modules/_pickle.c, as Lib/pickle.py). */
static int pk_call(struct pt_pkemit *e, struct pk_frame *f,
		   const struct pt_value **child, bool *done)
{
	const struct pt_value *v = f->v;

	if (f->step < PK_C_ITEMS)
		return pk_call_make(e, f, child, done);
	if (f->step == PK_C_ITEMS) {
		if (!pk_batch(e, f, pt_call_items(v), 1, PKO_APPEND,
			      PKO_APPENDS, child))
			return 0;
		f->step = PK_C_KV;
	}
	if (f->step == PK_C_KV) {
		if (pt_call_kv(v)->n % 2)
			return pk_fail(e, v, -EINVAL, "odd number of keys and "
				       "values");
		if (!pk_batch(e, f, pt_call_kv(v), 2, PKO_SETITEM,
			      PKO_SETITEMS, child))
			return 0;
		f->step = PK_C_STATE;
	}
	if (f->step == PK_C_STATE && pt_call_state(v)) {
		f->step = PK_C_BUILD;
		*child = pt_call_state(v);
		return 0;
	}
	if (f->step == PK_C_BUILD)
		pko_op(e->out, PKO_BUILD);
	*done = true;
	return 0;
}

/* One step of the frame on top: a part to write in *@child, or it is
 * finished and popped. */
static int pk_advance(struct pt_pkemit *e, const struct pt_value **child)
{
	struct pk_frame *f = &e->fr[e->fn - 1];
	size_t at = e->fn;
	bool done = false;
	int rc;

	switch (f->v->kind) {
	case PT_V_LIST:
	case PT_V_DICT:
	case PT_V_SET:
		rc = pk_container(e, f, child, &done);
		break;
	case PT_V_TUPLE:
	case PT_V_FROZENSET:
		rc = pk_tuple(e, f, child, &done);
		break;
	case PT_V_PERSID:
		rc = pk_persid(e, f, child, &done);
		break;
	default:
		rc = pk_call(e, f, child, &done);
		break;
	}
	if (!rc && done && e->fn == at)
		e->fn--;
	return rc;
}

/* Write until the frames are back at @base. */
static int pk_run(struct pt_pkemit *e, size_t base)
{
	const struct pt_value *child;
	int rc = 0;

	while (!rc && e->fn > base) {
		child = NULL;
		rc = pk_advance(e, &child);
		if (!rc && child)
			rc = pk_begin(e, child);
		if (e->first) {
			e->dropped += e->out->len;
			e->out->len = 0;
		}
		if (!rc && (e->first ? e->dropped : e->out->len - e->start) >
			   e->lim->max_pickle_bytes)
			rc = pt_fail(e->err, -EFBIG,
				     "pickle emit: more than %llu bytes",
				     (unsigned long long)
				     e->lim->max_pickle_bytes);
		if (!rc && e->out->oom)
			rc = pt_fail(e->err, -ENOMEM,
				     "pickle emit: out of memory");
	}
	return rc;
}

int pt_pkemit_value(struct pt_pkemit *e, const struct pt_value *v)
{
	size_t base = e->fn;
	int rc;

	if (!e->in_pid)
		return pt_fail(e->err, -EINVAL,
			       "pickle emit: a value written outside the "
			       "persistent id hook");
	rc = pk_begin(e, v);
	return rc ? rc : pk_run(e, base);
}

/* One pass: PROTO, the value at @root, STOP. */
static int pk_pass(struct pt_pkemit *e, const struct pt_value *root,
		   bool first)
{
	size_t i;
	int rc;

	e->first = first;
	e->out = first ? &e->scratch : e->dest;
	e->fn = 0;
	e->memo_n = 0;
	for (i = 0; i < e->tcap; i++)
		e->tab[i].memo = PK_NOMEMO;
	pko_proto(e->out, e->proto);
	rc = pk_begin(e, root);
	if (!rc)
		rc = pk_run(e, 0);
	if (rc)
		return rc;
	pko_stop(e->out);
	if (e->out->oom)
		return pt_fail(e->err, -ENOMEM, "pickle emit: out of memory");
	return 0;
}

int pt_pickle_emit(const struct pt_value *root,
		   const struct pt_pkemit_opts *o, struct pt_buf *out,
		   struct pt_error *err)
{
	struct pt_pkemit e = { .dest = out, .start = out->len, .err = err,
			       .proto = 2 };
	struct pt_limits def;
	int rc;

	pt_limits_default(&def);
	e.lim = o && o->lim ? o->lim : &def;
	if (o && o->proto)
		e.proto = o->proto;
	if (o) {
		e.pid = o->pid;
		e.pid_ctx = o->pid_ctx;
	}
	if (e.proto < 2 || e.proto > 5)
		return pt_fail(err, -EINVAL, "pickle emit: protocol %u: only "
			       "2 to 5 are written", e.proto);
	if (!root)
		return pt_fail(err, -EINVAL, "pickle emit: no root value");
	pt_buf_init(&e.scratch);
	rc = pk_reach(&e, root);
	if (!rc)
		rc = pk_pass(&e, root, true);
	if (!rc)
		rc = pk_pass(&e, root, false);
	pt_buf_free(&e.scratch);
	free(e.tab);
	free(e.fr);
	return rc;
}
