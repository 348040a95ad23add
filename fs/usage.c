/* SPDX-License-Identifier: MIT */
/*
 * usage.c -- the command line's conventions, in one place: the usage
 * texts (`ptfs --help`, `ptfs SUBCOMMAND --help`), the one-line usage
 * error with its "Try" hint, the option scanner every subcommand uses
 * (unknown options are errors, never file names; "--" ends the options),
 * and the "did you mean" of a mistyped subcommand.  Calls nothing else in
 * fs/, so that every front end file may call it.
 */
#include "usage.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/export.h"

/* The export targets, filled in from the exporter table (pt_exporters[],
 * core/export/exporters.c) when a text is printed: TARGETS_BAR as
 * "safetensors|pt|npy", TARGETS_OR as "safetensors, pt or npy". */
#define TARGETS_BAR "\001"
#define TARGETS_OR "\002"

struct cmd_help {
	const char *name;
	const char *text;       /* after "usage: " */
};

/* Options every subcommand that opens a checkpoint takes. */
#define CK_OPTS \
	"    --nested             dotted keys (a.b.c) as directories a/b/c\n" \
	"    -o OPTS              checkpoint options, comma separated: nested,\n" \
	"                         suffix, max_*=N limits, commit=WAY, remote\n" \
	"                         options\n"
/* Options of the surgery subcommands. */
#define EDIT_OPTS \
	"    -n, --dry-run        print what would change and the new size; write\n" \
	"                         nothing\n" \
	"    -v, --verbose        print each change and how the commit was written\n" \
	"    -o OPTS              checkpoint options (commit=WAY is not used: the\n" \
	"                         file is always written again)\n"
#define PROGRESS_OPTS \
	"    --progress           show a progress bar on stderr even when it is\n" \
	"                         not a terminal\n" \
	"    --no-progress        never show one (default: on a terminal only)\n"

static const struct cmd_help helps[] = {
	{ "ls", "ptfs ls [-a] [--max N] [--nested] [-o OPTS] CHECKPOINT [PATH]\n"
	  "List the tree below PATH (default: the root), one line per entry: type,\n"
	  "size, path, and dtype and shape for tensors.\n\n"
	  "    -a                   also NAME.json files and /.ptfs\n"
	  "    --max N              stop after N entries (default 10000)\n" CK_OPTS
	  "\nExit status: 0 listed, 1 the checkpoint or PATH cannot be read,\n"
	  "2 usage error.\n" },
	{ "cat", "ptfs cat [--nested] [-o OPTS] CHECKPOINT PATH\n"
	  "Write the bytes of one file of the tree to stdout.\n\n" CK_OPTS
	  "\nExit status: 0 written, 1 the checkpoint or PATH cannot be read,\n"
	  "2 usage error.\n" },
	{ "info", "ptfs info [-o OPTS] CHECKPOINT\n"
	  "       ptfs info --weights-only CHECKPOINT\n"
	  "Describe the checkpoint: format, records, tensors, dtypes, the globals\n"
	  "the pickle names, warnings.  --weights-only: would torch >= 2.6 load it\n"
	  "with weights_only=True?  Everything that stops it is listed.\n\n"
	  "    --weights-only       the weights-only verdict\n" CK_OPTS
	  "\nExit status: 0 described (--weights-only: it would load), 1 cannot be\n"
	  "opened (--weights-only: it would be refused), 2 usage error\n"
	  "(--weights-only: also a checkpoint that cannot be opened or read).\n" },
	{ "set", "ptfs set [-v] [-o commit=WAY] CHECKPOINT PATH < BYTES\n"
	  "       ptfs set CHECKPOINT PATH [--dtype D] [--shape S] < BYTES\n"
	  "Replace the bytes of one tensor with stdin (exactly its size) and commit\n"
	  "them to the checkpoint atomically.  A scalar (int, float, bool, str,\n"
	  "None) takes its new value as text ('echo 8 | ptfs set ck.pt epoch').\n"
	  "With --dtype or --shape the tensor is replaced by a new one (a resize,\n"
	  "another dtype: the file is written again).\n\n"
	  "    -v                   say how the commit was written\n" CK_OPTS PROGRESS_OPTS
	  "\nExit status: 0 committed, 1 not committed (the checkpoint is unchanged),\n"
	  "2 usage error.\n" },
	{ "rm", "ptfs rm [-n] [-v] [-o commit=WAY] CHECKPOINT PATH...\n"
	  "Remove entries (a tensor, a value, a whole directory) from the checkpoint:\n"
	  "each leaves its dict or list, and storages nothing uses any more leave\n"
	  "the file.  One commit for all of them: the checkpoint is written again,\n"
	  "atomically.\n\n" EDIT_OPTS
	  "\nExit status: 0 committed, 1 not (the checkpoint is unchanged), 2 usage\n"
	  "error.\n" },
	{ "mv", "ptfs mv [-n] [-v] CHECKPOINT FROM TO\n"
	  "Rename a key (in place: the order stays), move a value into another\n"
	  "dict (TO a dict: into it), or onto an existing entry (it is replaced).\n\n"
	  EDIT_OPTS
	  "\nExit status: 0 committed, 1 not (the checkpoint is unchanged), 2 usage\n"
	  "error.\n" },
	{ "mkdir", "ptfs mkdir [-n] [-v] CHECKPOINT PATH...\n"
	  "Add empty dicts.\n\n" EDIT_OPTS
	  "\nExit status: 0 committed, 1 not (the checkpoint is unchanged), 2 usage\n"
	  "error.\n" },
	{ "add", "ptfs add [-n] [-v] CHECKPOINT PATH --dtype D --shape S < BYTES\n"
	  "Add a tensor of dtype D (float32, bfloat16, int64...) and shape S (4,4;\n"
	  "'' for a scalar) whose bytes (C order, little-endian) are stdin.\n"
	  "'ptfs set CHECKPOINT PATH --dtype D --shape S' replaces one instead\n"
	  "(a resize, a new dtype; a Parameter stays one).\n\n" EDIT_OPTS
	  "\nExit status: 0 committed, 1 not (the checkpoint is unchanged), 2 usage\n"
	  "error.\n" },
	{ "rename", "ptfs rename [-n] [-v] CHECKPOINT [DICT] --strip-prefix P |\n"
	  "                   --add-prefix P | --sed s/REGEX/REPLACEMENT/[g]\n"
	  "Rename every str key of a dict (default: the root), a state dict's\n"
	  "_metadata prefixes with them; refused when two keys would become one.\n"
	  "--sed takes extended regular expressions, & and \\1-\\9.\n\n" EDIT_OPTS
	  "\nExit status: 0 committed, 1 not (the checkpoint is unchanged), 2 usage\n"
	  "error.\n" },
	{ "tree", "ptfs tree --json [--max N] [--nested] [-o OPTS] CHECKPOINT\n"
	  "Print what /.ptfs/tree.json holds in a mount, without mounting.\n\n"
	  "    --json               JSON output (required: the only form)\n"
	  "    --max N              stop after N entries (default 1000000)\n" CK_OPTS
	  "\nExit status: 0 printed, 1 the checkpoint cannot be read, 2 usage error.\n" },
	{ "export", "ptfs export CHECKPOINT --to " TARGETS_BAR " [--shard-size SIZE]\n"
	  "                   [--skip-unsupported] [--no-fsync] OUT\n"
	  "       ptfs export --list-targets\n"
	  "Write every tensor in another form, never running the pickle; OUT\n"
	  "appears whole or not at all.\n\n"
	  "    --to FORM            " TARGETS_OR "\n"
	  "    --list-targets       print the targets, one a line: name, extension,\n"
	  "                         what OUT becomes\n"
	  "    --shard-size SIZE    safetensors shards of at most SIZE (5GB = 5*10^9,\n"
	  "                         500MiB = 500*2^20, 500M = 500MiB, bytes)\n"
	  "    --skip-unsupported   leave out tensors the form cannot hold\n"
	  "    --no-fsync           do not flush OUT before renaming it into place\n"
	  CK_OPTS PROGRESS_OPTS
	  "\nExit status: 0 written, 1 not written (nothing left half-written),\n"
	  "2 usage error.\n" },
	{ "stat", "ptfs stat [--json] [-j N] CHECKPOINT [PATH]\n"
	  "Per-tensor statistics (min, max, mean, std, zeros, NaN, Inf, sha256) of\n"
	  "every tensor at or below PATH, printed as each finishes, in tree order,\n"
	  "then a summary.\n\n"
	  "    --json               one JSON document\n"
	  "    -j N                 N tensors at a time (default: the CPUs)\n"
	  CK_OPTS PROGRESS_OPTS
	  "\nExit status: 0 all read, 1 a tensor or the checkpoint could not be read,\n"
	  "2 usage error.\n" },
	{ "diff", "ptfs diff [--json] [-j N] [-q] [--tensors-only] CHECKPOINT_A CHECKPOINT_B\n"
	  "What changed between two checkpoints of any formats, tensors and the\n"
	  "other values (epoch, lr, strings...) matched by dotted key; one line per\n"
	  "difference as each tensor finishes, then the values, then a summary.\n\n"
	  "    --json               one JSON document\n"
	  "    -q                   the summary only\n"
	  "    --tensors-only       compare tensors only, not the other values\n"
	  "    -j N                 N tensors at a time (default: the CPUs)\n"
	  CK_OPTS PROGRESS_OPTS
	  "\nExit status (like diff(1)): 0 equal, 1 different, 2 trouble (a file\n"
	  "that cannot be opened or read, a usage error).\n" },
	{ "preview", "ptfs preview [-v] [-s SIDE] CHECKPOINT PATH [--output FILE.png]\n"
	  "A tensor's picture as PNG, to FILE.png or to stdout (not a terminal).\n\n"
	  "    -v                   say how much was read\n"
	  "    -s SIDE              at most SIDE pixels a side (16-4096, default 512)\n"
	  "    --output FILE.png    where to write it (- for stdout)\n" CK_OPTS
	  "\nExit status: 0 written, 1 cannot be drawn or written, 2 usage error.\n" },
	{ "thumbnail", "ptfs thumbnail [-s SIZE] [--uri URI] TENSOR_FILE_IN_A_MOUNT OUTPUT.png\n"
	  "The file managers' thumbnailer: a mounted tensor file's picture, from\n"
	  "its bytes and its user.ptfs.* attributes, with the Thumb::URI and\n"
	  "Thumb::MTime of the freedesktop thumbnail specification.\n\n"
	  "    -s SIZE              at most SIZE pixels a side (default 256)\n"
	  "    --uri URI            the file's URI for Thumb::URI (default: its\n"
	  "                         file:// URI)\n"
	  "\nExit status: 0 written, 1 not a ptfs tensor file or not written,\n"
	  "2 usage error.\n" },
	{ "umount", "ptfs umount MOUNTPOINT       (also: ptfs -u MOUNTPOINT)\n"
	  "Unmount a ptfs mount and wait until its changes are in the checkpoint.\n"
	  "\nExit status: 0 every change is in the checkpoint, 1 not (the reason is\n"
	  "printed: a failed commit, a busy mount, not a ptfs mount), 2 usage error.\n" },
	{ "open", "ptfs open [-n] CHECKPOINT\n"
	  "Open a checkpoint as a folder, as a file manager opens an archive: mount\n"
	  "it read-only with -o nested,previews,suffix on\n"
	  "$XDG_RUNTIME_DIR/ptfs/HASH/NAME (reused when it is open already),\n"
	  "print that path and show it with xdg-open, else gio open.\n"
	  "'ptfs close CHECKPOINT' unmounts it.\n\n"
	  "    -n, --no-browse      mount and print the path, do not show it\n"
	  "\nExit status: 0 open, 1 not mounted, or not shown (the mount stays),\n"
	  "2 usage error.\n" },
	{ "close", "ptfs close CHECKPOINT|FOLDER\n"
	  "Unmount what 'ptfs open CHECKPOINT' mounted (ptfs umount) and remove its\n"
	  "folder.\n"
	  "\nExit status: 0 unmounted, 1 not open or not unmounted (a program may\n"
	  "still use it), 2 usage error.\n" },
	{ "recover", "ptfs recover [--discard | --force] CHECKPOINT\n"
	  "Apply (or drop) the writes a mount could not commit, kept beside the\n"
	  "checkpoint as NAME.ptfs-pending; roll back an interrupted commit.\n\n"
	  "    --discard            drop the kept writes instead\n"
	  "    --force              apply them although the checkpoint changed since\n"
	  CK_OPTS PROGRESS_OPTS
	  "\nExit status: 0 nothing left to recover, 1 otherwise, 2 usage error.\n" },
};

#define NHELPS (sizeof(helps) / sizeof(helps[0]))

/* @text to @f with the marks TARGETS_BAR and TARGETS_OR filled in. */
static void put_text(const char *text, FILE *f)
{
	char names[256];
	const char *p;

	for (p = text; *p; p++) {
		if (*p == TARGETS_BAR[0] || *p == TARGETS_OR[0]) {
			if (*p == TARGETS_BAR[0])
				pt_exporter_names(0, "|", "|", names, sizeof(names));
			else
				pt_exporter_names(0, ", ", " or ", names, sizeof(names));
			fputs(names, f);
		} else {
			fputc(*p, f);
		}
	}
}

void ptfs_usage_full(FILE *f)
{
	put_text("usage: ptfs [options] CHECKPOINT MOUNTPOINT\n"
	      "       ptfs ls [-a] [--max N] [--nested] [-o OPTS] CHECKPOINT [PATH]\n"
	      "       ptfs cat [--nested] [-o OPTS] CHECKPOINT PATH\n"
	      "       ptfs info [-o OPTS] CHECKPOINT\n"
	      "       ptfs info --weights-only CHECKPOINT\n"
	      "       ptfs set [-v] [-o commit=WAY] CHECKPOINT PATH < BYTES\n"
	      "       ptfs rm|mkdir [-n] CHECKPOINT PATH...   ptfs mv [-n] CHECKPOINT FROM TO\n"
	      "       ptfs add [-n] CHECKPOINT PATH --dtype D --shape S < BYTES\n"
	      "       ptfs rename [-n] CHECKPOINT [DICT] --strip-prefix P | --add-prefix P\n"
	      "                   | --sed s/REGEX/REPLACEMENT/[g]\n"
	      "       ptfs umount MOUNTPOINT       (also: ptfs -u MOUNTPOINT)\n"
	      "       ptfs open [-n] CHECKPOINT    ptfs close CHECKPOINT|FOLDER\n"
	      "       ptfs recover [--discard | --force] CHECKPOINT\n"
	      "       ptfs tree --json [--max N] CHECKPOINT\n"
	      "       ptfs export CHECKPOINT --to " TARGETS_BAR " [--shard-size SIZE]\n"
	      "                   [--skip-unsupported] [--no-fsync] OUT\n"
	      "       ptfs export --list-targets\n"
	      "       ptfs stat [--json] [-j N] CHECKPOINT [PATH]\n"
	      "       ptfs diff [--json] [-j N] [-q] [--tensors-only] CHECKPOINT_A CHECKPOINT_B\n"
	      "       ptfs preview [-v] [-s SIDE] CHECKPOINT PATH [--output FILE.png]\n"
	      "       ptfs thumbnail [-s SIZE] [--uri URI] TENSOR_FILE_IN_A_MOUNT OUTPUT.png\n"
	      "       (stat, diff, export, set and recover take --progress, --no-progress)\n", f);
	fputs("\n"
	      "Mount a PyTorch checkpoint as a directory tree: every tensor is a file\n"
	      "of its raw bytes with NAME.json beside it (see ptfs(1)).\n"
	      "'ptfs SUBCOMMAND --help' describes one subcommand.\n"
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
	      "    -o nonempty            mount on a directory that is not empty\n"
	      "    -o nested              dotted keys (a.b.c) as directories a/b/c\n"
	      "    -o suffix              tensor files named NAME.tensor (their type\n"
	      "                           for file managers)\n"
	      "    -o max_depth=N         cap on nesting of the pickle and the tree\n"
	      "    -o max_values=N        cap on values one pickle may create\n"
	      "    -o max_memo=N          cap on memo entries of one pickle\n"
	      "    -o max_memory=SIZE     cap on memory for the decoded pickle\n"
	      "    -o max_pickle_bytes=SIZE   cap on the size of one pickle\n"
	      "    -o max_inflate_bytes=SIZE  cap on one inflated ZIP record\n"
	      "    -o max_records=N       cap on ZIP records\n"
	      "    -o max_rank=N          cap on dimensions of one tensor\n"
	      "    -o max_dir_entries=N   cap on entries of one directory\n"
	      "    -o max_walk_entries=N  cap on entries one walk of the tree visits\n"
	      "                           (stat, diff, export, tree.json, /.ptfs/stats)\n"
	      "    -o max_walk_bytes=SIZE cap on paths and text one walk makes\n"
	      "                           (nested, suffix, commit= and the max_* options,\n"
	      "                           N >= 1, work the same with the subcommands;\n"
	      "                           SIZE: bytes, 4k = 4KiB = 4096, 4kB = 4000)\n"
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
	      "Exit status: 0 success (mounted), 1 the checkpoint cannot be opened or\n"
	      "mounted, or the mountpoint is not an empty directory, 2 usage error.\n", f);
}

bool ptfs_is_command(const char *name)
{
	size_t i;

	for (i = 0; i < NHELPS; i++)
		if (strcmp(helps[i].name, name) == 0)
			return true;
	return false;
}

bool ptfs_usage_cmd(const char *cmd, FILE *f)
{
	size_t i;

	for (i = 0; i < NHELPS; i++) {
		if (strcmp(helps[i].name, cmd) == 0) {
			fputs("usage: ", f);
			put_text(helps[i].text, f);
			return true;
		}
	}
	return false;
}

void ptfs_usage_try(const char *cmd)
{
	if (cmd)
		fprintf(stderr, "Try 'ptfs %s --help'\n", cmd);
	else
		fputs("Try 'ptfs --help'\n", stderr);
}

int ptfs_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "ptfs %s: %s\n", cmd, msg);
	else
		fprintf(stderr, "ptfs: %s\n", msg);
	ptfs_usage_try(cmd);
	return PTFS_EXIT_USAGE;
}

bool ptfs_help_asked(int argc, char **argv)
{
	int i;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			return false;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return true;
	}
	return false;
}

void ptfs_args_init(struct ptfs_args *a, int argc, char **argv)
{
	memset(a, 0, sizeof(*a));
	a->cmd = argv[0];
	a->argc = argc;
	a->argv = argv;
	a->i = 1;
}

int ptfs_args_next(struct ptfs_args *a, const char *const *names, const char **val)
{
	const char *s;
	size_t k;

	*val = NULL;
	for (;;) {
		if (a->i >= a->argc)
			return PTFS_ARG_END;
		s = a->argv[a->i++];
		if (a->ddash || s[0] != '-' || s[1] == '\0') {
			*val = s;
			return PTFS_ARG_POS;
		}
		if (strcmp(s, "--") != 0)
			break;
		a->ddash = true;
	}
	for (k = 0; names && names[k]; k++) {
		const char *n = names[k];
		size_t len = strlen(n);
		bool arg = len && n[len - 1] == '=';

		if (arg)
			len--;
		if (strncmp(s, n, len) != 0)
			continue;
		if (s[len] == '\0' && !arg)
			return (int)k;
		if (arg && len == 2 && s[len] != '\0' && s[len] != '=') {
			*val = s + len;         /* -j4, as getopt takes it */
			return (int)k;
		}
		if (!arg || (s[len] != '\0' && s[len] != '='))
			continue;
		if (s[len] == '=') {
			*val = s + len + 1;
		} else if (a->i < a->argc) {
			*val = a->argv[a->i++];
		} else {
			ptfs_usage_error(a->cmd, "%.*s needs a value", (int)len, n);
			return PTFS_ARG_BAD;
		}
		return (int)k;
	}
	ptfs_usage_error(a->cmd, "unknown option '%s'", s);
	return PTFS_ARG_BAD;
}

/* Optimal string alignment distance (insertions, deletions, substitutions
 * and swaps of two neighbours), for short words. */
static size_t distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j;
	size_t d[24][24];

	if (la > 22 || lb > 22)
		return 99;
	for (i = 0; i <= la; i++)
		d[i][0] = i;
	for (j = 0; j <= lb; j++)
		d[0][j] = j;
	for (i = 1; i <= la; i++) {
		for (j = 1; j <= lb; j++) {
			size_t c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);

			if (d[i - 1][j] + 1 < c)
				c = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < c)
				c = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < c)
				c = d[i - 2][j - 2] + 1;
			d[i][j] = c;
		}
	}
	return d[la][lb];
}

bool ptfs_suggest(const char *word, char *out, size_t cap)
{
	size_t best = 99, i, n = 0, len = 0;

	if (!*word || word[0] == '-')
		return false;
	for (i = 0; i < NHELPS; i++) {
		size_t d = distance(word, helps[i].name);
		/* one edit in a short name, two in a long one */
		size_t allow = strlen(helps[i].name) >= 6 ? 2 : 1;

		if (d <= allow && d < best)
			best = d;
	}
	if (best == 99 || cap == 0)
		return false;
	out[0] = '\0';
	for (i = 0; i < NHELPS; i++) {
		if (distance(word, helps[i].name) != best)
			continue;
		len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s'%s'",
					n ? " or " : "", helps[i].name);
		if (len >= cap)
			return false;
		n++;
	}
	return n > 0;
}

int ptfs_operands(int argc, char **argv, const char *const *flags, unsigned *seen,
		  char **pos, int min, int max, const char *const *what)
{
	struct ptfs_args a;
	const char *v;
	int k, n = 0;

	if (seen)
		*seen = 0;
	ptfs_args_init(&a, argc, argv);
	while ((k = ptfs_args_next(&a, flags, &v)) != PTFS_ARG_END) {
		if (k == PTFS_ARG_BAD)
			return PTFS_EXIT_USAGE;
		if (k >= 0)
			*seen |= 1u << k;
		else if (n < max)
			pos[n++] = a.argv[a.i - 1];     /* v, not const */
		else
			return ptfs_usage_error(a.cmd, "extra argument '%s'", v);
	}
	if (n < min)
		return ptfs_usage_error(a.cmd, "missing %s", what[n]);
	while (n < max)
		pos[n++] = NULL;
	return 0;
}
