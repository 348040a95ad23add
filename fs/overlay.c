/* SPDX-License-Identifier: MIT */
/*
 * overlay.c -- uncommitted writes, per storage, in 64 KiB chunks, and the
 * sources that lay them over the files the storages lie in: the
 * checkpoint's (ov_source), and an ONNX model's data files beside it (laid
 * by ov_get() when a storage there is first used): every read of tensor
 * bytes in core goes through them (pt_ckpt_set_layer).
 */
#include "overlay.h"

#include "base/buf.h"
#include "ckpt/pending.h"
#include "io/source.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uthash.h>
#include <utlist.h>

/* An inode opened over a storage: how many handles hold it now, and the
 * storage's writes when it was last opened (its pages were right then).
 * Kept after its last close, by inode; those open now are also listed. */
struct ov_open {
	uint64_t ino;                   /* key */
	size_t handles;
	uint64_t seen;
	struct ov_open *prev, *next;    /* in ov_st.open_now while handles */
	UT_hash_handle hh;
};

/* A file storages lie in, and the source over it with their writes. */
struct ov_file {
	struct ov *o;
	struct pt_ckpt *ck;             /* the checkpoint over that file */
	struct pt_source src;           /* its layer */
};

struct ov_st {
	const struct pt_storage *st;
	struct ov_file *file;           /* the file it lies in */
	uint64_t size;                  /* storage bytes */
	uint64_t file_off;              /* where the storage is in the file */
	pthread_rwlock_t lock;          /* guards chunks */
	uint8_t **chunks;               /* (size + OV_CHUNK - 1) / OV_CHUNK */
	size_t nchunks;
	bool dirty;                     /* some chunk is set (atomic) */
	bool live;                      /* in ov.live (atomic) */
	int writers;                    /* handles open for writing (atomic) */
	uint64_t writes;                /* changes of its bytes (atomic) */
	pthread_mutex_t open_lock;
	struct ov_open *opened;         /* inodes of tensor files opened */
	struct ov_open *open_now;       /* those with handles */
	size_t n_open;                  /* in open_now */
};

struct ov {
	struct pt_ckpt *ck;
	size_t n;                       /* storages */
	struct ov_st **by_index;        /* n slots, filled on first use */
	pthread_mutex_t lock;           /* creation of slots */
	pthread_mutex_t commit_lock;    /* one commit at a time */
	pthread_rwlock_t gate;          /* writers shared, a commit alone */
	/* the storages ever written, which reads look at: live[0 .. nlive)
	 * (appended under lock, nlive published last; never removed) */
	struct ov_st **live;
	size_t nlive;
	struct ov_file main;            /* the checkpoint's file: ov_source() */
	struct ov_file **files;         /* data files beside it (under lock) */
	size_t nfiles, capfiles;
};

static const struct pt_source_ops ov_source_ops;

static void file_init(struct ov_file *f, struct ov *o, struct pt_ckpt *ck)
{
	f->o = o;
	f->ck = ck;
	f->src = (struct pt_source){
		.ops = &ov_source_ops,
		.size = pt_ckpt_source(ck)->size,
		.name = pt_ckpt_source(ck)->name,
		.mtime = pt_ckpt_mtime(ck),
		.priv = f,
	};
}

struct ov *ov_new(struct pt_ckpt *ck)
{
	struct ov *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->ck = ck;
	o->n = pt_ckpt_storage_count(ck);
	o->by_index = calloc(o->n ? o->n : 1, sizeof(*o->by_index));
	o->live = calloc(o->n ? o->n : 1, sizeof(*o->live));
	if (!o->by_index || !o->live) {
		free(o->by_index);
		free(o->live);
		free(o);
		return NULL;
	}
	file_init(&o->main, o, ck);
	pthread_mutex_init(&o->lock, NULL);
	pthread_mutex_init(&o->commit_lock, NULL);
	pthread_rwlock_init(&o->gate, NULL);
	return o;
}

static void st_free(struct ov_st *s)
{
	size_t i;

	if (!s)
		return;
	if (s->chunks)
		for (i = 0; i < s->nchunks; i++)
			free(s->chunks[i]);
	free(s->chunks);
	{
		struct ov_open *e, *tmp;

		HASH_ITER(hh, s->opened, e, tmp) {
			HASH_DEL(s->opened, e);
			free(e);
		}
	}
	pthread_rwlock_destroy(&s->lock);
	pthread_mutex_destroy(&s->open_lock);
	free(s);
}

void ov_free(struct ov *o)
{
	size_t i;

	if (!o)
		return;
	pt_ckpt_set_layer(o->ck, NULL);
	for (i = 0; i < o->nfiles; i++) {
		pt_ckpt_set_layer(o->files[i]->ck, NULL);
		free(o->files[i]);
	}
	free(o->files);
	for (i = 0; i < o->n; i++)
		st_free(o->by_index[i]);
	free(o->by_index);
	free(o->live);
	pthread_mutex_destroy(&o->lock);
	pthread_mutex_destroy(&o->commit_lock);
	pthread_rwlock_destroy(&o->gate);
	free(o);
}

/* The file @st lies in: the checkpoint's, or a data file beside it, whose
 * layer is laid here, before the storage's first write.  Under o->lock;
 * NULL when out of memory. */
static struct ov_file *file_of(struct ov *o, const struct pt_storage *st)
{
	struct pt_ckpt *ck = pt_storage_file_ckpt(o->ck, st);
	struct ov_file *f;
	size_t i;

	if (ck == o->ck)
		return &o->main;
	for (i = 0; i < o->nfiles; i++)
		if (o->files[i]->ck == ck)
			return o->files[i];
	if (!pt_grow((void **)&o->files, &o->capfiles, o->nfiles, sizeof(*o->files)))
		return NULL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	file_init(f, o, ck);
	o->files[o->nfiles++] = f;
	pt_ckpt_set_layer(ck, &f->src);
	return f;
}

struct ov_st *ov_get(struct ov *o, const struct pt_storage *st, bool create)
{
	size_t i = pt_storage_index(st);
	struct ov_st *s;

	if (i >= o->n)
		return NULL;
	s = __atomic_load_n(&o->by_index[i], __ATOMIC_ACQUIRE);
	if (s || !create)
		return s;
	pthread_mutex_lock(&o->lock);
	s = o->by_index[i];
	if (!s) {
		struct ov_file *f = file_of(o, st);

		s = f ? calloc(1, sizeof(*s)) : NULL;
		if (s) {
			s->st = st;
			s->file = f;
			s->size = pt_storage_size(st);
			s->file_off = pt_storage_file_offset(st);
			s->nchunks = (size_t)((s->size + OV_CHUNK - 1) / OV_CHUNK);
			pthread_rwlock_init(&s->lock, NULL);
			pthread_mutex_init(&s->open_lock, NULL);
			__atomic_store_n(&o->by_index[i], s, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&o->lock);
	return s;
}

bool ov_dirty(const struct ov_st *s)
{
	return s && __atomic_load_n(&s->dirty, __ATOMIC_ACQUIRE);
}

bool ov_any_dirty(struct ov *o)
{
	size_t i;

	for (i = 0; i < o->n; i++)
		if (ov_dirty(__atomic_load_n(&o->by_index[i], __ATOMIC_ACQUIRE)))
			return true;
	return false;
}

/* List @s among the storages reads look at: before its first chunk. */
static void note_live(struct ov *o, struct ov_st *s)
{
	if (__atomic_load_n(&s->live, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&o->lock);
	if (!s->live) {
		o->live[o->nlive] = s;
		__atomic_store_n(&o->nlive, o->nlive + 1, __ATOMIC_RELEASE);
		__atomic_store_n(&s->live, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&o->lock);
}

/* @n bytes at @off of the file @s lies in; 0 or -errno. */
static int pread_full(const struct ov_st *s, void *buf, size_t n,
		      uint64_t off)
{
	struct pt_error err;

	pt_error_clear(&err);
	return pt_ckpt_read(s->file->ck, buf, n, off, &err);
}

/* The chunk @ci, loaded from the file on first use.  Write lock held. */
static uint8_t *chunk(struct ov_st *s, size_t ci, int *rc)
{
	uint64_t start = (uint64_t)ci * OV_CHUNK;
	size_t len = (size_t)(s->size - start < OV_CHUNK ? s->size - start : OV_CHUNK);
	uint8_t *c;

	if (!s->chunks) {
		s->chunks = calloc(s->nchunks ? s->nchunks : 1, sizeof(*s->chunks));
		if (!s->chunks) {
			*rc = -ENOMEM;
			return NULL;
		}
	}
	if (s->chunks[ci])
		return s->chunks[ci];
	c = malloc(OV_CHUNK);
	if (!c) {
		*rc = -ENOMEM;
		return NULL;
	}
	*rc = pread_full(s, c, len, s->file_off + start);
	if (*rc) {
		free(c);
		return NULL;
	}
	s->chunks[ci] = c;
	return c;
}

/* Apply @fn to bytes [off, off+n), chunk by chunk, under the write lock. */
static int each_chunk(struct ov *o, struct ov_st *s, uint64_t off, uint64_t n,
		      const uint8_t *src, bool zero)
{
	int rc = 0;

	if (off > s->size || n > s->size - off)
		return -EFBIG;
	note_live(o, s);
	pthread_rwlock_rdlock(&o->gate);
	pthread_rwlock_wrlock(&s->lock);
	while (n > 0) {
		size_t ci = (size_t)(off / OV_CHUNK);
		size_t in = (size_t)(off % OV_CHUNK);
		size_t k = OV_CHUNK - in < n ? OV_CHUNK - in : (size_t)n;
		uint8_t *c = chunk(s, ci, &rc);

		if (!c)
			break;
		if (zero)
			memset(c + in, 0, k);
		else
			memcpy(c + in, src, k);
		if (src)
			src += k;
		off += k;
		n -= k;
		__atomic_store_n(&s->dirty, true, __ATOMIC_RELEASE);
	}
	pthread_rwlock_unlock(&s->lock);
	pthread_rwlock_unlock(&o->gate);
	__atomic_add_fetch(&s->writes, 1, __ATOMIC_ACQ_REL);
	pt_ckpt_bytes_changed(o->ck, s->st);    /* views gathered from it */
	return rc;
}

int ov_write(struct ov *o, struct ov_st *s, const void *buf, size_t n,
	     uint64_t off)
{
	return each_chunk(o, s, off, n, buf, false);
}

int ov_zero(struct ov *o, struct ov_st *s, uint64_t off, uint64_t n)
{
	return each_chunk(o, s, off, n, NULL, true);
}

struct ov_snap {
	uint64_t off, n;                /* the range, in the storage */
	size_t c0, nc;                  /* its first chunk, how many */
	uint8_t **chunks;               /* nc copies; NULL: not written then */
};

void ov_snap_free(struct ov_snap *sn)
{
	size_t i;

	if (!sn)
		return;
	for (i = 0; sn->chunks && i < sn->nc; i++)
		free(sn->chunks[i]);
	free(sn->chunks);
	free(sn);
}

struct ov_snap *ov_snapshot(struct ov *o, struct ov_st *s, uint64_t off,
			    uint64_t n, int *rc)
{
	struct ov_snap *sn;
	size_t i;

	*rc = 0;
	if (off > s->size || n > s->size - off) {
		*rc = -EINVAL;
		return NULL;
	}
	sn = calloc(1, sizeof(*sn));
	if (!sn) {
		*rc = -ENOMEM;
		return NULL;
	}
	sn->off = off;
	sn->n = n;
	sn->c0 = (size_t)(off / OV_CHUNK);
	sn->nc = n ? (size_t)((off + n - 1) / OV_CHUNK) - sn->c0 + 1 : 0;
	sn->chunks = calloc(sn->nc ? sn->nc : 1, sizeof(*sn->chunks));
	if (!sn->chunks) {
		free(sn);
		*rc = -ENOMEM;
		return NULL;
	}
	pthread_rwlock_rdlock(&o->gate);
	pthread_rwlock_rdlock(&s->lock);
	for (i = 0; s->chunks && i < sn->nc && !*rc; i++) {
		const uint8_t *c = s->chunks[sn->c0 + i];
		uint64_t start = (uint64_t)(sn->c0 + i) * OV_CHUNK;

		if (!c)
			continue;
		sn->chunks[i] = malloc(OV_CHUNK);
		if (!sn->chunks[i])
			*rc = -ENOMEM;
		else
			memcpy(sn->chunks[i], c, (size_t)(s->size - start < OV_CHUNK ?
							 s->size - start : OV_CHUNK));
	}
	pthread_rwlock_unlock(&s->lock);
	pthread_rwlock_unlock(&o->gate);
	if (*rc) {
		ov_snap_free(sn);
		return NULL;
	}
	return sn;
}

/*
 * Bytes [@off, @off + @n) back to the file's, or to @sn's where it holds a
 * written chunk.  Everything that can fail (reading file bytes, memory) is
 * done before anything changes, so that a failure leaves every change in
 * place (never half reverted).  Only the first and the last chunk of a
 * range can be partly covered: where they go back to the file, their
 * file bytes are read first; a chunk that goes back to @sn's bytes but is
 * gone now is made again from the file's.
 */
static int restore(struct ov *o, struct ov_st *s, uint64_t off, uint64_t n,
		   const struct ov_snap *sn)
{
	struct {
		size_t ci, in, k;
		uint8_t *bytes;
	} part[2];
	uint8_t **fresh = NULL;         /* chunks made again, by ci - c0 */
	size_t np = 0, i, c0 = (size_t)(off / OV_CHUNK);
	uint64_t at, left;
	bool any = false;
	int rc = 0;

	if (off > s->size || n > s->size - off)
		return -EINVAL;
	if (sn)
		note_live(o, s);
	pthread_rwlock_rdlock(&o->gate);
	pthread_rwlock_wrlock(&s->lock);
	if (sn && !s->chunks) {
		s->chunks = calloc(s->nchunks ? s->nchunks : 1, sizeof(*s->chunks));
		if (!s->chunks)
			rc = -ENOMEM;
	}
	/* pass 1: read what the change needs */
	for (at = off, left = n; s->chunks && left > 0 && !rc;) {
		size_t ci = (size_t)(at / OV_CHUNK), in = (size_t)(at % OV_CHUNK);
		size_t k = OV_CHUNK - in < left ? OV_CHUNK - in : (size_t)left;
		uint64_t start = (uint64_t)ci * OV_CHUNK;
		size_t len = (size_t)(s->size - start < OV_CHUNK ? s->size - start : OV_CHUNK);
		const uint8_t *was = sn ? sn->chunks[ci - c0] : NULL;

		if (was && !s->chunks[ci]) {
			if (!fresh)
				fresh = calloc(sn->nc, sizeof(*fresh));
			if (fresh)
				fresh[ci - c0] = malloc(OV_CHUNK);
			if (!fresh || !fresh[ci - c0])
				rc = -ENOMEM;
			else
				rc = pread_full(s, fresh[ci - c0], len, s->file_off + start);
		} else if (!was && s->chunks[ci] && !(in == 0 && k == len)) {
			part[np].bytes = malloc(k);
			if (!part[np].bytes)
				rc = -ENOMEM;
			else
				rc = pread_full(s, part[np].bytes, k, s->file_off + at);
			part[np].ci = ci;
			part[np].in = in;
			part[np++].k = k;
		}
		at += k;
		left -= k;
	}
	/* pass 2: apply, all or nothing */
	for (at = off, left = n; s->chunks && left > 0 && !rc;) {
		size_t ci = (size_t)(at / OV_CHUNK), in = (size_t)(at % OV_CHUNK);
		size_t k = OV_CHUNK - in < left ? OV_CHUNK - in : (size_t)left;
		uint64_t start = (uint64_t)ci * OV_CHUNK;
		size_t len = (size_t)(s->size - start < OV_CHUNK ? s->size - start : OV_CHUNK);
		const uint8_t *was = sn ? sn->chunks[ci - c0] : NULL;

		if (was) {
			if (!s->chunks[ci]) {
				s->chunks[ci] = fresh[ci - c0];
				fresh[ci - c0] = NULL;
			}
			memcpy(s->chunks[ci] + in, was + in, k);
		} else if (s->chunks[ci] && in == 0 && k == len) {
			free(s->chunks[ci]);
			s->chunks[ci] = NULL;
		}
		at += k;
		left -= k;
	}
	for (i = 0; i < np; i++) {
		if (!rc)
			memcpy(s->chunks[part[i].ci] + part[i].in, part[i].bytes,
			       part[i].k);
		free(part[i].bytes);
	}
	for (i = 0; fresh && i < sn->nc; i++)
		free(fresh[i]);
	free(fresh);
	for (i = 0; s->chunks && i < s->nchunks; i++)
		if (s->chunks[i])
			any = true;
	__atomic_store_n(&s->dirty, any, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&s->lock);
	pthread_rwlock_unlock(&o->gate);
	__atomic_add_fetch(&s->writes, 1, __ATOMIC_ACQ_REL);
	pt_ckpt_bytes_changed(o->ck, s->st);
	return rc;
}

int ov_revert(struct ov *o, struct ov_st *s, uint64_t off, uint64_t n)
{
	return restore(o, s, off, n, NULL);
}

int ov_restore(struct ov *o, struct ov_st *s, const struct ov_snap *sn)
{
	return restore(o, s, sn->off, sn->n, sn);
}

/* One piece of a read: either file bytes (mem == NULL) or memory. */
struct ov_seg {
	const uint8_t *mem;     /* overlay bytes, or NULL for the file */
	uint64_t file_off;      /* file offset when mem == NULL */
	size_t len;
};

/*
 * Describe bytes [@off, @off + @n) of the storage as up to @max segments
 * and hold the storage's read lock until read_done(): the memory
 * segments stay valid meanwhile.  Returns the segment count.
 */
static size_t read_begin(struct ov_st *s, uint64_t off, size_t n,
			 struct ov_seg *segs, size_t max)
{
	size_t count = 0;

	pthread_rwlock_rdlock(&s->lock);
	while (n > 0 && count < max) {
		size_t ci = (size_t)(off / OV_CHUNK);
		size_t in = (size_t)(off % OV_CHUNK);
		size_t k = OV_CHUNK - in < n ? OV_CHUNK - in : n;
		const uint8_t *c = s->chunks ? s->chunks[ci] : NULL;

		if (c) {
			segs[count].mem = c + in;
			segs[count].len = k;
			count++;
		} else if (count > 0 && !segs[count - 1].mem) {
			segs[count - 1].len += k; /* extend the file run */
		} else {
			segs[count].mem = NULL;
			segs[count].file_off = s->file_off + off;
			segs[count].len = k;
			count++;
		}
		off += k;
		n -= k;
	}
	return count;
}

static void read_done(struct ov_st *s)
{
	pthread_rwlock_unlock(&s->lock);
}

/* Bytes [@off, @off + @n) of the storage into @buf: the written chunks,
 * the file's bytes between.  0 or -errno. */
static int read_copy(struct ov_st *s, void *buf, size_t n,
		     uint64_t off)
{
	struct ov_seg segs[64];
	uint8_t *p = buf;
	int rc = 0;

	while (n > 0 && rc == 0) {
		size_t k = n < 32 * OV_CHUNK ? n : 32 * OV_CHUNK;
		size_t i, cnt = read_begin(s, off, k, segs, 64);

		for (i = 0; i < cnt && rc == 0; i++) {
			if (segs[i].mem)
				memcpy(p, segs[i].mem, segs[i].len);
			else
				rc = pread_full(s, p, segs[i].len,
						segs[i].file_off);
			p += segs[i].len;
		}
		read_done(s);
		off += k;
		n -= k;
	}
	return rc;
}

struct commit_src {
	struct ov *o;
	struct ov_st *s;
	uint64_t (*ranges)[2];          /* the written chunks, coalesced */
};

/* The chunks written, as (offset, length) runs: a commit then costs what
 * was written (pt_commit.ranges).  The caller holds the gate. */
static int dirty_ranges(struct commit_src *c, struct pt_commit *cm)
{
	struct ov_st *s = c->s;
	size_t k, n = 0;

	if (!s->chunks)
		return 0;               /* no chunk map: the whole storage */
	c->ranges = calloc(s->nchunks ? s->nchunks : 1, sizeof(*c->ranges));
	if (!c->ranges)
		return -ENOMEM;
	for (k = 0; k < s->nchunks; k++) {
		uint64_t lo = (uint64_t)k * OV_CHUNK, hi;

		if (!s->chunks[k])
			continue;
		hi = lo + OV_CHUNK > s->size ? s->size : lo + OV_CHUNK;
		if (n > 0 && c->ranges[n - 1][0] + c->ranges[n - 1][1] == lo)
			c->ranges[n - 1][1] += hi - lo;
		else {
			c->ranges[n][0] = lo;
			c->ranges[n][1] = hi - lo;
			n++;
		}
	}
	cm->ranges = (const uint64_t (*)[2])c->ranges;
	cm->n_ranges = n;
	return 0;
}

static int commit_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	struct commit_src *c = ctx;

	return read_copy(c->s, buf, n, off);
}

/* The dirty storages as commits, in @cs/@src (o->n slots each); the
 * caller holds the gate.  How many, or -ENOMEM. */
static int collect(struct ov *o, struct pt_commit *cs, struct commit_src *src)
{
	size_t i;
	int n = 0;

	for (i = 0; i < o->n; i++) {
		struct ov_st *s = __atomic_load_n(&o->by_index[i], __ATOMIC_ACQUIRE);

		if (!ov_dirty(s))
			continue;
		src[n].o = o;
		src[n].s = s;
		cs[n].st = s->st;
		cs[n].read = commit_read;
		cs[n].ctx = &src[n];
		if (dirty_ranges(&src[n], &cs[n]) != 0)
			return -ENOMEM;
		n++;
	}
	return n;
}

/* What runs on the dirty storages' commits @cs/@src (@n of them). */
typedef int (*dirty_fn)(struct ov *o, struct pt_commit *cs,
			struct commit_src *src, size_t n, void *ctx,
			struct pt_error *err);

/* Under the commit lock and the gate (no write lands meanwhile): the dirty
 * storages as commits, handed to @fn; its result, or -ENOMEM. */
static int with_dirty(struct ov *o, dirty_fn fn, void *ctx, struct pt_error *err)
{
	struct pt_commit *cs;
	struct commit_src *src;
	size_t i;
	int n, rc;

	pthread_mutex_lock(&o->commit_lock);
	pthread_rwlock_wrlock(&o->gate);
	cs = calloc(o->n ? o->n : 1, sizeof(*cs));
	src = calloc(o->n ? o->n : 1, sizeof(*src));
	n = cs && src ? collect(o, cs, src) : -ENOMEM;
	rc = n < 0 ? pt_fail(err, n, "out of memory") : fn(o, cs, src, (size_t)n, ctx, err);
	for (i = 0; src && i < o->n; i++)       /* unused slots hold NULL */
		free(src[i].ranges);
	free(cs);
	free(src);
	pthread_rwlock_unlock(&o->gate);
	pthread_mutex_unlock(&o->commit_lock);
	return rc;
}

struct save_ctx {
	const char *state_dir;
	char **where;
};

static int save_dirty(struct ov *o, struct pt_commit *cs, struct commit_src *src,
		      size_t n, void *ctx, struct pt_error *err)
{
	struct save_ctx *c = ctx;

	(void)src;
	return pt_pending_save(o->ck, cs, n, c->state_dir, c->where, err);
}

int ov_save_pending(struct ov *o, const char *state_dir, char **where,
		    struct pt_error *err)
{
	struct save_ctx c = { state_dir, where };

	*where = NULL;
	return with_dirty(o, save_dirty, &c, err);
}

static int commit_dirty(struct ov *o, struct pt_commit *cs, struct commit_src *src,
			size_t n, void *ctx, struct pt_error *err)
{
	size_t i;
	int rc;

	(void)ctx;
	rc = pt_ckpt_commit(o->ck, cs, n, err);
	if (rc)
		return rc;
	/* a rewrite may have grown or shrunk the file */
	__atomic_store_n(&o->main.src.size, pt_ckpt_source(o->ck)->size, __ATOMIC_RELEASE);
	/* a rewrite may have moved storages (an archive not in torch's
	 * layout): take their new offsets */
	for (i = 0; i < o->n; i++) {
		struct ov_st *s = __atomic_load_n(&o->by_index[i], __ATOMIC_ACQUIRE);

		if (s)
			s->file_off = pt_storage_file_offset(s->st);
	}
	/* the file now holds the overlay's bytes */
	for (i = 0; i < n; i++) {
		struct ov_st *s = src[i].s;
		size_t k;

		pthread_rwlock_wrlock(&s->lock);
		for (k = 0; k < s->nchunks; k++) {
			free(s->chunks[k]);
			s->chunks[k] = NULL;
		}
		__atomic_store_n(&s->dirty, false, __ATOMIC_RELEASE);
		pthread_rwlock_unlock(&s->lock);
	}
	/* a view gathered between the commit and the new offsets above read
	 * the new file at the old ones */
	pt_ckpt_bytes_changed(o->ck, NULL);
	return 0;
}

int ov_commit(struct ov *o, struct pt_error *err)
{
	return with_dirty(o, commit_dirty, NULL, err);
}

int ov_note_open(struct ov_st *s, uint64_t ino, bool *fresh)
{
	struct ov_open *e;
	uint64_t writes;
	int rc = 0;

	/*
	 * Read under the lock: a write counts itself before it lists the
	 * open inodes (ov_others), so either it lists this one and drops
	 * its pages, or this sees its count and the open drops them.
	 */
	pthread_mutex_lock(&s->open_lock);
	writes = __atomic_load_n(&s->writes, __ATOMIC_ACQUIRE);
	HASH_FIND(hh, s->opened, &ino, sizeof(ino), e);
	if (!e) {
		/* never opened since the storage's state was made: the
		 * kernel has read nothing of it through this inode */
		e = calloc(1, sizeof(*e));
		if (!e) {
			rc = -ENOMEM;
			goto out;
		}
		e->ino = ino;
		e->seen = writes;
		HASH_ADD(hh, s->opened, ino, sizeof(e->ino), e);
	}
	*fresh = e->seen == writes;
	e->seen = writes;
	if (e->handles++ == 0) {
		DL_PREPEND(s->open_now, e);
		s->n_open++;
	}
out:
	pthread_mutex_unlock(&s->open_lock);
	return rc;
}

void ov_note_close(struct ov_st *s, uint64_t ino)
{
	struct ov_open *e;

	pthread_mutex_lock(&s->open_lock);
	HASH_FIND(hh, s->opened, &ino, sizeof(ino), e);
	if (e && e->handles > 0 && --e->handles == 0) {
		DL_DELETE(s->open_now, e);
		s->n_open--;
	}
	pthread_mutex_unlock(&s->open_lock);
}

size_t ov_others(struct ov_st *s, uint64_t ino, uint64_t **out)
{
	struct ov_open *e;
	size_t n = 0;

	pthread_mutex_lock(&s->open_lock);
	*out = malloc((s->n_open ? s->n_open : 1) * sizeof(**out));
	for (e = s->open_now; *out && e; e = e->next)
		if (e->ino != ino)
			(*out)[n++] = e->ino;
	pthread_mutex_unlock(&s->open_lock);
	return n;
}

void ov_writers(struct ov_st *s, int delta)
{
	__atomic_add_fetch(&s->writers, delta, __ATOMIC_ACQ_REL);
}

bool ov_busy(const struct ov_st *s)
{
	return s && (__atomic_load_n(&s->dirty, __ATOMIC_ACQUIRE) ||
		     __atomic_load_n(&s->writers, __ATOMIC_ACQUIRE) > 0);
}

void ov_commit_barrier(struct ov *o)
{
	pthread_mutex_lock(&o->commit_lock);
	pthread_mutex_unlock(&o->commit_lock);
}

/* ---- the overlay as a source over the checkpoint's file ---- */

/*
 * The written storage holding byte @off of file @f, else NULL and in
 * *@next where the first one after @off starts (or @end).  Storages that
 * can be written overlap no other (struct pt_storage.writable).
 */
static struct ov_st *live_at(struct ov_file *f, uint64_t off, uint64_t end,
			     uint64_t *next)
{
	struct ov *o = f->o;
	size_t i, n = __atomic_load_n(&o->nlive, __ATOMIC_ACQUIRE);

	*next = end;
	for (i = 0; i < n; i++) {
		struct ov_st *s = o->live[i];
		uint64_t lo = s->file_off;

		if (!ov_dirty(s) || s->file != f)
			continue;
		if (lo <= off && off - lo < s->size)
			return s;
		if (lo > off && lo < *next)
			*next = lo;
	}
	return NULL;
}

/* The file's bytes with the written chunks in place: storage by storage
 * through read_copy(), the bytes between from the file. */
static int ovs_read(const struct pt_source *src, void *buf, size_t n,
		    uint64_t off, struct pt_error *err)
{
	struct ov_file *f = src->priv;
	struct ov *o = f->o;
	const struct pt_source *file = pt_ckpt_source(f->ck);
	uint8_t *p = buf;

	if (__atomic_load_n(&o->nlive, __ATOMIC_ACQUIRE) == 0)
		return pt_source_read(file, buf, n, off, err);
	while (n > 0) {
		uint64_t next;
		struct ov_st *s = live_at(f, off, off + n, &next);
		size_t k;
		int rc;

		if (s) {
			k = (size_t)(s->file_off + s->size - off < n ?
				     s->file_off + s->size - off : n);
			rc = read_copy(s, p, k, off - s->file_off);
			if (rc)
				return pt_fail(err, rc,
					       "read of %zu bytes at 0x%llx with the uncommitted writes",
					       k, (unsigned long long)off);
		} else {
			k = (size_t)(next - off);
			rc = pt_source_read(file, p, k, off, err);
			if (rc)
				return rc;
		}
		p += k;
		off += k;
		n -= k;
	}
	return 0;
}

static void ovs_region(const struct pt_source *src, uint64_t off, uint64_t n)
{
	struct ov_file *f = src->priv;

	pt_source_region(pt_ckpt_source(f->ck), off, n);
}

static void ovs_prefetch(const struct pt_source *src, uint64_t off, uint64_t n)
{
	struct ov_file *f = src->priv;

	pt_source_prefetch(pt_ckpt_source(f->ck), off, n);
}

/* Does a written chunk of @s hold a byte of [@off, @off + @n) of the
 * file? */
static bool written_in(struct ov_st *s, uint64_t off, uint64_t n)
{
	uint64_t lo = off > s->file_off ? off - s->file_off : 0;
	uint64_t hi = off + n - s->file_off < s->size ?
		      off + n - s->file_off : s->size;
	bool hit = false;
	size_t ci;

	pthread_rwlock_rdlock(&s->lock);
	for (ci = (size_t)(lo / OV_CHUNK); s->chunks && !hit &&
	     (uint64_t)ci * OV_CHUNK < hi; ci++)
		hit = s->chunks[ci] != NULL;
	pthread_rwlock_unlock(&s->lock);
	return hit;
}

/*
 * The file's extent, unless a written chunk lies in the range: those
 * bytes are not in the file yet.  A write landing after this answer is
 * ordered after the read (the file's bytes do not change before a
 * commit, and a commit writes the chunks' own bytes).
 */
static bool ovs_extent(const struct pt_source *src, uint64_t off, uint64_t n,
		       int *fd, uint64_t *file_off)
{
	struct ov_file *f = src->priv;
	struct ov *o = f->o;
	size_t i, nlive = __atomic_load_n(&o->nlive, __ATOMIC_ACQUIRE);

	for (i = 0; i < nlive; i++) {
		struct ov_st *s = o->live[i];

		if (ov_dirty(s) && s->file == f && s->file_off < off + n &&
		    off < s->file_off + s->size && written_in(s, off, n))
			return false;
	}
	return pt_source_extent(pt_ckpt_source(f->ck), off, n, fd, file_off);
}

static int ovs_check(const struct pt_source *src, enum pt_check how,
		     struct pt_error *err)
{
	struct ov_file *f = src->priv;

	return pt_source_check(pt_ckpt_source(f->ck), how, err);
}

/* Part of struct ov: ov_free() frees it. */
static void ovs_close(struct pt_source *src)
{
	(void)src;
}

static const struct pt_source_ops ov_source_ops = {
	.read = ovs_read,
	.region = ovs_region,
	.prefetch = ovs_prefetch,
	.extent = ovs_extent,
	.check = ovs_check,
	.close = ovs_close,
};

struct pt_source *ov_source(struct ov *o)
{
	return &o->main.src;
}
