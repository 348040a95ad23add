/* SPDX-License-Identifier: MIT */
/*
 * torch.c -- what the values of a decoded pickle mean to PyTorch.
 *
 * pt__classify() walks the inert value graph once (iteratively, each node
 * visited once, so a pickle whose references multiply costs its size, not
 * its expansion) and decides how each value appears in the tree: tensors
 * from every torch._utils._rebuild_* form that carries a storage
 * (docs/FORMATS.md, "Tensor rebuild functions"), numpy arrays
 * (docs/FORMATS.md, "numpy arrays in pickles"), mappings, sequences,
 * bytes, names of globals and opaque objects (LAYOUT.md "Values").  Every tensor's byte
 * window is checked against its storage here, so later reads need no
 * checks on untrusted numbers.
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/text.h"
#include "decode/repr.h"
#include "base/rd.h"

/* ranks up to this make a tensor without allocating its dims */
#define PT_SMALL_RANK 8

bool pt__is_global(const struct pt_value *v, const char *module,
		   const char *name)
{
	return v && v->kind == PT_V_GLOBAL &&
	       strcmp(v->u.global.module, module) == 0 &&
	       strcmp(v->u.global.name, name) == 0;
}

static bool module_is(const struct pt_value *g, const char *a, const char *b)
{
	return strcmp(g->u.global.module, a) == 0 ||
	       (b && strcmp(g->u.global.module, b) == 0);
}

static bool starts_with(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

static size_t targs_n(const struct pt_value *args)
{
	if (!args || (args->kind != PT_V_TUPLE && args->kind != PT_V_LIST))
		return 0;
	return args->u.seq.n;
}

static struct pt_value *targ(const struct pt_value *args, size_t i)
{
	return i < targs_n(args) ? args->u.seq.v[i] : NULL;
}

static bool as_int(const struct pt_value *v, int64_t *out)
{
	if (!v)
		return false;
	if (v->kind == PT_V_INT) {
		*out = v->u.i;
		return true;
	}
	if (v->kind == PT_V_BOOL) {
		*out = v->u.b;
		return true;
	}
	return false;
}

static bool is_str(const struct pt_value *v, const char *s)
{
	size_t n = strlen(s);

	return v && v->kind == PT_V_STR && v->u.s.len == n &&
	       memcmp(v->u.s.p, s, n) == 0;
}

/* A tuple of ints (or torch.Size of one, or a list). */
static const struct pt_value *int_seq(const struct pt_value *v)
{
	if (v && (v->kind == PT_V_CALL || v->kind == PT_V_OBJ) &&
	    pt__is_global(v->u.call.callable, "torch", "Size"))
		v = targ(v->u.call.args, 0);
	if (v && (v->kind == PT_V_TUPLE || v->kind == PT_V_LIST))
		return v;
	return NULL;
}

/* ---- tensors ---- */

struct tspec {
	const struct pt_value *size;    /* int sequence */
	const struct pt_value *stride;  /* int sequence or NULL: C order */
	bool fortran;                   /* with stride NULL: F order */
	int64_t offset;
	const struct pt_dtype *dtype;
	struct pt_storage *st;
	bool requires_grad;
	uint8_t kind;
	char byteorder;
	const char *dtype_name;
	const char *note;
	const char *logical;            /* the tensor's own dtype, when the
					 * bytes are stored as another */
	const struct pt_tensor *from;   /* sizes and strides are this
					 * tensor's (size, stride unused) */
};

bool pt__dense_strides(uint32_t rank, const int64_t *shape, bool fortran,
		       int64_t *stride)
{
	uint64_t expect = 1;
	uint32_t i;

	for (i = rank; i-- > 0;) {
		uint32_t k = fortran ? rank - 1 - i : i;

		stride[k] = (int64_t)expect;
		if (shape[k] > 1 &&
		    (!pt_mul_u64(expect, (uint64_t)shape[k], &expect) ||
		     expect > INT64_MAX))
			return false;
	}
	return true;
}

/* The byte range of @t (shape, strides, offset set) inside its storage,
 * and whether it is C-contiguous (docs/FORMATS.md, "A tensor's byte
 * range"). */
static int tensor_range(struct pt_tensor *t, struct pt_error *err)
{
	const struct pt_storage *st = t->st;
	uint64_t es = t->dtype->size, last = (uint64_t)t->offset, hi, expect;
	uint32_t i;

	for (i = 0; i < t->rank; i++) {
		uint64_t span;

		if (!pt_mul_u64((uint64_t)(t->shape[i] - 1), (uint64_t)t->stride[i], &span) ||
		    !pt_add_u64(last, span, &last))
			return pt_fail(err, -EBADMSG, "tensor strides overflow");
	}
	if (!pt_add_u64(last, 1, &hi) || !pt_mul_u64(hi, es, &hi) ||
	    !pt_mul_u64((uint64_t)t->offset, es, &t->byte_lo))
		return pt_fail(err, -EBADMSG, "tensor byte range overflows");
	t->byte_hi = hi;
	if (!t->dtype->packed && hi > st->nbytes)
		return pt_fail(err, -EBADMSG,
			       "tensor of %" PRIu64 " elements at offset %" PRId64
			       " reaches byte %" PRIu64 " of storage '%s', which has %" PRIu64 " bytes",
			       t->numel, t->offset, hi, st->key, st->nbytes);
	if (t->dtype->packed) {
		/* quint4x2 and friends: sizes do not describe bytes; serve
		 * the whole storage opaquely (docs/FORMATS.md, "Packed dtypes") */
		t->byte_lo = 0;
		t->byte_hi = t->nbytes = st->nbytes;
		t->contiguous = true;
		return 0;
	}
	/* C-contiguous: for every dim of size > 1, stride == product of the
	 * sizes after it */
	t->contiguous = true;
	expect = 1;
	for (i = t->rank; i-- > 0;) {
		if (t->shape[i] != 1 && (uint64_t)t->stride[i] != expect)
			t->contiguous = false;
		expect *= (uint64_t)t->shape[i];
	}
	return 0;
}

int pt__tensor_make(struct pt_ckpt *ck, const struct pt_tensor_spec *sp,
		    struct pt_tensor **out, struct pt_error *err)
{
	const struct pt_limits *lim = &ck->opts.limits;
	const uint32_t rank = sp->rank;
	uint64_t numel = 1, es = sp->dtype->size;
	struct pt_tensor *t;
	bool empty = false;
	uint32_t i;

	if (rank > lim->max_rank)
		return pt_fail(err, -EFBIG,
			       "tensor of rank %u exceeds the limit of %u",
			       rank, lim->max_rank);
	if (sp->offset < 0)
		return pt_fail(err, -EBADMSG, "tensor has a negative storage offset");
	/* one allocation: the tensor, then its sizes and strides */
	t = pt__alloc(ck, sizeof(*t) + 2 * (size_t)rank * sizeof(int64_t));
	if (!t)
		return pt_fail(err, -ENOMEM, "out of memory");
	t->shape = (int64_t *)(t + 1);
	t->stride = t->shape + rank;
	t->rank = rank;
	for (i = 0; i < rank; i++) {
		if (sp->shape[i] < 0)
			return pt_fail(err, -EBADMSG,
				       "tensor size %u is not a non-negative integer", i);
		t->shape[i] = sp->shape[i];
		if (sp->shape[i] == 0)
			empty = true;
		else if (!pt_mul_u64(numel, (uint64_t)sp->shape[i], &numel) ||
			 numel > INT64_MAX)
			return pt_fail(err, -EBADMSG, "tensor element count overflows");
	}
	if (empty)
		numel = 0;
	if (sp->stride) {
		for (i = rank; i-- > 0;) {
			if (sp->stride[i] < 0)
				return pt_fail(err, -EBADMSG,
					       "tensor stride %u is not a non-negative integer", i);
			t->stride[i] = sp->stride[i];
		}
	} else if (!pt__dense_strides(rank, t->shape, sp->fortran, t->stride)) {
		return pt_fail(err, -EBADMSG, "tensor element count overflows");
	}
	/* a file size must fit off_t (st_size) */
	if (!pt_mul_u64(numel, es, &t->nbytes) || t->nbytes > INT64_MAX)
		return pt_fail(err, -EBADMSG, "tensor byte count overflows");
	t->numel = numel;
	t->offset = sp->offset;
	t->dtype = sp->dtype;
	t->st = sp->st;
	t->requires_grad = sp->requires_grad;
	t->kind = sp->kind;
	t->byteorder = es == 1 ? '|' : sp->byteorder;
	t->dtype_name = sp->dtype_name ? sp->dtype_name : sp->dtype->name;
	t->note = sp->note;
	t->logical_dtype = sp->logical;
	*out = t;
	if (numel == 0) {
		t->contiguous = true;
		return 0;
	}
	return tensor_range(t, err);
}

/* The integers of sequence @seq (@n of them) into @out; the index of the
 * first that is not a non-negative int, or @n. */
static size_t int_items(const struct pt_value *seq, size_t n, int64_t *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!as_int(seq->u.seq.v[i], &out[i]) || out[i] < 0)
			return i;
	return n;
}

/* A tensor from a pickled spec: its size and stride sequences as plain
 * arrays, then pt__tensor_make(). */
static int make_tensor(struct pt_ckpt *ck, const struct tspec *sp,
		       struct pt_tensor **out, struct pt_error *err)
{
	const struct pt_limits *lim = &ck->opts.limits;
	size_t rank, bad;
	struct pt_tensor_spec ts;
	int64_t *dims, small[2 * PT_SMALL_RANK + 1] = { 0 };
	int rc;

	memset(&ts, 0, sizeof(ts));
	ts.dtype = sp->dtype;
	ts.st = sp->st;
	ts.offset = sp->offset;
	ts.requires_grad = sp->requires_grad;
	ts.kind = sp->kind;
	ts.byteorder = sp->byteorder;
	ts.dtype_name = sp->dtype_name;
	ts.note = sp->note;
	ts.logical = sp->logical;
	if (sp->from) {
		ts.rank = sp->from->rank;
		ts.shape = sp->from->shape;
		ts.stride = sp->from->stride;
		return pt__tensor_make(ck, &ts, out, err);
	}
	rank = sp->size->u.seq.n;
	if (rank > lim->max_rank)
		return pt_fail(err, -EFBIG,
			       "tensor of rank %zu exceeds the limit of %u",
			       rank, lim->max_rank);
	if (sp->stride && sp->stride->u.seq.n != rank)
		return pt_fail(err, -EBADMSG,
			       "tensor has %zu sizes but %zu strides",
			       rank, sp->stride->u.seq.n);
	if (sp->offset < 0)
		return pt_fail(err, -EBADMSG, "tensor has a negative storage offset");
	/* nearly every tensor has a rank of a few: no allocation for it */
	dims = rank <= PT_SMALL_RANK ? small :
	       calloc(2 * rank + 1, sizeof(*dims));
	if (!dims)
		return pt_fail(err, -ENOMEM, "out of memory");
	bad = int_items(sp->size, rank, dims);
	if (bad < rank) {
		rc = pt_fail(err, -EBADMSG,
			     "tensor size %zu is not a non-negative integer", bad);
		goto out;
	}
	/* strides are checked from the last, as they always were */
	bad = sp->stride ? int_items(sp->stride, rank, dims + rank) : rank;
	if (bad < rank) {
		size_t i;

		for (i = rank; i-- > 0;)
			if (!as_int(sp->stride->u.seq.v[i], &dims[rank + i]) ||
			    dims[rank + i] < 0)
				break;
		rc = pt_fail(err, -EBADMSG,
			     "tensor stride %zu is not a non-negative integer", i);
		goto out;
	}
	ts.rank = (uint32_t)rank;
	ts.shape = dims;
	ts.stride = sp->stride ? dims + rank : NULL;
	ts.fortran = sp->fortran;
	rc = pt__tensor_make(ck, &ts, out, err);
out:
	if (dims != small)
		free(dims);
	return rc;
}

static int storage_of(struct pt_ckpt *ck, const struct pt_value *v,
		      struct pt_storage **st, struct pt_error *err)
{
	if (!v || v->kind != PT_V_PERSID)
		return pt_fail(err, -EBADMSG, "tensor storage is not a persistent id");
	if (!ck->fmt->storage)
		return pt_fail(err, -ENOTSUP, "this container has no storages");
	return ck->fmt->storage(ck, v, st, err);
}

static int finish_tensor(struct pt_ckpt *ck, struct pt_value *v,
			 const struct tspec *sp, struct pt_error *err)
{
	struct pt_tensor *t = NULL;
	int rc = make_tensor(ck, sp, &t, err);

	if (rc)
		return rc;
	v->aux = t;
	v->aux16 = PT_C_TENSOR;
	ck->n_tensors++;
	ck->tensor_bytes += t->nbytes;
	return 0;
}

/* _rebuild_tensor, _v2, _v3, _rebuild_qtensor: (storage, offset, size,
 * stride, ...). */
static int rebuild_strided(struct pt_ckpt *ck, const struct pt_value *fn,
			   const struct pt_value *args, struct tspec *sp,
			   struct pt_error *err)
{
	const char *name = fn->u.global.name;
	int rc;

	if (targs_n(args) < 4)
		return pt_fail(err, -EBADMSG, "%s: expected at least 4 arguments", name);
	rc = storage_of(ck, targ(args, 0), &sp->st, err);
	if (rc)
		return rc;
	sp->dtype = sp->st->dtype;
	if (!as_int(targ(args, 1), &sp->offset))
		return pt_fail(err, -EBADMSG, "%s: storage offset is not an integer", name);
	sp->size = int_seq(targ(args, 2));
	sp->stride = int_seq(targ(args, 3));
	if (!sp->size || !sp->stride)
		return pt_fail(err, -EBADMSG, "%s: size or stride is not a tuple", name);
	if (strcmp(name, "_rebuild_qtensor") == 0) {
		int64_t rg;

		if (as_int(targ(args, 5), &rg))
			sp->requires_grad = rg != 0;
	} else if (strcmp(name, "_rebuild_tensor") != 0) {
		int64_t rg;

		if (as_int(targ(args, 4), &rg))
			sp->requires_grad = rg != 0;
	}
	if (strcmp(name, "_rebuild_tensor_v3") == 0) {
		const struct pt_value *d = targ(args, 6);

		if (!d || d->kind != PT_V_GLOBAL ||
		    !(sp->dtype = pt_dtype_from_torch(d->u.global.name)))
			return pt_fail(err, -ENOTSUP,
				       "_rebuild_tensor_v3: unknown dtype %s",
				       d && d->kind == PT_V_GLOBAL ? d->u.global.name : "(not a global)");
	}
	return 0;
}

static int tensor_spec(struct pt_ckpt *ck, const struct pt_value *fn,
		       const struct pt_value *args, const struct pt_value *state,
		       struct tspec *sp, int depth, struct pt_error *err);

/* The tensor value @v (nested inside a parameter or a wrapper). */
static int nested_spec(struct pt_ckpt *ck, const struct pt_value *v,
		       struct tspec *sp, int depth, struct pt_error *err)
{
	int rc;

	if (!v || (v->kind != PT_V_CALL && v->kind != PT_V_OBJ))
		return pt_fail(err, -EBADMSG, "parameter data is not a tensor");
	if (v->aux16 == PT_C_TENSOR && (v->flags & PT_VF_LEAN)) {
		/* classified while loading, its arguments gone: the
		 * tensor made then says what they said */
		const struct pt_tensor *in = v->aux;

		sp->from = in;
		sp->dtype = in->dtype;
		sp->st = in->st;
		sp->offset = in->offset;
		sp->requires_grad = in->requires_grad;
		sp->kind = in->kind;
		sp->byteorder = in->byteorder;
		sp->dtype_name = in->dtype_name;
		sp->note = in->note;
		sp->logical = in->logical_dtype;
		ck->n_tensors--;
		ck->tensor_bytes -= in->nbytes;
		return 0;
	}
	rc = tensor_spec(ck, v->u.call.callable, v->u.call.args,
			 pt_call_state(v), sp, depth + 1, err);
	if (rc == 1)
		return pt_fail(err, -EBADMSG, "parameter data is not a tensor");
	if (rc == 0 && v->aux16 == PT_C_TENSOR) {
		/* the wrapper stands for the inner tensor: count it once */
		const struct pt_tensor *in = v->aux;
		ck->n_tensors--;
		ck->tensor_bytes -= in->nbytes;
	}
	return rc;
}

static int numpy_spec(struct pt_ckpt *ck, const struct pt_value *dtype,
		      const struct pt_value *shape, bool fortran,
		      const struct pt_value *data, struct tspec *sp,
		      struct pt_error *err);

/*
 * Fill @sp for the call fn(*args) [+ BUILD state] when it makes a tensor or
 * an array; return 1 when it does not (a plain object), 0 when it does, or
 * a negative errno.  @depth bounds the nesting of wrappers
 * (parameter -> from_type -> tensor), which is a few levels in real files.
 */
static int tensor_spec(struct pt_ckpt *ck, const struct pt_value *fn,
		       const struct pt_value *args, const struct pt_value *state,
		       struct tspec *sp, int depth, struct pt_error *err)
{
	const char *m, *n;
	int64_t rg;
	int rc;

	if (depth > 8)
		return pt_fail(err, -EBADMSG, "tensor wrappers nested too deeply");
	if (!fn || fn->kind != PT_V_GLOBAL)
		return 1;
	m = fn->u.global.module;
	n = fn->u.global.name;
	/* every maker below lives in a torch or numpy module: the rest (a
	 * state dict's 20,000 backward-hook OrderedDict() calls) leave here */
	if (!starts_with(m, "torch") && !starts_with(m, "numpy"))
		return 1;
	if (starts_with(m, "torch") &&
	    (strcmp(n, "_rebuild_tensor_v2") == 0 ||
	     strcmp(n, "_rebuild_tensor_v3") == 0 ||
	     strcmp(n, "_rebuild_tensor") == 0 ||
	     strcmp(n, "_rebuild_qtensor") == 0))
		return rebuild_strided(ck, fn, args, sp, err);
	if (starts_with(m, "torch") &&
	    (strcmp(n, "_rebuild_parameter") == 0 ||
	     strcmp(n, "_rebuild_parameter_with_state") == 0)) {
		rc = nested_spec(ck, targ(args, 0), sp, depth, err);
		if (rc)
			return rc;
		sp->kind = PT_TK_PARAMETER;
		if (as_int(targ(args, 1), &rg))
			sp->requires_grad = rg != 0;
		return 0;
	}
	if (pt__is_global(fn, "torch.nn.parameter", "Parameter") &&
	    targs_n(args) >= 1) {
		rc = nested_spec(ck, targ(args, 0), sp, depth, err);
		if (rc)
			return rc;
		sp->kind = PT_TK_PARAMETER;
		if (as_int(targ(args, 1), &rg))
			sp->requires_grad = rg != 0;
		else
			sp->requires_grad = true;
		return 0;
	}
	if (starts_with(m, "torch") &&
	    (strcmp(n, "_rebuild_from_type_v2") == 0 ||
	     strcmp(n, "_rebuild_from_type") == 0)) {
		const struct pt_value *inner = targ(args, 2);

		rc = tensor_spec(ck, targ(args, 0), inner, NULL, sp, depth + 1, err);
		if (rc)
			return rc;
		if (pt__is_global(targ(args, 1), "torch.nn.parameter", "Parameter"))
			sp->kind = PT_TK_PARAMETER;
		return 0;
	}
	if (starts_with(m, "torch") &&
	    (strcmp(n, "_rebuild_device_tensor_from_numpy") == 0 ||
	     strcmp(n, "_rebuild_xla_tensor") == 0 ||
	     strcmp(n, "_rebuild_device_tensor_from_cpu_tensor") == 0)) {
		const struct pt_value *d = targ(args, 1);

		rc = nested_spec(ck, targ(args, 0), sp, depth, err);
		if (rc)
			return rc;
		sp->kind = PT_TK_TENSOR;
		if (d && d->kind == PT_V_GLOBAL) {
			const struct pt_dtype *dt =
				pt_dtype_from_torch(d->u.global.name);
			if (dt && dt != sp->dtype) {
				sp->note = "the bytes are stored as the dtype shown; the tensor's own dtype is logical_dtype";
				sp->logical = dt->name;
			}
			if (dt)
				sp->dtype_name = sp->dtype->name;
		}
		if (as_int(targ(args, 3), &rg))
			sp->requires_grad = rg != 0;
		return 0;
	}
	if ((module_is(fn, "numpy.core.multiarray", "numpy._core.multiarray")) &&
	    strcmp(n, "_reconstruct") == 0) {
		/* BUILD state: (version, shape, dtype, is_fortran, rawdata) */
		size_t k = targs_n(state);
		int64_t fortran = 0;

		if (!state || k < 5)
			return 1;
		as_int(targ(state, k - 2), &fortran);
		return numpy_spec(ck, targ(state, k - 3), targ(state, k - 4),
				  fortran != 0, targ(state, k - 1), sp, err);
	}
	if (module_is(fn, "numpy.core.numeric", "numpy._core.numeric") &&
	    strcmp(n, "_frombuffer") == 0) {
		/* (buffer, dtype, shape, order) */
		return numpy_spec(ck, targ(args, 1), targ(args, 2),
				  is_str(targ(args, 3), "F"), targ(args, 0),
				  sp, err);
	}
	if (module_is(fn, "numpy.core.multiarray", "numpy._core.multiarray") &&
	    strcmp(n, "scalar") == 0 && targs_n(args) == 2) {
		static const struct pt_value empty = { .kind = PT_V_TUPLE };

		return numpy_spec(ck, targ(args, 0), &empty, false,
				  targ(args, 1), sp, err);
	}
	/* legacy tensor classes: torch.FloatTensor() + BUILD (storage,
	 * offset, size, stride) */
	if ((strcmp(m, "torch") == 0 || strcmp(m, "torch.cuda") == 0) &&
	    strlen(n) > 6 && strcmp(n + strlen(n) - 6, "Tensor") == 0 &&
	    targs_n(state) >= 4 && targ(state, 0)->kind == PT_V_PERSID) {
		static const struct pt_value v2 = {
			.kind = PT_V_GLOBAL,
			.u.global = { "torch._utils", "_rebuild_tensor" },
		};
		return rebuild_strided(ck, &v2, state, sp, err);
	}
	return 1;
}

/* The bytes behind a numpy array's data (BINBYTES, bytearray, or
 * _codecs.encode text decoded to bytes by classification). */
static int array_bytes(struct pt_ckpt *ck, const struct pt_value *data,
		       struct pt_storage **out, struct pt_error *err)
{
	struct pt_storage *st;
	const uint8_t *p;
	size_t len;
	uint64_t file_off = UINT64_MAX;
	int i;

	if (!data)
		return 1;
	if (data->kind == PT_V_BYTES || data->kind == PT_V_BYTEARRAY) {
		p = data->u.s.p;
		len = data->u.s.len;
		if (data->u.s.in_off != UINT64_MAX)
			for (i = 0; i < ck->n_pickles; i++) {
				const struct pt_pickled *pd = &ck->pickles[i];
				if (pd->buf && p >= pd->buf &&
				    p < pd->buf + pd->len &&
				    pd->file_off != UINT64_MAX)
					file_off = pd->file_off +
						   (uint64_t)(p - pd->buf);
			}
	} else if (pt__vclass(data) == PT_C_BYTES) {
		const struct pt_bytes *b = data->aux;
		p = b->p;
		len = b->len;
	} else {
		return 1; /* object arrays and the like */
	}
	st = calloc(1, sizeof(*st));
	if (!st || !pt__own(ck, st))
		return pt_fail(err, -ENOMEM, "out of memory");
	st->key = "(pickle)";
	st->nbytes = len;
	st->kind = file_off != UINT64_MAX ? PT_ST_FILE : PT_ST_MEM;
	st->file_off = file_off;
	st->mem = p;
	st->dtype = pt_dtype_untyped();
	*out = st;
	return 0;
}

static int numpy_spec(struct pt_ckpt *ck, const struct pt_value *dtype,
		      const struct pt_value *shape, bool fortran,
		      const struct pt_value *data, struct tspec *sp,
		      struct pt_error *err)
{
	const struct pt_value *code, *dstate;
	const struct pt_dtype *dt;
	int rc;

	/* dtype: numpy.dtype REDUCE ('f4', False, True) + BUILD
	 * (3, '<', ...) */
	if (!dtype || (dtype->kind != PT_V_CALL && dtype->kind != PT_V_OBJ))
		return 1;
	code = targ(dtype->u.call.args, 0);
	if (!code || code->kind != PT_V_STR)
		return 1;
	dt = pt_dtype_from_numpy((const char *)code->u.s.p, code->u.s.len);
	if (!dt || !dt->numpy)
		return 1;
	shape = int_seq(shape);
	if (!shape)
		return 1;
	rc = array_bytes(ck, data, &sp->st, err);
	if (rc)
		return rc;
	sp->dtype = dt;
	sp->dtype_name = dt->numpy;
	sp->kind = PT_TK_NDARRAY;
	sp->size = shape;
	sp->stride = NULL;
	sp->fortran = fortran;
	sp->offset = 0;
	sp->byteorder = '<';
	dstate = pt_call_state(dtype);
	if (targs_n(dstate) >= 2) {
		const struct pt_value *bo = targ(dstate, 1);
		if (bo && bo->kind == PT_V_STR && bo->u.s.len == 1 &&
		    bo->u.s.p[0] == '>')
			sp->byteorder = '>';
	}
	if (sp->st->nbytes != 0) {
		/* the data must hold exactly numel * itemsize bytes */
		uint64_t numel = 1, i, need;
		for (i = 0; i < shape->u.seq.n; i++) {
			int64_t d;
			if (!as_int(shape->u.seq.v[i], &d) || d < 0 ||
			    !pt_mul_u64(numel, (uint64_t)d, &numel))
				return pt_fail(err, -EBADMSG, "numpy array has a bad shape");
		}
		if (!pt_mul_u64(numel, dt->size, &need) || need > sp->st->nbytes)
			return pt_fail(err, -EBADMSG,
				       "numpy array needs %" PRIu64 " bytes but has %" PRIu64,
				       need, sp->st->nbytes);
	}
	return 0;
}

/* ---- other values ---- */

/* Is @g one of the globals @names[0..@n) (module, name)? */
static bool is_global_of(const struct pt_value *g,
			 const char *const (*names)[2], size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (pt__is_global(g, names[i][0], names[i][1]))
			return true;
	return false;
}

static bool is_mapping_class(const struct pt_value *g)
{
	static const char *const names[][2] = {
		{ "collections", "OrderedDict" },
		{ "collections", "defaultdict" },
		{ "collections", "Counter" },
		{ "builtins", "dict" },
		{ "__builtin__", "dict" },
		{ "torch.nn.modules.container", "ParameterDict" },
	};

	return is_global_of(g, names, sizeof(names) / sizeof(names[0]));
}

static bool is_seq_class(const struct pt_value *g)
{
	static const char *const names[][2] = {
		{ "torch", "Size" },          { "builtins", "set" },
		{ "builtins", "frozenset" },  { "builtins", "list" },
		{ "builtins", "tuple" },      { "__builtin__", "set" },
		{ "__builtin__", "frozenset" }, { "__builtin__", "list" },
		{ "__builtin__", "tuple" },
	};

	return is_global_of(g, names, sizeof(names) / sizeof(names[0]));
}

/* _codecs.encode(str, 'latin1'): each code point of the str is a byte. */
static int latin1_bytes(struct pt_ckpt *ck, struct pt_value *v,
			const struct pt_value *s, struct pt_error *err)
{
	struct pt_bytes *b;
	uint8_t *q;
	size_t n = 0;

	b = calloc(1, sizeof(*b));
	q = malloc(s->u.s.len + 1);
	if (!b || !pt__own(ck, b) || !q || !pt__own(ck, q))
		return pt_fail(err, -ENOMEM, "out of memory");
	if (pt_latin1_encode(s->u.s.p, s->u.s.len, q, &n))
		return pt_fail(err, -EBADMSG,
			       "_codecs.encode: text is not latin-1");
	b->p = q;
	b->len = n;
	v->aux = b;
	v->aux16 = PT_C_BYTES;
	return 0;
}

static int set_text(struct pt_ckpt *ck, struct pt_value *v, struct pt_buf *b,
		    struct pt_error *err)
{
	char *s;

	if (b->oom) {
		pt_buf_free(b);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	s = pt_buf_take(b, NULL);
	if (!s || !pt__own(ck, s))
		return pt_fail(err, -ENOMEM, "out of memory");
	v->aux = s;
	v->aux16 = PT_C_TEXT;
	return 0;
}

static int classify_call(struct pt_ckpt *ck, struct pt_value *v,
			 struct pt_error *err)
{
	const struct pt_value *fn = v->u.call.callable;
	const struct pt_value *args = v->u.call.args;
	struct tspec sp;
	struct pt_buf b;
	int rc;

	memset(&sp, 0, sizeof(sp));
	sp.byteorder = ck->byteorder;
	rc = tensor_spec(ck, fn, args, pt_call_state(v), &sp, 0, err);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return finish_tensor(ck, v, &sp, err);
	if (is_mapping_class(fn)) {
		v->aux16 = PT_C_MAP;
		return 0;
	}
	if (is_seq_class(fn)) {
		v->aux16 = PT_C_SEQ;
		return 0;
	}
	pt_buf_init(&b);
	if (pt__is_global(fn, "torch", "device")) {
		const struct pt_value *a0 = targ(args, 0);
		int64_t idx;

		if (a0 && a0->kind == PT_V_STR)
			pt_buf_add(&b, a0->u.s.p, a0->u.s.len);
		if (as_int(targ(args, 1), &idx))
			pt_buf_printf(&b, ":%lld", (long long)idx);
		pt_buf_putc(&b, '\n');
		return set_text(ck, v, &b, err);
	}
	if ((pt__is_global(fn, "builtins", "complex") ||
	     pt__is_global(fn, "__builtin__", "complex")) &&
	    targs_n(args) == 2 && targ(args, 0)->kind == PT_V_FLOAT &&
	    targ(args, 1)->kind == PT_V_FLOAT) {
		double re = targ(args, 0)->u.f, im = targ(args, 1)->u.f;

		pt_buf_putc(&b, '(');
		if (re != 0 || signbit(re)) {
			pt_repr_float(&b, re);
			if (!signbit(im) || isnan(im))
				pt_buf_putc(&b, '+');
		}
		pt_repr_float(&b, im);
		pt_buf_puts(&b, "j)\n");
		return set_text(ck, v, &b, err);
	}
	if (pt__is_global(fn, "_codecs", "encode") && targs_n(args) >= 1 &&
	    targ(args, 0)->kind == PT_V_STR)
		return latin1_bytes(ck, v, targ(args, 0), err);
	if ((pt__is_global(fn, "builtins", "bytes") ||
	     pt__is_global(fn, "__builtin__", "bytes") ||
	     pt__is_global(fn, "builtins", "bytearray") ||
	     pt__is_global(fn, "__builtin__", "bytearray")) &&
	    targs_n(args) <= 1) {
		const struct pt_value *a0 = targ(args, 0);
		struct pt_bytes *bb;

		if (!a0) {
			bb = calloc(1, sizeof(*bb));
			if (!bb || !pt__own(ck, bb))
				return pt_fail(err, -ENOMEM, "out of memory");
			v->aux = bb;
			v->aux16 = PT_C_BYTES;
			return 0;
		}
		if (a0->kind == PT_V_BYTES || a0->kind == PT_V_BYTEARRAY) {
			bb = calloc(1, sizeof(*bb));
			if (!bb || !pt__own(ck, bb))
				return pt_fail(err, -ENOMEM, "out of memory");
			bb->p = a0->u.s.p;
			bb->len = a0->u.s.len;
			v->aux = bb;
			v->aux16 = PT_C_BYTES;
			return 0;
		}
		if (a0->kind == PT_V_CALL &&
		    pt__is_global(a0->u.call.callable, "_codecs", "encode") &&
		    targs_n(a0->u.call.args) >= 1 &&
		    targ(a0->u.call.args, 0)->kind == PT_V_STR)
			return latin1_bytes(ck, v, targ(a0->u.call.args, 0), err);
	}
	pt_buf_free(&b);
	v->aux16 = PT_C_OBJECT;
	return 0;
}

/* Storages pickled on their own (torch.save(storage)). */
static int classify_persid(struct pt_ckpt *ck, struct pt_value *v,
			   struct pt_error *err)
{
	struct pt_value size_tuple = { .kind = PT_V_TUPLE };
	struct pt_value dim = { .kind = PT_V_INT };
	struct pt_value *dims[1] = { &dim };
	struct tspec sp;
	int rc;

	memset(&sp, 0, sizeof(sp));
	rc = storage_of(ck, v, &sp.st, err);
	if (rc)
		return rc;
	sp.dtype = sp.st->dtype;
	dim.u.i = (int64_t)(sp.st->nbytes / sp.dtype->size);
	size_tuple.u.seq.v = dims;
	size_tuple.u.seq.n = 1;
	sp.size = &size_tuple;
	sp.kind = PT_TK_STORAGE;
	sp.byteorder = ck->byteorder;
	rc = finish_tensor(ck, v, &sp, err);
	if (rc == 0) {
		/* most persistent ids are arguments of a tensor, counted
		 * there; only a storage saved on its own is a file */
		ck->n_tensors--;
		ck->tensor_bytes -= ((struct pt_tensor *)v->aux)->nbytes;
	}
	return rc;
}

static int classify_one(struct pt_ckpt *ck, struct pt_value *v,
			struct pt_error *err)
{
	struct pt_buf b;

	switch (v->kind) {
	case PT_V_NONE:
	case PT_V_BOOL:
	case PT_V_INT:
	case PT_V_BIGINT:
	case PT_V_FLOAT:
	case PT_V_STR:
		v->aux16 = PT_C_SCALAR;
		return 0;
	case PT_V_BYTES:
	case PT_V_BYTEARRAY: {
		struct pt_bytes *bb = pt__alloc(ck, sizeof(*bb));
		if (!bb)
			return pt_fail(err, -ENOMEM, "out of memory");
		bb->p = v->u.s.p;
		bb->len = v->u.s.len;
		v->aux = bb;
		v->aux16 = PT_C_BYTES;
		return 0;
	}
	case PT_V_TUPLE:
	case PT_V_LIST:
	case PT_V_SET:
	case PT_V_FROZENSET:
		v->aux16 = PT_C_SEQ;
		return 0;
	case PT_V_DICT:
		v->aux16 = PT_C_MAP;
		return 0;
	case PT_V_GLOBAL:
		pt__note_global(ck, v);
		pt_buf_init(&b);
		pt_buf_printf(&b, "%s.%s\n", v->u.global.module,
			      v->u.global.name);
		return set_text(ck, v, &b, err);
	case PT_V_PERSID: {
		/* the pid tuple is not walked: classify (and so name in the
		 * summary) its storage class global here */
		const struct pt_value *pid = v->u.pid;
		struct pt_value *g = NULL;
		int rc;

		if (pid && pid->kind == PT_V_TUPLE && pid->u.seq.n >= 2)
			g = pid->u.seq.v[1];      /* ('storage', class, ...) */
		else if (pid && pid->kind == PT_V_CALL)
			g = pid->u.call.callable; /* _load_from_bytes(...) */
		if (g && g->kind == PT_V_GLOBAL && g->aux16 == PT_C_UNSET) {
			rc = classify_one(ck, g, err);
			if (rc)
				return rc;
		}
		return classify_persid(ck, v, err);
	}
	case PT_V_CALL:
	case PT_V_OBJ:
		return classify_call(ck, v, err);
	}
	v->aux16 = PT_C_OBJECT;
	return 0;
}

enum pt_vclass pt__vclass(const struct pt_value *v)
{
	return (enum pt_vclass)v->aux16;
}

/*
 * The persistent id a strided rebuild (_rebuild_tensor, _v2, _v3,
 * _rebuild_qtensor with its 4 arguments) takes as its storage, when it is
 * a ('storage', ...) tuple not classified yet and the argument tuple will
 * be walked (so the id's mark is visited and cleared); else NULL.
 * rebuild_strided() resolves such an id itself, so as an argument it needs
 * no tensor of its own (a state dict's 20,000 ids each had one that
 * nothing shows).
 */
static struct pt_value *rebuild_pid(const struct pt_value *v)
{
	const struct pt_value *fn;
	struct pt_value *a0;
	const char *n;

	if (v->kind != PT_V_CALL && v->kind != PT_V_OBJ)
		return NULL;
	fn = v->u.call.callable;
	if (!fn || fn->kind != PT_V_GLOBAL ||
	    !starts_with(fn->u.global.module, "torch") ||
	    targs_n(v->u.call.args) < 4 ||
	    v->u.call.args->aux16 != PT_C_UNSET)
		return NULL;
	n = fn->u.global.name;
	if (strcmp(n, "_rebuild_tensor_v2") != 0 &&
	    strcmp(n, "_rebuild_tensor_v3") != 0 &&
	    strcmp(n, "_rebuild_tensor") != 0 &&
	    strcmp(n, "_rebuild_qtensor") != 0)
		return NULL;
	a0 = targ(v->u.call.args, 0);
	if (a0->kind != PT_V_PERSID || a0->aux16 != PT_C_UNSET ||
	    !a0->u.pid || a0->u.pid->kind != PT_V_TUPLE)
		return NULL;
	return a0;
}

/*
 * The walk's visit of a persistent id pushed as a strided rebuild's
 * storage (marked PT_C_ARGPID by the walk): what classify_one() did for it
 * in the same place (its storage class global named in the summary, its
 * storage resolved, so storages keep their order and errors their text),
 * but no tensor.  It is unmarked: reached again from elsewhere, it is
 * classified as a value of its own.
 */
static int visit_arg_pid(struct pt_ckpt *ck, struct pt_value *v,
			 struct pt_error *err)
{
	const struct pt_value *pid = v->u.pid;
	struct pt_value *g = pid->u.seq.n >= 2 ? pid->u.seq.v[1] : NULL;
	struct pt_storage *st;
	int rc;

	v->aux16 = PT_C_UNSET;
	if (g && g->kind == PT_V_GLOBAL && g->aux16 == PT_C_UNSET) {
		rc = classify_one(ck, g, err);
		if (rc)
			return rc;
	}
	return storage_of(ck, v, &st, err);
}

/*
 * Depth-first over the graph with an explicit stack.  Arguments are
 * classified before the call that uses them only where it matters (bytes
 * for numpy data, handled inside numpy_spec through pt__vclass on an
 * already classified node), so children are pushed first and their parent
 * revisited after them.
 */
int pt__classify(struct pt_ckpt *ck, struct pt_error *err)
{
	return pt__classify_value(ck, ck->root, err);
}

/* The walk, on stack @s (empty, kept for the next walk). */
static int classify_walk(struct pt_ckpt *ck, struct pt_value *root,
			 struct pt_vstack *s, struct pt_error *err)
{
	int rc = 0;

	if (pt_vstack_push(s, root))
		return pt_fail(err, -ENOMEM, "out of memory");
	while (s->n > 0) {
		struct pt_value *v = s->v[s->n - 1];

		if (v->aux16 == PT_C_ARGPID) {
			s->n--;
			rc = visit_arg_pid(ck, v, err);
			if (rc)
				break;
			continue;
		}
		if (v->aux16 != PT_C_UNSET && v->aux16 != PT_C_BUSY) {
			s->n--;
			continue;
		}
		if (v->aux16 == PT_C_UNSET) {
			/* first visit: children first */
			struct pt_value *pid = rebuild_pid(v);

			v->aux16 = PT_C_BUSY;
			if (pid)
				pid->aux16 = PT_C_ARGPID;
			if (pt_vstack_push_values(s, v)) {
				rc = pt_fail(err, -ENOMEM, "out of memory");
				break;
			}
			continue;
		}
		/* second visit: children are done */
		s->n--;
		v->aux16 = PT_C_UNSET;
		rc = classify_one(ck, v, err);
		if (rc)
			break;
	}
	s->n = 0;
	return rc;
}

int pt__classify_value(struct pt_ckpt *ck, struct pt_value *root,
		       struct pt_error *err)
{
	struct pt_vstack st = { 0 };
	int rc = classify_walk(ck, root, &st, err);

	pt_vstack_free(&st);
	return rc;
}

/*
 * pt_pickle_load_lean()'s callback for torch.save pickles: a strided
 * rebuild whose storage is a ('storage', ...) persistent id is classified
 * as soon as REDUCE makes it (its storage resolved, its tensor made), so
 * the loader can give back the ~10 nodes of its arguments.  Classifying
 * it here or in the walk after the load gives the same tensor: nothing
 * of it depends on where the call is reached from.
 */
int pt__classify_reduce(void *ctx, struct pt_value *v, struct pt_error *err)
{
	struct pt_ckpt *ck = ctx;
	int rc;

	if (v->aux16 != PT_C_UNSET || !rebuild_pid(v))
		return 0;
	rc = classify_walk(ck, v, &ck->lean_stack, err);
	if (rc)
		return rc;
	return v->aux16 == PT_C_TENSOR;
}

int pt__tensor_new(struct pt_ckpt *ck, const struct pt_dtype *dtype,
		   struct pt_storage *st, uint32_t rank, const int64_t *shape,
		   const int64_t *stride, int64_t offset, bool requires_grad,
		   struct pt_tensor **out, struct pt_error *err)
{
	struct pt_tensor_spec sp = {
		.dtype = dtype,
		.st = st,
		.rank = rank,
		.shape = shape,
		.stride = stride,
		.offset = offset,
		.requires_grad = requires_grad,
		.kind = PT_TK_TENSOR,
		.byteorder = ck->byteorder,
	};
	int rc = pt__tensor_make(ck, &sp, out, err);

	if (rc)
		return rc;
	ck->n_tensors++;
	ck->tensor_bytes += (*out)->nbytes;
	return 0;
}

/* ---- the .json of a tensor ---- */

static const char *const kind_names[] = { "tensor", "parameter", "ndarray",
					  "storage" };

void pt__tensor_json(struct pt_ckpt *ck, const struct pt_tensor *t,
		     struct pt_buf *out)
{
	const struct pt_storage *st = t->st;

	/* no printf: this runs for every sidecar listed or read */
	pt_buf_puts(out, "{\"dtype\": \"");
	pt_buf_puts(out, t->dtype_name);
	pt_buf_puts(out, "\", \"shape\": ");
	pt_json_ints(out, t->shape, t->rank);
	pt_buf_puts(out, ", \"stride\": ");
	pt_json_ints(out, t->stride, t->rank);
	pt_buf_puts(out, ", \"storage_offset\": ");
	pt_buf_put_i64(out, t->kind == PT_TK_NDARRAY ? 0 : t->offset);
	pt_buf_puts(out, ", \"nbytes\": ");
	pt_buf_put_u64(out, t->nbytes);
	pt_buf_puts(out, ", \"numel\": ");
	pt_buf_put_u64(out, t->numel);
	pt_buf_puts(out, ", \"kind\": \"");
	pt_buf_puts(out, kind_names[t->kind]);
	pt_buf_puts(out, t->requires_grad ? "\", \"requires_grad\": true" :
					  "\", \"requires_grad\": false");
	pt_buf_puts(out, t->contiguous ? ", \"contiguous\": true" :
				       ", \"contiguous\": false");
	pt_buf_puts(out, t->byteorder == '>' ? ", \"byteorder\": \"big\"" :
			 t->byteorder == '|' ? ", \"byteorder\": \"not applicable\"" :
					       ", \"byteorder\": \"little\"");
	if (st->entry) {
		pt_buf_puts(out, ", \"storage_key\": \"");
		pt_json_str(out, (const uint8_t *)st->key, strlen(st->key));
		pt_buf_puts(out, "\", \"storage_record\": \"");
		pt_json_str(out, (const uint8_t *)st->entry->name,
				st->entry->name_len);
		pt_buf_puts(out, "\", \"storage_nbytes\": ");
		pt_buf_put_u64(out, st->nbytes);
	}
	if (st->location) {
		pt_buf_puts(out, ", \"device\": \"");
		pt_json_str(out, (const uint8_t *)st->location,
				strlen(st->location));
		pt_buf_putc(out, '"');
	}
	if (st->home) {
		/* the shard that holds it; file_offset is in that file */
		pt_buf_puts(out, ", \"file\": \"");
		pt_json_str(out, (const uint8_t *)st->home->path,
				strlen(st->home->path));
		pt_buf_putc(out, '"');
	}
	if (st->kind == PT_ST_FILE && t->contiguous) {
		pt_buf_puts(out, ", \"file_offset\": ");
		pt_buf_put_u64(out, st->file_off + t->byte_lo);
	}
	pt_buf_puts(out, st->kind == PT_ST_FILE && t->contiguous ?
		    ", \"zero_copy\": true" : ", \"zero_copy\": false");
	if (t->logical_dtype)
		pt_buf_printf(out, ", \"logical_dtype\": \"%s\"", t->logical_dtype);
	if (t->note) {
		pt_buf_puts(out, ", \"note\": \"");
		pt_json_str(out, (const uint8_t *)t->note, strlen(t->note));
		pt_buf_putc(out, '"');
	}
	(void)ck;
	pt_buf_puts(out, "}\n");
}
