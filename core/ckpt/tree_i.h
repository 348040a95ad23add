/* SPDX-License-Identifier: MIT */
/*
 * tree_i.h -- the tree's internals, shared by the files that build and
 * read it (not part of any API):
 *
 *   entries.c    a directory's entry table, named after LAYOUT.md's rules
 *   tree.c       nodes made on first use, lookups, the walk, tree.json
 *   node.c       a node's attributes and contents
 *   dotptfs.c    the table of /.ptfs and its records/
 *   generated.c  generated directories and files under /.ptfs
 *   accessors.c  what exporters read of a node
 *   pictures.c   NAME.png beside tensors (-o previews)
 *   sidecars.c   the sidecars a reader is likely to read next
 *   committed.c  the tree after a commit
 *
 * No two of them call each other (contrib/check-structure.py).  Lowest
 * first: entries.c and accessors.c call none of the others; dotptfs.c,
 * generated.c and sidecars.c call entries.c; tree.c calls those;
 * pictures.c and committed.c call tree.c; node.c calls pictures.c.
 */
#ifndef PTFS_CORE_CKPT_TREE_I_H
#define PTFS_CORE_CKPT_TREE_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/error.h"
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_i.h"

/* A tensor's own file is NAME.tensor in the suffix layout (LAYOUT.md
 * "NAME.tensor with -o suffix"). */
#define PT_TENSOR_SFX ".tensor"
#define PT_TENSOR_SFX_LEN 7

enum role {
	R_VALUE,        /* a pickle value */
	R_JSON,         /* NAME.json of a tensor value */
	R_META,         /* /.ptfs */
	R_RECDIR,       /* a folder made of name parts: /.ptfs/records, and
			 * the levels of dotted keys with the nested option */
	R_RECORD,       /* a raw archive record */
	R_GEN,          /* generated text under /.ptfs */
	R_BLOB,         /* a format's file under /.ptfs (ck->meta_files) */
	R_VDIR,         /* a generated directory, filled on first use */
	R_VFILE,        /* a generated file (struct pt_vfile) */
	R_PNG,          /* NAME.png of a tensor value (opts.previews) */
};

enum gen {
	GEN_INFO,
	GEN_TREE,
	GEN_PICKLE,
};

/* An entry and its name live in the tree's pool (pool_alloc): 40,000
 * entries of a 20,000-tensor directory cost no malloc each. */
struct dent {
	const char *name;               /* encoded, unique in its table */
	struct pt_value *val;           /* R_VALUE, R_JSON */
	union {
		const struct pt_value *key; /* R_VALUE: a dict key that is
					     * not a str (or that the name no
					     * longer spells), else NULL */
		const struct pt_zip_entry *entry; /* R_RECORD */
		struct dtab *sub;               /* R_RECDIR */
		enum gen gen;                   /* R_GEN */
		const struct pt_meta_file *blob; /* R_BLOB */
		struct pt_vfile *vf;            /* R_VFILE */
	};
	uint32_t idx;                   /* position in the table */
	uint32_t hash;                  /* of the name (pt_hash_name) */
	uint8_t role;
	bool hidden;                    /* removed by an edit, its index
					 * kept (pt__tree_hide()) */
};

struct dtab {
	struct dent **ents;             /* n entries, listing order */
	size_t n;
	size_t cap;
	size_t n_hidden;                /* of them, hidden by edits */
	uint32_t *slots;                /* by name: open addressing, idx + 1
					 * and a hash tag (slot_of(); 0:
					 * empty), nslots a power of two at
					 * least twice n */
	size_t nslots;
	struct pt_tree *t;              /* the tree it belongs to */
	int err;                        /* a directory that cannot be listed
					 * (-EFBIG past max_dir_entries, ...):
					 * kept, empty, so that every later
					 * call gets the error at once */
	/* Only in a value's table with opts.editable: where each entry's
	 * value sits in the graph (rec[idx], for R_VALUE entries), and the
	 * place of the value being added. */
	struct pt_slot *rec;
	size_t cap_rec;
	struct pt_slot cur;
	struct pt_value *of;            /* the directory value whose table
					 * it is, whose aux points to it */
	struct pt_node **users;         /* the nodes listing it, for an
					 * edit to retire (pt__tree_touched()) */
	size_t n_users, cap_users;
	bool users_lost;                /* out of memory: look at every node */
};

/* Pool blocks: 64 KiB, or one of its own for a long name. */
#define POOL_BLOCK (64u << 10)

struct pool_blk {
	struct pool_blk *next;
	size_t used, size;
	max_align_t data[];
};

/* What a node's union holds (set with the node, never changed). */
enum node_u {
	U_NONE,         /* directories, and files without one */
	U_TENSOR,       /* tensor files and their NAME.json */
	U_DATA,         /* contents held in memory (text, bytes, links,
			 * /.ptfs blobs) */
	U_ENTRY,        /* R_RECORD */
	U_VF,           /* R_VFILE */
	U_PIC,          /* R_PNG */
};

/* 72 bytes: one per listed entry (40,000 for a 20,000-tensor state
 * dict listed with its sidecars), so what only some roles need shares
 * one union, read through node_tensor() and its siblings. */
struct pt_node {
	struct pt_node *parent;
	const char *name;
	uint64_t id;
	struct pt_value *val;
	const struct pt_value *key;     /* a dict key that is not a str */
	uint64_t size;
	uint32_t depth;
	uint8_t type;                   /* enum pt_ntype */
	uint8_t role;
	uint8_t uk;                     /* enum node_u */
	bool pushed;                    /* returned by pt_tree_next_sidecars() */
	union {
		struct {                /* PT_NT_DIR */
			struct dtab *tab;
			struct pt_node **kids; /* slot per entry */
		} dir;
		const struct pt_tensor *tensor;
		const uint8_t *data;
		const struct pt_zip_entry *entry;
		struct pt_vfile *vf;
		struct pt_pic *pic;
	} u;
};

#define NODE_GET(fn, type, field, kind) \
	static inline type fn(const struct pt_node *n) \
	{ \
		return n->uk == (kind) ? n->u.field : NULL; \
	}
NODE_GET(node_tensor, const struct pt_tensor *, tensor, U_TENSOR)
NODE_GET(node_data, const uint8_t *, data, U_DATA)
NODE_GET(node_entry, const struct pt_zip_entry *, entry, U_ENTRY)
NODE_GET(node_vf, struct pt_vfile *, vf, U_VF)
NODE_GET(node_pic, struct pt_pic *, pic, U_PIC)
#undef NODE_GET

/* Generated directories of /.ptfs (export, stats). */
#define PT_VDIRS 4

/* Nodes are carved from blocks: no allocation per node, and a node's
 * address (its inode number) never changes. */
#define NODE_BLOCK 256

struct node_blk {
	struct node_blk *next;
	size_t used;
	struct pt_node n[NODE_BLOCK];
};

struct pt_tree {
	pthread_mutex_t lock;
	struct pt_node *root;
	struct dtab *meta_tab;
	uint64_t next_id;
	struct dtab **tabs;             /* every table, for freeing */
	size_t n_tabs, cap_tabs;
	struct node_blk *blks;          /* every node, newest block first */
	struct pool_blk *pool;          /* entries and names of the tables */
	struct pt_buf scratch;          /* sizes of sidecars (under lock) */
	struct pt_buf kraw, kenc;       /* a key's text and its name, and */
	char *kname;                    /* the names pt__tab_claim() tries, kept
					 * between keys (tables are filled
					 * under the lock) */
	size_t kname_cap;
	char **texts;                   /* generated contents */
	size_t n_texts, cap_texts;
	bool nested;                    /* dotted keys as directories */
	bool suffix;                    /* tensor files are NAME.tensor */
	const char *vname[PT_VDIRS];    /* the R_VDIR entries of /.ptfs */
	pt_vdir_fill vfill[PT_VDIRS];   /* fill them */
	void *vfill_ctx[PT_VDIRS];
	size_t n_vdirs;
	pthread_mutex_t vlock;          /* one fill at a time */
	char vmsg[PT_VDIRS][sizeof(((struct pt_error *)0)->msg)]; /* why a fill failed (under vlock) */
	bool vmsg_new[PT_VDIRS];        /* not taken yet */
	pthread_mutex_t glock;          /* R_GEN contents and sizes, which
					 * pt_tree_committed() swaps */
	pt_picture_fn pic_fn;           /* makes NAME.png (pictures.c) */
	pt_picture_size_fn pic_size_fn; /* and tells its size */
	void *pic_ctx;
	bool previews;                  /* NAME.png beside tensors */
	struct pt_vfile **vfiles;       /* every generated file, for freeing */
	size_t n_vfiles, cap_vfiles;
	struct retired *retired;        /* directories an edit changed: */
	size_t n_retired, cap_retired;  /* what they showed before */
	uint64_t retired_entries;       /* entries of their tables, the
					 * memory edits hold until close */
	struct moved *moved;            /* nodes whose value an edit moved, */
	size_t n_moved, cap_moved;      /* until their new place is listed */
};

/*
 * A directory node whose listing an edit changed (pt__tree_touched()):
 * its table and children before the edit, kept until close (a thread may
 * still read them), so that the children it makes again from the new
 * table are the old nodes wherever the entry is the same one.
 */
struct retired {
	struct pt_node *dir;
	struct dtab *tab;
	struct pt_node **kids;
};

struct moved {
	struct pt_node *n;
	const struct pt_value *to;      /* the directory value it went to */
};

/*
 * A picture's size is told by the front end from the tensor's shape on
 * its first stat; the picture is made whole by the front end's maker on
 * its first read, under the node's own mutex (other lookups never wait
 * for it), and kept until close or a reset.  Lock order: a picture's, then the tree's
 * (finding the tensor file takes the tree lock).
 */
struct pt_pic {
	pthread_mutex_t mu;
	struct pt_ckpt *ck;
	struct pt_node *parent;         /* the tensor's folder */
	bool sized;                     /* size known (or 0: no picture) */
	uint64_t size;
	bool done;
	int rc;
	uint8_t *data;
	size_t len;
};

/* ---- entries.c ---- */

/* A new empty table of @t (freed with the tree), or NULL. */
struct dtab *pt__tab_new(struct pt_tree *t);
/* Drop every entry of @d / free @d (NULL is fine). */
void pt__tab_clear(struct dtab *d);
void pt__tab_free(struct dtab *d);
/* The entry named @name (@len bytes) of @d, or NULL; whether there is one. */
struct dent *pt__tab_find(const struct dtab *d, const char *name, size_t len);
bool pt__tab_has(const struct dtab *d, const char *name, size_t len);
/* Add an entry (@name encoded, not yet in @d; copied); NULL when out of
 * memory. */
struct dent *pt__tab_add(struct dtab *d, const char *name, size_t len,
			 uint8_t role, struct pt_value *val);
/* The value a TorchScript wrapper (restore_type_tag, build_*list) stands
 * for; @v itself otherwise. */
struct pt_value *pt__tree_deref(struct pt_value *v);
/* Does @v show as a directory (a mapping, a sequence, an object)? */
bool pt__is_dir_class(const struct pt_value *v);
/* An item removed from a list while its siblings keep their names
 * (pt_edit_keep_names()): listed as nothing, its index kept. */
extern struct pt_value pt__hole;
/* Claim a name for @val in @d (LAYOUT.md rule 5): 0, -ENOMEM, -EFBIG. */
int pt__tab_claim(struct dtab *d, const char *base, size_t blen,
		  struct pt_value *val);
/* Fill @d with the entries of directory value @v, within the entry cap. */
int pt__tab_fill_value(struct pt_ckpt *ck, struct dtab *d, struct pt_value *v);
/* The table of directory value @v, built on first use; NULL with *@rc. */
struct dtab *pt__value_tab(struct pt_ckpt *ck, struct pt_value *v, int *rc);
/* Where the values of the entries of directory value @dir sit in the
 * graph (the slots its table took them from: a checkpoint opened with
 * opts.editable records them), in listing order, with their names (in the
 * tree's pool): a malloc()ed array in *@out.  0 or -ENOMEM (or the error
 * listing @dir gives, -EINVAL without opts.editable).  Not under the tree
 * lock (the table may be filled); the caller makes the only edits. */
struct pt_entry_slot {
	const char *name;
	struct pt_slot slot;
};
int pt__entry_slots(struct pt_ckpt *ck, struct pt_value *dir,
		    struct pt_entry_slot **out, size_t *n);
/* The slot of the one entry @name of directory value @dir, the same way
 * (found by name: one edit costs no pass over the directory): 0,
 * -ENOENT, or the errors of pt__entry_slots(). */
int pt__entry_slot(struct pt_ckpt *ck, struct pt_value *dir, const char *name,
		   struct pt_slot *out);

/* ---- dotptfs.c (call both under the tree lock) ---- */

/* The table of /.ptfs, built on first use; NULL with *@rc. */
struct dtab *pt__meta_table(struct pt_ckpt *ck, int *rc);
/* The table of /.ptfs/records into *@out; 0 or -ENOMEM. */
int pt__records_table(struct pt_ckpt *ck, struct dtab **out);

/* ---- generated.c ---- */

/* The table of generated directory @dir, filled on first use (outside
 * the tree lock); NULL with *@rc. */
struct dtab *pt__vdir_tab(struct pt_ckpt *ck, struct pt_node *dir, int *rc);
/* Generated files with a remake op make their contents again. */
void pt__vfiles_remake(struct pt_tree *t);

/* ---- tree.c ---- */

/* The text of /.ptfs's generated file @g into @b: 0, or -EINTR. */
int pt__gen_text(struct pt_ckpt *ck, enum gen g, struct pt_buf *b);
/* The nodes made so far @pick says yes to (under the tree lock), in a
 * malloc()ed array of *@count; NULL when out of memory. */
struct pt_node **pt__tree_nodes_where(struct pt_ckpt *ck,
				      bool (*pick)(struct pt_ckpt *ck,
						   struct pt_node *n, void *ctx),
				      void *ctx, size_t *count);

/* The listing of directory value @v changed (an edit): its table is
 * retired and every directory node showing it lists it again on next use,
 * keeping the children whose entry stayed the same.  Under the tree lock. */
void pt__tree_touched(struct pt_ckpt *ck, struct pt_value *v);
/* Entry @name of directory value @v left it, its slot in the graph a
 * hole (an edit with pt_edit_keep_names()): its table, if it has one,
 * hides the entry and its NAME.json, NAME.png in place (lookups miss
 * them, listings skip their indexes), and every other entry, node and
 * index stays.  Under the tree lock. */
void pt__tree_hide(struct pt_ckpt *ck, struct pt_value *v, const char *name);
/* The value of node @n moved to an entry of directory value @to (an
 * edit): the node its new entry gets is @n itself, renamed (a mount's
 * inode keeps its identity across a rename, as POSIX says).  Under the
 * tree lock. */
void pt__tree_moved(struct pt_ckpt *ck, struct pt_node *n,
		    const struct pt_value *to);

/* ---- pictures.c ---- */

/* The size of picture @n, drawing it first (0 when it cannot be drawn),
 * and @len bytes of it at @off. */
uint64_t pt__pic_size(const struct pt_node *n);
ssize_t pt__pic_read(const struct pt_node *n, void *buf, size_t len,
		     uint64_t off, struct pt_error *err);

#endif /* PTFS_CORE_CKPT_TREE_I_H */
