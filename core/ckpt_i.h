/* SPDX-License-Identifier: MIT */
/*
 * ckpt_i.h -- internals shared by the checkpoint, its formats, the torch
 * interpreter and the tree.  Not part of the front ends' API.
 *
 * A container format is one file in core/ (fmt_*.c) that defines a
 * struct pt_format and is listed in pt_formats[] (ckpt.c).  Its open()
 * decodes the container's pickle(s), sets ck->root and resolves persistent
 * ids to storages through its storage() hook; everything after that (tensor
 * interpretation, the tree, metadata) is shared.
 */
#ifndef PTFS_CORE_CKPT_I_H
#define PTFS_CORE_CKPT_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <uthash.h>

#include "buf.h"
#include "ckpt.h"
#include "dtype.h"
#include "pt_limits.h"
#include "pickle.h"
#include "rd.h"
#include "source.h"
#include "zip.h"

/* Where a storage's bytes are. */
enum pt_stkind {
	PT_ST_FILE,     /* [file_off, file_off + nbytes) of the checkpoint */
	PT_ST_MEM,      /* mem[0 .. nbytes) (owned by the checkpoint) */
	PT_ST_ZIP,      /* a deflated record, inflated on first use */
	PT_ST_NONE,     /* no data (meta tensors, empty records) */
};

struct pt_storage {
	const char *key;                /* storage key, e.g. "0" */
	const struct pt_dtype *dtype;   /* of the first pid seen */
	uint64_t nbytes;                /* bytes of the storage */
	enum pt_stkind kind;
	uint64_t file_off;              /* PT_ST_FILE */
	const uint8_t *mem;             /* PT_ST_MEM */
	const struct pt_zip_entry *entry; /* the record, when there is one */
	char *location;                 /* "cpu", "cuda:0" ... or NULL */
	uint64_t id;                    /* creation order */
	UT_hash_handle hh;              /* ck->storages, by key */
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
	int64_t *shape;                 /* rank entries */
	int64_t *stride;                /* rank entries, in elements */
	int64_t offset;                 /* storage offset in elements */
	uint64_t numel;
	uint64_t nbytes;                /* numel * itemsize */
	uint64_t byte_lo;               /* first byte touched in the storage */
	uint64_t byte_hi;               /* one past the last byte touched */
	bool contiguous;                /* C-contiguous from byte_lo */
	bool requires_grad;
	uint8_t kind;                   /* enum pt_tkind */
	char byteorder;                 /* '<' little, '>' big, '|' n/a */
	const char *dtype_name;         /* torch or numpy name for .json */
	const char *note;               /* e.g. logical dtype, or NULL */
	uint64_t id;                    /* creation order */
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
};

struct pt_bytes {
	const uint8_t *p;
	size_t len;
};

struct pt_ckpt;

struct pt_format {
	const char *name;               /* "torch.save zip", ... */
	/* Does this format claim the file?  @head: its first bytes. */
	bool (*probe)(const struct pt_ckpt *ck, const uint8_t *head, size_t n);
	/* Decode the container: set ck->root (and ck->pickle_*). */
	int (*open)(struct pt_ckpt *ck, struct pt_error *err);
	/* Resolve a persistent id (the pid value) to a storage of
	 * @dtype (from the pid) and @numel elements of it. */
	int (*storage)(struct pt_ckpt *ck, const struct pt_value *pid,
		       struct pt_storage **out, struct pt_error *err);
	/* Free format state (may be NULL). */
	void (*close)(struct pt_ckpt *ck);
};

struct pt_pickled {                     /* one decoded pickle we keep */
	struct pt_pickle *pk;
	uint8_t *buf;                   /* its bytes (owned) */
	size_t len;
	const char *label;              /* "data.pkl", ... */
	uint64_t file_off;              /* offset of buf[0] in the file when
					 * the record is stored, else
					 * UINT64_MAX */
};

#define PT_MAX_PICKLES 8

struct pt_tree;

struct pt_ckpt {
	char *path;                     /* as given */
	char *stem;                     /* file name minus last extension */
	int fd;                         /* -1 for memory */
	struct pt_source src;
	struct timespec mtime;
	struct pt_ckpt_opts opts;

	const struct pt_format *fmt;
	const char *kind_name;          /* overrides fmt->name in messages */
	void *fmt_state;
	struct pt_zip *zip;             /* zip-based formats */

	struct pt_pickled pickles[PT_MAX_PICKLES];
	int n_pickles;
	struct pt_value *root;          /* the loaded object */
	char byteorder;                 /* '<' or '>' for tensor storages */

	struct pt_storage *storages;    /* hash by key */
	uint64_t n_storages;
	uint64_t n_tensors;
	uint64_t tensor_bytes;
	struct pt_buf warnings;
	struct pt_buf notes;            /* format-specific info lines */
	char *version;                  /* "version" record, trimmed */

	struct pt_tree *tree;
	/* memory owned by the checkpoint, freed at close */
	void **owned;
	size_t n_owned, cap_owned;
};

/* Keep @p (malloc()ed) until close; returns @p, or NULL (and frees it) when
 * out of memory. */
void *pt__own(struct pt_ckpt *ck, void *p);

/* Add a warning line (deduplicated). */
void pt__warn(struct pt_ckpt *ck, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Decode a pickle held in @buf (ownership passes to ck) and record it. */
int pt__load_pickle(struct pt_ckpt *ck, uint8_t *buf, size_t len,
		    const char *label, uint64_t file_off,
		    struct pt_value **root, size_t *used,
		    struct pt_error *err);

/* torch.c: classify every value reachable from ck->root, building tensors
 * and validating their byte ranges.  Values not reachable stay UNSET. */
int pt__classify(struct pt_ckpt *ck, struct pt_error *err);

/* torch.c: a value's class (after pt__classify); scalars report
 * PT_C_SCALAR, unreachable values are classified on the fly. */
enum pt_vclass pt__vclass(const struct pt_value *v);

/* torch.c: read tensor bytes in C order. */
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

/* Formats (fmt_*.c). */
extern const struct pt_format pt_fmt_zip;

#endif /* PTFS_CORE_CKPT_I_H */
