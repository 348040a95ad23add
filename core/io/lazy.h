/* SPDX-License-Identifier: MIT */
/*
 * lazy.h -- a sibling source opened on first use.
 *
 * A format that names files beside its own (ONNX external data) and reads
 * a remote object should cost no request for a file until one of its bytes
 * is read (source.h: costly_reads).  pt_source_lazy_sibling() gives a
 * source whose size the caller sets (the bytes it will read at most) and
 * that opens pt_source_open_sibling(@parent, @rel) on the first read
 * (hints wait for it); a
 * failure then (missing, shorter than the size set) is remembered and
 * every read returns it.  Thread-safe like every source.
 */
#ifndef PTFS_CORE_LAZY_H
#define PTFS_CORE_LAZY_H

#include "io/source.h"

/* A source for @rel beside @parent (borrowed: it must outlive the new
 * source), named "@rel (beside PARENT'S NAME)", of size 0 until the
 * caller raises out->size.  0 or -ENOMEM. */
int pt_source_lazy_sibling(const struct pt_source *parent, const char *rel,
			   struct pt_source **out, struct pt_error *err);

#endif /* PTFS_CORE_LAZY_H */
