/* SPDX-License-Identifier: MIT */
/*
 * remote.c -- one remote object: open (one request, or one conditional
 * request when the cache has it), reads through the block cache, and the
 * read-ahead policy that fetches what is read and reads ahead only where
 * it pays:
 *
 *  - open fetches the first block (.safetensors: the header's length and,
 *    mostly, the header), the first MiB (.json), or the last 2 MiB and the
 *    first MiB (everything else: a ZIP's end records, central directory
 *    and data.pkl); the response also gives size and version;
 *  - a read of missing blocks fetches those blocks, no more, in one range
 *    request: metadata costs what it is;
 *  - inside a region (pt_remote_region: a tensor's storage) a read that
 *    continues the last one opens a read-ahead window of RM_CHUNK, each
 *    further one quadruples it up to RM_WINDOW_MAX, fetched in the background as
 *    RM_CHUNK ranges in parallel, and never past the region's end
 *    (struct rm_region).
 * Every request after open carries If-Match with the version seen at open.
 * Blocks that another process sharing the cache is fetching are waited
 * for, not fetched again (rm_job_claim, rm_look_theirs; cache.c, "One
 * download per block").
 */
#include <fcntl.h>
#include <linux/falloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/cancel.h"
#include "base/url.h"
#include "io/fd.h"
#include "remote/remote_i.h"

/* A block fetch marks what it stored in the map, and releases its claim
 * of it, every this many blocks (1 MiB): another process waiting for
 * them goes on before the whole range arrived. */
#define RM_PUBLISH (((uint64_t)1 << 20) / RM_BLOCK)
/* A read waiting for another process's blocks looks at the map again
 * after this many ms, up to 8 times longer while none arrive. */
#define RM_LOOK_MS 2L

void pt_remote_opts_default(struct pt_remote_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->cache_size = (uint64_t)10 << 30;
	o->timeout_s = 60;
}

uint64_t pt_remote_size(const struct pt_remote *r)
{
	return r->size;
}

struct timespec pt_remote_mtime(const struct pt_remote *r)
{
	struct timespec ts = { .tv_sec = (time_t)r->mtime, .tv_nsec = 0 };

	return ts;
}

const char *pt_remote_name(const struct pt_remote *r)
{
	return r->u.display;
}

/* ---- the engine's callbacks ---- */

/* Under r->lock: blocks of @j complete below byte @end become held. */
static void rm_job_mark(struct rm_job *j, uint64_t end)
{
	struct pt_remote *r = j->r;
	uint64_t upto = end == r->size ? r->nblocks : end / RM_BLOCK;

	if (j->marked >= upto)
		return;
	for (; j->marked < upto; j->marked++) {
		rm_set(r->held, j->marked);
		rm_clr(r->busy, j->marked);
	}
	pthread_cond_broadcast(&r->cond);
}

/*
 * Blocks [j->published, j->marked) of a block fetch are in the cache file:
 * marked in the map (a bounded object's were as they came, rm_store), then
 * no longer claimed, so that other processes waiting for them go on.
 * Every RM_PUBLISH blocks, and at the end.
 */
static void rm_job_publish(struct rm_job *j)
{
	struct pt_remote *r = j->r;

	if (j->marked <= j->published)
		return;
	if (!r->budget)
		rm_cache_mark(&r->c, j->published, j->marked);
	if (j->claimed)
		rm_cache_release(&r->c, j->published, j->marked);
	j->published = j->marked;
}

static size_t rm_probe_body(struct rm_job *j, const char *p, size_t n)
{
	uint8_t *nm;

	if (j->mem_len + n > j->len + RM_BLOCK) {
		snprintf(j->msg, sizeof(j->msg),
			 "the server ignores range requests (HTTP 200 for a range)");
		j->rc = -ENOTSUP;
		return 0;
	}
	nm = realloc(j->mem, j->mem_len + n);
	if (!nm) {
		j->rc = -ENOMEM;
		return 0;
	}
	memcpy(nm + j->mem_len, p, n);
	j->mem = nm;
	j->mem_len += n;
	return n;
}

/*
 * The first bytes of a block fetch's response: still the version pinned at
 * open?  By its ETag, else its Last-Modified, and always the total size of
 * Content-Range.  0, else -ESTALE (a new version) or -EIO, with j->msg.
 */
static int rm_job_version(struct rm_job *j)
{
	const struct pt_remote *r = j->r;

	if (r->etag[0] && j->etag[0] && strcmp(r->etag, j->etag))
		snprintf(j->msg, sizeof(j->msg), "ETag %.100s, was %.100s",
			 j->etag, r->etag);
	else if (r->vkind == RM_V_MTIME && j->mtime && j->mtime != r->mtime)
		snprintf(j->msg, sizeof(j->msg),
			 "Last-Modified %lld, was %lld (seconds)",
			 (long long)j->mtime, (long long)r->mtime);
	else if (j->status == 206 && j->total != r->size && j->total)
		snprintf(j->msg, sizeof(j->msg), "%llu bytes, was %llu",
			 (unsigned long long)j->total,
			 (unsigned long long)r->size);
	else if (j->status == 206 && !j->total) {
		snprintf(j->msg, sizeof(j->msg),
			 "HTTP 206 without a Content-Range total");
		return -EIO;
	}
	else if (j->status == 200 && j->if_range)
		snprintf(j->msg, sizeof(j->msg),
			 "the whole object answered a range request with If-Range");
	else
		return 0;
	return -ESTALE;
}

/* Under r->lock: whether block @b may be punched (not near the reading
 * position, not being fetched, no read waits for it). */
static bool rm_cold(const struct pt_remote *r, uint64_t b)
{
	uint64_t off = b * RM_BLOCK;

	if (!rm_bit(r->held, b) || rm_bit(r->busy, b) || r->readers[b])
		return false;
	return off + RM_MISS < r->seq_next ||
	       off >= r->seq_next + r->win_max + RM_MISS;
}

/* Under r->lock: punch cold blocks until @need bytes are freed; the
 * bytes freed. */
static uint64_t rm_punch_cold(struct pt_remote *r, uint64_t need)
{
	uint64_t freed = 0, seen;

	for (seen = 0; seen < r->nblocks && freed < need;) {
		uint64_t b = r->cursor % r->nblocks, e = b, k;

		if (!rm_cold(r, b)) {
			r->cursor = b + 1;
			seen++;
			continue;
		}
		while (e < r->nblocks && e - b < 128 && rm_cold(r, e))
			e++;
		if (fallocate(r->c.data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)(b * RM_BLOCK), (off_t)((e - b) * RM_BLOCK)))
			break;          /* cannot punch: the bound gives way */
		for (k = b; k < e; k++)
			rm_clr(r->held, k);
		rm_cache_unmark(&r->c, b, e);
		freed += (e - b) * RM_BLOCK;
		seen += e - b;
		r->cursor = e;
	}
	return freed;
}

/* The bytes of the object in the cache file, whoever stored them. */
static uint64_t rm_stored(const struct pt_remote *r)
{
	struct stat st;

	return fstat(r->c.data_fd, &st) ? 0 : (uint64_t)st.st_blocks * 512;
}

/*
 * A bounded object's blocks are stored and copied inside a "share" (in
 * this process r->punch held shared, across processes the cache's punch
 * file, cache.c), which its punching excludes: no copy sees a hole, and
 * no block is marked held after it was punched.
 */
static void rm_share_begin(struct pt_remote *r)
{
	pthread_rwlock_rdlock(&r->punch);
	pthread_mutex_lock(&r->share_lock);
	if (r->sharers++ == 0)
		flock(r->c.punch_fd, LOCK_SH);
	pthread_mutex_unlock(&r->share_lock);
}

static void rm_share_end(struct pt_remote *r)
{
	pthread_mutex_lock(&r->share_lock);
	if (--r->sharers == 0)
		flock(r->c.punch_fd, LOCK_UN);
	pthread_mutex_unlock(&r->share_lock);
	pthread_rwlock_unlock(&r->punch);
}

/*
 * On the engine's thread, before @n more bytes of an object with a budget
 * are stored: when the cache file would pass it, punch its cold blocks
 * out (a quarter of the budget more, so that this is rare).  The budget
 * holds for the file, whichever processes store into it: they all copy
 * inside a share, and the punch waits (tried again with the next bytes)
 * while one of them stores or copies, or while a process without a
 * budget, which may splice from the file, has it open.  The map is read
 * again first: the blocks other processes stored are punched too, and
 * the ones they punched are not held.
 */
static void rm_make_room(struct pt_remote *r, uint64_t n)
{
	uint64_t have = rm_stored(r);

	if (have + n <= r->budget || flock(r->c.splice_fd, LOCK_EX | LOCK_NB))
		return;
	pthread_rwlock_wrlock(&r->punch);
	if (flock(r->c.punch_fd, LOCK_EX | LOCK_NB) == 0) {
		pthread_mutex_lock(&r->lock);
		rm_cache_sync_map(&r->c, r->held, 0, r->nblocks);
		rm_punch_cold(r, have + n + r->budget / 4 - r->budget);
		pthread_mutex_unlock(&r->lock);
		flock(r->c.punch_fd, LOCK_UN);
	}
	pthread_rwlock_unlock(&r->punch);
	flock(r->c.splice_fd, LOCK_UN);
}

/* @n bytes at @off into the cache file, and for a bounded object the
 * blocks [@b0, @b1) they complete marked in the map, in one share. */
static int rm_write_share(struct pt_remote *r, const char *p, size_t n,
			  uint64_t off, uint64_t b0, uint64_t b1)
{
	int rc;

	if (!r->budget)
		return pt_pwrite_full(r->c.data_fd, p, n, off);
	rm_share_begin(r);
	rc = pt_pwrite_full(r->c.data_fd, p, n, off);
	if (!rc && b1 > b0)
		rc = rm_cache_mark(&r->c, b0, b1);
	rm_share_end(r);
	return rc;
}

/*
 * The next @n bytes of @j into the cache file.  When its filesystem fills
 * up under us (ENOSPC, EDQUOT), once: other versions go, and this
 * object's cold blocks too when it has a bound (a quarter less of it),
 * then the write is tried again.  0 or -errno.
 */
static int rm_store(struct rm_job *j, const char *p, size_t n)
{
	struct pt_remote *r = j->r;
	uint64_t off = j->off + j->got, end = off + n;
	uint64_t b1 = end == r->size ? r->nblocks : end / RM_BLOCK;
	int rc = rm_write_share(r, p, n, off, j->marked, b1);

	if (rc != -ENOSPC && rc != -EDQUOT)
		return rc;
	rm_cache_evict(r->cache_root, 0, r->c.dir);
	if (r->budget) {
		uint64_t have = rm_stored(r);

		r->budget = have / 4 * 3 > 4 * RM_BLOCK ? have / 4 * 3 :
			    4 * RM_BLOCK;
		rm_make_room(r, n);
	}
	return rm_write_share(r, p, n, off, j->marked, b1);
}

/* A piece of a range job's body comes from the version the object was
 * pinned to and is the next byte asked for; else false, with j->rc and
 * j->msg. */
static bool rm_range_reply(struct rm_job *j)
{
	if (j->got == j->got0 && (j->rc = rm_job_version(j)) != 0)
		return false;
	if (j->status != 206 || j->range_first != j->off + j->got) {
		snprintf(j->msg, sizeof(j->msg),
			 "HTTP %ld from byte %llu for a range from byte %llu",
			 j->status, (unsigned long long)j->range_first,
			 (unsigned long long)(j->off + j->got));
		j->rc = -EIO;
		return false;
	}
	return true;
}

static size_t rm_job_body(struct rm_job *j, const char *p, size_t n)
{
	struct pt_remote *r = j->r;
	int rc;

	if (r->closing || j->cancel) {
		j->rc = -ECANCELED;
		return 0;
	}
	if (j->probe)
		return rm_probe_body(j, p, n);
	if (!rm_range_reply(j))
		return 0;
	if (n > j->len - j->got)
		n = (size_t)(j->len - j->got);
	if (r->budget)
		rm_make_room(r, n);
	rc = rm_store(j, p, n);
	if (rc) {
		snprintf(j->msg, sizeof(j->msg), "cache %s: %s", r->c.dir,
			 strerror(-rc));
		j->rc = rc == -ENOSPC || rc == -EDQUOT ? -ENOSPC : -EIO;
		return 0;
	}
	j->got += n;
	j->range_first += n;
	pthread_mutex_lock(&r->lock);
	rm_job_mark(j, j->off + j->got);
	r->c.written += n;
	pthread_mutex_unlock(&r->lock);
	if (j->marked >= j->published + RM_PUBLISH)
		rm_job_publish(j);
	return n;
}

/* The block after the last one of a block fetch. */
static uint64_t rm_job_end(const struct rm_job *j)
{
	return (j->off + j->len + RM_BLOCK - 1) / RM_BLOCK;
}

static void rm_job_free(struct rm_job *j)
{
	free(j->eff_url);
	free(j->redirect);
	free(j->mem);
	free(j);
}

/* Under r->lock: what a failed job tells the readers (a new version,
 * the failure they report). */
static void rm_job_outcome(struct pt_remote *r, const struct rm_job *j)
{
	if (j->rc == -ESTALE && !r->stale) {
		/* told once, by whoever reads next (pt_remote_check) */
		r->stale = true;
		snprintf(r->stale_why, sizeof(r->stale_why), "%s",
			 j->msg[0] && strcmp(j->msg, "HTTP 412") ? j->msg :
			 "HTTP 412 to If-Match/If-Unmodified-Since");
	}
	if (j->rc && j->rc != -ECANCELED) {
		r->fail_rc = j->rc;
		snprintf(r->fail_msg, sizeof(r->fail_msg), "%s: %s",
			 r->u.display, j->msg[0] ? j->msg : strerror(-j->rc));
		r->fail_seq++;
	}
}

static void rm_job_done(struct rm_job *j)
{
	struct pt_remote *r = j->r;
	uint64_t b, end = rm_job_end(j);

	/* what came is marked in the map; the rest of the claim goes (a
	 * failure, a cancel): another process may fetch it */
	if (!j->probe) {
		rm_job_publish(j);
		if (j->claimed)
			rm_cache_release(&r->c, j->published, end);
	}
	pthread_mutex_lock(&r->lock);
	r->jobs--;
	if (j->probe) {
		j->next = r->probes;
		r->probes = j;
		pthread_cond_broadcast(&r->cond);
		pthread_mutex_unlock(&r->lock);
		return;
	}
	for (b = j->marked; b < end && b < r->nblocks; b++)
		rm_clr(r->busy, b);
	if (j->rc == -ENOSPC) {
		/* its readers find the rest lost and read it directly; the
		 * cache is tried again after a second */
		r->nospace_until = rm_now() + 1.0;
		if (!r->nospace_told)
			rm_log(r, 4, "%s: %s: served from the network, not cached",
			       r->u.display, j->msg);
		r->nospace_told = true;
	} else {
		rm_job_outcome(r, j);
	}
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	rm_job_free(j);
}

/* The engine's callbacks of a direct job (rm_read_direct): the body into
 * the reader's buffer, checked like a block fetch's. */
static size_t rm_direct_body(struct rm_job *j, const char *p, size_t n)
{
	if (j->r->closing || __atomic_load_n(&j->cancel, __ATOMIC_RELAXED)) {
		j->rc = -ECANCELED;
		return 0;
	}
	if (!rm_range_reply(j))
		return 0;
	if (n > j->len - j->got)
		n = (size_t)(j->len - j->got);
	memcpy(j->dst + j->got, p, n);
	j->got += n;
	j->range_first += n;
	return n;
}

static void rm_direct_done(struct rm_job *j)
{
	struct pt_remote *r = j->r;

	pthread_mutex_lock(&r->lock);
	r->jobs--;
	if (j->rc == 0 && j->got < j->len) {
		snprintf(j->msg, sizeof(j->msg), "%llu bytes of %llu received",
			 (unsigned long long)j->got, (unsigned long long)j->len);
		j->rc = -EIO;
	}
	if (j->rc && j->rc != -ECANCELED)
		rm_job_outcome(r, j);
	j->finished = true;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

/* ---- fetching ---- */

static struct rm_job *rm_job_new(struct pt_remote *r, uint64_t off,
				 uint64_t len, bool urgent)
{
	struct rm_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->r = r;
	j->on_body = rm_job_body;
	j->on_done = rm_job_done;
	j->off = j->start = off;
	j->len = len;
	j->marked = j->published = off / RM_BLOCK;
	j->urgent = urgent;
	return j;
}

/*
 * The on_start of a block fetch, on the engine's thread under its lock
 * (then r->lock: never the other way round): claim its blocks (cache.c)
 * and keep the first run of them that no other process claims and that
 * the map, read after the claim, does not hold.  Its other blocks are no
 * longer busy: those another process claimed are theirs (rm_wait waits
 * for their marks), the others are fetched again by whoever reads them.
 * False when nothing is left to fetch.
 */
static bool rm_job_claim(struct rm_job *j)
{
	struct pt_remote *r = j->r;
	uint64_t b0 = j->start / RM_BLOCK, e = rm_job_end(j);
	uint64_t b = b0, s = e, k = e, x;

	pthread_mutex_lock(&r->lock);
	while (b < e && s == e && !r->closing) {
		uint64_t ce;

		if (!rm_cache_claim(&r->c, b, e, &ce)) {
			for (; b < ce; b++)
				rm_set(r->theirs, b);
			continue;
		}
		rm_cache_load_map(&r->c, r->held, b, ce);
		for (x = b; x < ce && rm_bit(r->held, x); x++)
			;
		rm_cache_release(&r->c, b, x);
		if (x < ce) {
			s = x;
			for (k = s; k < ce && !rm_bit(r->held, k); k++)
				;
			rm_cache_release(&r->c, k, ce);
		}
		b = ce;
	}
	for (x = b0; x < e; x++)
		if (x < s || x >= k)
			rm_clr(r->busy, x);
	if (s < k) {
		j->off = j->start = s * RM_BLOCK;
		j->len = (k == r->nblocks ? r->size : k * RM_BLOCK) - j->off;
		j->marked = j->published = s;
		j->claimed = true;
	} else {
		j->len = 0;
		j->rc = r->closing ? -ECANCELED : 0;
	}
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	/* the range's space first, in one extent: writing into a sparse
	 * file allocates page by page (ext4: 1 GiB in 512 KiB writes took
	 * 0.72 s of system time, 0.19 s once allocated).  Not under a
	 * budget, which counts the file's allocated blocks.  Where it is
	 * not supported the writes allocate as before. */
	if (s < k && !r->budget)
		(void)fallocate(r->c.data_fd, FALLOC_FL_KEEP_SIZE,
				(off_t)j->off, (off_t)j->len);
	if (rm_tracing() && (s != b0 || k != e))
		rm_log(r, 7, "remote: %.3f claimed %llu-%llu of blocks %llu-%llu",
		       rm_now(), (unsigned long long)s, (unsigned long long)k,
		       (unsigned long long)b0, (unsigned long long)e);
	return s < k;
}

/* Under r->lock: whether block @b is for rm_fetch_as() to fetch. */
static bool rm_wanted(const struct pt_remote *r, uint64_t b, bool alone)
{
	return !rm_bit(r->held, b) && !rm_bit(r->busy, b) &&
	       (alone || !rm_bit(r->theirs, b));
}

/*
 * Under r->lock: jobs for the blocks of [@off, @end) that are neither held
 * nor being fetched (here, or by another process unless @alone), as
 * ranges of at most RM_CHUNK, marked busy and chained on *@list for
 * rm_submit() once the lock is dropped.  They claim their blocks when
 * they start (rm_job_claim), unless @alone.
 */
static void rm_fetch_as(struct pt_remote *r, uint64_t off, uint64_t end,
			bool urgent, bool alone, struct rm_job **list)
{
	uint64_t b = off / RM_BLOCK;
	uint64_t b1 = end >= r->size ? r->nblocks : (end + RM_BLOCK - 1) / RM_BLOCK;
	const uint64_t per = RM_CHUNK / RM_BLOCK;

	while (list && b < b1) {
		uint64_t e = b, k;
		struct rm_job *j;

		if (!rm_wanted(r, b, alone)) {
			b++;
			continue;
		}
		while (e < b1 && e - b < per && rm_wanted(r, e, alone))
			e++;
		j = rm_job_new(r, b * RM_BLOCK,
			       (e == r->nblocks ? r->size : e * RM_BLOCK) -
				       b * RM_BLOCK, urgent);
		if (!j)
			return;     /* a reader sees its blocks lost, retries */
		if (!alone)
			j->on_start = rm_job_claim;
		for (k = b; k < e; k++) {
			rm_set(r->busy, k);
			rm_clr(r->theirs, k);
		}
		j->next = *list;
		*list = j;
		b = e;
	}
}

static void rm_fetch(struct pt_remote *r, uint64_t off, uint64_t end,
		     bool urgent, struct rm_job **list)
{
	rm_fetch_as(r, off, end, urgent, false, list);
}

/* Hand the jobs of rm_fetch() to the engine, in offset order. */
static void rm_submit(struct rm_job *list)
{
	struct rm_job *rev = NULL;

	while (list) {
		struct rm_job *j = list;

		list = j->next;
		j->next = rev;
		rev = j;
	}
	while (rev) {
		struct rm_job *j = rev;

		rev = j->next;
		j->next = NULL;
		rm_engine_submit(j);
	}
}

static bool rm_all_held(const struct pt_remote *r, uint64_t b0, uint64_t b1,
			bool *lost)
{
	bool all = true;
	uint64_t b;

	*lost = false;
	for (b = b0; b < b1; b++) {
		if (rm_bit(r->held, b))
			continue;
		all = false;
		if (!rm_bit(r->busy, b) && !rm_bit(r->theirs, b))
			*lost = true;
	}
	return all;
}

/* Under r->lock: whether a block of [b0, b1) is missing and another
 * process's to fetch. */
static bool rm_theirs_in(const struct pt_remote *r, uint64_t b0, uint64_t b1)
{
	uint64_t b;

	for (b = b0; b < b1; b++)
		if (rm_bit(r->theirs, b) && !rm_bit(r->held, b))
			return true;
	return false;
}

/* Under r->lock: the region that holds byte @off, or NULL. */
static struct rm_region *rm_region_at(struct pt_remote *r, uint64_t off)
{
	size_t lo = 0, hi = r->nregions;

	while (lo < hi) {       /* the first region with g.lo > off */
		size_t mid = lo + (hi - lo) / 2;

		if (r->regions[mid].lo <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || off >= r->regions[lo - 1].hi)
		return NULL;
	return &r->regions[lo - 1];
}

/* Under r->lock: the read-ahead that follows a read of [off, end) (struct
 * rm_region); none outside a region. */
static void rm_read_ahead(struct pt_remote *r, uint64_t off, uint64_t end,
			  struct rm_job **list)
{
	struct rm_region *g = rm_region_at(r, off);
	/* continues the last read: FUSE may reorder a little, either way
	 * (the kernel's read-ahead sends several reads at once, a later one
	 * may come first; taken as a jump, it started the window over) */
	bool seq = g && g->next && (off <= g->next ? g->next - off <= RM_MISS :
				    off - g->next <= RM_MISS);
	uint64_t to;

	if (end > r->seq_next || r->seq_next - end > RM_MISS)
		r->seq_next = end;
	if (!g || (seq && end <= g->next))
		return;     /* metadata; or an older read, reordered */
	if (!seq) {
		g->window = (end - off + RM_BLOCK - 1) / RM_BLOCK * RM_BLOCK;
		g->next = g->ahead = end;
		return;
	}
	/* two reads in a row: at once a whole RM_CHUNK, then 4 times more
	 * per read (a stream pays two or three round trips of ramp) */
	g->window = g->window * 4 < RM_CHUNK ? RM_CHUNK : g->window * 4;
	if (g->window > r->win_max)
		g->window = r->win_max;
	g->next = end;
	if (g->ahead < end)
		g->ahead = end;
	/* whole ranges as room opens, one at a time while the window is
	 * full: ranges started together share the link and end together,
	 * and a reader waiting for the first one would wait for them all
	 * while nothing new is asked (the link idles a round trip per
	 * window); started one by one as the reader passes them, they end
	 * one by one */
	to = end + g->window < g->hi ? end + g->window : g->hi;
	if (to < g->hi && to > g->ahead)
		to = g->ahead + (to - g->ahead) / RM_CHUNK * RM_CHUNK;
	if (g->ahead < to && rm_now() >= r->nospace_until) {
		rm_fetch(r, g->ahead, to, false, list);
		g->ahead = to;
	}
}

static int rm_read_fail(struct pt_remote *r, struct pt_error *err)
{
	if (r->stale)
		return pt_fail(err, -EIO,
			       "%s: changed on the server since it was opened (%s)",
			       r->u.display, r->stale_why);
	return pt_fail(err, r->fail_rc == -ENOMEM ? -ENOMEM : -EIO, "%s",
		       r->fail_msg);
}

/* Under r->lock: wait for news (a job's end) at most @ms (100 or less),
 * so that a reader that went away (a killed program, a daemon that ends)
 * is seen: true when pt_cancelled() says it did. */
static bool rm_wait_a_little(struct pt_remote *r, long ms)
{
	struct timespec ts;

	if (pt_cancelled())
		return true;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&r->cond, &r->lock, &ts);
	return false;
}

/* A read waiting for blocks another process fetches (rm_look_theirs). */
struct rm_patience {
	uint64_t have;          /* blocks of the read held at the last look */
	double since;           /* when one last arrived */
	long ms;                /* the next look after this many ms */
};

/*
 * Under r->lock, while a read of [@off, @end) waits for blocks another
 * process claimed (theirs): the map's marks make them held; those whose
 * claim went without a mark (that fetch failed, or its process died) are
 * fetched here, with the read-ahead of the region after them; and when
 * none arrived for the deadline (-o timeout), the claims are not waited
 * for any longer (a stopped process): the read's blocks are fetched here
 * too.  The next look comes sooner after progress, later without.
 */
static void rm_look_theirs(struct pt_remote *r, uint64_t off, uint64_t end,
			   struct rm_patience *p, struct rm_job **list)
{
	uint64_t b0 = off / RM_BLOCK, b1 = (end - 1) / RM_BLOCK + 1;
	struct rm_region *g = rm_region_at(r, off);
	uint64_t ahead = g && g->ahead > end ?
			 (g->ahead - 1) / RM_BLOCK + 1 : b1;
	uint64_t have = 0, b, x;
	bool stalled;

	rm_cache_load_map(&r->c, r->held, b0, ahead);
	for (b = b0; b < b1; b++)
		have += rm_bit(r->held, b);
	if (have > p->have) {
		p->have = have;
		p->since = rm_now();
		p->ms = RM_LOOK_MS;
	} else if (p->ms < 8 * RM_LOOK_MS) {
		p->ms *= 2;
	}
	for (b = b0; b < ahead; b = x) {      /* runs of theirs, missing */
		for (; b < ahead && (!rm_bit(r->theirs, b) ||
				     rm_bit(r->held, b)); b++)
			rm_clr(r->theirs, b);
		for (x = b; x < ahead && rm_bit(r->theirs, x) &&
			    !rm_bit(r->held, x); x++)
			;
		rm_cache_unclaimed(&r->c, r->theirs, b, x);
	}
	stalled = rm_now() - p->since > r->o.timeout_s;
	if (stalled) {
		if (!r->stall_told)
			rm_log(r, 4, "%s: blocks another process claimed did not come in %u s (-o timeout): fetched here too",
			       r->u.display, r->o.timeout_s);
		r->stall_told = true;
		p->since = rm_now();
	}
	if (rm_now() < r->nospace_until) {
		/* lost ones are read directly (rm_wait) */
		for (b = b0; stalled && b < b1; b++)
			rm_clr(r->theirs, b);
		return;
	}
	rm_fetch_as(r, off, end, true, stalled, list);
	if (ahead > b1)
		rm_fetch(r, end, g->ahead, false, list);
}

/* Under r->lock: until [b0, b1) is held; 0, or -1 when it cannot be, -2
 * when pt_cancelled() says the reader is gone, -3 when the cache cannot
 * take it (r->nospace_until: read it directly). */
static int rm_wait(struct pt_remote *r, uint64_t off, uint64_t end,
		   uint64_t seq0)
{
	uint64_t b0 = off / RM_BLOCK, b1 = (end - 1) / RM_BLOCK + 1;
	struct rm_patience p = { 0, rm_now(), RM_LOOK_MS };
	bool lost;

	while (!rm_all_held(r, b0, b1, &lost)) {
		struct rm_job *list = NULL;

		if (r->stale || (lost && r->fail_seq != seq0))
			return -1;
		if (lost && rm_now() < r->nospace_until)
			return -3;
		if (lost) {
			/* a read-ahead for them failed or was dropped */
			rm_fetch(r, off, end, true, &list);
		} else if (rm_theirs_in(r, b0, b1)) {
			/* another process fetches them: look at the map */
			if (rm_wait_a_little(r, p.ms))
				return -2;
			rm_look_theirs(r, off, end, &p, &list);
		} else if (rm_wait_a_little(r, 100)) {
			return -2;
		}
		if (list) {
			pthread_mutex_unlock(&r->lock);
			rm_submit(list);
			pthread_mutex_lock(&r->lock);
		}
	}
	return 0;
}

/*
 * [@off, @off + @n) from the network straight into @buf, not cached: the
 * cache's filesystem is full and nothing could be evicted.  One range
 * request (retried like every other) whose body goes to the reader's
 * buffer, the only memory it takes.
 */
static int rm_read_direct(struct pt_remote *r, void *buf, size_t n,
			  uint64_t off, struct pt_error *err)
{
	struct rm_job *j = rm_job_new(r, off, n, true);
	int rc;

	if (!j)
		return pt_fail(err, -ENOMEM, "out of memory");
	j->dst = buf;
	j->on_body = rm_direct_body;
	j->on_done = rm_direct_done;
	if (rm_tracing())
		rm_log(r, 7, "remote: direct %zu at %llu", n,
		       (unsigned long long)off);
	rm_engine_submit(j);
	pthread_mutex_lock(&r->lock);
	while (!j->finished)
		if (rm_wait_a_little(r, 100))    /* it stops at its next bytes */
			__atomic_store_n(&j->cancel, true, __ATOMIC_RELAXED);
	rc = j->rc;
	if (rc == -ECANCELED)
		rc = pt_fail(err, -EINTR, "interrupted");
	else if (rc)
		rc = rm_read_fail(r, err);
	pthread_mutex_unlock(&r->lock);
	rm_job_free(j);
	return rc;
}

/* Copy [@off, @off + @n) out of the cache file: 0, -EAGAIN when some
 * of it was punched out meanwhile (rm_make_room, in this process or
 * another: the map says), or -EIO. */
static int rm_copy(struct pt_remote *r, void *buf, size_t n, uint64_t off,
		   struct pt_error *err)
{
	bool held = true;
	int rc = 0;

	if (r->budget) {
		rm_share_begin(r);
		pthread_mutex_lock(&r->lock);
		held = rm_cache_sync_map(&r->c, r->held, off / RM_BLOCK,
					 (off + n - 1) / RM_BLOCK + 1) == 1;
		pthread_mutex_unlock(&r->lock);
	}
	if (held) {
		ssize_t got = pt_pread_upto(r->c.data_fd, buf, n, off);

		if (got < 0 || (size_t)got < n)
			rc = pt_fail(err, -EIO, "cache %s: %s", r->c.dir,
				     got < 0 ? strerror((int)-got) : "short read");
	}
	if (r->budget)
		rm_share_end(r);
	return held ? rc : -EAGAIN;
}

/* The read of pt_remote_read(), [@off, @off + @n) inside the object. */
static int rm_read(struct pt_remote *r, void *buf, size_t n, uint64_t off,
		   struct pt_error *err)
{
	uint64_t b0 = off / RM_BLOCK, b1 = (off + n - 1) / RM_BLOCK + 1, seq0;
	struct rm_job *list = NULL;
	bool lost, evict, direct = false;
	int rc;

	if (rm_tracing())
		rm_log(r, 7, "remote: %.3f read %zu at %llu", rm_now(), n,
		       (unsigned long long)off);
	pthread_mutex_lock(&r->lock);
	seq0 = r->fail_seq;
	if (!r->stale && !rm_all_held(r, b0, b1, &lost)) {
		/* another process may have fetched them */
		rm_cache_load_map(&r->c, r->held, b0, b1);
		/* blocks nobody fetches yet: fetched now (those in flight
		 * are waited for), or read directly while the cache is full */
		if (!rm_all_held(r, b0, b1, &lost) && lost)
			direct = rm_now() < r->nospace_until;
		if (lost && !direct)
			rm_fetch(r, off, off + n, true, &list);
	}
	rm_read_ahead(r, off, off + n, &list);
	pthread_mutex_unlock(&r->lock);
	rm_submit(list);
	if (direct)
		return rm_read_direct(r, buf, n, off, err);
	do {
		pthread_mutex_lock(&r->lock);
		rc = r->stale ? -1 : rm_wait(r, off, off + n, seq0);
		if (rc == -3) {
			pthread_mutex_unlock(&r->lock);
			return rm_read_direct(r, buf, n, off, err);
		}
		if (rc == -2)
			rc = pt_fail(err, -EINTR, "interrupted");
		else if (rc)
			rc = rm_read_fail(r, err);
		evict = r->c.written > r->o.cache_size / 8;
		if (evict)
			r->c.written = 0;
		pthread_mutex_unlock(&r->lock);
		if (evict)  /* keep the bound while a mount streams */
			rm_cache_evict(r->cache_root, r->o.cache_size, r->c.dir);
		if (!rc)
			rc = rm_copy(r, buf, n, off, err);
	} while (rc == -EAGAIN);    /* punched before it was copied */
	return rc;
}

/* Under r->lock: @d more (or fewer) reads need blocks [b0, b1). */
static void rm_readers(struct pt_remote *r, uint64_t b0, uint64_t b1, int d)
{
	uint64_t b;

	for (b = b0; r->readers && b < b1; b++)
		r->readers[b] = (uint16_t)(r->readers[b] + d);
}

int pt_remote_read(struct pt_remote *r, void *buf, size_t n, uint64_t off,
		   struct pt_error *err)
{
	uint64_t b0 = off / RM_BLOCK, b1;
	int rc;

	if (n == 0)
		return 0;
	if (off > r->size || n > r->size - off)
		return pt_fail(err, -EIO,
			       "%s: read of %zu bytes at %llu beyond its end (%llu bytes)",
			       r->u.display, n, (unsigned long long)off,
			       (unsigned long long)r->size);
	/* an object with a budget: the blocks of this read are not punched
	 * while it waits for them and copies them (else a small budget and
	 * reads ahead of this one could punch them again and again) */
	b1 = (off + n - 1) / RM_BLOCK + 1;
	pthread_mutex_lock(&r->lock);
	rm_readers(r, b0, b1, 1);
	pthread_mutex_unlock(&r->lock);
	rc = rm_read(r, buf, n, off, err);
	pthread_mutex_lock(&r->lock);
	rm_readers(r, b0, b1, -1);
	pthread_mutex_unlock(&r->lock);
	return rc;
}

bool pt_remote_extent(struct pt_remote *r, uint64_t off, uint64_t n, int *fd,
		      uint64_t *file_off)
{
	struct rm_job *list = NULL;
	bool lost, held;

	if (n == 0 || off > r->size || n > r->size - off || r->budget)
		return false;       /* a budget's blocks may be punched out */
	pthread_mutex_lock(&r->lock);
	held = !r->stale && rm_all_held(r, off / RM_BLOCK,
					(off + n - 1) / RM_BLOCK + 1, &lost);
	/* served without pt_remote_read: keep the read-ahead going */
	if (held)
		rm_read_ahead(r, off, off + n, &list);
	pthread_mutex_unlock(&r->lock);
	rm_submit(list);
	if (held) {
		*fd = r->c.data_fd;
		*file_off = off;
	}
	return held;
}

void pt_remote_region(struct pt_remote *r, uint64_t off, uint64_t n)
{
	struct rm_region *g;
	size_t at;

	if (off >= r->size || n == 0)
		return;
	if (n > r->size - off)
		n = r->size - off;
	pthread_mutex_lock(&r->lock);
	g = rm_region_at(r, off);
	if (g || (g = rm_region_at(r, off + n - 1)) != NULL) {
		pthread_mutex_unlock(&r->lock);
		return;     /* known (or overlapping one: the first stays) */
	}
	if (r->nregions == r->cap_regions) {
		size_t cap = r->cap_regions ? 2 * r->cap_regions : 64;
		struct rm_region *nv = realloc(r->regions, cap * sizeof(*nv));

		if (!nv) {
			pthread_mutex_unlock(&r->lock);
			return;     /* a hint: read without read-ahead */
		}
		r->regions = nv;
		r->cap_regions = cap;
	}
	for (at = r->nregions; at > 0 && r->regions[at - 1].lo > off; at--)
		;
	memmove(&r->regions[at + 1], &r->regions[at],
		(r->nregions - at) * sizeof(*r->regions));
	memset(&r->regions[at], 0, sizeof(*r->regions));
	r->regions[at].lo = off;
	r->regions[at].hi = off + n;
	r->nregions++;
	pthread_mutex_unlock(&r->lock);
	if (rm_tracing())
		rm_log(r, 7, "remote: region %llu at %llu",
		       (unsigned long long)n, (unsigned long long)off);
}

void pt_remote_prefetch(struct pt_remote *r, uint64_t off, uint64_t n)
{
	struct rm_job *list = NULL;

	if (off >= r->size)
		return;
	if (n > r->size - off)
		n = r->size - off;
	if (n > r->win_max)
		n = r->win_max;
	if (rm_tracing())
		rm_log(r, 7, "remote: prefetch %llu at %llu",
		       (unsigned long long)n, (unsigned long long)off);
	pthread_mutex_lock(&r->lock);
	/* none while the cache cannot take it (reads go direct) */
	if (!r->stale && !r->closing && rm_now() >= r->nospace_until)
		rm_fetch(r, off, off + n, false, &list);
	pthread_mutex_unlock(&r->lock);
	rm_submit(list);
}

int pt_remote_check(struct pt_remote *r, struct pt_error *err)
{
	bool stale;

	pthread_mutex_lock(&r->lock);
	stale = r->stale;
	pthread_mutex_unlock(&r->lock);
	if (stale)
		return pt_fail(err, -ESTALE,
			       "%s: changed on the server since it was opened (%s)",
			       r->u.display, r->stale_why);
	return 0;
}

/* ---- open ---- */

static bool rm_safetensors(const struct rm_url *u)
{
	size_t n = strlen(u->rel);

	return n >= 12 && !strcmp(u->rel + n - 12, ".safetensors");
}

static bool rm_head_first(const struct rm_url *u)
{
	size_t n = strlen(u->rel);

	return rm_safetensors(u) || (n >= 5 && !strcmp(u->rel + n - 5, ".json"));
}

/* One line for a failed open: the URL as given, where it was requested
 * (never a query string or a credential), what went wrong, a hint. */
static int rm_open_fail(struct pt_remote *r, const struct rm_job *j,
			struct pt_error *err)
{
	const char *hint = "";
	char at[2048], shown[2048], code[48], s3[800];
	int rc = j->rc;

	if (rc == -EACCES && r->u.kind == RM_HF) {
		hint = getenv("HF_TOKEN") ? " (HF_TOKEN has no access to it)" :
		       " (gated or private? set HF_TOKEN)";
	} else if (rc == -EACCES && r->u.kind == RM_S3) {
		snprintf(s3, sizeof(s3), " (check the keys: %s; and the region "
			 "%s)", r->u.aws->source, r->u.aws->region);
		hint = s3;
	}
	if (rc == -ENOENT)
		hint = " (not found)";
	else if (rc == -ENXIO)
		hint = " (an empty object: not a checkpoint)";
	if (r->u.kind == RM_S3) {
		/* S3 says which: a bad key id, a bad secret, no bucket... */
		rm_s3_code(j->errbody, j->errlen, code, sizeof(code));
		if (*rm_s3_hint(code, r->u.aws, s3 + 1, sizeof(s3) - 1)) {
			s3[0] = ' ';
			hint = s3;
		}
	}
	if (r->u.kind == RM_HTTP)
		return pt_fail(err, rc, "%s: %s%s", r->u.display, j->msg, hint);
	snprintf(at, sizeof(at), "%s%s", r->u.prefix, r->u.rel);
	return pt_fail(err, rc, "%s (%s): %s%s", r->u.display,
		       pt_url_redact(at, shown, sizeof(shown)), j->msg, hint);
}

/*
 * Send the open requests and wait for them: the last RM_TAIL bytes (a ZIP's
 * end records and central directory) and, in parallel, the first RM_FIRST
 * (the format's magic, a ZIP's data.pkl); only the head for .safetensors (its
 * first block: the header is read by its declared length) and .json; only
 * one conditional request when the cache has the object.
 * *@main is the one that decides, *@extra the other (or NULL).
 */
static int rm_probe(struct pt_remote *r, bool conditional,
		    struct rm_job **main, struct rm_job **extra,
		    struct pt_error *err)
{
	bool head = rm_head_first(&r->u);
	int want = head || conditional ? 1 : 2, got = 0;
	struct rm_job *j = rm_job_new(r, 0, !head ? RM_TAIL :
				      rm_safetensors(&r->u) ? RM_BLOCK : RM_FIRST,
				      true);
	struct rm_job *h = want == 2 ? rm_job_new(r, 0, RM_FIRST, true) : NULL;

	*main = *extra = NULL;
	if (!j || (want == 2 && !h)) {
		free(j);
		free(h);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	j->probe = true;
	j->tail = !head;
	j->conditional = conditional;
	rm_engine_submit(j);
	if (h) {
		h->probe = true;
		rm_engine_submit(h);
	}
	pthread_mutex_lock(&r->lock);
	while (got < want) {
		while (!r->probes)
			pthread_cond_wait(&r->cond, &r->lock);
		r->probes = r->probes->next;
		got++;
	}
	pthread_mutex_unlock(&r->lock);
	*main = j;
	*extra = h;
	if (j->rc)
		return rm_open_fail(r, j, err);
	if (j->status == 304 && !conditional)
		return pt_fail(err, -EIO, "%s: HTTP 304 to a plain request",
			       r->u.display);
	return 0;
}

/* What the open request said about the object, into @m. */
static int rm_probe_meta(struct pt_remote *r, const struct rm_job *j,
			 struct rm_meta *m, struct pt_error *err)
{
	if (j->status == 304)
		return 0;           /* @m is the cached version */
	memset(m, 0, sizeof(*m));
	if (j->status == 206 && j->total &&
	    j->range_first + j->mem_len <= j->total)
		m->size = j->total;
	else if (j->status == 200)
		m->size = j->mem_len;
	else
		return pt_fail(err, -EIO,
			       "%s: HTTP %ld with a bad Content-Range",
			       r->u.display, j->status);
	snprintf(m->etag, sizeof(m->etag), "%s", j->etag);
	m->mtime = j->mtime;
	if (j->linked[0])
		snprintf(m->ident, sizeof(m->ident), "%s", j->linked);
	else if (j->etag[0])
		snprintf(m->ident, sizeof(m->ident), "%s", j->etag);
	else if (j->mtime)  /* Last-Modified and size: one version */
		snprintf(m->ident, sizeof(m->ident), "mtime %lld size %llu",
			 (long long)j->mtime, (unsigned long long)m->size);
	else    /* no validator: never shared, never revalidated */
		snprintf(m->ident, sizeof(m->ident), "unversioned-%d-%.0f",
			 (int)getpid(), rm_now() * 1e6);
	return 0;
}

/* Keep the open request's body in the cache. */
static void rm_store_probe(struct pt_remote *r, const struct rm_job *j)
{
	uint64_t first, end, b0, b1, b;

	if (j->status == 304 || !j->mem_len)
		return;
	first = j->status == 200 ? 0 : j->range_first;
	end = first + j->mem_len;
	b0 = (first + RM_BLOCK - 1) / RM_BLOCK;
	b1 = end == r->size ? r->nblocks : end / RM_BLOCK;
	if (r->budget) {
		if (rm_write_share(r, (const char *)j->mem, j->mem_len, first,
				   b0, b1))
			return;
	} else if (pt_pwrite_full(r->c.data_fd, j->mem, j->mem_len, first) ||
		   (b1 > b0 && rm_cache_mark(&r->c, b0, b1))) {
		return;
	}
	for (b = b0; b < b1; b++)
		rm_set(r->held, b);
}

static size_t rm_api_body(char *p, size_t size, size_t n, void *ud)
{
	char *buf = ud;
	size_t have = strlen(buf), add = size * n;

	if (have + add >= 65536)
		add = 65535 - have;
	memcpy(buf + have, p, add);
	buf[have + add] = '\0';
	return size * n;
}

/*
 * The hub's commit for a branch or tag, when the resolve answer had no
 * X-Repo-Commit: GET <endpoint>/api/models/ORG/REPO/revision/REV, whose
 * JSON has "sha": "<40 hex digits>".  Into @commit ("" when unknown).
 */
static void rm_hf_api_commit(struct pt_remote *r, char *commit, size_t cap)
{
	struct curl_slist *hdrs = NULL;
	char *body = calloc(1, 65536);
	char *url = malloc(strlen(r->u.hf_api) + strlen(r->u.rev) + 1);
	CURL *h = curl_easy_init();
	const char *sha;
	long code = 0;

	commit[0] = '\0';
	if (body && url && h) {
		strcpy(url, r->u.hf_api);
		strcat(url, r->u.rev);
		rm_http_setup(h, r, url, &hdrs);
		if (hdrs)
			curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, rm_api_body);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
		curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)r->o.timeout_s);
		if (curl_easy_perform(h) == CURLE_OK &&
		    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK &&
		    code == 200 && (sha = strstr(body, "\"sha\"")) != NULL) {
			sha = strchr(sha + 5, '"');
			if (sha && strspn(sha + 1, "0123456789abcdef") == 40 &&
			    sha[41] == '"')
				snprintf(commit, cap, "%.40s", sha + 1);
		}
	}
	if (h)
		curl_easy_cleanup(h);
	curl_slist_free_all(hdrs);
	free(url);
	free(body);
}

/* Pin the version: the hub's commit, the URL requests go to. */
static int rm_pin(struct pt_remote *r, const struct rm_job *j,
		  struct rm_meta *m)
{
	char *req;

	if (r->u.kind == RM_HF && !r->u.pinned) {
		if (j->commit[0])
			snprintf(m->commit, sizeof(m->commit), "%s", j->commit);
		else if (j->status != 304)
			rm_hf_api_commit(r, m->commit, sizeof(m->commit));
		if (m->commit[0])
			rm_url_pin(&r->u, m->commit);
	}
	req = rm_url_request(&r->u);
	if (!req)
		return -ENOMEM;
	free(r->url);
	if (j->eff_url && strcmp(j->eff_url, req) &&
	    strncmp(j->eff_url, r->u.prefix, strlen(r->u.prefix))) {
		/* redirected to another place (the hub's CDN): go there; a
		 * signed CDN URL expires, then requests go through @req again */
		r->url = strdup(j->eff_url);
		free(r->origin);
		r->origin = req;
	} else {
		r->url = req;
	}
	snprintf(r->etag, sizeof(r->etag), "%s", m->etag);
	r->mtime = m->mtime;
	if (m->etag[0])
		r->vkind = strncmp(m->etag, "W/", 2) ? RM_V_ETAG : RM_V_WEAK;
	else
		r->vkind = m->mtime ? RM_V_MTIME : RM_V_SIZE;
	if (r->vkind == RM_V_SIZE)
		rm_log(r, 4,
		       "%s: the server gives neither an ETag nor a Last-Modified: a change while it is open is seen only when its size changes",
		       r->u.display);
	return r->url ? 0 : -ENOMEM;
}

/*
 * An object larger than 7/8 of what the cache may hold -- cache_size, and
 * the free space of its filesystem above the floor of rm_cache_evict()
 * plus what it holds of this object already -- gets a bound of its own.
 */
static void rm_set_budget(struct pt_remote *r)
{
	uint64_t b, held = 0, lim = r->o.cache_size;
	struct statvfs sv;

	if (r->nospace_until == HUGE_VAL)
		return;     /* nothing is stored (rm_cache_open_or_not): no bound */
	for (b = 0; b < r->nblocks; b++)
		if (rm_bit(r->held, b))
			held += RM_BLOCK;
	if (fstatvfs(r->c.data_fd, &sv) == 0) {
		uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
		uint64_t floor = (uint64_t)sv.f_blocks * sv.f_frsize / 20;

		if (floor > ((uint64_t)2 << 30))
			floor = (uint64_t)2 << 30;
		avail = avail > floor ? avail - floor : 0;
		if (avail + held < lim)
			lim = avail + held;
	}
	lim = lim / 8 * 7 / RM_BLOCK * RM_BLOCK;
	if (r->size <= lim)
		return;
	r->budget = lim > 4 * RM_BLOCK ? lim : 4 * RM_BLOCK;
	r->readers = calloc(r->nblocks, sizeof(*r->readers));
	if (!r->readers) {
		r->budget = 0;      /* no bound of its own (never punched) */
		return;
	}
	r->win_max = r->budget / 4 > RM_MISS ? r->budget / 4 : RM_MISS;
	if (r->win_max > RM_WINDOW_MAX)
		r->win_max = RM_WINDOW_MAX;
}

/*
 * The object's place in the cache.  When its filesystem is full (ENOSPC,
 * EDQUOT) even after every other version went, or read-only (EROFS,
 * EACCES, EPERM): no place, and every read is served from the network
 * (r->nospace_until for good), but for the blocks a read-only cache
 * holds already, read from it.
 */
static int rm_cache_open_or_not(struct pt_remote *r, struct rm_meta *m,
				struct pt_error *err)
{
	int rc = rm_cache_open(&r->c, r->cache_root, r->u.key, m, err);

	if (rc == -ENOSPC || rc == -EDQUOT) {
		rm_cache_evict(r->cache_root, 0, NULL);
		rc = rm_cache_open(&r->c, r->cache_root, r->u.key, m, err);
	}
	if (rc ? !rm_cache_unwritable(rc) : !r->c.readonly)
		return rc;
	if (rc)
		rm_log(r, 4, "%s: %s: served from the network, not cached",
		       r->u.display, err->msg);
	else
		rm_log(r, 4, "%s: cache %s is read-only: what it holds is read from it, the rest from the network, not cached",
		       r->u.display, r->c.dir);
	pt_error_clear(err);
	r->nospace_until = HUGE_VAL;
	r->nospace_told = true;
	return 0;
}

/*
 * Whether this open runs the cache's eviction pass: at most one a second
 * in the process.  A pass looks at every object in the cache, and the
 * shards of a checkpoint open together (ckpt/open.c): 100 shards would
 * look at 100 objects 100 times for the few blocks their opens stored.
 * Reads still run theirs as they store (rm_read, c.written).
 */
static bool rm_open_evict_due(void)
{
	static uint64_t next_ms;
	uint64_t now = (uint64_t)(rm_now() * 1000);
	uint64_t due = __atomic_load_n(&next_ms, __ATOMIC_RELAXED);

	return now >= due &&
	       __atomic_compare_exchange_n(&next_ms, &due, now + 1000, false,
					   __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static int rm_open_common(struct pt_remote *r, struct pt_error *err)
{
	struct rm_meta m;
	struct rm_job *j = NULL, *h = NULL;
	int rc;

	rc = rm_engine_get(err);
	if (rc)
		return rc;
	r->engine = true;
	rc = rm_cache_root(&r->o, &r->cache_root, err);
	if (rc)
		return rc;
	rm_cache_latest(r->cache_root, r->u.key, &m);
	snprintf(r->etag, sizeof(r->etag), "%s", m.etag);
	r->url = rm_url_request(&r->u);
	if (!r->url)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = rm_probe(r, m.etag[0] != '\0', &j, &h, err);
	if (!rc)
		rc = rm_probe_meta(r, j, &m, err);
	if (!rc && rm_pin(r, j, &m))
		rc = pt_fail(err, -ENOMEM, "out of memory");
	if (!rc) {
		r->size = m.size;
		r->mtime = m.mtime;
		rc = rm_cache_open_or_not(r, &m, err);
	}
	if (!rc) {
		r->nblocks = (r->size + RM_BLOCK - 1) / RM_BLOCK;
		r->held = calloc(1, r->nblocks / 8 + 1);
		r->busy = calloc(1, r->nblocks / 8 + 1);
		r->theirs = calloc(1, r->nblocks / 8 + 1);
		if (!r->held || !r->busy || !r->theirs)
			rc = pt_fail(err, -ENOMEM, "out of memory");
	}
	if (!rc) {
		rm_cache_load_map(&r->c, r->held, 0, r->nblocks);
		rm_set_budget(r);
		/* it may splice from the file: no other process punches it */
		if (!r->budget && r->c.splice_fd >= 0)
			flock(r->c.splice_fd, LOCK_SH);
		rm_store_probe(r, j);
		/* the head, when it is the same version */
		if (h && !h->rc && !strcmp(h->etag, j->etag) &&
		    h->mtime == j->mtime &&
		    (h->status == 200 ? h->mem_len == r->size :
		     h->status == 206 && h->total == r->size))
			rm_store_probe(r, h);
		if (rm_open_evict_due())
			rm_cache_evict(r->cache_root, r->o.cache_size, r->c.dir);
	}
	if (j)
		rm_job_free(j);
	if (h)
		rm_job_free(h);
	return rc;
}

static struct pt_remote *rm_new(const struct pt_remote_opts *o)
{
	struct pt_remote *r = calloc(1, sizeof(*r));
	struct pt_remote_opts def;

	if (!r)
		return NULL;
	if (!o) {
		pt_remote_opts_default(&def);
		o = &def;
	}
	r->o = *o;
	r->own[0] = o->cache_dir ? strdup(o->cache_dir) : NULL;
	r->own[1] = o->cafile ? strdup(o->cafile) : NULL;
	r->own[2] = o->s3_endpoint ? strdup(o->s3_endpoint) : NULL;
	r->o.cache_dir = r->own[0];
	r->o.cafile = r->own[1];
	r->o.s3_endpoint = r->own[2];
	if (!r->o.timeout_s)
		r->o.timeout_s = 60;
	if (!r->o.cache_size)
		r->o.cache_size = (uint64_t)10 << 30;
	r->c.data_fd = r->c.map_fd = r->c.lock_fd = -1;
	r->c.splice_fd = r->c.punch_fd = r->c.inflight_fd = -1;
	pthread_mutex_init(&r->share_lock, NULL);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	pthread_rwlock_init(&r->punch, NULL);
	r->win_max = RM_WINDOW_MAX;
	return r;
}

int pt_remote_open(struct pt_remote **out, const char *url,
		   const struct pt_remote_opts *o, struct pt_error *err)
{
	struct pt_remote *r = rm_new(o);
	int rc;

	*out = NULL;
	if (!r)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = rm_url_parse(&r->u, url, r->o.s3_endpoint, err);
	if (!rc)
		rc = rm_open_common(r, err);
	if (rc) {
		pt_remote_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

int pt_remote_open_sibling(struct pt_remote *r, const char *rel,
			   struct pt_remote **out, struct pt_error *err)
{
	struct pt_remote *s = rm_new(&r->o);
	int rc;

	*out = NULL;
	if (!s)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = rm_url_sibling(&s->u, &r->u, rel, err);
	if (!rc)
		rc = rm_open_common(s, err);
	if (rc) {
		pt_remote_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

void pt_remote_close(struct pt_remote *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->closing = true;
	pthread_mutex_unlock(&r->lock);
	if (r->engine) {
		rm_engine_cancel(r);
		pthread_mutex_lock(&r->lock);
		while (r->jobs > 0)
			pthread_cond_wait(&r->cond, &r->lock);
		pthread_mutex_unlock(&r->lock);
		rm_engine_put();
	}
	rm_cache_close(&r->c);
	rm_url_free(&r->u);
	free(r->cache_root);
	free(r->url);
	free(r->origin);
	free(r->held);
	free(r->busy);
	free(r->theirs);
	free(r->regions);
	free(r->readers);
	free(r->own[0]);
	free(r->own[1]);
	free(r->own[2]);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
	pthread_rwlock_destroy(&r->punch);
	pthread_mutex_destroy(&r->share_lock);
	free(r);
}
