/* SPDX-License-Identifier: MIT */
/*
 * main.c -- ptfs entry point: the subcommands that need no FUSE (ls, cat,
 * info, set, recover...), umount, or the mount.
 */
#include "ptfs.h"

#include <stdio.h>
#include <string.h>

/* The only place that prints the usage text. */
static void usage(FILE *f)
{
	fputs("usage: ptfs [options] CHECKPOINT MOUNTPOINT\n"
	      "       ptfs ls [-a] [--max N] [--nested] [-o OPTS] CHECKPOINT [PATH]\n"
	      "       ptfs cat [--nested] [-o OPTS] CHECKPOINT PATH\n"
	      "       ptfs info [-o OPTS] CHECKPOINT\n"
	      "       ptfs info --weights-only CHECKPOINT\n"
	      "       ptfs set [-v] [-o commit=WAY] CHECKPOINT PATH < BYTES\n"
	      "       ptfs umount MOUNTPOINT       (also: ptfs -u MOUNTPOINT)\n"
	      "       ptfs recover [--discard | --force] CHECKPOINT\n"
	      "       ptfs tree --json [--max N] CHECKPOINT\n"
	      "       ptfs export CHECKPOINT --to safetensors|pt|npy [--shard-size SIZE]\n"
	      "                   [--skip-unsupported] [--no-fsync] OUT\n"
	      "       ptfs stat [--json] [-j N] CHECKPOINT [PATH]\n"
	      "       ptfs diff [--json] [-j N] [-q] CHECKPOINT_A CHECKPOINT_B\n"
	      "       ptfs preview [-v] [-s SIDE] CHECKPOINT PATH [--output FILE.png]\n"
	      "       ptfs thumbnail [-s SIZE] TENSOR_FILE_IN_A_MOUNT OUTPUT.png\n"
	      "\n"
	      "Mount a PyTorch checkpoint as a directory tree: every tensor is a file\n"
	      "of its raw bytes with NAME.json beside it (see ptfs(1)).\n"
	      "\n"
	      "mount options:\n"
	      "    -f                     stay in the foreground\n"
	      "    -d                     debug output (implies -f)\n"
	      "    -s                     single-threaded\n"
	      "    -o ro                  read-only mount\n"
	      "    -o rw                  read-write mount (default)\n"
	      "    -o fsname=NAME         source shown by mount(8) (default: the\n"
	      "                           checkpoint's absolute path)\n"
	      "    -o allow_other         let other users see the mount\n"
	      "    -o nested              dotted keys (a.b.c) as directories a/b/c\n"
	      "    -o max_depth=N         cap on nesting of the pickle and the tree\n"
	      "    -o max_values=N        cap on values one pickle may create\n"
	      "    -o max_memo=N          cap on memo entries of one pickle\n"
	      "    -o max_memory=BYTES    cap on memory for the decoded pickle\n"
	      "    -o max_pickle_bytes=BYTES  cap on the size of one pickle\n"
	      "    -o max_inflate_bytes=BYTES cap on one inflated ZIP record\n"
	      "    -o max_records=N       cap on ZIP records\n"
	      "    -o max_rank=N          cap on dimensions of one tensor\n"
	      "    -o max_dir_entries=N   cap on entries of one directory\n"
	      "                           (nested, commit= and the max_* options,\n"
	      "                           N >= 1, work the same with ls, cat, info, set)\n"
	      "    -o commit=WAY          how commits write: auto (clone where the\n"
	      "                           filesystem can, else rewrite), rewrite,\n"
	      "                           clone, inplace (patch behind an undo journal)\n"
	      "    -o cache_dir=DIR       remote CHECKPOINT (http://, https://,\n"
	      "    -o cache_size=SIZE     s3://BUCKET/KEY, hf://ORG/REPO[@REV]/PATH):\n"
	      "    -o timeout=SECONDS     its block cache, its size, the retry\n"
	      "    -o cafile=PEM          deadline, a CA bundle, an S3-compatible\n"
	      "    -o s3_endpoint=URL     endpoint (also with ls, cat and info)\n"
	      "    -o previews            NAME.png beside every tensor: its picture\n"
	      "    -o log=FILE            the daemon's log (default: syslog, or\n"
	      "                           $XDG_STATE_HOME/ptfs/ptfs.log without one)\n"
	      "    -o OPTION              other options are passed to libfuse\n"
	      "    -h, --help             this text\n"
	      "    -V, --version          version\n"
	      "\n"
	      "Exit status: 0 success, 1 the checkpoint cannot be opened or mounted,\n"
	      "2 usage error.\n", f);
}

int main(int argc, char **argv)
{
	int rc;

	if (argc < 2) {
		usage(stderr);
		return PTFS_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return PTFS_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		ptfs_version(stdout);
		return PTFS_EXIT_OK;
	}
	if (strcmp(argv[1], "umount") == 0)
		return ptfs_cmd_umount(argc - 1, argv + 1);
	if (strcmp(argv[1], "-u") == 0)
		return ptfs_cmd_umount(argc - 1, argv + 1);
	if (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "cat") == 0 ||
	    strcmp(argv[1], "info") == 0 || strcmp(argv[1], "set") == 0 ||
	    strcmp(argv[1], "recover") == 0 ||
	    strcmp(argv[1], "tree") == 0 || strcmp(argv[1], "export") == 0 ||
	    strcmp(argv[1], "stat") == 0 || strcmp(argv[1], "diff") == 0 ||
	    strcmp(argv[1], "preview") == 0 || strcmp(argv[1], "thumbnail") == 0)
		rc = ptfs_cli(argc - 1, argv + 1);
	else
		rc = ptfs_mount_main(argc, argv);
	if (rc == PTFS_EXIT_HELP) {
		usage(stdout);
		return PTFS_EXIT_OK;
	}
	/* stat, diff, preview and thumbnail print their own usage line; for
	 * diff, 2 is also "trouble" (like diff(1)), not a usage error */
	if (rc == PTFS_EXIT_USAGE && strcmp(argv[1], "stat") != 0 &&
	    strcmp(argv[1], "diff") != 0 && strcmp(argv[1], "preview") != 0 &&
	    strcmp(argv[1], "thumbnail") != 0)
		usage(stderr);
	return rc;
}
