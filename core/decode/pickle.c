/* SPDX-License-Identifier: MIT */
/*
 * pickle.c -- the safe pickle machine; see pickle.h.
 *
 * One pass over the opcodes (names and argument encodings from CPython's
 * Lib/pickletools.py, in pickle_i.h) with an explicit value stack, mark
 * stack and memo.  Nothing is imported or called: GLOBAL makes a name
 * node, REDUCE and the NEWOBJ family make call nodes.  Semantics follow
 * CPython's C unpickler (Modules/_pickle.c): items below the top MARK are
 * out of reach (the "fence"), POP on an empty frame pops the mark,
 * REDUCE/NEWOBJ need a real argument tuple.  Lean loads give the nodes a
 * classified REDUCE no longer needs back to the arena.
 *
 * Every node, string copy and sequence lives in the arena of the struct
 * pt_pickle (pickle_arena.c).  The VM's scratch (stack, marks, memo) is
 * malloc'd and freed when pt_pickle_load() returns; both count against
 * max_memory.  Each opcode does work bounded by its own argument length
 * or by the items it pops, each of which was pushed by an earlier opcode,
 * so the run is linear in the input.  The disassembler behind
 * /.ptfs/pickle.txt is pickle_disasm.c.
 */
#include "decode/pickle_i.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rd.h"
#include "base/text.h"

const struct pt_vseq pt_vseq_empty;

#if UINTPTR_MAX == UINT64_MAX
/* pickle.h: a node is 40 bytes (a state dict has ~10 per tensor). */
_Static_assert(sizeof(struct pt_value) == 40, "struct pt_value grew");
#endif

/* ---- opcode table (pickle_i.h) ---------------------------------------- */

const struct pt_opinfo pt__pickle_ops[256] = {
	[OP_MARK] = { "MARK", PT_A_NONE },
	[OP_STOP] = { "STOP", PT_A_NONE },
	[OP_POP] = { "POP", PT_A_NONE },
	[OP_POP_MARK] = { "POP_MARK", PT_A_NONE },
	[OP_DUP] = { "DUP", PT_A_NONE },
	[OP_FLOAT] = { "FLOAT", PT_A_LINE },
	[OP_INT] = { "INT", PT_A_LINE },
	[OP_BININT] = { "BININT", PT_A_I32 },
	[OP_BININT1] = { "BININT1", PT_A_U8 },
	[OP_LONG] = { "LONG", PT_A_LINE },
	[OP_BININT2] = { "BININT2", PT_A_U16 },
	[OP_NONE] = { "NONE", PT_A_NONE },
	[OP_PERSID] = { "PERSID", PT_A_LINE },
	[OP_BINPERSID] = { "BINPERSID", PT_A_NONE },
	[OP_REDUCE] = { "REDUCE", PT_A_NONE },
	[OP_STRING] = { "STRING", PT_A_LINE },
	[OP_BINSTRING] = { "BINSTRING", PT_A_LEN4S },
	[OP_SHORT_BINSTRING] = { "SHORT_BINSTRING", PT_A_LEN1 },
	[OP_UNICODE] = { "UNICODE", PT_A_LINE },
	[OP_BINUNICODE] = { "BINUNICODE", PT_A_LEN4 },
	[OP_APPEND] = { "APPEND", PT_A_NONE },
	[OP_BUILD] = { "BUILD", PT_A_NONE },
	[OP_GLOBAL] = { "GLOBAL", PT_A_LINE2 },
	[OP_DICT] = { "DICT", PT_A_NONE },
	[OP_EMPTY_DICT] = { "EMPTY_DICT", PT_A_NONE },
	[OP_APPENDS] = { "APPENDS", PT_A_NONE },
	[OP_GET] = { "GET", PT_A_LINE },
	[OP_BINGET] = { "BINGET", PT_A_U8 },
	[OP_INST] = { "INST", PT_A_LINE2 },
	[OP_LONG_BINGET] = { "LONG_BINGET", PT_A_U32 },
	[OP_LIST] = { "LIST", PT_A_NONE },
	[OP_EMPTY_LIST] = { "EMPTY_LIST", PT_A_NONE },
	[OP_OBJ] = { "OBJ", PT_A_NONE },
	[OP_PUT] = { "PUT", PT_A_LINE },
	[OP_BINPUT] = { "BINPUT", PT_A_U8 },
	[OP_LONG_BINPUT] = { "LONG_BINPUT", PT_A_U32 },
	[OP_SETITEM] = { "SETITEM", PT_A_NONE },
	[OP_TUPLE] = { "TUPLE", PT_A_NONE },
	[OP_EMPTY_TUPLE] = { "EMPTY_TUPLE", PT_A_NONE },
	[OP_SETITEMS] = { "SETITEMS", PT_A_NONE },
	[OP_BINFLOAT] = { "BINFLOAT", PT_A_F8BE },
	[OP_BINBYTES] = { "BINBYTES", PT_A_LEN4 },
	[OP_SHORT_BINBYTES] = { "SHORT_BINBYTES", PT_A_LEN1 },
	[OP_PROTO] = { "PROTO", PT_A_U8 },
	[OP_NEWOBJ] = { "NEWOBJ", PT_A_NONE },
	[OP_EXT1] = { "EXT1", PT_A_U8 },
	[OP_EXT2] = { "EXT2", PT_A_U16 },
	[OP_EXT4] = { "EXT4", PT_A_I32 },
	[OP_TUPLE1] = { "TUPLE1", PT_A_NONE },
	[OP_TUPLE2] = { "TUPLE2", PT_A_NONE },
	[OP_TUPLE3] = { "TUPLE3", PT_A_NONE },
	[OP_NEWTRUE] = { "NEWTRUE", PT_A_NONE },
	[OP_NEWFALSE] = { "NEWFALSE", PT_A_NONE },
	[OP_LONG1] = { "LONG1", PT_A_LEN1 },
	[OP_LONG4] = { "LONG4", PT_A_LEN4S },
	[OP_SHORT_BINUNICODE] = { "SHORT_BINUNICODE", PT_A_LEN1 },
	[OP_BINUNICODE8] = { "BINUNICODE8", PT_A_LEN8 },
	[OP_BINBYTES8] = { "BINBYTES8", PT_A_LEN8 },
	[OP_EMPTY_SET] = { "EMPTY_SET", PT_A_NONE },
	[OP_ADDITEMS] = { "ADDITEMS", PT_A_NONE },
	[OP_FROZENSET] = { "FROZENSET", PT_A_NONE },
	[OP_NEWOBJ_EX] = { "NEWOBJ_EX", PT_A_NONE },
	[OP_STACK_GLOBAL] = { "STACK_GLOBAL", PT_A_NONE },
	[OP_MEMOIZE] = { "MEMOIZE", PT_A_NONE },
	[OP_FRAME] = { "FRAME", PT_A_U64 },
	[OP_BYTEARRAY8] = { "BYTEARRAY8", PT_A_LEN8 },
	[OP_NEXT_BUFFER] = { "NEXT_BUFFER", PT_A_NONE },
	[OP_READONLY_BUFFER] = { "READONLY_BUFFER", PT_A_NONE },
};

/* ---- small helpers ---------------------------------------------------- */

static int pt_hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool pt_is_space(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

static const char *pt_kind_name(uint8_t k)
{
	static const char *const names[] = {
		[PT_V_NONE] = "None",         [PT_V_BOOL] = "bool",
		[PT_V_INT] = "int",           [PT_V_BIGINT] = "int",
		[PT_V_FLOAT] = "float",       [PT_V_STR] = "str",
		[PT_V_BYTES] = "bytes",       [PT_V_BYTEARRAY] = "bytearray",
		[PT_V_TUPLE] = "tuple",       [PT_V_LIST] = "list",
		[PT_V_DICT] = "dict",         [PT_V_SET] = "set",
		[PT_V_FROZENSET] = "frozenset", [PT_V_GLOBAL] = "global",
		[PT_V_CALL] = "call result",  [PT_V_OBJ] = "object",
		[PT_V_PERSID] = "persistent id",
	};

	if (k < sizeof(names) / sizeof(names[0]) && names[k])
		return names[k];
	return "?";
}

/* ---- the machine ------------------------------------------------------ */

#define PT_MEMO_PAGE 256u /* memo entries per page (two-level table) */

#define PT_SMALL_MIN (-1)
#define PT_SMALL_INTS 258               /* -1 .. 256 */

/*
 * A MARK: the stack height it fences, and, for a lean load, where the
 * arena, the node ids, the memo log and the shared scalars stood when it
 * was pushed.  Everything made after it lies above (blk, used) in the
 * arena and has an id >= id.
 */
struct pt_mark {
	size_t sn;
	struct pt_arena_blk *blk;
	size_t used;
	size_t n_grown;
	size_t putlog_n;
	size_t shared_n;
	uint32_t n_blk;
	uint32_t id;
	bool tainted;               /* a container made before it got items
				     * after it: what it holds is reachable */
};

/* Memo indices some GET reads (open addressing, index + 1; 0: empty). */
struct pt_idxset {
	uint64_t *v;
	size_t cap;                 /* a power of two, or 0 */
	size_t n;
};

struct pt_vm {
	struct pt_pickle *pk;       /* the result being built */
	const struct pt_limits *lim;
	struct pt_error *err;
	struct pt_rd rd;            /* the input */
	size_t off;                 /* offset of the current opcode */
	uint8_t op;                 /* the current opcode */
	bool stopped;               /* STOP seen */
	struct pt_value **stack;    /* value stack (malloc) */
	size_t sn;                  /* values on it */
	size_t scap;                /* allocated */
	struct pt_mark *marks;      /* each MARK (malloc) */
	size_t mn;                  /* marks */
	size_t mcap;                /* allocated */
	struct pt_value ***memo;    /* pages of PT_MEMO_PAGE entries */
	size_t memo_dir;            /* pages in the directory */
	uint64_t memo_n;            /* entries set (MEMOIZE's next index) */
	uint64_t scratch;           /* bytes of scratch counted in pk->mem */
	/* Scalars are immutable, so None, the bools and small ints are made
	 * once per pickle and shared: a state dict pickles several per
	 * tensor (offsets, sizes, requires_grad), and sharing them cuts the
	 * graph by a third. */
	struct pt_value *none;
	struct pt_value *empty_tuple;
	struct pt_value *bools[2];
	struct pt_value *small[PT_SMALL_INTS];
	/* lean loads (pt_pickle_load_lean) */
	pt_pickle_reduce_fn reduce;
	void *reduce_ctx;
	struct pt_idxset gets;      /* memo indices read by a GET */
	bool memoize;               /* the pickle has MEMOIZE opcodes */
	uint64_t *putlog;           /* memo indices set, oldest first */
	size_t putlog_n, putlog_cap;
	struct pt_value **(*shared); /* slots of the shared scalars above,
				     * in the order they were made */
	size_t shared_n, shared_cap;
	struct pt_mark tup;         /* the mark of the last MARK ... TUPLE */
	struct pt_value *tup_v;     /* that tuple, while only memo opcodes
				     * followed it; else NULL */
};

static int pt_vm_fail(struct pt_vm *vm, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int pt_vm_fail(struct pt_vm *vm, int code, const char *fmt, ...)
{
	char msg[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return pt_fail(vm->err, code, "pickle: %s at offset %zu: %s",
		       pt__pickle_ops[vm->op].name ? pt__pickle_ops[vm->op].name : "?",
		       vm->off, msg);
}

static int pt_vm_nomem(struct pt_vm *vm, int rc)
{
	if (rc == -EFBIG)
		return pt_vm_fail(vm, rc, "memory limit of %llu bytes reached",
				  (unsigned long long)vm->pk->mem_max);
	return pt_vm_fail(vm, -ENOMEM, "out of memory");
}

static int pt_vm_alloc(struct pt_vm *vm, size_t n, void **out)
{
	int rc = pt__arena_alloc(vm->pk, n, out);

	return rc ? pt_vm_nomem(vm, rc) : 0;
}

/* Grow a malloc'd scratch array to hold @need elements of @elem bytes. */
static int pt_vm_grow(struct pt_vm *vm, void **arr, size_t *cap, size_t elem,
		      size_t need)
{
	size_t ncap = *cap ? *cap : 64;
	uint64_t delta;
	void *p;

	if (need <= *cap)
		return 0;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2 / elem)
			return pt_vm_nomem(vm, -EFBIG);
		ncap *= 2;
	}
	delta = (uint64_t)(ncap - *cap) * elem;
	if (!pt__pickle_mem_take(vm->pk, delta))
		return pt_vm_nomem(vm, -EFBIG);
	p = realloc(*arr, ncap * elem);
	if (!p) {
		vm->pk->mem -= delta;
		return pt_vm_nomem(vm, -ENOMEM);
	}
	vm->scratch += delta;
	*arr = p;
	*cap = ncap;
	return 0;
}

static void pt_vm_free_scratch(struct pt_vm *vm)
{
	size_t i;

	for (i = 0; i < vm->memo_dir; i++)
		free(vm->memo[i]);
	free(vm->memo);
	free(vm->stack);
	free(vm->marks);
	free(vm->gets.v);
	free(vm->putlog);
	free(vm->shared);
	vm->gets.v = NULL;
	vm->putlog = NULL;
	vm->shared = NULL;
	vm->memo = NULL;
	vm->stack = NULL;
	vm->marks = NULL;
	vm->pk->mem -= vm->scratch;
	vm->scratch = 0;
}

static int pt_new(struct pt_vm *vm, uint8_t kind, struct pt_value **out)
{
	struct pt_value *v;
	uint64_t maxv = vm->lim->max_values;
	int rc;

	*out = NULL;
	if (maxv > UINT32_MAX)
		maxv = UINT32_MAX;
	if (vm->pk->count >= maxv)
		return pt_vm_fail(vm, -EFBIG, "value limit of %llu reached",
				  (unsigned long long)maxv);
	rc = pt_vm_alloc(vm, sizeof(*v), (void **)&v);
	if (rc)
		return rc;
	v->kind = kind;
	v->id = vm->pk->count++;
	*out = v;
	return 0;
}

static size_t pt_fence(const struct pt_vm *vm)
{
	return vm->mn ? vm->marks[vm->mn - 1].sn : 0;
}

/*
 * The stack is capped by max_values, not max_depth: CPython writes a tuple
 * of N items as MARK + N items + TUPLE, so a legitimate stack can be as
 * tall as the largest tuple.  Its bytes count against max_memory.
 */
static int pt_push_grow(struct pt_vm *vm, struct pt_value *v)
{
	int rc;

	if (vm->sn >= vm->lim->max_values)
		return pt_vm_fail(vm, -EFBIG, "stack deeper than %llu",
				  (unsigned long long)vm->lim->max_values);
	rc = pt_vm_grow(vm, (void **)&vm->stack, &vm->scap,
			sizeof(*vm->stack), vm->sn + 1);
	if (rc)
		return rc;
	vm->stack[vm->sn++] = v;
	return 0;
}

/* Push @v: in place while the stack has room (nearly every push). */
static inline int pt_push(struct pt_vm *vm, struct pt_value *v)
{
	if (vm->sn < vm->scap && vm->sn < vm->lim->max_values) {
		vm->stack[vm->sn++] = v;
		return 0;
	}
	return pt_push_grow(vm, v);
}

static int pt_underflow(struct pt_vm *vm)
{
	return pt_vm_fail(vm, -EBADMSG, "stack underflow");
}

static int pt_pop(struct pt_vm *vm, struct pt_value **out)
{
	*out = NULL;
	if (vm->sn <= pt_fence(vm))
		return pt_underflow(vm);
	*out = vm->stack[--vm->sn];
	return 0;
}

static int pt_top(struct pt_vm *vm, struct pt_value **out)
{
	*out = NULL;
	if (vm->sn <= pt_fence(vm))
		return pt_underflow(vm);
	*out = vm->stack[vm->sn - 1];
	return 0;
}

/* Pop the top mark; *@k is where its items start (stack[k..sn)). */
static int pt_pop_mark(struct pt_vm *vm, size_t *k)
{
	*k = 0;
	if (vm->mn == 0)
		return pt_vm_fail(vm, -EBADMSG, "no MARK on the stack");
	--vm->mn;
	*k = vm->marks[vm->mn].sn;
	return 0;
}

/* A sequence with exactly the @n values at @v. */
static int pt_seq_set(struct pt_vm *vm, struct pt_vseq *s,
		      struct pt_value *const *v, size_t n)
{
	void *p;
	int rc;

	if (n == 0)
		return 0;
	if (n > SIZE_MAX / sizeof(*s->v))
		return pt_vm_nomem(vm, -EFBIG);
	rc = pt_vm_alloc(vm, n * sizeof(*s->v), &p);
	if (rc)
		return rc;
	s->v = p;
	memcpy(s->v, v, n * sizeof(*s->v));
	s->n = n;
	s->cap = n;
	return 0;
}

/*
 * Sequences that grow (APPENDS, SETITEMS, ADDITEMS) double; in the arena
 * every outgrown array would stay behind (a state dict's 40,000 keys and
 * values left 0.7 MB of copies).  Past PT_SEQ_HEAP_MIN elements the array
 * moves to malloc'd memory, realloc'd while it grows (marked by
 * PT_SEQ_HEAP in cap, during the load only) and cut to its size when the
 * load ends (pt_seq_heap_done).
 */
#define PT_SEQ_HEAP_MIN ((size_t)512)
#define PT_SEQ_HEAP ((size_t)1 << (sizeof(size_t) * 8 - 1))

/* Give @s a malloc'd array of @cap elements (it has @have, in the heap
 * when @heap).  0 or -errno. */
static int pt_seq_heap(struct pt_vm *vm, struct pt_vseq *s, bool heap,
		       size_t have, size_t cap)
{
	struct pt_pickle *pk = vm->pk;
	uint64_t delta = (uint64_t)(cap - (heap ? have : 0)) * sizeof(*s->v);
	void *p;

	if (!heap && pk->n_grown == pk->cap_grown) {
		size_t nc = pk->cap_grown ? 2 * pk->cap_grown : 16;

		if (!pt__pickle_mem_take(pk, (nc - pk->cap_grown) * sizeof(void *)))
			return pt_vm_nomem(vm, -EFBIG);
		p = realloc(pk->grown, nc * sizeof(void *));
		if (!p)
			return pt_vm_nomem(vm, -ENOMEM);
		pk->grown = p;
		pk->cap_grown = nc;
	}
	if (!pt__pickle_mem_take(pk, delta))
		return pt_vm_nomem(vm, -EFBIG);
	p = heap ? realloc(s->v, cap * sizeof(*s->v)) :
		   malloc(cap * sizeof(*s->v));
	if (!p) {
		pk->mem -= delta;
		return pt_vm_nomem(vm, -ENOMEM);
	}
	if (!heap) {
		if (s->n)
			memcpy(p, s->v, s->n * sizeof(*s->v));
		pk->grown[pk->n_grown++] = s;
	}
	s->v = p;
	s->cap = cap | PT_SEQ_HEAP;
	return 0;
}

/* End of a load (also a failed one): every grown array cut to its size
 * and unmarked; pk->grown then lists the arrays, for pt_pickle_free(). */
static void pt_seq_heap_done(struct pt_pickle *pk)
{
	size_t i;

	for (i = 0; i < pk->n_grown; i++) {
		struct pt_vseq *s = pk->grown[i];
		void *p = realloc(s->v, (s->n ? s->n : 1) * sizeof(*s->v));

		if (p) {
			pk->mem -= ((s->cap & ~PT_SEQ_HEAP) -
				    (s->n ? s->n : 1)) * sizeof(*s->v);
			s->v = p;
			s->cap = s->n ? s->n : 1;
		} else {
			s->cap &= ~PT_SEQ_HEAP;
		}
		pk->grown[i] = s->v;
	}
}

/* Append @n values; growth doubles (see PT_SEQ_HEAP_MIN). */
static int pt_seq_add(struct pt_vm *vm, struct pt_vseq *s,
		      struct pt_value *const *v, size_t n)
{
	bool heap = (s->cap & PT_SEQ_HEAP) != 0;
	size_t have = s->cap & ~PT_SEQ_HEAP, need, cap;
	void *p;
	int rc;

	if (n > have - s->n) {
		if (__builtin_add_overflow(s->n, n, &need))
			return pt_vm_nomem(vm, -EFBIG);
		cap = have ? have : 4;
		while (cap < need) {
			if (cap > SIZE_MAX / 4 / sizeof(*s->v))
				return pt_vm_nomem(vm, -EFBIG);
			cap *= 2;
		}
		if (heap || cap >= PT_SEQ_HEAP_MIN) {
			rc = pt_seq_heap(vm, s, heap, have, cap);
			if (rc)
				return rc;
		} else {
			rc = pt_vm_alloc(vm, cap * sizeof(*s->v), &p);
			if (rc)
				return rc;
			if (s->n)
				memcpy(p, s->v, s->n * sizeof(*s->v));
			s->v = p;
			s->cap = cap;
		}
	}
	if (n)
		memcpy(s->v + s->n, v, n * sizeof(*s->v));
	s->n += n;
	return 0;
}

static bool pt_idxset_has(const struct pt_idxset *s, uint64_t idx)
{
	size_t i;

	if (!s->cap)
		return false;
	for (i = (size_t)(idx * 0x9e3779b97f4a7c15ull) & (s->cap - 1);
	     s->v[i]; i = (i + 1) & (s->cap - 1))
		if (s->v[i] == idx + 1)
			return true;
	return false;
}

/* ---- memo ------------------------------------------------------------- */

/* What a memo entry holds once a lean load gave its node back: no GET
 * reads it (the opcode scan said so), and one that did would fail. */
static struct pt_value pt_gone;

/* A lean load notes where each shared scalar is kept, in the order they
 * are made, so that one made after a MARK can be moved down when that
 * MARK's nodes are given back. */
static int pt_shared_note(struct pt_vm *vm, struct pt_value **slot)
{
	int rc;

	if (!vm->reduce)
		return 0;
	rc = pt_vm_grow(vm, (void **)&vm->shared, &vm->shared_cap,
			sizeof(*vm->shared), vm->shared_n + 1);
	if (rc)
		return rc;
	vm->shared[vm->shared_n++] = slot;
	return 0;
}

static int pt_memo_put(struct pt_vm *vm, uint64_t idx, struct pt_value *v)
{
	size_t page, old;
	struct pt_value **pg;
	int rc;

	if (idx >= vm->lim->max_memo)
		return pt_vm_fail(vm, -EFBIG,
				  "memo index %llu past the limit of %llu",
				  (unsigned long long)idx,
				  (unsigned long long)vm->lim->max_memo);
	if (idx / PT_MEMO_PAGE >= SIZE_MAX / sizeof(*vm->memo))
		return pt_vm_nomem(vm, -EFBIG);
	page = (size_t)(idx / PT_MEMO_PAGE);
	if (page >= vm->memo_dir) {
		old = vm->memo_dir;
		rc = pt_vm_grow(vm, (void **)&vm->memo, &vm->memo_dir,
				sizeof(*vm->memo), page + 1);
		if (rc)
			return rc;
		memset(vm->memo + old, 0,
		       (vm->memo_dir - old) * sizeof(*vm->memo));
	}
	pg = vm->memo[page];
	if (!pg) {
		if (!pt__pickle_mem_take(vm->pk, PT_MEMO_PAGE * sizeof(*pg)))
			return pt_vm_nomem(vm, -EFBIG);
		pg = calloc(PT_MEMO_PAGE, sizeof(*pg));
		if (!pg) {
			vm->pk->mem -= PT_MEMO_PAGE * sizeof(*pg);
			return pt_vm_nomem(vm, -ENOMEM);
		}
		vm->scratch += PT_MEMO_PAGE * sizeof(*pg);
		vm->memo[page] = pg;
	}
	if (!pg[idx % PT_MEMO_PAGE])
		vm->memo_n++;
	pg[idx % PT_MEMO_PAGE] = v;
	if (!vm->reduce)
		return 0;
	rc = pt_vm_grow(vm, (void **)&vm->putlog, &vm->putlog_cap,
			sizeof(*vm->putlog), vm->putlog_n + 1);
	if (rc)
		return rc;
	vm->putlog[vm->putlog_n++] = idx;
	return 0;
}

static int pt_memo_get(struct pt_vm *vm, uint64_t idx, struct pt_value **out)
{
	uint64_t page = idx / PT_MEMO_PAGE;
	struct pt_value *v = NULL;

	*out = NULL;
	if (page < vm->memo_dir && vm->memo[page])
		v = vm->memo[page][idx % PT_MEMO_PAGE];
	if (!v || v == &pt_gone)
		return pt_vm_fail(vm, -EBADMSG, "memo index %llu not set",
				  (unsigned long long)idx);
	*out = v;
	return 0;
}

/* Decimal index of GET/PUT: 0, or 1 when empty, 2 when not a number. */
static int pt_line_u64(const struct pt_arg *a, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0, n = a->n;

	while (n > 0 && pt_is_space(a->p[n - 1]))
		n--;
	while (i < n && pt_is_space(a->p[i]))
		i++;
	if (i == n)
		return 1;
	for (; i < n; i++) {
		if (a->p[i] < '0' || a->p[i] > '9' ||
		    !pt_mul_u64(v, 10, &v) ||
		    !pt_add_u64(v, (uint64_t)(a->p[i] - '0'), &v))
			return 2;
	}
	*out = v;
	return 0;
}

static int pt_line_index(struct pt_vm *vm, const struct pt_arg *a,
			 uint64_t *out)
{
	switch (pt_line_u64(a, out)) {
	case 0:
		return 0;
	case 1:
		return pt_vm_fail(vm, -EBADMSG, "empty memo index");
	default:
		return pt_vm_fail(vm, -EBADMSG, "bad memo index");
	}
}

static int pt_op_memo(struct pt_vm *vm, const struct pt_arg *a)
{
	struct pt_value *v;
	uint64_t idx = a->u;
	int rc;

	if (vm->op == OP_GET || vm->op == OP_PUT) {
		rc = pt_line_index(vm, a, &idx);
		if (rc)
			return rc;
	}
	switch (vm->op) {
	case OP_GET:
	case OP_BINGET:
	case OP_LONG_BINGET:
		rc = pt_memo_get(vm, idx, &v);
		return rc ? rc : pt_push(vm, v);
	case OP_MEMOIZE:
		idx = vm->memo_n;
		/* fall through */
	default:
		rc = pt_top(vm, &v);
		if (rc)
			return rc;
		/* a lean load keeps only what some GET reads (without
		 * MEMOIZE, whose index counts every entry set): torch.save
		 * memoises each tuple and string, and reads back a few */
		if (vm->reduce && !vm->memoize && idx < vm->lim->max_memo &&
		    !pt_idxset_has(&vm->gets, idx))
			return 0;
		return pt_memo_put(vm, idx, v);
	}
}

/* ---- lean loads ------------------------------------------------------- */

/* false when out of memory */
static bool pt_idxset_add(struct pt_idxset *s, uint64_t idx)
{
	size_t i;

	if (idx == UINT64_MAX || pt_idxset_has(s, idx))
		return idx != UINT64_MAX;
	if (2 * (s->n + 1) > s->cap) {
		struct pt_idxset t = { NULL, s->cap ? 2 * s->cap : 64, 0 };

		t.v = calloc(t.cap, sizeof(*t.v));
		if (!t.v)
			return false;
		for (i = 0; i < s->cap; i++)
			if (s->v[i])
				pt_idxset_add(&t, s->v[i] - 1);
		free(s->v);
		*s = t;
	}
	for (i = (size_t)(idx * 0x9e3779b97f4a7c15ull) & (s->cap - 1);
	     s->v[i]; i = (i + 1) & (s->cap - 1))
		;
	s->v[i] = idx + 1;
	s->n++;
	return true;
}

/* @n (0, 1, 2, 4 or 8) bytes at @p, little-endian: one load each */
static uint64_t pt_le(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	switch (n) {
	case 0:
		return 0;
	case 1:
		return p[0];
	case 2:
		return pt_le16(p);
	case 4:
		return pt_le32(p);
	case 8:
		return pt_le64(p);
	}
	while (n-- > 0)
		v = v << 8 | p[n];
	return v;
}

/*
 * The memo indices that GET, BINGET and LONG_BINGET read, from one walk
 * over the opcodes up to STOP (lengths only: ~5% of a load).  false (no
 * lean load: the run then reports what is wrong, or runs plainly) on
 * malformed input or out of memory.
 */
static bool pt_prescan(struct pt_vm *vm)
{
	static const uint8_t fixed[] = {
		[PT_A_NONE] = 0, [PT_A_U8] = 1, [PT_A_U16] = 2, [PT_A_U32] = 4,
		[PT_A_I32] = 4, [PT_A_U64] = 8, [PT_A_F8BE] = 8,
		[PT_A_LEN1] = 1, [PT_A_LEN4] = 4, [PT_A_LEN4S] = 4,
		[PT_A_LEN8] = 8,
	};
	const uint8_t *p = vm->rd.p + vm->rd.pos, *end = vm->rd.p + vm->rd.len;
	struct pt_arg a;
	uint64_t idx, n;
	uint8_t op, k;

	while (p < end) {
		op = *p++;
		if (!pt__pickle_ops[op].name)
			return false;
		k = pt__pickle_ops[op].arg;
		if (k == PT_A_LINE || k == PT_A_LINE2) {
			const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));

			if (!nl)
				return false;
			a.p = p;
			a.n = (size_t)(nl - p);
			p = nl + 1;
			if (k == PT_A_LINE2) {
				nl = memchr(p, '\n', (size_t)(end - p));
				if (!nl)
					return false;
				p = nl + 1;
			}
			if (op == OP_GET && (pt_line_u64(&a, &idx) != 0 ||
					     !pt_idxset_add(&vm->gets, idx)))
				return false;
			continue;
		}
		if ((size_t)(end - p) < fixed[k])
			return false;
		n = pt_le(p, fixed[k]);
		p += fixed[k];
		if (k == PT_A_LEN1 || k == PT_A_LEN4 || k == PT_A_LEN4S ||
		    k == PT_A_LEN8) {
			if (n > (uint64_t)(end - p))
				return false;
			p += n;
		} else if (op == OP_BINGET || op == OP_LONG_BINGET) {
			if (!pt_idxset_add(&vm->gets, n))
				return false;
		} else if (op == OP_STOP) {
			return true;
		} else if (op == OP_MEMOIZE) {
			vm->memoize = true;
		}
	}
	return false;
}

static void pt_mark_push(struct pt_vm *vm)
{
	struct pt_mark *m = &vm->marks[vm->mn++];
	struct pt_pickle *pk = vm->pk;

	memset(m, 0, sizeof(*m));
	m->sn = vm->sn;
	if (!vm->reduce)
		return;
	if (vm->mn == 1 && !vm->tup_v) {
		/* no older MARK is open: nothing before this one can be
		 * given back, so the logs start again */
		vm->putlog_n = 0;
		vm->shared_n = 0;
	}
	m->blk = pk->blk;
	m->used = pk->blk ? pk->blk->used : 0;
	m->n_blk = pk->n_blk;
	m->n_grown = pk->n_grown;
	m->id = pk->count;
	m->putlog_n = vm->putlog_n;
	m->shared_n = vm->shared_n;
}

/* Container @t gets items: every open MARK younger than @t can no longer
 * give its nodes back (@t, reachable from elsewhere, may hold them). */
static void pt_taint(struct pt_vm *vm, const struct pt_value *t)
{
	size_t i = vm->mn;

	if (!vm->reduce)
		return;
	while (i > 0 && vm->marks[i - 1].id > t->id)
		vm->marks[--i].tainted = true;
	if (vm->tup_v && vm->tup.id > t->id)
		vm->tup.tainted = true;
}

static struct pt_value **pt_memo_slot(struct pt_vm *vm, uint64_t idx)
{
	return &vm->memo[idx / PT_MEMO_PAGE][idx % PT_MEMO_PAGE];
}

static bool pt_in(const void *p, uintptr_t lo, uintptr_t hi)
{
	return (uintptr_t)p >= lo && (uintptr_t)p < hi;
}

/* Bytes of node @v's own text that lie in [lo, hi), 0 when none do; with
 * @dst, also copy them there. */
static size_t pt_owned(const struct pt_value *v, uintptr_t lo, uintptr_t hi,
		       uint8_t *dst)
{
	size_t n = 0, k;

	switch (v->kind) {
	case PT_V_STR:
	case PT_V_BIGINT:
		if (v->u.s.len && pt_in(v->u.s.p, lo, hi)) {
			n = v->u.s.len;
			if (dst)
				memcpy(dst, v->u.s.p, n);
		}
		return n;
	case PT_V_GLOBAL:
		if (pt_in(v->u.global.module, lo, hi)) {
			k = strlen(v->u.global.module) + 1;
			if (dst)
				memcpy(dst, v->u.global.module, k);
			n += k;
		}
		if (pt_in(v->u.global.name, lo, hi)) {
			k = strlen(v->u.global.name) + 1;
			if (dst)
				memcpy(dst + n, v->u.global.name, k);
			n += k;
		}
		return n;
	default:
		return 0;
	}
}

/* Can node @v (made after the mark) be moved down?  Scalars, strings and
 * globals: they point at nothing of the arena but their own text (not a
 * global's Python 2 spelling, rare enough to keep it all).  Bytes only
 * when they are the input's (a classified bytes node keeps a pointer to
 * its text elsewhere). */
static bool pt_movable(const struct pt_value *v, uintptr_t lo, uintptr_t hi)
{
	switch (v->kind) {
	case PT_V_NONE:
	case PT_V_BOOL:
	case PT_V_INT:
	case PT_V_BIGINT:
	case PT_V_FLOAT:
	case PT_V_STR:
		return true;
	case PT_V_GLOBAL:
		return !v->u.global.py2 || !pt_in(v->u.global.py2, lo, hi);
	case PT_V_BYTES:
		return !pt_in(v->u.s.p, lo, hi);
	case PT_V_TUPLE:
		return v->u.seq.n == 0;
	default:
		return false;
	}
}

#define PT_LEAN_MOVES 16

static struct pt_value *pt_tag(size_t j)
{
	return (struct pt_value *)(uintptr_t)(2 * j + 1);
}

static bool pt_is_tag(const struct pt_value *v)
{
	return ((uintptr_t)v & 1) != 0;
}

static size_t pt_untag(const struct pt_value *v)
{
	return (size_t)((uintptr_t)v >> 1);
}

static size_t pt_find(struct pt_value *const *v, size_t n,
		      const struct pt_value *x)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (v[i] == x)
			break;
	return i;
}

/*
 * Give back the arena above mark @m, keeping the @n nodes @from (from[0]
 * the call, the others what the memo and the shared scalars keep): they
 * are copied out, the arena is cut at the mark, and they are made again
 * at its end, their text with them.  Every memo entry and shared-scalar
 * slot set since the mark then points at the new copy, or, for a memo
 * entry no GET reads, at pt_gone.
 */
static int pt_lean_move(struct pt_vm *vm, const struct pt_mark *m,
			struct pt_value **from, size_t n, uintptr_t lo,
			uintptr_t hi)
{
	struct pt_value saved[PT_LEAN_MOVES], *to[PT_LEAN_MOVES], *call;
	size_t own[PT_LEAN_MOVES], mod[PT_LEAN_MOVES];
	uint8_t *text = NULL, *t;
	size_t i, j, w, nt = 0;
	void *p;
	int rc = 0;

	/* everything read from the old nodes is read before the cut */
	for (i = 0; i < n; i++) {
		saved[i] = *from[i];
		own[i] = pt_owned(from[i], lo, hi, NULL);
		mod[i] = from[i]->kind == PT_V_GLOBAL &&
			 pt_in(from[i]->u.global.module, lo, hi) ?
			 strlen(from[i]->u.global.module) + 1 : 0;
		nt += own[i];
	}
	if (nt) {
		text = malloc(nt);
		if (!text)
			return 0;       /* keep it all */
		for (i = 0, t = text; i < n; i++)
			t += pt_owned(from[i], lo, hi, t);
	}
	/* the slots that point at the old nodes, before anything is
	 * written over them: an odd "pointer" says which copy to take */
	for (i = m->putlog_n; i < vm->putlog_n; i++) {
		struct pt_value **slot = pt_memo_slot(vm, vm->putlog[i]);

		if (pt_is_tag(*slot) || !pt_in(*slot, lo, hi))
			continue;
		j = pt_find(from, n, *slot);
		*slot = j < n ? pt_tag(j) : &pt_gone;
	}
	for (i = m->shared_n; i < vm->shared_n; i++)
		if (pt_in(*vm->shared[i], lo, hi))
			*vm->shared[i] = pt_tag(pt_find(from, n, *vm->shared[i]));
	vm->pk->blk->used = m->used;
	for (i = 0, t = text; i < n && !rc; i++) {
		rc = pt_vm_alloc(vm, sizeof(**to), &p);
		if (rc)
			break;
		to[i] = p;
		*to[i] = saved[i];
		if (!own[i])
			continue;
		rc = pt_vm_alloc(vm, own[i], &p);
		if (rc)
			break;
		memcpy(p, t, own[i]);
		t += own[i];
		if (saved[i].kind != PT_V_GLOBAL) {
			to[i]->u.s.p = p;
			continue;
		}
		if (mod[i])
			to[i]->u.global.module = p;
		if (pt_in(saved[i].u.global.name, lo, hi))
			to[i]->u.global.name = (char *)p + mod[i];
	}
	free(text);
	if (rc)
		return rc;
	/* the memo entries set since the mark (the log goes on for older
	 * marks) and the shared scalars: each now points at the new copy
	 * (tagged with its index while the copies were made) or is gone */
	for (i = w = m->putlog_n; i < vm->putlog_n; i++) {
		struct pt_value **slot = pt_memo_slot(vm, vm->putlog[i]);

		if (*slot == &pt_gone)
			continue;
		if (pt_is_tag(*slot))
			*slot = to[pt_untag(*slot)];
		vm->putlog[w++] = vm->putlog[i];
	}
	vm->putlog_n = w;
	for (i = m->shared_n; i < vm->shared_n; i++)
		if (pt_is_tag(*vm->shared[i]))
			*vm->shared[i] = to[pt_untag(*vm->shared[i])];
	call = to[0];
	if (!vm->empty_tuple) {
		rc = pt_new(vm, PT_V_TUPLE, &vm->empty_tuple);
		if (!rc)
			rc = pt_shared_note(vm, &vm->empty_tuple);
		if (rc)
			return rc;
	}
	call->u.call.args = vm->empty_tuple;
	call->flags |= PT_VF_LEAN;
	vm->stack[vm->sn - 1] = call;
	return 0;
}

/*
 * After REDUCE made @fn(*@args) on top of the stack, @args being the tuple
 * of the last MARK ... TUPLE (vm->tup): offer the call to the reduce
 * callback and, when it takes it, give back what was made for @args.
 * Nothing is given back when anything made after the mark may still be
 * reached: an older container got items meanwhile (tainted), a new arena
 * block or grown sequence holds some of it, or a memo entry a later GET
 * reads holds a node that cannot be moved (a container).
 */
static int pt_lean_reduce(struct pt_vm *vm, struct pt_value *fn,
			  struct pt_value *args)
{
	struct pt_pickle *pk = vm->pk;
	const struct pt_mark *m = &vm->tup;
	struct pt_value *v = vm->stack[vm->sn - 1];
	struct pt_value *from[PT_LEAN_MOVES];
	uintptr_t lo, hi;
	size_t i, n = 0, used;
	int rc;

	if (args != vm->tup_v)
		return 0;
	vm->tup_v = NULL;
	if (m->tainted || !m->blk || pk->blk != m->blk ||
	    pk->n_blk != m->n_blk || pk->n_grown != m->n_grown ||
	    fn->id >= m->id || v->id + 1 != pk->count)
		return 0;
	used = pk->blk->used;
	rc = vm->reduce(vm->reduce_ctx, v, vm->err);
	if (rc <= 0)
		return rc;
	if (pk->blk != m->blk || pk->blk->used != used ||
	    pk->n_blk != m->n_blk || v->id + 1 != pk->count)
		return 0;       /* the callback made nodes: keep it all */
	lo = (uintptr_t)pk->blk + PT_BLK_HDR + m->used;
	hi = (uintptr_t)pk->blk + PT_BLK_HDR + pk->blk->used;
	if (!pt_in(v, lo, hi))
		return 0;
	from[n++] = v;
	for (i = m->putlog_n; i < vm->putlog_n; i++) {
		uint64_t idx = vm->putlog[i];
		struct pt_value *x = *pt_memo_slot(vm, idx);

		if (!pt_in(x, lo, hi) || !pt_idxset_has(&vm->gets, idx) ||
		    pt_find(from, n, x) < n)
			continue;
		if (!pt_movable(x, lo, hi) || n == PT_LEAN_MOVES)
			return 0;
		from[n++] = x;
	}
	for (i = m->shared_n; i < vm->shared_n; i++) {
		struct pt_value *x = *vm->shared[i];

		if (!pt_in(x, lo, hi) || pt_find(from, n, x) < n)
			continue;
		if (n == PT_LEAN_MOVES)
			return 0;
		from[n++] = x;
	}
	return pt_lean_move(vm, m, from, n, lo, hi);
}

/* ---- scalars ---------------------------------------------------------- */

/* Push an int node. */
static int pt_push_int(struct pt_vm *vm, int64_t i)
{
	struct pt_value **slot = NULL;
	struct pt_value *v;
	int rc;

	if (i >= PT_SMALL_MIN && i < PT_SMALL_MIN + PT_SMALL_INTS) {
		slot = &vm->small[i - PT_SMALL_MIN];
		if (*slot)
			return pt_push(vm, *slot);
	}
	rc = pt_new(vm, PT_V_INT, &v);
	if (rc)
		return rc;
	v->u.i = i;
	if (slot) {
		*slot = v;
		rc = pt_shared_note(vm, slot);
		if (rc)
			return rc;
	}
	return pt_push(vm, v);
}

static int pt_push_bool(struct pt_vm *vm, bool b)
{
	struct pt_value *v = vm->bools[b];
	int rc;

	if (v)
		return pt_push(vm, v);
	rc = pt_new(vm, PT_V_BOOL, &v);
	if (rc)
		return rc;
	v->u.b = b;
	vm->bools[b] = v;
	rc = pt_shared_note(vm, &vm->bools[b]);
	return rc ? rc : pt_push(vm, v);
}

/* Push a str/bytes node over @n bytes at @p (@off: input offset, or
 * UINT64_MAX when @p is in the arena). */
static int pt_push_bytes(struct pt_vm *vm, uint8_t kind, uint8_t flags,
			 const uint8_t *p, size_t n, uint64_t off)
{
	struct pt_value *v;
	int rc = pt_new(vm, kind, &v);

	if (rc)
		return rc;
	v->flags = flags;
	v->u.s.p = p;
	v->u.s.len = n;
	v->u.s.in_off = off;
	return pt_push(vm, v);
}

/* Is the @n-byte two's complement little-endian integer in int64 range? */
bool pt__le_fits_i64(const uint8_t *p, size_t n, int64_t *out)
{
	uint64_t u = 0;
	uint8_t fill;
	size_t i;

	if (n == 0) {
		*out = 0;
		return true;
	}
	fill = (p[n - 1] & 0x80) ? 0xff : 0x00;
	for (i = 8; i < n; i++)
		if (p[i] != fill)
			return false;
	if (n > 8 && ((p[7] & 0x80) ? 0xff : 0x00) != fill)
		return false;
	for (i = 0; i < 8; i++)
		u |= (uint64_t)(i < n ? p[i] : fill) << (8 * i);
	memcpy(out, &u, sizeof(u));
	return true;
}

#define PT_MAX_DIGITS 4300 /* CPython's int() digit limit */

/*
 * Decimal text (sign, digits) to a node: int when it fits, else a bigint of
 * minimal two's complement little-endian bytes.  Digits are capped like
 * CPython's int(), so the limb arithmetic stays bounded per byte of input.
 */
static int pt_push_decimal(struct pt_vm *vm, const uint8_t *p, size_t n)
{
	uint32_t limb[PT_MAX_DIGITS / 9 + 2];
	size_t nl = 0, i, j, len;
	uint64_t mag = 0, carry;
	bool neg = false, small = true;
	struct pt_value *v;
	uint8_t *o;
	int rc;

	if (n > 0 && (p[0] == '-' || p[0] == '+')) {
		neg = p[0] == '-';
		p++;
		n--;
	}
	if (n == 0)
		return pt_vm_fail(vm, -EBADMSG, "invalid integer literal");
	if (n > PT_MAX_DIGITS)
		return pt_vm_fail(vm, -EFBIG, "integer of more than %d digits",
				  PT_MAX_DIGITS);
	for (i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return pt_vm_fail(vm, -EBADMSG,
					  "invalid integer literal");
		if (small && (!pt_mul_u64(mag, 10, &mag) ||
			      !pt_add_u64(mag, (uint64_t)(p[i] - '0'), &mag)))
			small = false;
	}
	if (small && mag <= (uint64_t)INT64_MAX)
		return pt_push_int(vm, neg ? -(int64_t)mag : (int64_t)mag);
	if (small && neg && mag == (uint64_t)INT64_MAX + 1)
		return pt_push_int(vm, INT64_MIN);
	/* limbs of 32 bits, fed 9 digits (one base-10^9 chunk) at a time */
	for (i = 0; i < n;) {
		uint32_t chunk = 0, mul = 1;

		for (j = 0; j < 9 && i < n; j++, i++) {
			chunk = chunk * 10 + (uint32_t)(p[i] - '0');
			mul *= 10;
		}
		carry = chunk;
		for (j = 0; j < nl; j++) {
			carry += (uint64_t)limb[j] * mul;
			limb[j] = (uint32_t)carry;
			carry >>= 32;
		}
		if (carry)
			limb[nl++] = (uint32_t)carry;
	}
	rc = pt_new(vm, PT_V_BIGINT, &v);
	if (!rc)
		rc = pt_vm_alloc(vm, nl * 4 + 1, (void **)&o);
	if (rc)
		return rc;
	for (j = 0; j < nl; j++)
		pt_put32(o + 4 * j, limb[j]);
	len = nl * 4;
	while (len > 1 && o[len - 1] == 0)
		len--;
	if (neg) {
		carry = 1;
		for (j = 0; j < len; j++) {
			carry += (uint8_t)~o[j];
			o[j] = (uint8_t)carry;
			carry >>= 8;
		}
		if (!(o[len - 1] & 0x80))
			o[len++] = 0xff;
	} else if (o[len - 1] & 0x80) {
		o[len++] = 0x00;
	}
	v->u.s.p = o;
	v->u.s.len = len;
	v->u.s.in_off = UINT64_MAX;
	return pt_push(vm, v);
}

/* INT and LONG text: whitespace, optional L (LONG), "00"/"01" (INT). */
static int pt_op_text_int(struct pt_vm *vm, const struct pt_arg *a)
{
	const uint8_t *p = a->p;
	size_t n = a->n;

	if (vm->op == OP_INT && n == 2 && p[0] == '0' && (p[1] == '0' ||
							  p[1] == '1'))
		return pt_push_bool(vm, p[1] == '1');
	while (n > 0 && pt_is_space(p[n - 1]))
		n--;
	while (n > 0 && pt_is_space(p[0])) {
		p++;
		n--;
	}
	if (vm->op == OP_LONG && n > 0 && p[n - 1] == 'L')
		n--;
	return pt_push_decimal(vm, p, n);
}

static int pt_op_long_bin(struct pt_vm *vm, const struct pt_arg *a)
{
	struct pt_value *v;
	int64_t i;
	int rc;

	if (pt__le_fits_i64(a->p, a->n, &i))
		return pt_push_int(vm, i);
	rc = pt_new(vm, PT_V_BIGINT, &v);
	if (rc)
		return rc;
	v->u.s.p = a->p;
	v->u.s.len = a->n;
	v->u.s.in_off = a->off;
	return pt_push(vm, v);
}

static int pt_push_float(struct pt_vm *vm, double f)
{
	struct pt_value *v;
	int rc = pt_new(vm, PT_V_FLOAT, &v);

	if (rc)
		return rc;
	v->u.f = f;
	return pt_push(vm, v);
}

/* FLOAT: Python's float() text; strtod reads the C locale's format. */
static int pt_op_float_text(struct pt_vm *vm, const struct pt_arg *a)
{
	char small[128];
	char *s = small, *end = NULL;
	double f;
	size_t i;
	int rc;

	if (a->n >= sizeof(small)) {
		rc = pt_vm_alloc(vm, a->n + 1, (void **)&s);
		if (rc)
			return rc;
	}
	for (i = 0; i < a->n; i++) {
		if (a->p[i] == 0)
			return pt_vm_fail(vm, -EBADMSG,
					  "invalid float literal");
		s[i] = (char)a->p[i];
	}
	s[a->n] = '\0';
	f = strtod(s, &end);
	if (end == s)
		return pt_vm_fail(vm, -EBADMSG, "invalid float literal");
	while (*end && pt_is_space((uint8_t)*end))
		end++;
	if (*end)
		return pt_vm_fail(vm, -EBADMSG, "invalid float literal");
	return pt_push_float(vm, f);
}

static int pt_op_binfloat(struct pt_vm *vm, const struct pt_arg *a)
{
	double f;

	memcpy(&f, &a->u, sizeof(f));
	return pt_push_float(vm, f);
}

/* ---- text strings ----------------------------------------------------- */

/* The byte a one-character escape of a Python 2 literal stands for. */
static int pt_py2_escape(uint8_t c)
{
	static const char from[] = "abtnvfr\\'\"";
	static const uint8_t to[] = {
		7, 8, 9, 10, 11, 12, 13, '\\', '\'', '"',
	};
	const char *q = memchr(from, c, sizeof(from) - 1);

	return q ? to[q - from] : -1;
}

/* STRING: a quoted Python 2 literal, escapes as codecs.escape_decode. */
static int pt_op_string(struct pt_vm *vm, const struct pt_arg *a)
{
	const uint8_t *s = a->p;
	size_t n = a->n, i, o = 0;
	uint8_t *out;
	int rc, h1, h2, e;

	if (n < 2 || s[0] != s[n - 1] || (s[0] != '\'' && s[0] != '"'))
		return pt_vm_fail(vm, -EBADMSG, "argument must be quoted");
	s++;
	n -= 2;
	rc = pt_vm_alloc(vm, n, (void **)&out);
	if (rc)
		return rc;
	for (i = 0; i < n;) {
		uint8_t c = s[i++];
		unsigned v;

		if (c != '\\') {
			out[o++] = c;
			continue;
		}
		if (i == n)
			return pt_vm_fail(vm, -EBADMSG,
					  "trailing \\ in string");
		c = s[i++];
		e = pt_py2_escape(c);
		if (e >= 0) {
			out[o++] = (uint8_t)e;
		} else if (c == 'x') {
			h1 = i < n ? pt_hexval(s[i]) : -1;
			h2 = i + 1 < n ? pt_hexval(s[i + 1]) : -1;
			if (h1 < 0 || h2 < 0)
				return pt_vm_fail(vm, -EBADMSG,
						  "invalid \\x escape");
			out[o++] = (uint8_t)(h1 << 4 | h2);
			i += 2;
		} else if (c >= '0' && c <= '7') {
			v = c - '0';
			if (i < n && s[i] >= '0' && s[i] <= '7')
				v = v * 8 + (unsigned)(s[i++] - '0');
			if (i < n && s[i] >= '0' && s[i] <= '7')
				v = v * 8 + (unsigned)(s[i++] - '0');
			out[o++] = (uint8_t)v;
		} else {
			/* unknown escapes stay as they are */
			out[o++] = '\\';
			i--;
		}
	}
	return pt_push_bytes(vm, PT_V_STR, PT_VF_PY2STR, out, o, UINT64_MAX);
}

/* UNICODE: raw-unicode-escape; only \uXXXX and \UXXXXXXXX after an odd
 * run of backslashes are escapes, every other byte is a Latin-1 char. */
static int pt_op_unicode(struct pt_vm *vm, const struct pt_arg *a)
{
	const uint8_t *s = a->p;
	size_t n = a->n, i = 0, o = 0, run, k, cnt;
	uint8_t *out;
	uint32_t c;
	int rc, h;

	if (n > (SIZE_MAX - 4) / 2)
		return pt_vm_nomem(vm, -EFBIG);
	rc = pt_vm_alloc(vm, 2 * n + 4, (void **)&out);
	if (rc)
		return rc;
	while (i < n) {
		if (s[i] != '\\') {
			o += pt_utf8_put(out + o, s[i++]);
			continue;
		}
		for (run = 0; i < n && s[i] == '\\'; run++, i++)
			out[o++] = '\\';
		if (run % 2 == 0 || i == n || (s[i] != 'u' && s[i] != 'U'))
			continue;
		o--;
		cnt = s[i] == 'u' ? 4 : 8;
		i++;
		if (n - i < cnt)
			return pt_vm_fail(vm, -EBADMSG, "truncated \\u escape");
		for (c = 0, k = 0; k < cnt; k++) {
			h = pt_hexval(s[i + k]);
			if (h < 0 || c > 0x10ffff)
				return pt_vm_fail(vm, -EBADMSG,
						  "bad \\u escape");
			c = c << 4 | (uint32_t)h;
		}
		if (c > 0x10ffff)
			return pt_vm_fail(vm, -EBADMSG,
					  "\\U escape out of range");
		i += cnt;
		o += pt_utf8_put(out + o, c);
	}
	return pt_push_bytes(vm, PT_V_STR, 0, out, o, UINT64_MAX);
}

/* Zero-copy strings and bytes. */
static int pt_op_counted(struct pt_vm *vm, const struct pt_arg *a)
{
	uint8_t kind = PT_V_BYTES, flags = 0;

	switch (vm->op) {
	case OP_BINSTRING:
	case OP_SHORT_BINSTRING:
		flags = PT_VF_PY2STR;
		kind = PT_V_STR;
		break;
	case OP_BINUNICODE:
	case OP_SHORT_BINUNICODE:
	case OP_BINUNICODE8:
		kind = PT_V_STR;
		break;
	case OP_BYTEARRAY8:
		kind = PT_V_BYTEARRAY;
		break;
	default:
		break;
	}
	return pt_push_bytes(vm, kind, flags, a->p, a->n, a->off);
}

/* ---- containers ------------------------------------------------------- */

static int pt_op_empty(struct pt_vm *vm)
{
	static const uint8_t kinds[][2] = {
		{ OP_EMPTY_LIST, PT_V_LIST },   { OP_EMPTY_TUPLE, PT_V_TUPLE },
		{ OP_EMPTY_DICT, PT_V_DICT },   { OP_EMPTY_SET, PT_V_SET },
		{ OP_NONE, PT_V_NONE },
	};
	struct pt_value *v;
	size_t i;
	int rc;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (kinds[i][0] == vm->op)
			break;
	if (i == sizeof(kinds) / sizeof(kinds[0]))
		return pt_vm_fail(vm, -EBADMSG, "internal: not a constant");
	/* None and () are immutable: one node each per pickle (every tensor
	 * of a state dict pickles an empty tuple for its hooks) */
	if (vm->op == OP_NONE && vm->none)
		return pt_push(vm, vm->none);
	if (vm->op == OP_EMPTY_TUPLE && vm->empty_tuple)
		return pt_push(vm, vm->empty_tuple);
	rc = pt_new(vm, kinds[i][1], &v);
	if (rc == 0 && vm->op == OP_NONE) {
		vm->none = v;
		rc = pt_shared_note(vm, &vm->none);
	}
	if (rc == 0 && vm->op == OP_EMPTY_TUPLE) {
		vm->empty_tuple = v;
		rc = pt_shared_note(vm, &vm->empty_tuple);
	}
	return rc ? rc : pt_push(vm, v);
}

/* A new container holding @n values at @items. */
static int pt_make_seq(struct pt_vm *vm, uint8_t kind,
		       struct pt_value *const *items, size_t n,
		       struct pt_value **out)
{
	struct pt_value *v;
	int rc = pt_new(vm, kind, &v);

	if (!rc)
		rc = pt_seq_set(vm, kind == PT_V_DICT ? &v->u.dict.kv :
				&v->u.seq, items, n);
	*out = v;
	return rc;
}

/* &stack[@k], the items from @k up; NULL while the stack was never
 * allocated (an empty MARK ... LIST at the start: NULL + 0 is undefined). */
static struct pt_value *const *pt_stack_at(const struct pt_vm *vm, size_t k)
{
	return vm->stack ? vm->stack + k : NULL;
}

/* LIST, TUPLE, DICT, FROZENSET from MARK; TUPLE1-3 from the stack top. */
static int pt_op_collect(struct pt_vm *vm)
{
	const struct pt_mark *popped = NULL;
	struct pt_value *v;
	uint8_t kind = PT_V_TUPLE;
	size_t k;
	int rc;

	if (vm->op >= OP_TUPLE1 && vm->op <= OP_TUPLE3) {
		k = (size_t)(vm->op - OP_TUPLE1 + 1);
		if (vm->sn - pt_fence(vm) < k)
			return pt_underflow(vm);
		k = vm->sn - k;
	} else {
		rc = pt_pop_mark(vm, &k);
		if (rc)
			return rc;
		if (vm->op == OP_TUPLE)
			popped = &vm->marks[vm->mn];
	}
	if (vm->op == OP_LIST)
		kind = PT_V_LIST;
	else if (vm->op == OP_FROZENSET)
		kind = PT_V_FROZENSET;
	else if (vm->op == OP_DICT)
		kind = PT_V_DICT;
	if (kind == PT_V_DICT && (vm->sn - k) % 2)
		return pt_vm_fail(vm, -EBADMSG, "odd number of items");
	rc = pt_make_seq(vm, kind, pt_stack_at(vm, k), vm->sn - k, &v);
	if (rc)
		return rc;
	vm->sn = k;
	if (popped && vm->reduce) {
		vm->tup = *popped;
		vm->tup_v = v;
	}
	return pt_push(vm, v);
}

/* The out-of-line part of call @v, made on first use.  0 or -errno. */
static int pt_call_ext(struct pt_vm *vm, struct pt_value *v,
		       struct pt_vcall_ext **out)
{
	int rc = 0;

	if (!v->u.call.ext)
		rc = pt_vm_alloc(vm, sizeof(*v->u.call.ext),
				 (void **)&v->u.call.ext);
	*out = v->u.call.ext;
	return rc;
}

/* Where APPEND/SETITEM/ADDITEMS put items on @t: *@out, or NULL when @t
 * takes none.  0 or -errno (out of memory). */
static int pt_target_seq(struct pt_vm *vm, struct pt_value *t,
			 struct pt_vseq **out)
{
	bool call = t->kind == PT_V_CALL || t->kind == PT_V_OBJ;
	bool kv = vm->op == OP_SETITEM || vm->op == OP_SETITEMS;
	struct pt_vcall_ext *x;
	int rc;

	*out = NULL;
	switch (vm->op) {
	case OP_APPEND:
	case OP_APPENDS:
		if (t->kind == PT_V_LIST)
			*out = &t->u.seq;
		break;
	case OP_SETITEM:
	case OP_SETITEMS:
		if (t->kind == PT_V_DICT)
			*out = &t->u.dict.kv;
		break;
	case OP_ADDITEMS:
		if (t->kind == PT_V_SET)
			*out = &t->u.seq;
		break;
	default:
		return 0;
	}
	if (*out || !call)
		return 0;
	rc = pt_call_ext(vm, t, &x);
	if (rc)
		return rc;
	*out = kv ? &x->kv : &x->items;
	return 0;
}

/* APPEND, APPENDS, SETITEM, SETITEMS, ADDITEMS. */
static int pt_op_add(struct pt_vm *vm)
{
	struct pt_vseq *seq;
	struct pt_value *t;
	size_t k, tpos;
	int rc;

	if (vm->op == OP_APPEND || vm->op == OP_SETITEM) {
		k = vm->op == OP_APPEND ? 1 : 2;
		if (vm->sn - pt_fence(vm) < k + 1)
			return pt_underflow(vm);
		k = vm->sn - k;
		tpos = k - 1;
	} else {
		rc = pt_pop_mark(vm, &k);
		if (rc)
			return rc;
		if (k == 0 || k - 1 < pt_fence(vm))
			return pt_underflow(vm);
		tpos = k - 1;
	}
	t = vm->stack[tpos];
	pt_taint(vm, t);
	rc = pt_target_seq(vm, t, &seq);
	if (rc)
		return rc;
	if (!seq)
		return pt_vm_fail(vm, -EBADMSG, "cannot add items to a %s",
				  pt_kind_name(t->kind));
	if ((vm->op == OP_SETITEMS) && (vm->sn - k) % 2)
		return pt_vm_fail(vm, -EBADMSG, "odd number of items");
	rc = pt_seq_add(vm, seq, vm->stack + k, vm->sn - k);
	if (rc)
		return rc;
	vm->sn = k;
	return 0;
}

/* ---- stack ops -------------------------------------------------------- */

static int pt_op_stack(struct pt_vm *vm)
{
	struct pt_value *v;
	size_t k;
	int rc;

	switch (vm->op) {
	case OP_MARK:
		if (vm->mn >= vm->lim->max_depth)
			return pt_vm_fail(vm, -EFBIG,
					  "more than %u nested MARKs",
					  (unsigned)vm->lim->max_depth);
		rc = pt_vm_grow(vm, (void **)&vm->marks, &vm->mcap,
				sizeof(*vm->marks), vm->mn + 1);
		if (rc)
			return rc;
		pt_mark_push(vm);
		return 0;
	case OP_POP:
		/* like _pickle.c: on an empty frame, POP drops the mark */
		if (vm->mn && vm->marks[vm->mn - 1].sn == vm->sn) {
			vm->mn--;
			return 0;
		}
		return pt_pop(vm, &v);
	case OP_POP_MARK:
		rc = pt_pop_mark(vm, &k);
		if (rc)
			return rc;
		vm->sn = k;
		return 0;
	case OP_DUP:
		rc = pt_top(vm, &v);
		return rc ? rc : pt_push(vm, v);
	default:
		return pt_vm_fail(vm, -EBADMSG, "internal: not a stack op");
	}
}

/* ---- globals ---------------------------------------------------------- */

/* The common part of CPython's Lib/_compat_pickle.py (protocol < 3). */
static const char *const pt_py2_names[][4] = {
	{ "__builtin__", "xrange", "builtins", "range" },
	{ "__builtin__", "reduce", "functools", "reduce" },
	{ "__builtin__", "intern", "sys", "intern" },
	{ "__builtin__", "unichr", "builtins", "chr" },
	{ "__builtin__", "unicode", "builtins", "str" },
	{ "__builtin__", "long", "builtins", "int" },
	{ "__builtin__", "basestring", "builtins", "str" },
	{ "itertools", "izip", "builtins", "zip" },
	{ "itertools", "imap", "builtins", "map" },
	{ "itertools", "ifilter", "builtins", "filter" },
	{ "itertools", "ifilterfalse", "itertools", "filterfalse" },
	{ "itertools", "izip_longest", "itertools", "zip_longest" },
	{ "UserDict", "IterableUserDict", "collections", "UserDict" },
	{ "exceptions", "StandardError", "builtins", "Exception" },
};

static const char *const pt_py2_modules[][2] = {
	{ "__builtin__", "builtins" },  { "copy_reg", "copyreg" },
	{ "cPickle", "pickle" },        { "Queue", "queue" },
	{ "ConfigParser", "configparser" }, { "repr", "reprlib" },
	{ "thread", "_thread" },        { "UserDict", "collections" },
	{ "UserList", "collections" },  { "UserString", "collections" },
	{ "StringIO", "io" },           { "cStringIO", "io" },
	{ "urlparse", "urllib.parse" }, { "urllib2", "urllib.request" },
	{ "_abcoll", "collections.abc" }, { "exceptions", "builtins" },
	{ "httplib", "http.client" },   { "commands", "subprocess" },
};

static bool pt_eq(const uint8_t *p, size_t n, const char *s)
{
	return strlen(s) == n && memcmp(p, s, n) == 0;
}

/* A NUL-terminated arena copy of a global's module or name. */
static int pt_name_copy(struct pt_vm *vm, const uint8_t *p, size_t n,
			const char **out)
{
	char *s;
	int rc;

	if (memchr(p, '\0', n))
		return pt_vm_fail(vm, -EBADMSG, "NUL byte in a global name");
	if (!pt_utf8_valid(p, n))
		return pt_vm_fail(vm, -EBADMSG,
				  "global name is not valid UTF-8");
	if (n == SIZE_MAX)
		return pt_vm_nomem(vm, -EFBIG);
	rc = pt_vm_alloc(vm, n + 1, (void **)&s);
	if (rc)
		return rc;
	if (n)
		memcpy(s, p, n);
	*out = s;
	return 0;
}

/* Keep the spelling @mp/@np of a global that is being translated, as
 * "module\0name\0" in the arena (pickle.h, u.global.py2). */
static int pt_keep_py2(struct pt_vm *vm, struct pt_value *v,
		       const uint8_t *mp, size_t mn, const uint8_t *np,
		       size_t nn)
{
	char *s;
	int rc;

	if (mn > SIZE_MAX / 2 - 2 || nn > SIZE_MAX / 2)
		return pt_vm_nomem(vm, -EFBIG);
	rc = pt_vm_alloc(vm, mn + nn + 2, (void **)&s);
	if (rc)
		return rc;
	memcpy(s, mp, mn);
	s[mn] = '\0';
	memcpy(s + mn + 1, np, nn);
	s[mn + 1 + nn] = '\0';
	v->u.global.py2 = s;
	return 0;
}

/* A GLOBAL node for module/name, Python 2 names mapped below protocol 3
 * (their spelling kept for pickle_emit.c). */
static int pt_make_global(struct pt_vm *vm, const uint8_t *mp, size_t mn,
			  const uint8_t *np, size_t nn, struct pt_value **out)
{
	const uint8_t *mp0 = mp, *np0 = np;
	size_t mn0 = mn, nn0 = nn;
	struct pt_value *v;
	size_t i;
	int rc;

	rc = pt_new(vm, PT_V_GLOBAL, &v);
	if (rc)
		return rc;
	*out = v;
	if (vm->pk->proto < 3) {
		for (i = 0; i < sizeof(pt_py2_names) / sizeof(*pt_py2_names);
		     i++) {
			if (pt_eq(mp, mn, pt_py2_names[i][0]) &&
			    pt_eq(np, nn, pt_py2_names[i][1])) {
				mp = (const uint8_t *)pt_py2_names[i][2];
				np = (const uint8_t *)pt_py2_names[i][3];
				mn = strlen(pt_py2_names[i][2]);
				nn = strlen(pt_py2_names[i][3]);
				goto copy;
			}
		}
		for (i = 0; i < sizeof(pt_py2_modules) /
			     sizeof(*pt_py2_modules); i++) {
			if (pt_eq(mp, mn, pt_py2_modules[i][0])) {
				mp = (const uint8_t *)pt_py2_modules[i][1];
				mn = strlen(pt_py2_modules[i][1]);
				break;
			}
		}
	}
copy:
	rc = pt_name_copy(vm, mp, mn, &v->u.global.module);
	if (!rc)
		rc = pt_name_copy(vm, np, nn, &v->u.global.name);
	if (!rc && (mp != mp0 || np != np0))
		rc = pt_keep_py2(vm, v, mp0, mn0, np0, nn0);
	return rc;
}

static int pt_op_global(struct pt_vm *vm, const struct pt_arg *a)
{
	struct pt_value *v, *mod, *name;
	int rc;

	if (vm->op == OP_GLOBAL) {
		rc = pt_make_global(vm, a->p, a->n, a->p2, a->n2, &v);
		return rc ? rc : pt_push(vm, v);
	}
	rc = pt_pop(vm, &name);
	if (!rc)
		rc = pt_pop(vm, &mod);
	if (rc)
		return rc;
	if (mod->kind != PT_V_STR || name->kind != PT_V_STR)
		return pt_vm_fail(vm, -EBADMSG, "module and name must be str");
	rc = pt_make_global(vm, mod->u.s.p, mod->u.s.len, name->u.s.p,
			    name->u.s.len, &v);
	return rc ? rc : pt_push(vm, v);
}

/* ---- calls ------------------------------------------------------------ */

static int pt_make_call(struct pt_vm *vm, uint8_t kind, struct pt_value *fn,
			struct pt_value *args, struct pt_value *kwargs)
{
	struct pt_vcall_ext *x;
	struct pt_value *v;
	int rc = pt_new(vm, kind, &v);

	if (rc)
		return rc;
	v->u.call.callable = fn;
	v->u.call.args = args;
	if (kwargs) {
		rc = pt_call_ext(vm, v, &x);
		if (rc)
			return rc;
		x->kwargs = kwargs;
	}
	return pt_push(vm, v);
}

/* REDUCE, NEWOBJ, NEWOBJ_EX. */
static int pt_op_call(struct pt_vm *vm)
{
	struct pt_value *fn, *args, *kw = NULL;
	int rc = 0;

	if (vm->op == OP_NEWOBJ_EX)
		rc = pt_pop(vm, &kw);
	if (!rc)
		rc = pt_pop(vm, &args);
	if (!rc)
		rc = pt_pop(vm, &fn);
	if (rc)
		return rc;
	if (args->kind != PT_V_TUPLE)
		return pt_vm_fail(vm, -EBADMSG,
				  "arguments are a %s, not a tuple",
				  pt_kind_name(args->kind));
	if (kw && kw->kind != PT_V_DICT)
		return pt_vm_fail(vm, -EBADMSG,
				  "keyword arguments are a %s, not a dict",
				  pt_kind_name(kw->kind));
	rc = pt_make_call(vm, vm->op == OP_REDUCE ? PT_V_CALL : PT_V_OBJ,
			  fn, args, kw);
	if (!rc && vm->op == OP_NEWOBJ_EX)
		vm->stack[vm->sn - 1]->flags |= PT_VF_NEWOBJ_EX;
	if (rc || vm->op != OP_REDUCE || !vm->tup_v)
		return rc;
	return pt_lean_reduce(vm, fn, args);
}

/* INST (class from two lines) and OBJ (class is the first item). */
static int pt_op_inst(struct pt_vm *vm, const struct pt_arg *a)
{
	struct pt_value *cls, *args;
	size_t k, first;
	int rc;

	rc = pt_pop_mark(vm, &k);
	if (rc)
		return rc;
	first = k;
	if (vm->op == OP_INST) {
		rc = pt_make_global(vm, a->p, a->n, a->p2, a->n2, &cls);
	} else {
		if (vm->sn == k)
			return pt_vm_fail(vm, -EBADMSG, "no class after MARK");
		cls = vm->stack[first++];
	}
	if (!rc)
		rc = pt_make_seq(vm, PT_V_TUPLE, pt_stack_at(vm, first),
				 vm->sn - first, &args);
	if (rc)
		return rc;
	vm->sn = k;
	rc = pt_make_call(vm, PT_V_OBJ, cls, args, NULL);
	if (!rc)
		vm->stack[vm->sn - 1]->flags |= PT_VF_INST;
	return rc;
}

/*
 * BUILD: state goes to a call or object node.  On any other node (a dict,
 * a global, ...) it is dropped: the graph is inert, and CPython would
 * either run __setstate__ or fail, neither of which concerns a reader.
 */
static int pt_op_build(struct pt_vm *vm)
{
	struct pt_value *state, *obj;
	struct pt_vcall_ext *x;
	int rc;

	rc = pt_pop(vm, &state);
	if (!rc)
		rc = pt_top(vm, &obj);
	if (rc)
		return rc;
	if (obj->kind == PT_V_CALL || obj->kind == PT_V_OBJ) {
		pt_taint(vm, obj);
		rc = pt_call_ext(vm, obj, &x);
		if (rc)
			return rc;
		x->state = state;
	}
	return 0;
}

static int pt_op_persid(struct pt_vm *vm, const struct pt_arg *a)
{
	struct pt_value *pid, *v;
	int rc;

	if (vm->op == OP_PERSID) {
		rc = pt_push_bytes(vm, PT_V_STR, 0, a->p, a->n, a->off);
		if (rc)
			return rc;
	}
	rc = pt_pop(vm, &pid);
	if (!rc)
		rc = pt_new(vm, PT_V_PERSID, &v);
	if (rc)
		return rc;
	v->u.pid = pid;
	return pt_push(vm, v);
}

/* ---- dispatch --------------------------------------------------------- */

static int pt_op_misc(struct pt_vm *vm, const struct pt_arg *a)
{
	switch (vm->op) {
	case OP_PROTO:
		if (a->u > 5)
			return pt_vm_fail(vm, -ENOTSUP,
					  "unsupported protocol %llu",
					  (unsigned long long)a->u);
		if ((int)a->u > vm->pk->proto)
			vm->pk->proto = (int)a->u;
		return 0;
	case OP_FRAME:
		if (a->u > pt_rd_left(&vm->rd))
			return pt_vm_fail(vm, -EBADMSG,
					  "frame of %llu bytes past end of input (%zu bytes left)",
					  (unsigned long long)a->u,
					  pt_rd_left(&vm->rd));
		return 0;
	case OP_STOP:
		vm->stopped = true;
		return pt_pop(vm, &vm->pk->root);
	case OP_NEXT_BUFFER:
	case OP_READONLY_BUFFER:
		return pt_vm_fail(vm, -ENOTSUP, "out-of-band buffers");
	default:
		return pt_vm_fail(vm, -ENOTSUP, "extension code %lld",
				  (long long)(vm->op == OP_EXT4 ? a->i :
					      (int64_t)a->u));
	}
}

static int pt_vm_step(struct pt_vm *vm, const struct pt_arg *a)
{
	switch (vm->op) {
	case OP_NONE:
	case OP_EMPTY_LIST:
	case OP_EMPTY_TUPLE:
	case OP_EMPTY_DICT:
	case OP_EMPTY_SET:
		return pt_op_empty(vm);
	case OP_NEWTRUE:
	case OP_NEWFALSE:
		return pt_push_bool(vm, vm->op == OP_NEWTRUE);
	case OP_INT:
	case OP_LONG:
		return pt_op_text_int(vm, a);
	case OP_BININT:
		return pt_push_int(vm, a->i);
	case OP_BININT1:
	case OP_BININT2:
		return pt_push_int(vm, (int64_t)a->u);
	case OP_LONG1:
	case OP_LONG4:
		return pt_op_long_bin(vm, a);
	case OP_FLOAT:
		return pt_op_float_text(vm, a);
	case OP_BINFLOAT:
		return pt_op_binfloat(vm, a);
	case OP_STRING:
		return pt_op_string(vm, a);
	case OP_UNICODE:
		return pt_op_unicode(vm, a);
	case OP_BINSTRING:
	case OP_SHORT_BINSTRING:
	case OP_BINUNICODE:
	case OP_SHORT_BINUNICODE:
	case OP_BINUNICODE8:
	case OP_BINBYTES:
	case OP_SHORT_BINBYTES:
	case OP_BINBYTES8:
	case OP_BYTEARRAY8:
		return pt_op_counted(vm, a);
	case OP_MARK:
	case OP_POP:
	case OP_POP_MARK:
	case OP_DUP:
		return pt_op_stack(vm);
	case OP_LIST:
	case OP_TUPLE:
	case OP_DICT:
	case OP_FROZENSET:
	case OP_TUPLE1:
	case OP_TUPLE2:
	case OP_TUPLE3:
		return pt_op_collect(vm);
	case OP_APPEND:
	case OP_APPENDS:
	case OP_SETITEM:
	case OP_SETITEMS:
	case OP_ADDITEMS:
		return pt_op_add(vm);
	case OP_GET:
	case OP_BINGET:
	case OP_LONG_BINGET:
	case OP_PUT:
	case OP_BINPUT:
	case OP_LONG_BINPUT:
	case OP_MEMOIZE:
		return pt_op_memo(vm, a);
	case OP_GLOBAL:
	case OP_STACK_GLOBAL:
		return pt_op_global(vm, a);
	case OP_REDUCE:
	case OP_NEWOBJ:
	case OP_NEWOBJ_EX:
		return pt_op_call(vm);
	case OP_INST:
	case OP_OBJ:
		return pt_op_inst(vm, a);
	case OP_BUILD:
		return pt_op_build(vm);
	case OP_PERSID:
	case OP_BINPERSID:
		return pt_op_persid(vm, a);
	default:
		return pt_op_misc(vm, a);
	}
}

static int pt_vm_run(struct pt_vm *vm)
{
	struct pt_arg a;
	char why[128];
	uint64_t maxb = vm->lim->max_pickle_bytes;
	uint8_t op;
	int rc;

	while (!vm->stopped) {
		vm->off = vm->rd.pos;
		if (vm->off > maxb)
			return pt_fail(vm->err, -EFBIG,
				       "pickle: longer than the limit of %llu bytes",
				       (unsigned long long)maxb);
		if (!pt_rd_u8(&vm->rd, &op))
			return pt_fail(vm->err, -EBADMSG,
				       "pickle: input ends at offset %zu without STOP",
				       vm->off);
		if (!pt__pickle_ops[op].name)
			return pt_fail(vm->err, -EBADMSG,
				       "pickle: unknown opcode 0x%02x at offset %zu",
				       op, vm->off);
		vm->op = op;
		if (vm->tup_v && op != OP_REDUCE && op != OP_BINPUT &&
		    op != OP_LONG_BINPUT && op != OP_PUT && op != OP_MEMOIZE)
			vm->tup_v = NULL;
		if (!pt_read_arg(&vm->rd, pt__pickle_ops[op].arg, &a, why, sizeof(why)))
			return pt_vm_fail(vm, -EBADMSG, "%s", why);
		rc = pt_vm_step(vm, &a);
		if (rc)
			return rc;
	}
	return 0;
}

static int pt_load(struct pt_pickle **out, const uint8_t *buf, size_t len,
		   size_t *used, const struct pt_limits *lim,
		   pt_pickle_reduce_fn reduce, void *ctx, struct pt_error *err)
{
	struct pt_limits deflim;
	struct pt_pickle *pk = NULL;
	struct pt_vm vm;
	int rc;

	*out = NULL;
	if (used)
		*used = 0;
	if (!lim) {
		pt_limits_default(&deflim);
		lim = &deflim;
	}
	pk = calloc(1, sizeof(*pk));
	if (!pk)
		return pt_fail(err, -ENOMEM, "pickle: out of memory");
	pk->mem_max = lim->max_memory;
	memset(&vm, 0, sizeof(vm));
	vm.pk = pk;
	vm.lim = lim;
	vm.err = err;
	vm.rd = pt_rd_make(buf, len);
	if (reduce) {
		vm.reduce = reduce;
		vm.reduce_ctx = ctx;
		if (!pt_prescan(&vm))
			vm.reduce = NULL;  /* the run says what is wrong */
	}
	rc = pt_vm_run(&vm);
	pt_seq_heap_done(pk);
	pt_vm_free_scratch(&vm);
	if (rc)
		goto out;
	if (used)
		*used = vm.rd.pos;
	pt__arena_trim(pk);
	*out = pk;
	pk = NULL;
out:
	pt_pickle_free(pk);
	return rc;
}

int pt_pickle_load(struct pt_pickle **out, const uint8_t *buf, size_t len,
		   size_t *used, const struct pt_limits *lim,
		   struct pt_error *err)
{
	return pt_load(out, buf, len, used, lim, NULL, NULL, err);
}

int pt_pickle_load_lean(struct pt_pickle **out, const uint8_t *buf,
			size_t len, size_t *used, const struct pt_limits *lim,
			pt_pickle_reduce_fn reduce, void *ctx,
			struct pt_error *err)
{
	return pt_load(out, buf, len, used, lim, reduce, ctx, err);
}

/* ---- walking the graph ---------------------------------------------- */

int pt_vstack_push(struct pt_vstack *s, struct pt_value *v)
{
	if (!v)
		return 0;
	if (s->n == s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 256;
		struct pt_value **q = realloc(s->v, nc * sizeof(*q));

		if (!q)
			return -ENOMEM;
		s->v = q;
		s->cap = nc;
	}
	s->v[s->n++] = v;
	return 0;
}

static int pt_vstack_push_seq(struct pt_vstack *s, const struct pt_vseq *q)
{
	size_t i;

	for (i = q->n; i-- > 0;)
		if (pt_vstack_push(s, q->v[i]))
			return -ENOMEM;
	return 0;
}

int pt_vstack_push_children(struct pt_vstack *s, const struct pt_value *v)
{
	switch (v->kind) {
	case PT_V_TUPLE:
	case PT_V_LIST:
	case PT_V_SET:
	case PT_V_FROZENSET:
		return pt_vstack_push_seq(s, &v->u.seq);
	case PT_V_DICT:
		return pt_vstack_push_seq(s, &v->u.dict.kv);
	case PT_V_CALL:
	case PT_V_OBJ:
		if (pt_vstack_push_seq(s, pt_call_kv(v)) ||
		    pt_vstack_push_seq(s, pt_call_items(v)) ||
		    pt_vstack_push(s, pt_call_state(v)) ||
		    pt_vstack_push(s, pt_call_kwargs(v)) ||
		    pt_vstack_push(s, v->u.call.args) ||
		    pt_vstack_push(s, v->u.call.callable))
			return -ENOMEM;
		return 0;
	case PT_V_PERSID:
		return pt_vstack_push(s, v->u.pid);
	default:
		return 0;
	}
}

int pt_vstack_push_values(struct pt_vstack *s, const struct pt_value *v)
{
	if (v->kind == PT_V_PERSID)
		return 0;
	return pt_vstack_push_children(s, v);
}

void pt_vstack_free(struct pt_vstack *s)
{
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}
