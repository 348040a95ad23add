/* SPDX-License-Identifier: MIT */
/*
 * mount_main.c -- the FUSE daemon: `ptfs [options] CHECKPOINT MOUNTPOINT`.
 * The command line (ours and libfuse's options, mount(8)'s to ignore), the
 * checkpoint opened and the mount's permissions taken from it, the session
 * mounted (the log set up, the kernel's readahead raised through sysfs),
 * served, drained when a signal ends the loop, what is pending committed,
 * unmounted.  The requests themselves are mount.c's and mount_write.c's.
 */
#include "mount.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/url.h"
#include "ckpt/pending.h"
#include "export/export.h"
#include "log.h"
#include "opts.h"
#include "ptfs.h"
#include "push.h"

/* ---- command line ---- */

struct cmdline {
	const char *checkpoint;
	const char *mountpoint;
	int nonopts;
	bool ro;
	bool help;
	bool version;
	bool bad;
	bool fsname;
	struct pt_ckpt_opts copts;      /* nested, commit= and the limits
					 * (opts.c) */
	char *remote_opt[5];    /* cache_dir= ... s3_endpoint= (fs/remote.c) */
	int previews;                   /* -o previews */
	int nonempty;                   /* -o nonempty (mountpoint.c) */
	char *logfile;                  /* -o log=FILE (log.h) */
};

enum { KEY_HELP, KEY_VERSION, KEY_RO, KEY_RW, KEY_IGNORE, KEY_FSNAME };

static const struct fuse_opt ptfs_opts[] = {
#define PTFS_OPT(t, p) { t, offsetof(struct cmdline, p), 1 }
	PTFS_OPT("cache_dir=%s", remote_opt[0]),
	PTFS_OPT("cache_size=%s", remote_opt[1]),
	PTFS_OPT("timeout=%s", remote_opt[2]),
	PTFS_OPT("cafile=%s", remote_opt[3]),
	PTFS_OPT("s3_endpoint=%s", remote_opt[4]),
	PTFS_OPT("previews", previews),
	PTFS_OPT("nonempty", nonempty),
	PTFS_OPT("log=%s", logfile),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("ro", KEY_RO),
	FUSE_OPT_KEY("rw", KEY_RW),
	FUSE_OPT_KEY("fsname=", KEY_FSNAME),
	/*
	 * mount(8) and fstab options that mean nothing to a FUSE daemon:
	 * mount.fuse3 strips some (user, _netdev, nofail, ...), mount(8)
	 * others (defaults, x-*), but not when called another way, and
	 * libfuse rejects what it does not know.  The atime family is moot:
	 * every file shows the checkpoint's own times.
	 */
	FUSE_OPT_KEY("defaults", KEY_IGNORE),
	FUSE_OPT_KEY("auto", KEY_IGNORE),
	FUSE_OPT_KEY("noauto", KEY_IGNORE),
	FUSE_OPT_KEY("user", KEY_IGNORE),
	FUSE_OPT_KEY("nouser", KEY_IGNORE),
	FUSE_OPT_KEY("users", KEY_IGNORE),
	FUSE_OPT_KEY("owner", KEY_IGNORE),
	FUSE_OPT_KEY("group", KEY_IGNORE),
	FUSE_OPT_KEY("nofail", KEY_IGNORE),
	FUSE_OPT_KEY("_netdev", KEY_IGNORE),
	FUSE_OPT_KEY("comment=", KEY_IGNORE),
	FUSE_OPT_KEY("relatime", KEY_IGNORE),
	FUSE_OPT_KEY("norelatime", KEY_IGNORE),
	FUSE_OPT_KEY("strictatime", KEY_IGNORE),
	FUSE_OPT_KEY("nostrictatime", KEY_IGNORE),
	FUSE_OPT_KEY("lazytime", KEY_IGNORE),
	FUSE_OPT_KEY("nolazytime", KEY_IGNORE),
	FUSE_OPT_KEY("diratime", KEY_IGNORE),
	FUSE_OPT_KEY("nodiratime", KEY_IGNORE),
	FUSE_OPT_KEY("iversion", KEY_IGNORE),
	FUSE_OPT_KEY("noiversion", KEY_IGNORE),
	FUSE_OPT_KEY("mand", KEY_IGNORE),
	FUSE_OPT_KEY("nomand", KEY_IGNORE),
	FUSE_OPT_KEY("silent", KEY_IGNORE),
	FUSE_OPT_KEY("loud", KEY_IGNORE),
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
	case KEY_RW:
		c->ro = false; /* the last of ro/rw wins, as in mount(8) */
		return 1;
	case KEY_FSNAME:
		c->fsname = true;
		return 1;
	case KEY_IGNORE:
		return 0;
	case FUSE_OPT_KEY_NONOPT:
		if (c->nonopts == 0)
			c->checkpoint = arg;
		else if (c->nonopts == 1)
			c->mountpoint = arg;
		else if (!c->bad) {
			fprintf(stderr, "ptfs: extra argument '%s'\n", arg);
			c->bad = true;
		}
		c->nonopts++;
		return 0;
	case FUSE_OPT_KEY_OPT:
		/* -o nested, -o max_depth=N ...: ours; the rest libfuse's */
		switch (ptfs_opt_apply(&c->copts, arg)) {
		case 1:
			return 0;
		case -1:
			c->bad = true;
			return 0;
		}
		/* fall through */
	default:
		if (strncmp(arg, "x-", 2) == 0)
			return 0; /* fstab notes for other tools (x-systemd.*) */
		if (arg[0] == '-' && strcmp(arg, "-f") != 0 &&
		    strcmp(arg, "-d") != 0 && strcmp(arg, "-s") != 0 &&
		    strcmp(arg, "-o") != 0 && strncmp(arg, "-o", 2) != 0) {
			if (!c->bad)    /* the first problem only: one line */
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
 * failure only costs speed.  Returns the device's minor number, which
 * names the connection under /sys/fs/fuse/connections (0: not found).
 */
static unsigned raise_readahead(const char *mountpoint)
{
	char real[PATH_MAX], line[4096], path[128];
	unsigned conn = 0;
	FILE *f;

	if (!realpath(mountpoint, real))
		return 0;
	f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		char mp[PATH_MAX];

		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, mp) != 3)
			continue;
		if (strcmp(mp, real) != 0 || !strstr(line, " - fuse"))
			continue;
		conn = min;
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
	return conn;
}

/*
 * Name the mount after the checkpoint (-o fsname=/abs/model.pt), as
 * sshfs names it after the remote path: mount(8), findmnt and df then show
 * which file is mounted.  A URL is shown redacted and without its query
 * (s3://bucket/run/model.pt, https://host/x.pt).  The user's own fsname=
 * wins.
 */
static int add_fsname(struct fuse_args *args, const char *checkpoint)
{
	char real[PATH_MAX + 8] = "fsname=";
	char *opts = NULL;
	int rc;

	if (ptfs_is_url(checkpoint)) {
		pt_url_redact(checkpoint, real + 7, sizeof(real) - 7);
		real[7 + strcspn(real + 7, "?#")] = '\0';
	} else if (!realpath(checkpoint, real + 7)) {
		return 0; /* pt_ckpt_open reports the problem */
	}
	rc = fuse_opt_add_opt_escaped(&opts, real);
	if (rc == 0)
		rc = fuse_opt_add_arg(args, "-o");
	if (rc == 0)
		rc = fuse_opt_add_arg(args, opts);
	free(opts);
	return rc;
}

/* Before detaching: a rolled-back commit, then the checkpoint's warnings. */
static void print_open_notes(struct pt_ckpt *ck, const char *ckpath)
{
	const char *warn = pt_ckpt_warnings(ck);

	if (*pt_ckpt_recovery(ck))
		fprintf(stderr, "ptfs: %s\n", pt_ckpt_recovery(ck));
	while (*warn) {
		const char *e = strchr(warn, '\n');
		int len = e ? (int)(e - warn) : (int)strlen(warn);

		fprintf(stderr, "ptfs: %s: warning: %.*s\n", ckpath, len, warn);
		warn += len + (e ? 1 : 0);
	}
}

/* The mount shows the checkpoint's owner and modes (see dir_mode() in
 * mount.c), and the kernel checks every caller against them
 * (default_permissions). */
static int take_permissions(struct ptfs *fs, const char *ckpath,
			    struct fuse_args *args)
{
	struct stat st;
	bool was_ro;

	if (ptfs_is_url(ckpath)) {
		/* a remote object has no owner here: the mounting user's,
		 * readable by all (remote mounts are read-only) */
		fs->uid = getuid();
		fs->gid = getgid();
		fs->mode = 0444;
		fs->ro = true;
		return fuse_opt_add_arg(args, "-odefault_permissions");
	}
	if (stat(ckpath, &st) != 0) {
		fprintf(stderr, "ptfs: %s: %s\n", ckpath, strerror(errno));
		return -1;
	}
	fs->uid = st.st_uid;
	fs->gid = st.st_gid;
	fs->mode = st.st_mode & 0777;
	was_ro = fs->ro;
	if (!fs->ro && faccessat(AT_FDCWD, ckpath, W_OK, AT_EACCESS) != 0) {
		fprintf(stderr, "ptfs: %s: %s: mounted read-only\n", ckpath,
			errno == EROFS ? "on a read-only filesystem" :
					 "not writable by this user");
		fs->ro = true;
	}
	if (!fs->ro && S_ISREG(st.st_mode)) {
		/* every commit writes beside the real file (a temporary or
		 * the journal): a directory we cannot write would make every
		 * write fail at fsync and be lost at unmount */
		char *real = realpath(ckpath, NULL);
		char *slash = real ? strrchr(real, '/') : NULL;

		if (slash)
			*(slash == real ? slash + 1 : slash) = '\0';
		if (real && faccessat(AT_FDCWD, real, W_OK, AT_EACCESS) != 0) {
			fprintf(stderr, "ptfs: %s: its directory %s is %s (commits write beside the file): mounted read-only\n",
				ckpath, real, errno == EROFS ? "on a read-only filesystem" :
				"not writable by this user");
			fs->ro = true;
		}
		free(real);
	}
	/* what the kernel's mount table shows (findmnt, /proc/mounts) is
	 * what the mount does */
	if (fs->ro && !was_ro && fuse_opt_add_arg(args, "-oro") != 0)
		return -1;
	return fuse_opt_add_arg(args, "-odefault_permissions");
}

/* The command line into @c and @fopts: PTFS_EXIT_OK to go on (or, with
 * c->version, to stop: the version was printed), else the exit code. */
static int parse_cmdline(struct fuse_args *args, struct cmdline *c,
			 struct fuse_cmdline_opts *fopts)
{
	memset(c, 0, sizeof(*c));
	pt_ckpt_opts_default(&c->copts);
	if (fuse_opt_parse(args, c, ptfs_opts, opt_proc) != 0 || c->bad)
		return PTFS_EXIT_USAGE;
	if (c->help)
		return PTFS_EXIT_HELP;
	if (c->version) {
		ptfs_version(stdout);
		return PTFS_EXIT_OK;
	}
	if (!c->checkpoint || !c->mountpoint) {
		fprintf(stderr, "ptfs: %s\n", !c->checkpoint ? "missing CHECKPOINT" : "missing MOUNTPOINT");
		return PTFS_EXIT_USAGE;
	}
	/* not a usage error: the command line was right */
	if (ptfs_mountpoint_check(c->mountpoint, c->nonempty != 0) != 0)
		return PTFS_EXIT_ERROR;
	if (fuse_opt_add_arg(args, c->mountpoint) != 0 ||
	    fuse_parse_cmdline(args, fopts) != 0)
		return PTFS_EXIT_USAGE;
	return PTFS_EXIT_OK;
}

/* Serve requests until unmounted or signalled; the loop's result. */
static int serve(struct fuse_session *se, const struct fuse_cmdline_opts *fopts)
{
	struct fuse_loop_config *loop;
	int rc;

	if (fopts->singlethread) {
		rc = fuse_session_loop(se);
	} else {
		loop = fuse_loop_cfg_create();
		if (!loop) {
			rc = -ENOMEM;
		} else {
			fuse_loop_cfg_set_clone_fd(loop, (unsigned)fopts->clone_fd);
			/* UINT_MAX means "not given": keep libfuse's default */
			if (fopts->max_idle_threads <= 100000)
				fuse_loop_cfg_set_idle_threads(loop, fopts->max_idle_threads);
			if (fopts->max_threads > 0 && fopts->max_threads <= 100000)
				fuse_loop_cfg_set_max_threads(loop, fopts->max_threads);
			rc = fuse_session_loop_mt(se, loop);
			fuse_loop_cfg_destroy(loop);
		}
	}
	return rc;
}

/* The remote options given with -o, to fs/remote.c ("key=value"). */
static int remote_options(const struct cmdline *c)
{
	static const char *const keys[] = { "cache_dir", "cache_size",
		"timeout", "cafile", "s3_endpoint" };
	static char buf[5][4200];   /* kept: the options point into it */
	size_t k;

	for (k = 0; k < 5; k++) {
		if (!c->remote_opt[k])
			continue;
		snprintf(buf[k], sizeof(buf[k]), "%s=%s", keys[k],
			 c->remote_opt[k]);
		if (ptfs_remote_option(buf[k]) != 1)
			return -1;
	}
	return 0;
}

/*
 * A drop still waits: the request holding its page was lost (libfuse
 * drops a request read as the loop ends), and nothing but the end of the
 * connection frees the page, its program, and our thread.  The process
 * exit cannot end it: the thread's write to /dev/fuse holds the device
 * open.  The kernel's control file system can (root or the mount's owner;
 * mounted by systemd at boot).
 */
static void abort_connection(struct ptfs *fs)
{
	char path[96];
	FILE *f;

	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", fs->conn);
	f = fs->conn ? fopen(path, "w") : NULL;
	if (f) {
		fputs("1\n", f);
		fclose(f);
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: requests were lost as the loop ended: connection aborted\n",
			 fs->ckpath);
	} else {
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: requests were lost as the loop ended and %s cannot be written: programs waiting on the mount stay blocked until it is\n",
			 fs->ckpath, fs->conn ? path : "/sys/fs/fuse/connections/N/abort");
	}
}

/*
 * The loop ended (a signal) while the notifier may be dropping pages: a
 * drop can wait for a page that a WRITE or READ still queued in the
 * kernel holds locked (a partial page being written, a readahead), and
 * nobody reads the queue now.  Answer requests here, one at a time,
 * queueing no more drops, until the notifier is idle (at most 5 s: the
 * commit and the unmount come next).  libfuse hands out no request of a
 * session marked as ended: the mark is reset first.
 */
static void drain(struct ptfs *fs)
{
	struct fuse_buf buf;
	struct timespec t0, t;
	int fd = fuse_session_fd(fs->se);
	int res;

	__atomic_store_n(&fs->draining, true, __ATOMIC_RELEASE);
	if (ptfs_notify_idle(fs->notify))
		return;
	fuse_session_reset(fs->se);
	memset(&buf, 0, sizeof(buf));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!ptfs_notify_idle(fs->notify)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec >= 5)
			break;
		if (poll(&p, 1, 50) <= 0)
			continue;
		res = fuse_session_receive_buf(fs->se, &buf);
		if (res == -EINTR || res == -EAGAIN)
			continue;
		if (res <= 0)
			break;
		fuse_session_process_buf(fs->se, &buf);
	}
	free(buf.mem);
	fuse_session_exit(fs->se);
	/* a drop under way on a connection that is already gone ends on
	 * its own: give it a moment before deciding it is stuck */
	if (!ptfs_notify_idle(fs->notify) &&
	    !ptfs_notify_wait(fs->notify, 1000))
		abort_connection(fs);
}

/* Mount @fs on the mountpoint, serve until unmounted or signalled, commit
 * what is pending and unmount: an exit code. */
static int mount_and_serve(struct ptfs *fs, const struct fuse_cmdline_opts *fopts)
{
	struct fuse_session *se = fs->se;
	int rc;

	/* rm -r removes a list's items one by one by their names */
	pt_edit_keep_names(fs->ck);
	if (fuse_set_signal_handlers(se) != 0)
		return PTFS_EXIT_ERROR;
	if (ptfs_log_open(fs->logfile, !fopts->foreground) != 0) {
		fuse_remove_signal_handlers(se);
		return PTFS_EXIT_ERROR;
	}
	if (fuse_session_mount(se, fopts->mountpoint) != 0) {
		fprintf(stderr, "ptfs: cannot mount on %s\n", fopts->mountpoint);
		fuse_remove_signal_handlers(se);
		return PTFS_EXIT_ERROR;
	}
	fs->conn = raise_readahead(fopts->mountpoint);
	if (fuse_daemonize(fopts->foreground) != 0) {
		fuse_session_unmount(se);
		fuse_remove_signal_handlers(se);
		return PTFS_EXIT_ERROR;
	}
	if (!fopts->foreground || fs->logfile)
		ptfs_log_detached();
	if (ptfs_status_init() != 0)
		fuse_log(FUSE_LOG_WARNING, "ptfs: %s: no state directory for the status file: 'ptfs umount' cannot wait for this mount\n",
			 fs->ckpath);
	/* its thread is made after fuse_daemonize(): a fork keeps none */
	fs->notify = ptfs_notify_new(se);
	if (!fs->notify) {
		fuse_log(FUSE_LOG_ERR, "ptfs: %s: out of memory\n", fs->ckpath);
		rc = PTFS_EXIT_ERROR;
	} else {
		rc = serve(se, fopts);
		ptfs_log_keep();        /* the lines from here on: the verdict's */
		drain(fs);
		/* the loop returns the signal number after SIGTERM/SIGINT/SIGHUP */
		if (ptfs_final_commit(fs, rc > 0 ? "signal" : "unmount") != 0 || rc < 0)
			rc = PTFS_EXIT_ERROR;
		else
			rc = PTFS_EXIT_OK;
	}
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	ptfs_status_write(rc == PTFS_EXIT_OK);
	return rc;
}

int ptfs_mount_main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts fopts;
	struct fuse_session *se = NULL;
	struct cmdline c;
	struct pt_error err;
	struct ptfs fs;
	char found[PATH_MAX];
	int rc = PTFS_EXIT_ERROR;

	memset(&fs, 0, sizeof(fs));
	memset(&fopts, 0, sizeof(fopts));
	rc = parse_cmdline(&args, &c, &fopts);
	if (rc != PTFS_EXIT_OK || c.version) {
		fuse_opt_free_args(&args);
		return rc;
	}
	rc = PTFS_EXIT_ERROR;
	c.checkpoint = ptfs_url_hide(c.checkpoint);   /* never a secret */
	if (!c.fsname && add_fsname(&args, c.checkpoint) != 0) {
		fuse_opt_free_args(&args);
		return PTFS_EXIT_ERROR;
	}
	if (remote_options(&c) != 0) {
		rc = PTFS_EXIT_USAGE;
		goto out;
	}
	c.copts.previews = c.previews != 0;
	c.copts.lean = true;    /* a daemon keeps what it reads for long */
	/* a writable mount may roll an interrupted commit back; a read-only
	 * one never writes (ckpt.h) */
	c.copts.recover = !c.ro;
	c.copts.editable = !c.ro;       /* rm, mv, mkdir (mount_edit.c) */
	ptfs_heap_reserve();
	pt_error_clear(&err);
	if (ptfs_open_checkpoint(c.checkpoint, &c.copts, &fs.ck, &err) != 0) {
		ptfs_report_open(c.checkpoint, &err);
		goto out;
	}
	ptfs_view_attach(fs.ck);
	ptfs_heap_settle();      /* the open's scratch goes back */
	print_open_notes(fs.ck, c.checkpoint);
	fs.ckpath = c.checkpoint;
	fs.ro = c.ro || !pt_ckpt_writable(fs.ck);
	if (!c.ro && !pt_ckpt_writable(fs.ck)) {
		if (ptfs_is_url(c.checkpoint))
			fprintf(stderr, "ptfs: %s: remote checkpoint: mounted read-only\n",
				c.checkpoint);
		else
			fprintf(stderr, "ptfs: %s: %s: mounted read-only\n",
				c.checkpoint, pt_ckpt_format(fs.ck));
		/* a read-only kernel mount: opens for writing fail with
		 * EROFS in the VFS, before any request */
		if (fuse_opt_add_arg(&args, "-oro") != 0)
			goto out;
	}
	if (!fs.ro && !ptfs_is_url(c.checkpoint) &&
	    pt_pending_find(c.checkpoint, ptfs_state_dir(false), found, sizeof(found))) {
		/* a new commit would make the saved writes older than the
		 * file they are for */
		fprintf(stderr, "ptfs: %s: mounted read-only until 'ptfs recover %s' applies or discards the writes kept in %s\n",
			c.checkpoint, c.checkpoint, found);
		fs.ro = true;
		if (fuse_opt_add_arg(&args, "-oro") != 0)
			goto out;
	}
	fs.logfile = c.logfile;
	fs.singlethread = fopts.singlethread;
	fs.may_wait = !fopts.singlethread && fopts.max_threads != 1;
	pthread_mutex_init(&fs.wlock, NULL);
	pthread_mutex_init(&fs.elock, NULL);
	fs.ov = ov_new(fs.ck);
	if (!fs.ov)
		goto out;
	/* every read of tensor bytes sees the uncommitted writes */
	pt_ckpt_set_layer(fs.ck, ov_source(fs.ov));
	if (take_permissions(&fs, c.checkpoint, &args) != 0)
		goto out;
	/* /.ptfs/export: the export forms as generated files */
	(void)pt_export_mount_files(fs.ck);
	se = fuse_session_new(&args, &ptfs_ops, sizeof(ptfs_ops), &fs);
	if (!se) {
		rc = PTFS_EXIT_USAGE;
		goto out;
	}
	fs.se = se;
	/* pushes need a second worker (push.h) */
	if (!fopts.singlethread && fopts.max_threads != 1)
		fs.push = ptfs_push_new(se, fs.ck);
	rc = mount_and_serve(&fs, &fopts);
out:
	/* a thread left waiting keeps the session (notify.h) */
	if (ptfs_notify_free(fs.notify) && se)
		fuse_session_destroy(se);
	ptfs_push_free(fs.push);
	ov_free(fs.ov);
	{
		struct wfile *w, *tmp;
		HASH_ITER(hh, fs.wfiles, w, tmp) {
			HASH_DEL(fs.wfiles, w);
			ov_snap_free(w->was);
			free(w);
		}
	}
	ptfs_edits_free(&fs);
	ptfs_tfiles_free(&fs);
	while (fs.handles) {
		struct fh *h = fs.handles;

		fs.handles = h->next;
		free(h);
	}
	pt_ckpt_close(fs.ck);
	for (size_t k = 0; k < 5; k++)
		free(c.remote_opt[k]);
	free(c.logfile);
	free(fopts.mountpoint);
	fuse_opt_free_args(&args);
	return rc;
}
