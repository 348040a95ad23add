/* SPDX-License-Identifier: MIT */
/*
 * npytree.c -- `ptfs export --to npy`: a directory tree mirroring the
 * mount, one PATH.npy per tensor and PATH.json beside it (the mount's
 * metadata, plus "npy_dtype" where the data was converted).  The tree is
 * built in a temporary directory beside OUT, synced, and renamed to OUT
 * at the end, so OUT never appears half-written.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/export.h"

/* Create the directories of relative path @rel (not its last part). */
static int mkdirs(struct pt_buf *full, size_t base, struct pt_error *err)
{
	size_t i;

	for (i = base + 1; i < full->len; i++) {
		if (full->p[i] != '/')
			continue;
		full->p[i] = '\0';
		if (mkdir(full->p, 0777) != 0 && errno != EEXIST) {
			int e = errno;
			full->p[i] = '/';
			return pt_fail(err, -e, "%s: %s", full->p, strerror(e));
		}
		full->p[i] = '/';
	}
	return 0;
}

/* The sidecar JSON with "npy_dtype" added when converted. */
void pt__npy_json(struct pt_ckpt *ck, struct pt_node *n,
		  const struct pt_npy *np, struct pt_buf *out)
{
	size_t start = out->len;

	if (pt_node_tensor_json(ck, n, out)) {
		while (out->len > start && (out->p[out->len - 1] == '\n' ||
					    out->p[out->len - 1] == '}'))
			out->len--;
		pt_buf_puts(out, ", ");
	} else {
		pt_buf_puts(out, "{");
	}
	pt_buf_printf(out, "\"npy_descr\": \"%s\"", np->descr);
	if (np->npy_dtype)
		pt_buf_printf(out, ", \"npy_dtype\": \"%s\"", np->npy_dtype);
	pt_buf_puts(out, "}\n");
}

static int write_one(struct pt_ckpt *ck, const struct pt_xitem *it,
		     struct pt_buf *full, size_t base, struct pt_error *err)
{
	struct pt_npy np;
	struct pt_xout o;
	struct pt_buf b;
	int rc;

	if (!pt_npy_plan(&it->ti, &np, err))
		return err->code ? err->code : -ENOTSUP;
	full->len = base;
	pt_buf_putc(full, '/');
	pt_buf_puts(full, it->path);
	pt_buf_puts(full, ".npy");
	if (full->oom)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = mkdirs(full, base, err);
	if (rc)
		return rc;
	pt_buf_init(&b);
	pt_npy_header(&it->ti, &np, &b);
	rc = b.oom ? pt_fail(err, -ENOMEM, "out of memory") : pt_xout_create(&o, full->p, err);
	if (!rc)
		rc = pt_xout_write(&o, b.p, b.len, err);
	if (!rc)
		rc = pt_xout_npy_data(&o, ck, it->node, &it->ti, &np, err);
	if (!rc)
		rc = pt_xout_commit(&o, ck, err);
	pt_xout_abort(&o);
	if (rc)
		goto out;
	b.len = 0;
	pt__npy_json(ck, it->node, &np, &b);
	full->len -= 4;
	pt_buf_puts(full, ".json");
	rc = pt_xout_create(&o, full->p, err);
	if (!rc)
		rc = pt_xout_write(&o, b.p, b.len, err);
	if (!rc)
		rc = pt_xout_commit(&o, ck, err);
	pt_xout_abort(&o);
out:
	pt_buf_free(&b);
	return rc;
}

static int rm_one(const char *p, const struct stat *st, int flag,
		  struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

int pt_export_npy(struct pt_ckpt *ck, const char *outdir,
		  const struct pt_export_opts *opts, struct pt_buf *notes,
		  struct pt_error *err)
{
	struct pt_xlist xl;
	struct pt_buf full;
	struct pt_npy np;
	size_t i, base;
	int rc, fd;
	char *slash;

	rc = pt_export_collect(ck, &xl, notes, err);
	if (rc)
		return rc;
	if (xl.n == 0) {
		pt_export_list_free(&xl);
		return pt_fail(err, -ENODATA, "the tree holds no tensor: nothing to export");
	}
	for (i = 0; i < xl.n && !opts->skip_unsupported; i++)
		if (!pt_npy_plan(&xl.v[i].ti, &np, err)) {
			pt_export_list_free(&xl);
			return err->code;
		}
	pt_buf_init(&full);
	slash = strrchr(outdir, '/');
	if (slash)
		pt_buf_printf(&full, "%.*s/.%s.ptfs-XXXXXX", (int)(slash - outdir),
			      outdir, slash + 1);
	else
		pt_buf_printf(&full, ".%s.ptfs-XXXXXX", outdir);
	if (full.oom || !mkdtemp(full.p)) {
		rc = pt_fail(err, full.oom ? -ENOMEM : -errno, "%s: %s", outdir,
			     strerror(full.oom ? ENOMEM : errno));
		goto out;
	}
	base = full.len;
	for (i = 0; i < xl.n && !rc; i++) {
		if (opts->skip_unsupported && !pt_npy_plan(&xl.v[i].ti, &np, err)) {
			pt_buf_printf(notes, "%s: %s has no .npy form: left out\n",
				      xl.v[i].path, xl.v[i].ti.dtype);
			pt_error_clear(err);
			continue;
		}
		rc = write_one(ck, &xl.v[i], &full, base, err);
	}
	full.len = base;
	full.p[base] = '\0';
	if (!rc && !opts->no_fsync) {
		fd = open(full.p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || syncfs(fd) != 0)
			rc = pt_fail(err, -errno, "%s: %s", outdir, strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	if (!rc)
		rc = pt_ckpt_unchanged(ck, err);
	if (!rc) {      /* mkdtemp made it 0700 */
		mode_t um = umask(0);
		umask(um);
		(void)chmod(full.p, 0777 & ~um);
	}
	if (!rc && rename(full.p, outdir) != 0)
		rc = pt_fail(err, -errno, "%s: %s", outdir,
			     errno == ENOTEMPTY || errno == EEXIST ?
			     "exists and is not empty" : strerror(errno));
	if (rc)
		(void)nftw(full.p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
out:
	pt_buf_free(&full);
	pt_export_list_free(&xl);
	return rc;
}
