/* SPDX-License-Identifier: MIT */
/*
 * main.c -- ptfs entry point: the subcommands that need no FUSE (ls, cat,
 * info, set, recover...), umount, open and close, or the mount.  The conventions of the
 * command line (usage errors, --help, "did you mean") are in usage.c.
 */
#include "ptfs.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* A first word that names no subcommand, no file and no URL, but is one
 * edit from a subcommand: a typo, not a checkpoint to mount. */
static bool mistyped(const char *word)
{
	char near[128];
	struct stat st;

	if (word[0] == '-' || ptfs_is_url(word) || lstat(word, &st) == 0 ||
	    !ptfs_suggest(word, near, sizeof(near)))
		return false;
	fprintf(stderr, "ptfs: unknown command '%s', did you mean %s?\n", word, near);
	ptfs_usage_try(NULL);
	return true;
}

int main(int argc, char **argv)
{
	static char umount_name[] = "umount";
	int rc;

	if (argc < 2)
		return ptfs_usage_error(NULL, "missing CHECKPOINT and MOUNTPOINT");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		ptfs_usage_full(stdout);
		return PTFS_EXIT_OK;
	}
	if (strcmp(argv[1], "help") == 0) {    /* ptfs help [SUBCOMMAND] */
		if (argc > 2 && !ptfs_usage_cmd(argv[2], stdout))
			return ptfs_usage_error(NULL, "no help on '%s': not a subcommand", argv[2]);
		if (argc == 2)
			ptfs_usage_full(stdout);
		return PTFS_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		ptfs_version(stdout);
		return PTFS_EXIT_OK;
	}
	if (strcmp(argv[1], "-u") == 0)
		argv[1] = umount_name;
	if (ptfs_is_command(argv[1]) && ptfs_help_asked(argc - 1, argv + 1)) {
		ptfs_usage_cmd(argv[1], stdout);
		return PTFS_EXIT_OK;
	}
	if (strcmp(argv[1], "umount") == 0)
		return ptfs_cmd_umount(argc - 1, argv + 1);
	if (strcmp(argv[1], "open") == 0)
		return ptfs_cmd_open(argc - 1, argv + 1);
	if (strcmp(argv[1], "close") == 0)
		return ptfs_cmd_close(argc - 1, argv + 1);
	if (ptfs_is_command(argv[1]))
		return ptfs_cli(argc - 1, argv + 1);
	if (mistyped(argv[1]))
		return PTFS_EXIT_USAGE;
	rc = ptfs_mount_main(argc, argv);
	if (rc == PTFS_EXIT_HELP) {
		ptfs_usage_full(stdout);
		return PTFS_EXIT_OK;
	}
	/* the mount printed the line that names the problem */
	if (rc == PTFS_EXIT_USAGE)
		ptfs_usage_try(NULL);
	return rc;
}
