/* SPDX-License-Identifier: MIT */
/*
 * mountpoint.c -- what the mount checks of its MOUNTPOINT before opening
 * the checkpoint (ptfs.h).  FUSE mounts onto a regular file as readily as
 * onto a directory, over a directory's files, and over another mount of
 * the same directory; each is almost always a slip (the checkpoint named
 * twice, a mount that is already up), so each is refused with one line
 * and exit status 1.  -o nonempty allows a directory that has files.
 * Also the reading of mountinfo's paths, which umount.c and open.c share.
 */
#include "ptfs.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* mountinfo writes a space, tab, newline or backslash in a path as \NNN. */
void ptfs_mountinfo_unescape(const char *in, char *out, size_t cap)
{
	size_t n = 0;

	while (*in && n + 1 < cap) {
		if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' &&
		    in[2] <= '7' && in[3] >= '0' && in[3] <= '7') {
			out[n++] = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
			in += 4;
		} else {
			out[n++] = *in++;
		}
	}
	out[n] = '\0';
}

/* Whether a ptfs mount sits on @real (mountinfo's fstype fuse.ptfs, or
 * fuse with the source ptfs names the checkpoint by); its source in @src. */
static bool ptfs_mount_at(const char *real, char *src, size_t cap)
{
	char line[8192], field[PATH_MAX], mp[PATH_MAX], type[64], source[PATH_MAX];
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		const char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*u %*u %*u:%*u %*s %4095s", field) != 1)
			continue;
		ptfs_mountinfo_unescape(field, mp, sizeof(mp));
		if (strcmp(mp, real) != 0 ||
		    sscanf(dash + 3, "%63s %4095s", type, source) != 2)
			continue;
		/* the last one wins: it is on top */
		found = strcmp(type, "fuse.ptfs") == 0;
		if (found)
			ptfs_mountinfo_unescape(source, src, cap);
	}
	if (f)
		fclose(f);
	return found;
}

/* Whether directory @path holds anything but "." and ".."; -errno when it
 * cannot be read. */
static int has_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int rc = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
			rc = 1;
			break;
		}
	}
	closedir(d);
	return rc;
}

int ptfs_mountpoint_check(const char *mp, bool nonempty)
{
	char real[PATH_MAX], src[PATH_MAX];
	struct stat st;
	int rc;

	if (stat(mp, &st) != 0) {
		fprintf(stderr, "ptfs: mountpoint %s: %s\n", mp, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "ptfs: mountpoint %s: not a directory (the mountpoint comes second: ptfs CHECKPOINT MOUNTPOINT)\n",
			mp);
		return -1;
	}
	if (realpath(mp, real) && ptfs_mount_at(real, src, sizeof(src))) {
		fprintf(stderr, "ptfs: mountpoint %s: already a ptfs mount (of %s); 'ptfs umount %s' first\n",
			mp, src, mp);
		return -1;
	}
	if (nonempty)
		return 0;
	rc = has_entries(mp);
	if (rc < 0) {
		fprintf(stderr, "ptfs: mountpoint %s: %s\n", mp, strerror(-rc));
		return -1;
	}
	if (rc > 0) {
		fprintf(stderr, "ptfs: mountpoint %s: not empty (-o nonempty mounts over its files)\n",
			mp);
		return -1;
	}
	return 0;
}
