/* SPDX-License-Identifier: MIT */
/*
 * remote_source.h -- a remote object (remote.h) as a core source
 * (io/source.h), for pt_ckpt_open_source().
 */
#ifndef PTFS_CORE_REMOTE_SOURCE_H
#define PTFS_CORE_REMOTE_SOURCE_H

#include "io/source.h"
#include "remote/remote.h"

/* Open @url (remote.h) as a source; its siblings (shards) are remote too. */
int pt_source_open_remote(const char *url, const struct pt_remote_opts *o,
			  struct pt_source **out, struct pt_error *err);

#endif /* PTFS_CORE_REMOTE_SOURCE_H */
