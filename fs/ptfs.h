/* SPDX-License-Identifier: MIT */
/*
 * ptfs.h -- the front end's internal interfaces: the FUSE-less
 * subcommands (cli.c) and the mount (mount.c), both called by main.c.
 * A usage error is one line naming the problem and a "Try" hint
 * (usage.h), then PTFS_EXIT_USAGE; PTFS_EXIT_HELP asks main.c to print
 * the usage on stdout and exit 0.
 */
#ifndef PTFS_FS_PTFS_H
#define PTFS_FS_PTFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes, documented in README.md. */
#define PTFS_EXIT_OK 0
#define PTFS_EXIT_ERROR 1   /* the checkpoint cannot be opened or served */
#define PTFS_EXIT_USAGE 2   /* bad command line (usage.h) */
#define PTFS_EXIT_TROUBLE 2 /* diff, info --weights-only: no verdict (a file
			     * that cannot be opened or read) */
/* Not an exit code: "print the usage on stdout, exit 0" (-h, --help). */
#define PTFS_EXIT_HELP (-1)

/* `ptfs ls|cat|info|set ...`: argv[0] is the subcommand.  Returns one of
 * the codes above. */
int ptfs_cli(int argc, char **argv);

/* heap.c: grow the heap once, for huge pages, before opening a checkpoint;
 * the daemon settles it once the open is done (heap.c says how). */
void ptfs_heap_reserve(void);
void ptfs_heap_settle(void);

/* export.c: `ptfs tree --json ...` and `ptfs export ...` (argv[0] is the
 * subcommand; @o the parsed --nested/-o options). */
struct pt_ckpt_opts;
int ptfs_cmd_tree(int argc, char **argv, const struct pt_ckpt_opts *o);
int ptfs_cmd_export(int argc, char **argv, const struct pt_ckpt_opts *o);
/* edit.c: checkpoint surgery, `ptfs rm|mv|mkdir|add|rename ...` and `ptfs
 * set` of a scalar or with --dtype/--shape (argv[0] is the subcommand; @o
 * the parsed -o options; @verbose: -v was taken before, by `ptfs set`
 * handing a scalar over).  ptfs_read_stdin(): all of stdin, up to @max + 1
 * bytes (so that a longer input shows), into malloc()ed *@out; 0 or
 * -errno.  @pg may be NULL. */
struct ptfs_progress;
int ptfs_cmd_edit(int argc, char **argv, const struct pt_ckpt_opts *o,
		  bool verbose);
int ptfs_read_stdin(uint8_t **out, uint64_t *len, uint64_t max,
		    struct ptfs_progress *pg);
/* `ptfs info --weights-only CHECKPOINT`: exit 0 when torch >= 2.6 would
 * load it with weights_only=True, 1 when not, 2 when it cannot be opened
 * or read (no verdict). */
int ptfs_cmd_weights_only(const char *path, const struct pt_ckpt_opts *o);
/* `ptfs stat|diff|preview ...` (view.c): argv[0] is the subcommand,
 * @opts the checkpoint options parsed by ptfs_cli(). */
struct pt_ckpt_opts;
int ptfs_view_cmd(int argc, char **argv, const struct pt_ckpt_opts *opts);

/* view_mount.c: @ck's pictures (NAME.png) and /.ptfs/stats; call right
 * after opening.  ptfs_view_changed(): tensor bytes changed, forget what
 * was made; @drop(@ctx, node) for each file made so far. */
struct pt_ckpt;
struct pt_node;
void ptfs_view_attach(struct pt_ckpt *ck);
void ptfs_view_changed(struct pt_ckpt *ck, void (*drop)(void *ctx, struct pt_node *n),
		       void *ctx);

/* `ptfs [options] CHECKPOINT MOUNTPOINT`: mounts and serves until
 * unmounted.  Returns one of the codes above. */
int ptfs_mount_main(int argc, char **argv);
int ptfs_cmd_umount(int argc, char **argv);     /* umount.c */
/* open.c: `ptfs open CHECKPOINT` (mount read-only for browsing and show
 * the folder) and `ptfs close CHECKPOINT` (unmount it). */
int ptfs_cmd_open(int argc, char **argv);
int ptfs_cmd_close(int argc, char **argv);
/* mountpoint.c: @mp must be a directory, empty unless @nonempty, and not
 * a ptfs mount already: 0, or -1 with one line on stderr. */
int ptfs_mountpoint_check(const char *mp, bool nonempty);
/* mountinfo's field @in with its octal escapes (\040 for a space) undone,
 * into @out (mountpoint.c). */
void ptfs_mountinfo_unescape(const char *in, char *out, size_t cap);

/* Print the version, the formats this build reads and its libraries to @f
 * (fs/version.c). */
void ptfs_version(FILE *f);

/* remote.c: CHECKPOINT as a URL (core/remote, when built with libcurl). */
struct pt_ckpt;
struct pt_ckpt_opts;
struct pt_error;
bool ptfs_is_url(const char *arg);
/* @arg, when it is a URL with a secret (userinfo, query), as it may be
 * shown (base/url.h); ptfs_open_checkpoint() of the returned pointer
 * opens the real URL.  Every front end puts it in argv in place of
 * @arg before anything prints it. */
const char *ptfs_url_hide(const char *arg);
char *ptfs_url_hide_arg(char *arg);    /* the same, for argv */
/* 1: @opt ("key=value") is a remote option and was taken, 0: not one,
 * -1: bad value (a line printed). */
int ptfs_remote_option(const char *opt);
/* pt_ckpt_open() of a path, or of a URL's remote source. */
int ptfs_open_checkpoint(const char *arg, const struct pt_ckpt_opts *o,
			 struct pt_ckpt **ck, struct pt_error *err);
/* The one line for a checkpoint that cannot be opened. */
void ptfs_report_open(const char *arg, const struct pt_error *err);
/* Whether writes a mount could not commit are kept for the local
 * checkpoint @path (ckpt/pending.h): said on stderr with what to do, the
 * file's path in @found. */
bool ptfs_pending_note(const char *path, char *found, size_t cap);

#endif /* PTFS_FS_PTFS_H */
