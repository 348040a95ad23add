/* SPDX-License-Identifier: MIT */
/*
 * test_fmt.c -- every format of core/fmt/ on corrupt input: a table per
 * format of byte fixtures built here (truncated headers, lengths past the
 * end, bad magic, overflowing offsets, missing records), each opened with
 * pt_ckpt_open_mem() -- or, for the formats that are directories, from
 * files in a temporary directory -- and checked for the exact negative
 * errno and a message naming the problem.  Each table starts with the
 * intact fixture, which must open, so a broken builder cannot make the
 * failures pass.
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

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libdeflate.h>

#include "base/rd.h"
#include "ckpt/ckpt.h"

/* ---- bytes -------------------------------------------------------------- */

struct tb {
	uint8_t *p;
	size_t len, cap;
};

static void tb_put(struct tb *b, const void *p, size_t n)
{
	if (b->cap - b->len < n) {
		while (b->cap - b->len < n)
			b->cap = b->cap ? 2 * b->cap : 256;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void tb_str(struct tb *b, const char *s)
{
	tb_put(b, s, strlen(s));
}

static void tb_u8(struct tb *b, unsigned v)
{
	uint8_t c = (uint8_t)v;

	tb_put(b, &c, 1);
}

static void tb_le(struct tb *b, uint64_t v, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		tb_u8(b, (unsigned)(v >> (8 * i)) & 0xff);
}

static void tb_set_le(struct tb *b, size_t at, uint64_t v, unsigned n)
{
	unsigned i;

	assert_true(at + n <= b->len);
	for (i = 0; i < n; i++)
		b->p[at + i] = (uint8_t)(v >> (8 * i));
}

static void tb_free(struct tb *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* ---- pickles ---------------------------------------------------------- */

static void pk_text(struct tb *b, const char *s)      /* BINUNICODE */
{
	tb_u8(b, 'X');
	tb_le(b, strlen(s), 4);
	tb_str(b, s);
}

static void pk_global(struct tb *b, const char *mod, const char *name)
{
	tb_u8(b, 'c');
	tb_str(b, mod);
	tb_u8(b, '\n');
	tb_str(b, name);
	tb_u8(b, '\n');
}

static void pk_int(struct tb *b, uint32_t v)
{
	if (v < 256) {
		tb_u8(b, 'K');
		tb_u8(b, v);
	} else if (v < 65536) {
		tb_u8(b, 'M');
		tb_le(b, v, 2);
	} else {
		tb_u8(b, 'J');
		tb_le(b, v, 4);
	}
}

/*
 * {"a": torch._utils._rebuild_tensor_v2(PID, @offset, (@size,), (1,),
 * False, OrderedDict())}, PID = ('storage', torch.@type, @key, 'cpu',
 * @numel[, None]) -- six items in the legacy format -- as protocol 2.
 */
static void pk_tensor_dict(struct tb *b, const char *type, const char *key,
			   uint32_t numel, uint32_t offset, uint32_t size,
			   bool legacy)
{
	tb_str(b, "\x80\x02}");
	pk_text(b, "a");
	pk_global(b, "torch._utils", "_rebuild_tensor_v2");
	tb_str(b, "((");
	pk_text(b, "storage");
	pk_global(b, "torch", type);
	pk_text(b, key);
	pk_text(b, "cpu");
	pk_int(b, numel);
	if (legacy)
		tb_u8(b, 'N');
	tb_str(b, "tQ");                        /* TUPLE, BINPERSID */
	pk_int(b, offset);
	pk_int(b, size);
	tb_u8(b, 0x85);                         /* TUPLE1 */
	pk_int(b, 1);
	tb_u8(b, 0x85);
	tb_u8(b, 0x89);                         /* NEWFALSE */
	pk_global(b, "collections", "OrderedDict");
	tb_str(b, ")RtRs.");
}

/* ---- opening, and what a failure must be ------------------------------ */

/* A row of a table: the fixture's knobs (per format), what must happen. */
struct want {
	int rc;                 /* 0: opens */
	const char *msg;        /* in the message when rc != 0 */
};

static const uint8_t floats4[16] = { 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40,
				     0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40 };

/* An intact fixture holds one tensor "a": float32 [1, 2, 3, 4] -- or,
 * with g_no_a, nothing at all. */
static bool g_no_a;

static void check_a(const char *what, struct pt_ckpt *ck)
{
	struct pt_node *a;
	struct pt_error err;
	uint8_t got[32];
	ssize_t n;
	int rc = 0;

	a = pt_tree_path(ck, "a", &rc);
	if (g_no_a) {
		if (a)
			fail_msg("%s: a tensor 'a' in an empty checkpoint", what);
		return;
	}
	if (!a)
		fail_msg("%s: no tensor 'a' (%d)", what, rc);
	pt_error_clear(&err);
	n = pt_node_read(ck, a, got, sizeof(got), 0, &err);
	if (n != 16 || memcmp(got, floats4, 16) != 0)
		fail_msg("%s: 'a' reads %zd bytes (%s), not [1, 2, 3, 4]",
			 what, n, err.msg);
}

/* Rows that did not get what they want (each printed): a table runs
 * whole, then fails when any did. */
static unsigned g_bad;

static void check(const char *what, int rc, const struct pt_error *err,
		  const struct want *w)
{
	if (rc != w->rc || (w->rc && (!strstr(err->msg, w->msg) ||
				      strchr(err->msg, '\n')))) {
		print_message("%s: got %d \"%s\", want %d \"%s\"\n", what, rc,
			      rc ? err->msg : "", w->rc, w->rc ? w->msg : "");
		g_bad++;
	}
}

static void expect_mem(const char *what, const struct tb *b,
		       const struct want *w)
{
	struct pt_ckpt_opts o;
	struct pt_ckpt *ck = NULL;
	struct pt_error err;
	int rc;

	pt_ckpt_opts_default(&o);
	pt_error_clear(&err);
	rc = pt_ckpt_open_mem(&ck, b->p, b->len, "test.pt", &o, &err);
	check(what, rc, &err, w);
	if (!rc && !w->rc)
		check_a(what, ck);
	if (rc)
		assert_null(ck);
	pt_ckpt_close(ck);
}

static char g_dir[64];

static int rm_cb(const char *p, const struct stat *st, int flag,
		 struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static int dir_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/ptfs-fmt-XXXXXX");
	return mkdtemp(g_dir) ? 0 : -1;
}

static int dir_teardown(void **state)
{
	(void)state;
	return nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void put_file(const char *rel, const void *p, size_t n)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", g_dir, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
}

static void expect_path(const char *what, const char *rel,
			const struct want *w)
{
	struct pt_ckpt_opts o;
	struct pt_ckpt *ck = NULL;
	struct pt_error err;
	char path[256];
	int rc;

	snprintf(path, sizeof(path), "%s%s%s", g_dir, rel[0] ? "/" : "", rel);
	pt_ckpt_opts_default(&o);
	pt_error_clear(&err);
	rc = pt_ckpt_open(&ck, path, &o, &err);
	check(what, rc, &err, w);
	if (!rc && !w->rc)
		check_a(what, ck);
	pt_ckpt_close(ck);
}

/* ---- ZIP archives (torch.save, TorchScript, .pt2) --------------------- */

struct zrec {
	const char *name;
	const void *data;
	size_t len;             /* 0 with data: strlen */
};

/* Offsets of the fields the tables break. */
struct zlayout {
	size_t lho[8];          /* each record's local header */
	size_t cd[8];           /* each record's central directory entry */
	size_t eocd;
};

/* A stored (uncompressed) ZIP of @n records, as torch writes them
 * (without its alignment padding). */
static void zip_build(struct tb *b, const struct zrec *r, size_t n,
		      struct zlayout *lay)
{
	size_t i, cd_start;

	assert_true(n <= 8);
	for (i = 0; i < n; i++) {
		size_t len = r[i].len ? r[i].len : strlen(r[i].data);
		uint32_t crc = libdeflate_crc32(0, r[i].data, len);

		lay->lho[i] = b->len;
		tb_le(b, 0x04034b50, 4);
		tb_le(b, 20, 2);                /* version needed */
		tb_le(b, 0, 2);                 /* flags */
		tb_le(b, 0, 2);                 /* stored */
		tb_le(b, 0, 4);                 /* time, date */
		tb_le(b, crc, 4);
		tb_le(b, len, 4);
		tb_le(b, len, 4);
		tb_le(b, strlen(r[i].name), 2);
		tb_le(b, 0, 2);
		tb_str(b, r[i].name);
		tb_put(b, r[i].data, len);
	}
	cd_start = b->len;
	for (i = 0; i < n; i++) {
		size_t len = r[i].len ? r[i].len : strlen(r[i].data);

		lay->cd[i] = b->len;
		tb_le(b, 0x02014b50, 4);
		tb_le(b, 20, 2);
		tb_le(b, 20, 2);
		tb_le(b, 0, 2);
		tb_le(b, 0, 2);
		tb_le(b, 0, 4);
		tb_le(b, libdeflate_crc32(0, r[i].data, len), 4);
		tb_le(b, len, 4);
		tb_le(b, len, 4);
		tb_le(b, strlen(r[i].name), 2);
		tb_le(b, 0, 2);                 /* extra */
		tb_le(b, 0, 2);                 /* comment */
		tb_le(b, 0, 2);                 /* disk */
		tb_le(b, 0, 2);                 /* internal attributes */
		tb_le(b, 0, 4);                 /* external attributes */
		tb_le(b, lay->lho[i], 4);
		tb_str(b, r[i].name);
	}
	lay->eocd = b->len;
	tb_le(b, 0x06054b50, 4);
	tb_le(b, 0, 4);                         /* disks */
	tb_le(b, n, 2);
	tb_le(b, n, 2);
	tb_le(b, b->len - 12 - cd_start, 4);    /* CD size (before this) */
	tb_le(b, cd_start, 4);
	tb_le(b, 0, 2);
}

/* What a row does to an intact archive. */
enum zbreak {
	Z_NONE,
	Z_TRUNC_TAIL,           /* cut @arg bytes off the end */
	Z_MAGIC,                /* the first local header's signature */
	Z_CD_OFFSET,            /* the EOCD's directory offset := @arg */
	Z_CD_COUNT,             /* the EOCD's record count := @arg */
	Z_LHO,                  /* record @rec's local header offset := @arg */
	Z_SIZE,                 /* record @rec's sizes (CD) := @arg */
};

struct zrow {
	const char *what;
	enum zbreak how;
	unsigned rec;
	uint64_t arg;
	struct want w;
};

static void zip_break(struct tb *b, const struct zlayout *lay,
		      const struct zrow *r)
{
	switch (r->how) {
	case Z_NONE:
		break;
	case Z_TRUNC_TAIL:
		b->len -= r->arg;
		break;
	case Z_MAGIC:
		tb_set_le(b, 0, 0x04034b51, 4);
		break;
	case Z_CD_OFFSET:
		tb_set_le(b, lay->eocd + 16, r->arg, 4);
		break;
	case Z_CD_COUNT:
		tb_set_le(b, lay->eocd + 8, r->arg, 2);
		tb_set_le(b, lay->eocd + 10, r->arg, 2);
		break;
	case Z_LHO:
		tb_set_le(b, lay->cd[r->rec] + 42, r->arg, 4);
		break;
	case Z_SIZE:
		tb_set_le(b, lay->cd[r->rec] + 20, r->arg, 4);
		tb_set_le(b, lay->cd[r->rec] + 24, r->arg, 4);
		break;
	}
}

static void zip_table(const struct zrec *recs, size_t n,
		      const struct zrow *rows, size_t nrows)
{
	size_t i;

	for (i = 0; i < nrows; i++) {
		struct zlayout lay;
		struct tb b = { 0 };

		zip_build(&b, recs, n, &lay);
		zip_break(&b, &lay, &rows[i]);
		expect_mem(rows[i].what, &b, &rows[i].w);
		tb_free(&b);
	}
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* torch.save's zip: data.pkl with one float tensor of 4 elements in
 * archive/data/0, the version record; the pickle's knobs per row. */
struct zsave {
	const char *type;       /* storage class */
	uint32_t numel;         /* the pid's element count */
	uint32_t offset, size;  /* the tensor's */
	size_t data_len;        /* bytes in archive/data/0 */
	bool no_data;           /* no archive/data/0 record */
	const char *pickle;     /* instead of the tensor dict */
	const char *byteorder;  /* NULL: no record */
	struct want w;
};

static void test_zip_torch_save(void **state)
{
	static const struct zsave rows[] = {
		{ "FloatStorage", 4, 0, 4, 16, false, NULL, NULL, { 0, NULL } },
		{ "FloatStorage", 4, 0, 4, 16, false, NULL, "little", { 0, NULL } },
		{ "FloatStorage", 4, 0, 4, 12, false, NULL, NULL, { -EBADMSG,
		  "storage '0': record 'archive/data/0' has 12 bytes, the pickle says 16" } },
		{ "FloatStorage", 4, 0, 4, 16, true, NULL, NULL, { -EBADMSG,
		  "data.pkl: storage '0': record 'data/0' is missing" } },
		{ "NoSuchStorage", 4, 0, 4, 16, false, NULL, NULL, { -ENOTSUP,
		  "storage '0': unknown storage type torch.NoSuchStorage" } },
		{ "FloatStorage", 4, 2, 4, 16, false, NULL, NULL, { -EBADMSG,
		  "data.pkl: tensor of 4 elements at offset 2 reaches byte 24 of storage '0', which has 16 bytes" } },
		{ "FloatStorage", 0x40000000, 0, 4, 16, false, NULL, NULL, { -EBADMSG,
		  "the pickle says 4294967296" } },
		{ "FloatStorage", 4, 0, 4, 16, false, NULL, "middle", { -EBADMSG,
		  "byteorder record says 'middle', not little or big" } },
		{ NULL, 0, 0, 0, 16, false, "\x80\x02K\x05", NULL, { -EBADMSG,
		  "data.pkl: pickle: input ends at offset 4 without STOP" } },
		{ NULL, 0, 0, 0, 16, false, "\x80\x02X\xff\xff\xff\x7f" "abc.", NULL,
		  { -EBADMSG, "data.pkl: pickle: BINUNICODE at offset 2: length "
		    "2147483647 past end of input (4 bytes left)" } },
		{ NULL, 0, 0, 0, 16, false, "\x80\x02(K\x01K\x02Q.", NULL, { -EBADMSG,
		  "persistent id is not a ('storage', type, key, location, numel) tuple" } },
	};
	size_t i;

	(void)state;
	g_bad = 0;
	for (i = 0; i < N(rows); i++) {
		const struct zsave *r = &rows[i];
		struct tb pkl = { 0 };
		struct zrec recs[4];
		size_t n = 0;
		char what[64];

		if (r->pickle)
			tb_str(&pkl, r->pickle);
		else
			pk_tensor_dict(&pkl, r->type, "0", r->numel, r->offset,
				       r->size, false);
		recs[n++] = (struct zrec){ "archive/data.pkl", pkl.p, pkl.len };
		recs[n++] = (struct zrec){ "archive/version", "3\n", 0 };
		if (r->byteorder)
			recs[n++] = (struct zrec){ "archive/byteorder", r->byteorder, 0 };
		if (!r->no_data)
			recs[n++] = (struct zrec){ "archive/data/0", floats4, r->data_len };
		snprintf(what, sizeof(what), "torch.save zip row %zu", i);
		zip_table(recs, n, &(struct zrow){ what, Z_NONE, 0, 0, r->w }, 1);
		tb_free(&pkl);
	}
	assert_int_equal(g_bad, 0);
}

/* The container under torch.save: the ZIP's own fields. */
static void test_zip_container(void **state)
{
	static const struct zrow rows[] = {
		{ "intact", Z_NONE, 0, 0, { 0, NULL } },
		{ "no EOCD", Z_TRUNC_TAIL, 0, 22, { -EBADMSG,
		  "zip: no end of central directory record in the last 470 bytes" } },
		{ "EOCD cut short", Z_TRUNC_TAIL, 0, 5, { -EBADMSG,
		  "zip: no end of central directory record" } },
		{ "bad local magic", Z_MAGIC, 0, 0, { -ENOTSUP,
		  "not a PyTorch checkpoint (unrecognised format, first bytes 51 4b 03 04)" } },
		{ "directory past the end", Z_CD_OFFSET, 0, 0x7fffffff, { -EBADMSG,
		  "zip: central directory at 0x7fffffff (183 bytes) beyond end of file (492 bytes)" } },
		{ "more records than the directory", Z_CD_COUNT, 0, 9, { -EBADMSG,
		  "zip: entry count 9 too large for a central directory of 183 bytes" } },
		{ "local header past the end", Z_LHO, 1, 0x7ffffff0, { -EBADMSG,
		  "zip: entry 'archive/version': local header at 0x7ffffff0 beyond end of file" } },
		{ "local header offset wraps", Z_LHO, 1, 0xffffffff, { -EBADMSG,
		  "zip: entry 'archive/version': size or offset 0xffffffff but no ZIP64 extra field" } },
		{ "record past the end", Z_SIZE, 2, 0x10000000, { -EBADMSG,
		  "zip: entry 'archive/data/0': data at 0x10f (268435456 bytes) beyond end of file" } },
	};
	struct tb pkl = { 0 };
	struct zrec recs[3];

	(void)state;
	g_bad = 0;
	pk_tensor_dict(&pkl, "FloatStorage", "0", 4, 0, 4, false);
	recs[0] = (struct zrec){ "archive/data.pkl", pkl.p, pkl.len };
	recs[1] = (struct zrec){ "archive/version", "3\n", 0 };
	recs[2] = (struct zrec){ "archive/data/0", floats4, 16 };
	zip_table(recs, 3, rows, N(rows));
	tb_free(&pkl);
	assert_int_equal(g_bad, 0);
}

/* ---- safetensors --------------------------------------------------------- */

struct strow {
	const char *header;     /* the JSON header */
	uint64_t hlen;          /* the length field; 0: the header's */
	size_t data;            /* data bytes after the header (of floats4 x 2) */
	struct want w;
};

#define ST_A(offsets) "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":" offsets "}}"

static void test_safetensors(void **state)
{
	static const uint8_t data[32] = { 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40,
					  0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40 };
	static const struct strow rows[] = {
		{ ST_A("[0,16]"), 0, 16, { 0, NULL } },
		{ ST_A("[0,16]"), 0, 0, { -EBADMSG,
		  "tensor 'a': data_offsets [0, 16] outside the data section of 0 bytes" } },
		{ ST_A("[0,32]"), 0, 16, { -EBADMSG,
		  "tensor 'a': data_offsets [0, 32] outside the data section of 16 bytes" } },
		{ ST_A("[16,0]"), 0, 16, { -EBADMSG,
		  "tensor 'a': data_offsets [16, 0] outside the data section" } },
		{ ST_A("[0,12]"), 0, 16, { -EBADMSG,
		  "tensor 'a': data_offsets span 12 bytes, dtype and shape need 16" } },
		{ ST_A("[0,16]"), 1000, 16, { -EBADMSG,
		  "safetensors header of 1000 bytes runs past the end of the file (79 bytes)" } },
		{ ST_A("[0,16]"), 0xffffffffffffff00ull, 16, { -ENOTSUP,
		  "not a PyTorch checkpoint (unrecognised format, first bytes 00 ff ff ff)" } },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
		  "\"data_offsets\":[0,16]}}", 0, 16, { -EBADMSG,
		  "tensor 'a': element count overflows" } },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[2305843009213693952],"
		  "\"data_offsets\":[0,16]}}", 0, 16, { -EBADMSG,
		  "tensor 'a': byte count overflows" } },
		{ "{\"a\":{\"dtype\":\"F33\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 16,
		  { -EBADMSG, "tensor 'a': unknown dtype 'F33'" } },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", 0, 16, { -EBADMSG,
		  "tensor 'a': no data_offsets" } },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
		  "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 0, 32,
		  { -EBADMSG, "tensor 'a' appears twice" } },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
		  "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 0, 24,
		  { -EBADMSG, "tensors 'a' and 'b' overlap (bytes 0..16 and 8..24 of the data)" } },
		{ "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,", 0, 16,
		  { -EBADMSG, "safetensors header: at byte 50: expected a non-negative integer" } },
		{ "{\"a\":5}", 0, 16, { -EBADMSG,
		  "safetensors header: at byte 5: expected an object" } },
	};
	size_t i;

	(void)state;
	g_bad = 0;
	for (i = 0; i < N(rows); i++) {
		struct tb b = { 0 };
		char what[64];

		tb_le(&b, rows[i].hlen ? rows[i].hlen : strlen(rows[i].header), 8);
		tb_str(&b, rows[i].header);
		tb_put(&b, data, rows[i].data);
		snprintf(what, sizeof(what), "safetensors row %zu", i);
		expect_mem(what, &b, &rows[i].w);
		tb_free(&b);
	}
	assert_int_equal(g_bad, 0);
}

/* ---- legacy torch.save (a stream of pickles, then raw storages) --------- */

struct lgrow {
	const char *what;
	bool bad_magic;         /* the magic number's last byte changed */
	unsigned version;       /* 0: 1001 */
	const char *keys;       /* the storage key list pickle; NULL: ['0'] */
	uint64_t numel_field;   /* the storage's i64 count; 0: 4 */
	uint32_t pid_numel;     /* 0: 4 */
	size_t data;            /* storage bytes written */
	size_t cut;             /* bytes cut off the end */
	struct want w;
};

static void legacy_build(struct tb *b, const struct lgrow *r)
{
	static const uint8_t magic[10] = { 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
					   0x20, 0x6a, 0xa8, 0x50, 0x19 };

	tb_str(b, "\x80\x02\x8a\x0a");                      /* LONG1, 10 bytes */
	tb_put(b, magic, 9);
	tb_u8(b, r->bad_magic ? 0x18 : 0x19);
	tb_u8(b, '.');
	tb_str(b, "\x80\x02");
	pk_int(b, r->version ? r->version : 1001);
	tb_u8(b, '.');
	tb_str(b, "\x80\x02}(");
	pk_text(b, "protocol_version");
	pk_int(b, 1001);
	pk_text(b, "little_endian");
	tb_str(b, "\x88u.");
	pk_tensor_dict(b, "FloatStorage", "0", r->pid_numel ? r->pid_numel : 4,
		       0, 4, true);
	if (r->keys) {
		tb_str(b, r->keys);
	} else {
		tb_str(b, "\x80\x02]");
		pk_text(b, "0");
		tb_str(b, "a.");
	}
	tb_le(b, r->numel_field ? r->numel_field : 4, 8);
	tb_put(b, floats4, r->data);
	b->len -= r->cut;
}

static void test_legacy(void **state)
{
	static const struct lgrow rows[] = {
		{ "intact", false, 0, NULL, 0, 0, 16, 0, { 0, NULL } },
		{ "protocol 1000", false, 1000, NULL, 0, 0, 16, 0, { -ENOTSUP,
		  "protocol version is not 1001" } },
		{ "a key no pid names", false, 0, "\x80\x04]\x8c\x01" "1a.",
		  0, 0, 16, 0, { -EBADMSG,
		  "storage '1' is listed but no persistent id names it" } },
		{ "key list not a list", false, 0, "\x80\x02K\x07.", 0, 0, 16, 0,
		  { -EBADMSG, "the storage key list is not a list" } },
		{ "count differs from the pid", false, 0, NULL, 5, 0, 16, 0,
		  { -EBADMSG, "holds 5 elements, its persistent id says 4" } },
		{ "storage cut short", false, 0, NULL, 0, 0, 12, 0, { -EBADMSG,
		  "storage '0': 4 elements at offset" } },
		{ "count cut short", false, 0, NULL, 0, 0, 0, 4, { -EBADMSG,
		  "storage '0': element count at offset" } },
		{ "count huge", false, 0, NULL, 0x4000000000000001ull, 0, 16, 0,
		  { -EBADMSG, "legacy: storage '0' at offset 216 holds "
		    "4611686018427387905 elements, its persistent id says 4" } },
		{ "huge storage", false, 0, NULL, 0x7fffffff, 0x7fffffff, 16, 0,
		  { -EBADMSG, "storage '0': 2147483647 elements at offset" } },
		{ "key list cut", false, 0, NULL, 0, 0, 0, 12, { -EBADMSG,
		  "legacy: pickle 5 (storage keys) at offset 205: pickle: "
		  "BINUNICODE at offset 3: truncated argument (3 bytes left)" } },
	};
	size_t i;

	(void)state;
	g_bad = 0;
	for (i = 0; i < N(rows); i++) {
		struct tb b = { 0 };

		legacy_build(&b, &rows[i]);
		expect_mem(rows[i].what, &b, &rows[i].w);
		tb_free(&b);
	}
	assert_int_equal(g_bad, 0);
	{
		/* not torch's magic number: no legacy file, but a plain
		 * pickle (of that number) with bytes after it */
		static const struct lgrow bad = { "bad magic", true, 0, NULL,
						  0, 0, 16, 0, { 0, NULL } };
		struct pt_ckpt_opts o;
		struct pt_ckpt *ck = NULL;
		struct pt_error err;
		struct tb b = { 0 };

		legacy_build(&b, &bad);
		pt_ckpt_opts_default(&o);
		assert_int_equal(pt_ckpt_open_mem(&ck, b.p, b.len, "t.pt", &o, &err), 0);
		assert_string_equal(pt_ckpt_format(ck), "plain pickle");
		assert_null(pt_tree_path(ck, "a", &(int){ 0 }));
		pt_ckpt_close(ck);
		tb_free(&b);
	}
}

/* ---- TorchScript, 2019 layout (model.json, tensors/N) ------------------- */

struct tjrow {
	const char *what;
	const char *tensor;     /* the tensor table's one entry */
	const char *main;       /* "mainModule": ...; NULL: parameter a */
	size_t data;            /* bytes in model/tensors/0 */
	struct want w;
};

#define TJ_T(x) "{\"dims\":[\"4\"],\"offset\":\"0\",\"strides\":[\"1\"]" x "}"
#define TJ_FLOAT ",\"dataType\":\"FLOAT\""
#define TJ_DATA ",\"data\":{\"key\":\"tensors/0\"}"

static void test_torchscript_json(void **state)
{
	static const struct tjrow rows[] = {
		{ "intact", TJ_T(TJ_FLOAT TJ_DATA), NULL, 16, { 0, NULL } },
		{ "no dataType", TJ_T(TJ_DATA), NULL, 16, { -EBADMSG,
		  "model.json: tensor 0 has no dataType" } },
		{ "no data key", TJ_T(TJ_FLOAT), NULL, 16, { -EBADMSG,
		  "model.json: tensor 0 has no data key" } },
		{ "unsupported type", TJ_T(",\"dataType\":\"COMPLEX\"" TJ_DATA), NULL, 16,
		  { -ENOTSUP, "model.json: tensor 0 has data type COMPLEX, not supported" } },
		{ "dims and strides differ",
		  "{\"dims\":[\"2\",\"2\"],\"offset\":\"0\",\"strides\":[\"1\"]" TJ_FLOAT TJ_DATA "}",
		  NULL, 16, { -EBADMSG, "model.json: tensor 0 has 2 dims but 1 strides" } },
		{ "record short", TJ_T(TJ_FLOAT TJ_DATA), NULL, 12, { -EBADMSG,
		  "model.json: tensor 0: tensor of 4 elements at offset 0 reaches "
		  "byte 16 of storage 'tensors/0', which has 12 bytes" } },
		{ "offset past the record",
		  "{\"dims\":[\"4\"],\"offset\":\"3\",\"strides\":[\"1\"]" TJ_FLOAT TJ_DATA "}",
		  NULL, 16, { -EBADMSG, "model.json: tensor 0: tensor of 4 elements at "
		  "offset 3 reaches byte 28 of storage 'tensors/0', which has 16 bytes" } },
		{ "missing record",
		  TJ_T(TJ_FLOAT ",\"data\":{\"key\":\"tensors/9\"}"), NULL, 16,
		  { -EBADMSG, "tensor record 'tensors/9' is missing" } },
		{ "negative dims", "{\"dims\":[\"-4\"],\"offset\":\"0\"" TJ_FLOAT TJ_DATA "}",
		  NULL, 16, { -EBADMSG, "model.json: dims is not a non-negative integer" } },
		{ "tensorId out of range", TJ_T(TJ_FLOAT TJ_DATA),
		  "{\"name\":\"m\",\"parameters\":[{\"name\":\"a\",\"tensorId\":\"5\"}]}", 16,
		  { -EBADMSG, "model.json: parameter 0 names tensor 5 of 1" } },
		{ "parameter without a name", TJ_T(TJ_FLOAT TJ_DATA),
		  "{\"name\":\"m\",\"parameters\":[{\"tensorId\":\"0\"}]}", 16,
		  { -EBADMSG, "model.json: a module parameter without a name or tensorId" } },
		{ "not JSON", "{", NULL, 16, { -EBADMSG,
		  "model.json: at byte 101: expected a string" } },
	};
	size_t i;

	(void)state;
	g_bad = 0;
	for (i = 0; i < N(rows); i++) {
		const struct tjrow *r = &rows[i];
		struct tb json = { 0 };
		struct zrec recs[3];
		struct zlayout lay;
		struct tb b = { 0 };

		tb_str(&json, "{\"protoVersion\":\"6\",\"mainModule\":");
		tb_str(&json, r->main ? r->main :
		       "{\"name\":\"m\",\"parameters\":[{\"name\":\"a\",\"tensorId\":\"0\"}]}");
		tb_str(&json, ",\"tensors\":[");
		tb_str(&json, r->tensor);
		tb_str(&json, "]}");
		recs[0] = (struct zrec){ "model/model.json", json.p, json.len };
		recs[1] = (struct zrec){ "model/version", "1\n", 0 };
		recs[2] = (struct zrec){ "model/tensors/0", floats4, r->data };
		zip_build(&b, recs, 3, &lay);
		expect_mem(r->what, &b, &r->w);
		tb_free(&b);
		tb_free(&json);
	}
	assert_int_equal(g_bad, 0);
}

/* ---- torch.export (.pt2) ------------------------------------------------- */

struct p2row {
	const char *what;
	const char *format;     /* archive_format record; NULL: the 2.1-2.5
				 * layout (serialized_exported_program.json) */
	bool no_state;          /* no serialized_state_dict.pt */
	bool inner_no_pickle;   /* the state dict blob has no data.pkl */
	size_t inner_cut;       /* bytes cut off the state dict blob */
	struct want w;
};

static void test_pt2(void **state)
{
	static const struct p2row rows[] = {
		{ "intact", NULL, false, false, 0, { 0, NULL } },
		{ "no state dict", NULL, true, false, 0, { -EBADMSG,
		  "torch.export archive without serialized_state_dict.pt" } },
		{ "state dict without data.pkl", NULL, false, true, 0, { -EBADMSG,
		  "serialized_state_dict.pt: nested archive has no data.pkl" } },
		{ "state dict cut short", NULL, false, false, 30, { -EBADMSG,
		  "serialized_state_dict.pt (nested torch.save archive): zip: no end "
		  "of central directory record" } },
		{ "archive_format pt3", "pt3", false, false, 0, { -ENOTSUP,
		  "archive_format record says 'pt3', not pt2" } },
	};
	size_t i;

	(void)state;
	g_bad = 0;
	for (i = 0; i < N(rows); i++) {
		const struct p2row *r = &rows[i];
		struct tb pkl = { 0 }, inner = { 0 }, b = { 0 };
		struct zrec in[3], out[3];
		struct zlayout lay;
		size_t n = 0;

		pk_tensor_dict(&pkl, "FloatStorage", "0", 4, 0, 4, false);
		in[0] = (struct zrec){ r->inner_no_pickle ? "sd/other.pkl" :
				       "sd/data.pkl", pkl.p, pkl.len };
		in[1] = (struct zrec){ "sd/version", "3\n", 0 };
		in[2] = (struct zrec){ "sd/data/0", floats4, 16 };
		zip_build(&inner, in, 3, &lay);
		inner.len -= r->inner_cut;
		if (r->format)
			out[n++] = (struct zrec){ "m/archive_format", r->format, 0 };
		else
			out[n++] = (struct zrec){ "serialized_exported_program.json", "{}", 0 };
		if (!r->no_state)
			out[n++] = (struct zrec){ "serialized_state_dict.pt", inner.p,
						  inner.len };
		out[n++] = (struct zrec){ "version", "1\n", 0 };
		zip_build(&b, out, n, &lay);
		expect_mem(r->what, &b, &r->w);
		tb_free(&b);
		tb_free(&inner);
		tb_free(&pkl);
	}
	assert_int_equal(g_bad, 0);
}

/* ---- the tar container of torch <= 0.1.9 -------------------------------- */

/* One ustar member: a 512-byte header, the data padded to 512. */
static void tar_member(struct tb *b, const char *name, const void *p,
		       size_t n, uint64_t size_field, bool bad_sum)
{
	uint8_t h[512];
	unsigned sum = 0;
	size_t i;

	memset(h, 0, sizeof(h));
	snprintf((char *)h, 100, "%s", name);
	memcpy(h + 100, "0000644", 8);
	memcpy(h + 108, "0000000", 8);
	memcpy(h + 116, "0000000", 8);
	snprintf((char *)h + 124, 12, "%011llo",
		 (unsigned long long)(size_field ? size_field : n));
	memcpy(h + 136, "00000000000", 12);
	memset(h + 148, ' ', 8);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	for (i = 0; i < sizeof(h); i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum + (bad_sum ? 1 : 0));
	h[155] = ' ';
	tb_put(b, h, sizeof(h));
	tb_put(b, p, n);
	memset(h, 0, sizeof(h));
	tb_put(b, h, (512 - n % 512) % 512);
}

struct tarrow {
	const char *what;
	const char *type;       /* the storage's class; NULL: FloatStorage */
	uint64_t numel;         /* its i64 element count; 0: 4 */
	size_t data;            /* its bytes */
	const char *views;      /* a pickle of the views list, or NULL */
	const char *pid;        /* what "a" names; NULL: "1" */
	bool no_storages;       /* no storages member */
	bool bad_sum;           /* the pickle member's header checksum */
	uint64_t pickle_size;   /* the pickle member's size field; 0: its own */
	struct want w;
};

static void tar_build(struct tb *b, const struct tarrow *r)
{
	struct tb pk = { 0 }, st = { 0 };

	tar_member(b, "sys_info", "\x80\x02}.", 4, 0, false);
	tb_str(&pk, "\x80\x02}");
	pk_text(&pk, "a");
	pk_text(&pk, r->pid ? r->pid : "1");
	tb_str(&pk, "Qs.");
	tar_member(b, "pickle", pk.p, pk.len, r->pickle_size, r->bad_sum);
	tar_member(b, "tensors", "\x80\x02K\x00.", 5, 0, false);
	tb_str(&st, "\x80\x02K\x01.\x80\x02");
	pk_text(&st, "1");
	pk_text(&st, "cpu");
	pk_global(&st, "torch", r->type ? r->type : "FloatStorage");
	tb_str(&st, "\x87.");                               /* TUPLE3 */
	tb_le(&st, r->numel ? r->numel : 4, 8);
	tb_put(&st, floats4, r->data);
	if (r->views)
		tb_str(&st, r->views);
	if (!r->no_storages)
		tar_member(b, "storages", st.p, st.len, 0, false);
	tb_put(b, (uint8_t[1024]){ 0 }, 1024);
	tb_free(&pk);
	tb_free(&st);
}

static void test_tar(void **state)
{
	static const struct tarrow rows[] = {
		{ "intact", NULL, 0, 16, NULL, NULL, false, false, 0, { 0, NULL } },
		{ "no storages member", NULL, 0, 16, NULL, NULL, true, false, 0,
		  { -ENOTSUP, "tar archive without 'pickle' and 'storages' members: "
		    "not a torch.save checkpoint" } },
		{ "unknown storage type", "NoStorage", 0, 16, NULL, NULL, false,
		  false, 0, { -ENOTSUP,
		  "tar: storage '1': unknown storage type torch.NoStorage" } },
		{ "storage cut short", NULL, 0, 12, NULL, NULL, false, false, 0,
		  { -EBADMSG, "tar: storage '1': 4 elements at offset 3635 run past "
		    "the end of the member" } },
		{ "element count overflows", NULL, 0x4000000000000001ull, 16, NULL,
		  NULL, false, false, 0, { -EBADMSG, "tar: storage '1': "
		  "4611686018427387905 elements at offset 3635 run past the end" } },
		{ "pid names no storage", NULL, 0, 16, NULL, "2", false, false, 0,
		  { -EBADMSG, "tar: persistent id '2' names no tensor or storage" } },
		{ "views not a list", NULL, 0, 16, "\x80\x02K\x05.", NULL, false,
		  false, 0, { -EBADMSG, "tar: storage views are not a list" } },
		{ "view outside its storage", NULL, 0, 16,
		  "\x80\x02](\x8c\x01v\x8c\x01" "1K\x02K\x03t" "a.", NULL, false,
		  false, 0, { -EBADMSG, "tar: storage view 'v' lies outside storage '1'" } },
		{ "view of a missing root", NULL, 0, 16,
		  "\x80\x02](\x8c\x01v\x8c\x01" "9K\x01K\x01t" "a.", NULL, false,
		  false, 0, { -EBADMSG,
		  "tar: storage view 'v': root storage '9' is missing" } },
		{ "header checksum", NULL, 0, 16, NULL, NULL, false, true, 0,
		  { -EBADMSG, "tar: Damaged tar archive" } },
		{ "member past the end", NULL, 0, 16, NULL, NULL, false, false,
		  1u << 30, { -EBADMSG, "tar: member 'pickle' lies outside the file" } },
	};
	struct pt_ckpt_opts o;
	struct pt_ckpt *ck = NULL;
	struct pt_error err;
	struct tb b = { 0 };
	size_t i;

	(void)state;
	tar_build(&b, &rows[0]);
	pt_ckpt_opts_default(&o);
	if (pt_ckpt_open_mem(&ck, b.p, b.len, "t.tar", &o, &err) == -ENOTSUP &&
	    strstr(err.msg, "libarchive")) {
		tb_free(&b);
		PTFS_SKIP("PTFS_REQUIRE_LIBARCHIVE", "%s", err.msg);
	}
	pt_ckpt_close(ck);
	tb_free(&b);
	g_bad = 0;
	for (i = 0; i < N(rows); i++) {
		tar_build(&b, &rows[i]);
		expect_mem(rows[i].what, &b, &rows[i].w);
		tb_free(&b);
	}
	assert_int_equal(g_bad, 0);
}

/* ---- sharded checkpoints (*.index.json and the shards beside it) -------- */

/* s1.safetensors, holding "a" (float32 [1, 2, 3, 4]); @hlen_bad: a header
 * length past the end. */
static void put_shard(const char *name, bool hlen_bad)
{
	const char *h = ST_A("[0,16]");
	struct tb b = { 0 };

	tb_le(&b, hlen_bad ? 4096 : strlen(h), 8);
	tb_str(&b, h);
	tb_put(&b, floats4, 16);
	put_file(name, b.p, b.len);
	tb_free(&b);
}

struct shrow {
	const char *what;
	const char *index;      /* the index's text */
	bool bad_shard;         /* s1.safetensors' header runs past its end */
	struct want w;
};

static void test_sharded(void **state)
{
	static const struct shrow rows[] = {
		{ "intact", "{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\"}}",
		  false, { 0, NULL } },
		{ "shard missing", "{\"weight_map\":{\"a\":\"s2.safetensors\"}}", false,
		  { -ENOENT, "shard 's2.safetensors': No such file or directory" } },
		{ "shard outside the directory",
		  "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}", false, { -EBADMSG,
		  "index: shard '../s1.safetensors' is not a plain file name in the "
		  "index's directory" } },
		{ "tensor not in its shard",
		  "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\"}}",
		  false, { -EBADMSG, "index: tensor 'b' is not in shard 's1.safetensors'" } },
		{ "tensor listed twice",
		  "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}",
		  false, { -EBADMSG, "index: tensor 'a' appears twice in weight_map" } },
		{ "no weight_map", "{\"metadata\":{}}", false, { -ENOTSUP,
		  "not a PyTorch checkpoint (unrecognised format, first bytes 7b 22 6d 65)" } },
		{ "weight_map value not a name", "{\"weight_map\":{\"a\":5}}", false,
		  { -EBADMSG, "index: weight_map value of 'a' is not a file name" } },
		{ "index cut short", "{\"weight_map\":{\"a\":\"s1.safe", false,
		  { -EBADMSG, "index: at byte 27: unterminated string" } },
		{ "corrupt shard", "{\"weight_map\":{\"a\":\"s1.safetensors\"}}", true,
		  { -EBADMSG, "shard 's1.safetensors': safetensors header of 4096 "
		    "bytes runs past the end of the file (79 bytes)" } },
	};
	static const char *const names[] = { "model.safetensors.index.json", "" };
	size_t i, k;

	(void)state;
	g_bad = 0;
	for (i = 0; i < N(rows); i++) {
		put_file("model.safetensors.index.json", rows[i].index,
			 strlen(rows[i].index));
		put_shard("s1.safetensors", rows[i].bad_shard);
		/* the index itself, and its directory */
		for (k = 0; k < N(names); k++)
			expect_path(rows[i].what, names[k], &rows[i].w);
	}
	assert_int_equal(g_bad, 0);
	{
		/* an index needs its directory: in memory, it says so */
		struct tb b = { 0 };

		tb_str(&b, rows[0].index);
		expect_mem("index in memory", &b, &(struct want){ -ENOTSUP,
			   "sharded index in memory: its shards are files beside "
			   "it, open it from its directory" });
		tb_free(&b);
	}
	assert_int_equal(g_bad, 0);
}

/* ---- torch.distributed.checkpoint (a directory with .metadata) ---------- */

struct dcprow {
	const char *what;
	const char *sdm;        /* state_dict_metadata's pickle ops; NULL: {} */
	const char *sd;         /* storage_data's; NULL: {} */
	const char *raw;        /* the whole .metadata instead; NULL: built */
	size_t raw_len;
	struct want w;
};

static void dcp_build(struct tb *b, const struct dcprow *r)
{
	if (r->raw) {
		tb_put(b, r->raw, r->raw_len ? r->raw_len : strlen(r->raw));
		return;
	}
	tb_str(b, "\x80\x02");
	pk_global(b, "torch.distributed.checkpoint.metadata", "Metadata");
	tb_str(b, ")\x81}(");                   /* NEWOBJ, its state: */
	pk_text(b, "state_dict_metadata");
	tb_str(b, r->sdm ? r->sdm : "}");
	pk_text(b, "storage_data");
	tb_str(b, r->sd ? r->sd : "}");
	tb_str(b, "ub.");                       /* SETITEMS, BUILD */
}

static void test_dcp(void **state)
{
	static const struct dcprow rows[] = {
		{ "empty, intact", NULL, NULL, NULL, 0, { 0, NULL } },
		{ "empty .metadata", NULL, NULL, "", 0, { -EBADMSG,
		  "empty file, not a checkpoint" } },
		{ "not a pickle", NULL, NULL, "hello", 0, { -EBADMSG,
		  ".metadata: pickle: BINGET at offset 0: memo index 101 not set" } },
		{ "pickle cut short", NULL, NULL, "\x80\x02}(X\x05", 0, { -EBADMSG,
		  ".metadata: pickle: BINUNICODE at offset 4: truncated argument "
		  "(1 bytes left)" } },
		{ "not Metadata", NULL, NULL, "\x80\x02K\x07.", 0, { -EBADMSG,
		  ".metadata: the pickle is a (not an object), not a "
		  "torch.distributed.checkpoint Metadata" } },
		{ "state_dict_metadata not a dict", "K\x05", NULL, NULL, 0,
		  { -EBADMSG, ".metadata: state_dict_metadata is not a dict" } },
		{ "storage_data not a dict", NULL, "K\x05", NULL, 0, { -EBADMSG,
		  ".metadata: storage_data is not a dict" } },
	};
	size_t i;

	(void)state;
	g_bad = 0;
	g_no_a = true;
	for (i = 0; i < N(rows); i++) {
		struct tb b = { 0 };

		dcp_build(&b, &rows[i]);
		put_file(".metadata", b.p, b.len);
		expect_path(rows[i].what, "", &rows[i].w);
		expect_path(rows[i].what, ".metadata", &rows[i].w);
		tb_free(&b);
	}
	g_no_a = false;
	assert_int_equal(g_bad, 0);
}

/* ---- plain pickles (pickle.dump; storages as _load_from_bytes blobs) ---- */

struct plrow {
	const char *what;
	const char *arg;        /* the call's argument ops; NULL: the blob */
	const char *obj;        /* the blob's object pickle; NULL: the pid */
	size_t data;            /* the blob's storage bytes */
	size_t cut;             /* bytes cut off the end of the file */
	struct want w;
};

/* A legacy stream (as torch.save wrote into _load_from_bytes) holding one
 * FloatStorage of 4 elements with @data of its bytes, or @obj and no
 * storages. */
static void blob_build(struct tb *b, const struct plrow *r)
{
	static const uint8_t magic[10] = { 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
					   0x20, 0x6a, 0xa8, 0x50, 0x19 };

	tb_str(b, "\x80\x02\x8a\x0a");
	tb_put(b, magic, 10);
	tb_u8(b, '.');
	tb_str(b, "\x80\x02M\xe9\x03.");
	tb_str(b, "\x80\x02}.");
	if (r->obj) {
		tb_str(b, r->obj);
		tb_str(b, "\x80\x02].");               /* no storages */
		return;
	}
	tb_str(b, "\x80\x02(");
	pk_text(b, "storage");
	pk_global(b, "torch", "FloatStorage");
	pk_text(b, "0");
	pk_text(b, "cpu");
	pk_int(b, 4);
	tb_str(b, "NtQ.");
	tb_str(b, "\x80\x04]\x8c\x01" "0a.");
	tb_le(b, 4, 8);
	tb_put(b, floats4, r->data);
}

static void test_plain_pickle(void **state)
{
	static const struct plrow rows[] = {
		{ "intact", NULL, NULL, 16, 0, { 0, NULL } },
		{ "argument not bytes", "K\x05", NULL, 16, 0, { -EBADMSG,
		  "torch.storage._load_from_bytes: argument is not bytes" } },
		{ "blob not a storage", NULL, "\x80\x02K\x07.", 16, 0, { -ENOTSUP,
		  "torch.storage._load_from_bytes: the embedded object is not a storage" } },
		{ "blob cut short", NULL, NULL, 12, 0, { -EBADMSG,
		  "_load_from_bytes: storage '0': 4 elements at offset 96 run past "
		  "the end (108 bytes)" } },
		{ "blob not a stream", "C\x05hello", NULL, 16, 0, { -EBADMSG,
		  "_load_from_bytes: pickle 1 (magic number) at offset 0: pickle: "
		  "BINGET at offset 0: memo index 101 not set" } },
		{ "pickle cut short", NULL, NULL, 16, 3, { -EBADMSG,
		  "plain pickle: pickle: input ends at offset 159 without STOP" } },
	};
	size_t i;

	(void)state;
	g_bad = 0;
	for (i = 0; i < N(rows); i++) {
		const struct plrow *r = &rows[i];
		struct tb blob = { 0 }, b = { 0 };

		tb_str(&b, "\x80\x03}");
		pk_text(&b, "a");
		pk_global(&b, "torch.storage", "_load_from_bytes");
		if (r->arg) {
			tb_str(&b, r->arg);
		} else {
			blob_build(&blob, r);
			tb_u8(&b, 'B');                 /* BINBYTES */
			tb_le(&b, blob.len, 4);
			tb_put(&b, blob.p, blob.len);
		}
		tb_str(&b, "\x85Rs.");
		b.len -= r->cut;
		expect_mem(r->what, &b, &r->w);
		tb_free(&b);
		tb_free(&blob);
	}
	assert_int_equal(g_bad, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_zip_torch_save),
		cmocka_unit_test(test_zip_container),
		cmocka_unit_test(test_safetensors),
		cmocka_unit_test(test_legacy),
		cmocka_unit_test(test_plain_pickle),
		cmocka_unit_test(test_torchscript_json),
		cmocka_unit_test(test_pt2),
		cmocka_unit_test(test_tar),
		cmocka_unit_test_setup_teardown(test_sharded, dir_setup, dir_teardown),
		cmocka_unit_test_setup_teardown(test_dcp, dir_setup, dir_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
