/* SPDX-License-Identifier: MIT */
/*
 * ptfs.h -- the front end's internal interfaces: the FUSE-less
 * subcommands (cli.c) and the mount (mount.c).
 */
#ifndef PTFS_FS_PTFS_H
#define PTFS_FS_PTFS_H

/* Exit codes, documented in README.md. */
#define PTFS_EXIT_OK 0
#define PTFS_EXIT_ERROR 1   /* the checkpoint cannot be opened or served */
#define PTFS_EXIT_USAGE 2   /* bad command line */

/* `ptfs ls|cat|info|set ...`: argv[0] is the subcommand. */
int ptfs_cli(int argc, char **argv);

/* `ptfs [options] CHECKPOINT MOUNTPOINT`. */
int ptfs_mount_main(int argc, char **argv);

/* Print the usage text to @f. */
void ptfs_usage(FILE *f);
/* Print the version, the formats this build reads and its libraries to @f
 * (fs/version.c). */
void ptfs_version(FILE *f);

#endif /* PTFS_FS_PTFS_H */
