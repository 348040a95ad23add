/* SPDX-License-Identifier: MIT */
/*
 * umount.c -- `ptfs umount MOUNTPOINT` (and `ptfs -u`): unmount, then wait
 * for the daemon's last commit and report it.
 *
 * fusermount3 -u returns as soon as the kernel lets go of the mount; the
 * daemon commits what is pending after that, and a program that reads the
 * checkpoint at once can see the old bytes.  This command asks the mount
 * which process serves it and where it leaves its verdict (the root's
 * attribute user.ptfs.daemon, log.h), unmounts through fusermount3 (which
 * lets the mounting user and root do it), waits for that process to end
 * (a pidfd: no polling, no pid reuse), prints the daemon's final lines and
 * exits 0 only when every change is in the checkpoint.
 */
#include "ptfs.h"
#include "usage.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

extern char **environ;

/* Whether @real is a FUSE mount point, and its user_id= in *@uid. */
static bool fuse_mount_at(const char *real, long *uid)
{
	char line[8192], field[PATH_MAX], mp[PATH_MAX];
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		const char *dash = strstr(line, " - ");
		const char *u = dash ? strstr(dash, "user_id=") : NULL;

		if (sscanf(line, "%*u %*u %*u:%*u %*s %4095s", field) != 1)
			continue;
		ptfs_mountinfo_unescape(field, mp, sizeof(mp));
		if (strcmp(mp, real) != 0 || !dash || strncmp(dash + 3, "fuse", 4) != 0)
			continue;
		found = true;   /* the last one wins: it is on top */
		*uid = u ? strtol(u + 8, NULL, 10) : -1;
	}
	if (f)
		fclose(f);
	return found;
}

/* fusermount3 -u @real: its exit status (its own message on stderr). */
static int run_fusermount(char *real)
{
	char prog[] = "fusermount3", opt[] = "-u";
	char *args[] = { prog, opt, real, NULL };
	pid_t pid;
	int st;

	if (posix_spawnp(&pid, "fusermount3", NULL, NULL, args, environ) != 0) {
		fprintf(stderr, "ptfs: cannot run fusermount3 (Debian: fuse3): %s\n",
			strerror(errno));
		return -1;
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Wait for process @pidfd to end; tell a terminal why after a second. */
static void wait_for(int pidfd, const char *mp)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	bool told = false;

	while (poll(&p, 1, 1000) <= 0) {
		if (!told && isatty(STDERR_FILENO)) {
			fprintf(stderr, "ptfs: %s: unmounted; waiting for the last commit...\n", mp);
			told = true;
		}
	}
}

/* Print the status file's lines; 0 for "ok", 1 otherwise. */
static int verdict(const char *path, long uid, const char *mp)
{
	char line[4096];
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc = 1;
	FILE *f;

	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uid >= 0 && st.st_uid != (uid_t)uid)) {
		fprintf(stderr, "ptfs: %s: unmounted, but the daemon left no verdict (%s): see its log\n",
			mp, path);
		if (fd >= 0)
			close(fd);
		return 1;
	}
	f = fdopen(fd, "r");
	if (f && fgets(line, sizeof(line), f))
		rc = strcmp(line, "ok\n") == 0 ? 0 : 1;
	while (f && fgets(line, sizeof(line), f))
		fputs(line, stderr);
	if (f)
		fclose(f);
	unlink(path);
	return rc;
}

int ptfs_cmd_umount(int argc, char **argv)
{
	char real[PATH_MAX], val[PATH_MAX + 32], *path;
	long uid = -1, pid;
	ssize_t n;
	int pidfd, rc;

	static const char *const what[] = { "MOUNTPOINT" };
	char *mp;

	/* --help is main.c's (usage.c) */
	if (ptfs_operands(argc, argv, NULL, NULL, &mp, 1, 1, what))
		return PTFS_EXIT_USAGE;
	argv[1] = mp;
	if (!realpath(argv[1], real)) {
		fprintf(stderr, "ptfs: %s: %s\n", argv[1], strerror(errno));
		return PTFS_EXIT_ERROR;
	}
	if (!fuse_mount_at(real, &uid)) {
		fprintf(stderr, "ptfs: %s: not a mount point of ptfs\n", argv[1]);
		return PTFS_EXIT_ERROR;
	}
	n = getxattr(real, "user.ptfs.daemon", val, sizeof(val) - 1);
	if (n <= 0) {
		fprintf(stderr, "ptfs: %s: cannot ask the mount for its daemon (%s): not a ptfs mount, or another user's; 'fusermount3 -u' unmounts without waiting\n",
			argv[1], n < 0 ? strerror(errno) : "empty");
		return PTFS_EXIT_ERROR;
	}
	val[n] = '\0';
	pid = strtol(val, &path, 10);
	if (pid <= 0 || *path != ' ') {
		fprintf(stderr, "ptfs: %s: the mount's daemon attribute is not understood\n", argv[1]);
		return PTFS_EXIT_ERROR;
	}
	path++;
	/* before the unmount: the process cannot end (and its number be
	 * reused) before we hold it */
	pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	rc = run_fusermount(real);
	if (rc != 0) {
		fprintf(stderr, "ptfs: %s: not unmounted%s\n", argv[1],
			rc > 0 ? " (a program may still use it: see fuser -m)" : "");
		if (pidfd >= 0)
			close(pidfd);
		return PTFS_EXIT_ERROR;
	}
	if (pidfd >= 0) {
		wait_for(pidfd, argv[1]);
		close(pidfd);
	}
	return verdict(path, uid, argv[1]);
}
