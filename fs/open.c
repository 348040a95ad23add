/* SPDX-License-Identifier: MIT */
/*
 * open.c -- `ptfs open CHECKPOINT` and `ptfs close CHECKPOINT`: a
 * checkpoint opened from the file manager like an archive (the desktop
 * entry contrib/desktop/ptfs.desktop runs `ptfs open %f`).
 *
 * open mounts the checkpoint read-only with the browsing layout (-o
 * ro,nested,previews,suffix) on RUN/ptfs/HASH/NAME, where RUN is
 * $XDG_RUNTIME_DIR (else the state directory, log.h), HASH names the
 * checkpoint's absolute path and NAME is its file name (the folder's
 * title in the file manager), then opens that folder with xdg-open, else
 * `gio open`.  A second open of the same checkpoint finds its mount
 * (mountinfo: a fuse.ptfs mount there whose source is the checkpoint) and
 * only opens the folder again; a mount whose daemon died is unmounted
 * and made anew.  close is `ptfs umount` of that folder, then the folder
 * and its HASH directory are removed.
 */
#include "ptfs.h"

#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "usage.h"

extern char **environ;

/* The options of the mount `ptfs open` makes (README "Desktop file
 * managers": the browsing layout, read-only). */
#define OPEN_OPTS "ro,nested,previews,suffix"

/* Run @args (args[0] looked up in PATH unless it has a '/'), stdout to
 * stderr when @quiet_stdout; its exit status, or -1 when it cannot run. */
static int run(char *const *args, bool quiet_stdout)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st, rc;

	posix_spawn_file_actions_init(&fa);
	if (quiet_stdout)
		posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
	rc = posix_spawnp(&pid, args[0], &fa, NULL, args, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return -1;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whether a ptfs mount of checkpoint @ck sits on @mp (the top one);
 * @ck NULL: of any checkpoint. */
static bool mounted_at(const char *mp, const char *ck)
{
	char line[3 * PATH_MAX], f_mp[PATH_MAX], f_src[PATH_MAX], type[64];
	char m[PATH_MAX], src[PATH_MAX];
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		const char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*u %*u %*u:%*u %*s %4095s", f_mp) != 1 ||
		    sscanf(dash + 3, "%63s %4095s", type, f_src) != 2)
			continue;
		ptfs_mountinfo_unescape(f_mp, m, sizeof(m));
		if (strcmp(m, mp) != 0)
			continue;
		ptfs_mountinfo_unescape(f_src, src, sizeof(src));
		found = strcmp(type, "fuse.ptfs") == 0 && (!ck || strcmp(src, ck) == 0);
	}
	if (f)
		fclose(f);
	return found;
}

/* The folder checkpoint @ck (absolute) is opened on, into @mp, and @dir
 * the HASH directory above it: below $XDG_RUNTIME_DIR/ptfs, else the
 * state directory's open/ (made when @make).  0, or -1 with a line on
 * stderr. */
static int open_paths(const char *ck, bool make, char *dir, char *mp, size_t cap)
{
	const char *run = getenv("XDG_RUNTIME_DIR"), *name = strrchr(ck, '/') + 1;
	uint64_t h = 14695981039346656037ull;   /* FNV-1a of the path */
	const char *p, *sub = "ptfs";
	int n;

	for (p = ck; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	if (!run || run[0] != '/') {
		run = ptfs_state_dir(make);
		sub = "open";
	}
	if (!run) {
		fputs("ptfs: no $XDG_RUNTIME_DIR and no state directory for the folder\n", stderr);
		return -1;
	}
	n = snprintf(dir, cap, "%s/%s/%016llx", run, sub, (unsigned long long)h);
	if (n < 0 || (size_t)n >= cap ||
	    (size_t)snprintf(mp, cap, "%s/%s", dir, name) >= cap) {
		fprintf(stderr, "ptfs: %s: the folder's path is too long\n", ck);
		return -1;
	}
	return 0;
}

/* @path as a directory of mode 0700 (its parent exists): 0, or -1. */
static int make_dir(const char *path)
{
	if (mkdir(path, 0700) == 0 || errno == EEXIST)
		return 0;
	fprintf(stderr, "ptfs: %s: %s\n", path, strerror(errno));
	return -1;
}

/* Make the folder @mp below @dir, and the directory above @dir. */
static int make_folder(const char *dir, const char *mp)
{
	char top[PATH_MAX];
	const char *slash = strrchr(dir, '/');

	snprintf(top, sizeof(top), "%.*s", (int)(slash - dir), dir);
	return make_dir(top) || make_dir(dir) || make_dir(mp) ? -1 : 0;
}

/* Mount @ck on @mp with this same program; 0, or -1 (the mount printed
 * why). */
static int mount_ro(const char *ck, const char *mp)
{
	char self[PATH_MAX], o[] = "-o", opts[] = OPEN_OPTS, c[PATH_MAX], m[PATH_MAX];
	char *args[] = { self, o, opts, c, m, NULL };
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0) {
		fprintf(stderr, "ptfs: cannot find this program: %s\n", strerror(errno));
		return -1;
	}
	self[n] = '\0';
	snprintf(c, sizeof(c), "%s", ck);
	snprintf(m, sizeof(m), "%s", mp);
	/* the mount exists when the parent of the daemon exits */
	return run(args, true) == 0 ? 0 : -1;
}

/* Show folder @mp: xdg-open, else gio open.  0, or -1. */
static int show(const char *mp)
{
	char m[PATH_MAX], xdg[] = "xdg-open", gio[] = "gio", op[] = "open";
	char *a1[] = { xdg, m, NULL }, *a2[] = { gio, op, m, NULL };
	int rc;

	snprintf(m, sizeof(m), "%s", mp);
	rc = run(a1, true);
	if (rc < 0)
		rc = run(a2, true);
	if (rc == 0)
		return 0;
	fprintf(stderr, "ptfs: %s: %s\n", mp, rc < 0 ?
		"cannot show it: neither xdg-open (xdg-utils) nor gio (libglib2.0-bin) runs" :
		"the file manager could not be started");
	return -1;
}

/* Drop a mount on @mp whose daemon is gone ("transport endpoint is not
 * connected"), so that it can be mounted again.  statfs asks the daemon
 * every time; stat may be answered from the kernel's attribute cache. */
static void drop_dead_mount(const char *mp)
{
	char f[] = "fusermount3", u[] = "-uz", m[PATH_MAX];
	char *args[] = { f, u, m, NULL };
	struct statvfs sv;

	if (statvfs(mp, &sv) == 0 || errno != ENOTCONN)
		return;
	snprintf(m, sizeof(m), "%s", mp);
	run(args, true);
}

int ptfs_cmd_open(int argc, char **argv)
{
	static const char *const flags[] = { "-n", "--no-browse", NULL };
	static const char *const what[] = { "CHECKPOINT" };
	char ck[PATH_MAX], dir[PATH_MAX], mp[PATH_MAX], *arg;
	unsigned seen;

	if (ptfs_operands(argc, argv, flags, &seen, &arg, 1, 1, what))
		return PTFS_EXIT_USAGE;
	if (!realpath(arg, ck)) {
		fprintf(stderr, "ptfs: %s: %s\n", arg, strerror(errno));
		return PTFS_EXIT_ERROR;
	}
	if (open_paths(ck, true, dir, mp, sizeof(mp)) != 0)
		return PTFS_EXIT_ERROR;
	drop_dead_mount(mp);
	if (!mounted_at(mp, ck)) {
		if (make_folder(dir, mp) != 0)
			return PTFS_EXIT_ERROR;
		if (mount_ro(ck, mp) != 0) {
			rmdir(mp);
			rmdir(dir);
			return PTFS_EXIT_ERROR;
		}
	}
	printf("%s\n", mp);
	fflush(stdout);
	if (seen & 3u)
		return PTFS_EXIT_OK;
	return show(mp) == 0 ? PTFS_EXIT_OK : PTFS_EXIT_ERROR;
}

/* `ptfs close CHECKPOINT`, or of the folder itself. */
int ptfs_cmd_close(int argc, char **argv)
{
	static const char *const what[] = { "CHECKPOINT" };
	char ck[PATH_MAX], dir[PATH_MAX], mp[PATH_MAX], cmd[] = "umount", *arg;
	char *uargs[] = { cmd, mp, NULL };
	bool folder;
	int rc;

	if (ptfs_operands(argc, argv, NULL, NULL, &arg, 1, 1, what))
		return PTFS_EXIT_USAGE;
	if (!realpath(arg, ck)) {
		fprintf(stderr, "ptfs: %s: %s\n", arg, strerror(errno));
		return PTFS_EXIT_ERROR;
	}
	folder = mounted_at(ck, NULL);
	if (folder)
		snprintf(mp, sizeof(mp), "%s", ck);
	else if (open_paths(ck, false, dir, mp, sizeof(mp)) != 0)
		return PTFS_EXIT_ERROR;
	if (!folder && !mounted_at(mp, ck)) {
		fprintf(stderr, "ptfs: %s: not open (no mount on %s)\n", arg, mp);
		return PTFS_EXIT_ERROR;
	}
	rc = ptfs_cmd_umount(2, uargs);
	if (rc == PTFS_EXIT_OK && !folder) {
		rmdir(mp);
		rmdir(dir);
	}
	return rc;
}
