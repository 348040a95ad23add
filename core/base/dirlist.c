/* SPDX-License-Identifier: MIT */
/* dirlist.c -- the names of a directory (dirlist.h). */
#include "base/dirlist.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

void pt_dir_list_init(struct pt_dir_list *l)
{
	l->e = NULL;
	l->n = l->cap = 0;
	pt_buf_init(&l->names);
}

int pt_dir_list_add(struct pt_dir_list *l, const char *name, size_t len,
		    bool regular)
{
	if (l->n == PT_MAX_DIR_ENTRIES ||
	    len >= PT_MAX_DIR_BYTES - l->names.len)
		return -EFBIG;
	if (!pt_grow((void **)&l->e, &l->cap, l->n, sizeof(*l->e)))
		return -ENOMEM;
	/* an offset into names until it stops growing (pt_dir_list_end) */
	l->e[l->n].name = (const char *)(uintptr_t)l->names.len;
	l->e[l->n].regular = regular;
	l->n++;
	pt_buf_add(&l->names, name, len);
	pt_buf_putc(&l->names, '\0');
	return 0;
}

int pt_dir_list_end(struct pt_dir_list *l)
{
	size_t i;

	if (l->names.oom)
		return -ENOMEM;
	for (i = 0; i < l->n; i++)
		l->e[i].name = l->names.p + (uintptr_t)l->e[i].name;
	return 0;
}

void pt_dir_list_free(struct pt_dir_list *l)
{
	free(l->e);
	pt_buf_free(&l->names);
	pt_dir_list_init(l);
}
