/* SPDX-License-Identifier: MIT */
/* log.c -- the daemon's log and its status file (log.h). */
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <fuse_lowlevel.h>

#include "base/buf.h"

enum sink { SINK_STDERR, SINK_FILE, SINK_SYSLOG };

static struct {
	pthread_mutex_t lock;
	enum sink sink;
	int fd;                         /* SINK_FILE */
	bool keep;                      /* ptfs_log_keep() was called */
	bool detached;                  /* stderr is gone (ptfs_log_detached) */
	struct pt_buf kept;
	char status[PATH_MAX];          /* "" until ptfs_status_init() */
	char state[PATH_MAX];
} lg = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

/* mkdir -p with mode 0700 for the parts it makes. */
static int make_dirs(char *path)
{
	char *p;

	for (p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST) {
			*p = '/';
			return -errno;
		}
		*p = '/';
	}
	return mkdir(path, 0700) != 0 && errno != EEXIST ? -errno : 0;
}

/* /tmp/ptfs-UID, made 0700 and checked to be ours (a directory in a
 * world-writable place may have been made by someone else first). */
static int private_tmp(char *out, size_t cap, bool make)
{
	struct stat st;

	snprintf(out, cap, "/tmp/ptfs-%ld", (long)geteuid());
	if (make && mkdir(out, 0700) != 0 && errno != EEXIST)
		return -errno;
	if (lstat(out, &st) != 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
		return -EPERM;
	return 0;
}

/*
 * $XDG_STATE_HOME/ptfs, else ~/.local/state/ptfs (the XDG default), else
 * /tmp/ptfs-UID for a user without a home (nobody's is /nonexistent).
 */
const char *ptfs_state_dir(bool make)
{
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	struct passwd *pw;
	struct stat st;
	int n = -1;

	if (xdg && xdg[0] == '/') {
		n = snprintf(lg.state, sizeof(lg.state), "%s/ptfs", xdg);
	} else {
		if (!home || home[0] != '/') {
			pw = getpwuid(geteuid());
			home = pw ? pw->pw_dir : NULL;
		}
		/* below a home that exists: a missing one (nobody's
		 * /nonexistent) is not made, even by root */
		if (home && home[0] == '/' && stat(home, &st) == 0 && S_ISDIR(st.st_mode))
			n = snprintf(lg.state, sizeof(lg.state), "%s/.local/state/ptfs", home);
	}
	if (n > 0 && (size_t)n < sizeof(lg.state) &&
	    (make ? make_dirs(lg.state) == 0 : stat(lg.state, &st) == 0))
		return lg.state;
	return private_tmp(lg.state, sizeof(lg.state), make) == 0 ? lg.state : NULL;
}

/* One line: "2026-12-02T05:50:01Z [123] ptfs: text" (time, pid) into the file. */
static void file_line(const char *text)
{
	char stamp[32], head[64];
	struct timespec ts;
	struct tm tm;
	size_t len = strlen(text);

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(head, sizeof(head), "%s [%ld] ", stamp, (long)getpid());
	/* a failed write has nowhere else to go */
	(void)!dprintf(lg.fd, "%s%.*s%s", head, (int)len, text,
		       len && text[len - 1] == '\n' ? "" : "\n");
}

__attribute__((format(printf, 2, 0)))
static void log_func(enum fuse_log_level level, const char *fmt, va_list ap)
{
	char line[2048];
	va_list aq;

	va_copy(aq, ap);
	vsnprintf(line, sizeof(line), fmt, aq);
	va_end(aq);
	pthread_mutex_lock(&lg.lock);
	switch (lg.sink) {
	case SINK_SYSLOG:
		syslog((int)level, "%s", line);
		break;
	case SINK_FILE:
		file_line(line);
		break;
	case SINK_STDERR:
		break;
	}
	/* until the daemon detaches, a person is watching its stderr */
	if (lg.sink == SINK_STDERR || !lg.detached)
		fputs(line, stderr);
	if (lg.keep && level <= FUSE_LOG_INFO)
		pt_buf_printf(&lg.kept, "%s%s", line,
			      line[0] && line[strlen(line) - 1] == '\n' ? "" : "\n");
	pthread_mutex_unlock(&lg.lock);
}

static bool have_syslog(void)
{
	struct stat st;

	return stat("/dev/log", &st) == 0 && S_ISSOCK(st.st_mode);
}

int ptfs_log_open(const char *file, bool detached)
{
	char def[PATH_MAX];
	const char *dir;
	int fd;

	if (!file && !detached) {
		lg.sink = SINK_STDERR;
		fuse_set_log_func(log_func);
		return 0;
	}
	if (!file && have_syslog()) {
		openlog("ptfs", LOG_PID, LOG_DAEMON);
		lg.sink = SINK_SYSLOG;
		fuse_set_log_func(log_func);
		return 0;
	}
	if (!file) {
		dir = ptfs_state_dir(true);
		if (!dir) {
			/* mount all the same: the lines go where stderr goes */
			fprintf(stderr, "ptfs: warning: no syslog and no state directory to log to: give -o log=FILE\n");
			lg.sink = SINK_STDERR;
			fuse_set_log_func(log_func);
			return 0;
		}
		snprintf(def, sizeof(def), "%s/ptfs.log", dir);
		file = def;
	}
	fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		int e = errno;

		fprintf(stderr, "ptfs: log file %s: %s\n", file, strerror(e));
		return -e;
	}
	if (lg.fd >= 0)
		close(lg.fd);
	lg.fd = fd;
	lg.sink = SINK_FILE;
	fuse_set_log_func(log_func);
	return 0;
}

void ptfs_log_detached(void)
{
	pthread_mutex_lock(&lg.lock);
	lg.detached = true;
	pthread_mutex_unlock(&lg.lock);
}

void ptfs_log_keep(void)
{
	pthread_mutex_lock(&lg.lock);
	lg.keep = true;
	pthread_mutex_unlock(&lg.lock);
}

/* Remove the status files of daemons that are gone. */
static void sweep_status(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		struct stat st;
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		if (pid <= 0 || strcmp(end, ".status") != 0)
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		/* read by nobody for a day: its `ptfs umount` never came */
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    time(NULL) - st.st_mtime > 86400)
			unlinkat(dirfd(d), e->d_name, 0);
	}
	if (d)
		closedir(d);
}

int ptfs_status_init(void)
{
	const char *dir = ptfs_state_dir(true);
	char sub[PATH_MAX];
	int n;

	if (!dir)
		return -ENOENT;
	n = snprintf(sub, sizeof(sub), "%s/status", dir);
	if (n <= 0 || (size_t)n >= sizeof(sub) || make_dirs(sub) != 0)
		return -ENOENT;
	sweep_status(sub);
	n = snprintf(lg.status, sizeof(lg.status), "%s/%ld.status", sub,
		     (long)getpid());
	if (n <= 0 || (size_t)n >= sizeof(lg.status)) {
		lg.status[0] = '\0';
		return -ENAMETOOLONG;
	}
	unlink(lg.status);
	return 0;
}

const char *ptfs_status_path(void)
{
	return lg.status[0] ? lg.status : NULL;
}

void ptfs_status_write(bool ok)
{
	char tmp[PATH_MAX + 8];
	int fd;

	if (!lg.status[0])
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", lg.status);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	pthread_mutex_lock(&lg.lock);
	if (dprintf(fd, "%s\n%s", ok ? "ok" : "failed",
		    lg.kept.p ? lg.kept.p : "") < 0 || fsync(fd) != 0 ||
	    close(fd) != 0 || rename(tmp, lg.status) != 0)
		unlink(tmp);
	pthread_mutex_unlock(&lg.lock);
}
