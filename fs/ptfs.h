/* SPDX-License-Identifier: MIT */
/*
 * ptfs.h -- the front end's internal interfaces: the FUSE-less
 * subcommands (cli.c) and the mount (mount.c), both called by main.c.
 * Neither prints the usage text: they print one line naming the problem
 * and return PTFS_EXIT_USAGE (main.c adds the usage on stderr), or
 * PTFS_EXIT_HELP (main.c prints it on stdout and exits 0).
 */
#ifndef PTFS_FS_PTFS_H
#define PTFS_FS_PTFS_H

/* Exit codes, documented in README.md. */
#define PTFS_EXIT_OK 0
#define PTFS_EXIT_ERROR 1   /* the checkpoint cannot be opened or served */
#define PTFS_EXIT_USAGE 2   /* bad command line */
/* Not an exit code: "print the usage on stdout, exit 0" (-h, --help). */
#define PTFS_EXIT_HELP (-1)

/* `ptfs ls|cat|info|set ...`: argv[0] is the subcommand.  Returns one of
 * the codes above. */
int ptfs_cli(int argc, char **argv);

/* `ptfs [options] CHECKPOINT MOUNTPOINT`: mounts and serves until
 * unmounted.  Returns one of the codes above. */
int ptfs_mount_main(int argc, char **argv);

#endif /* PTFS_FS_PTFS_H */
