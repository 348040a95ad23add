/* SPDX-License-Identifier: MIT */
/*
 * vfiles.c -- /.ptfs/export in a mount: the generated form of every
 * exporter of pt_exporters[] that has one (model.safetensors, npy/...),
 * made the first time the directory is used from one walk of the tree.
 */
#include "export/export.h"

static int fill_export(void *ctx, struct pt_ckpt *ck, struct pt_vdir *d,
		       struct pt_error *err)
{
	const struct pt_exporter *const *x;
	struct pt_xlist xl;
	struct pt_buf notes;
	int rc;

	(void)ctx;
	pt_buf_init(&notes);
	rc = pt_export_collect(ck, &xl, &notes, err);
	pt_buf_free(&notes);
	if (rc)
		return rc;
	for (x = pt_exporters; *x && !rc; x++)
		if ((*x)->mount_files)
			rc = (*x)->mount_files(ck, d, &xl, err);
	pt_export_list_free(&xl);
	return rc;
}

int pt_export_mount_files(struct pt_ckpt *ck)
{
	return pt_tree_set_vdir(ck, "export", fill_export, NULL);
}
