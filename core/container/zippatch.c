/* SPDX-License-Identifier: MIT */
/*
 * zippatch.c -- plan same-size changes of stored ZIP records as patches of
 * the data bytes and the CRC-32 fields (zippatch.h).
 */
#include "container/zippatch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "container/crc.h"
#include "base/rd.h"
#include "io/fd.h"

#define ZP_CHUNK (1u << 20)
#define ZP_SIG_CD 0x02014b50u
#define ZP_SIG_DESC 0x08074b50u
#define ZP_MAX_CD (1ull << 30)

/* What a data patch reads through: the change, shifted to the range. */
struct zp_sub {
	const struct pt_zp_change *c;
	uint64_t base;
};

struct zp_priv {
	struct zp_sub *subs;
	uint8_t (*fields)[4];
};

static int sub_read(void *ctx, void *buf, size_t n, uint64_t at)
{
	const struct zp_sub *s = ctx;

	return s->c->read(s->c->ctx, buf, n, s->base + at);
}

/* Offsets of the central directory entries (by CD index) of @z. */
static int cd_offsets(const struct pt_zip *z, int fd, uint64_t *offs,
		      struct pt_error *err)
{
	const struct pt_zip_info *info = pt_zip_info(z);
	uint8_t *cd;
	uint64_t pos = 0;
	uint64_t i;
	int rc;

	if (info->cd_size > ZP_MAX_CD)
		return 1;
	cd = malloc(info->cd_size ? (size_t)info->cd_size : 1);
	if (!cd)
		return pt_fail(err, -ENOMEM, "out of memory");
	rc = pt_pread_full(fd, cd, (size_t)info->cd_size, info->cd_off);
	for (i = 0; rc == 0 && i < info->n_entries; i++) {
		const struct pt_zip_entry *e = pt_zip_entry_at(z, i);

		if (info->cd_size - pos < 46 || pt_le32(cd + pos) != ZP_SIG_CD ||
		    pt_le16(cd + pos + 28) != e->name_len ||
		    pt_le32(cd + pos + 16) != e->crc32) {
			rc = 1;         /* not what we indexed: rewrite */
			break;
		}
		offs[i] = info->cd_off + pos;
		pos += 46u + pt_le16(cd + pos + 28) + pt_le16(cd + pos + 30) +
		       pt_le16(cd + pos + 32);
	}
	free(cd);
	if (rc < 0)
		return pt_fail(err, rc, "read the central directory: %s",
			       strerror(-rc));
	return rc;
}

/* The new CRC of change @c from its ranges' old and new bytes. */
static int new_crc(const struct pt_zp_change *c, int fd, uint8_t *old,
		   uint8_t *nw, uint32_t *crc, struct pt_error *err)
{
	const struct pt_zip_entry *e = c->entry;
	uint64_t whole[1][2] = { { 0, e->usize } };
	const uint64_t (*r)[2] = c->ranges ? c->ranges : (const uint64_t (*)[2])whole;
	size_t nr = c->ranges ? c->n_ranges : 1;
	size_t i;
	int rc;

	*crc = e->crc32;
	for (i = 0; i < nr; i++) {
		uint64_t at;

		for (at = r[i][0]; at < r[i][0] + r[i][1];) {
			uint64_t left = r[i][0] + r[i][1] - at;
			size_t k = left < ZP_CHUNK ? (size_t)left : ZP_CHUNK;

			rc = pt_pread_full(fd, old, k, e->data_off + at);
			if (rc)
				return pt_fail(err, rc, "read '%s': %s", e->name,
					       strerror(-rc));
			rc = c->read(c->ctx, nw, k, at);
			if (rc)
				return pt_fail(err, rc, "new contents of '%s': %s",
					       e->name, strerror(-rc));
			*crc = pt_crc32_patch(*crc, e->usize, at, old, nw, k);
			at += k;
		}
	}
	return 0;
}

/* Where the CRC fields of @e are: local header (when it carries the CRC),
 * central directory, data descriptor.  1 when the descriptor's CRC is not
 * where it should be (the caller rewrites instead). */
static int crc_fields(const struct pt_zip_entry *e, int fd, uint64_t cd,
		      uint64_t *out, size_t *n)
{
	uint8_t b[4];
	int rc;

	*n = 0;
	rc = pt_pread_full(fd, b, 4, e->lho + 14);
	if (rc)
		return rc;
	if (pt_le32(b) == e->crc32 || !(e->flags & 0x0008))
		out[(*n)++] = e->lho + 14;
	if (e->has_descriptor) {
		uint8_t d[8];

		/* the signature is optional: find the CRC that is the
		 * record's; anything else is not patched blindly (rewrite) */
		rc = pt_pread_full(fd, d, 8, e->data_end);
		if (rc)
			return rc;
		if (pt_le32(d) == ZP_SIG_DESC && pt_le32(d + 4) == e->crc32)
			out[(*n)++] = e->data_end + 4;
		else if (pt_le32(d) == e->crc32)
			out[(*n)++] = e->data_end;
		else
			return 1;
	}
	out[(*n)++] = cd + 16;
	return 0;
}

static int patch_cmp(const void *a, const void *b)
{
	const struct pt_patch *x = a;
	const struct pt_patch *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* Check the changes can be patches; count the patches. */
static int zp_count(const struct pt_zp_change *c, size_t n, size_t *np)
{
	size_t i;

	*np = 0;
	for (i = 0; i < n; i++) {
		const struct pt_zip_entry *e = c[i].entry;

		if (e->method != PT_ZIP_STORED || e->csize != e->usize ||
		    c[i].size != e->usize || (c[i].ranges && c[i].n_ranges > (1u << 24)))
			return 1;
		*np += (c[i].ranges ? c[i].n_ranges : 1) + 3;
	}
	return 0;
}

int pt_zip_plan(const struct pt_zip *z, int fd, const struct pt_zp_change *c,
		size_t n, struct pt_zp_plan *plan, struct pt_error *err)
{
	uint64_t count = pt_zip_info(z)->n_entries;
	struct zp_priv *pv = calloc(1, sizeof(*pv));
	uint64_t *cd = NULL;
	uint8_t *old = NULL;
	uint8_t *nw = NULL;
	size_t np;
	size_t i;
	size_t j;
	int rc;

	memset(plan, 0, sizeof(*plan));
	if (!pv)
		return pt_fail(err, -ENOMEM, "out of memory");
	plan->priv = pv;
	rc = zp_count(c, n, &np);
	if (rc)
		goto fail;
	cd = calloc(count ? (size_t)count : 1, sizeof(*cd));
	plan->p = calloc(np ? np : 1, sizeof(*plan->p));
	plan->crcs = calloc(n ? n : 1, sizeof(*plan->crcs));
	pv->subs = calloc(np ? np : 1, sizeof(*pv->subs));
	pv->fields = calloc(n ? n : 1, sizeof(*pv->fields));
	old = malloc(ZP_CHUNK);
	nw = malloc(ZP_CHUNK);
	if (!cd || !plan->p || !plan->crcs || !pv->subs || !pv->fields || !old || !nw) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto fail;
	}
	rc = cd_offsets(z, fd, cd, err);
	if (rc)
		goto fail;
	for (i = 0; rc == 0 && i < n; i++) {
		const struct pt_zip_entry *e = c[i].entry;
		size_t nr = c[i].ranges ? c[i].n_ranges : 1;
		uint64_t f[3];
		size_t nf;

		rc = crc_fields(e, fd, cd[e->index], f, &nf);
		if (rc < 0)
			rc = pt_fail(err, rc, "read the headers of '%s': %s", e->name,
				     strerror(-rc));
		if (!rc)
			rc = new_crc(&c[i], fd, old, nw, &plan->crcs[i], err);
		if (rc)
			break;
		pt_put32(pv->fields[i], plan->crcs[i]);
		for (j = 0; j < nr; j++) {
			struct pt_patch *p = &plan->p[plan->n];
			struct zp_sub *s = &pv->subs[plan->n++];

			s->c = &c[i];
			s->base = c[i].ranges ? c[i].ranges[j][0] : 0;
			p->off = e->data_off + s->base;
			p->len = c[i].ranges ? c[i].ranges[j][1] : e->usize;
			p->read = sub_read;
			p->ctx = s;
			plan->bytes += p->len;
		}
		for (j = 0; j < nf; j++) {
			struct pt_patch *p = &plan->p[plan->n++];

			p->off = f[j];
			p->len = 4;
			p->data = pv->fields[i];
			plan->bytes += 4;
		}
	}
	if (rc)
		goto fail;
	qsort(plan->p, plan->n, sizeof(*plan->p), patch_cmp);
	free(cd);
	free(old);
	free(nw);
	return 0;
fail:
	free(cd);
	free(old);
	free(nw);
	pt_zip_plan_free(plan);
	return rc;
}

void pt_zip_plan_free(struct pt_zp_plan *plan)
{
	struct zp_priv *pv = plan->priv;

	if (pv) {
		free(pv->subs);
		free(pv->fields);
		free(pv);
	}
	free(plan->p);
	free(plan->crcs);
	memset(plan, 0, sizeof(*plan));
}
