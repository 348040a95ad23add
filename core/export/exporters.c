/* SPDX-License-Identifier: MIT */
/*
 * exporters.c -- the table of `ptfs export` targets (struct pt_exporter):
 * one entry per target, in the order the usage names them.  A new target
 * is its own file (its writer and, if it has one, its generated form)
 * and one entry here; docs/ARCHITECTURE.md, "How to add an exporter".
 */
#include <stdio.h>
#include <string.h>

#include "export/export.h"

static const struct pt_exporter safetensors = {
	.name = "safetensors",
	.ext = ".safetensors",
	.summary = "one safetensors file, or a directory of shards with --shard-size",
	.accepts = PT_XOPT_SHARD_SIZE | PT_XOPT_SKIP_UNSUPPORTED,
	.write = pt_export_safetensors,
	.mount_files = pt__st_mount_files,
};

static const struct pt_exporter pt = {
	.name = "pt",
	.ext = ".pt",
	.summary = "a torch.save ZIP that torch.load(weights_only=True) accepts",
	/* it holds every dtype: --skip-unsupported leaves nothing out */
	.accepts = PT_XOPT_SKIP_UNSUPPORTED,
	.write = pt_export_pt,
	.mount_files = NULL,
};

static const struct pt_exporter npy = {
	.name = "npy",
	.ext = ".npy",
	.summary = "a directory of PATH.npy files with PATH.json, one per tensor",
	.accepts = PT_XOPT_SKIP_UNSUPPORTED,
	.write = pt_export_npy,
	.mount_files = pt__npy_mount_files,
};

const struct pt_exporter *const pt_exporters[] = {
	&safetensors,
	&pt,
	&npy,
	NULL,
};

const struct pt_exporter *pt_exporter_find(const char *name)
{
	const struct pt_exporter *const *x;

	for (x = pt_exporters; *x; x++)
		if (strcmp((*x)->name, name) == 0)
			return *x;
	return NULL;
}

void pt_exporter_names(unsigned xopts, const char *sep, const char *last,
		       char *out, size_t cap)
{
	const struct pt_exporter *const *x;
	size_t n = 0, len = 0, i = 0;

	for (x = pt_exporters; *x; x++)
		n += ((*x)->accepts & xopts) == xopts;
	if (cap)
		out[0] = '\0';
	for (x = pt_exporters; *x && len < cap; x++) {
		if (((*x)->accepts & xopts) != xopts)
			continue;
		len += (size_t)snprintf(out + len, cap - len, "%s%s",
					i == 0 ? "" : i + 1 == n ? last : sep,
					(*x)->name);
		i++;
	}
}
