/* SPDX-License-Identifier: MIT */
/*
 * replace.c -- safe replacement of a file: temporary file beside the real
 * target, owner, mode, xattrs, checked writes and syncs, rename, directory
 * sync (replace.h); and the fault-injection counters every writer uses.
 */
#include "container/replace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "io/fd.h"

#define RP_MAX_LINKS 40         /* like the kernel's MAXSYMLINKS */
#define RP_COPY_CHUNK (64u << 20)
#define RP_BOUNCE (1u << 20)

/* ---- fault injection ---- */

static pthread_mutex_t fault_mu = PTHREAD_MUTEX_INITIALIZER;
static char fault_step[16];     /* "" = none */
static unsigned fault_nth;
static int fault_errno;         /* -1: SIGKILL, -2: SIGSTOP */
static struct {
	char step[16];
	unsigned n;
} fault_counts[24];

#ifdef PTFS_FAULT_INJECTION
static int errno_by_name(const char *s)
{
	static const struct {
		const char *name;
		int e;
	} names[] = {
		{ "ENOSPC", ENOSPC }, { "EIO", EIO }, { "EDQUOT", EDQUOT },
		{ "EROFS", EROFS }, { "EACCES", EACCES }, { "EPERM", EPERM },
		{ "EXDEV", EXDEV }, { "EOPNOTSUPP", EOPNOTSUPP },
		{ "EINTR", EINTR }, { "KILL", -1 }, { "STOP", -2 },
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i].name) == 0)
			return names[i].e;
	return atoi(s);
}

#endif

/*
 * Nothing is armed until a test sets a fault (pt_fault_set()) or, in a
 * build with PTFS_FAULT_INJECTION (test builds only, see CMakeLists.txt),
 * PTFS_FAULT names one: until then pt_fault() is one relaxed load, no
 * lock.  Builds without it (Release, the Debian package) never read
 * PTFS_FAULT.
 */
static int fault_on;

#ifdef PTFS_FAULT_INJECTION
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

/* PTFS_FAULT=STEP:N:ERR, read once, before any pt_fault_set(). */
static void fault_read_env(void)
{
	const char *v = getenv("PTFS_FAULT");
	char step[16];
	char name[16];
	unsigned n;

	pthread_mutex_lock(&fault_mu);
	if (v && sscanf(v, "%15[a-z]:%u:%15[A-Za-z0-9]", step, &n, name) == 3) {
		snprintf(fault_step, sizeof(fault_step), "%s", step);
		fault_nth = n;
		fault_errno = errno_by_name(name);
		__atomic_store_n(&fault_on, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&fault_mu);
}
#endif

static void fault_env(void)
{
#ifdef PTFS_FAULT_INJECTION
	pthread_once(&fault_once, fault_read_env);
#endif
}

static unsigned *fault_counter(const char *step)
{
	size_t i;

	for (i = 0; i < sizeof(fault_counts) / sizeof(fault_counts[0]); i++) {
		if (fault_counts[i].step[0] == '\0')
			snprintf(fault_counts[i].step,
				 sizeof(fault_counts[i].step), "%s", step);
		if (strcmp(fault_counts[i].step, step) == 0)
			return &fault_counts[i].n;
	}
	return NULL;
}

int pt_fault(const char *step)
{
	unsigned *c;
	int rc = 0;

	fault_env();
	if (!__atomic_load_n(&fault_on, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&fault_mu);
	c = fault_counter(step);
	if (c) {
		++*c;
		if (fault_nth && *c == fault_nth &&
		    strcmp(fault_step, step) == 0) {
			if (fault_errno == -1)
				raise(SIGKILL);
			if (fault_errno == -2) {
				/* stopped here until SIGCONT (tests of a
				 * live committer); then the step runs */
				pthread_mutex_unlock(&fault_mu);
				raise(SIGSTOP);
				return 0;
			}
			rc = fault_errno > 0 ? -fault_errno : -EIO;
		}
	}
	pthread_mutex_unlock(&fault_mu);
	return rc;
}

void pt_fault_set(const char *step, unsigned nth, int errnum)
{
	fault_env();            /* read first: this setting wins */
	pthread_mutex_lock(&fault_mu);
	/* counting from now on (pt_fault_count()), faults or not */
	__atomic_store_n(&fault_on, 1, __ATOMIC_RELEASE);
	memset(fault_counts, 0, sizeof(fault_counts));
	snprintf(fault_step, sizeof(fault_step), "%s", step ? step : "");
	fault_nth = step ? nth : 0;
	fault_errno = errnum;
	pthread_mutex_unlock(&fault_mu);
}

unsigned pt_fault_count(const char *step)
{
	unsigned *c;
	unsigned n;

	pthread_mutex_lock(&fault_mu);
	c = fault_counter(step);
	n = c ? *c : 0;
	pthread_mutex_unlock(&fault_mu);
	return n;
}

/* ---- counted writes ---- */

int pt_pwrite_step(int fd, const void *p, size_t n, uint64_t off,
		   const char *step)
{
	int rc = pt_fault(step);

	return rc ? rc : pt_pwrite_full(fd, p, n, off);
}

/* ---- resolving the target ---- */

/* @dir + "/" + @rel, or @rel when it is absolute (malloc). */
static char *join_path(const char *dir, const char *rel)
{
	char *s;

	if (rel[0] == '/')
		return strdup(rel);
	if (asprintf(&s, "%s/%s", dir, rel) < 0)
		return NULL;
	return s;
}

/* The directory part of @p ("." when none, "/" for the root; malloc). */
static char *dir_of(const char *p)
{
	const char *slash = strrchr(p, '/');

	if (!slash)
		return strdup(".");
	if (slash == p)
		return strdup("/");
	return strndup(p, (size_t)(slash - p));
}

int pt_resolve_path(const char *path, char **real, struct pt_error *err)
{
	char *cur = strdup(path);
	char link[PATH_MAX];
	int hops;

	*real = NULL;
	if (!cur)
		return pt_fail(err, -ENOMEM, "out of memory");
	/* follow the last component by hand, so a dangling or looping link
	 * is named in the message; realpath() then canonicalises the rest */
	for (hops = 0; hops <= RP_MAX_LINKS; hops++) {
		ssize_t k = readlink(cur, link, sizeof(link) - 1);
		char *dir;
		char *next;

		if (k < 0) {
			int e = errno;

			if (e == EINVAL)
				break;          /* not a link: the target */
			pt_fail(err, -e, "%s: %s", cur, strerror(e));
			free(cur);
			return -e;
		}
		link[k] = '\0';
		dir = dir_of(cur);
		next = dir ? join_path(dir, link) : NULL;
		free(dir);
		if (!next) {
			free(cur);
			return pt_fail(err, -ENOMEM, "out of memory");
		}
		free(cur);
		cur = next;
	}
	if (hops > RP_MAX_LINKS) {
		pt_fail(err, -ELOOP, "%s: too many levels of symbolic links",
			path);
		free(cur);
		return -ELOOP;
	}
	*real = realpath(cur, NULL);
	if (!*real) {
		int e = errno;

		pt_fail(err, -e, "%s%s%s: %s", cur, strcmp(cur, path) ? ", the target of " : "",
			strcmp(cur, path) ? path : "", strerror(e));
		free(cur);
		return -e;
	}
	free(cur);
	return 0;
}

unsigned pt_journal_lock_wait_ms = 30000;

/*
 * The lock that keeps a live in-place commit and a recovery apart: an
 * exclusive flock() on the checkpoint itself, held by the committer from
 * before it creates the journal until the journal is gone, and taken by
 * pt_journal_recover() before it reads one.  Without it, a `ptfs ls` run
 * during a mount's commit would take the journal being written for an
 * incomplete one (or the complete one for an interrupted commit) and roll
 * back or set aside under the committer's feet.  The kernel drops the lock
 * of a killed committer.  Waits up to pt_journal_lock_wait_ms: -EBUSY then.
 */
int pt_lock_file(int fd, const char *real, struct pt_error *err)
{
	unsigned waited = 0;

	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK)
			return pt_fail(err, -errno, "lock %s: %s", real, strerror(errno));
		if (waited >= pt_journal_lock_wait_ms)
			return pt_fail(err, -EBUSY,
				       "%s: another process is committing to it in place (locked for %u ms); try again",
				       real, waited);
		usleep(10000);
		waited += 10;
	}
}

/* ---- the temporary file ---- */

static bool ts_eq(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static bool is_stale(const struct pt_replace_expect *x, const struct stat *st)
{
	return (x->dev && x->dev != st->st_dev) ||
	       (x->ino && x->ino != st->st_ino) ||
	       (x->size && x->size != st->st_size) ||
	       ((x->mtime.tv_sec || x->mtime.tv_nsec) &&
		!ts_eq(&x->mtime, &st->st_mtim));
}

/* May a failure to set this attribute be ignored?  Only where the kernel
 * reserves the namespace (security.*, trusted.*, system.*) to privileged
 * callers or the filesystem does not support it: a user.* attribute the
 * original has is the user's data. */
static bool xattr_optional(const char *name, int e)
{
	if (strncmp(name, "user.", 5) == 0)
		return false;
	return e == EPERM || e == EACCES || e == ENOTSUP || e == EOPNOTSUPP;
}

static int copy_one_xattr(int from, int to, const char *name,
			  struct pt_error *err, const char *tmp)
{
	ssize_t n = fgetxattr(from, name, NULL, 0);
	void *v;
	int rc = 0;

	if (n < 0)
		return xattr_optional(name, errno) || errno == ENODATA ? 0
		       : pt_fail(err, -errno, "read attribute %s: %s", name,
				 strerror(errno));
	v = malloc(n ? (size_t)n : 1);
	if (!v)
		return pt_fail(err, -ENOMEM, "out of memory");
	n = fgetxattr(from, name, v, (size_t)n);
	if (n >= 0) {
		rc = pt_fault("xattr");
		if (!rc && fsetxattr(to, name, v, (size_t)n, 0) != 0)
			rc = -errno;
		if (rc && xattr_optional(name, -rc))
			rc = 0;
		if (rc)
			pt_fail(err, rc, "set attribute %s of %s: %s", name,
				tmp, strerror(-rc));
	}
	free(v);
	return rc;
}

/* Every extended attribute of @from onto @to. */
static int copy_xattrs(int from, int to, const char *tmp,
		       struct pt_error *err)
{
	char *names = NULL;
	ssize_t n = 0;
	ssize_t i;
	int tries;
	int rc = 0;

	/* the list may grow between the two calls (ERANGE): ask again */
	for (tries = 0; tries < 8; tries++) {
		ssize_t want = flistxattr(from, NULL, 0);

		if (want <= 0) {
			if (want < 0 && errno != ENOTSUP && errno != EOPNOTSUPP)
				return pt_fail(err, -errno, "list attributes of the original: %s",
					       strerror(errno));
			return 0;       /* none, or not supported here */
		}
		free(names);
		names = malloc((size_t)want);
		if (!names)
			return pt_fail(err, -ENOMEM, "out of memory");
		n = flistxattr(from, names, (size_t)want);
		if (n >= 0 || errno != ERANGE)
			break;
	}
	if (n < 0) {
		rc = pt_fail(err, -errno, "list attributes of the original: %s",
			     strerror(errno));
		free(names);
		return rc;
	}
	for (i = 0; rc == 0 && i < n; i += (ssize_t)strlen(names + i) + 1)
		rc = copy_one_xattr(from, to, names + i, err, tmp);
	free(names);
	return rc;
}

/* Owner, then mode (chown clears set-id bits), then attributes; after
 * the data, since writing clears set-id bits and file capabilities. */
static int copy_identity(struct pt_replace *r, struct pt_error *err)
{
	int rc = pt_fault("owner");

	if (!rc && fchown(r->fd, r->st.st_uid, r->st.st_gid) != 0)
		rc = -errno;
	if (rc)
		return pt_fail(err, rc, "set owner of %s: %s", r->tmp,
			       strerror(-rc));
	rc = pt_fault("mode");
	if (!rc && fchmod(r->fd, r->st.st_mode & 07777) != 0)
		rc = -errno;
	if (rc)
		return pt_fail(err, rc, "set mode of %s: %s", r->tmp,
			       strerror(-rc));
	return copy_xattrs(r->orig, r->fd, r->tmp, err);
}

static int make_temp(struct pt_replace *r, struct pt_error *err)
{
	const char *slash = strrchr(r->real, '/');
	const char *base = slash + 1;   /* r->real is absolute */
	int blen = (int)strlen(base);
	int rc;

	if (blen > 200)
		blen = 200;             /* stay under NAME_MAX */
	if (asprintf(&r->tmp, "%.*s/.%.*s.ptfs-XXXXXX",
		     (int)(slash - r->real), r->real, blen, base) < 0) {
		r->tmp = NULL;
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	rc = pt_fault("create");
	if (!rc) {
		r->fd = mkostemp(r->tmp, O_CLOEXEC);
		if (r->fd < 0)
			rc = -errno;
		else
			/* ours while we live: pt_replace_sweep() skips it
			 * (blocking: a read-only sweep may hold a shared
			 * lock on it for a moment) */
			(void)flock(r->fd, LOCK_EX);
	}
	if (rc) {
		pt_fail(err, rc, "create a temporary file beside %s: %s",
			r->real, strerror(-rc));
		free(r->tmp);
		r->tmp = NULL;
	}
	return rc;
}

/* May this user replace the target and keep its owner?  A rewrite that
 * cannot chown the new file to the old owner would give it away. */
static int may_replace(struct pt_replace *r, struct pt_error *err)
{
	if (faccessat(AT_FDCWD, r->real, W_OK, AT_EACCESS) != 0)
		return pt_fail(err, -errno, "%s: not writable by this user: %s",
			       r->real, strerror(errno));
	if (fchown(r->fd, r->st.st_uid, r->st.st_gid) != 0)
		return pt_fail(err, -errno,
			       "%s belongs to %lu:%lu and a new file made by this user could not keep that owner (%s); use -o commit=inplace",
			       r->real, (unsigned long)r->st.st_uid,
			       (unsigned long)r->st.st_gid, strerror(errno));
	return 0;
}

int pt_replace_begin(struct pt_replace *r, const char *path,
		     const struct pt_replace_expect *expect,
		     struct pt_error *err)
{
	int rc;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	r->orig = -1;
	if (expect)
		r->expect = *expect;
	rc = pt_resolve_path(path, &r->real, err);
	if (rc)
		return rc;
	r->orig = open(r->real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (r->orig >= 0) {
		/* held until the rename: no two writers replace at once,
		 * and none while another patches in place (journal.h) */
		rc = pt_lock_file(r->orig, r->real, err);
		if (rc)
			goto fail;
	}
	if (r->orig < 0 || fstat(r->orig, &r->st) != 0) {
		rc = pt_fail(err, -errno, "%s: %s", r->real, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(r->st.st_mode)) {
		rc = pt_fail(err, -EINVAL, "%s: not a regular file", r->real);
		goto fail;
	}
	if (is_stale(&r->expect, &r->st)) {
		rc = pt_fail(err, -ESTALE,
			     "%s: checkpoint changed on disk since it was opened",
			     r->real);
		goto fail;
	}
	/* from here on, the file we looked at is the one we replace */
	r->expect.dev = r->st.st_dev;
	r->expect.ino = r->st.st_ino;
	r->expect.size = r->st.st_size;
	r->expect.mtime = r->st.st_mtim;
	rc = make_temp(r, err);
	if (!rc)
		rc = may_replace(r, err);
	if (rc)
		goto fail;
	return 0;
fail:
	pt_replace_abort(r);
	return rc;
}

int pt_replace_write(struct pt_replace *r, const void *p, size_t n,
		     uint64_t off, struct pt_error *err)
{
	int rc = pt_pwrite_step(r->fd, p, n, off, "write");

	if (rc)
		return pt_fail(err, rc, "write to %s: %s", r->tmp,
			       strerror(-rc));
	return 0;
}

/* The slow path of pt_replace_copy(). */
static int copy_bounce(struct pt_replace *r, int in, uint64_t src,
		       uint64_t n, uint64_t dst, struct pt_error *err)
{
	size_t cap = n < RP_BOUNCE ? (size_t)n : RP_BOUNCE;
	uint8_t *b = malloc(cap ? cap : 1);
	int rc = 0;

	if (!b)
		return pt_fail(err, -ENOMEM, "out of memory");
	while (rc == 0 && n > 0) {
		size_t k = n < cap ? (size_t)n : cap;

		rc = pt_pread_full(in, b, k, src);
		if (rc) {
			pt_fail(err, rc, "read %s at %llu: %s", r->real,
				(unsigned long long)src,
				rc == -EIO ? "file shrank" : strerror(-rc));
			break;
		}
		rc = pt_replace_write(r, b, k, dst, err);
		src += k;
		dst += k;
		n -= k;
	}
	free(b);
	return rc;
}

int pt_replace_copy(struct pt_replace *r, int in, uint64_t src, uint64_t n,
		    uint64_t dst, struct pt_error *err)
{
	while (n > 0) {
		loff_t io = (loff_t)src, oo = (loff_t)dst;
		size_t k = n < RP_COPY_CHUNK ? (size_t)n : RP_COPY_CHUNK;
		ssize_t got;
		int rc = pt_fault("copy");

		if (rc)
			return pt_fail(err, rc, "copy to %s: %s", r->tmp,
				       strerror(-rc));
		got = copy_file_range(in, &io, r->fd, &oo, k, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && (errno == EXDEV || errno == ENOSYS ||
				errno == EINVAL || errno == EOPNOTSUPP ||
				errno == ETXTBSY || errno == EBADF))
			return copy_bounce(r, in, src, n, dst, err);
		if (got < 0)
			return pt_fail(err, -errno, "copy to %s: %s", r->tmp,
				       strerror(errno));
		if (got == 0)
			return pt_fail(err, -EIO, "read %s at %llu: file shrank",
				       r->real, (unsigned long long)src);
		src += (uint64_t)got;
		dst += (uint64_t)got;
		n -= (uint64_t)got;
	}
	return 0;
}

int pt_replace_clone(struct pt_replace *r, int in, struct pt_error *err)
{
	int rc = pt_fault("clone");

	if (!rc && ioctl(r->fd, FICLONE, in) != 0)
		rc = -errno;
	if (rc == -EOPNOTSUPP || rc == -EXDEV || rc == -EINVAL ||
	    rc == -ENOTTY || rc == -ENOSYS)
		return rc == -ENOSYS ? -EOPNOTSUPP : rc;
	if (rc)
		return pt_fail(err, rc, "clone %s: %s", r->real,
			       strerror(-rc));
	return 0;
}

/* Is @name ".<base>.ptfs-XXXXXX" (our temporary files for @base)? */
static bool is_our_temp(const char *name, const char *base)
{
	size_t bl = strlen(base);
	size_t nl = strlen(name);

	if (bl > 200)
		bl = 200;
	return nl == 1 + bl + 12 && name[0] == '.' &&
	       strncmp(name + 1, base, bl) == 0 &&
	       strncmp(name + 1 + bl, ".ptfs-", 6) == 0;
}

/* Remove (or, unless @remove, only count) the temporary file @name in
 * @dfd when it is provably a dead one of ours: a regular file with one
 * link, owned by the checkpoint's owner (@cst) or by this user, whose
 * lock no live writer holds.  True when it counts. */
static bool sweep_one(int dfd, const char *name, const struct stat *cst,
		      bool remove, uint64_t *bytes)
{
	struct stat st;
	struct stat again;
	bool dead = false;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return false;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
	    (st.st_uid == cst->st_uid || st.st_uid == geteuid()) &&
	    flock(fd, (remove ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) {
		/* the name must still be the file looked at */
		dead = !remove ||
		       (fstatat(dfd, name, &again, AT_SYMLINK_NOFOLLOW) == 0 &&
			again.st_dev == st.st_dev && again.st_ino == st.st_ino &&
			unlinkat(dfd, name, 0) == 0);
		if (dead)
			*bytes += (uint64_t)st.st_size;
	}
	close(fd);
	return dead;
}

int pt_replace_sweep(const char *path, bool locked, bool remove, char *note,
		     size_t cap)
{
	struct pt_error err;
	struct stat cst;
	struct dirent *d;
	char *real = NULL;
	char *dir = NULL;
	uint64_t bytes = 0;
	DIR *dp = NULL;
	int lfd;
	int n = 0;

	note[0] = '\0';
	if (pt_resolve_path(path, &real, &err) != 0)
		return 0;
	lfd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	/* every writer holds the checkpoint's lock from before it creates
	 * its temporary file until after it locked it: with the lock, no
	 * temporary is between its creation and its own lock */
	if (lfd >= 0 && fstat(lfd, &cst) == 0 &&
	    (locked || flock(lfd, LOCK_EX | LOCK_NB) == 0))
		dir = dir_of(real);
	dp = dir ? opendir(dir) : NULL;
	while (dp && (d = readdir(dp)))
		if (is_our_temp(d->d_name, strrchr(real, '/') + 1) &&
		    sweep_one(dirfd(dp), d->d_name, &cst, remove, &bytes))
			n++;
	if (dp)
		closedir(dp);
	if (lfd >= 0)
		close(lfd);
	if (n)
		snprintf(note, cap,
			 "%s %d temporary file%s (%llu bytes) beside %s left by an interrupted commit%s",
			 remove ? "removed" : "found", n, n > 1 ? "s" : "",
			 (unsigned long long)bytes, real,
			 remove ? "" : " (the next writable open or 'ptfs recover' removes them)");
	free(dir);
	free(real);
	return n;
}

int pt_fsync_parent(const char *path)
{
	char *dir = dir_of(path);
	int fd;
	int rc;

	if (!dir)
		return -ENOMEM;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (fd < 0)
		return -errno;
	rc = pt_fault("dirfsync");
	if (!rc && fsync(fd) != 0)
		rc = -errno;
	close(fd);
	return rc;
}

int pt_replace_seal(struct pt_replace *r, struct pt_error *err)
{
	struct stat now;
	int rc = copy_identity(r, err);
	int fd = r->fd;

	if (rc)
		goto fail;
	rc = pt_fault("fsync");
	if (!rc && fsync(fd) != 0)
		rc = -errno;
	if (rc) {
		pt_fail(err, rc, "fsync %s: %s", r->tmp, strerror(-rc));
		goto fail;
	}
	r->fd = -1;
	rc = pt_fault("close");
	if (close(fd) != 0 && !rc)
		rc = -errno;
	if (rc) {
		pt_fail(err, rc, "close %s: %s", r->tmp, strerror(-rc));
		goto fail;
	}
	/* last look: did anyone write to or replace the target meanwhile? */
	if (stat(r->real, &now) != 0 || is_stale(&r->expect, &now)) {
		rc = pt_fail(err, -ESTALE,
			     "%s: checkpoint changed on disk since it was opened",
			     r->real);
		goto fail;
	}
	return 0;
fail:
	pt_replace_abort(r);
	return rc;
}

int pt_replace_rename(struct pt_replace *r, struct pt_error *err)
{
	int rc = pt_fault("rename");

	if (!rc && rename(r->tmp, r->real) != 0)
		rc = -errno;
	if (rc) {
		pt_fail(err, rc, "rename %s to %s: %s", r->tmp, r->real,
			strerror(-rc));
		pt_replace_abort(r);
		return rc;
	}
	free(r->tmp);
	r->tmp = NULL;
	/* renamed: that is the commit; a failed directory fsync cannot be
	 * undone, and reporting it would say the old file is still there */
	(void)pt_fsync_parent(r->real);
	pt_replace_abort(r);
	return 0;
}

int pt_replace_commit(struct pt_replace *r, struct pt_error *err)
{
	int rc = pt_replace_seal(r, err);

	return rc ? rc : pt_replace_rename(r, err);
}

void pt_replace_abort(struct pt_replace *r)
{
	if (r->fd >= 0)
		close(r->fd);
	if (r->orig >= 0)
		close(r->orig);
	r->fd = -1;
	r->orig = -1;
	if (r->tmp)
		unlink(r->tmp);
	free(r->tmp);
	free(r->real);
	r->tmp = NULL;
	r->real = NULL;
}
