/* SPDX-License-Identifier: MIT */
/*
 * mount.c -- the FUSE daemon: `ptfs [options] CHECKPOINT MOUNTPOINT`.
 *
 * Why the low-level API: the tree is lazy and may multiply (a pickle whose
 * references fan out has more paths than atoms), so the daemon must not
 * resolve paths on every call the way the high-level API does, nor keep a
 * path -> inode table.  With the low-level API the inode number is the
 * address of a core tree node (stable until unmount), lookups are one hash
 * probe per component, and reads of tensor data go straight from the
 * node's byte range to a spliced reply without a path in sight.
 *
 * Reads of contiguous tensors are answered with a FUSE_BUF_IS_FD buffer
 * over the checkpoint file, so libfuse splices the bytes from the page
 * cache of the checkpoint into /dev/fuse: no private copy.  Everything is
 * immutable while mounted, so attributes and entries are cached by the
 * kernel for a day and file pages are kept between opens (keep_cache).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "ckpt.h"
#include "ptfs.h"

/* Everything is immutable while mounted: let the kernel cache it. */
#define PTFS_TIMEOUT 86400.0
/* The largest request libfuse can take (FUSE_MAX_MAX_PAGES pages). */
#define PTFS_MAX_IO (1u << 20)

struct ptfs {
	struct pt_ckpt *ck;
	const char *ckpath;             /* as given on the command line */
	bool ro;
	uid_t uid;
	gid_t gid;
};

static struct ptfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct pt_node *node_of(struct ptfs *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return pt_tree_root(fs->ck);
	return (struct pt_node *)(uintptr_t)ino;
}

static fuse_ino_t ino_of(struct ptfs *fs, struct pt_node *n)
{
	if (n == pt_tree_root(fs->ck))
		return FUSE_ROOT_ID;
	return (fuse_ino_t)(uintptr_t)n;
}

static void fill_stat(struct ptfs *fs, struct pt_node *n, struct stat *st)
{
	struct timespec mt = pt_ckpt_mtime(fs->ck);
	struct pt_nattr a;

	pt_node_attr(n, &a);
	memset(st, 0, sizeof(*st));
	st->st_ino = (ino_t)a.id;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_size = (off_t)a.size;
	st->st_blksize = 4096;
	st->st_blocks = (blkcnt_t)((a.size + 511) / 512);
	st->st_atim = mt;
	st->st_mtim = mt;
	st->st_ctim = mt;
	switch (a.type) {
	case PT_NT_DIR:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		st->st_size = 0;
		st->st_blocks = 0;
		break;
	case PT_NT_LINK:
		st->st_mode = S_IFLNK | 0777;
		st->st_nlink = 1;
		break;
	case PT_NT_FILE:
		st->st_mode = S_IFREG | (a.writable && !fs->ro ? 0644 : 0444);
		st->st_nlink = 1;
		break;
	}
}

static void ptfs_op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	if (conn->capable & FUSE_CAP_SPLICE_MOVE)
		conn->want |= FUSE_CAP_SPLICE_MOVE;
	/* 1 MiB requests: max_write sets max_pages, which also bounds
	 * reads; readahead is capped by what the kernel offers */
	conn->max_write = PTFS_MAX_IO;
	conn->max_readahead = PTFS_MAX_IO;
	conn->time_gran = 1;
}

static void reply_entry(fuse_req_t req, struct ptfs *fs, struct pt_node *n)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = ino_of(fs, n);
	e.attr_timeout = PTFS_TIMEOUT;
	e.entry_timeout = PTFS_TIMEOUT;
	fill_stat(fs, n, &e.attr);
	fuse_reply_entry(req, &e);
}

static void ptfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *n;
	int rc = 0;

	n = pt_tree_lookup(fs->ck, node_of(fs, parent), name, &rc);
	if (!n) {
		fuse_reply_err(req, rc ? -rc : ENOENT);
		return;
	}
	reply_entry(req, fs, n);
}

static void ptfs_op_getattr(fuse_req_t req, fuse_ino_t ino,
			    struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct stat st;

	(void)fi;
	fill_stat(fs, node_of(fs, ino), &st);
	fuse_reply_attr(req, &st, PTFS_TIMEOUT);
}

static void ptfs_op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *n = node_of(fs, ino);
	struct pt_nattr a;
	char buf[PATH_MAX];
	ssize_t got;

	pt_node_attr(n, &a);
	if (a.type != PT_NT_LINK || a.size >= sizeof(buf)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	got = pt_node_read(fs->ck, n, buf, sizeof(buf) - 1, 0, NULL);
	if (got < 0) {
		fuse_reply_err(req, (int)-got);
		return;
	}
	buf[got] = '\0';
	fuse_reply_readlink(req, buf);
}

static void ptfs_op_opendir(fuse_req_t req, fuse_ino_t ino,
			    struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct pt_nattr a;

	pt_node_attr(node_of(fs, ino), &a);
	if (a.type != PT_NT_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/*
 * Directory offsets: 1 and 2 are "." and "..", entry i of the table is
 * i + 3.  With readdirplus every entry carries its attributes, so `ls -l`
 * needs no lookup per file.
 */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, bool plus)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *dir = node_of(fs, ino);
	size_t count = pt_tree_count(fs->ck, dir), used = 0;
	char *buf = malloc(size);
	off_t i;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (i = off; (uint64_t)i < count + 2; i++) {
		struct fuse_entry_param e;
		struct pt_node *n;
		const char *name;
		size_t need;

		memset(&e, 0, sizeof(e));
		if (i == 0) {
			n = dir;
			name = ".";
		} else if (i == 1) {
			n = pt_node_parent(dir) ? pt_node_parent(dir) : dir;
			name = "..";
		} else {
			n = pt_tree_child(fs->ck, dir, (size_t)(i - 2));
			if (!n)
				break;
			name = pt_node_name(n);
		}
		fill_stat(fs, n, &e.attr);
		if (plus) {
			e.ino = i < 2 ? 0 : ino_of(fs, n);
			e.attr_timeout = PTFS_TIMEOUT;
			e.entry_timeout = PTFS_TIMEOUT;
			need = fuse_add_direntry_plus(req, buf + used, size - used,
						      name, &e, i + 1);
		} else {
			need = fuse_add_direntry(req, buf + used, size - used,
						 name, &e.attr, i + 1);
		}
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void ptfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, false);
}

static void ptfs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
				off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, true);
}

static void ptfs_op_open(fuse_req_t req, fuse_ino_t ino,
			 struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *n = node_of(fs, ino);
	struct pt_nattr a;

	pt_node_attr(n, &a);
	if (a.type == PT_NT_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, fs->ro || !a.writable ? EROFS : EACCES);
		return;
	}
	fi->keep_cache = 1;
	fi->fh = (uint64_t)(uintptr_t)n;
	fuse_reply_open(req, fi);
}

static void ptfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size,
			 off_t off, struct fuse_file_info *fi)
{
	struct ptfs *fs = fs_of(req);
	struct pt_node *n = node_of(fs, ino);
	struct pt_nattr a;
	struct pt_error err;
	uint64_t file_off;
	ssize_t got;
	char *buf;

	(void)fi;
	pt_node_attr(n, &a);
	if ((uint64_t)off >= a.size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > a.size - (uint64_t)off)
		size = (size_t)(a.size - (uint64_t)off);
	if (pt_node_extent(n, (uint64_t)off, size, &file_off) &&
	    pt_ckpt_fd(fs->ck) >= 0) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);

		bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
		bv.buf[0].fd = pt_ckpt_fd(fs->ck);
		bv.buf[0].pos = (off_t)file_off;
		fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pt_error_clear(&err);
	got = pt_node_read(fs->ck, n, buf, size, (uint64_t)off, &err);
	if (got < 0) {
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: read of '%s' at %lld: %s\n",
			 fs->ckpath, pt_node_name(n), (long long)off,
			 err.msg[0] ? err.msg : strerror((int)-got));
		fuse_reply_err(req, EIO);
	} else {
		fuse_reply_buf(req, buf, (size_t)got);
	}
	free(buf);
}

static void ptfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			     size_t size)
{
	struct ptfs *fs = fs_of(req);
	struct pt_buf b;
	const char *p, *end;
	int count;

	pt_buf_init(&b);
	count = pt_node_xattrs(fs->ck, node_of(fs, ino), &b);
	p = b.p;
	end = b.p ? b.p + b.len : NULL;
	while (count-- > 0 && p < end) {
		const char *val = p + strlen(p) + 1;
		size_t vlen = strlen(val);

		if (strcmp(p, name) == 0) {
			if (size == 0)
				fuse_reply_xattr(req, vlen);
			else if (size < vlen)
				fuse_reply_err(req, ERANGE);
			else
				fuse_reply_buf(req, val, vlen);
			pt_buf_free(&b);
			return;
		}
		p = val + vlen + 1;
	}
	pt_buf_free(&b);
	fuse_reply_err(req, ENODATA);
}

static void ptfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct ptfs *fs = fs_of(req);
	struct pt_buf b, names;
	const char *p;
	int count;

	pt_buf_init(&b);
	pt_buf_init(&names);
	count = pt_node_xattrs(fs->ck, node_of(fs, ino), &b);
	p = b.p;
	while (count-- > 0) {
		const char *val = p + strlen(p) + 1;

		pt_buf_add(&names, p, strlen(p) + 1);
		p = val + strlen(val) + 1;
	}
	if (size == 0)
		fuse_reply_xattr(req, names.len);
	else if (size < names.len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, names.p, names.len);
	pt_buf_free(&b);
	pt_buf_free(&names);
}

static void ptfs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_namemax = 255;
	fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ptfs_ops = {
	.init = ptfs_op_init,
	.lookup = ptfs_op_lookup,
	.getattr = ptfs_op_getattr,
	.readlink = ptfs_op_readlink,
	.opendir = ptfs_op_opendir,
	.readdir = ptfs_op_readdir,
	.readdirplus = ptfs_op_readdirplus,
	.open = ptfs_op_open,
	.read = ptfs_op_read,
	.getxattr = ptfs_op_getxattr,
	.listxattr = ptfs_op_listxattr,
	.statfs = ptfs_op_statfs,
};

/* ---- command line ---- */

struct cmdline {
	const char *checkpoint;
	const char *mountpoint;
	int nonopts;
	bool ro;
	bool help;
	bool version;
	bool bad;
	unsigned max_depth;
	unsigned long long max_values;
	unsigned long long max_memory;
	unsigned long long max_records;
};

enum { KEY_HELP, KEY_VERSION, KEY_RO };

#define PTFS_OPT(t, p) { t, offsetof(struct cmdline, p), 1 }
static const struct fuse_opt ptfs_opts[] = {
	PTFS_OPT("max_depth=%u", max_depth),
	PTFS_OPT("max_values=%llu", max_values),
	PTFS_OPT("max_memory=%llu", max_memory),
	PTFS_OPT("max_records=%llu", max_records),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("ro", KEY_RO),
	FUSE_OPT_END
};

static int opt_proc(void *data, const char *arg, int key,
		    struct fuse_args *outargs)
{
	struct cmdline *c = data;

	(void)outargs;
	switch (key) {
	case KEY_HELP:
		c->help = true;
		return 0;
	case KEY_VERSION:
		c->version = true;
		return 0;
	case KEY_RO:
		c->ro = true;
		return 1; /* also a kernel mount option */
	case FUSE_OPT_KEY_NONOPT:
		if (c->nonopts == 0)
			c->checkpoint = arg;
		else if (c->nonopts == 1)
			c->mountpoint = arg;
		else
			c->bad = true;
		c->nonopts++;
		return 0;
	default:
		if (arg[0] == '-' && strcmp(arg, "-f") != 0 &&
		    strcmp(arg, "-d") != 0 && strcmp(arg, "-s") != 0 &&
		    strcmp(arg, "-o") != 0 && strncmp(arg, "-o", 2) != 0) {
			fprintf(stderr, "ptfs: unknown option '%s'\n", arg);
			c->bad = true;
		}
		return 1;
	}
}

/*
 * The kernel's FUSE readahead is capped at the bdi default (128 KiB); the
 * per-mount bdi can be raised by root, as mergerfs does.  Find the mount's
 * device number in mountinfo (no FUSE request involved) and ask for 1 MiB;
 * failure only costs speed.
 */
static void raise_readahead(const char *mountpoint)
{
	char real[PATH_MAX], line[4096], path[128];
	FILE *f;

	if (!realpath(mountpoint, real))
		return;
	f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		char mp[PATH_MAX];

		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, mp) != 3)
			continue;
		if (strcmp(mp, real) != 0 || !strstr(line, " - fuse"))
			continue;
		snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb",
			 maj, min);
		{
			FILE *w = fopen(path, "w");
			if (w) {
				fputs("1024\n", w);
				fclose(w);
			}
		}
	}
	fclose(f);
}

int ptfs_mount_main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts fopts;
	struct fuse_loop_config loop;
	struct fuse_session *se = NULL;
	struct pt_ckpt_opts copts;
	struct cmdline c;
	struct pt_error err;
	struct ptfs fs;
	const char *warn;
	int rc = PTFS_EXIT_ERROR;

	memset(&c, 0, sizeof(c));
	memset(&fs, 0, sizeof(fs));
	memset(&fopts, 0, sizeof(fopts));
	if (fuse_opt_parse(&args, &c, ptfs_opts, opt_proc) != 0 || c.bad) {
		ptfs_usage(stderr);
		fuse_opt_free_args(&args);
		return PTFS_EXIT_USAGE;
	}
	if (c.help) {
		ptfs_usage(stdout);
		fuse_opt_free_args(&args);
		return PTFS_EXIT_OK;
	}
	if (c.version) {
		printf("ptfs %s\n", PTFS_VERSION);
		fuse_opt_free_args(&args);
		return PTFS_EXIT_OK;
	}
	if (!c.checkpoint || !c.mountpoint) {
		fprintf(stderr, "ptfs: %s\n", !c.checkpoint ? "missing CHECKPOINT" : "missing MOUNTPOINT");
		ptfs_usage(stderr);
		fuse_opt_free_args(&args);
		return PTFS_EXIT_USAGE;
	}
	if (fuse_opt_add_arg(&args, c.mountpoint) != 0 ||
	    fuse_parse_cmdline(&args, &fopts) != 0) {
		ptfs_usage(stderr);
		fuse_opt_free_args(&args);
		return PTFS_EXIT_USAGE;
	}
	pt_ckpt_opts_default(&copts);
	if (c.max_depth)
		copts.limits.max_depth = c.max_depth;
	if (c.max_values)
		copts.limits.max_values = c.max_values;
	if (c.max_memory)
		copts.limits.max_memory = c.max_memory;
	if (c.max_records)
		copts.limits.max_records = c.max_records;
	pt_error_clear(&err);
	if (pt_ckpt_open(&fs.ck, c.checkpoint, &copts, &err) != 0) {
		fprintf(stderr, "ptfs: %s: %s\n", c.checkpoint, err.msg);
		goto out;
	}
	warn = pt_ckpt_warnings(fs.ck);
	while (*warn) {
		const char *e = strchr(warn, '\n');
		int len = e ? (int)(e - warn) : (int)strlen(warn);
		fprintf(stderr, "ptfs: %s: warning: %.*s\n", c.checkpoint, len, warn);
		warn += len + (e ? 1 : 0);
	}
	fs.ckpath = c.checkpoint;
	fs.ro = c.ro;
	fs.uid = getuid();
	fs.gid = getgid();
	se = fuse_session_new(&args, &ptfs_ops, sizeof(ptfs_ops), &fs);
	if (!se) {
		rc = PTFS_EXIT_USAGE;
		goto out;
	}
	if (fuse_set_signal_handlers(se) != 0)
		goto out;
	if (fuse_session_mount(se, fopts.mountpoint) != 0) {
		fprintf(stderr, "ptfs: cannot mount on %s\n", fopts.mountpoint);
		fuse_remove_signal_handlers(se);
		goto out;
	}
	raise_readahead(fopts.mountpoint);
	if (fuse_daemonize(fopts.foreground) != 0) {
		fuse_session_unmount(se);
		fuse_remove_signal_handlers(se);
		goto out;
	}
	if (fopts.singlethread) {
		rc = fuse_session_loop(se);
	} else {
		memset(&loop, 0, sizeof(loop));
		loop.clone_fd = fopts.clone_fd;
		loop.max_idle_threads = fopts.max_idle_threads;
		rc = fuse_session_loop_mt(se, &loop);
	}
	rc = rc == 0 ? PTFS_EXIT_OK : PTFS_EXIT_ERROR;
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
out:
	if (se)
		fuse_session_destroy(se);
	pt_ckpt_close(fs.ck);
	free(fopts.mountpoint);
	fuse_opt_free_args(&args);
	return rc;
}
