/* SPDX-License-Identifier: MIT */
/* editlog.c -- the structural edits since the last commit (editlog_i.h). */
#include "ckpt/editlog_i.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_i.h"

static void rec_free(struct pt_edit_rec *r)
{
	free(r->path);
	free(r->arg);
	free(r->shape);
}

void pt__edit_log_lost(struct pt_ckpt *ck, const char *what)
{
	if (!ck->edits.log_lost)
		ck->edits.log_lost = what;
}

/* Copy what @r names into itself: 0, or -1 out of memory. */
static int rec_fill(struct pt_edit_rec *r, const char *path, const void *arg,
		    size_t arg_len, const struct pt_edit_tensor *t)
{
	r->path = strdup(path);
	if (!r->path)
		return -1;
	if (t) {
		arg = t->dtype;
		arg_len = strlen(t->dtype);
		r->rank = t->rank;
		r->bytes = t->bytes;
		r->len = t->len;
		r->shape = malloc((t->rank ? t->rank : 1) * sizeof(*r->shape));
		if (!r->shape)
			return -1;
		memcpy(r->shape, t->shape, t->rank * sizeof(*r->shape));
	}
	if (arg) {
		r->arg = malloc(arg_len + 1);
		if (!r->arg)
			return -1;
		memcpy(r->arg, arg, arg_len);
		r->arg[arg_len] = '\0';
		r->arg_len = arg_len;
	}
	return 0;
}

void pt__edit_log(struct pt_ckpt *ck, enum pt_edit_kind kind, const char *path,
		  const void *arg, size_t arg_len, const struct pt_edit_tensor *t)
{
	struct pt_edit_rec *r;

	if (ck->edits.log_lost)
		return;
	if (ck->edits.n_log == ck->edits.cap_log) {
		size_t cap = ck->edits.cap_log ? 2 * ck->edits.cap_log : 16;

		r = realloc(ck->edits.log, cap * sizeof(*r));
		if (!r) {
			pt__edit_log_lost(ck, "out of memory");
			return;
		}
		ck->edits.log = r;
		ck->edits.cap_log = cap;
	}
	r = &ck->edits.log[ck->edits.n_log];
	memset(r, 0, sizeof(*r));
	r->kind = kind;
	if (rec_fill(r, path, arg, arg_len, t) != 0) {
		rec_free(r);
		pt__edit_log_lost(ck, "out of memory");
		return;
	}
	ck->edits.n_log++;
}

void pt__edit_log_clear(struct pt_ckpt *ck)
{
	size_t i;

	for (i = 0; i < ck->edits.n_log; i++)
		rec_free(&ck->edits.log[i]);
	free(ck->edits.log);
	ck->edits.log = NULL;
	ck->edits.n_log = ck->edits.cap_log = 0;
	ck->edits.log_lost = NULL;
}

const struct pt_edit_rec *pt__edit_log_get(const struct pt_ckpt *ck, size_t *n,
					   const char **lost)
{
	*n = ck->edits.n_log;
	*lost = ck->edits.log_lost;
	return ck->edits.log_lost ? NULL : ck->edits.log;
}
