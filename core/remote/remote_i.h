/* SPDX-License-Identifier: MIT */
/*
 * remote_i.h -- the parts of ptfs_remote: URLs (url.c), the request engine
 * (engine.c: one thread driving a libcurl multi handle for the process),
 * the block cache on disk (cache.c) and the object (remote.c).
 */
#ifndef PTFS_CORE_REMOTE_I_H
#define PTFS_CORE_REMOTE_I_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "remote/curl_dl.h"

#include "remote/aws.h"
#include "remote/remote.h"

#define RM_BLOCK ((uint64_t)64 << 10)      /* cache granule */
#define RM_FIRST ((uint64_t)1 << 20)       /* open: the first MiB */
#define RM_TAIL ((uint64_t)2 << 20)        /* open: the last 2 MiB */
#define RM_MISS ((uint64_t)1 << 20)        /* a read this far behind the
					    * last one still continues it */
#define RM_CHUNK ((uint64_t)8 << 20)       /* one parallel range */
#define RM_WINDOW_MAX ((uint64_t)128 << 20) /* sequential read-ahead */
#define RM_MAX_INFLIGHT 16
#define RM_RECV ((size_t)512 << 10)        /* libcurl's receive buffer, and
					    * the most one on_body call gets */
/* connections to one host: RM_MAX_INFLIGHT prefetches, and the requests
 * readers wait for, which never queue behind them: the opens of a sharded
 * checkpoint's shards, all at once (ckpt/open.c), each on a connection of
 * its own over HTTP/1.1, so that 100 shards cost one round trip and one
 * more for connecting, not a wave of round trips per 16 */
#define RM_MAX_CONNECTIONS 128

enum rm_kind { RM_HTTP, RM_S3, RM_HF };

/* Where an object lives.  Request URL = prefix + rel + query. */
struct rm_url {
	enum rm_kind kind;
	char *prefix;   /* "scheme://host[:port]/..." up to the object path */
	char *rel;      /* object path below prefix, %-escaped */
	char *query;    /* "?..." of an http URL ("" otherwise): never shown */
	char *key;      /* cache identity (no revision, no query) */
	char *display;  /* the URL for messages: pt_url_redact() of it */
	char *region;   /* s3: signing region */
	struct rm_aws *aws; /* s3: keys and settings (aws.c) */
	char *hf_base;  /* hf: "<endpoint>/[datasets/]ORG/REPO/resolve/" */
	char *hf_api;   /* hf: "<endpoint>/api/models/ORG/REPO/revision/" */
	char *rev;      /* hf: revision as given, then its commit */
	bool pinned;    /* hf: rev is a commit id */
};

/* url.c */
int rm_url_parse(struct rm_url *u, const char *url, const char *s3_endpoint,
		 struct pt_error *err);
/* A "directory": s3://BUCKET/PREFIX/ (rel: the prefix, escaped); any
 * other scheme is refused with a line saying to name a file. */
int rm_url_parse_prefix(struct rm_url *u, const char *url,
			const char *s3_endpoint, struct pt_error *err);
int rm_url_sibling(struct rm_url *out, const struct rm_url *u,
		   const char *rel, struct pt_error *err);
char *rm_url_request(const struct rm_url *u);  /* malloc()ed */
void rm_url_pin(struct rm_url *u, const char *commit);
void rm_url_free(struct rm_url *u);

/* One range request, run by the engine. */
struct rm_job {
	struct pt_remote *r;
	uint64_t off;           /* first byte wanted */
	uint64_t len;           /* bytes wanted (0: open probe, see tail) */
	uint64_t got;           /* bytes received and stored */
	uint64_t got0;          /* got + mem_len when this attempt started */
	uint64_t start;         /* off at submission (blocks marked from) */
	uint64_t marked;        /* blocks below this one are marked held */
	uint64_t published;     /* ... and marked in the map, not claimed */
	bool claimed;           /* its blocks are claimed (cache.c) */
	bool probe;             /* open request: body to mem, headers kept */
	bool tail;              /* probe: suffix range of len bytes */
	bool urgent;            /* a reader waits: before prefetches */
	bool conditional;       /* probe: If-None-Match r->etag */
	bool cancel;            /* its object closes: stop it */
	bool via_origin;        /* sent to r->origin (the CDN's URL expired) */
	unsigned url_gen;       /* r->url_gen when it was sent to r->url */
	char *redirect;         /* the Location being followed, or NULL */
	unsigned hops;          /* redirects followed */
	bool if_range;          /* sent If-Range: a 200 means a new version */
	unsigned attempt;
	double deadline;        /* monotonic seconds */
	double not_before;      /* retry time */
	/* response */
	long status;
	uint64_t total;         /* from Content-Range / Content-Length */
	uint64_t range_first;   /* from Content-Range */
	double retry_after;
	char etag[160];
	char linked[160];       /* X-Linked-Etag (the hub) */
	char commit[64];        /* X-Repo-Commit (the hub) */
	int64_t mtime;          /* Last-Modified */
	char *eff_url;
	uint8_t *mem;           /* probe body */
	uint64_t mem_len;
	uint8_t *dst;           /* direct: the reader's buffer (len bytes) */
	uint8_t *run;           /* others: the body gathered (RM_RECV bytes) */
	size_t run_len;
	bool stopped;           /* a run it was given stopped it */
	bool finished;          /* direct: on_done ran (the reader frees) */
	int rc;                 /* result: 0, -errno */
	char msg[320];
	char errbody[1024];     /* the start of an error answer's body */
	size_t errlen;
	CURL *h;
	struct curl_slist *hdrs;
	char cerr[CURL_ERROR_SIZE];
	/* the owner's callbacks, run on the engine's thread without locks:
	 * body bytes (returns @n to go on, else stops the transfer), and
	 * the end (after which the engine forgets the job).  libcurl hands
	 * a body over 16 KiB at a time whatever it received; a job without
	 * a reader's buffer (dst) gets what one pass of the engine received
	 * in one call (up to RM_RECV), before the transfer's end is judged */
	size_t (*on_body)(struct rm_job *j, const char *p, size_t n);
	void (*on_done)(struct rm_job *j);
	/* optional, once, just before the first request, on the engine's
	 * thread under the engine's lock (the owner may take its own inside,
	 * never the other way round): may shrink the range; false: no
	 * request, on_done runs instead */
	bool (*on_start)(struct rm_job *j);
	struct rm_job *next;
};

/* engine.c: a line to r->o.log (level: syslog's) */
void rm_log(const struct pt_remote *r, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool rm_tracing(void);   /* PTFS_REMOTE_TRACE is set */

/* engine.c */
int rm_engine_get(struct pt_error *err);
void rm_engine_put(void);
void rm_engine_submit(struct rm_job *j);
void rm_engine_cancel(struct pt_remote *r);
int rm_http_setup(CURL *h, const struct pt_remote *r, const char *url,
		  struct curl_slist **hdrs);
double rm_now(void);
void rm_sigv4(CURL *h, const struct rm_aws *a, const char *service,
	      struct curl_slist **hdrs);

/* The block cache of one object (cache.c). */
struct rm_cache {
	char *dir;              /* <cache_dir>/<hash of key> */
	int data_fd;            /* sparse file of the object's bytes */
	int map_fd;             /* bitmap of blocks held (flock'ed) */
	int lock_fd;            /* flock LOCK_SH while open: not evicted */
	int splice_fd;          /* flock LOCK_SH: may splice from data */
	int punch_fd;           /* flock LOCK_SH: storing or copying */
	int inflight_fd;        /* OFD locks: blocks claimed (-1: none) */
	uint64_t written;       /* bytes stored since the last eviction pass */
	bool readonly;          /* read from, never stored into (cache.c) */
};

struct rm_meta {
	uint64_t size;
	char etag[160];
	char ident[160];
	char commit[64];
	int64_t mtime;
	char url[2048];
};

int rm_cache_root(const struct pt_remote_opts *o, char **root,
		  struct pt_error *err);
bool rm_cache_unwritable(int rc);
int rm_cache_open(struct rm_cache *c, const char *root, const char *key,
		  struct rm_meta *m, struct pt_error *err);
void rm_cache_latest(const char *root, const char *key, struct rm_meta *m);
int rm_cache_load_map(struct rm_cache *c, uint8_t *held, uint64_t b0,
		      uint64_t b1);
int rm_cache_sync_map(struct rm_cache *c, uint8_t *held, uint64_t b0,
		      uint64_t b1);
int rm_cache_mark(struct rm_cache *c, uint64_t b0, uint64_t b1);
int rm_cache_unmark(struct rm_cache *c, uint64_t b0, uint64_t b1);
bool rm_cache_claim(struct rm_cache *c, uint64_t b0, uint64_t b1,
		    uint64_t *end);
void rm_cache_release(struct rm_cache *c, uint64_t b0, uint64_t b1);
void rm_cache_unclaimed(struct rm_cache *c, uint8_t *bits, uint64_t b0,
			uint64_t b1);
void rm_cache_evict(const char *root, uint64_t limit, const char *keep);
void rm_cache_close(struct rm_cache *c);

/*
 * A region (io/source.h: a tensor's storage, a stored record) and the
 * read-ahead of the reads inside it: the first read, or one that jumps,
 * fetches its own blocks only; each read that continues the last makes
 * the window at least RM_CHUNK, else 4 times larger (up to win_max: three
 * reads reach it) and fetches that far ahead, never past @hi.
 */
struct rm_region {
	uint64_t lo, hi;
	uint64_t next;            /* end of the last read in it (0: none) */
	uint64_t window;
	uint64_t ahead;           /* read-ahead requested up to here */
};

struct pt_remote {
	struct rm_url u;
	struct pt_remote_opts o;  /* its strings point into own[] */
	char *own[3];
	char *cache_root;
	char *url;                /* request URL (the CDN's after a redirect) */
	char *origin;             /* the URL that redirected there, or NULL */
	/* the engine's thread only: a CDN URL that expired is replaced by
	 * the one the origin redirects to now, asked by one job (renewer)
	 * while the others wait for it; url_gen counts the replacements */
	unsigned url_gen;
	struct rm_job *renewer;
	uint64_t size;
	int64_t mtime;
	char etag[160];           /* validator: If-Match / If-None-Match */
	enum { RM_V_ETAG, RM_V_WEAK, RM_V_MTIME, RM_V_SIZE } vkind;
	struct rm_cache c;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint8_t *held;            /* blocks in the cache */
	uint8_t *busy;            /* blocks being fetched by this process */
	uint8_t *theirs;          /* ... by another one, whose claim came
				   * first (cache.c): reads wait for them */
	uint64_t nblocks;
	uint64_t seq_next;        /* end of the last read */
	struct rm_region *regions; /* sorted by lo, not overlapping */
	size_t nregions, cap_regions;
	/* an object the cache cannot hold whole (larger than 7/8 of
	 * cache_size): its cold blocks are punched out so that the cache
	 * file never holds more than @budget bytes, whichever processes
	 * read it, read-ahead shrinks to a quarter of it, and its bytes are
	 * copied, not spliced (a punch waits for the stores and copies in
	 * flight, rm_make_room) */
	uint64_t budget;          /* 0: no bound of its own */
	uint64_t cursor;          /* the next block own eviction looks at */
	uint16_t *readers;        /* per block: reads waiting for it or
				   * copying it (budget only): never punched */
	uint64_t win_max;         /* RM_WINDOW_MAX or less */
	pthread_rwlock_t punch;   /* rm_share_begin() / rm_make_room() */
	pthread_mutex_t share_lock;
	unsigned sharers;         /* threads in a share: punch file LOCK_SH */
	int fail_rc;
	char fail_msg[2048];
	uint64_t fail_seq;
	/* the cache's filesystem is full (ENOSPC, EDQUOT) and nothing could
	 * be evicted: until then, reads of missing blocks are served from
	 * the network into the reader's buffer (rm_read_direct), and there
	 * is no read-ahead */
	double nospace_until;
	bool nospace_told;        /* warned once */
	bool stall_told;          /* another process's claims outwaited */
	bool stale;
	char stale_why[320];      /* what showed the new version */
	bool closing;
	bool engine;              /* holds a reference to the engine */
	struct rm_job *probes;    /* the open requests, once done */
	int jobs;                 /* jobs in the engine */
};


static inline bool rm_bit(const uint8_t *m, uint64_t b)
{
	return (m[b >> 3] >> (b & 7)) & 1;
}

static inline void rm_set(uint8_t *m, uint64_t b)
{
	m[b >> 3] = (uint8_t)(m[b >> 3] | (1u << (b & 7)));
}

static inline void rm_clr(uint8_t *m, uint64_t b)
{
	m[b >> 3] = (uint8_t)(m[b >> 3] & ~(1u << (b & 7)));
}

#endif /* PTFS_CORE_REMOTE_I_H */
