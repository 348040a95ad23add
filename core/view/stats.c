/* SPDX-License-Identifier: MIT */
/*
 * stats.c -- per-tensor statistics (see stats.h).
 *
 * A tensor is read in 1 MiB chunks (never whole), each chunk hashed with
 * OpenSSL's EVP sha256 (SHA-NI when the CPU has it) and decoded in blocks
 * of at most 32768 elements into doubles.  Each block's finite values give
 * a count, a mean and a sum of squared deviations in two passes over data
 * already in cache; blocks are merged with Chan's formula, which keeps
 * mean and std accurate over billions of values without Kahan sums.
 * libcrypto is loaded on the first sha256 (base/dl.h), not at start.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/dl.h"
#include "base/json.h"
#include "view/stats.h"

#include "base/cancel.h"

/* the libcrypto functions used here */
#define EVP_FNS(X) \
	X(EVP_MD_CTX_new) X(EVP_MD_CTX_free) X(EVP_sha256) \
	X(EVP_DigestInit_ex) X(EVP_DigestUpdate) X(EVP_DigestFinal_ex)

PT_DL_DEFINE(evp, EVP_FNS, "libcrypto.so.3",
	     "sha256 needs libcrypto (Debian: libssl3)");

#define EVP_MD_CTX_new evp_fn.EVP_MD_CTX_new
#define EVP_MD_CTX_free evp_fn.EVP_MD_CTX_free
#define EVP_sha256 evp_fn.EVP_sha256
#define EVP_DigestInit_ex evp_fn.EVP_DigestInit_ex
#define EVP_DigestUpdate evp_fn.EVP_DigestUpdate
#define EVP_DigestFinal_ex evp_fn.EVP_DigestFinal_ex

#define CHUNK (1u << 20)
#define BLOCK 32768u

/* Merge a block (count @n, mean @mean, squared deviations @m2). */
static void merge(struct pt_tstats *s, uint64_t n, double mean, double m2)
{
	double na = (double)s->finite, nb = (double)n, d, tot;

	if (n == 0)
		return;
	tot = na + nb;
	d = mean - s->mean;
	s->mean += d * nb / tot;
	s->m2 += m2 + d * d * na * nb / tot;
	s->finite += n;
}

/* Complex: replace (re, im) pairs by |z| in place, NaN when a part is. */
static void magnitudes(double *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		double re = v[2 * i], im = v[2 * i + 1];
		v[i] = isnan(re) || isnan(im) ? NAN : hypot(re, im);
	}
}

static void block_stats(struct pt_tstats *s, const double *v, size_t n)
{
	double lo = s->min, hi = s->max, sum = 0, mean, m2 = 0;
	uint64_t fin = 0, zeros = 0, nan = 0, pinf = 0, ninf = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		double x = v[i];
		if (isnan(x)) {
			nan++;
		} else if (isinf(x)) {
			if (x > 0)
				pinf++;
			else
				ninf++;
		} else {
			fin++;
			sum += x;
			zeros += x == 0;
			lo = x < lo ? x : lo;
			hi = x > hi ? x : hi;
		}
	}
	s->min = lo;
	s->max = hi;
	s->zeros += zeros;
	s->nan += nan;
	s->pinf += pinf;
	s->ninf += ninf;
	s->values += n;
	if (!fin)
		return;
	mean = sum / (double)fin;
	for (i = 0; i < n; i++) {
		double d = v[i] - mean;
		if (isfinite(v[i]))
			m2 += d * d;
	}
	merge(s, fin, mean, m2);
}

static void int64_bounds(struct pt_tstats *s, const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int64_t a = 0;
		uint64_t u = 0;
		if (pt_elem_int64(&s->el, p + 8 * i, &a, &u)) {
			s->umin = u < s->umin ? u : s->umin;
			s->umax = u > s->umax ? u : s->umax;
		} else {
			s->imin = a < s->imin ? a : s->imin;
			s->imax = a > s->imax ? a : s->imax;
		}
	}
}

static void stats_init(struct pt_tstats *s)
{
	s->min = INFINITY;
	s->max = -INFINITY;
	s->imin = INT64_MAX;
	s->imax = INT64_MIN;
	s->umin = UINT64_MAX;
	s->umax = 0;
	s->int64 = s->decoded && (strcmp(s->el.dtype, "int64") == 0 ||
				  strcmp(s->el.dtype, "uint64") == 0);
	s->uns = s->int64 && s->el.dtype[0] == 'u';
}

/* Decode and account one chunk of whole elements. */
static void chunk_stats(struct pt_tstats *s, const uint8_t *p, size_t bytes,
			double *dbl)
{
	size_t n = bytes / s->el.size, i, k;

	for (i = 0; i < n; i += k) {
		k = n - i < BLOCK ? n - i : BLOCK;
		pt_elem_decode(&s->el, p + i * s->el.size, k, dbl);
		if (s->el.kind == PT_EK_COMPLEX) {
			magnitudes(dbl, k);
			block_stats(s, dbl, k);
		} else {
			block_stats(s, dbl, k * s->el.per);
		}
		if (s->int64)
			int64_bounds(s, p + i * s->el.size, k);
	}
}

int pt_tstats_load(struct pt_error *err)
{
	return pt_dl_load(&evp_dl, err);
}

int pt_tensor_stats(struct pt_ckpt *ck, struct pt_node *node,
		    struct pt_tstats *s, struct pt_error *err)
{
	uint8_t *buf = NULL;
	double *dbl = NULL;
	EVP_MD_CTX *md = NULL;
	uint64_t off = 0;
	unsigned hlen = 0;
	int rc = 0;

	memset(s, 0, sizeof(*s));
	if (!pt_node_tinfo(node, &s->ti))
		return pt_fail(err, -EINVAL, "not a tensor");
	s->decoded = pt_elem_init(&s->el, &s->ti) == 0;
	stats_init(s);
	rc = pt_dl_load(&evp_dl, err);
	if (rc)
		return rc;
	buf = malloc(CHUNK);
	dbl = malloc((size_t)BLOCK * 8 * sizeof(double));
	md = EVP_MD_CTX_new();
	if (!buf || !dbl || !md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		rc = pt_fail(err, -ENOMEM, "out of memory");
		goto out;
	}
	while (off < s->ti.nbytes) {
		size_t want = s->ti.nbytes - off < CHUNK ? (size_t)(s->ti.nbytes - off) : CHUNK;
		ssize_t got;

		/* a mount's reader that went away, a daemon that ends */
		if (pt_cancelled()) {
			rc = pt_fail(err, -EINTR, "interrupted");
			goto out;
		}
		got = pt_node_read(ck, node, buf, want, off, err);
		if (got < 0 || (size_t)got != want) {
			rc = got < 0 ? (int)got : pt_fail(err, -EIO, "short read at byte %llu",
							 (unsigned long long)off);
			goto out;
		}
		s->bytes_read += want;
		pt_ckpt_progress(ck, PT_PROGRESS_DONE, want);
		EVP_DigestUpdate(md, buf, want);
		if (s->decoded)
			chunk_stats(s, buf, want, dbl);
		off += want;
	}
	EVP_DigestFinal_ex(md, s->sha256, &hlen);
out:
	EVP_MD_CTX_free(md);
	free(buf);
	free(dbl);
	return rc;
}

/* Standard deviation (population), NaN when there are no finite values. */
static double pt_tstats_std(const struct pt_tstats *s)
{
	return s->finite ? sqrt(s->m2 / (double)s->finite) : NAN;
}

/* Lowercase hex of the sha256 into @hex (65 bytes). */
static void pt_tstats_hex(const struct pt_tstats *s, char hex[65])
{
	int i;

	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", s->sha256[i]);
}

/* A number for JSON (null when not finite) or text; integers exact. */
static void num(struct pt_buf *b, const struct pt_tstats *s, double v,
		bool is_max, bool json)
{
	if (s->int64 && s->finite) {
		if (s->uns)
			pt_buf_printf(b, "%llu", (unsigned long long)(is_max ? s->umax : s->umin));
		else
			pt_buf_printf(b, "%lld", (long long)(is_max ? s->imax : s->imin));
	} else if (!isfinite(v) || !s->finite) {
		pt_buf_puts(b, json ? "null" : "-");
	} else if (s->el.kind != PT_EK_FLOAT && s->el.kind != PT_EK_COMPLEX) {
		pt_buf_printf(b, "%.0f", v);
	} else {
		pt_buf_printf(b, json ? "%.17g" : "%.6g", v);
	}
}

static void fnum(struct pt_buf *b, const struct pt_tstats *s, double v, bool json)
{
	if (!s->finite || !isfinite(v))
		pt_buf_puts(b, json ? "null" : "-");
	else
		pt_buf_printf(b, json ? "%.17g" : "%.6g", v);
}

/* Fixed mode: pad the field begun at @start with spaces to @width bytes
 * (JSON allows them between tokens), so the text's length depends on the
 * tensor's dtype, shape and path only. */
static void pad(struct pt_buf *b, size_t start, size_t width, bool fixed)
{
	while (fixed && b->len - start < width)
		pt_buf_putc(b, ' ');
}

#define NUM_W 24        /* "%.17g" of any double, "null", any int64 */
#define CNT_W 20        /* any uint64 */

static void json_counts(const struct pt_tstats *s, struct pt_buf *out, bool fixed)
{
	const char *names[5] = { "values", "zeros", "nan", "inf", "neg_inf" };
	const uint64_t v[5] = { s->values, s->zeros, s->nan, s->pinf, s->ninf };
	size_t i, at;

	for (i = 0; i < 5; i++) {
		pt_buf_printf(out, ", \"%s\": ", names[i]);
		at = out->len;
		pt_buf_printf(out, "%llu", (unsigned long long)v[i]);
		pad(out, at, CNT_W, fixed);
	}
}

void pt_tstats_json(const struct pt_tstats *s, const char *path, bool fixed,
		    struct pt_buf *out)
{
	char hex[65];
	uint32_t i;
	size_t at;

	pt_tstats_hex(s, hex);
	pt_buf_putc(out, '{');
	if (path) {
		pt_buf_puts(out, "\"path\": \"");
		pt_json_str(out, (const uint8_t *)path, strlen(path));
		pt_buf_puts(out, "\", ");
	}
	pt_buf_printf(out, "\"dtype\": \"%s\", \"shape\": [", s->ti.dtype);
	for (i = 0; i < s->ti.rank; i++)
		pt_buf_printf(out, "%s%lld", i ? ", " : "", (long long)s->ti.shape[i]);
	pt_buf_printf(out, "], \"numel\": %llu", (unsigned long long)s->ti.numel);
	if (s->decoded) {
		pt_buf_printf(out, ", \"over\": \"%s\"",
			      s->el.kind == PT_EK_COMPLEX ? "magnitude" :
			      s->el.quantized ? "stored integers" : "values");
		json_counts(s, out, fixed);
		pt_buf_puts(out, ", \"min\": ");
		at = out->len;
		num(out, s, s->min, false, true);
		pad(out, at, NUM_W, fixed);
		pt_buf_puts(out, ", \"max\": ");
		at = out->len;
		num(out, s, s->max, true, true);
		pad(out, at, NUM_W, fixed);
		pt_buf_puts(out, ", \"mean\": ");
		at = out->len;
		fnum(out, s, s->mean, true);
		pad(out, at, NUM_W, fixed);
		pt_buf_puts(out, ", \"std\": ");
		at = out->len;
		fnum(out, s, pt_tstats_std(s), true);
		pad(out, at, NUM_W, fixed);
	}
	pt_buf_printf(out, ", \"sha256\": \"%s\"}", hex);
}

uint64_t pt_tstats_json_size(const struct pt_tinfo *ti, const char *path)
{
	struct pt_tstats *s = calloc(1, sizeof(*s));
	struct pt_buf b;
	uint64_t n;

	if (!s)
		return 0;
	s->ti = *ti;
	s->decoded = pt_elem_init(&s->el, ti) == 0;
	pt_buf_init(&b);
	pt_tstats_json(s, path, true, &b);
	n = b.oom ? 0 : b.len;
	pt_buf_free(&b);
	free(s);
	return n;
}

void pt_tstats_text(const struct pt_tstats *s, struct pt_buf *out)
{
	char hex[65];

	pt_tstats_hex(s, hex);
	if (s->decoded) {
		pt_buf_puts(out, "min=");
		num(out, s, s->min, false, false);
		pt_buf_puts(out, " max=");
		num(out, s, s->max, true, false);
		pt_buf_puts(out, " mean=");
		fnum(out, s, s->mean, false);
		pt_buf_puts(out, " std=");
		fnum(out, s, pt_tstats_std(s), false);
		pt_buf_printf(out, " zeros=%llu nan=%llu +inf=%llu -inf=%llu ",
			      (unsigned long long)s->zeros, (unsigned long long)s->nan,
			      (unsigned long long)s->pinf, (unsigned long long)s->ninf);
	}
	pt_buf_printf(out, "sha256=%s", hex);
}
