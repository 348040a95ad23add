/* SPDX-License-Identifier: MIT */
/*
 * usage.h -- the command line's conventions (fs/usage.c), shared by every
 * subcommand:
 *
 * - a usage error is one line naming the problem ("ptfs ls: unknown
 *   option '--bogus'") and the hint "Try 'ptfs ls --help'", both on
 *   stderr, and exit status 2 (PTFS_EXIT_USAGE);
 * - `ptfs SUBCOMMAND --help` (or -h) prints that subcommand's usage on
 *   stdout and exits 0; `ptfs --help` the whole usage;
 * - anything that starts with '-' (but "-" itself) is an option, and an
 *   option a subcommand does not know is an error, never a file name;
 *   "--" ends the options (a file named "-x": `ptfs ls -- -x`).
 */
#ifndef PTFS_FS_USAGE_H
#define PTFS_FS_USAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "ptfs.h"

/* The whole usage text (`ptfs --help`). */
void ptfs_usage_full(FILE *f);
/* The usage of subcommand @cmd; false when there is no such subcommand. */
bool ptfs_usage_cmd(const char *cmd, FILE *f);
bool ptfs_is_command(const char *name);

/* Print "ptfs CMD: MESSAGE" and "Try 'ptfs CMD --help'" (no CMD: the
 * mount's "ptfs: ..." and "Try 'ptfs --help'"); returns PTFS_EXIT_USAGE. */
int ptfs_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The hint alone, after a line printed elsewhere (opts.c). */
void ptfs_usage_try(const char *cmd);

/* Whether --help or -h stands among @argv[1..] before a "--". */
bool ptfs_help_asked(int argc, char **argv);

/* The option scanner: argv[0] is the subcommand. */
struct ptfs_args {
	const char *cmd;
	int argc, i;
	char **argv;
	bool ddash;             /* after "--": only operands */
};
enum { PTFS_ARG_END = -1, PTFS_ARG_POS = -2, PTFS_ARG_BAD = -3 };
void ptfs_args_init(struct ptfs_args *a, int argc, char **argv);
/* The next item: the index in @names (NULL-terminated; a name ending in
 * '=' takes a value, "--max N" or "--max=N", and for a one-letter
 * option "-j N" or "-jN", in *@val) of an option,
 * PTFS_ARG_POS for an operand (in *@val), PTFS_ARG_END, or PTFS_ARG_BAD
 * once a usage error (an unknown option, a missing value) is printed. */
int ptfs_args_next(struct ptfs_args *a, const char *const *names, const char **val);

/* The common case: options that are flags (@flags, NULL-terminated,
 * none taking a value; bit k of *@seen set for each one given) and between
 * @min and @max operands, into @pos (NULL for those not given); @what
 * names each operand for "missing CHECKPOINT".  0, or PTFS_EXIT_USAGE
 * once the usage error is printed. */
int ptfs_operands(int argc, char **argv, const char *const *flags, unsigned *seen,
		  char **pos, int min, int max, const char *const *what);

/* The subcommands closest to @word ("'ls'", "'cat' or 'set'") in @out,
 * when one is within one edit (two for names of 6 letters or more). */
bool ptfs_suggest(const char *word, char *out, size_t cap);

#endif /* PTFS_FS_USAGE_H */
