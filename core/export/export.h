/* SPDX-License-Identifier: MIT */
/*
 * export.h -- writing a checkpoint's tensors in the forms other tools read:
 * safetensors (one file or hub-style shards), a tree of .npy files, a
 * torch.save archive.  The safetensors and .npy writers use only the
 * public checkpoint API (ckpt.h); two files reach below it through
 * ckpt/ckpt_i.h: ptsave.c (`--to pt`) reads the decoded values and whole
 * storages (pt__vclass, pt__tensor_read) to re-pickle them, and wonly.c
 * the kept pickles (pt__pickle_input) to scan them as torch's weights-only
 * unpickler would.  Through the public API every tensor is read with
 * pt_node_read() (views come out materialised in C order) or, where its
 * bytes lie contiguous in a local file, copied with copy_file_range() from
 * pt_node_extent().  Memory stays bounded by one copy buffer plus the
 * headers, whatever the checkpoint's size.
 *
 * Every output file is written to a temporary file in its directory,
 * fsync()ed, checked against a change of the checkpoint, and renamed into
 * place: an output either appears whole or not at all.
 */
#ifndef PTFS_CORE_EXPORT_EXPORT_H
#define PTFS_CORE_EXPORT_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "ckpt/ckpt.h"
#include "base/error.h"

/* One tensor of the checkpoint, in tree order. */
struct pt_xitem {
	char *key;              /* dotted path, names decoded
				 * ("model.h.0.attn.weight") */
	char *path;             /* tree path as mounted ("model/h/0/...") */
	struct pt_node *node;
	struct pt_tinfo ti;
};

/* One non-tensor value (a scalar file of the tree). */
struct pt_xmeta {
	char *key;              /* dotted path */
	char *json;             /* its value as JSON text */
};

struct pt_xlist {
	struct pt_xitem *v;
	size_t n, cap;
	struct pt_xmeta *m;
	size_t nm, capm;
};

/*
 * Walk the whole tree of @ck and list its tensors and scalar values.
 * Values that have no place in a flat export (bytes, repeated containers)
 * get one line each in @notes.  0 or a negative errno with @err set.
 */
int pt_export_collect(struct pt_ckpt *ck, struct pt_xlist *xl,
		      struct pt_buf *notes, struct pt_error *err);
void pt_export_list_free(struct pt_xlist *xl);

struct pt_export_opts {
	uint64_t shard_size;    /* safetensors: 0 one file, else at most this
				 * many tensor bytes per shard */
	bool skip_unsupported;  /* leave out tensors the form cannot express
				 * (listed in the notes) instead of failing */
	bool no_fsync;          /* rename without fsync first: faster, but a
				 * power loss may then leave OUT incomplete */
};

/*
 * One target of `ptfs export --to NAME`, an entry of pt_exporters[]
 * (exporters.c).  The command line (fs/export.c: --to, the options each
 * target accepts, its messages), the usage texts (fs/usage.c) and the
 * mount's /.ptfs/export (vfiles.c) read the table; docs/ARCHITECTURE.md,
 * "How to add an exporter", says what else a new target needs.
 */
struct pt_exporter {
	const char *name;       /* the word after --to: "safetensors" */
	const char *ext;        /* extension of the files it writes:
				 * ".safetensors" */
	const char *summary;    /* what OUT becomes, one line (`ptfs export
				 * --list-targets`) */
	unsigned accepts;       /* PT_XOPT_*: the options beyond --no-fsync
				 * it takes (every target writes through
				 * out.c, which honours --no-fsync) */
	/* Write every tensor of @ck to @out; 0 or a negative errno with @err
	 * set, lines worth saying in @notes. */
	int (*write)(struct pt_ckpt *ck, const char *out,
		     const struct pt_export_opts *opts, struct pt_buf *notes,
		     struct pt_error *err);
	/* Its generated form in a mount: add its files to /.ptfs/export @d
	 * with pt_vdir_add() for the tensors @xl (NULL: it has none).  A
	 * file it cannot make is left out; only a failure such as -ENOMEM
	 * is returned. */
	int (*mount_files)(struct pt_ckpt *ck, struct pt_vdir *d,
			   const struct pt_xlist *xl, struct pt_error *err);
};

#define PT_XOPT_SHARD_SIZE       (1u << 0)      /* --shard-size */
#define PT_XOPT_SKIP_UNSUPPORTED (1u << 1)      /* --skip-unsupported */

/* The targets, NULL-terminated, in the order the usage names them. */
extern const struct pt_exporter *const pt_exporters[];

/* The target called @name, or NULL. */
const struct pt_exporter *pt_exporter_find(const char *name);

/* The names of the targets that accept all of @xopts (PT_XOPT_*; 0: every
 * target) into @out: joined by @sep, the last two by @last ("|", "|":
 * "safetensors|pt|npy"; ", ", " or ": "safetensors, pt or npy"). */
void pt_exporter_names(unsigned xopts, const char *sep, const char *last,
		       char *out, size_t cap);

/*
 * safetensors: @out is the file to write, or with opts->shard_size the
 * directory to write model-0000N-of-0000M.safetensors and
 * model.safetensors.index.json into (model.safetensors alone when one
 * shard holds everything, as the hub's save_pretrained does).
 */
int pt_export_safetensors(struct pt_ckpt *ck, const char *out,
			  const struct pt_export_opts *opts,
			  struct pt_buf *notes, struct pt_error *err);

/* pt: a torch.save ZIP at @out that torch.load(weights_only=True) of
 * torch >= 2.6 accepts (ptsave.c says what is converted, in @notes). */
int pt_export_pt(struct pt_ckpt *ck, const char *out,
		 const struct pt_export_opts *opts, struct pt_buf *notes,
		 struct pt_error *err);

/* Would torch.load(weights_only=True) of torch >= 2.6 accept @ck?  1 yes,
 * 0 no; appends the verdict and every global and opcode that stops it. */
int pt_weights_only(struct pt_ckpt *ck, struct pt_buf *out);

/* npy: @outdir (created; must not exist or be empty) gets one PATH.npy per
 * tensor at its tree path and PATH.json with its metadata. */
int pt_export_npy(struct pt_ckpt *ck, const char *outdir,
		  const struct pt_export_opts *opts, struct pt_buf *notes,
		  struct pt_error *err);

/* ---- the .npy form of one tensor (also for generated files) ---- */

struct pt_npy {
	char descr[8];          /* numpy type string: "<f4", "|b1", ... */
	const char *npy_dtype;  /* numpy dtype name when the data is
				 * converted ("float32"), else NULL */
	unsigned in_size;       /* bytes per element in the checkpoint */
	unsigned out_size;      /* bytes per element in the .npy */
	int conv;               /* conversion (npy.c), 0 none */
	bool swap;              /* converting from big-endian bytes */
	uint64_t data_bytes;    /* bytes after the header */
};

/* How tensor @ti appears as .npy; false (with @err) when it cannot. */
bool pt_npy_plan(const struct pt_tinfo *ti, struct pt_npy *np,
		 struct pt_error *err);

/* Append the .npy header (magic, version, dict, padding to 64 bytes). */
void pt_npy_header(const struct pt_tinfo *ti, const struct pt_npy *np,
		   struct pt_buf *out);

/* Convert @n elements at @in (np->in_size each) into @out
 * (np->out_size each). */
void pt_npy_convert(const struct pt_npy *np, const uint8_t *in, uint8_t *out,
		    size_t n);

/* ---- shared by the CLI writers and the mount's generated files ---- */

/* safetensors.c: the tensors a file holds, sorted by key (see
 * pt_export_safetensors), and its header (JSON, padded; without the
 * 8-byte length). */
int pt__st_plan(const struct pt_xlist *xl, const struct pt_export_opts *opts,
		size_t **order, size_t *n, struct pt_buf *notes,
		struct pt_error *err);
void pt__st_header(const struct pt_xlist *xl, const size_t *idx, size_t n,
		   struct pt_buf *h);

/* npytree.c: NAME.json of a tensor's .npy (its metadata, "npy_descr",
 * and "npy_dtype" when converted). */
void pt__npy_json(struct pt_ckpt *ck, struct pt_node *n,
		  const struct pt_npy *np, struct pt_buf *out);

/* The generated forms (struct pt_exporter's mount_files):
 * /.ptfs/export/model.safetensors (safetensors.c) and
 * /.ptfs/export/npy/PATH.npy with PATH.json (npytree.c). */
int pt__st_mount_files(struct pt_ckpt *ck, struct pt_vdir *d,
		       const struct pt_xlist *xl, struct pt_error *err);
int pt__npy_mount_files(struct pt_ckpt *ck, struct pt_vdir *d,
			const struct pt_xlist *xl, struct pt_error *err);

/* vfiles.c: /.ptfs/export in the mount, every target's generated form
 * (call right after opening; see pt_tree_set_vdir). */
int pt_export_mount_files(struct pt_ckpt *ck);

/* ---- output files (out.c) ---- */

struct pt_xout {
	int fd;
	char *tmp;              /* temporary name beside the final one */
	char *path;             /* final name */
	uint64_t off;           /* bytes written */
	bool direct;            /* written under its final name (inside a
				 * directory that is itself renamed) */
	bool nosync;            /* no fsync before the rename */
};

/* Create the temporary file for @path (mode 0644 less umask).  On failure
 * @o holds nothing (pt_xout_abort() is then harmless, not needed). */
int pt_xout_open(struct pt_xout *o, const char *path, struct pt_error *err);
/* Create @path itself (O_EXCL), for files inside a temporary directory;
 * pt_xout_commit() then only closes it.  On failure as pt_xout_open(). */
int pt_xout_create(struct pt_xout *o, const char *path, struct pt_error *err);
int pt_xout_write(struct pt_xout *o, const void *p, size_t n,
		  struct pt_error *err);
/* Append the bytes of tensor file @node (@ti), byte-swapped per element
 * when @swap: copy_file_range() where they are contiguous in a file. */
int pt_xout_tensor(struct pt_xout *o, struct pt_ckpt *ck, struct pt_node *node,
		   const struct pt_tinfo *ti, bool swap, struct pt_error *err);
/* Append the data of tensor @node in its .npy form @np (converted when
 * np->conv). */
int pt_xout_npy_data(struct pt_xout *o, struct pt_ckpt *ck,
		     struct pt_node *node, const struct pt_tinfo *ti,
		     const struct pt_npy *np, struct pt_error *err);
/* fsync, check @ck did not change, rename into place, fsync the dir. */
int pt_xout_commit(struct pt_xout *o, struct pt_ckpt *ck, struct pt_error *err);
/* Remove the temporary file (after a failure; harmless after commit). */
void pt_xout_abort(struct pt_xout *o);

/* Bytes [@rel, @rel + @n) of tensor file @node in C order.  Views are
 * gathered from their storage in pieces of at most PT_VIEW_PIECE bytes
 * (one read of the range they touch when it fits), not through a copy of
 * their whole window per call. */
#define PT_VIEW_PIECE (8u << 20)
int pt_view_read(struct pt_ckpt *ck, struct pt_node *node,
		 const struct pt_tinfo *ti, void *dst, size_t n, uint64_t rel,
		 struct pt_error *err);
/* pt_view_read(), byte-swapped per element when @swap (complex: per
 * half). */
int pt__view_read_swapped(struct pt_ckpt *ck, struct pt_node *node,
			  const struct pt_tinfo *ti, uint8_t *dst, size_t n,
			  uint64_t rel, bool swap, struct pt_error *err);
/* Output chunk for views in the CLI writers: fewer passes over a view's
 * storage range (each chunk reads it once). */
#define PT_VIEW_CHUNK (16u << 20)

/* The 1 MiB copy buffer (allocated once per thread, freed at exit). */
uint8_t *pt__xbuf(size_t *len);
#define PT_XBUF_SIZE (1u << 20)

/* Swap bytes of @n elements of @size bytes at @p (complex: the caller
 * passes the component size). */
void pt_swap_elems(uint8_t *p, size_t n, unsigned size);

#endif /* PTFS_CORE_EXPORT_EXPORT_H */
