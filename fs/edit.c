/* SPDX-License-Identifier: MIT */
/*
 * edit.c -- checkpoint surgery from the command line: `ptfs rm`, `mv`,
 * `mkdir`, `add`, `rename`, and `set` of a scalar or with a new dtype or
 * shape.  Each command is one batch of edits (ckpt/edit.c) and one commit:
 * the checkpoint is written again whole, atomically (a new file renamed
 * over it), or not at all.  --dry-run says what would change and the
 * size the file would have, and writes nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "decode/dtype.h"
#include "io/source.h"
#include "ptfs.h"
#include "progress.h"
#include "usage.h"

/* What one command line asks. */
struct ecmd {
	const char *cmd;
	const char *ck;                 /* CHECKPOINT as given */
	const char **ops;               /* the operands after CHECKPOINT */
	int nops;
	bool dry, verbose;
	const char *dtype, *shape;      /* add, set */
	const char *strip, *prefix, *sed; /* rename */
	regex_t re;                     /* --sed */
	bool re_ok, global;
	const char *repl;
	char *sed_copy;
};

int ptfs_read_stdin(uint8_t **out, uint64_t *len, uint64_t max,
		    struct ptfs_progress *pg)
{
	size_t cap = (size_t)(max + 1 < (1u << 20) ? max + 1 : (1u << 20));
	uint8_t *buf = malloc(cap ? cap : 1);
	uint64_t n = 0;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t got;

		if (n == cap) {
			uint8_t *q;

			if (n > max)
				break;
			cap *= 2;
			q = realloc(buf, cap);
			if (!q) {
				free(buf);
				return -ENOMEM;
			}
			buf = q;
		}
		got = read(STDIN_FILENO, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			free(buf);
			return -errno;
		}
		if (got == 0)
			break;
		n += (uint64_t)got;
		ptfs_progress_done(pg, (uint64_t)got);
	}
	*out = buf;
	*len = n;
	return 0;
}

/* ---- rename rules ---- */

static int strip_prefix(void *ctx, const uint8_t *key, size_t len,
			struct pt_buf *out)
{
	const char *p = ctx;
	size_t n = strlen(p);

	if (len < n || memcmp(key, p, n) != 0)
		return 0;
	pt_buf_add(out, key + n, len - n);
	return 1;
}

static int add_prefix(void *ctx, const uint8_t *key, size_t len,
		      struct pt_buf *out)
{
	pt_buf_puts(out, ctx);
	pt_buf_add(out, key, len);
	return 1;
}

/* s/RE/REPL/[g] as sed does it: & the match, \1..\9 the groups. */
static void sed_repl(const struct ecmd *e, const char *key,
		     const regmatch_t *m, struct pt_buf *out)
{
	const char *r;

	for (r = e->repl; *r; r++) {
		if (*r == '&') {
			pt_buf_add(out, key + m[0].rm_so, (size_t)(m[0].rm_eo - m[0].rm_so));
		} else if (*r == '\\' && r[1] >= '1' && r[1] <= '9') {
			const regmatch_t *g = &m[r[1] - '0'];

			if (g->rm_so >= 0)
				pt_buf_add(out, key + g->rm_so, (size_t)(g->rm_eo - g->rm_so));
			r++;
		} else if (*r == '\\' && r[1]) {
			pt_buf_putc(out, *++r);
		} else {
			pt_buf_putc(out, *r);
		}
	}
}

static int sed_key(void *ctx, const uint8_t *k, size_t len, struct pt_buf *out)
{
	const struct ecmd *e = ctx;
	regmatch_t m[10];
	char *key, *at;
	int hit = 0;

	if (memchr(k, '\0', len))
		return 0;
	key = strndup((const char *)k, len);
	if (!key)
		return -ENOMEM;
	at = key;
	while (regexec(&e->re, at, 10, m, at == key ? 0 : REG_NOTBOL) == 0) {
		hit = 1;
		pt_buf_add(out, at, (size_t)m[0].rm_so);
		sed_repl(e, at, m, out);
		if (m[0].rm_eo == m[0].rm_so) {
			/* an empty match moves on by one character */
			if (!at[m[0].rm_eo]) {
				at += m[0].rm_eo;
				break;
			}
			pt_buf_putc(out, at[m[0].rm_eo]);
			at += m[0].rm_eo + 1;
		} else {
			at += m[0].rm_eo;
		}
		if (!e->global)
			break;
	}
	if (hit)
		pt_buf_puts(out, at);
	free(key);
	return hit;
}

/* Parse s<d>RE<d>REPL<d>[g]: any delimiter <d>, "\<d>" stands for it
 * inside either part. */
static int sed_parse(struct ecmd *e)
{
	const char *p = e->sed + 2;
	char d = e->sed[1], *w, *parts[4];
	int k = 1, rc;

	if (e->sed[0] != 's' || !d || d == '\\')
		return ptfs_usage_error(e->cmd, "--sed takes s/REGEX/REPLACEMENT/[g]");
	e->sed_copy = w = malloc(strlen(p) + 1);
	if (!w)
		return PTFS_EXIT_ERROR;
	parts[0] = w;
	while (*p && k < 4) {
		if (*p == '\\' && p[1] == d) {
			*w++ = d;
			p += 2;
		} else if (*p == d) {
			*w++ = '\0';
			parts[k++] = w;
			p++;
		} else {
			*w++ = *p++;
		}
	}
	*w = '\0';
	if (k != 3 || (parts[2][0] && strcmp(parts[2], "g") != 0))
		return ptfs_usage_error(e->cmd, "--sed takes s/REGEX/REPLACEMENT/[g]");
	e->repl = parts[1];
	e->global = parts[2][0] == 'g';
	rc = regcomp(&e->re, parts[0], REG_EXTENDED);
	if (rc) {
		char msg[128];

		regerror(rc, &e->re, msg, sizeof(msg));
		return ptfs_usage_error(e->cmd, "--sed: %s", msg);
	}
	e->re_ok = true;
	return 0;
}

/* ---- the commands ---- */

/* "4,4", "[4, 4]", "4x4", "" or "[]" (a scalar) into @shape. */
static int parse_shape(const char *s, int64_t *shape, uint32_t cap,
		       uint32_t *rank)
{
	*rank = 0;
	while (*s == ' ' || *s == '[' || *s == '(')
		s++;
	while (*s && *s != ']' && *s != ')') {
		char *end;
		long long v;

		errno = 0;
		v = strtoll(s, &end, 10);
		if (end == s || errno || v < 0 || *rank == cap)
			return -1;
		shape[(*rank)++] = v;
		s = end;
		while (*s == ' ')
			s++;
		if (*s == ',' || *s == 'x')
			s++;
		while (*s == ' ')
			s++;
	}
	return 0;
}

/* The bytes of a tensor read from stdin, exactly dtype x shape of them. */
static int tensor_in(struct ecmd *e, struct pt_edit_tensor *t, int64_t *shape,
		     uint8_t **data, struct pt_error *err)
{
	const struct pt_dtype *dt = pt_dtype_from_torch(e->dtype);
	uint64_t numel = 1, len = 0;
	unsigned size = dt && !dt->packed ? dt->size : 0;
	size_t i;
	int rc;

	/* checked by parse() (or the tensor's own, for set) */
	if (!size || parse_shape(e->shape, shape, 64, &t->rank))
		return -EINVAL;
	for (i = 0; i < t->rank; i++) {
		if (shape[i] && numel > UINT64_MAX / 16 / (uint64_t)shape[i])
			return -EFBIG;
		numel *= (uint64_t)shape[i];
	}
	rc = ptfs_read_stdin(data, &len, numel * size, NULL);
	if (rc)
		return pt_fail(err, rc, "reading stdin: %s", strerror(-rc));
	if (len != numel * size)
		return pt_fail(err, -EINVAL, "stdin has %s%" PRIu64 " bytes, %s [%s] takes %" PRIu64,
			       len > numel * size ? "more than " : "",
			       len > numel * size ? numel * size : len, e->dtype,
			       e->shape, numel * size);
	t->dtype = e->dtype;
	t->shape = shape;
	t->bytes = *data;
	t->len = len;
	return 0;
}

/* One command's edits on @ck; @log gets a line for each. */
static int apply(struct ecmd *e, struct pt_ckpt *ck, struct pt_buf *log,
		 uint8_t **data, struct pt_error *err)
{
	const char *c = e->cmd;
	int64_t shape[64];
	struct pt_edit_tensor t;
	uint64_t len = 0;
	int i, rc = 0;

	if (strcmp(c, "rm") == 0 || strcmp(c, "mkdir") == 0) {
		for (i = 0; i < e->nops && rc == 0; i++) {
			rc = c[0] == 'r' ? pt_edit_remove(ck, e->ops[i], err)
					 : pt_edit_mkdir(ck, e->ops[i], err);
			pt_buf_printf(log, "%s %s\n", c, e->ops[i]);
		}
	} else if (strcmp(c, "mv") == 0) {
		rc = pt_edit_move(ck, e->ops[0], e->ops[1], err);
		pt_buf_printf(log, "mv %s %s\n", e->ops[0], e->ops[1]);
	} else if (strcmp(c, "rename") == 0) {
		rc = pt_edit_rename(ck, e->nops ? e->ops[0] : "",
				    e->sed ? sed_key : e->strip ? strip_prefix : add_prefix,
				    e->sed ? (void *)e :
				    (void *)(uintptr_t)(e->strip ? e->strip : e->prefix),
				    log, err);
	} else if (e->dtype) {          /* add, set --dtype/--shape */
		rc = tensor_in(e, &t, shape, data, err);
		if (rc == 0)
			rc = pt_edit_tensor(ck, e->ops[0], &t, c[0] == 's', err);
		pt_buf_printf(log, "%s %s %s [%s]\n", c, e->ops[0], e->dtype, e->shape);
	} else {                        /* set of a scalar */
		rc = ptfs_read_stdin(data, &len, 1u << 20, NULL);
		if (rc == 0 && len > 1u << 20)
			rc = pt_fail(err, -EFBIG, "a value of more than 1 MiB");
		if (rc == 0)
			rc = pt_edit_scalar(ck, e->ops[0], *data, (size_t)len, err);
		pt_buf_printf(log, "set %s\n", e->ops[0]);
	}
	return rc;
}

/* set --shape or --dtype alone: the other as the tensor has it. */
static int fill_from(struct ecmd *e, struct pt_ckpt *ck, char *shape, size_t cap)
{
	struct pt_node *n = pt_tree_path(ck, e->ops[0], NULL);
	struct pt_tinfo ti;
	size_t at = 0;
	uint32_t i;

	if (!n || !pt_node_tinfo(n, &ti)) {
		fprintf(stderr, "ptfs: %s: %s: not a tensor\n", e->ck, e->ops[0]);
		return -1;
	}
	if (!e->dtype)
		e->dtype = ti.dtype;
	if (!e->shape) {
		for (i = 0; i < ti.rank && at < cap; i++)
			at += (size_t)snprintf(shape + at, cap - at, "%s%" PRId64,
					       i ? "," : "", ti.shape[i]);
		shape[at < cap ? at : cap - 1] = '\0';
		e->shape = shape;
	}
	return 0;
}

static const char *const edit_flags[] = {
	"-n", "--dry-run", "-v", "--verbose", "--dtype=", "--shape=",
	"--strip-prefix=", "--add-prefix=", "--sed=", NULL
};

/* The command line into @e: 0, or PTFS_EXIT_USAGE once said. */
static int parse(struct ecmd *e, int argc, char **argv)
{
	struct ptfs_args a;
	const char *val;
	int k, min = 2, max = 2, nrule;
	bool rename = strcmp(e->cmd, "rename") == 0;
	bool tensor = strcmp(e->cmd, "add") == 0 || strcmp(e->cmd, "set") == 0;

	ptfs_args_init(&a, argc, argv);
	e->ops = calloc((size_t)argc + 1, sizeof(*e->ops));
	if (!e->ops)
		return PTFS_EXIT_ERROR;
	while ((k = ptfs_args_next(&a, edit_flags, &val)) != PTFS_ARG_END) {
		if (k == PTFS_ARG_BAD)
			return PTFS_EXIT_USAGE;
		if (k == PTFS_ARG_POS) {
			if (!e->ck)
				e->ck = val;
			else
				e->ops[e->nops++] = val;
			continue;
		}
		if (k <= 1) {
			e->dry = true;
		} else if (k <= 3) {
			e->verbose = true;
		} else if (k <= 5 ? !tensor : !rename) {
			return ptfs_usage_error(e->cmd, "'%.*s' is not an option of %s",
						(int)strcspn(edit_flags[k], "="),
						edit_flags[k], e->cmd);
		} else {
			const char **to[] = { &e->dtype, &e->shape, &e->strip,
					      &e->prefix, &e->sed };

			*to[k - 4] = val;
		}
	}
	if (strcmp(e->cmd, "rm") == 0 || strcmp(e->cmd, "mkdir") == 0)
		max = argc;
	else if (strcmp(e->cmd, "mv") == 0)
		min = max = 3;
	else if (rename)
		min = 1;
	if (!e->ck || e->nops + 1 < min || e->nops + 1 > max)
		return ptfs_usage_error(e->cmd, e->ck ? "wrong number of paths" : "missing CHECKPOINT");
	if (strcmp(e->cmd, "add") == 0 && (!e->dtype || !e->shape))
		return ptfs_usage_error(e->cmd, "--dtype and --shape are needed");
	if (e->dtype && (!pt_dtype_from_torch(e->dtype) || pt_dtype_from_torch(e->dtype)->packed))
		return ptfs_usage_error(e->cmd, "--dtype '%s': not a torch dtype", e->dtype);
	if (e->shape && parse_shape(e->shape, (int64_t[64]){ 0 }, 64, &(uint32_t){ 0 }))
		return ptfs_usage_error(e->cmd, "--shape '%s': not a shape (4,4 or [4, 4])", e->shape);
	nrule = !!e->strip + !!e->prefix + !!e->sed;
	if (rename && nrule != 1)
		return ptfs_usage_error(e->cmd, "one of --strip-prefix, --add-prefix, --sed");
	return e->sed ? sed_parse(e) : 0;
}

static int run(struct ecmd *e, const struct pt_ckpt_opts *o)
{
	struct pt_ckpt_opts opts = *o;
	struct pt_ckpt *ck = NULL;
	struct pt_error err;
	struct pt_buf log;
	uint8_t *data = NULL;
	uint64_t size = 0;
	char found[4096], shape[1024];
	int rc;

	if (ptfs_is_url(e->ck)) {
		fprintf(stderr, "ptfs: %s: remote checkpoints cannot be edited\n", e->ck);
		return PTFS_EXIT_ERROR;
	}
	/* a commit now would make the kept writes older than their file */
	if (ptfs_pending_note(e->ck, found, sizeof(found)))
		return PTFS_EXIT_ERROR;
	opts.editable = true;
	opts.recover = !e->dry;         /* it writes: it may roll back */
	pt_error_clear(&err);
	if (ptfs_open_checkpoint(e->ck, &opts, &ck, &err) != 0) {
		ptfs_report_open(e->ck, &err);
		return PTFS_EXIT_ERROR;
	}
	if (*pt_ckpt_recovery(ck))
		fprintf(stderr, "ptfs: %s\n", pt_ckpt_recovery(ck));
	pt_buf_init(&log);
	rc = strcmp(e->cmd, "set") == 0 && (!!e->dtype != !!e->shape) ?
	     fill_from(e, ck, shape, sizeof(shape)) : 0;
	if (rc == 0)
		rc = apply(e, ck, &log, &data, &err);
	if (rc == 0 && e->dry)
		rc = pt_edit_size(ck, &size, &err);
	else if (rc == 0)
		rc = pt_edit_commit(ck, &err);
	if (rc < 0 && err.msg[0])
		fprintf(stderr, "ptfs: %s: %s\n", e->ck, err.msg);
	if (rc == 0 && (e->dry || e->verbose) && log.len)
		fwrite(log.p, 1, log.len, e->dry ? stdout : stderr);
	if (rc == 0 && e->dry)
		printf("%s: %" PRIu64 " -> %" PRIu64 " bytes (dry run: nothing written)\n",
		       e->ck, pt_ckpt_source(ck)->size, size);
	else if (rc == 0 && e->verbose)
		fprintf(stderr, "ptfs: %s: committed (%s)\n", e->ck, pt_ckpt_last_commit(ck));
	pt_buf_free(&log);
	pt_ckpt_close(ck);
	free(data);
	return rc == 0 ? PTFS_EXIT_OK : PTFS_EXIT_ERROR;
}

int ptfs_cmd_edit(int argc, char **argv, const struct pt_ckpt_opts *o,
		  bool verbose)
{
	struct ecmd e = { .cmd = argv[0], .verbose = verbose };
	int rc;

	if (o->nested || o->suffix)
		rc = ptfs_usage_error(e.cmd, "paths name the flat layout: no --nested, no -o suffix");
	else
		rc = parse(&e, argc, argv);
	if (rc == 0)
		rc = run(&e, o);
	if (e.re_ok)
		regfree(&e.re);
	free(e.sed_copy);
	free(e.ops);
	return rc;
}
