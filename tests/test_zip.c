/* SPDX-License-Identifier: MIT */
/*
 * test_zip.c -- pt_zip: archives built in memory (torch layout, ZIP64,
 * descriptors, deflate, >65535 entries), a corrupt-input table, and every
 * real zip fixture under $PTFS_SHARED/fixtures/real.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "require.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <libdeflate.h>

#include "base/pt_limits.h"
#include "base/rd.h"
#include "io/source.h"
#include "container/zip.h"

/* ---- an in-memory ZIP writer with knobs ------------------------------ */

struct trec {
	const char *name;
	size_t name_len;        /* 0: strlen(name) */
	const void *data;
	size_t len;             /* uncompressed bytes */
	uint16_t method;        /* 0 or 8 */
	bool dd;                /* flag bit 3 + data descriptor */
	bool dd_nosig;          /* descriptor without its signature */
	bool dd_wide;           /* 8-byte sizes in the descriptor */
	bool dd_omit;           /* flag bit 3 but no descriptor written */
	bool z64_sizes;         /* CD sizes = 0xFFFFFFFF + ZIP64 extra */
	bool z64_lho;           /* CD offset = 0xFFFFFFFF + ZIP64 extra */
	uint64_t fake_size;     /* nonzero: sizes the ZIP64 extra claims */
	uint64_t fake_lho;      /* nonzero: offset the ZIP64 extra claims */
};

struct topts {
	bool zip64_end;         /* ZIP64 EOCD + locator before the EOCD */
	unsigned align;         /* FB padding to this alignment; 0: none */
	const char *comment;    /* archive comment */
	const char *trailer;    /* garbage after the EOCD */
};

struct tzip {
	uint8_t *p;
	size_t len;
	size_t cap;
	size_t n;
	uint64_t *lho;          /* per record: local header */
	uint64_t *data_off;     /* per record: payload */
	uint64_t *data_end;     /* per record: payload end */
	uint64_t *cd_ent;       /* per record: its CD entry */
	uint64_t cd_off;
	uint64_t cd_size;
	uint64_t z64_eocd_off;
	uint64_t eocd_off;
};

static void tz_grow(struct tzip *t, size_t n)
{
	if (t->cap - t->len >= n)
		return;
	while (t->cap - t->len < n)
		t->cap = t->cap ? t->cap * 2 : 4096;
	t->p = realloc(t->p, t->cap);
	assert_non_null(t->p);
}

static void tz_put(struct tzip *t, const void *p, size_t n)
{
	tz_grow(t, n);
	if (n)
		memcpy(t->p + t->len, p, n);
	t->len += n;
}

static void tz_u16(struct tzip *t, uint64_t v)
{
	tz_grow(t, 2);
	pt_put16(t->p + t->len, (uint16_t)v);
	t->len += 2;
}

static void tz_u32(struct tzip *t, uint64_t v)
{
	tz_grow(t, 4);
	pt_put32(t->p + t->len, (uint32_t)v);
	t->len += 4;
}

static void tz_u64(struct tzip *t, uint64_t v)
{
	tz_grow(t, 8);
	pt_put64(t->p + t->len, v);
	t->len += 8;
}

static void tz_free(struct tzip *t)
{
	free(t->p);
	free(t->lho);
	free(t->data_off);
	free(t->data_end);
	free(t->cd_ent);
	memset(t, 0, sizeof(*t));
}

static size_t trec_nlen(const struct trec *r)
{
	return r->name_len ? r->name_len : strlen(r->name);
}

static uint16_t trec_flags(const struct trec *r)
{
	return (uint16_t)(0x0800 | (r->dd || r->dd_omit ? 0x0008 : 0));
}

/* Build an archive of @n records; deflated ones are compressed here. */
static void tz_build(struct tzip *t, const struct trec *recs, size_t n,
		     const struct topts *o)
{
	struct libdeflate_compressor *c = libdeflate_alloc_compressor(6);
	uint8_t **cdata = calloc(n ? n : 1, sizeof(*cdata));
	size_t *clen = calloc(n ? n : 1, sizeof(*clen));
	uint32_t *crc = calloc(n ? n : 1, sizeof(*crc));
	size_t i;

	assert_non_null(c);
	assert_non_null(cdata);
	assert_non_null(clen);
	assert_non_null(crc);
	memset(t, 0, sizeof(*t));
	t->n = n;
	t->lho = calloc(n ? n : 1, sizeof(uint64_t));
	t->data_off = calloc(n ? n : 1, sizeof(uint64_t));
	t->data_end = calloc(n ? n : 1, sizeof(uint64_t));
	t->cd_ent = calloc(n ? n : 1, sizeof(uint64_t));
	assert_non_null(t->lho);
	assert_non_null(t->data_off);
	assert_non_null(t->data_end);
	assert_non_null(t->cd_ent);

	for (i = 0; i < n; i++) {
		const struct trec *r = &recs[i];
		size_t nlen = trec_nlen(r);
		size_t pad = 0;
		bool fb = o->align != 0;

		crc[i] = libdeflate_crc32(0, r->data, r->len);
		if (r->method == 8) {
			size_t bound = libdeflate_deflate_compress_bound(c, r->len);

			cdata[i] = malloc(bound ? bound : 1);
			assert_non_null(cdata[i]);
			clen[i] = libdeflate_deflate_compress(c, r->data, r->len,
							      cdata[i], bound);
			assert_true(clen[i] > 0);
		} else {
			clen[i] = r->len;
		}
		t->lho[i] = t->len;
		if (fb) {
			size_t start = t->len + 30 + nlen + 4;

			pad = (o->align - start % o->align) % o->align;
		}
		tz_u32(t, 0x04034b50);
		tz_u16(t, r->method == 8 ? 20 : 0);
		tz_u16(t, trec_flags(r));
		tz_u16(t, r->method);
		tz_u16(t, 0);
		tz_u16(t, 0);
		tz_u32(t, r->dd ? 0 : crc[i]);
		tz_u32(t, r->dd ? 0 : clen[i]);
		tz_u32(t, r->dd ? 0 : r->len);
		tz_u16(t, nlen);
		tz_u16(t, fb ? 4 + pad : 0);
		tz_put(t, r->name, nlen);
		if (fb) {
			tz_u16(t, 0x4246);
			tz_u16(t, pad);
			tz_grow(t, pad);
			memset(t->p + t->len, 'Z', pad);
			t->len += pad;
		}
		t->data_off[i] = t->len;
		tz_put(t, r->method == 8 ? cdata[i] : r->data, clen[i]);
		t->data_end[i] = t->len;
		if (r->dd) {
			if (!r->dd_nosig)
				tz_u32(t, 0x08074b50);
			tz_u32(t, crc[i]);
			if (r->dd_wide) {
				tz_u64(t, clen[i]);
				tz_u64(t, r->len);
			} else {
				tz_u32(t, clen[i]);
				tz_u32(t, r->len);
			}
		}
	}

	t->cd_off = t->len;
	for (i = 0; i < n; i++) {
		const struct trec *r = &recs[i];
		size_t nlen = trec_nlen(r);
		size_t elen = 0;

		if (r->z64_sizes || r->z64_lho)
			elen = 4 + (r->z64_sizes ? 16 : 0) + (r->z64_lho ? 8 : 0);
		t->cd_ent[i] = t->len;
		tz_u32(t, 0x02014b50);
		tz_u16(t, 0x031e);
		tz_u16(t, r->method == 8 ? 20 : 0);
		tz_u16(t, trec_flags(r));
		tz_u16(t, r->method);
		tz_u16(t, 0);
		tz_u16(t, 0);
		tz_u32(t, crc[i]);
		tz_u32(t, r->z64_sizes ? 0xffffffff : clen[i]);
		tz_u32(t, r->z64_sizes ? 0xffffffff : r->len);
		tz_u16(t, nlen);
		tz_u16(t, elen);
		tz_u16(t, 0);
		tz_u16(t, 0);
		tz_u16(t, 0);
		tz_u32(t, 0);
		tz_u32(t, r->z64_lho ? 0xffffffff : t->lho[i]);
		tz_put(t, r->name, nlen);
		if (elen) {
			tz_u16(t, 0x0001);
			tz_u16(t, elen - 4);
			if (r->z64_sizes) {
				tz_u64(t, r->fake_size ? r->fake_size : r->len);
				tz_u64(t, r->fake_size ? r->fake_size : clen[i]);
			}
			if (r->z64_lho)
				tz_u64(t, r->fake_lho ? r->fake_lho : t->lho[i]);
		}
	}
	t->cd_size = t->len - t->cd_off;

	if (o->zip64_end) {
		t->z64_eocd_off = t->len;
		tz_u32(t, 0x06064b50);
		tz_u64(t, 44);
		tz_u16(t, 0x031e);
		tz_u16(t, 45);
		tz_u32(t, 0);
		tz_u32(t, 0);
		tz_u64(t, n);
		tz_u64(t, n);
		tz_u64(t, t->cd_size);
		tz_u64(t, t->cd_off);
		tz_u32(t, 0x07064b50);
		tz_u32(t, 0);
		tz_u64(t, t->z64_eocd_off);
		tz_u32(t, 1);
	}
	t->eocd_off = t->len;
	tz_u32(t, 0x06054b50);
	tz_u16(t, 0);
	tz_u16(t, 0);
	tz_u16(t, n < 0xffff ? n : 0xffff);
	tz_u16(t, n < 0xffff ? n : 0xffff);
	tz_u32(t, t->cd_size < 0xffffffff ? t->cd_size : 0xffffffff);
	tz_u32(t, t->cd_off < 0xffffffff ? t->cd_off : 0xffffffff);
	tz_u16(t, o->comment ? strlen(o->comment) : 0);
	if (o->comment)
		tz_put(t, o->comment, strlen(o->comment));
	if (o->trailer)
		tz_put(t, o->trailer, strlen(o->trailer));

	for (i = 0; i < n; i++)
		free(cdata[i]);
	free(cdata);
	free(clen);
	free(crc);
	libdeflate_free_compressor(c);
}

/* ---- helpers ---------------------------------------------------------- */

struct opened {
	struct pt_source *src;
	struct pt_limits lim;
	struct pt_error err;
	struct pt_zip *z;
	int rc;
};

/* Index @len bytes at @p under the limits in o->lim; on failure the source
 * is closed at once, else by close_opened(). */
static void open_mem_lim(struct opened *o, const void *p, size_t len)
{
	pt_error_clear(&o->err);
	o->z = NULL;
	assert_int_equal(pt_source_mem(p, len, "test.zip", &o->src, &o->err), 0);
	o->rc = pt_zip_open(&o->z, o->src, &o->lim, &o->err);
	if (o->rc) {
		assert_null(o->z);
		pt_source_close(o->src);
		o->src = NULL;
	}
}

static void open_mem(struct opened *o, const void *p, size_t len)
{
	pt_limits_default(&o->lim);
	open_mem_lim(o, p, len);
}

static void close_opened(struct opened *o)
{
	pt_zip_close(o->z);
	pt_source_close(o->src);
	o->z = NULL;
	o->src = NULL;
}

static void open_ok(struct opened *o, const struct tzip *t)
{
	open_mem(o, t->p, t->len);
	if (o->rc)
		print_error("unexpected failure %d: %s\n", o->rc, o->err.msg);
	assert_int_equal(o->rc, 0);
	assert_non_null(o->z);
}

static void expect_fail(const struct opened *o, int code, const char *sub)
{
	if (o->rc != code || !strstr(o->err.msg, sub))
		print_error("got %d '%s', want %d '...%s...'\n", o->rc,
			    o->err.msg, code, sub);
	assert_int_equal(o->rc, code);
	assert_non_null(strstr(o->err.msg, sub));
	assert_null(strchr(o->err.msg, '\n'));
}

static const char pkl_bytes[] = "\x80\x02}q\x00.";
static const char ver_bytes[] = "3\n";
static const uint8_t t0_bytes[24] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
				      13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
				      23, 24 };

static void torch_recs(struct trec r[3], const char *prefix_pkl,
		       const char *prefix_0, const char *prefix_ver)
{
	memset(r, 0, 3 * sizeof(*r));
	r[0].name = prefix_pkl;
	r[0].data = pkl_bytes;
	r[0].len = sizeof(pkl_bytes) - 1;
	r[1].name = prefix_0;
	r[1].data = t0_bytes;
	r[1].len = sizeof(t0_bytes);
	r[2].name = prefix_ver;
	r[2].data = ver_bytes;
	r[2].len = 2;
}

/* ---- tests ------------------------------------------------------------ */

static void test_torch_like(void **state)
{
	struct topts opt = { .zip64_end = true, .align = 64 };
	const struct pt_zip_entry *e;
	const struct pt_zip_info *in;
	struct trec r[3];
	struct tzip t;
	struct opened o;
	uint8_t buf[64];
	uint8_t *rd;
	size_t len;
	size_t i;

	(void)state;
	torch_recs(r, "archive/data.pkl", "archive/data/0", "archive/version");
	for (i = 0; i < 3; i++)
		r[i].dd = true;
	tz_build(&t, r, 3, &opt);
	open_ok(&o, &t);

	in = pt_zip_info(o.z);
	assert_string_equal(in->prefix, "archive");
	assert_true(in->zip64);
	assert_int_equal(in->n_entries, 3);
	assert_int_equal(in->cd_off, t.cd_off);
	assert_int_equal(in->cd_size, t.cd_size);
	assert_int_equal(in->eocd_off, t.eocd_off);
	assert_ptr_equal(pt_zip_source(o.z), o.src);

	for (i = 0; i < 3; i++) {
		e = pt_zip_entry_at(o.z, i);
		assert_non_null(e);
		assert_string_equal(e->name, r[i].name);
		assert_int_equal(e->name_len, strlen(r[i].name));
		assert_int_equal(e->index, i);
		assert_int_equal(e->method, PT_ZIP_STORED);
		assert_int_equal(e->flags, 0x0808);
		assert_int_equal(e->lho, t.lho[i]);
		assert_int_equal(e->data_off, t.data_off[i]);
		assert_int_equal(e->data_off % 64, 0);
		assert_int_equal(e->data_end, t.data_off[i] + r[i].len);
		assert_int_equal(e->usize, r[i].len);
		assert_int_equal(e->csize, r[i].len);
		assert_true(e->has_descriptor);
		assert_false(e->zip64);
		assert_int_equal(e->end, e->data_end + 16);
		assert_int_equal(e->crc32, libdeflate_crc32(0, r[i].data, r[i].len));
		assert_int_equal(e->lh_extra_len, e->data_off - e->lho - 30 - e->name_len);
		assert_ptr_equal(pt_zip_find(o.z, r[i].name), e);
	}
	assert_null(pt_zip_entry_at(o.z, 3));
	assert_ptr_equal(pt_zip_find_rel(o.z, "data.pkl"), pt_zip_entry_at(o.z, 0));
	assert_ptr_equal(pt_zip_find_rel(o.z, "data/0"), pt_zip_entry_at(o.z, 1));
	assert_null(pt_zip_find_rel(o.z, "data/1"));
	assert_null(pt_zip_find(o.z, "data.pkl"));
	assert_null(pt_zip_find(o.z, "archive/data.pk"));
	assert_null(pt_zip_find(o.z, ""));

	e = pt_zip_find_rel(o.z, "version");
	assert_int_equal(pt_zip_read(o.z, e, &rd, &len, &o.err), 0);
	assert_int_equal(len, 2);
	assert_string_equal((char *)rd, "3\n");
	free(rd);

	e = pt_zip_find_rel(o.z, "data/0");
	assert_int_equal(pt_zip_pread(o.z, e, buf, 10, 20, &o.err), 4);
	assert_memory_equal(buf, t0_bytes + 20, 4);
	assert_int_equal(pt_zip_pread(o.z, e, buf, 5, 3, &o.err), 5);
	assert_memory_equal(buf, t0_bytes + 3, 5);
	assert_int_equal(pt_zip_pread(o.z, e, buf, 5, 24, &o.err), 0);
	assert_int_equal(pt_zip_pread(o.z, e, buf, 5, UINT64_MAX, &o.err), 0);
	{
		const uint8_t *inf;

		assert_int_equal(pt_zip_inflated(o.z, e, &inf, &o.err), -EINVAL);
		assert_null(inf);
	}
	close_opened(&o);
	tz_free(&t);
}

struct prefix_case {
	const char *names[4];
	const char *prefix;
	const char *rel_pkl;    /* entry pt_zip_find_rel("data.pkl") gives */
};

static void test_prefix_rules(void **state)
{
	static const struct prefix_case cases[] = {
		{ { "archive/data.pkl", "archive/version" }, "archive",
		  "archive/data.pkl" },
		{ { "consolidated.00/data.pkl", "consolidated.00/data/0" },
		  "consolidated.00", "consolidated.00/data.pkl" },
		{ { "archive/version", "archive/data.pkl" }, "archive",
		  "archive/data.pkl" },
		{ { "data.pkl", "version" }, "", "data.pkl" },
		{ { "model/constants.pkl", "model/code/m.py" }, "model", NULL },
		{ { "model.json", "tensors/0" }, "", NULL },
		{ { "zzz/extra.txt", "foo/data.pkl", "foo/version" }, "foo",
		  "foo/data.pkl" },
		{ { "a/b/data.pkl", "a/b/version" }, "a/b", "a/b/data.pkl" },
		{ { "x/data.pkl", "data.pkl" }, "x", "x/data.pkl" },
		{ { "zzz/extra.txt", "foo/data.pkl", "data.pkl" }, "",
		  "data.pkl" },
		{ { "x/y/data.pkl", "z/data.pkl" }, "z", "z/data.pkl" },
		{ { "x/y/data.pkl", "x/data.pkl" }, "x", "x/data.pkl" },
		{ { "/data.pkl", "q/r" }, "", NULL },
	};
	size_t k;

	(void)state;
	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const struct prefix_case *c = &cases[k];
		struct topts opt = { 0 };
		struct trec r[4];
		struct tzip t;
		struct opened o;
		const struct pt_zip_entry *e;
		size_t n = 0;

		memset(r, 0, sizeof(r));
		while (n < 4 && c->names[n]) {
			r[n].name = c->names[n];
			r[n].data = "x";
			r[n].len = 1;
			n++;
		}
		tz_build(&t, r, n, &opt);
		open_ok(&o, &t);
		if (strcmp(pt_zip_info(o.z)->prefix, c->prefix) != 0)
			print_error("case %zu: prefix '%s', want '%s'\n", k,
				    pt_zip_info(o.z)->prefix, c->prefix);
		assert_string_equal(pt_zip_info(o.z)->prefix, c->prefix);
		e = pt_zip_find_rel(o.z, "data.pkl");
		if (c->rel_pkl) {
			assert_non_null(e);
			assert_string_equal(e->name, c->rel_pkl);
		} else {
			assert_null(e);
		}
		close_opened(&o);
		tz_free(&t);
	}
}

static void test_empty_archive(void **state)
{
	struct topts opt = { .comment = "hello" };
	struct tzip t;
	struct opened o;

	(void)state;
	tz_build(&t, NULL, 0, &opt);
	open_ok(&o, &t);
	assert_int_equal(pt_zip_info(o.z)->n_entries, 0);
	assert_string_equal(pt_zip_info(o.z)->prefix, "");
	assert_null(pt_zip_entry_at(o.z, 0));
	assert_null(pt_zip_find_rel(o.z, "data.pkl"));
	close_opened(&o);
	tz_free(&t);
	pt_zip_close(NULL);
}

/* ZIP64 extra fields: sentinels in the CD resolved from the extra, and
 * wide (24-byte) descriptors. */
static void test_zip64_extra(void **state)
{
	struct topts opt = { .zip64_end = true, .align = 64,
			     .comment = "PK\x05\x06 a fake record inside the comment" };
	const struct pt_zip_entry *e;
	struct trec r[3];
	struct tzip t;
	struct opened o;
	size_t i;

	(void)state;
	torch_recs(r, "m/data.pkl", "m/data/0", "m/version");
	r[0].z64_sizes = true;
	r[1].z64_lho = true;
	r[2].z64_sizes = true;
	r[2].z64_lho = true;
	for (i = 0; i < 3; i++) {
		r[i].dd = true;
		r[i].dd_wide = true;
	}
	tz_build(&t, r, 3, &opt);
	open_ok(&o, &t);
	assert_string_equal(pt_zip_info(o.z)->prefix, "m");
	for (i = 0; i < 3; i++) {
		e = pt_zip_entry_at(o.z, i);
		assert_true(e->zip64);
		assert_int_equal(e->usize, r[i].len);
		assert_int_equal(e->csize, r[i].len);
		assert_int_equal(e->lho, t.lho[i]);
		assert_int_equal(e->data_off, t.data_off[i]);
		assert_true(e->has_descriptor);
		assert_int_equal(e->end, e->data_end + 24);
	}
	close_opened(&o);
	tz_free(&t);

	/* Wide descriptor on a non-ZIP64 entry, narrow on a ZIP64 one, and
	 * descriptors without signatures: all found by their sizes. */
	torch_recs(r, "m/data.pkl", "m/data/0", "m/version");
	for (i = 0; i < 3; i++)
		r[i].dd = true;
	r[0].dd_wide = true;
	r[1].z64_sizes = true;
	r[2].dd_nosig = true;
	tz_build(&t, r, 3, &opt);
	open_ok(&o, &t);
	assert_int_equal(pt_zip_entry_at(o.z, 0)->end, t.data_end[0] + 24);
	assert_int_equal(pt_zip_entry_at(o.z, 1)->end, t.data_end[1] + 16);
	assert_int_equal(pt_zip_entry_at(o.z, 2)->end, t.data_end[2] + 12);
	close_opened(&o);
	tz_free(&t);

	/* Bit 3 set but no descriptor: lenient, end = data_end. */
	torch_recs(r, "m/data.pkl", "m/data/0", "m/version");
	for (i = 0; i < 3; i++)
		r[i].dd_omit = true;
	tz_build(&t, r, 3, &opt);
	open_ok(&o, &t);
	for (i = 0; i < 3; i++) {
		e = pt_zip_entry_at(o.z, i);
		assert_false(e->has_descriptor);
		assert_int_equal(e->end, e->data_end);
	}
	close_opened(&o);
	tz_free(&t);
}

/* Huge values are representable only through ZIP64 extras; faked in the
 * CD of a small file, they must fail the bounds checks. */
static void test_zip64_extra_large(void **state)
{
	struct topts opt = { .zip64_end = true };
	struct trec r[3];
	struct tzip t;
	struct opened o;

	(void)state;
	torch_recs(r, "m/data.pkl", "m/data/0", "m/version");
	r[1].z64_lho = true;
	r[1].fake_lho = 0x140000000ull;
	tz_build(&t, r, 3, &opt);
	open_mem(&o, t.p, t.len);
	expect_fail(&o, -EBADMSG,
		    "zip: entry 'm/data/0': local header at 0x140000000 beyond end of file");
	tz_free(&t);

	torch_recs(r, "m/data.pkl", "m/data/0", "m/version");
	r[1].z64_sizes = true;
	r[1].fake_size = 0x100000000ull;
	tz_build(&t, r, 3, &opt);
	open_mem(&o, t.p, t.len);
	expect_fail(&o, -EBADMSG,
		    "zip: entry 'm/data/0': data at 0x");
	expect_fail(&o, -EBADMSG, "(4294967296 bytes) beyond end of file");
	tz_free(&t);

	torch_recs(r, "m/data.pkl", "m/data/0", "m/version");
	r[2].z64_sizes = true;
	r[2].z64_lho = true;
	r[2].fake_lho = UINT64_MAX;
	tz_build(&t, r, 3, &opt);
	open_mem(&o, t.p, t.len);
	expect_fail(&o, -EBADMSG, "local header at 0xffffffffffffffff beyond end of file");
	tz_free(&t);

	torch_recs(r, "m/data.pkl", "m/data/0", "m/version");
	r[0].z64_sizes = true;
	r[0].fake_size = UINT64_MAX - 10;
	tz_build(&t, r, 3, &opt);
	open_mem(&o, t.p, t.len);
	expect_fail(&o, -EBADMSG, "beyond end of file");
	tz_free(&t);
}

static void test_many_entries(void **state)
{
	const size_t n = 70000;
	struct topts opt = { .zip64_end = true };
	struct trec *r = calloc(n, sizeof(*r));
	char *names = malloc(n * 32);
	const struct pt_zip_entry *e;
	struct tzip t;
	struct opened o;
	size_t i;

	(void)state;
	assert_non_null(r);
	assert_non_null(names);
	for (i = 0; i < n; i++) {
		snprintf(names + i * 32, 32, "archive/data/%zu", i);
		r[i].name = names + i * 32;
		r[i].data = &t0_bytes[i % 24];
		r[i].len = 1;
	}
	r[0].name = "archive/data.pkl";
	tz_build(&t, r, n, &opt);
	assert_int_equal(pt_le16(t.p + t.eocd_off + 10), 0xffff);
	open_ok(&o, &t);
	assert_int_equal(pt_zip_info(o.z)->n_entries, n);
	assert_string_equal(pt_zip_info(o.z)->prefix, "archive");
	e = pt_zip_find_rel(o.z, "data/69999");
	assert_non_null(e);
	assert_int_equal(e->index, 69999);
	assert_int_equal(e->data_off, t.data_off[69999]);
	close_opened(&o);

	/* The same archive under a smaller record cap. */
	pt_limits_default(&o.lim);
	o.lim.max_records = 65536;
	open_mem_lim(&o, t.p, t.len);
	expect_fail(&o, -EFBIG, "70000 entries exceed the limit of 65536");
	assert_null(o.z);

	tz_free(&t);
	free(names);
	free(r);
}

static void test_deflate(void **state)
{
	struct topts opt = { .zip64_end = true, .align = 64 };
	const size_t big = 100000;
	uint8_t *data = malloc(big);
	const struct pt_zip_entry *e;
	const uint8_t *inf1;
	const uint8_t *inf2;
	struct trec r[3];
	struct tzip t;
	struct opened o;
	uint8_t buf[300];
	uint8_t *rd;
	size_t len;
	size_t i;

	(void)state;
	assert_non_null(data);
	for (i = 0; i < big; i++)
		data[i] = (uint8_t)((i * 7) ^ (i >> 9));
	torch_recs(r, "archive/data.pkl", "archive/data/0", "archive/version");
	r[0].method = 8;
	r[0].dd = true;
	r[1].data = data;
	r[1].len = big;
	r[1].method = 8;
	r[2].method = 8;
	tz_build(&t, r, 3, &opt);
	open_ok(&o, &t);

	e = pt_zip_find_rel(o.z, "data/0");
	assert_int_equal(e->method, PT_ZIP_DEFLATED);
	assert_true(e->csize < big);
	assert_int_equal(e->usize, big);
	assert_int_equal(pt_zip_read(o.z, e, &rd, &len, &o.err), 0);
	assert_int_equal(len, big);
	assert_memory_equal(rd, data, big);
	assert_int_equal(rd[big], 0);
	free(rd);
	assert_int_equal(pt_zip_pread(o.z, e, buf, sizeof(buf), 5000, &o.err),
			 (long long)sizeof(buf));
	assert_memory_equal(buf, data + 5000, sizeof(buf));
	assert_int_equal(pt_zip_pread(o.z, e, buf, sizeof(buf), big - 7, &o.err), 7);
	assert_memory_equal(buf, data + big - 7, 7);
	assert_int_equal(pt_zip_pread(o.z, e, buf, sizeof(buf), big, &o.err), 0);
	assert_int_equal(pt_zip_inflated(o.z, e, &inf1, &o.err), 0);
	assert_int_equal(pt_zip_inflated(o.z, e, &inf2, &o.err), 0);
	assert_ptr_equal(inf1, inf2);

	e = pt_zip_find_rel(o.z, "data.pkl");
	assert_true(e->has_descriptor);
	assert_int_equal(pt_zip_read(o.z, e, &rd, &len, &o.err), 0);
	assert_int_equal(len, sizeof(pkl_bytes) - 1);
	assert_memory_equal(rd, pkl_bytes, len);
	free(rd);
	e = pt_zip_find_rel(o.z, "version");
	assert_int_equal(pt_zip_pread(o.z, e, buf, 1, 1, &o.err), 1);
	assert_int_equal(buf[0], '\n');
	close_opened(&o);

	/* A cap below the record's size. */
	pt_limits_default(&o.lim);
	o.lim.max_inflate_bytes = 1000;
	open_mem_lim(&o, t.p, t.len);
	assert_int_equal(o.rc, 0);
	e = pt_zip_find_rel(o.z, "data/0");
	assert_int_equal(pt_zip_read(o.z, e, &rd, &len, &o.err), -EFBIG);
	assert_null(rd);
	assert_non_null(strstr(o.err.msg, "exceeds the limit of 1000"));
	pt_error_clear(&o.err);
	assert_int_equal(pt_zip_pread(o.z, e, buf, 1, 0, &o.err), -EFBIG);
	/* An entry of another archive is refused. */
	{
		struct opened o2;
		const struct pt_zip_entry *e2;

		open_ok(&o2, &t);
		e2 = pt_zip_find_rel(o2.z, "data/0");
		pt_error_clear(&o.err);
		assert_int_equal(pt_zip_read(o.z, e2, &rd, &len, &o.err), -EINVAL);
		close_opened(&o2);
	}
	close_opened(&o);

	/* usize one more or one less than the stream holds. */
	for (i = 0; i < 2; i++) {
		uint64_t cde = t.cd_ent[1];
		uint32_t us = pt_le32(t.p + cde + 24);

		pt_put32(t.p + cde + 24, i == 0 ? us + 1 : us - 1);
		open_ok(&o, &t);
		e = pt_zip_find_rel(o.z, "data/0");
		assert_int_equal(pt_zip_read(o.z, e, &rd, &len, &o.err), -EBADMSG);
		assert_non_null(strstr(o.err.msg, i == 0 ? "inflates to 100000 bytes, expected 100001" :
						       "inflates to more than 99999 bytes"));
		close_opened(&o);
		pt_put32(t.p + cde + 24, us);
	}

	/* A corrupt stream: an invalid block type (BTYPE 11). */
	t.p[t.data_off[1]] = 0x07;
	open_ok(&o, &t);
	e = pt_zip_find_rel(o.z, "data/0");
	assert_int_equal(pt_zip_read(o.z, e, &rd, &len, &o.err), -EBADMSG);
	assert_non_null(strstr(o.err.msg, "corrupt deflate stream"));
	close_opened(&o);

	tz_free(&t);
	free(data);
}

struct race {
	struct pt_zip *z;
	const struct pt_zip_entry *e;
	const uint8_t *got;
	int rc;
};

static void *race_main(void *arg)
{
	struct race *ra = arg;
	struct pt_error err;

	pt_error_clear(&err);
	ra->rc = pt_zip_inflated(ra->z, ra->e, &ra->got, &err);
	return NULL;
}

static void test_inflate_threads(void **state)
{
	struct topts opt = { 0 };
	const size_t big = 1 << 20;
	uint8_t *data = malloc(big);
	struct race ra[8];
	pthread_t th[8];
	struct trec r[1];
	struct tzip t;
	struct opened o;
	size_t i;

	(void)state;
	assert_non_null(data);
	for (i = 0; i < big; i++)
		data[i] = (uint8_t)(i % 251);
	memset(r, 0, sizeof(r));
	r[0].name = "archive/data/0";
	r[0].data = data;
	r[0].len = big;
	r[0].method = 8;
	tz_build(&t, r, 1, &opt);
	open_ok(&o, &t);
	for (i = 0; i < 8; i++) {
		ra[i].z = o.z;
		ra[i].e = pt_zip_entry_at(o.z, 0);
		assert_int_equal(pthread_create(&th[i], NULL, race_main, &ra[i]), 0);
	}
	for (i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(ra[i].rc, 0);
		assert_ptr_equal(ra[i].got, ra[0].got);
	}
	assert_memory_equal(ra[0].got, data, big);
	close_opened(&o);
	tz_free(&t);
	free(data);
}

/* ---- corrupt inputs --------------------------------------------------- */

/* Mutations of the base archive (three stored records, no descriptors,
 * FB padding, classic EOCD unless the row asks for ZIP64). */
typedef void (*mutate_fn)(struct tzip *t);

static void m_truncate_tiny(struct tzip *t)
{
	t->len = 10;
}

static void m_truncate_one(struct tzip *t)
{
	t->len -= 1;
}

static void m_trailing_garbage(struct tzip *t)
{
	tz_put(t, "junk", 4);
}

static void m_no_eocd(struct tzip *t)
{
	t->p[t->eocd_off] = 'X';
}

static void m_cd_off_past_end(struct tzip *t)
{
	pt_put32(t->p + t->eocd_off + 16, (uint32_t)t->len + 100);
}

static void m_cd_size_past_end(struct tzip *t)
{
	pt_put32(t->p + t->eocd_off + 12, 0x7fffffff);
}

static void m_cd_overlaps_end(struct tzip *t)
{
	pt_put32(t->p + t->eocd_off + 12, (uint32_t)t->cd_size + 4);
}

static void m_count_too_large(struct tzip *t)
{
	pt_put16(t->p + t->eocd_off + 8, 200);
	pt_put16(t->p + t->eocd_off + 10, 200);
}

static void m_cd_size_short(struct tzip *t)
{
	pt_put32(t->p + t->eocd_off + 12, (uint32_t)t->cd_size - 15);
}

static void m_multi_disk(struct tzip *t)
{
	pt_put16(t->p + t->eocd_off + 4, 1);
}

static void m_cd_signature(struct tzip *t)
{
	t->p[t->cd_ent[1] + 2] = 9;
}

static void m_name_past_end(struct tzip *t)
{
	pt_put16(t->p + t->cd_ent[2] + 28, 0xffff);
}

static void m_extra_past_end(struct tzip *t)
{
	pt_put16(t->p + t->cd_ent[2] + 30, 100);
}

static void m_local_signature(struct tzip *t)
{
	t->p[t->lho[1] + 3] = 0;
}

static void m_local_name(struct tzip *t)
{
	/* "archive/data/0" -> "archive/data/9" in the local header */
	t->p[t->lho[1] + 30 + 13] = '9';
}

static void m_local_name_len(struct tzip *t)
{
	pt_put16(t->p + t->lho[1] + 26, 13);
}

static void m_local_method(struct tzip *t)
{
	pt_put16(t->p + t->lho[1] + 8, 8);
}

static void m_lho_past_end(struct tzip *t)
{
	pt_put32(t->p + t->cd_ent[1] + 42, (uint32_t)t->len + 5);
}

static void m_lho_in_cd(struct tzip *t)
{
	pt_put32(t->p + t->cd_ent[1] + 42, (uint32_t)t->cd_off + 4);
}

static void m_payload_past_cd(struct tzip *t)
{
	uint64_t c = t->cd_ent[2];

	pt_put32(t->p + c + 20, pt_le32(t->p + c + 20) + 100);
	pt_put32(t->p + c + 24, pt_le32(t->p + c + 24) + 100);
}

static void m_payload_past_eof(struct tzip *t)
{
	uint64_t c = t->cd_ent[2];

	pt_put32(t->p + c + 20, 0x7ffffff0);
	pt_put32(t->p + c + 24, 0x7ffffff0);
}

static void m_overlap(struct tzip *t)
{
	uint64_t c = t->cd_ent[0];

	pt_put32(t->p + c + 20, pt_le32(t->p + c + 20) + 80);
	pt_put32(t->p + c + 24, pt_le32(t->p + c + 24) + 80);
}

static void m_same_lho(struct tzip *t)
{
	/* entry 2 points at entry 1's header and takes its name */
	pt_put32(t->p + t->cd_ent[2] + 42, (uint32_t)t->lho[1]);
}

/* Rows that need a different archive rebuild it with other names. */
static void rebuild3(struct tzip *t, const char *n0, const char *n1,
		     const char *n2)
{
	struct topts opt = { .align = 64 };
	struct trec r[3];

	tz_free(t);
	torch_recs(r, n0, n1, n2);
	tz_build(t, r, 3, &opt);
}

static void m_duplicate(struct tzip *t)
{
	rebuild3(t, "archive/data.pkl", "archive/data/0", "archive/data.pkl");
}

static void m_encrypted(struct tzip *t)
{
	t->p[t->cd_ent[1] + 8] |= 1;
}

static void m_method(struct tzip *t)
{
	pt_put16(t->p + t->cd_ent[1] + 10, 12);
	pt_put16(t->p + t->lho[1] + 8, 12);
}

static void m_stored_size_mismatch(struct tzip *t)
{
	uint64_t c = t->cd_ent[1];

	pt_put32(t->p + c + 20, pt_le32(t->p + c + 20) - 1);
}

static void m_sentinel_no_zip64(struct tzip *t)
{
	pt_put32(t->p + t->eocd_off + 16, 0xffffffff);
}

static void m_count_sentinel_no_zip64(struct tzip *t)
{
	pt_put16(t->p + t->eocd_off + 10, 0xffff);
}

static void m_entry_sentinel_no_extra(struct tzip *t)
{
	pt_put32(t->p + t->cd_ent[1] + 20, 0xffffffff);
}

static void m_nul_in_name(struct tzip *t)
{
	t->p[t->cd_ent[1] + 46 + 8] = 0;
	t->p[t->lho[1] + 30 + 8] = 0;
}

static void m_empty_name(struct tzip *t)
{
	rebuild3(t, "archive/data.pkl", "", "archive/version");
}

static void m_z64_eocd_sig(struct tzip *t)
{
	t->p[t->z64_eocd_off] = 'Q';
}

static void m_z64_locator_off(struct tzip *t)
{
	pt_put64(t->p + t->eocd_off - 20 + 8, t->len);
}

static void m_z64_record_size(struct tzip *t)
{
	pt_put64(t->p + t->z64_eocd_off + 4, 1000);
}

static void m_z64_cd_off(struct tzip *t)
{
	pt_put64(t->p + t->z64_eocd_off + 48, 1ull << 40);
}

static void m_z64_count(struct tzip *t)
{
	pt_put64(t->p + t->z64_eocd_off + 32, 1ull << 40);
}

struct bad_row {
	const char *what;
	bool zip64;
	mutate_fn mut;
	int code;
	const char *msg;
};

static const struct bad_row bad_rows[] = {
	{ "truncated to 10 bytes", false, m_truncate_tiny, -EBADMSG,
	  "zip: file too short for an end of central directory record (10 bytes)" },
	{ "truncated by one byte", false, m_truncate_one, -EBADMSG,
	  "zip: no end of central directory record" },
	{ "trailing garbage", false, m_trailing_garbage, -EBADMSG,
	  "zip: no end of central directory record" },
	{ "no EOCD", false, m_no_eocd, -EBADMSG,
	  "zip: no end of central directory record" },
	{ "CD offset past end", false, m_cd_off_past_end, -EBADMSG,
	  "beyond end of file" },
	{ "CD size past end", false, m_cd_size_past_end, -EBADMSG,
	  "(2147483647 bytes) beyond end of file" },
	{ "CD overlaps the EOCD", false, m_cd_overlaps_end, -EBADMSG,
	  "overlaps the end records" },
	{ "entry count too large", false, m_count_too_large, -EBADMSG,
	  "zip: entry count 200 too large for a central directory" },
	{ "CD size short", false, m_cd_size_short, -EBADMSG,
	  "central directory entry 2 at 0x" },
	{ "CD size short (text)", false, m_cd_size_short, -EBADMSG,
	  "name of 15 bytes past end of central directory" },
	{ "multi-disk", false, m_multi_disk, -ENOTSUP,
	  "multi-disk archives are not supported" },
	{ "CD signature", false, m_cd_signature, -EBADMSG,
	  "central directory entry 1 at 0x" },
	{ "name past end", false, m_name_past_end, -EBADMSG,
	  "name of 65535 bytes past end of central directory" },
	{ "extra past end", false, m_extra_past_end, -EBADMSG,
	  "extra field of 100 bytes past end of central directory" },
	{ "local header signature", false, m_local_signature, -EBADMSG,
	  "zip: entry 'archive/data/0': no local header at 0x" },
	{ "local name != CD name", false, m_local_name, -EBADMSG,
	  "zip: entry 'archive/data/0': name in the local header at 0x" },
	{ "local name != CD name (text)", false, m_local_name, -EBADMSG,
	  "('archive/data/9', 14 bytes) does not match the central directory" },
	{ "local name length", false, m_local_name_len, -EBADMSG,
	  "('archive/data/', 13 bytes) does not match the central directory" },
	{ "local method", false, m_local_method, -EBADMSG,
	  "says method 8, the central directory 0" },
	{ "local header past end", false, m_lho_past_end, -EBADMSG,
	  "zip: entry 'archive/data/0': local header at 0x" },
	{ "local header past end (text)", false, m_lho_past_end, -EBADMSG,
	  "beyond end of file" },
	{ "local header in the CD", false, m_lho_in_cd, -EBADMSG,
	  "overlaps the central directory" },
	{ "payload past CD", false, m_payload_past_cd, -EBADMSG,
	  "zip: entry 'archive/version': data at 0x" },
	{ "payload past CD (text)", false, m_payload_past_cd, -EBADMSG,
	  "runs into the central directory" },
	{ "payload past EOF", false, m_payload_past_eof, -EBADMSG,
	  "(2147483632 bytes) beyond end of file" },
	{ "overlapping records", false, m_overlap, -EBADMSG,
	  "zip: entry 'archive/data.pkl': record at 0x0-0x" },
	{ "overlapping records (text)", false, m_overlap, -EBADMSG,
	  "overlaps entry 'archive/data/0' at 0x" },
	{ "two entries, one local header", false, m_same_lho, -EBADMSG,
	  "does not match the central directory" },
	{ "duplicate names", false, m_duplicate, -EBADMSG,
	  "zip: entry 'archive/data.pkl': duplicate name (central directory entries 0 and 2)" },
	{ "encrypted flag", false, m_encrypted, -ENOTSUP,
	  "zip: entry 'archive/data/0': encrypted entries are not supported" },
	{ "unknown method", false, m_method, -ENOTSUP,
	  "zip: entry 'archive/data/0': compression method 12 is not supported" },
	{ "stored size mismatch", false, m_stored_size_mismatch, -EBADMSG,
	  "stored, but compressed size 23 != uncompressed size 24" },
	{ "sentinel without ZIP64", false, m_sentinel_no_zip64, -EBADMSG,
	  "holds ZIP64 sentinels but there is no ZIP64 locator" },
	{ "count sentinel without ZIP64", false, m_count_sentinel_no_zip64,
	  -EBADMSG, "holds ZIP64 sentinels but there is no ZIP64 locator" },
	{ "entry sentinel without extra", false, m_entry_sentinel_no_extra,
	  -EBADMSG, "zip: entry 'archive/data/0': size or offset 0xffffffff but no ZIP64 extra field" },
	{ "NUL in name", false, m_nul_in_name, -EBADMSG,
	  "zip: entry 'archive/\\x00ata/0': name contains a NUL byte" },
	{ "empty name", false, m_empty_name, -EBADMSG, "empty name" },
	{ "ZIP64 EOCD signature", true, m_z64_eocd_sig, -EBADMSG,
	  "zip: no ZIP64 end of central directory record at 0x" },
	{ "ZIP64 locator offset", true, m_z64_locator_off, -EBADMSG,
	  "is not before the locator" },
	{ "ZIP64 record size", true, m_z64_record_size, -EBADMSG,
	  "bad record size 1000" },
	{ "ZIP64 CD offset", true, m_z64_cd_off, -EBADMSG,
	  "zip: central directory at 0x10000000000" },
	{ "ZIP64 entry count", true, m_z64_count, -EBADMSG,
	  "zip: entry count 1099511627776 too large" },
};

static void test_corrupt_table(void **state)
{
	size_t k;

	(void)state;
	for (k = 0; k < sizeof(bad_rows) / sizeof(bad_rows[0]); k++) {
		const struct bad_row *row = &bad_rows[k];
		struct topts opt = { .zip64_end = row->zip64, .align = 64 };
		struct trec r[3];
		struct tzip t;
		struct opened o;

		torch_recs(r, "archive/data.pkl", "archive/data/0",
			   "archive/version");
		tz_build(&t, r, 3, &opt);
		/* the unmutated base must open */
		open_ok(&o, &t);
		close_opened(&o);
		row->mut(&t);
		open_mem(&o, t.p, t.len);
		if (o.rc != row->code || !strstr(o.err.msg, row->msg))
			print_error("row '%s'\n", row->what);
		expect_fail(&o, row->code, row->msg);
		tz_free(&t);
	}
}

/* ---- real fixtures ---------------------------------------------------- */

static char *shared_dir(void)
{
	const char *env = getenv("PTFS_SHARED");
	const char *file = __FILE__;
	const char *slash = strrchr(file, '/');
	char *s;
	size_t n;

	if (env && env[0])
		return strdup(env);
	/* <source>/tests/test_zip.c -> <source>/../shared */
	n = slash ? (size_t)(slash - file) : 0;
	s = malloc(n + 32);
	assert_non_null(s);
	if (n)
		snprintf(s, n + 32, "%.*s/../../shared", (int)n, file);
	else
		snprintf(s, n + 32, "../../shared");
	return s;
}

/* PTFS_TEST_VERBOSE=1 lists every fixture with its prefix. */
static bool verbose(void)
{
	const char *v = getenv("PTFS_TEST_VERBOSE");

	return v && v[0] && strcmp(v, "0") != 0;
}

/* Open @path; on success read every entry.  Returns the open rc. */
static int open_file(const char *path, struct pt_error *err, bool verbose)
{
	struct pt_limits lim;
	struct pt_source *src = NULL;
	struct pt_zip *z = NULL;
	uint64_t i;
	int rc;

	pt_limits_default(&lim);
	pt_error_clear(err);
	rc = pt_source_open_file(path, &src, err);
	if (rc)
		goto out;
	rc = pt_zip_open(&z, src, &lim, err);
	if (rc)
		goto out;
	for (i = 0; i < pt_zip_info(z)->n_entries; i++) {
		const struct pt_zip_entry *e = pt_zip_entry_at(z, i);
		struct pt_error rerr;
		uint8_t *b = NULL;
		size_t len = 0;
		uint8_t tailb[16];
		long long got;
		int r;

		assert_non_null(e);
		assert_ptr_equal(pt_zip_find(z, e->name), e);
		assert_true(e->data_off <= e->data_end);
		assert_true(e->end <= pt_zip_info(z)->cd_off);
		pt_error_clear(&rerr);
		if (e->usize > (64u << 20))
			continue;
		r = pt_zip_read(z, e, &b, &len, &rerr);
		if (r) {
			if (verbose)
				print_message("  %s: read '%s': %s\n", path,
					      e->name, rerr.msg);
			continue;
		}
		assert_int_equal(len, e->usize);
		if (libdeflate_crc32(0, b, len) != e->crc32 && verbose)
			print_message("  %s: '%s' CRC mismatch (informational)\n",
				      path, e->name);
		if (len > 0) {
			size_t m = len < sizeof(tailb) ? len : sizeof(tailb);

			got = pt_zip_pread(z, e, tailb, sizeof(tailb),
					   len - m, &rerr);
			assert_int_equal(got, (long long)m);
			assert_memory_equal(tailb, b + len - m, m);
		}
		free(b);
	}
	if (verbose)
		print_message("  ok %s (prefix '%s', %llu entries)\n", path,
			      pt_zip_info(z)->prefix,
			      (unsigned long long)pt_zip_info(z)->n_entries);
out:
	pt_zip_close(z);
	pt_source_close(src);
	return rc;
}

static void test_real_fixtures(void **state)
{
	char *shared = shared_dir();
	char path[4096];
	char line[8192];
	FILE *f;
	unsigned n = 0;
	unsigned bad = 0;

	(void)state;
	snprintf(path, sizeof(path), "%s/fixtures/real/PROVENANCE.tsv", shared);
	f = fopen(path, "r");
	if (!f) {
		free(shared);
		PTFS_SKIP("PTFS_REQUIRE_FIXTURES", "no fixture corpus (%s)", path);
	}
	while (fgets(line, sizeof(line), f)) {
		char *cols[9] = { 0 };
		char *p = line;
		struct pt_error err;
		int c;
		int rc;

		for (c = 0; c < 9 && p; c++) {
			cols[c] = p;
			p = strchr(p, '\t');
			if (p)
				*p++ = '\0';
		}
		if (!cols[7] || strcmp(cols[0], "local_name") == 0)
			continue;
		if (strcmp(cols[7], "zip") != 0 &&
		    strcmp(cols[7], "torchscript-zip") != 0 &&
		    strcmp(cols[7], "pt2") != 0)
			continue;
		if (strstr(cols[0], "/malicious/"))
			continue;
		if (snprintf(path, sizeof(path), "%s/fixtures/real/%s", shared,
			     cols[0]) >= (int)sizeof(path))
			continue;
		rc = open_file(path, &err, verbose());
		n++;
		if (rc) {
			print_error("FAIL %s: %d %s\n", cols[0], rc, err.msg);
			bad++;
		}
	}
	fclose(f);
	print_message("real zip fixtures: %u opened, %u failed\n", n - bad, bad);
	free(shared);
	assert_true(n > 100);
	assert_int_equal(bad, 0);
}

static void test_malicious_fixtures(void **state)
{
	char *shared = shared_dir();
	char root[4096];
	char dir[4400];
	char path[8192];
	struct dirent *d;
	DIR *top;
	unsigned ok = 0;
	unsigned failed = 0;

	(void)state;
	snprintf(root, sizeof(root), "%s/fixtures/real", shared);
	top = opendir(root);
	if (!top) {
		free(shared);
		PTFS_SKIP("PTFS_REQUIRE_FIXTURES", "no fixture corpus (%s)", root);
	}
	while ((d = readdir(top))) {
		struct dirent *m;
		DIR *md;

		if (d->d_name[0] == '.')
			continue;
		snprintf(dir, sizeof(dir), "%s/%s/malicious", root, d->d_name);
		md = opendir(dir);
		if (!md)
			continue;
		while ((m = readdir(md))) {
			struct pt_error err;
			char magic[4] = { 0 };
			FILE *f;
			size_t got;

			if (m->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, m->d_name);
			f = fopen(path, "rb");
			if (!f)
				continue;
			got = fread(magic, 1, 4, f);
			fclose(f);
			if (got < 2 || magic[0] != 'P' || magic[1] != 'K')
				continue;
			if (open_file(path, &err, verbose()) == 0) {
				ok++;
			} else {
				failed++;
				assert_true(err.code < 0);
				assert_true(err.msg[0] != '\0');
				assert_null(strchr(err.msg, '\n'));
				print_message("  rejected %s/%s: %s\n", d->d_name,
					      m->d_name, err.msg);
			}
		}
		closedir(md);
	}
	closedir(top);
	print_message("malicious zips: %u opened, %u rejected cleanly\n", ok,
		      failed);
	free(shared);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_torch_like),
		cmocka_unit_test(test_prefix_rules),
		cmocka_unit_test(test_empty_archive),
		cmocka_unit_test(test_zip64_extra),
		cmocka_unit_test(test_zip64_extra_large),
		cmocka_unit_test(test_many_entries),
		cmocka_unit_test(test_deflate),
		cmocka_unit_test(test_inflate_threads),
		cmocka_unit_test(test_corrupt_table),
		cmocka_unit_test(test_real_fixtures),
		cmocka_unit_test(test_malicious_fixtures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
