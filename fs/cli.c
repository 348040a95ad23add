/* SPDX-License-Identifier: MIT */
/*
 * cli.c -- the subcommands that need no FUSE (containers often lack
 * /dev/fuse): ls, cat, info, set and recover.  Each opens the checkpoint with the
 * same core library the mount uses, so what they print is what the mount
 * shows.
 */
#include "ptfs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/pending.h"
#include "log.h"
#include "opts.h"
#include "progress.h"
#include "usage.h"

/* Options every subcommand takes: --nested and -o OPT[,OPT...] with the
 * mount's limit options (max_depth=N, ...), so that a file the mount
 * refuses for a limit can be inspected here with a larger one. */
static struct pt_ckpt_opts cli_opts;
static bool cli_verbose;        /* -v: say how a commit wrote */

static int parse_o(char *list)
{
	char *save = NULL, *o;

	for (o = strtok_r(list, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		int remote = ptfs_remote_option(o);
		int rc;

		if (remote < 0)
			return -1;
		if (remote > 0)
			continue;
		rc = ptfs_opt_apply(&cli_opts, o);
		if (rc < 0)
			return -1;
		if (rc == 0) {
			fprintf(stderr, "ptfs: unknown option '-o %s'\n", o);
			return -1;
		}
	}
	return 0;
}

static int open_or_report(const char *path, struct pt_ckpt **ck)
{
	struct pt_error err;

	pt_error_clear(&err);
	if (ptfs_open_checkpoint(path, &cli_opts, ck, &err) != 0) {
		ptfs_report_open(path, &err);
		return PTFS_EXIT_ERROR;
	}
	if (*pt_ckpt_recovery(*ck))
		fprintf(stderr, "ptfs: %s\n", pt_ckpt_recovery(*ck));
	return 0;
}

static struct pt_node *resolve(struct pt_ckpt *ck, const char *ckpath,
			       const char *path)
{
	struct pt_node *n;
	int rc = 0;

	n = pt_tree_path(ck, path, &rc);
	if (!n)
		fprintf(stderr, "ptfs: %s: %s: %s\n", ckpath, path, strerror(-rc));
	return n;
}

struct ls_walk {
	bool all;
	unsigned long long max, shown;
	struct pt_ckpt *ck;
	struct pt_buf out;              /* lines not yet handed to stdout */
};

/* Lines go to stdout in pieces of this size, one fwrite each (stdio passes
 * a write this large straight to write(2)). */
#define LS_CHUNK (64u << 10)

/* Hand the buffered lines to stdout. */
static void ls_flush(struct ls_walk *l)
{
	if (l->out.len)
		fwrite(l->out.p, 1, l->out.len, stdout);
	l->out.len = 0;
}

/* @v in decimal, right-aligned in @width columns (printf's "%14" PRIu64,
 * which cost more than building the rest of the line). */
static void put_u64(struct pt_buf *b, uint64_t v, size_t width)
{
	char tmp[32];
	size_t n = 0;

	do {
		tmp[sizeof(tmp) - ++n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n < width && n < sizeof(tmp))
		tmp[sizeof(tmp) - ++n] = ' ';
	pt_buf_add(b, tmp + sizeof(tmp) - n, n);
}

/* One line of `ptfs ls`: "T SIZE  PATH[/][  DESCRIPTION]". */
static int ls_entry(void *ctx, const struct pt_walk *w)
{
	struct ls_walk *l = ctx;
	const char *name = pt_node_name(w->node);
	struct pt_nattr a;
	size_t mark;

	if (!l->all && name[0] == '.')
		return PT_WALK_SKIP;
	if (l->shown++ >= l->max) {
		pt_buf_printf(&l->out, "... (stopped after %llu entries; use --max)\n",
			      l->max);
		return PT_WALK_STOP;
	}
	pt_node_attr(w->node, &a);
	pt_buf_putc(&l->out, a.type == PT_NT_DIR ? 'd' : a.type == PT_NT_LINK ? 'l' : '-');
	pt_buf_putc(&l->out, ' ');
	put_u64(&l->out, a.size, 14);
	pt_buf_add(&l->out, "  ", 2);
	pt_buf_puts(&l->out, w->path);
	if (a.type == PT_NT_DIR)
		pt_buf_putc(&l->out, '/');
	mark = l->out.len;
	pt_buf_add(&l->out, "  ", 2);
	pt_node_describe(l->ck, w->node, &l->out);
	if (l->out.len == mark + 2)
		l->out.len = mark;      /* nothing to describe */
	pt_buf_putc(&l->out, '\n');
	if (l->out.oom)
		return -ENOMEM;
	if (l->out.len >= LS_CHUNK)
		ls_flush(l);
	return 0;
}

/* Flush stdout; a write error (a full disk, /dev/full, a closed pipe)
 * is reported and makes the command fail. */
static int flush_stdout(const char *what)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "ptfs %s: writing the output: %s\n", what,
			strerror(errno ? errno : EIO));
		return PTFS_EXIT_ERROR;
	}
	return PTFS_EXIT_OK;
}

/*
 * `ptfs ls`: the tree below PATH, depth first, one line per entry: type,
 * size, path, and dtype and shape for tensors.  Sidecar .json files and
 * /.ptfs are shown with -a.  Output stops after --max entries (default
 * 10000), so a tree whose references multiply still lists at once.  A
 * directory that cannot be listed (over max_dir_entries) is reported and
 * makes the exit status 1.
 */
static int cmd_ls(int argc, char **argv)
{
	struct ls_walk l = { .max = 10000 };
	struct pt_error err;
	struct pt_ckpt *ck = NULL;
	struct pt_node *top;
	struct pt_buf path;
	const char *ckpath = NULL, *sub = "";
	static const char *const names[] = { "-a", "--max=", NULL };
	struct ptfs_args args;
	const char *v;
	int k, npos = 0, rc = PTFS_EXIT_OK, wrc;

	ptfs_args_init(&args, argc, argv);
	while ((k = ptfs_args_next(&args, names, &v)) != PTFS_ARG_END) {
		if (k == PTFS_ARG_BAD)
			return PTFS_EXIT_USAGE;
		if (k == 0) {
			l.all = true;
		} else if (k == 1) {
			char *end;
			l.max = strtoull(v, &end, 10);
			if (!*v || *end || l.max == 0)
				return ptfs_usage_error("ls", "--max takes a positive number, not '%s'", v);
		} else if (npos++ == 0) {
			ckpath = v;
		} else if (npos == 2) {
			sub = v;
		} else {
			return ptfs_usage_error("ls", "extra argument '%s'", v);
		}
	}
	if (!ckpath)
		return ptfs_usage_error("ls", "missing CHECKPOINT");
	if (open_or_report(ckpath, &ck))
		return PTFS_EXIT_ERROR;
	top = resolve(ck, ckpath, sub);
	if (!top) {
		pt_ckpt_close(ck);
		return PTFS_EXIT_ERROR;
	}
	pt_buf_init(&path);
	pt_buf_init(&l.out);
	l.ck = ck;
	pt_buf_puts(&path, sub);
	while (path.len && path.p[path.len - 1] == '/')
		path.p[--path.len] = '\0';
	pt_error_clear(&err);
	wrc = pt_tree_walk(ck, top, path.p ? path.p : "",
			   l.all ? PT_WALK_ALL : 0, ls_entry, &l, &err);
	ls_flush(&l);           /* before an error line, as it came first */
	if (wrc) {
		fprintf(stderr, "ptfs: %s: not everything could be listed: %s%s\n",
			ckpath, err.msg[0] ? err.msg : strerror(-wrc),
			wrc == -EFBIG ? " (a directory over -o max_dir_entries, or nesting over max_depth)" : "");
		rc = PTFS_EXIT_ERROR;
	}
	if (flush_stdout("ls"))
		rc = PTFS_EXIT_ERROR;
	pt_buf_free(&path);
	pt_buf_free(&l.out);
	pt_ckpt_close(ck);
	return rc;
}

/* The operands' names in "missing ..." lines. */
static const char *const ck_path[] = { "CHECKPOINT", "PATH" };

static int cmd_cat(int argc, char **argv)
{
	struct pt_ckpt *ck = NULL;
	struct pt_node *node;
	struct pt_nattr a;
	struct pt_error err;
	size_t bufsz = 1u << 20;
	uint64_t off = 0;
	char *buf;
	int rc = PTFS_EXIT_OK;
	char *pos[2];

	if (ptfs_operands(argc, argv, NULL, NULL, pos, 2, 2, ck_path))
		return PTFS_EXIT_USAGE;
	argv[1] = pos[0];
	argv[2] = pos[1];
	if (open_or_report(argv[1], &ck))
		return PTFS_EXIT_ERROR;
	node = resolve(ck, argv[1], argv[2]);
	if (!node) {
		pt_ckpt_close(ck);
		return PTFS_EXIT_ERROR;
	}
	pt_node_attr(node, &a);
	if (a.type == PT_NT_DIR) {
		fprintf(stderr, "ptfs: %s: %s: is a directory\n", argv[1], argv[2]);
		pt_ckpt_close(ck);
		return PTFS_EXIT_ERROR;
	}
	buf = malloc(bufsz);
	if (!buf) {
		pt_ckpt_close(ck);
		return PTFS_EXIT_ERROR;
	}
	while (off < a.size) {
		ssize_t got;
		size_t done = 0;

		pt_error_clear(&err);
		got = pt_node_read(ck, node, buf, bufsz, off, &err);
		if (got <= 0) {
			fprintf(stderr, "ptfs: %s: %s: %s\n", argv[1], argv[2],
				got < 0 ? (err.msg[0] ? err.msg : strerror((int)-got)) : "unexpected end");
			rc = PTFS_EXIT_ERROR;
			break;
		}
		while (done < (size_t)got) {
			ssize_t w = write(STDOUT_FILENO, buf + done, (size_t)got - done);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				fprintf(stderr, "ptfs: write to stdout: %s\n", strerror(errno));
				rc = PTFS_EXIT_ERROR;
				goto out;
			}
			done += (size_t)w;
		}
		off += (uint64_t)got;
	}
out:
	free(buf);
	pt_ckpt_close(ck);
	return rc;
}

static int cmd_info(int argc, char **argv)
{
	struct pt_ckpt *ck = NULL;
	struct pt_buf b;
	static const char *const flags[] = { "--weights-only", NULL };
	char *pos[1];
	unsigned seen;
	int rc;

	if (ptfs_operands(argc, argv, flags, &seen, pos, 1, 1, ck_path))
		return PTFS_EXIT_USAGE;
	if (seen)
		return ptfs_cmd_weights_only(pos[0], &cli_opts);
	argv[1] = pos[0];
	if (open_or_report(argv[1], &ck))
		return PTFS_EXIT_ERROR;
	pt_buf_init(&b);
	pt_ckpt_info(ck, &b);
	if (b.oom) {
		fprintf(stderr, "ptfs: %s: out of memory\n", argv[1]);
		rc = PTFS_EXIT_ERROR;
	} else {
		fwrite(b.p, 1, b.len, stdout);
		rc = flush_stdout("info");
	}
	pt_buf_free(&b);
	pt_ckpt_close(ck);
	return rc;
}

struct set_ctx {
	struct pt_ckpt *ck;
	struct ptfs_progress *pg;
	const struct pt_storage *st;
	const uint8_t *data;            /* the new tensor bytes */
	uint64_t lo;                    /* where they go in the storage */
	uint64_t len;
};

/* New storage contents: the file's bytes with the tensor's window
 * replaced. */
static int set_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	struct set_ctx *c = ctx;
	uint8_t *p = buf;
	uint64_t end = off + n;
	struct pt_error err;
	int rc;

	pt_error_clear(&err);
	rc = pt_storage_read_file(c->ck, c->st, p, n, off, &err);
	if (rc)
		return rc;
	if (off < c->lo + c->len && end > c->lo) {
		uint64_t a = off > c->lo ? off : c->lo;
		uint64_t b = end < c->lo + c->len ? end : c->lo + c->len;
		memcpy(p + (a - off), c->data + (a - c->lo), (size_t)(b - a));
	}
	ptfs_progress_done(c->pg, n);
	return 0;
}

/* `ptfs set CHECKPOINT PATH < BYTES`: replace one tensor's bytes and commit
 * them with the same rewriter the mount uses. */
static int cmd_set(int argc, char **argv)
{
	struct pt_ckpt *ck = NULL;
	struct pt_error err;
	struct set_ctx c;
	struct pt_commit cm;
	struct pt_node *node;
	struct pt_nattr a;
	uint8_t *data = NULL;
	uint64_t len = 0;
	int rc = PTFS_EXIT_ERROR, e;

	char found[4096];
	char *pos[2];

	memset(&c, 0, sizeof(c));
	if (ptfs_operands(argc, argv, NULL, NULL, pos, 2, 2, ck_path))
		return PTFS_EXIT_USAGE;
	argv[1] = pos[0];
	argv[2] = pos[1];
	/* a commit now would make the kept writes older than their file */
	if (ptfs_pending_note(argv[1], found, sizeof(found)))
		return PTFS_EXIT_ERROR;
	cli_opts.recover = true;        /* it writes: it may roll back */
	if (open_or_report(argv[1], &ck))
		return PTFS_EXIT_ERROR;
	node = resolve(ck, argv[1], argv[2]);
	if (!node)
		goto out;
	pt_node_attr(node, &a);
	if (pt_node_kind(node) == PT_NK_SCALAR) {
		/* a new value for an int, a str...: surgery (fs/edit.c) */
		pt_ckpt_close(ck);
		return ptfs_cmd_edit(argc, argv, &cli_opts, cli_verbose);
	}
	memset(&c, 0, sizeof(c));
	c.st = pt_node_writable_storage(node, &c.lo);
	if (!c.st || !pt_ckpt_writable(ck)) {
		fprintf(stderr, "ptfs: %s: %s: not a writable tensor (%s)\n", argv[1], argv[2],
			a.tensor ? "a view, an array inside the pickle, or a compressed record" :
				   "only tensor files can be set");
		goto out;
	}
	/* stdin, then the storage as the commit reads it */
	c.pg = ptfs_progress_start("set");
	ptfs_progress_total(c.pg, a.size + pt_storage_size(c.st));
	e = ptfs_read_stdin(&data, &len, a.size, c.pg);
	if (e || len != a.size) {
		ptfs_progress_end(c.pg);        /* off the line first */
		c.pg = NULL;
	}
	if (e) {
		fprintf(stderr, "ptfs: reading stdin: %s\n", strerror(-e));
		goto out;
	}
	if (len != a.size) {
		fprintf(stderr, "ptfs: %s: %s: stdin has %s%llu bytes, the tensor has %llu\n",
			argv[1], argv[2], len > a.size ? "more than " : "",
			(unsigned long long)(len > a.size ? a.size : len),
			(unsigned long long)a.size);
		goto out;
	}
	c.ck = ck;
	c.data = data;
	c.len = len;
	memset(&cm, 0, sizeof(cm));
	cm.st = c.st;
	cm.read = set_read;
	cm.ctx = &c;
	pt_error_clear(&err);
	rc = pt_ckpt_commit(ck, &cm, 1, &err);
	ptfs_progress_end(c.pg);
	c.pg = NULL;
	if (rc != 0) {
		rc = PTFS_EXIT_ERROR;
		fprintf(stderr, "ptfs: %s: %s\n", argv[1], err.msg);
		goto out;
	}
	if (cli_verbose)
		fprintf(stderr, "ptfs: %s: committed (%s)\n", argv[1],
			pt_ckpt_last_commit(ck));
	rc = PTFS_EXIT_OK;
out:
	ptfs_progress_end(c.pg);
	free(data);
	pt_ckpt_close(ck);
	return rc;
}

/* `ptfs recover [--discard | --force] CHECKPOINT`: an interrupted commit's
 * journal is dealt with by the open; then the writes a mount kept
 * (ckpt/pending.h) are applied or dropped. */
static int cmd_recover(int argc, char **argv)
{
	bool discard = false, force = false;
	char *path = NULL;
	char found[4096], note[1024] = "";
	struct pt_ckpt *ck = NULL;
	struct pt_error err;
	static const char *const flags[] = { "--discard", "--force", NULL };
	unsigned seen;
	int rc;

	if (ptfs_operands(argc, argv, flags, &seen, &path, 1, 1, ck_path))
		return PTFS_EXIT_USAGE;
	discard = seen & 1;
	force = seen & 2;
	if (discard && force)
		return ptfs_usage_error("recover", "--discard and --force exclude each other");
	cli_opts.recover = true;
	/* structural edits a mount kept are made again (ckpt/pending.h) */
	cli_opts.editable = !discard;
	if (open_or_report(path, &ck))
		return PTFS_EXIT_ERROR;
	if (!pt_pending_find(path, ptfs_state_dir(false), found, sizeof(found))) {
		if (!*pt_ckpt_recovery(ck))
			fprintf(stderr, "ptfs: %s: nothing to recover\n", path);
		pt_ckpt_close(ck);
		return PTFS_EXIT_OK;
	}
	pt_error_clear(&err);
	if (discard) {
		rc = pt_pending_discard(ck, found, &err);
	} else {
		struct ptfs_progress *pg = ptfs_progress_start("recover");

		pt_ckpt_set_progress(ck, ptfs_progress_hook, pg);
		rc = pt_pending_apply(ck, found, force, note, sizeof(note), &err);
		pt_ckpt_set_progress(ck, NULL, NULL);
		ptfs_progress_end(pg);
	}
	if (rc)
		fprintf(stderr, "ptfs: %s: %s\n", path, err.msg);
	else if (discard)
		fprintf(stderr, "ptfs: %s: dropped the writes kept in %s\n", path, found);
	else
		fprintf(stderr, "ptfs: %s: %s\n", path, note);
	pt_ckpt_close(ck);
	return rc ? PTFS_EXIT_ERROR : PTFS_EXIT_OK;
}

/* set --dtype D / --shape S: a new tensor in place of the old one. */
static bool shapes_given(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strncmp(argv[i], "--dtype", 7) == 0 || strncmp(argv[i], "--shape", 7) == 0)
			return true;
	return false;
}

/* Whether subcommand @cmd is one of @list (space separated). */
static bool one_of(const char *cmd, const char *list)
{
	size_t n = strlen(cmd);
	const char *p = list;

	while ((p = strstr(p, cmd)) != NULL) {
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return true;
		p += n;
	}
	return false;
}

/* The options several subcommands share, taken out of argv wherever they
 * stand before a "--": --nested and -o for those that open a checkpoint,
 * -v for set, --progress and --no-progress for the long ones.  The new
 * argc, or -1 after a usage error. */
static int common_options(int argc, char **argv)
{
	bool ck = !one_of(argv[0], "thumbnail");
	bool slow = one_of(argv[0], "stat diff export set recover");
	int i, j;

	for (i = j = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--") == 0) {
			while (i < argc)
				argv[j++] = argv[i++];
			break;
		}
		if (ck && strcmp(a, "--nested") == 0) {
			cli_opts.nested = true;
		} else if (strcmp(argv[0], "set") == 0 && !shapes_given(argc, argv) &&
			   (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0)) {
			cli_verbose = true;
		} else if (slow && strcmp(a, "--progress") == 0) {
			ptfs_progress_mode(PTFS_PROGRESS_ON);
		} else if (slow && strcmp(a, "--no-progress") == 0) {
			ptfs_progress_mode(PTFS_PROGRESS_OFF);
		} else if (ck && strcmp(a, "-o") == 0) {
			if (i + 1 >= argc) {
				ptfs_usage_error(argv[0], "-o needs a value");
				return -1;
			}
			if (parse_o(argv[++i]) != 0) {
				ptfs_usage_try(argv[0]);
				return -1;
			}
		} else {
			argv[j++] = argv[i];
		}
	}
	argv[j] = NULL;
	return j;
}

int ptfs_cli(int argc, char **argv)
{
	ptfs_heap_reserve();    /* heap.c */
	pt_ckpt_opts_default(&cli_opts);
	argc = common_options(argc, argv);
	if (argc < 0)
		return PTFS_EXIT_USAGE;
	for (int i = 1; i < argc; i++)  /* from here on, never a secret */
		argv[i] = ptfs_url_hide_arg(argv[i]);
	if (strcmp(argv[0], "ls") == 0)
		return cmd_ls(argc, argv);
	if (strcmp(argv[0], "cat") == 0)
		return cmd_cat(argc, argv);
	if (strcmp(argv[0], "info") == 0)
		return cmd_info(argc, argv);
	if (strcmp(argv[0], "tree") == 0)
		return ptfs_cmd_tree(argc, argv, &cli_opts);
	if (strcmp(argv[0], "export") == 0)
		return ptfs_cmd_export(argc, argv, &cli_opts);
	if (strcmp(argv[0], "recover") == 0)
		return cmd_recover(argc, argv);
	if (one_of(argv[0], "rm mv mkdir add rename") || (strcmp(argv[0], "set") == 0 &&
							     shapes_given(argc, argv)))
		return ptfs_cmd_edit(argc, argv, &cli_opts, false);
	if (strcmp(argv[0], "set") != 0)
		return ptfs_view_cmd(argc, argv, &cli_opts);
	return cmd_set(argc, argv);
}
