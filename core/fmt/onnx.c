/* SPDX-License-Identifier: MIT */
/*
 * onnx.c -- ONNX models (docs/FORMATS.md, ONNX).
 *
 * A .onnx file is one protobuf ModelProto.  Its weights are the graph's
 * initializers (TensorProto: name, dims, data_type, and the bytes in
 * raw_data, in a typed repeated field, or in a file beside the model),
 * the tensors of Constant nodes and other tensor attributes, sparse
 * initializers, and the initializers of the subgraphs of If/Loop/Scan
 * nodes.  The message is read in place with decode/pb.h: nothing but the
 * small fields is loaded, and a tensor whose bytes lie in the file as they
 * are in memory (raw_data, packed float_data or double_data, external
 * data) is a PT_ST_FILE storage served from there, writable in place: in
 * the model itself, or in its data file beside a local model (a commit
 * writes every file it touches together: ox_commit()).  Varint fields
 * (int32_data holding int8 ... bfloat16 values, int64_data, uint64_data)
 * are decoded at open into the tensor's real element type and are
 * read-only.
 *
 * The tree: initializers at the root under their names, a subgraph's
 * under NODE/ATTRIBUTE/, a sparse initializer as NAME/values and
 * NAME/indices; Constant nodes' tensors under /.ptfs/constants/NODE (other
 * nodes' tensor attributes under /.ptfs/constants/NODE/ATTRIBUTE), the
 * model's fields in /.ptfs/metadata.json and its nodes in
 * /.ptfs/graph.txt.
 */
#include "ckpt/ckpt_i.h"
#include "decode/pb.h"
#include "fmt/fmt.h"
#include "io/lazy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define OX_MAX_DEPTH 100                /* protobuf's own default */
#define OX_MAX_NAME (64u << 10)         /* a name, a key, a location */
#define OX_MAX_TEXT (16u << 20)         /* a doc string, a metadata value */
#define OX_MAX_IR 64                    /* ir_version a probe accepts */

/* TensorProto's data fields */
enum {
	F_FLOAT = 4, F_INT32 = 5, F_STRING = 6, F_INT64 = 7, F_DOUBLE = 10,
	F_UINT64 = 11,
};

static const struct ox_type {
	const char *onnx;               /* TensorProto.DataType name */
	const char *torch;              /* dtype.c name; NULL: not shown */
	unsigned size;                  /* bytes per element */
	unsigned field;                 /* the typed field it is kept in */
	unsigned per;                   /* values of that field per element */
} ox_types[] = {
	[1] = { "FLOAT", "float32", 4, F_FLOAT, 1 },
	[2] = { "UINT8", "uint8", 1, F_INT32, 1 },
	[3] = { "INT8", "int8", 1, F_INT32, 1 },
	[4] = { "UINT16", "uint16", 2, F_INT32, 1 },
	[5] = { "INT16", "int16", 2, F_INT32, 1 },
	[6] = { "INT32", "int32", 4, F_INT32, 1 },
	[7] = { "INT64", "int64", 8, F_INT64, 1 },
	[8] = { "STRING", NULL, 0, F_STRING, 1 },
	[9] = { "BOOL", "bool", 1, F_INT32, 1 },
	[10] = { "FLOAT16", "float16", 2, F_INT32, 1 },
	[11] = { "DOUBLE", "float64", 8, F_DOUBLE, 1 },
	[12] = { "UINT32", "uint32", 4, F_UINT64, 1 },
	[13] = { "UINT64", "uint64", 8, F_UINT64, 1 },
	[14] = { "COMPLEX64", "complex64", 8, F_FLOAT, 2 },
	[15] = { "COMPLEX128", "complex128", 16, F_DOUBLE, 2 },
	[16] = { "BFLOAT16", "bfloat16", 2, F_INT32, 1 },
	[17] = { "FLOAT8E4M3FN", "float8_e4m3fn", 1, F_INT32, 1 },
	[18] = { "FLOAT8E4M3FNUZ", "float8_e4m3fnuz", 1, F_INT32, 1 },
	[19] = { "FLOAT8E5M2", "float8_e5m2", 1, F_INT32, 1 },
	[20] = { "FLOAT8E5M2FNUZ", "float8_e5m2fnuz", 1, F_INT32, 1 },
	[21] = { "UINT4", NULL, 0, F_INT32, 1 },
	[22] = { "INT4", NULL, 0, F_INT32, 1 },
	[23] = { "FLOAT4E2M1", NULL, 0, F_INT32, 1 },
};

#define OX_NTYPES (sizeof(ox_types) / sizeof(ox_types[0]))

/* One file beside the model that external data lives in. */
struct ox_ext {
	char *location;
	struct pt_ckpt *home;
	bool lazy;                      /* opened on first read (a remote
					 * model): its size is what the
					 * tensors need */
};

/* ck->fmt_state */
struct ox_state {
	struct ox_ext *ext;
	size_t n_ext, cap_ext;
};

/* A directory being filled: its entries in file order. */
struct ox_ent {
	const char *name;
	struct pt_value *val;
};

struct ox_list {
	struct ox_ent *v;
	size_t n, cap;
};

/* The open's working state. */
struct ox {
	struct pt_ckpt *ck;
	struct pt_pb_src s;
	struct pt_error *err;
	struct ox_state *st;
	struct ox_list consts;          /* /.ptfs/constants */
	struct pt_buf graph;            /* /.ptfs/graph.txt */
	uint64_t n_keys;                /* storage keys handed out */
	uint64_t in_place, decoded, external, skipped;
};

/* What pass one of a TensorProto found. */
struct ox_tp {
	char *name;                     /* owned by ck, or NULL */
	int64_t *dims;                  /* max_rank entries (malloc()ed) */
	uint32_t rank;
	uint64_t data_type;             /* 0 (UNDEFINED) when absent */
	struct pt_pb_field raw;
	bool has_raw;
	unsigned n_typed[16];           /* occurrences of typed field i */
	uint64_t typed_bound[16];       /* values they can hold at most */
	struct pt_pb_field typed_last[16];
	uint64_t location_kind;         /* data_location: 1 EXTERNAL */
	char *ext_location;             /* malloc()ed */
	uint64_t ext_offset, ext_length;
	bool has_ext_length;
};

/* ---- small helpers ---- */

static int ox_oom(struct ox *ox)
{
	return pt_fail(ox->err, -ENOMEM, "out of memory");
}

/* A string field kept until close. */
static int ox_str(struct ox *ox, const struct pt_pb_field *f, size_t cap,
		  const char *what, char **out)
{
	int rc = pt_pb_dup(&ox->s, f, cap, what, out);

	if (rc)
		return rc;
	if (!pt__own(ox->ck, *out)) {
		*out = NULL;
		return ox_oom(ox);
	}
	return 0;
}

/* A printf()ed string kept until close, or NULL. */
static char *ox_printf(struct ox *ox, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static char *ox_printf(struct ox *ox, const char *fmt, ...)
{
	va_list ap;
	char *p;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&p, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	return pt__own(ox->ck, p);
}

static int ox_add(struct ox *ox, struct ox_list *l, const char *name,
		  struct pt_value *val)
{
	const struct pt_limits *lim = &ox->ck->opts.limits;

	if (l->n >= lim->max_dir_entries)
		return pt_fail(ox->err, -EFBIG,
			       "ONNX model: more than %" PRIu64 " entries in one directory",
			       lim->max_dir_entries);
	if (!pt_grow((void **)&l->v, &l->cap, l->n, sizeof(*l->v)))
		return ox_oom(ox);
	l->v[l->n].name = name;
	l->v[l->n].val = val;
	l->n++;
	return 0;
}

/* The directory of @l's entries (@l emptied), or NULL when out of
 * memory. */
static struct pt_value *ox_dict(struct ox *ox, struct ox_list *l)
{
	struct pt_value *d = pt__value_dict(ox->ck, l->n);
	size_t i;

	for (i = 0; d && i < l->n; i++)
		pt__value_dict_set(d, i, (const uint8_t *)l->v[i].name,
				   strlen(l->v[i].name), l->v[i].val);
	free(l->v);
	memset(l, 0, sizeof(*l));
	return d;
}

/* ---- tensors ---- */

/* A packed or single varint field: the dims. */
static int ox_dims(struct ox *ox, struct pt_pb *m, const struct pt_pb_field *f,
		   struct ox_tp *tp)
{
	uint32_t max = ox->ck->opts.limits.max_rank;
	struct pt_pb packed;
	uint64_t v;
	int rc = 1;

	if (f->wire == PT_PB_VARINT) {
		v = f->v;
	} else {
		rc = pt_pb_sub(m, f, &packed);
		if (rc)
			return rc;
		rc = pt_pb_varint(&packed, &v);
	}
	while (rc == 1) {
		if (tp->rank >= max)
			return pt_fail(ox->err, -EFBIG,
				       "ONNX model: tensor '%s': more than %u dimensions",
				       tp->name ? tp->name : "", max);
		if ((int64_t)v < 0)
			return pt_fail(ox->err, -EBADMSG,
				       "ONNX model: tensor '%s': dimension %u is negative (%" PRId64 ")",
				       tp->name ? tp->name : "", tp->rank, (int64_t)v);
		tp->dims[tp->rank++] = (int64_t)v;
		rc = f->wire == PT_PB_VARINT ? 0 : pt_pb_varint(&packed, &v);
	}
	return rc;
}

/* external_data: one StringStringEntryProto (location, offset, length). */
static int ox_ext_entry(struct ox *ox, struct pt_pb *m,
			const struct pt_pb_field *f, struct ox_tp *tp)
{
	struct pt_pb kv;
	struct pt_pb_field g;
	char *key = NULL, *val = NULL, *end;
	int rc;

	rc = pt_pb_sub(m, f, &kv);
	while (rc == 0 && (rc = pt_pb_next(&kv, &g)) == 1) {
		char **to = g.num == 1 ? &key : g.num == 2 ? &val : NULL;

		rc = 0;
		if (to) {
			free(*to);
			rc = pt_pb_dup(&ox->s, &g, OX_MAX_NAME, "external_data", to);
		}
	}
	if (rc == 0 && key && val) {
		if (!strcmp(key, "location")) {
			free(tp->ext_location);
			tp->ext_location = val;
			val = NULL;
		} else if (!strcmp(key, "offset") || !strcmp(key, "length")) {
			uint64_t n;

			errno = 0;
			n = strtoull(val, &end, 10);
			if (errno || end == val || *end || val[0] == '-')
				rc = pt_fail(ox->err, -EBADMSG,
					     "ONNX model: tensor '%s': external data %s '%.40s' is not a number",
					     tp->name ? tp->name : "", key, val);
			else if (key[0] == 'o')
				tp->ext_offset = n;
			else {
				tp->ext_length = n;
				tp->has_ext_length = true;
			}
		}
	}
	free(key);
	free(val);
	return rc;
}

/* Pass one over a TensorProto: everything but the values. */
static int ox_tp_scan(struct ox *ox, struct pt_pb *m, struct ox_tp *tp)
{
	struct pt_pb_field f;
	int rc;

	while ((rc = pt_pb_next(m, &f)) == 1) {
		rc = 0;
		switch (f.num) {
		case 1:
			rc = ox_dims(ox, m, &f, tp);
			break;
		case 2:
			tp->data_type = f.v;
			break;
		case 3:
			return pt_fail(ox->err, -ENOTSUP,
				       "ONNX model: tensor '%s' is split in segments, which is not supported",
				       tp->name ? tp->name : "");
		case F_FLOAT: case F_INT32: case F_STRING: case F_INT64:
		case F_DOUBLE: case F_UINT64:
			tp->n_typed[f.num]++;
			/* bytes, or one for a varint */
			tp->typed_bound[f.num] += f.wire == PT_PB_LEN ? f.v :
				f.wire == PT_PB_FIXED32 ? 4 :
				f.wire == PT_PB_FIXED64 ? 8 : 1;
			tp->typed_last[f.num] = f;
			break;
		case 8:
			rc = ox_str(ox, &f, OX_MAX_NAME, "a tensor name", &tp->name);
			break;
		case 9:
			if (f.wire != PT_PB_LEN)
				return pt_fail(ox->err, -EBADMSG,
					       "ONNX model: tensor '%s': raw_data is not bytes",
					       tp->name ? tp->name : "");
			tp->raw = f;
			tp->has_raw = true;
			break;
		case 13:
			rc = ox_ext_entry(ox, m, &f, tp);
			break;
		case 14:
			tp->location_kind = f.v;
			break;
		default:
			break;
		}
		if (rc)
			return rc;
	}
	return rc;
}

static void ox_put(uint8_t *out, unsigned size, uint64_t v)
{
	unsigned i;

	for (i = 0; i < size; i++)      /* little-endian, whatever the host */
		out[i] = (uint8_t)(v >> (8 * i));
}

/* Pass two: the values of field @ty->field into @out (@count values of
 * @es bytes each), which the checks made sure there is room for. */
static int ox_decode(struct ox *ox, struct pt_pb *m, const struct ox_type *ty,
		     const char *name, uint64_t count, unsigned es,
		     uint8_t *out)
{
	bool fixed = ty->field == F_FLOAT || ty->field == F_DOUBLE;
	struct pt_pb_field f;
	struct pt_pb packed;
	uint64_t at = 0, v;
	int rc;

	while ((rc = pt_pb_next(m, &f)) == 1) {
		if (f.num != ty->field)
			continue;
		if (fixed && f.wire == PT_PB_LEN) {
			if (f.v % es || f.v / es > count - at)
				break;
			rc = pt_pb_read(&ox->s, out + at * es, (size_t)f.v, f.off);
			if (rc)
				return rc;
			at += f.v / es;
			continue;
		}
		if (fixed ? f.wire != (es == 4 ? PT_PB_FIXED32 : PT_PB_FIXED64) :
			    f.wire != PT_PB_VARINT && f.wire != PT_PB_LEN)
			break;
		if (fixed || f.wire == PT_PB_VARINT) {
			if (at == count)
				break;
			ox_put(out + es * at++, es, f.v);
			continue;
		}
		rc = pt_pb_sub(m, &f, &packed);
		while (rc == 0 && (rc = pt_pb_varint(&packed, &v)) == 1) {
			if (at == count)
				break;
			ox_put(out + es * at++, es, v);
			rc = 0;
		}
		if (rc < 0)
			return rc;
		if (rc == 1)
			break;
	}
	if (rc < 0)
		return rc;
	if (rc == 1 || at != count)
		return pt_fail(ox->err, -EBADMSG,
			       "ONNX model: tensor '%s': its %s values do not match its dims (%s of %" PRIu64 ")",
			       name, ty->onnx, rc == 1 ? "a value of the wrong kind or more" : "fewer", count);
	return 0;
}

/* What an interrupted in-place commit left beside the data file @loc of a
 * local model, dealt with as for the model (container/journal.h) before
 * anything reads it. */
static int ox_ext_recover(struct ox *ox, const char *loc)
{
	const char *model = pt_source_local_path(ox->ck->src);
	const char *slash = model ? strrchr(model, '/') : NULL;
	char note[512] = "", *path = NULL;
	int rc;

	if (!model)
		return 0;
	if (asprintf(&path, "%.*s%s", slash ? (int)(slash - model + 1) : 0,
		     model, loc) < 0)
		return ox_oom(ox);
	rc = pt_journal_recover(path, ox->ck->opts.recover, note, sizeof(note),
				ox->err);
	if (rc > 0)
		pt_buf_printf(&ox->ck->notes, "journal: %s\n", note);
	if (rc == -EUCLEAN) {
		/* the data file is recovered through its model */
		pt_error_clear(ox->err);
		pt_fail(ox->err, rc,
			"needs recovery: run 'ptfs recover %s' (an interrupted in-place commit left %s.ptfs-journal beside its external data)",
			model, path);
	}
	free(path);
	return rc < 0 ? rc : 0;
}

/* The ckpt over external file @loc (opened once per location), after
 * checking that @loc stays inside the model's directory.  Beside a remote
 * model the file is opened on the first read of one of its tensors, so
 * that listing costs no request for it (*@lazy). */
static int ox_ext_home(struct ox *ox, const char *tname, const char *loc,
		       struct pt_ckpt **home, bool *lazy)
{
	struct ox_state *st = ox->st;
	struct pt_source *src;
	const char *p;
	size_t i;
	int rc;

	if (!loc[0])
		return pt_fail(ox->err, -EBADMSG,
			       "ONNX model: tensor '%s': external data without a location",
			       tname);
	if (loc[0] == '/')
		return pt_fail(ox->err, -EPERM,
			       "ONNX model: tensor '%s': external data location '%.200s' is an absolute path; it must stay inside the model's directory",
			       tname, loc);
	for (p = loc; *p; p += strcspn(p, "/"), p += *p == '/')
		if (p[0] == '.' && p[1] == '.' && (p[2] == '/' || !p[2]))
			return pt_fail(ox->err, -EPERM,
				       "ONNX model: tensor '%s': external data location '%.200s' leaves the model's directory",
				       tname, loc);
	for (i = 0; i < st->n_ext; i++)
		if (!strcmp(st->ext[i].location, loc)) {
			*home = st->ext[i].home;
			*lazy = st->ext[i].lazy;
			return 0;
		}
	if (!pt_grow((void **)&st->ext, &st->cap_ext, st->n_ext, sizeof(*st->ext)))
		return ox_oom(ox);
	*lazy = ox->ck->src->costly_reads;
	rc = *lazy ? 0 : ox_ext_recover(ox, loc);
	if (rc == 0 && *lazy)
		rc = pt_source_lazy_sibling(ox->ck->src, loc, &src, ox->err);
	else if (rc == 0)
		rc = pt_source_open_sibling(ox->ck->src, loc, &src, ox->err);
	if (rc == 0)
		rc = pt__ckpt_open_child(ox->ck, src, false, home, ox->err);
	if (rc) {
		pt_error_prefix(ox->err, "ONNX model: tensor '%s': external data '%.200s'",
				tname, loc);
		return rc;
	}
	st->ext[st->n_ext].home = *home;
	st->ext[st->n_ext].lazy = *lazy;
	st->ext[st->n_ext].location = strdup(loc);
	if (!st->ext[st->n_ext].location) {
		pt__ckpt_free(*home);
		return ox_oom(ox);
	}
	/* a local model's commits write its data files (ox_commit) */
	if (!*lazy && pt_source_local_path(ox->ck->src))
		(*home)->data_name = st->ext[st->n_ext].location;
	st->n_ext++;
	return 0;
}

/* Where the bytes of an external tensor are. */
static int ox_external(struct ox *ox, struct ox_tp *tp, uint64_t nbytes,
		       struct pt_storage *s, const char **how)
{
	const char *name = tp->name ? tp->name : "";
	struct pt_ckpt *home = NULL;
	bool lazy = false;
	int rc;

	rc = ox_ext_home(ox, name, tp->ext_location ? tp->ext_location : "",
			 &home, &lazy);
	if (rc)
		return rc;
	if (tp->has_ext_length && tp->ext_length != nbytes)
		return pt_fail(ox->err, -EBADMSG,
			       "ONNX model: tensor '%s': external data length %" PRIu64 " does not match its dims and type (%" PRIu64 " bytes)",
			       name, tp->ext_length, nbytes);
	if (lazy && tp->ext_offset <= UINT64_MAX - nbytes) {
		/* checked against the file when it is opened */
		if (home->src->size < tp->ext_offset + nbytes)
			home->src->size = tp->ext_offset + nbytes;
	} else if (tp->ext_offset > home->src->size ||
	    nbytes > home->src->size - tp->ext_offset)
		return pt_fail(ox->err, -EBADMSG,
			       "ONNX model: tensor '%s': external data [%" PRIu64 ", +%" PRIu64 ") runs past the end of '%.200s' (%" PRIu64 " bytes)",
			       name, tp->ext_offset, nbytes, tp->ext_location,
			       home->src->size);
	s->kind = PT_ST_FILE;
	s->file_off = tp->ext_offset;
	s->home = home;
	s->writable = home->data_name != NULL;  /* until ox_ext_shared() */
	*how = ox_printf(ox, "external data in %s", tp->ext_location);
	ox->external++;
	return *how ? 0 : ox_oom(ox);
}

/* Where the bytes of a tensor stored in the model are: in place, or
 * decoded into memory. */
static int ox_inline(struct ox *ox, struct pt_pb *m, struct ox_tp *tp,
		     const struct ox_type *ty, uint64_t numel, uint64_t nbytes,
		     struct pt_storage *s, const char **how)
{
	const char *name = tp->name ? tp->name : "";
	unsigned fld = ty->field, es = ty->size / ty->per;
	bool fixed = fld == F_FLOAT || fld == F_DOUBLE;
	uint64_t count = numel * ty->per;
	uint8_t *mem;
	int rc;

	if (tp->has_raw || (fixed && tp->n_typed[fld] == 1 &&
			    tp->typed_last[fld].wire == PT_PB_LEN)) {
		const struct pt_pb_field *f = tp->has_raw ? &tp->raw :
							    &tp->typed_last[fld];

		if (f->v != nbytes)
			return pt_fail(ox->err, -EBADMSG,
				       "ONNX model: tensor '%s': %s holds %" PRIu64 " bytes, its dims and type need %" PRIu64,
				       name, tp->has_raw ? "raw_data" :
				       fld == F_FLOAT ? "float_data" : "double_data",
				       f->v, nbytes);
		s->kind = PT_ST_FILE;
		s->file_off = f->off;
		s->writable = true;
		*how = tp->has_raw ? "raw_data" : fld == F_FLOAT ?
			"packed float_data (the same little-endian bytes)" :
			"packed double_data (the same little-endian bytes)";
		ox->in_place++;
		return 0;
	}
	if (count == 0) {
		s->kind = PT_ST_NONE;
		*how = "no values";
		return 0;
	}
	/* a value takes one byte at least: no allocation beyond the file */
	if (count > tp->typed_bound[fld] / (fixed ? es : 1))
		return pt_fail(ox->err, -EBADMSG,
			       "ONNX model: tensor '%s': its dims say %" PRIu64 " values, the model holds fewer",
			       name, count);
	if (nbytes > ox->ck->opts.limits.max_inflate_bytes)
		return pt_fail(ox->err, -EFBIG,
			       "ONNX model: tensor '%s': %" PRIu64 " bytes to decode exceed the limit of %" PRIu64,
			       name, nbytes, ox->ck->opts.limits.max_inflate_bytes);
	mem = malloc((size_t)nbytes);
	if (!mem || !pt__own(ox->ck, mem))
		return ox_oom(ox);
	rc = ox_decode(ox, m, ty, name, count, es, mem);
	if (rc)
		return rc;
	s->kind = PT_ST_MEM;
	s->mem = mem;
	*how = ox_printf(ox, "%s decoded to %s (read-only)",
			 fld == F_INT32 ? "int32_data varints" :
			 fld == F_INT64 ? "int64_data varints" :
			 fld == F_UINT64 ? "uint64_data varints" :
			 fld == F_FLOAT ? "float_data values" : "double_data values",
			 ty->torch);
	ox->decoded++;
	return *how ? 0 : ox_oom(ox);
}

/* A STRING tensor: a directory of its strings, 0, 1, ... (its dims in
 * graph.txt). */
static int ox_strings(struct ox *ox, struct pt_pb *m, struct ox_tp *tp,
		      uint64_t numel, struct pt_value **out)
{
	struct pt_pb_field f;
	struct pt_value *d;
	uint64_t i = 0;
	char *s, *key;
	int rc;

	if (tp->has_raw || tp->ext_location || numel != tp->n_typed[F_STRING])
		return pt_fail(ox->err, -EBADMSG,
			       "ONNX model: STRING tensor '%s': %u strings for %" PRIu64 " elements",
			       tp->name ? tp->name : "", tp->n_typed[F_STRING], numel);
	d = pt__value_dict(ox->ck, (size_t)numel);
	if (!d)
		return ox_oom(ox);
	while ((rc = pt_pb_next(m, &f)) == 1) {
		struct pt_value *v;

		if (f.num != F_STRING)
			continue;
		rc = ox_str(ox, &f, OX_MAX_TEXT, "a string value", &s);
		key = rc ? NULL : ox_printf(ox, "%" PRIu64, i);
		if (rc || !key)
			return rc ? rc : ox_oom(ox);
		pt__value_dict_set(d, (size_t)i, (const uint8_t *)key, strlen(key), NULL);
		v = d->u.dict.kv.v[2 * i + 1];
		v->kind = PT_V_BYTES;
		v->u.s.p = (const uint8_t *)s;
		v->u.s.len = (size_t)f.v;
		v->u.s.in_off = UINT64_MAX;
		i++;
	}
	*out = d;
	return rc;
}

/* The element count of @tp's dims (a dim of 0 makes it 0). */
static int ox_numel(struct ox *ox, const struct ox_tp *tp, uint64_t *numel)
{
	uint32_t r;
	uint64_t n = 1;
	bool zero = false;

	for (r = 0; r < tp->rank; r++) {
		if (tp->dims[r] == 0)
			zero = true;
		else if (!pt_mul_u64(n, (uint64_t)tp->dims[r], &n) ||
			 n > (uint64_t)INT64_MAX)
			return pt_fail(ox->err, -EBADMSG,
				       "ONNX model: tensor '%s': the product of its dims overflows",
				       tp->name ? tp->name : "");
	}
	*numel = zero ? 0 : n;
	return 0;
}

/* The tensor of TensorProto @m: its value in *@out (NULL when its type is
 * not shown: a warning), its name in *@name (owned by ck, or NULL). */
static int ox_tensor_body(struct ox *ox, struct pt_pb *m, struct ox_tp *tp,
			  struct pt_value **out)
{
	struct pt_pb again = *m;
	const struct ox_type *ty;
	const char *name, *how = NULL;
	struct pt_storage *s;
	struct pt_tensor *t;
	uint64_t numel = 0, nbytes;
	char *key;
	int rc;

	rc = ox_tp_scan(ox, m, tp);
	if (rc)
		return rc;
	name = tp->name ? tp->name : "";
	rc = ox_numel(ox, tp, &numel);
	if (rc)
		return rc;
	ty = tp->data_type < OX_NTYPES ? &ox_types[tp->data_type] : NULL;
	if (!ty || !ty->onnx)
		return pt_fail(ox->err, -EBADMSG,
			       "ONNX model: tensor '%s': unknown data_type %" PRIu64,
			       name, tp->data_type);
	if (tp->data_type == 8)
		return ox_strings(ox, &again, tp, numel, out);
	if (!ty->torch) {
		pt__warn(ox->ck, "ONNX tensor '%s': data type %s is not shown",
			 name, ty->onnx);
		ox->skipped++;
		return 0;
	}
	if (!pt_mul_u64(numel, ty->size, &nbytes) || nbytes > (uint64_t)INT64_MAX)
		return pt_fail(ox->err, -EBADMSG,
			       "ONNX model: tensor '%s': its byte count overflows", name);
	s = pt__alloc(ox->ck, sizeof(*s));
	key = ox_printf(ox, "%" PRIu64, ox->n_keys++);
	if (!s || !key)
		return ox_oom(ox);
	s->key = key;
	s->dtype = pt_dtype_from_torch(ty->torch);
	s->nbytes = nbytes;
	s->id = ox->ck->n_storages++;
	if (tp->location_kind == 1)
		rc = ox_external(ox, tp, nbytes, s, &how);
	else
		rc = ox_inline(ox, &again, tp, ty, numel, nbytes, s, &how);
	if (rc)
		return rc;
	if (pt__storage_add(ox->ck, s))
		return ox_oom(ox);
	rc = pt__tensor_new(ox->ck, s->dtype, s, tp->rank, tp->dims, NULL, 0,
			    false, &t, ox->err);
	if (rc) {
		pt_error_prefix(ox->err, "ONNX model: tensor '%s'", name);
		return rc;
	}
	t->note = ox_printf(ox, "ONNX %s (data_type %" PRIu64 "), %s", ty->onnx,
			    tp->data_type, how);
	*out = pt__tensor_value(ox->ck, t);
	return t->note && *out ? 0 : ox_oom(ox);
}

static int ox_tensor(struct ox *ox, struct pt_pb *m, struct pt_value **out,
		     const char **name)
{
	struct ox_tp tp;
	int rc;

	memset(&tp, 0, sizeof(tp));
	*out = NULL;
	/* pt__tensor_new() copies the dims */
	tp.dims = malloc((ox->ck->opts.limits.max_rank + 1) * sizeof(*tp.dims));
	if (!tp.dims)
		return ox_oom(ox);
	rc = ox_tensor_body(ox, m, &tp, out);
	free(tp.dims);
	free(tp.ext_location);
	*name = tp.name;
	return rc;
}

/* ---- graphs ---- */

static int ox_graph(struct ox *ox, struct pt_pb *g, struct ox_list *into,
		    unsigned indent);

/* A SparseTensorProto: a directory of its values and indices, named after
 * its values. */
static int ox_sparse(struct ox *ox, struct pt_pb *m, struct pt_value **out,
		     const char **name)
{
	struct ox_list l = { 0 };
	struct pt_pb_field f;
	struct pt_pb sub;
	int rc;

	*out = NULL;
	*name = NULL;
	while ((rc = pt_pb_next(m, &f)) == 1) {
		struct pt_value *v;
		const char *tn;

		if (f.num != 1 && f.num != 2)
			continue;
		rc = pt_pb_sub(m, &f, &sub);
		if (rc == 0)
			rc = ox_tensor(ox, &sub, &v, &tn);
		if (rc == 0 && f.num == 1)
			*name = tn;
		if (rc == 0 && v)
			rc = ox_add(ox, &l, f.num == 1 ? "values" : "indices", v);
		if (rc)
			break;
	}
	if (rc == 0 && l.n) {
		*out = ox_dict(ox, &l);
		rc = *out ? 0 : ox_oom(ox);
	}
	free(l.v);
	return rc;
}

/* The name of a ValueInfoProto (field 1). */
static int ox_value_name(struct ox *ox, struct pt_pb *m, char **out)
{
	struct pt_pb_field f;
	int rc;

	*out = NULL;
	while ((rc = pt_pb_next(m, &f)) == 1)
		if (f.num == 1 && !*out) {
			rc = ox_str(ox, &f, OX_MAX_NAME, "a value name", out);
			if (rc)
				return rc;
		}
	return rc;
}

/* One string field of a node appended to its graph.txt line; the first
 * kept in *@keep when @keep is not NULL. */
static int ox_line_str(struct ox *ox, const struct pt_pb_field *f,
		       struct pt_buf *b, const char *sep, char **keep)
{
	char *s;
	int rc = pt_pb_dup(&ox->s, f, OX_MAX_NAME, "a node field", &s);

	if (rc)
		return rc;
	pt_buf_puts(b, sep);
	pt_buf_puts(b, s);
	if (keep && !*keep) {
		*keep = pt__own(ox->ck, s);
		return *keep ? 0 : ox_oom(ox);
	}
	free(s);
	return 0;
}

/* A node's names: its graph.txt line into @b, its name, op type and
 * first output. */
static int ox_node_head(struct ox *ox, struct pt_pb m, struct pt_buf *b,
			char **name, char **op, char **out0)
{
	struct pt_buf in, outs;
	struct pt_pb_field f;
	char *domain = NULL;
	int rc;

	pt_buf_init(&in);
	pt_buf_init(&outs);
	while ((rc = pt_pb_next(&m, &f)) == 1) {
		rc = 0;
		if (f.num == 1)
			rc = ox_line_str(ox, &f, &in, in.len ? ", " : "", NULL);
		else if (f.num == 2)
			rc = ox_line_str(ox, &f, &outs, outs.len ? ", " : "", out0);
		else if (f.num == 3)
			rc = ox_str(ox, &f, OX_MAX_NAME, "a node name", name);
		else if (f.num == 4)
			rc = ox_str(ox, &f, OX_MAX_NAME, "an op type", op);
		else if (f.num == 7)
			rc = ox_str(ox, &f, OX_MAX_NAME, "a domain", &domain);
		if (rc)
			break;
	}
	if (rc == 0) {
		pt_buf_printf(b, "%s%s%s %s: (%s) -> (%s)\n",
			      domain && domain[0] ? domain : "",
			      domain && domain[0] ? "." : "", *op ? *op : "?",
			      *name && (*name)[0] ? *name : "(no name)",
			      in.len ? in.p : "", outs.len ? outs.p : "");
	}
	pt_buf_free(&in);
	pt_buf_free(&outs);
	return rc;
}

/* A node's directory name: its name, else its first output, else its op
 * type and position. */
static const char *ox_node_key(struct ox *ox, const char *name,
			       const char *op, const char *out0)
{
	if (name && name[0])
		return name;
	if (out0 && out0[0])
		return out0;
	return ox_printf(ox, "%s_%" PRIu64, op ? op : "node", ox->n_keys++);
}

/* What one attribute holds: tensors into @tens (Constant's value under
 * the node's own name), subgraphs' initializers into @subs. */
static int ox_attr(struct ox *ox, struct pt_pb *a, const char *key,
		   bool constant, struct ox_list *tens, struct ox_list *subs,
		   unsigned indent)
{
	struct pt_pb probe = *a, sub;
	struct ox_list gl = { 0 }, many = { 0 };
	struct pt_pb_field f;
	char *aname = NULL;
	const char *an;
	size_t gi = 0;                  /* position in a graphs list */
	int rc;

	while ((rc = pt_pb_next(&probe, &f)) == 1)
		if (f.num == 1 && !aname) {
			rc = ox_str(ox, &f, OX_MAX_NAME, "an attribute name", &aname);
			if (rc)
				return rc;
		}
	if (rc)
		return rc;
	an = aname ? aname : "";
	while (rc == 0 && (rc = pt_pb_next(a, &f)) == 1) {
		struct pt_value *v = NULL;
		const char *tn;

		rc = 0;
		if (f.num != 5 && f.num != 6 && f.num != 10 && f.num != 11 &&
		    f.num != 22)
			continue;
		rc = pt_pb_sub(a, &f, &sub);
		if (rc)
			break;
		if (f.num == 5 || f.num == 10 || f.num == 22) {
			rc = f.num == 22 ? ox_sparse(ox, &sub, &v, &tn) :
					   ox_tensor(ox, &sub, &v, &tn);
			if (rc == 0 && v)
				rc = ox_add(ox, tens, constant ? key : an, v);
			continue;
		}
		pt_buf_printf(&ox->graph, "%*s%s: graph\n", indent + 2, "", an);
		rc = ox_graph(ox, &sub, &gl, indent + 4);
		if (f.num == 11)
			gi++;
		if (rc == 0 && f.num == 11 && gl.n) {
			const char *k = ox_printf(ox, "%zu", gi - 1);

			v = ox_dict(ox, &gl);
			rc = v && k ? ox_add(ox, &many, k, v) : ox_oom(ox);
		}
	}
	if (rc == 0 && (many.n || gl.n)) {
		struct pt_value *d = ox_dict(ox, many.n ? &many : &gl);

		rc = d ? ox_add(ox, subs, an, d) : ox_oom(ox);
	}
	free(gl.v);
	free(many.v);
	return rc;
}

/* A NodeProto: its line in graph.txt, its tensor attributes under
 * /.ptfs/constants, its subgraphs' initializers into @into. */
static int ox_node(struct ox *ox, struct pt_pb *m, struct ox_list *into,
		   unsigned indent)
{
	struct ox_list tens = { 0 }, subs = { 0 };
	char *name = NULL, *op = NULL, *out0 = NULL;
	struct pt_pb_field f;
	struct pt_pb a;
	const char *key;
	bool constant;
	int rc;

	pt_buf_printf(&ox->graph, "%*s", indent, "");
	rc = ox_node_head(ox, *m, &ox->graph, &name, &op, &out0);
	if (rc)
		return rc;
	key = ox_node_key(ox, name, op, out0);
	if (!key)
		return ox_oom(ox);
	constant = op && !strcmp(op, "Constant");
	while ((rc = pt_pb_next(m, &f)) == 1) {
		if (f.num != 5)
			continue;
		rc = pt_pb_sub(m, &f, &a);
		if (rc == 0)
			rc = ox_attr(ox, &a, key, constant, &tens, &subs, indent);
		if (rc)
			break;
	}
	if (rc == 0 && tens.n) {
		if (constant && tens.n == 1) {
			rc = ox_add(ox, &ox->consts, key, tens.v[0].val);
		} else {
			struct pt_value *d = ox_dict(ox, &tens);

			rc = d ? ox_add(ox, &ox->consts, key, d) : ox_oom(ox);
		}
	}
	if (rc == 0 && subs.n) {
		struct pt_value *d = ox_dict(ox, &subs);

		rc = d ? ox_add(ox, into, key, d) : ox_oom(ox);
	}
	free(tens.v);
	free(subs.v);
	return rc;
}

/* A GraphProto: nodes, initializers (into @into), inputs and outputs. */
static int ox_graph(struct ox *ox, struct pt_pb *g, struct ox_list *into,
		    unsigned indent)
{
	struct pt_pb_field f;
	struct pt_pb sub;
	uint64_t n_init = 0;
	int rc;

	while ((rc = pt_pb_next(g, &f)) == 1) {
		struct pt_value *v = NULL;
		const char *name = NULL;
		char *s;

		if (f.num != 1 && f.num != 2 && f.num != 5 && f.num != 11 &&
		    f.num != 12 && f.num != 15)
			continue;
		rc = f.num == 2 ? 0 : pt_pb_sub(g, &f, &sub);
		if (rc)
			break;
		switch (f.num) {
		case 1:
			rc = ox_node(ox, &sub, into, indent);
			break;
		case 2:
			rc = ox_str(ox, &f, OX_MAX_NAME, "a graph name", &s);
			if (rc == 0)
				pt_buf_printf(&ox->graph, "%*sgraph %s\n", indent, "", s);
			break;
		case 11:
		case 12:
			rc = ox_value_name(ox, &sub, &s);
			if (rc == 0)
				pt_buf_printf(&ox->graph, "%*s%s %s\n", indent, "",
					      f.num == 11 ? "input" : "output",
					      s ? s : "");
			break;
		default:        /* 5, 15: an initializer */
			rc = f.num == 5 ? ox_tensor(ox, &sub, &v, &name) :
					  ox_sparse(ox, &sub, &v, &name);
			n_init++;
			if (rc == 0 && v && !(name && name[0]))
				name = ox_printf(ox, "initializer_%" PRIu64, n_init - 1);
			if (rc == 0 && v)
				rc = name ? ox_add(ox, into, name, v) : ox_oom(ox);
			break;
		}
		if (rc)
			break;
	}
	if (rc == 0)
		pt_buf_printf(&ox->graph, "%*s%" PRIu64 " initializers\n", indent, "",
			      n_init);
	return rc;
}

/* ---- the model ---- */

/* What /.ptfs/metadata.json says. */
struct ox_meta {
	uint64_t ir_version, model_version;
	char *producer_name, *producer_version, *domain, *doc_string;
	struct pt_buf opsets;           /* JSON objects, comma-separated */
	struct pt_buf props;            /* JSON members, comma-separated */
};

static void ox_json_member(struct pt_buf *b, const char *key, const char *val)
{
	pt_buf_puts(b, ", \"");
	pt_buf_puts(b, key);
	pt_buf_puts(b, "\": \"");
	pt_json_str(b, (const uint8_t *)(val ? val : ""), val ? strlen(val) : 0);
	pt_buf_putc(b, '"');
}

/* An OperatorSetIdProto (@opset) or a StringStringEntryProto, as JSON. */
static int ox_pair(struct ox *ox, struct pt_pb *m, bool opset,
		   struct pt_buf *b)
{
	struct pt_pb_field f;
	char *k = NULL, *v = NULL;
	uint64_t version = 0;
	int rc;

	while ((rc = pt_pb_next(m, &f)) == 1) {
		rc = 0;
		if (f.num == 1 && !k)
			rc = ox_str(ox, &f, OX_MAX_NAME, "a key", &k);
		else if (f.num == 2 && opset)
			version = f.v;
		else if (f.num == 2 && !v)
			rc = ox_str(ox, &f, OX_MAX_TEXT, "a value", &v);
		if (rc)
			return rc;
	}
	if (rc)
		return rc;
	if (b->len)
		pt_buf_puts(b, ", ");
	if (opset) {
		pt_buf_puts(b, "{\"domain\": \"");
		pt_json_str(b, (const uint8_t *)(k ? k : ""), k ? strlen(k) : 0);
		pt_buf_printf(b, "\", \"version\": %" PRIu64 "}", version);
	} else {
		pt_buf_putc(b, '"');
		pt_json_str(b, (const uint8_t *)(k ? k : ""), k ? strlen(k) : 0);
		pt_buf_puts(b, "\": \"");
		pt_json_str(b, (const uint8_t *)(v ? v : ""), v ? strlen(v) : 0);
		pt_buf_putc(b, '"');
	}
	return 0;
}

static int ox_model_field(struct ox *ox, struct pt_pb *m,
			  const struct pt_pb_field *f, struct ox_meta *md,
			  struct ox_list *root)
{
	char **to = NULL;
	struct pt_pb sub;
	int rc;

	switch (f->num) {
	case 1: md->ir_version = f->v; return 0;
	case 5: md->model_version = f->v; return 0;
	case 2: to = &md->producer_name; break;
	case 3: to = &md->producer_version; break;
	case 4: to = &md->domain; break;
	case 6: to = &md->doc_string; break;
	case 7: case 8: case 14:
		rc = pt_pb_sub(m, f, &sub);
		if (rc)
			return rc;
		if (f->num == 7)
			return ox_graph(ox, &sub, root, 0);
		return ox_pair(ox, &sub, f->num == 8,
			       f->num == 8 ? &md->opsets : &md->props);
	default:
		return 0;
	}
	return ox_str(ox, f, OX_MAX_TEXT, "a model field", to);
}

static int ox_metadata(struct ox *ox, struct ox_meta *md)
{
	struct pt_buf b;
	size_t len = 0;
	char *p;

	pt_buf_init(&b);
	pt_buf_printf(&b, "{\"format\": \"onnx\", \"ir_version\": %" PRIu64,
		      md->ir_version);
	ox_json_member(&b, "producer_name", md->producer_name);
	ox_json_member(&b, "producer_version", md->producer_version);
	ox_json_member(&b, "domain", md->domain);
	pt_buf_printf(&b, ", \"model_version\": %" PRIu64, md->model_version);
	ox_json_member(&b, "doc_string", md->doc_string);
	pt_buf_puts(&b, ", \"opset_import\": [");
	pt_buf_puts(&b, md->opsets.len ? md->opsets.p : "");
	pt_buf_puts(&b, "], \"metadata_props\": {");
	pt_buf_puts(&b, md->props.len ? md->props.p : "");
	pt_buf_puts(&b, "}}\n");
	if (b.oom) {
		pt_buf_free(&b);
		return ox_oom(ox);
	}
	p = pt_buf_take(&b, &len);
	if (!p || pt__add_meta_file(ox->ck, "metadata.json", p, len))
		return ox_oom(ox);
	return 0;
}

/* A varint of the probe's head at *@i: 1, 0 when the head ends inside it,
 * -1 when it is no varint (over ten bytes). */
static int ox_head_varint(const uint8_t *h, size_t n, size_t *i, uint64_t *v)
{
	unsigned k;

	*v = 0;
	for (k = 0; k < 10; k++) {
		if (*i >= n)
			return 0;
		*v |= (uint64_t)(h[*i] & 0x7f) << (7 * k);
		if (!(h[(*i)++] & 0x80))
			return 1;
	}
	return -1;
}

/* The head of a ModelProto: ir_version first (every writer puts it
 * there: 0x08 and a small varint), then the tag of another ModelProto
 * field.  Whatever follows is open()'s to check, so that a damaged model
 * gets an ONNX error rather than "unrecognised format". */
static int ox_probe(struct pt_ckpt *ck, const uint8_t *head, size_t n,
		    struct pt_error *err)
{
	uint64_t tag, v;
	size_t i = 1;
	int r;

	(void)ck;
	(void)err;
	if (n < 2 || head[0] != 0x08 || ox_head_varint(head, n, &i, &v) != 1 ||
	    v == 0 || v > OX_MAX_IR)
		return 0;
	r = ox_head_varint(head, n, &i, &tag);
	if (r <= 0)
		return r == 0 && i == n;
	switch (tag) {
	case 0x28:                                      /* 5: a varint */
	case 0x12: case 0x1a: case 0x22: case 0x32: case 0x3a:
	case 0x42: case 0x72: case 0xa2: case 0xca:
		/* 2, 3, 4, 6, 7, 8, 14, 20, 25: bytes */
		return 1;
	default:
		return 0;
	}
}

static int ox_model(struct ox *ox, struct ox_list *root)
{
	struct ox_meta md;
	struct pt_pb_field f;
	struct pt_pb m;
	int rc;

	memset(&md, 0, sizeof(md));
	pt_buf_init(&md.opsets);
	pt_buf_init(&md.props);
	rc = pt_pb_top(&ox->s, 0, ox->ck->src->size, &m);
	while (rc == 0 && (rc = pt_pb_next(&m, &f)) == 1)
		rc = ox_model_field(ox, &m, &f, &md, root);
	if (rc == 0)
		rc = ox_metadata(ox, &md);
	pt_buf_free(&md.opsets);
	pt_buf_free(&md.props);
	return rc;
}

static void ox_close(struct pt_ckpt *ck)
{
	struct ox_state *st = ck->fmt_state;
	size_t i;

	if (!st)
		return;
	for (i = 0; i < st->n_ext; i++) {
		pt__ckpt_free(st->ext[i].home);
		free(st->ext[i].location);
	}
	free(st->ext);
	free(st);
	ck->fmt_state = NULL;
}

static int ox_by_place(const void *a, const void *b)
{
	const struct pt_storage *x = *(struct pt_storage *const *)a;
	const struct pt_storage *y = *(struct pt_storage *const *)b;

	if (x->home != y->home)
		return (uintptr_t)x->home < (uintptr_t)y->home ? -1 : 1;
	return x->file_off < y->file_off ? -1 : x->file_off > y->file_off;
}

/* A data file's identity, for ox_ext_aliased(). */
struct ox_id {
	dev_t dev;
	ino_t ino;
	size_t i;                       /* in st->ext; SIZE_MAX: the model */
};

static int ox_id_cmp(const void *a, const void *b)
{
	const struct ox_id *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Clear data_name of every data file that is the model's own file or
 * another location's (a link, "./weights.bin" beside "weights.bin"). */
static int ox_ext_aliased(struct ox *ox)
{
	struct ox_id *v = malloc((ox->st->n_ext + 1) * sizeof(*v));
	size_t i, j, k, n = 0;
	struct stat id;

	if (!v)
		return ox_oom(ox);
	for (i = 0; i <= ox->st->n_ext; i++) {
		const struct pt_source *src = i < ox->st->n_ext ?
			ox->st->ext[i].home->src : ox->ck->src;

		if (pt_source_identity(src, &id) != 0)
			continue;
		v[n].dev = id.st_dev;
		v[n].ino = id.st_ino;
		v[n++].i = i < ox->st->n_ext ? i : SIZE_MAX;
	}
	qsort(v, n, sizeof(*v), ox_id_cmp);
	for (i = 0; i < n; i = k) {
		for (k = i + 1; k < n && !ox_id_cmp(&v[i], &v[k]); k++)
			;
		for (j = i; k - i > 1 && j < k; j++) {
			struct pt_ckpt *h = v[j].i == SIZE_MAX ? NULL :
					    ox->st->ext[v[j].i].home;

			if (!h || !h->data_name)
				continue;
			pt__warn(ox->ck, "ONNX external data '%s' is also another name's file: read-only",
				 h->data_name);
			h->data_name = NULL;
		}
	}
	free(v);
	return 0;
}

/*
 * The external tensors a commit must not write: all of a data file that
 * is also the model or another location's file (two copies renamed over
 * one file: the second would drop the first's bytes), and tensors whose
 * bytes overlap in one file (struct pt_storage.writable).  They stay
 * readable.
 */
static int ox_ext_shared(struct ox *ox)
{
	struct pt_ckpt *ck = ox->ck;
	struct pt_storage **v, *reach = NULL;
	size_t i, n = 0;
	int rc = ox_ext_aliased(ox);

	if (rc)
		return rc;
	v = malloc((ck->n_st ? ck->n_st : 1) * sizeof(*v));
	if (!v)
		return ox_oom(ox);
	for (i = 0; i < ck->n_st; i++)
		if (ck->st_list[i]->home && ck->st_list[i]->kind == PT_ST_FILE) {
			v[n] = ck->st_list[i];
			v[n]->writable = v[n]->home->data_name != NULL;
			n++;
		}
	qsort(v, n, sizeof(*v), ox_by_place);
	for (i = 0; i < n; i++) {
		if (reach && reach->home == v[i]->home &&
		    v[i]->file_off < reach->file_off + reach->nbytes) {
			reach->writable = false;
			v[i]->writable = false;
		}
		if (!reach || reach->home != v[i]->home ||
		    v[i]->file_off + v[i]->nbytes > reach->file_off + reach->nbytes)
			reach = v[i];
	}
	free(v);
	return 0;
}

/* The directories and /.ptfs files of a model read. */
static int ox_finish(struct ox *ox, struct ox_list *root)
{
	struct pt_value *d;
	size_t len = 0;
	char *p;

	ox->ck->root = ox_dict(ox, root);
	if (!ox->ck->root)
		return ox_oom(ox);
	if (ox->consts.n) {
		d = ox_dict(ox, &ox->consts);
		if (!d || pt__add_meta_dir(ox->ck, "constants", d, NULL))
			return ox_oom(ox);
	}
	if (ox->graph.oom)
		return ox_oom(ox);
	p = pt_buf_take(&ox->graph, &len);
	if (!p || pt__add_meta_file(ox->ck, "graph.txt", p, len))
		return ox_oom(ox);
	pt_buf_printf(&ox->ck->notes,
		      "ONNX: %" PRIu64 " tensors served in place, %" PRIu64 " from external data, %" PRIu64 " decoded, %" PRIu64 " not shown\n",
		      ox->in_place, ox->external, ox->decoded, ox->skipped);
	return 0;
}

static int ox_open(struct pt_ckpt *ck, struct pt_error *err)
{
	struct ox_list root = { 0 };
	unsigned depth = ck->opts.limits.max_depth < OX_MAX_DEPTH ?
			 ck->opts.limits.max_depth : OX_MAX_DEPTH;
	struct ox ox;
	int rc;

	memset(&ox, 0, sizeof(ox));
	ox.ck = ck;
	ox.err = err;
	pt_buf_init(&ox.graph);
	ck->byteorder = '<';
	ox.st = calloc(1, sizeof(*ox.st));
	if (!ox.st)
		return pt_fail(err, -ENOMEM, "out of memory");
	ck->fmt_state = ox.st;
	rc = pt_pb_src_init(&ox.s, ck->src, "ONNX model", depth, err);
	if (rc == 0)
		rc = ox_model(&ox, &root);
	if (rc == 0)
		rc = ox_ext_shared(&ox);
	if (rc == 0)
		rc = ox_finish(&ox, &root);
	pt_pb_src_free(&ox.s);
	pt_buf_free(&ox.graph);
	free(root.v);
	free(ox.consts.v);
	return rc;
}

/* The files a commit writes: the patches of each, and what they read. */
struct ox_plan {
	struct pt_commit *sel;          /* the commits, grouped by file */
	struct pt_patch_file *f;
	struct pt_patch **p;
	void **ctx;
	size_t nf;
	uint64_t bytes, sizes;
};

static void ox_plan_free(struct ox_plan *pl, size_t cap)
{
	size_t k;

	for (k = 0; k < cap; k++) {
		free(pl->p ? pl->p[k] : NULL);
		free(pl->ctx ? pl->ctx[k] : NULL);
	}
	free(pl->sel);
	free(pl->f);
	free(pl->p);
	free(pl->ctx);
}

/* File @file's share of @c (into pl->sel from *@at): its patches, after
 * checking it is still the file the source opened. */
static int ox_plan_file(struct ox_plan *pl, const struct pt_commit *c,
			size_t n, const struct pt_ckpt *file,
			const struct pt_ckpt *home, size_t *at,
			struct pt_error *err)
{
	struct pt_patch_file *f = &pl->f[pl->nf];
	size_t i, first = *at, np = 0;
	uint64_t bytes = 0;
	int rc;

	for (i = 0; i < n; i++)
		if (c[i].st->home == home)
			pl->sel[(*at)++] = c[i];
	if (*at == first)
		return 0;
	rc = pt_source_check(file->src, PT_CHECK_NAME, err);
	if (rc)
		return rc;
	if (pt__commit_plan(pl->sel + first, *at - first, &pl->p[pl->nf],
			    &pl->ctx[pl->nf], &np, &bytes) != 0)
		return pt_fail(err, -ENOMEM, "out of memory");
	f->path = pt_source_local_path(file->src);
	f->p = pl->p[pl->nf];
	f->n = np;
	f->expect.size = (off_t)file->src->size;
	f->expect.mtime = file->src->mtime;
	pl->bytes += bytes;
	pl->sizes += file->src->size;
	pl->nf++;
	return 0;
}

/*
 * struct pt_format.commit.  The tensors written lie in the model's own
 * bytes (raw_data, packed float_data/double_data) or in its data files
 * (external data), and the container has no checksum: a commit replaces
 * those byte ranges where they are, as a safetensors commit does (clone,
 * journaled in place or a full copy, container/journal.h).  A commit that
 * touches several files (two data files, or a data file and the model)
 * replaces them together (pt_patch_apply_files(): every new copy written
 * and fsynced before the first rename), the data files in the order the
 * model first names them, the model last; commit=inplace is then refused.
 */
static int ox_commit(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		     struct pt_error *err)
{
	struct ox_state *st = ck->fmt_state;
	enum pt_commit_way used = PT_COMMIT_REWRITE;
	size_t cap = st->n_ext + 1, at = 0, k;
	struct ox_plan pl;
	int rc = 0;

	memset(&pl, 0, sizeof(pl));
	pl.sel = calloc(n ? n : 1, sizeof(*pl.sel));
	pl.f = calloc(cap, sizeof(*pl.f));
	pl.p = calloc(cap, sizeof(*pl.p));
	pl.ctx = calloc(cap, sizeof(*pl.ctx));
	if (!pl.sel || !pl.f || !pl.p || !pl.ctx)
		rc = pt_fail(err, -ENOMEM, "out of memory");
	for (k = 0; k < st->n_ext && rc == 0; k++)
		rc = ox_plan_file(&pl, c, n, st->ext[k].home, st->ext[k].home,
				  &at, err);
	if (rc == 0)
		rc = ox_plan_file(&pl, c, n, ck, NULL, &at, err);
	if (rc == 0)
		rc = pt_patch_apply_files(pl.f, pl.nf, ck->opts.commit,
					  &ck->no_clone, &used, err);
	/* a rewrite wrote the files it replaced whole */
	if (used == PT_COMMIT_REWRITE)
		pl.bytes = pl.sizes;
	rc = pt__commit_end(ck, rc, used, pl.bytes, err);
	if (rc == 0 && pl.nf == 1)
		snprintf(ck->last_commit, sizeof(ck->last_commit),
			 "%s, %llu bytes written", pt_commit_way_name(used),
			 (unsigned long long)pl.bytes);
	else if (rc == 0 && pl.nf > 1)
		snprintf(ck->last_commit, sizeof(ck->last_commit),
			 "%s, %llu bytes written in %zu files",
			 pt_commit_way_name(used), (unsigned long long)pl.bytes,
			 pl.nf);
	ox_plan_free(&pl, cap);
	return rc;
}

const struct pt_format pt_fmt_onnx = {
	.name = "ONNX",
	.probe = ox_probe,
	.open = ox_open,
	.storage = NULL,
	.close = ox_close,
	.commit = ox_commit,
};
