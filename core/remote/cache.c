/* SPDX-License-Identifier: MIT */
/*
 * cache.c -- the block cache on disk, shared by concurrent processes.
 *
 *   ROOT/v1/<hash of key>/latest           the newest version seen (meta)
 *   ROOT/v1/<hash of key>/<hash of ident>/ one version of the object:
 *       data   sparse file, the object's bytes at their own offsets
 *       map    one bit per RM_BLOCK: the block is in data
 *       lock   flock(LOCK_SH) by every process that has it open; its
 *              mtime is the LRU clock; eviction takes LOCK_EX|LOCK_NB
 *       splice flock(LOCK_SH) by every process that may reply from data
 *              without copying (an object without a budget, remote.c)
 *       punch  flock(LOCK_SH) around every store (pwrite and mark) and
 *              copy of a bounded object's blocks; LOCK_EX|LOCK_NB, with
 *              splice's, to punch blocks out and unmark them
 *       inflight  empty; byte N stands for block N: an OFD write lock
 *              (fcntl F_OFD_SETLK) on it claims the block's download
 *
 * A block is written with pwrite() first and marked in map after, under
 * flock(map, LOCK_EX), merging with the marks of other processes, so a
 * bit never promises bytes that are not there; a block is punched out
 * only while no process stores or copies (punch) nor splices (splice),
 * and unmarked before anyone looks again.  A version is immutable:
 * a changed object gets a new directory, never rewrites one in use.
 *
 * One download per block: a process claims blocks just before it asks
 * for them (rm_cache_claim, when the request starts, not when it is
 * queued), marks them in map as they arrive (every MiB) and releases the
 * claim after the mark, or when the fetch fails.  The claim is taken
 * first and map read after it, so a block marked and released meanwhile
 * is seen held, never fetched twice.  A process that finds a block
 * claimed waits for its mark instead of fetching it (remote.c, rm_wait);
 * once the claim is gone without a mark (the owner failed, or died: the
 * kernel drops the locks of a dead process's open files), it claims and
 * fetches the block itself.  Nobody blocks on a claim while holding one
 * (claims are only tried, F_OFD_SETLK, never waited for), so no two
 * processes reading in opposite orders can deadlock.  Without the file
 * (it could not be made) or OFD locks (Linux before 3.15), every claim
 * succeeds: each process fetches alone.  A cache that cannot be written
 * at all (read-only, full) is not stored into: reads go to the network,
 * except those of blocks a read-only cache already holds for the version
 * (its data and map opened read-only; nobody writes or punches them
 * there, and its lock held shared keeps another user's eviction off).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "io/fd.h"
#include "remote/remote_i.h"

static uint64_t rm_fnv(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

static int rm_mkdirs(char *path)
{
	char *p;

	for (p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) && errno != EEXIST) {
			*p = '/';
			return -errno;
		}
		*p = '/';
	}
	if (mkdir(path, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

/* A cache that cannot be written (@rc): a read-only directory or
 * filesystem, a full one. */
bool rm_cache_unwritable(int rc)
{
	return rc == -EROFS || rc == -EACCES || rc == -EPERM ||
	       rc == -ENOSPC || rc == -EDQUOT;
}

int rm_cache_root(const struct pt_remote_opts *o, char **root,
		  struct pt_error *err)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char buf[4096];
	int rc;

	if (o->cache_dir)
		snprintf(buf, sizeof(buf), "%s/v1", o->cache_dir);
	else if (xdg && *xdg == '/')
		snprintf(buf, sizeof(buf), "%s/ptfs/v1", xdg);
	else if (home && *home == '/')
		snprintf(buf, sizeof(buf), "%s/.cache/ptfs/v1", home);
	else
		return pt_fail(err, -EINVAL,
			       "no cache directory: set -o cache_dir=, XDG_CACHE_HOME or HOME");
	rc = rm_mkdirs(buf);
	/* read-only or full: rm_cache_open fails too, and the objects are
	 * read without a cache (remote.c) */
	if (rc && !rm_cache_unwritable(rc))
		return pt_fail(err, rc, "cache directory %s: %s", buf,
			       strerror(-rc));
	*root = strdup(buf);
	return *root ? 0 : pt_fail(err, -ENOMEM, "out of memory");
}

static void rm_meta_write(int dirfd, const char *name, const struct rm_meta *m)
{
	char tmp[64];
	FILE *f;
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.%d", name, (int)getpid());
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		return;
	}
	fprintf(f, "size %llu\nmtime %lld\netag %s\nident %s\ncommit %s\nurl %s\n",
		(unsigned long long)m->size, (long long)m->mtime, m->etag,
		m->ident, m->commit, m->url);
	if (fclose(f) == 0)
		renameat(dirfd, tmp, dirfd, name);
	else
		unlinkat(dirfd, tmp, 0);
}

static void rm_meta_field(char *dst, size_t cap, const char *line, size_t skip)
{
	size_t n = strcspn(line + skip, "\n");

	if (n >= cap)
		n = cap - 1;
	memcpy(dst, line + skip, n);
	dst[n] = '\0';
}

static int rm_meta_read(int dirfd, const char *name, struct rm_meta *m)
{
	char line[2200];
	FILE *f;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);

	memset(m, 0, sizeof(*m));
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "size ", 5))
			m->size = strtoull(line + 5, NULL, 10);
		else if (!strncmp(line, "mtime ", 6))
			m->mtime = strtoll(line + 6, NULL, 10);
		else if (!strncmp(line, "etag ", 5))
			rm_meta_field(m->etag, sizeof(m->etag), line, 5);
		else if (!strncmp(line, "ident ", 6))
			rm_meta_field(m->ident, sizeof(m->ident), line, 6);
		else if (!strncmp(line, "commit ", 7))
			rm_meta_field(m->commit, sizeof(m->commit), line, 7);
		else if (!strncmp(line, "url ", 4))
			rm_meta_field(m->url, sizeof(m->url), line, 4);
	}
	fclose(f);
	return 0;
}

/*
 * The newest version of @key held in the cache, into @m (etag empty when
 * there is none, or its blocks were evicted).
 */
void rm_cache_latest(const char *root, const char *key, struct rm_meta *m)
{
	char path[4200];
	struct stat st;
	int dfd;

	memset(m, 0, sizeof(*m));
	snprintf(path, sizeof(path), "%s/%016llx", root,
		 (unsigned long long)rm_fnv(key));
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (rm_meta_read(dfd, "latest", m) == 0) {
		snprintf(path, sizeof(path), "%016llx/map",
			 (unsigned long long)rm_fnv(m->ident));
		if (strcmp(m->url, key) || !m->etag[0] ||
		    fstatat(dfd, path, &st, 0) != 0)
			memset(m, 0, sizeof(*m));
	}
	close(dfd);
}

/* The version's directory @c->dir exists but cannot be written: its
 * data and map, read-only, when they are this version's.  0 or -errno. */
static int rm_cache_open_ro(struct rm_cache *c, const struct rm_meta *m)
{
	char path[4200];
	struct stat st;

	snprintf(path, sizeof(path), "%s/lock", c->dir);
	c->lock_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (c->lock_fd < 0 || flock(c->lock_fd, LOCK_SH))
		return -errno;
	snprintf(path, sizeof(path), "%s/data", c->dir);
	c->data_fd = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/map", c->dir);
	c->map_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (c->data_fd < 0 || c->map_fd < 0 || fstat(c->data_fd, &st))
		return -errno;
	if ((uint64_t)st.st_size != m->size)
		return -ESTALE;
	c->readonly = true;
	return 0;
}

int rm_cache_open(struct rm_cache *c, const char *root, const char *key,
		  struct rm_meta *m, struct pt_error *err)
{
	char path[4200];
	uint64_t mapsize = (m->size + RM_BLOCK - 1) / RM_BLOCK / 8 + 1;
	struct stat st;
	int kfd;
	int rc;

	memset(c, 0, sizeof(*c));
	c->data_fd = c->map_fd = c->lock_fd = c->splice_fd = c->punch_fd = -1;
	c->inflight_fd = -1;
	snprintf(m->url, sizeof(m->url), "%s", key);
	snprintf(path, sizeof(path), "%s/%016llx/%016llx", root,
		 (unsigned long long)rm_fnv(key),
		 (unsigned long long)rm_fnv(m->ident));
	rc = rm_mkdirs(path);
	c->dir = strdup(path);
	if (rc || !c->dir)
		goto fail;
	snprintf(path, sizeof(path), "%s/lock", c->dir);
	c->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->lock_fd < 0 && rm_cache_unwritable(-errno)) {
		rc = -errno;
		if (rm_cache_open_ro(c, m) == 0)
			return 0;
		goto fail;      /* unwritable, as the first error said */
	}
	if (c->lock_fd < 0 || flock(c->lock_fd, LOCK_SH))
		goto fail_errno;
	futimens(c->lock_fd, NULL);
	snprintf(path, sizeof(path), "%s/data", c->dir);
	c->data_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	snprintf(path, sizeof(path), "%s/map", c->dir);
	c->map_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	snprintf(path, sizeof(path), "%s/splice", c->dir);
	c->splice_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	snprintf(path, sizeof(path), "%s/punch", c->dir);
	c->punch_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	/* without it (cannot be made), this process fetches alone */
	snprintf(path, sizeof(path), "%s/inflight", c->dir);
	c->inflight_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (c->data_fd < 0 || c->map_fd < 0 || c->splice_fd < 0 ||
	    c->punch_fd < 0 || fstat(c->data_fd, &st))
		goto fail_errno;
	if ((uint64_t)st.st_size != m->size &&
	    (ftruncate(c->data_fd, (off_t)m->size) ||
	     ftruncate(c->map_fd, (off_t)mapsize)))
		goto fail_errno;
	snprintf(path, sizeof(path), "%s/%016llx", root,
		 (unsigned long long)rm_fnv(key));
	kfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (kfd >= 0) {
		rm_meta_write(kfd, "latest", m);
		close(kfd);
	}
	return 0;
fail_errno:
	rc = -errno;
fail:
	rc = rc ? rc : -ENOMEM;
	pt_fail(err, rc, "cache %s: %s", c->dir ? c->dir : root, strerror(-rc));
	rm_cache_close(c);
	return rc;
}

/* OR the marks of blocks [b0, b1) in the map file into @held. */
int rm_cache_load_map(struct rm_cache *c, uint8_t *held, uint64_t b0,
		      uint64_t b1)
{
	uint64_t i0 = b0 / 8, i1 = (b1 + 7) / 8;
	uint8_t *tmp = malloc(i1 - i0 + 1);
	ssize_t got;
	uint64_t i;

	if (!tmp)
		return -ENOMEM;
	flock(c->map_fd, LOCK_SH);
	got = pt_pread_upto(c->map_fd, tmp, i1 - i0, i0);
	flock(c->map_fd, LOCK_UN);
	for (i = 0; got > 0 && i < (uint64_t)got; i++)
		held[i0 + i] |= tmp[i];
	free(tmp);
	return got < 0 ? (int)got : 0;
}

/*
 * Make bits [b0, b1) of @held those of the map file (another process may
 * have punched blocks out): 1 when all of them are set there, 0 when
 * not, or -errno.
 */
int rm_cache_sync_map(struct rm_cache *c, uint8_t *held, uint64_t b0,
		      uint64_t b1)
{
	uint64_t i0 = b0 / 8, i1 = (b1 + 7) / 8, b;
	uint8_t *tmp = calloc(1, i1 - i0 + 1);
	ssize_t got;
	int all = 1;

	if (!tmp)
		return -ENOMEM;
	flock(c->map_fd, LOCK_SH);
	got = pt_pread_upto(c->map_fd, tmp, i1 - i0, i0);
	flock(c->map_fd, LOCK_UN);
	for (b = b0; got >= 0 && b < b1; b++) {
		if (rm_bit(tmp, b - i0 * 8)) {
			rm_set(held, b);
		} else {
			rm_clr(held, b);
			all = 0;
		}
	}
	free(tmp);
	return got < 0 ? (int)got : all;
}

/* Mark blocks [b0, b1) in the map file (after their pwrite()), and only
 * those: a neighbour another process punched out stays unmarked. */
int rm_cache_mark(struct rm_cache *c, uint64_t b0, uint64_t b1)
{
	uint64_t i0 = b0 / 8, i1 = (b1 + 7) / 8, b;
	uint8_t *tmp = calloc(1, i1 - i0 + 1);
	ssize_t got;
	int rc = 0;

	if (!tmp)
		return -ENOMEM;
	flock(c->map_fd, LOCK_EX);
	got = pt_pread_upto(c->map_fd, tmp, i1 - i0, i0);
	if (got < 0)
		memset(tmp, 0, i1 - i0);
	for (b = b0; b < b1; b++)
		rm_set(tmp, b - i0 * 8);
	rc = pt_pwrite_full(c->map_fd, tmp, i1 - i0, i0);
	flock(c->map_fd, LOCK_UN);
	free(tmp);
	return rc;
}

/* Clear the marks of blocks [b0, b1) in the map file (their bytes were
 * punched out of data first). */
int rm_cache_unmark(struct rm_cache *c, uint64_t b0, uint64_t b1)
{
	uint64_t i0 = b0 / 8, i1 = (b1 + 7) / 8, b;
	uint8_t *tmp = calloc(1, i1 - i0 + 1);
	ssize_t got;
	int rc = 0;

	if (!tmp)
		return -ENOMEM;
	flock(c->map_fd, LOCK_EX);
	got = pt_pread_upto(c->map_fd, tmp, i1 - i0, i0);
	if (got < 0)
		rc = (int)got;
	for (b = b0; !rc && b < b1; b++)
		rm_clr(tmp, b - i0 * 8);
	if (!rc)
		rc = pt_pwrite_full(c->map_fd, tmp, i1 - i0, i0);
	flock(c->map_fd, LOCK_UN);
	free(tmp);
	return rc;
}

/* ---- claims (the inflight file): one download per block ---- */

/* fcntl(@cmd) of an OFD lock of @type on blocks [b0, b1): 0 or -1. */
static int rm_claim_fcntl(const struct rm_cache *c, int cmd, short type,
			  uint64_t b0, uint64_t b1, struct flock *fl)
{
	memset(fl, 0, sizeof(*fl));
	fl->l_type = type;
	fl->l_whence = SEEK_SET;
	fl->l_start = (off_t)b0;
	fl->l_len = (off_t)(b1 - b0);
	return fcntl(c->inflight_fd, cmd, fl);
}

/* The end of the claim @fl found by F_OFD_GETLK, at most @b1. */
static uint64_t rm_claim_end(const struct flock *fl, uint64_t b1)
{
	uint64_t e = (uint64_t)fl->l_start + (uint64_t)fl->l_len;

	return fl->l_len <= 0 || e > b1 ? b1 : e;
}

/*
 * Claim blocks from @b0 on, before fetching them: true, with *@end the
 * end of the run claimed (more than @b0, at most @b1), or false when
 * another process claims block @b0, with *@end the end of its claim (at
 * most @b1).  Without an inflight file or OFD locks, everything is
 * claimed (the process fetches alone).
 */
bool rm_cache_claim(struct rm_cache *c, uint64_t b0, uint64_t b1,
		    uint64_t *end)
{
	uint64_t hi = b1;
	struct flock fl;
	int tries;

	for (tries = 0; tries < 64; tries++) {
		if (c->inflight_fd < 0 ||
		    rm_claim_fcntl(c, F_OFD_SETLK, F_WRLCK, b0, hi, &fl) == 0 ||
		    (errno != EAGAIN && errno != EACCES))
			break;
		/* a claim in the way: take what lies before it */
		if (rm_claim_fcntl(c, F_OFD_GETLK, F_WRLCK, b0, hi, &fl))
			break;
		if (fl.l_type == F_UNLCK)
			continue;           /* released meanwhile */
		if ((uint64_t)fl.l_start <= b0) {
			*end = rm_claim_end(&fl, b1);
			return false;
		}
		hi = (uint64_t)fl.l_start;
	}
	if (tries == 64) {          /* claims come and go: ask later */
		*end = b0 + 1;
		return false;
	}
	*end = hi;
	return true;
}

/* Release the claim of blocks [b0, b1) (marked in map, or not fetched). */
void rm_cache_release(struct rm_cache *c, uint64_t b0, uint64_t b1)
{
	struct flock fl;

	if (c->inflight_fd >= 0 && b1 > b0)
		rm_claim_fcntl(c, F_OFD_SETLK, F_UNLCK, b0, b1, &fl);
}

/* Clear the bits of @bits in [b0, b1) whose blocks no other process
 * claims (any more). */
void rm_cache_unclaimed(struct rm_cache *c, uint8_t *bits, uint64_t b0,
			uint64_t b1)
{
	struct flock fl;
	uint64_t b;

	while (b0 < b1) {
		uint64_t lo;

		if (c->inflight_fd < 0 ||
		    rm_claim_fcntl(c, F_OFD_GETLK, F_WRLCK, b0, b1, &fl) ||
		    fl.l_type == F_UNLCK) {
			for (b = b0; b < b1; b++)
				rm_clr(bits, b);
			return;
		}
		/* one claim: the blocks before it may be free, or claimed
		 * by others still (GETLK names one of them) */
		lo = (uint64_t)fl.l_start > b0 ? (uint64_t)fl.l_start : b0;
		if (lo > b0)
			rm_cache_unclaimed(c, bits, b0, lo);
		b0 = rm_claim_end(&fl, b1);
	}
}

void rm_cache_close(struct rm_cache *c)
{
	if (c->lock_fd >= 0) {
		futimens(c->lock_fd, NULL);
		close(c->lock_fd);
	}
	if (c->data_fd >= 0)
		close(c->data_fd);
	if (c->map_fd >= 0)
		close(c->map_fd);
	if (c->splice_fd >= 0)
		close(c->splice_fd);
	if (c->punch_fd >= 0)
		close(c->punch_fd);
	if (c->inflight_fd >= 0)
		close(c->inflight_fd);      /* drops this process's claims */
	free(c->dir);
	memset(c, 0, sizeof(*c));
	c->data_fd = c->map_fd = c->lock_fd = c->splice_fd = c->punch_fd = -1;
	c->inflight_fd = -1;
}

struct rm_ver {
	char path[560];
	uint64_t bytes;
	struct timespec used;
};

static int rm_ver_cmp(const void *a, const void *b)
{
	const struct rm_ver *x = a, *y = b;

	if (x->used.tv_sec != y->used.tv_sec)
		return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
	return x->used.tv_nsec < y->used.tv_nsec ? -1 :
	       x->used.tv_nsec > y->used.tv_nsec;
}

/* Append the versions under ROOT/<key dir> to *@v. */
static void rm_scan_key(const char *kdir, struct rm_ver **v, size_t *n,
			size_t *cap)
{
	DIR *d = opendir(kdir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		struct rm_ver x;
		struct stat st;
		char p[700];

		if (e->d_name[0] == '.' || strlen(e->d_name) != 16)
			continue;
		snprintf(x.path, sizeof(x.path), "%.500s/%.16s", kdir,
			 e->d_name);
		snprintf(p, sizeof(p), "%s/lock", x.path);
		if (stat(p, &st))
			continue;
		x.used = st.st_mtim;
		x.bytes = 0;
		snprintf(p, sizeof(p), "%s/data", x.path);
		if (!stat(p, &st))
			x.bytes += (uint64_t)st.st_blocks * 512;
		if (*n == *cap) {
			struct rm_ver *nv;

			*cap = *cap ? 2 * *cap : 64;
			nv = realloc(*v, *cap * sizeof(**v));
			if (!nv)
				break;
			*v = nv;
		}
		(*v)[(*n)++] = x;
	}
	if (d)
		closedir(d);
}

/* Remove one version unless a process has it open. */
static uint64_t rm_drop(const struct rm_ver *x)
{
	char p[700];
	int fd;

	snprintf(p, sizeof(p), "%s/lock", x->path);
	fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB)) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	snprintf(p, sizeof(p), "%s/data", x->path);
	unlink(p);
	snprintf(p, sizeof(p), "%s/map", x->path);
	unlink(p);
	snprintf(p, sizeof(p), "%s/splice", x->path);
	unlink(p);
	snprintf(p, sizeof(p), "%s/punch", x->path);
	unlink(p);
	snprintf(p, sizeof(p), "%s/inflight", x->path);
	unlink(p);
	snprintf(p, sizeof(p), "%s/lock", x->path);
	unlink(p);
	close(fd);
	rmdir(x->path);
	return x->bytes;
}

/*
 * Evict least recently used versions (never one open in some process, nor
 * @keep) until the cache holds at most @limit bytes and its filesystem has
 * a free-space floor of min(5%, 2 GiB) left.
 */
void rm_cache_evict(const char *root, uint64_t limit, const char *keep)
{
	struct rm_ver *v = NULL;
	size_t n = 0, cap = 0, i;
	uint64_t total = 0, avail = UINT64_MAX, floor = 0;
	struct statvfs sv;
	DIR *d = opendir(root);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char kdir[600];

		if (e->d_name[0] == '.' || strlen(e->d_name) != 16 ||
		    strlen(root) > 400)
			continue;
		snprintf(kdir, sizeof(kdir), "%.400s/%.16s", root, e->d_name);
		rm_scan_key(kdir, &v, &n, &cap);
	}
	if (d)
		closedir(d);
	if (statvfs(root, &sv) == 0) {
		avail = (uint64_t)sv.f_bavail * sv.f_frsize;
		floor = (uint64_t)sv.f_blocks * sv.f_frsize / 20;
		if (floor > ((uint64_t)2 << 30))
			floor = (uint64_t)2 << 30;
	}
	for (i = 0; i < n; i++)
		total += v[i].bytes;
	if (n > 1)  /* none at all: a root that could not be made */
		qsort(v, n, sizeof(*v), rm_ver_cmp);
	for (i = 0; i < n && (total > limit || avail < floor); i++) {
		uint64_t freed;

		if (keep && !strcmp(v[i].path, keep))
			continue;
		freed = rm_drop(&v[i]);
		total -= freed;
		if (avail != UINT64_MAX)
			avail += freed;
	}
	free(v);
}
