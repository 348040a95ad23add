/* SPDX-License-Identifier: MIT */
/*
 * ckpt_i.h -- the internal contract of the checkpoint layer, fmt/ and
 * ckpt/ (one layer, core/LAYERS): the checkpoint object, its storages,
 * tensors and values, and the services the files of the layer share.
 * Not part of the front ends' API (ckpt.h); above the layer, only
 * export's ptsave.c and wonly.c read it.
 *
 * The format plug-in contract (struct pt_format, the list of formats)
 * lives in fmt/fmt.h.
 */
#ifndef PTFS_CORE_CKPT_I_H
#define PTFS_CORE_CKPT_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <uthash.h>

#include "base/buf.h"
#include "base/json.h"
#include "ckpt/ckpt.h"
#include "decode/dtype.h"
#include "base/pt_limits.h"
#include "decode/pickle.h"
#include "base/rd.h"
#include "io/source.h"
#include "container/zip.h"
#include "fmt/fmt.h"

/* Where a storage's bytes are. */
enum pt_stkind {
	PT_ST_FILE,     /* [file_off, file_off + nbytes) of the checkpoint */
	PT_ST_MEM,      /* mem[0 .. nbytes) (owned by the checkpoint) */
	PT_ST_ZIP,      /* a deflated record, inflated on first use */
	PT_ST_NONE,     /* no data (meta tensors, empty records) */
	PT_ST_CHUNKS,   /* a C-order tensor assembled from boxes stored in
			 * files (DCP, fmt/dcp.c): see struct pt_chunks */
};

/*
 * PT_ST_CHUNKS: the storage is the C-order bytes of a tensor of @shape
 * whose elements lie in boxes (chunks), each stored C-contiguous in a
 * file.  The format that builds it checks, before anyone reads, that the
 * boxes tile the shape exactly (inside it, no overlap, nothing missing),
 * that none is empty, that each lies inside its file, and sorts them by
 * offsets in C order; chunks.c maps each read to runs of
 * the boxes.  Owned by the checkpoint; immutable after open.
 */
struct pt_chunk {
	const int64_t *offsets;         /* rank entries: first index */
	const int64_t *sizes;           /* rank entries: extent, none 0 */
	struct pt_ckpt *home;           /* whose src holds it (not NULL) */
	uint64_t file_off;              /* its first byte in home's src */
};

struct pt_chunks {
	uint32_t rank;
	const int64_t *shape;           /* rank entries */
	unsigned es;                    /* bytes per element */
	size_t n;                       /* chunks */
	const struct pt_chunk *v;       /* n chunks, sorted */
};

struct pt_storage {
	const char *key;                /* storage key, e.g. "0" */
	const struct pt_dtype *dtype;   /* of the first pid seen */
	uint64_t nbytes;                /* bytes of the storage */
	enum pt_stkind kind;
	uint32_t committed;             /* pt_ckpt_commits() as of the last
					 * commit that wrote it, 0: none (set
					 * by ckpt.c; in kind's padding) */
	uint64_t file_off;              /* PT_ST_FILE */
	const uint8_t *mem;             /* PT_ST_MEM */
	const struct pt_zip_entry *entry; /* the record, when there is one */
	const char *location;           /* "cpu", "cuda:0" ... or NULL */
	uint64_t id;                    /* creation order */
	/* The checkpoint whose file (src, zip) holds the bytes, when that is
	 * not the checkpoint reading them: a sharded index serves tensors of
	 * its shards (fmt/sharded.c).  NULL means the reader itself. */
	struct pt_ckpt *home;
	const struct pt_chunks *chunks; /* PT_ST_CHUNKS */
	bool writable;                  /* a commit may replace its bytes
					 * (PT_ST_FILE in the checkpoint's own
					 * file or in a data file its commits
					 * write, overlapping no other) */
	uint32_t bytes_gen;             /* pt_ckpt_bytes_changed() for it
					 * (in writable's padding) */
};

/* Kinds of tensor-like values. */
enum pt_tkind {
	PT_TK_TENSOR,
	PT_TK_PARAMETER,
	PT_TK_NDARRAY,
	PT_TK_STORAGE,  /* a storage pickled on its own: 1-D of its dtype */
};

struct pt_tensor {
	const struct pt_dtype *dtype;
	struct pt_storage *st;
	uint32_t rank;
	bool contiguous;                /* C-contiguous from byte_lo */
	bool requires_grad;
	uint8_t kind;                   /* enum pt_tkind */
	char byteorder;                 /* '<' little, '>' big, '|' n/a */
	int64_t *shape;                 /* rank entries */
	int64_t *stride;                /* rank entries, in elements */
	int64_t offset;                 /* storage offset in elements */
	uint64_t numel;
	uint64_t nbytes;                /* numel * itemsize */
	uint64_t byte_lo;               /* first byte touched in the storage */
	uint64_t byte_hi;               /* one past the last byte touched */
	const char *dtype_name;         /* torch or numpy name for .json */
	const char *note;               /* for the .json, or NULL */
	const char *logical_dtype;      /* the tensor's own dtype when the
					 * bytes are another (XLA bfloat16
					 * saved as float32), or NULL */
};

/* How a value appears in the tree (pt_value.aux16 after classification). */
enum pt_vclass {
	PT_C_UNSET = 0,
	PT_C_SCALAR,    /* int, float, bool, None, str: a text file */
	PT_C_BYTES,     /* bytes: aux -> struct pt_bytes */
	PT_C_TEXT,      /* device, global, complex...: aux -> char * */
	PT_C_TENSOR,    /* aux -> struct pt_tensor */
	PT_C_MAP,       /* directory of key -> value pairs */
	PT_C_SEQ,       /* directory 0, 1, ... */
	PT_C_OBJECT,    /* args/ + state items */
	PT_C_BUSY,      /* being classified (internal) */
	PT_C_ARGPID,    /* a persistent id pushed as a strided rebuild's
			 * storage, not a value (internal, torch.c) */
};

/*
 * Where a value shown in the tree sits in the graph: the sequence that
 * holds it, so that an edit (ckpt/edit.c) can take it out, rename its key
 * or put another value in its place.  Found by pt__entry_slot() (tree_i.h)
 * for the entries of a directory value.
 */
enum pt_slot_kind {
	PT_SLOT_NONE,
	PT_SLOT_PAIR,           /* seq->v[pos] the key, v[pos + 1] the value:
				 * a dict's pairs, SETITEMS onto a mapping
				 * object, an object's state dict */
	PT_SLOT_ITEM,           /* seq->v[pos], numbered: a list, tuple, set,
				 * APPENDS onto an object */
	PT_SLOT_LISTPAIR,       /* seq->v[pos] a (key, value) tuple: a
				 * mapping built from a list of pairs */
	PT_SLOT_NAMED,          /* an object's args, kwargs or state */
};

struct pt_slot {
	struct pt_value *owner;         /* the value whose sequence it is */
	struct pt_vseq *seq;
	size_t pos;
	uint8_t kind;                   /* enum pt_slot_kind */
};

struct pt_bytes {
	const uint8_t *p;
	size_t len;
};

struct pt_ckpt;

struct pt_pickled {                     /* one decoded pickle we keep */
	struct pt_pickle *pk;
	uint8_t *buf;                   /* its bytes (owned unless borrowed) */
	size_t len;
	const char *label;              /* "data.pkl", ... */
	uint64_t file_off;              /* offset of buf[0] in the file when
					 * the record is stored, else
					 * UINT64_MAX */
	bool borrowed;                  /* buf is a slice of memory kept
					 * elsewhere (pt__add_pickle) */
};

#define PT_MAX_PICKLES 8

/* A file a format adds under /.ptfs (e.g. a safetensors header), shown
 * with static contents (dotptfs.c build_meta). */
struct pt_meta_file {
	const char *name;               /* static, unique under /.ptfs */
	const uint8_t *data;            /* owned by the checkpoint */
	size_t len;
};

#define PT_MAX_META_FILES 4

/* A directory a format adds under /.ptfs (dotptfs.c build_meta): either a
 * value tree shown by LAYOUT.md's rules like the root (@root: TorchScript
 * constants.pkl as /.ptfs/constants), or a shortcut to the records under
 * the archive folder <prefix>/@records (/.ptfs/code ->
 * /.ptfs/records/<prefix>/code; skipped when there is no such folder).
 * Exactly one of @root and @records is set. */
struct pt_meta_dir {
	const char *name;               /* static, unique under /.ptfs */
	struct pt_value *root;
	const char *records;            /* static */
};

#define PT_MAX_META_DIRS 8

struct pt_tree;

/* How deep checkpoints nest: a front end's is at depth 0, one a format
 * opens inside it (pt__ckpt_open_child) at 1, and that one opens none. */
#define PT_CKPT_MAX_DEPTH 1u

struct pt_ckpt {
	/* the formats it is probed against, in order, NULL-terminated: fmt.c's
	 * pt_formats for a front end's, its parent's for a child (open.c) */
	const struct pt_format *const *formats;
	unsigned depth;                 /* 0: a front end's; else its
					 * parent's + 1 (PT_CKPT_MAX_DEPTH) */
	char *path;                     /* as given */
	char *stem;                     /* file name minus last extension */
	struct pt_source *src;          /* the bytes (io/source.h) */
	struct pt_ckpt_opts opts;

	const struct pt_format *fmt;
	const char *kind_name;          /* overrides fmt->name in messages */
	void *fmt_state;
	struct pt_zip *zip;             /* ZIP family: indexed by the first
					 * probe (pt__zip_probe, fmt.h) */

	struct pt_pickled pickles[PT_MAX_PICKLES];
	int n_pickles;
	struct pt_value *root;          /* the loaded object */
	struct pt_vstack lean_stack;    /* pt__classify_reduce()'s walks */
	char byteorder;                 /* '<' or '>' for tensor storages */

	/* the storages by key, in the order they were added: the list, and
	 * an open-addressing index of list positions + 1 (pt__storage_*) */
	struct pt_storage **st_list;
	size_t n_st, cap_st;
	uint32_t *st_slots;
	size_t n_st_slots;              /* 0 or a power of two */
	uint64_t n_storages;
	uint64_t n_tensors;
	uint64_t tensor_bytes;
	struct pt_buf warnings;
	struct pt_buf notes;            /* format-specific info lines */
	char recovery[1536];            /* pt_ckpt_recovery() */
	char last_commit[128];          /* pt_ckpt_last_commit() */
	bool no_clone;                  /* FICLONE failed here once */
	bool commit_moved;              /* the last commit may have moved
					 * records (ZIP64 rewriter): reindex */
	uint32_t commits;               /* that succeeded (pt_ckpt_commits) */
	uint64_t bytes_gen;             /* pt_ckpt_bytes_changed() calls */
	uint64_t tensor_reads;          /* pt_ckpt_tensor_reads() */
	struct pt_gathered *gathered;   /* gathered.c, made on first use */
	uint64_t layout_gen;            /* the number of the last one that
					 * moved records or changed the size,
					 * 0: none (pt_ckpt_layout_gen) */
	struct pt_buf globals;          /* " module.name," for each global */
	char *version;                  /* "version" record, trimmed */
	struct pt_meta_file meta_files[PT_MAX_META_FILES]; /* extra /.ptfs files */
	int n_meta_files;
	struct pt_meta_dir meta_dirs[PT_MAX_META_DIRS]; /* extra /.ptfs dirs */
	int n_meta_dirs;

	struct {                        /* edit.c */
		uint32_t n;             /* edits made to the graph */
		uint32_t next_key;      /* of new storages ("ptfs+N") */
		bool holes;             /* pt_edit_keep_names() */
		struct pt_vseq **holed; /* sequences with holes (a list's
					 * items, a mapping's pairs), until
					 * the commit */
		size_t n_holed, cap_holed;
		struct pt_edit_rec *log; /* editlog.c: since the last commit */
		size_t n_log, cap_log;
		const char *log_lost;   /* an edit it could not keep, or NULL */
	} edits;
	struct pt_source *layer;        /* pt_ckpt_set_layer(), or NULL */
	/* Set by the parent's format when the parent's commits write this
	 * checkpoint's file (an ONNX model's external data: fmt/onnx.c):
	 * the name the parent gives it (its location).  NULL otherwise. */
	const char *data_name;
	pt_progress_fn progress;        /* see pt_ckpt_set_progress() */
	void *progress_ctx;

	struct pt_tree *tree;
	/* memory owned by the checkpoint, freed at close */
	void **owned;
	size_t n_owned, cap_owned;
	struct pt_blk *blks;            /* pt__alloc() blocks */
};

/* Where the tensor bytes of @ck's own file are read: through its layer
 * (pt_ckpt_set_layer), else from its source. */
static inline const struct pt_source *pt__tensor_source(const struct pt_ckpt *ck)
{
	/* set once, maybe while others read (a data file's layer is laid
	 * when its first storage is opened for writing) */
	const struct pt_source *l = __atomic_load_n(&ck->layer, __ATOMIC_ACQUIRE);

	return l ? l : ck->src;
}

/* Keep @p (malloc()ed) until close; returns @p, or NULL (and frees it) when
 * out of memory. */
void *pt__own(struct pt_ckpt *ck, void *p);

/* @n zeroed bytes (8-byte aligned) that live until close, carved from
 * blocks: no malloc per tensor or storage.  NULL when out of memory.
 * Like pt__own(), only while the checkpoint is being opened (one
 * thread). */
void *pt__alloc(struct pt_ckpt *ck, size_t n);
/* Free every pt__alloc() block (ckpt.c, at close). */
void pt__alloc_free(struct pt_ckpt *ck);
/*
 * gathered.c: non-contiguous tensors kept gathered whole, for
 * tensor_read.c.  pt__gathered_copy(): [@off, @off + @n) of @t from its
 * kept copy, false when there is none as of now.  A fill runs alone:
 * pt__gathered_fill_begin() (false when out of memory) ...
 * pt__gathered_fill_end(); in between, pt__gathered_keep() takes @bytes,
 * all of @t as of generation @gen, taken with pt__gathered_gen() before
 * they were read (kept only if still current).  pt__gathered_free(): at
 * close.  At most PT_GATHERED_MAX_BYTES are kept; a bigger tensor is
 * gathered per read.
 */
#define PT_GATHERED_MAX_BYTES ((uint64_t)256 << 20)
bool pt__gathered_copy(struct pt_ckpt *ck, const struct pt_tensor *t,
		       void *buf, size_t n, uint64_t off);
bool pt__gathered_fill_begin(struct pt_ckpt *ck);
void pt__gathered_fill_end(struct pt_ckpt *ck);
uint64_t pt__gathered_gen(const struct pt_ckpt *ck, const struct pt_tensor *t);
void pt__gathered_keep(struct pt_ckpt *ck, const struct pt_tensor *t,
		       uint64_t gen, uint8_t *bytes);
void pt__gathered_free(struct pt_ckpt *ck);

/* chunks.c: bytes [@off, @off + @n) of PT_ST_CHUNKS storage @cs of @ck
 * (the caller keeps the range inside the storage): @n or -errno. */
ssize_t pt__chunks_read(const struct pt_ckpt *ck, const struct pt_chunks *cs,
			uint8_t *buf, size_t n, uint64_t off,
			struct pt_error *err);
/*
 * The checkpoint's storages by key (ck->st_list[0 .. ck->n_st), in the
 * order they were added).  pt__storage_add() takes @st (its key must not
 * be in yet; st->key must live as long as ck): 0, or -ENOMEM with nothing
 * added.  pt__storage_find(): the storage keyed @key, or NULL.
 * pt__storages_expect(): room for about @n, a hint for formats that know
 * their count (a ZIP's records).  pt__storages_free(): forget them all
 * (the storages themselves are the caller's).  Like pt__alloc(), only
 * while the checkpoint is being opened (one thread); finds may run from
 * any thread afterwards.
 */
int pt__storage_add(struct pt_ckpt *ck, struct pt_storage *st);
struct pt_storage *pt__storage_find(const struct pt_ckpt *ck,
				    const char *key);
void pt__storages_expect(struct pt_ckpt *ck, size_t n);
void pt__storages_free(struct pt_ckpt *ck);

/* Add the file /.ptfs/@name (a static string) holding @len bytes at @data
 * (malloc()ed; ownership passes to ck, also on failure).  Call from a
 * format's open(); returns 0, -EFBIG past PT_MAX_META_FILES, or -ENOMEM. */
int pt__add_meta_file(struct pt_ckpt *ck, const char *name, void *data,
		      size_t len);

/* Add the directory /.ptfs/@name (see struct pt_meta_dir).  Value roots
 * are classified by ckpt.c after ck->root unless the format did it
 * already (it must when its storage() hook depends on which pickle a pid
 * came from).  Returns 0 or -EFBIG past PT_MAX_META_DIRS. */
int pt__add_meta_dir(struct pt_ckpt *ck, const char *name,
		     struct pt_value *root, const char *records);

/*
 * synth.c: value trees made outside any pickle, owned by @ck (NULL
 * when out of memory).
 * pt__value_dict(): a PT_V_DICT of @n entries whose keys are str nodes
 * (classified PT_C_SCALAR, "" until set) and whose values are spare
 * unclassified nodes until set; the dict itself is left for
 * pt__classify() to mark PT_C_MAP.  pt__value_dict_set() sets entry @i:
 * key @name (borrowed: it must live as long as ck) and value @val (any
 * value, e.g. another such dict; NULL keeps the spare node, for the
 * caller to fill).  pt__value_dict_set_tensor() makes the spare node show
 * tensor @t.  pt__tensor_value(): a new node showing tensor @t (a
 * PT_V_PERSID with a NULL pid, classified PT_C_TENSOR).
 * pt__numbered_dict(): a dict c0, c1, ... of @vals[0..@n) (TorchScript
 * constants, docs/FORMATS.md, "TorchScript records and constants").
 */
struct pt_value *pt__value_dict(struct pt_ckpt *ck, size_t n);
void pt__value_dict_set(struct pt_value *d, size_t i, const uint8_t *name,
			size_t len, struct pt_value *val);
void pt__value_dict_set_tensor(struct pt_value *d, size_t i,
			       const uint8_t *name, size_t len,
			       struct pt_tensor *t);
struct pt_value *pt__tensor_value(struct pt_ckpt *ck, struct pt_tensor *t);
struct pt_value *pt__numbered_dict(struct pt_ckpt *ck,
				   struct pt_value *const *vals, size_t n);

/* ckstate.c: hand the string buffer of JSON scanner @j to @ck
 * (its strings live until close).  0 or -ENOMEM with a message in j->err. */
int pt__js_keep(struct pt_js *j, struct pt_ckpt *ck);

/* Add a warning line (deduplicated). */
void pt__warn(struct pt_ckpt *ck, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Decode a pickle held in @buf (ownership passes to ck) and record it. */
int pt__load_pickle(struct pt_ckpt *ck, uint8_t *buf, size_t len,
		    const char *label, uint64_t file_off,
		    struct pt_value **root, size_t *used,
		    struct pt_error *err);

/* pt__load_pickle() with pt_pickle_load_lean(): @reduce (called with ck)
 * classifies calls as they are made, so that their arguments take no
 * memory; pt__classify_reduce() for a pickle whose storages
 * ck->fmt->storage() can resolve while it loads. */
int pt__load_pickle_lean(struct pt_ckpt *ck, uint8_t *buf, size_t len,
			 const char *label, uint64_t file_off,
			 struct pt_value **root, pt_pickle_reduce_fn reduce,
			 struct pt_error *err);

/*
 * Let kept pickle @i's input go (its graph stays): the text of every str
 * and long int reachable from its root is copied into one block of ck's,
 * and the input is freed.  Nothing happens unless the input is a stored
 * range of ck's file (pd->file_off) and no bytes value points into it (a
 * numpy array's data, which storages may serve from there).  For a graph
 * only its root reaches: before classification or a tree.
 */
void pt__unpin_pickle(struct pt_ckpt *ck, int i);

/* The input of kept pickle @i: pd->buf, or read again from the file into
 * *@owned (free it) when pt__unpin_pickle() let it go.  0 or -errno. */
int pt__pickle_input(struct pt_ckpt *ck, int i, const uint8_t **p,
		     uint8_t **owned, struct pt_error *err);

/* torch.c: tensors classified while their pickle loads (ctx: ck). */
int pt__classify_reduce(void *ctx, struct pt_value *v, struct pt_error *err);

/* Record a pickle the caller decoded itself (a stream of several pickles
 * in one buffer, the legacy format).  @pk always passes to ck (freed on
 * failure too); @buf[0..@len) are its bytes, borrowed: they must live as
 * long as ck (pt__own() the buffer they are in). */
int pt__add_pickle(struct pt_ckpt *ck, struct pt_pickle *pk, uint8_t *buf,
		   size_t len, const char *label, uint64_t file_off,
		   struct pt_error *err);

/* fmt/legacy.c: every persistent-id node reachable from @root (not looking
 * inside pids) and every torch.storage._load_from_bytes call, each once,
 * in creation (= unpickling) order, in a malloc()ed array *@out.  @count
 * is pt_pickle_count() of the pickle. */
int pt__legacy_refs(struct pt_value *root, uint32_t count,
		    struct pt_value ***out, size_t *n_out,
		    struct pt_error *err);

/* fmt/legacy.c: turn node @v (a module's persistent id) into the GLOBAL
 * @cls, which is what torch's persistent_load returns for it. */
void pt__legacy_to_global(struct pt_value *v, const struct pt_value *cls);

/* ckstate.c: list a global in the summary, warn when it is dangerous (a
 * scanner's view of what a full unpickler would import). */
void pt__note_global(struct pt_ckpt *ck, const struct pt_value *g);

/* torch.c: classify every value reachable from ck->root, building tensors
 * and validating their byte ranges.  Values not reachable stay UNSET. */
int pt__classify(struct pt_ckpt *ck, struct pt_error *err);

/* torch.c: the same for every value reachable from @root (another pickle
 * of the container, e.g. TorchScript's constants.pkl); values already
 * classified are left as they are. */
int pt__classify_value(struct pt_ckpt *ck, struct pt_value *root,
		       struct pt_error *err);

/* torch.c: what a tensor is made of, as plain arrays. */
struct pt_tensor_spec {
	const struct pt_dtype *dtype;
	struct pt_storage *st;
	uint32_t rank;
	const int64_t *shape;           /* rank entries, none negative */
	const int64_t *stride;          /* rank entries, none negative; or
					 * NULL: dense (C order, or Fortran
					 * order with @fortran) */
	bool fortran;
	int64_t offset;                 /* storage offset in elements, >= 0 */
	bool requires_grad;
	uint8_t kind;                   /* enum pt_tkind */
	char byteorder;                 /* '<' or '>' ('|' forced for 1-byte
					 * dtypes) */
	const char *dtype_name;         /* NULL: dtype->name */
	const char *note;               /* or NULL */
	const char *logical;            /* see pt_tensor.logical_dtype */
};

/* torch.c: the one tensor constructor.  Checks @sp (rank against
 * max_rank, sizes, strides, element and byte counts that fit int64) and
 * that every element lies inside @sp->st (byte_hi = (offset + sum of
 * (size_i - 1) * stride_i + 1) * itemsize; packed dtypes serve the whole
 * storage); sets byte_lo/byte_hi/contiguous.  The tensor and its arrays
 * are owned by ck; it is not counted in ck->n_tensors (the caller does,
 * once it is shown).  0, or -EFBIG/-EBADMSG/-ENOMEM with one line. */
int pt__tensor_make(struct pt_ckpt *ck, const struct pt_tensor_spec *sp,
		    struct pt_tensor **out, struct pt_error *err);

/* torch.c: pt__tensor_make() of a plain tensor (kind PT_TK_TENSOR, ck's
 * byte order), counted in ck->n_tensors and ck->tensor_bytes. */
int pt__tensor_new(struct pt_ckpt *ck, const struct pt_dtype *dtype,
		   struct pt_storage *st, uint32_t rank, const int64_t *shape,
		   const int64_t *stride, int64_t offset, bool requires_grad,
		   struct pt_tensor **out, struct pt_error *err);

/* torch.c: dense strides of @shape (@rank entries) into @stride: C order,
 * or Fortran order when @fortran; dimensions of size 0 or 1 do not
 * multiply.  false when a stride would not fit int64. */
bool pt__dense_strides(uint32_t rank, const int64_t *shape, bool fortran,
		       int64_t *stride);

/* torch.c: a value's class (after pt__classify); scalars report
 * PT_C_SCALAR, unreachable values are classified on the fly. */
enum pt_vclass pt__vclass(const struct pt_value *v);

/* tensor_read.c: bytes [@off, @off + @n) of tensor @t in C order (cut at
 * its end): the count read, or -errno with one line. */
ssize_t pt__tensor_read(struct pt_ckpt *ck, const struct pt_tensor *t,
			void *buf, size_t n, uint64_t off,
			struct pt_error *err);

/* torch.c: the .json metadata of a tensor. */
void pt__tensor_json(struct pt_ckpt *ck, const struct pt_tensor *t,
		     struct pt_buf *out);

/* torch.c: global helpers. */
bool pt__is_global(const struct pt_value *v, const char *module,
		   const char *name);

/* tree.c */
int pt__tree_new(struct pt_ckpt *ck, struct pt_error *err);
void pt__tree_free(struct pt_ckpt *ck);

/* fmt/zip.c: a storage over ZIP record @e (stored: served from the file;
 * deflated: inflated on first read), keyed @key among the storages (pt__storage_add), with
 * @location (@loc_len bytes, may be NULL) as its device.  Writable only
 * when the container is written by the ZIP rewriter.  NULL when out of
 * memory. */
struct pt_storage *pt__record_storage(struct pt_ckpt *ck,
				      const struct pt_zip_entry *e,
				      const char *key, const char *location,
				      size_t loc_len, const struct pt_dtype *dt);

/*
 * open.c: the checkpoint object's life below its tree.
 * pt__ckpt_new(): a bare checkpoint named @path (made absolute) with
 * @opts (NULL: the defaults), probed against @formats when loaded, at
 * @depth; no source yet.  pt__ckpt_load(): probe ck->src's first bytes
 * against ck->formats, open with the format that claims them, classify
 * the values (ck->root, /.ptfs folders); no tree.  pt__ckpt_free():
 * everything but the tree (NULL is ignored).
 */
int pt__ckpt_new(struct pt_ckpt **out, const char *path,
		 const struct pt_ckpt_opts *opts,
		 const struct pt_format *const *formats, unsigned depth,
		 struct pt_error *err);
int pt__ckpt_load(struct pt_ckpt *ck, struct pt_error *err);
void pt__ckpt_free(struct pt_ckpt *ck);

/*
 * open.c: a checkpoint a format opens inside @parent over @src (owned
 * from here on, also on failure), with @parent's options and formats at
 * @parent's depth + 1: loaded (a shard of a sharded index, probed and
 * opened as a file is) or, unless @load, bare (only path and src: the
 * .distcp files of a DCP directory, read through struct pt_storage.home
 * or struct pt_chunk.home).  -EBADMSG when @parent is at
 * PT_CKPT_MAX_DEPTH already.  No tree is built; free it with
 * pt__ckpt_free().  Returns 0 or -errno with one line.
 */
int pt__ckpt_open_child(struct pt_ckpt *parent, struct pt_source *src,
			bool load, struct pt_ckpt **out, struct pt_error *err);

/*
 * open.c: the checkpoints beside @parent's source named @v[i].name, each
 * opened by pt_source_open_sibling() and pt__ckpt_open_child(@load) into
 * @v[i].ck, with @v[i].rc 0 or -errno and @v[i].err its one line.  When
 * reading @parent costs round trips (src->costly_reads: a remote object)
 * they open in threads, many at once, so that their requests are in
 * flight together; else one after another in this thread.  The outcome
 * is the same either way: with @stop_at_failure, as if opened in order
 * up to the first that fails (every later one has ck NULL and rc
 * -ECANCELED); without, every one was tried.  Nothing of @parent changes
 * (each child has its own warnings, notes and limits): the caller
 * reports them in order.
 */
struct pt_child_open {
	char *name;                     /* in: a plain name beside @parent
					 * (the caller's) */
	struct pt_ckpt *ck;             /* out: owned by the caller */
	int rc;
	struct pt_error err;
};

void pt__ckpt_open_siblings(struct pt_ckpt *parent, struct pt_child_open *v,
			    size_t n, bool load, bool stop_at_failure);

#endif /* PTFS_CORE_CKPT_I_H */
