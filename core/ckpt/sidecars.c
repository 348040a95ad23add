/* SPDX-License-Identifier: MIT */
/*
 * sidecars.c -- the sidecars (NAME.json) a reader walking the tree is
 * likely to read next, for the front end to push into the kernel's cache
 * ahead of it: found over nodes that already exist, without a lock.
 */
#include "ckpt/tree_i.h"

#include <stdint.h>
#include <string.h>

bool pt_node_is_sidecar(const struct pt_node *n)
{
	return n->role == R_JSON;
}

/* Entry index of @n in its directory's table, or SIZE_MAX. */
static size_t index_in_parent(const struct pt_node *n)
{
	const struct dtab *d = __atomic_load_n(&n->parent->u.dir.tab, __ATOMIC_ACQUIRE);
	const struct dent *e;

	if (!d)
		return SIZE_MAX;
	e = pt__tab_find(d, n->name, strlen(n->name));
	return e ? e->idx : SIZE_MAX;
}

/*
 * Depth first from just after @from, over nodes and tables that already
 * exist only: a directory nobody listed or searched is not entered, so
 * nothing is built and no lock is taken (published pointers are read
 * with acquire loads, as in tree.c's child_at()).  Every step is one
 * entry, at most @max_steps of them.  The caller serialises calls:
 * `pushed` is only set here (and cleared by pt_tree_committed()).
 */
size_t pt_tree_next_sidecars(struct pt_node *from, struct pt_node **out,
			     size_t max, size_t max_steps)
{
	struct pt_node *dir = from->parent;
	size_t i, got = 0, steps = 0;

	if (!dir || (i = index_in_parent(from)) == SIZE_MAX)
		return 0;
	for (i++; got < max && steps < max_steps; steps++) {
		const struct dtab *d = __atomic_load_n(&dir->u.dir.tab, __ATOMIC_ACQUIRE);
		struct pt_node **kids = __atomic_load_n(&dir->u.dir.kids, __ATOMIC_ACQUIRE);
		struct pt_node *n;

		if (d && kids && i < d->n) {
			n = __atomic_load_n(&kids[i++], __ATOMIC_ACQUIRE);
			if (!n || __atomic_load_n(&d->ents[i - 1]->hidden, __ATOMIC_ACQUIRE))
				continue;       /* not made, or removed by an edit */
			if (n->role == R_JSON) {
				/* pt_tree_committed() clears it */
				if (!__atomic_exchange_n(&n->pushed, true, __ATOMIC_RELAXED))
					out[got++] = n;
			} else if (n->type == PT_NT_DIR && n->role != R_META &&
				   __atomic_load_n(&n->u.dir.kids, __ATOMIC_ACQUIRE)) {
				dir = n;
				i = 0;
			}
			continue;
		}
		/* the end of @dir: on after it in its parent */
		if (!dir->parent || (i = index_in_parent(dir)) == SIZE_MAX)
			break;
		i++;
		dir = dir->parent;
	}
	return got;
}
