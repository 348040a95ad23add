/* SPDX-License-Identifier: MIT */
/*
 * npytree.c -- `ptfs export --to npy`: a directory tree mirroring the
 * mount, one PATH.npy per tensor and PATH.json beside it (the mount's
 * metadata, plus "npy_dtype" where the data was converted).  The tree is
 * built in a temporary directory beside OUT, synced, and renamed to OUT
 * at the end, so OUT never appears half-written.  Also the same files as
 * generated files of the mount, /.ptfs/export/npy/ (its last section).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
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

/* ---- the generated form: /.ptfs/export/npy/PATH.npy and PATH.json ----
 * What `ptfs export --to npy` writes, for every tensor that has an .npy
 * form.  Sizes are exact before any read; a read is served from the
 * header in memory and the tensor's bytes (converted where the dtype asks
 * for it), and an unconverted range is offered as an extent (zero copy). */

struct npy_vf {
	struct pt_ckpt *ck;
	struct pt_node *node;
	struct pt_tinfo ti;
	struct pt_npy np;
	uint8_t *head;
	size_t hlen;
};

/* PATH.json of an .npy: the sidecar's text, which states where the
 * tensor lies in the checkpoint, so a commit that moves records has it
 * made again (text_remake) while reads go on. */
struct text_vf {
	pthread_mutex_t mu;             /* guards p and len */
	char *p;
	size_t len;
	struct pt_ckpt *ck;
	struct pt_node *node;
	struct pt_npy np;
};

static int npy_read(void *ctx, void *buf, size_t n, uint64_t off,
		    struct pt_error *err)
{
	const struct npy_vf *v = ctx;
	const unsigned os = v->np.out_size, is = v->np.in_size;
	uint8_t *p = buf, *in, *out;
	uint64_t rel, e0, e1;
	int rc = 0;

	if (off < v->hlen) {
		size_t k = v->hlen - off < n ? (size_t)(v->hlen - off) : n;
		memcpy(p, v->head + off, k);
		p += k;
		n -= k;
		off += k;
	}
	if (n == 0)
		return 0;
	rel = off - v->hlen;
	if (!v->np.conv)
		return pt__view_read_swapped(v->ck, v->node, &v->ti, p, n, rel, false, err);
	/* converted: whole elements around the range, in rounds */
	while (n > 0 && !rc) {
		e0 = rel / os;
		e1 = (rel + n + os - 1) / os;
		if (e1 - e0 > 65536)
			e1 = e0 + 65536;
		in = malloc((size_t)(e1 - e0) * is);
		out = malloc((size_t)(e1 - e0) * os);
		if (!in || !out) {
			rc = -ENOMEM;
		} else {
			rc = pt_view_read(v->ck, v->node, &v->ti, in,
					  (size_t)(e1 - e0) * is, e0 * is, err);
			if (!rc) {
				size_t skip = (size_t)(rel - e0 * os);
				size_t k = (size_t)((e1 - e0) * os) - skip;

				if (k > n)
					k = n;
				pt_npy_convert(&v->np, in, out, (size_t)(e1 - e0));
				memcpy(p, out + skip, k);
				p += k;
				n -= k;
				rel += k;
			}
		}
		free(in);
		free(out);
	}
	return rc;
}

static bool npy_extent(void *ctx, uint64_t off, uint64_t n, int *fd,
		       uint64_t *file_off)
{
	const struct npy_vf *v = ctx;

	if (v->np.conv || off < v->hlen)
		return false;
	return pt_node_extent(v->ck, v->node, off - v->hlen, n, fd, file_off);
}

static void npy_free(void *ctx)
{
	struct npy_vf *v = ctx;

	free(v->head);
	free(v);
}

static int text_read(void *ctx, void *buf, size_t n, uint64_t off,
		     struct pt_error *err)
{
	struct text_vf *v = ctx;
	size_t k;

	(void)err;
	pthread_mutex_lock(&v->mu);
	/* a read sized before a remake may ask for more than there is */
	k = off < v->len ? (size_t)(v->len - off) : 0;
	k = k < n ? k : n;
	memcpy(buf, v->p + off, k);
	memset((char *)buf + k, 0, n - k);
	pthread_mutex_unlock(&v->mu);
	return 0;
}

static char *text_make(struct text_vf *v, size_t *len)
{
	struct pt_buf b;

	pt_buf_init(&b);
	pt__npy_json(v->ck, v->node, &v->np, &b);
	if (b.oom) {
		pt_buf_free(&b);
		return NULL;
	}
	return pt_buf_take(&b, len);
}

static uint64_t text_remake(void *ctx)
{
	struct text_vf *v = ctx;
	size_t len;
	char *p = text_make(v, &len);

	pthread_mutex_lock(&v->mu);
	if (p) {                        /* out of memory: the old text */
		free(v->p);
		v->p = p;
		v->len = len;
	}
	len = v->len;
	pthread_mutex_unlock(&v->mu);
	return len;
}

static void text_free(void *ctx)
{
	struct text_vf *v = ctx;

	pthread_mutex_destroy(&v->mu);
	free(v->p);
	free(v);
}

static int add_npy_one(struct pt_ckpt *ck, struct pt_vdir *d,
		       const struct pt_xitem *it, struct pt_buf *name)
{
	struct pt_error e2;
	struct pt_vfile vf;
	struct npy_vf *v;
	struct text_vf *t;
	struct pt_buf b;
	size_t base;
	int rc;

	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	pt_error_clear(&e2);
	if (!pt_npy_plan(&it->ti, &v->np, &e2)) {
		free(v);
		return 0;               /* no .npy form */
	}
	v->ck = ck;
	v->node = it->node;
	v->ti = it->ti;
	pt_buf_init(&b);
	pt_npy_header(&it->ti, &v->np, &b);
	v->hlen = b.len;
	v->head = (uint8_t *)pt_buf_take(&b, NULL);
	if (!v->head) {
		free(v);
		return -ENOMEM;
	}
	name->len = 0;
	pt_buf_printf(name, "npy/%s", it->path);
	base = name->len;
	pt_buf_puts(name, ".npy");
	vf = (struct pt_vfile){ v->hlen + v->np.data_bytes, npy_read, npy_extent,
				npy_free, v, NULL };
	rc = name->oom ? -ENOMEM : pt_vdir_add(d, name->p, &vf);
	if (rc) {
		npy_free(v);
		return rc == -EEXIST ? 0 : rc;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->mu, NULL);
	t->ck = ck;
	t->node = it->node;
	t->np = v->np;
	t->p = text_make(t, &t->len);
	vf = (struct pt_vfile){ t->len, text_read, NULL, text_free, t,
				text_remake };
	name->len = base;
	pt_buf_puts(name, ".json");
	rc = !t->p || name->oom ? -ENOMEM : pt_vdir_add(d, name->p, &vf);
	if (rc)
		text_free(t);
	return rc == -EEXIST ? 0 : rc;
}

int pt__npy_mount_files(struct pt_ckpt *ck, struct pt_vdir *d,
			const struct pt_xlist *xl, struct pt_error *err)
{
	struct pt_buf name;
	size_t i;
	int rc = 0;

	(void)err;
	pt_buf_init(&name);
	for (i = 0; i < xl->n && !rc; i++)
		rc = add_npy_one(ck, d, &xl->v[i], &name);
	pt_buf_free(&name);
	return rc;
}
