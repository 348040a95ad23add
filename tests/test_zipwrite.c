/* SPDX-License-Identifier: MIT */
/*
 * test_zipwrite.c -- pt_zip_rewrite() and pt_crc32().
 *
 * Archives come from the system Python at test time: torch.save() output when
 * torch is installed (byte identity with torch is the strongest check of
 * docs/FORMATS.md, "Record layout"), Python zipfile otherwise (ZIP64 extras,
 * deflate, 70,000 records).  Results are checked with our own reader, with
 * Python's zipfile.testzip() and, where torch exists, with torch.load().
 * Tests that need Python or torch are skipped without them, with one
 * "skipped:" line, or fail when PTFS_REQUIRE_PYTHON=1 (tests/require.h).
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
#include <ftw.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/pt_limits.h"
#include "base/rd.h"
#include "io/source.h"
#include "container/replace.h"
#include "container/zip.h"
#include "container/zipwrite.h"

#define PY "/usr/bin/python3"

static char g_dir[64];

/* ---- helpers ---------------------------------------------------------- */

static int rm_cb(const char *p, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/ptfs-zw-XXXXXX");
	return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	char small[128];

	(void)state;
	/* the tmpfs of test_plan_space, if a failure left it mounted */
	snprintf(small, sizeof(small), "%s/small", g_dir);
	umount2(small, MNT_DETACH);
	return nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void pathf(char *buf, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void pathf(char *buf, size_t cap, const char *fmt, ...)
{
	char rel[256];
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	assert_true(k > 0 && (size_t)k < sizeof(rel));
	k = snprintf(buf, cap, "%s/%s", g_dir, rel);
	assert_true(k > 0 && (size_t)k < cap);
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *p;
	FILE *f;

	assert_int_equal(stat(path, &st), 0);
	p = malloc((size_t)st.st_size + 1);
	assert_non_null(p);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fread(p, 1, (size_t)st.st_size, f),
			 (size_t)st.st_size);
	fclose(f);
	*len = (size_t)st.st_size;
	return p;
}

/* Run a Python script (written to the test directory) with arguments. */
static int py(const char *script, const char *args)
{
	char sp[512];
	char cmd[2048];
	int st;

	pathf(sp, sizeof(sp), "script.py");
	write_file(sp, script, strlen(script));
	snprintf(cmd, sizeof(cmd), PY " %s %s", sp, args);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool have_python(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = access(PY, X_OK) == 0 &&
			 system(PY " -c 'import zipfile' >/dev/null 2>&1") == 0;
	return cached == 1;
}

static bool have_torch(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = have_python() &&
			 system(PY " -c 'import torch' >/dev/null 2>&1") == 0;
	return cached == 1;
}

/* Python's zipfile accepts the archive and every CRC. */
static void py_testzip(const char *path)
{
	static const char s[] =
		"import sys, zipfile\n"
		"z = zipfile.ZipFile(sys.argv[1])\n"
		"assert z.testzip() is None\n";

	if (have_python())
		assert_int_equal(py(s, path), 0);
	else
		assert_false(ptfs_required("PTFS_REQUIRE_PYTHON"));
}

static bool no_temp_in(const char *path)
{
	struct dirent *d;
	bool ok = true;
	DIR *dir = opendir(path);

	assert_non_null(dir);
	while ((d = readdir(dir)) != NULL)
		if (strstr(d->d_name, ".ptfs-"))
			ok = false;
	closedir(dir);
	return ok;
}

static bool no_temp_files(void)
{
	return no_temp_in(g_dir);
}

struct fz {
	int fd;                         /* the test's own view of the file */
	struct pt_source *src;
	struct pt_zip *z;
	struct pt_error err;
};

static void fz_open(struct fz *f, const char *path)
{
	struct pt_limits lim;
	int rc;

	pt_limits_default(&lim);
	pt_error_clear(&f->err);
	f->fd = open(path, O_RDONLY);
	assert_true(f->fd >= 0);
	assert_int_equal(pt_source_open_file(path, &f->src, &f->err), 0);
	rc = pt_zip_open(&f->z, f->src, &lim, &f->err);
	if (rc)
		fail_msg("pt_zip_open(%s): %d %s", path, rc, f->err.msg);
}

static void fz_close(struct fz *f)
{
	pt_zip_close(f->z);
	f->z = NULL;
	pt_source_close(f->src);
	f->src = NULL;
	close(f->fd);
}

static const struct pt_zip_entry *fz_find(struct fz *f, const char *rel)
{
	const struct pt_zip_entry *e = pt_zip_find_rel(f->z, rel);

	if (!e)
		fail_msg("no record '%s'", rel);
	return e;
}

/* Reopen @path with our reader: every CRC matches, payloads aligned. */
static void check_archive(const char *path, bool aligned)
{
	struct fz f;
	uint64_t i;

	fz_open(&f, path);
	for (i = 0; i < pt_zip_info(f.z)->n_entries; i++) {
		const struct pt_zip_entry *e = pt_zip_entry_at(f.z, i);
		uint8_t *p;
		size_t n;

		assert_int_equal(pt_zip_read(f.z, e, &p, &n, &f.err), 0);
		assert_int_equal(n, e->usize);
		if (pt_crc32(0, p, n) != e->crc32)
			fail_msg("%s: bad CRC", e->name);
		if (aligned && e->data_off % 64 != 0)
			fail_msg("%s: payload at %llu not aligned", e->name,
				 (unsigned long long)e->data_off);
		free(p);
	}
	fz_close(&f);
	py_testzip(path);
}

/* New contents from memory. */
static int mem_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	memcpy(buf, (const uint8_t *)ctx + off, n);
	return 0;
}

/* New contents from a formula: byte i is (7 i + seed) & 0xff. */
static int pat_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	unsigned seed = (unsigned)(uintptr_t)ctx;
	uint8_t *p = buf;
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)((off + i) * 7 + seed);
	return 0;
}

static int fail_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	(void)ctx;
	(void)buf;
	(void)n;
	(void)off;
	return -EIO;
}

static void pat_check(const uint8_t *p, size_t n, unsigned seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != (uint8_t)(i * 7 + seed))
			fail_msg("pattern differs at %zu", i);
}

static void make_torch(const char *path, const char *expr)
{
	char args[1024];
	static const char s[] =
		"import sys, torch\n"
		"torch.manual_seed(0)\n"
		"torch.save(eval(sys.argv[2]), sys.argv[1])\n";

	snprintf(args, sizeof(args), "%s \"%s\"", path, expr);
	assert_int_equal(py(s, args), 0);
}

/* A zip made by Python's zipfile (prefix "q/"), for non-torch tests. */
static void make_pyzip(const char *path)
{
	static const char s[] =
		"import sys, zipfile\n"
		"with zipfile.ZipFile(sys.argv[1], 'w') as z:\n"
		"    for name, data in [('q/data.pkl', b'\\x80\\x02}q\\x00.'),\n"
		"                       ('q/data/0', bytes(range(200))),\n"
		"                       ('q/empty', b''),\n"
		"                       ('q/version', b'3\\n')]:\n"
		"        with z.open(name, 'w', force_zip64=True) as f:\n"
		"            f.write(data)\n"
		"    z.writestr('q/deflated', b'hello world ' * 1000,\n"
		"               compress_type=zipfile.ZIP_DEFLATED)\n"
		"    z.writestr('q/tail', b'the end')\n";

	assert_int_equal(py(s, path), 0);
}

/* ---- tests ------------------------------------------------------------ */

static void test_crc32(void **state)
{
	static const char s[] = "123456789";

	(void)state;
	assert_int_equal(pt_crc32(0, s, 9), 0xCBF43926u);
	assert_int_equal(pt_crc32(pt_crc32(0, s, 4), s + 4, 5), 0xCBF43926u);
	assert_int_equal(pt_crc32(0, s, 0), 0);
}

/* (a) zero changes: a torch file comes back byte for byte. */
static void test_identity_torch(void **state)
{
	char p[512];
	uint8_t *a;
	uint8_t *b;
	size_t na;
	size_t nb;
	struct fz f;
	struct pt_error err;

	(void)state;
	if (!have_torch())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no torch in " PY);
	pathf(p, sizeof(p), "ident.pt");
	make_torch(p, "dict(w=torch.randn(3,4), b=torch.arange(5), "
		      "e=torch.zeros(0), **{'t%d' % i: torch.full((i + 1,), "
		      "float(i)) for i in range(12)})");
	a = slurp(p, &na);
	fz_open(&f, p);
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, NULL, 0, NULL, NULL, &err), 0);
	fz_close(&f);
	b = slurp(p, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	assert_true(no_temp_files());
	free(a);
	free(b);
	unlink(p);
}

/* Offset of central directory entry @idx in the archive at @path. */
static uint64_t cd_entry_off(const char *path, uint64_t idx)
{
	struct fz f;
	uint8_t h[46];
	uint64_t pos;
	uint64_t i;

	fz_open(&f, path);
	pos = pt_zip_info(f.z)->cd_off;
	for (i = 0; i < idx; i++) {
		assert_int_equal(pread(f.fd, h, 46, (off_t)pos), 46);
		assert_int_equal(pt_le32(h), 0x02014b50);
		pos += 46u + pt_le16(h + 28) + pt_le16(h + 30) +
		       pt_le16(h + 32);
	}
	fz_close(&f);
	return pos;
}

/* (b) one record, same size: only the payload and its CRCs differ. */
static void test_same_size_torch(void **state)
{
	static const char load[] =
		"import sys, torch\n"
		"d = torch.load(sys.argv[1])\n"
		"assert torch.equal(d['w'], torch.arange(1., 13.).reshape(3, 4))\n"
		"assert torch.equal(d['b'], torch.arange(5))\n";
	char p[512];
	float nw[12];
	uint8_t *a;
	uint8_t *b;
	size_t na;
	size_t nb;
	struct fz f;
	struct pt_zw_change ch = { 0 };
	struct pt_error err;
	uint64_t data_off;
	uint64_t data_end;
	uint64_t idx;
	uint64_t cd;
	uint32_t crc;
	int i;

	(void)state;
	if (!have_torch())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no torch in " PY);
	for (i = 0; i < 12; i++)
		nw[i] = (float)(i + 1);
	pathf(p, sizeof(p), "same.pt");
	make_torch(p, "dict(w=torch.zeros(3,4), b=torch.arange(5))");
	a = slurp(p, &na);
	fz_open(&f, p);
	ch.entry = fz_find(&f, "data/0");
	assert_int_equal(ch.entry->usize, sizeof(nw));
	ch.size = sizeof(nw);
	ch.read = mem_read;
	ch.ctx = nw;
	data_off = ch.entry->data_off;
	data_end = ch.entry->data_end;
	idx = ch.entry->index;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, &ch, 1, NULL, NULL, &err), 0);
	fz_close(&f);

	/* expected: old bytes with payload, descriptor and CD CRC patched */
	crc = pt_crc32(0, nw, sizeof(nw));
	memcpy(a + data_off, nw, sizeof(nw));
	pt_put32(a + data_end + 4, crc);
	cd = cd_entry_off(p, idx);
	pt_put32(a + cd + 16, crc);
	b = slurp(p, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	free(a);
	free(b);

	check_archive(p, true);
	assert_int_equal(py(load, p), 0);
	assert_true(no_temp_files());
	unlink(p);
}

/*
 * (c) a size change moves every later record.  Rewriting a.pt with the
 * data.pkl of b.pt (same tensors, a longer key) must give exactly b.pt:
 * the fresh headers follow the miniz padding rule like torch's own.
 */
static void test_size_change_torch(void **state)
{
	static const char load[] =
		"import sys, torch\n"
		"d = torch.load(sys.argv[1])\n"
		"assert list(d)[:3] == ['a_much_longer_key_for_w', 'b', 'e']\n"
		"assert torch.equal(d['b'], torch.arange(5))\n"
		"assert torch.equal(d['t9'], torch.full((10,), 9))\n";
	char pa[512];
	char pb[512];
	struct fz fa;
	struct fz fb;
	struct pt_zw_change ch = { 0 };
	struct pt_error err;
	uint8_t *pkl;
	size_t npkl;
	uint8_t *a;
	uint8_t *b;
	size_t na;
	size_t nb;

	(void)state;
	if (!have_torch())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no torch in " PY);
	pathf(pa, sizeof(pa), "a");
	assert_int_equal(mkdir(pa, 0700), 0);
	pathf(pa, sizeof(pa), "b");
	assert_int_equal(mkdir(pa, 0700), 0);
	pathf(pa, sizeof(pa), "a/m.pt");
	pathf(pb, sizeof(pb), "b/m.pt");
	/* an empty storage and keys 10, 11 (lexicographic order) too */
	make_torch(pa, "dict(w=torch.arange(12.).reshape(3,4), "
		       "b=torch.arange(5), e=torch.zeros(0), **{'t%d' % i: "
		       "torch.full((i + 1,), i) for i in range(10)})");
	make_torch(pb, "dict(a_much_longer_key_for_w=torch.arange(12.)"
		       ".reshape(3,4), b=torch.arange(5), e=torch.zeros(0), "
		       "**{'t%d' % i: torch.full((i + 1,), i) "
		       "for i in range(10)})");
	fz_open(&fb, pb);
	assert_int_equal(pt_zip_read(fb.z, fz_find(&fb, "data.pkl"), &pkl,
				     &npkl, &fb.err), 0);
	fz_close(&fb);
	fz_open(&fa, pa);
	assert_int_not_equal(fz_find(&fa, "data.pkl")->usize, npkl);
	ch.entry = fz_find(&fa, "data.pkl");
	ch.size = npkl;
	ch.read = mem_read;
	ch.ctx = pkl;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(pa, fa.z, &ch, 1, NULL, NULL, &err), 0);
	fz_close(&fa);
	free(pkl);

	a = slurp(pa, &na);
	b = slurp(pb, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	free(a);
	free(b);
	check_archive(pa, true);
	assert_int_equal(py(load, pa), 0);

	/* grow a storage record: still valid and aligned */
	fz_open(&fa, pa);
	ch.entry = fz_find(&fa, "data/0");
	ch.size = 1000;
	ch.read = pat_read;
	ch.ctx = (void *)(uintptr_t)3;
	assert_int_equal(pt_zip_rewrite(pa, fa.z, &ch, 1, NULL, NULL, &err), 0);
	fz_close(&fa);
	check_archive(pa, true);
	fz_open(&fa, pa);
	assert_int_equal(pt_zip_read(fa.z, fz_find(&fa, "data/0"), &a, &na,
				     &fa.err), 0);
	assert_int_equal(na, 1000);
	pat_check(a, na, 3);
	free(a);
	fz_close(&fa);
	assert_true(no_temp_files());
}

/* (d) more than 65,535 records: ZIP64 end records carry the count. */
static void test_many_records(void **state)
{
	static const char make[] =
		"import sys, zipfile\n"
		"with zipfile.ZipFile(sys.argv[1], 'w') as z:\n"
		"    z.writestr('p/data.pkl', b'\\x80\\x02}q\\x00.')\n"
		"    for i in range(70000):\n"
		"        z.writestr('p/%d' % i, b'x%d' % i)\n";
	static const char verify[] =
		"import sys, zipfile\n"
		"z = zipfile.ZipFile(sys.argv[1])\n"
		"assert z.testzip() is None\n"
		"assert len(z.namelist()) == 70001\n"
		"assert z.read('p/data.pkl') == bytes((i * 7 + 5) & 255 "
		"for i in range(3000))\n"
		"assert z.read('p/69999') == b'x69999'\n";
	char p[512];
	struct fz f;
	struct pt_zw_change ch = { 0 };
	struct pt_error err;

	(void)state;
	if (!have_python())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no " PY " with zipfile");
	pathf(p, sizeof(p), "many.zip");
	assert_int_equal(py(make, p), 0);
	fz_open(&f, p);
	assert_int_equal(pt_zip_info(f.z)->n_entries, 70001);
	ch.entry = fz_find(&f, "data.pkl");
	ch.size = 3000;
	ch.read = pat_read;
	ch.ctx = (void *)(uintptr_t)5;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, &ch, 1, NULL, NULL, &err), 0);
	fz_close(&f);
	assert_int_equal(py(verify, p), 0);
	fz_open(&f, p);
	assert_int_equal(pt_zip_info(f.z)->n_entries, 70001);
	assert_true(pt_zip_info(f.z)->zip64);
	fz_close(&f);
	assert_true(no_temp_files());
	unlink(p);
}

/* (e) Python zipfile records: ZIP64 extras, a deflated record that moves. */
static void test_zip64_extra_and_deflate(void **state)
{
	static const char verify[] =
		"import sys, zipfile\n"
		"z = zipfile.ZipFile(sys.argv[1])\n"
		"assert z.testzip() is None\n"
		"assert z.read('q/data/0') == bytes((i * 7 + 9) & 255 "
		"for i in range(5000))\n"
		"i = z.getinfo('q/deflated')\n"
		"assert i.compress_type == zipfile.ZIP_DEFLATED\n"
		"assert i.external_attr == 0o600 << 16, oct(i.external_attr)\n"
		"assert z.read('q/deflated') == b'hello world ' * 1000\n"
		"assert z.read('q/tail') == b'the end'\n"
		"assert z.read('q/empty') == b''\n";
	char p[512];
	struct fz f;
	struct pt_zw_change ch = { 0 };
	struct pt_error err;

	(void)state;
	if (!have_python())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no " PY " with zipfile");
	pathf(p, sizeof(p), "z64.zip");
	make_pyzip(p);
	fz_open(&f, p);
	assert_true(fz_find(&f, "data/0")->lh_extra_len >= 20);
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, NULL, 0, NULL, NULL, &err), 0);
	fz_close(&f);
	check_archive(p, false);

	fz_open(&f, p);
	ch.entry = fz_find(&f, "data/0");
	ch.size = 5000;
	ch.read = pat_read;
	ch.ctx = (void *)(uintptr_t)9;
	assert_int_equal(pt_zip_rewrite(p, f.z, &ch, 1, NULL, NULL, &err), 0);
	fz_close(&f);
	check_archive(p, false);
	if (have_python())
		assert_int_equal(py(verify, p), 0);
	else
		assert_false(ptfs_required("PTFS_REQUIRE_PYTHON"));
	fz_open(&f, p);
	assert_int_equal(fz_find(&f, "deflated")->method, PT_ZIP_DEFLATED);
	/* everything from the change on was rewritten in torch style */
	assert_int_equal(fz_find(&f, "data/0")->data_off % 64, 0);
	assert_int_equal(fz_find(&f, "tail")->data_off % 64, 0);
	assert_int_equal(fz_find(&f, "deflated")->data_off % 64, 0);
	fz_close(&f);
	assert_true(no_temp_files());
	unlink(p);
}

/* (f) every failure leaves the original byte-identical, no temp file. */
static void test_atomic(void **state)
{
	char p[512];
	uint8_t *a;
	uint8_t *b;
	size_t na;
	size_t nb;
	struct fz f;
	struct fz g;
	struct pt_zw_change ch[2] = { { 0 } };
	struct pt_zw_faults fl;
	struct pt_zw_expect ex;
	struct pt_error err;
	struct stat st;
	unsigned k;
	int rc;

	(void)state;
	if (!have_python())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no " PY " with zipfile");
	pathf(p, sizeof(p), "atomic.zip");
	make_pyzip(p);
	a = slurp(p, &na);
	fz_open(&f, p);
	ch[0].entry = fz_find(&f, "data/0");
	ch[0].size = 300;
	ch[0].read = pat_read;
	ch[0].ctx = (void *)(uintptr_t)1;

	/* fail write 1, 2, ... until the commit gets through */
	for (k = 1; k < 1000; k++) {
		memset(&fl, 0, sizeof(fl));
		fl.fail_write_at = k;
		pt_error_clear(&err);
		rc = pt_zip_rewrite(p, f.z, ch, 1, NULL, &fl, &err);
		if (rc == 0)
			break;
		assert_int_equal(rc, -EIO);
		assert_non_null(strstr(err.msg, "injected"));
		b = slurp(p, &nb);
		assert_int_equal(na, nb);
		assert_memory_equal(a, b, na);
		free(b);
		assert_true(no_temp_files());
	}
	assert_true(k > 3);
	assert_true(k < 1000);
	fz_close(&f);
	/* the commit that got through is the one we asked for */
	check_archive(p, false);
	write_file(p, a, na);   /* back to the original */

	fz_open(&f, p);
	ch[0].entry = fz_find(&f, "data/0");
	memset(&fl, 0, sizeof(fl));
	fl.fail_rename = 1;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, ch, 1, NULL, &fl, &err), -EIO);
	b = slurp(p, &nb);
	assert_memory_equal(a, b, na);
	free(b);
	assert_true(no_temp_files());

	/* a failing callback abandons the commit */
	ch[1] = ch[0];
	ch[1].entry = fz_find(&f, "tail");
	ch[1].read = fail_read;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, ch, 2, NULL, NULL, &err), -EIO);
	assert_non_null(strstr(err.msg, "q/tail"));

	/* the same record twice, or a record of another archive */
	ch[1] = ch[0];
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, ch, 2, NULL, NULL, &err),
			 -EINVAL);
	fz_open(&g, p);
	ch[1].entry = fz_find(&g, "tail");
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, ch, 2, NULL, NULL, &err),
			 -EINVAL);
	fz_close(&g);

	/* -ESTALE: expectation does not match, or the file grew */
	assert_int_equal(stat(p, &st), 0);
	memset(&ex, 0, sizeof(ex));
	ex.size = st.st_size + 1;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, ch, 1, &ex, NULL, &err),
			 -ESTALE);
	assert_non_null(strstr(err.msg, "changed on disk"));
	memset(&ex, 0, sizeof(ex));
	ex.ino = st.st_ino + 1;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, ch, 1, &ex, NULL, &err),
			 -ESTALE);
	b = slurp(p, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	free(b);
	assert_true(no_temp_files());

	/* the matching expectation commits */
	ex.dev = st.st_dev;
	ex.ino = st.st_ino;
	ex.size = st.st_size;
	ex.mtime = st.st_mtim;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, ch, 1, &ex, NULL, &err), 0);
	fz_close(&f);
	check_archive(p, false);

	/* the file changed after it was indexed */
	fz_open(&f, p);
	{
		FILE *fp = fopen(p, "ab");

		assert_non_null(fp);
		fputc('!', fp);
		fclose(fp);
	}
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, NULL, 0, NULL, NULL, &err),
			 -ESTALE);
	fz_close(&f);
	assert_true(no_temp_files());
	free(a);
	unlink(p);
}

/*
 * A real write error, without root tricks: RLIMIT_FSIZE makes write() and
 * copy_file_range() fail with EFBIG once the temporary file would grow past
 * the limit.  The error is passed through; the original stays as it was.
 */
static void test_write_error(void **state)
{
	char p[512];
	uint8_t *a;
	uint8_t *b;
	size_t na;
	size_t nb;
	struct fz f;
	struct pt_zw_change ch = { 0 };
	struct pt_error err;
	struct rlimit old;
	struct rlimit lim;
	void (*oldsig)(int);
	int rc;

	(void)state;
	if (!have_python())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no " PY " with zipfile");
	pathf(p, sizeof(p), "efbig.zip");
	make_pyzip(p);
	a = slurp(p, &na);
	fz_open(&f, p);
	ch.entry = fz_find(&f, "data/0");
	ch.size = 64 << 10;
	ch.read = pat_read;
	ch.ctx = NULL;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 16 << 10;
	oldsig = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	pt_error_clear(&err);
	rc = pt_zip_rewrite(p, f.z, &ch, 1, NULL, NULL, &err);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, oldsig);
	fz_close(&f);
	assert_int_equal(rc, -EFBIG);
	assert_non_null(strstr(err.msg, "commit: write to "));
	assert_non_null(strstr(err.msg, ".ptfs-"));
	assert_non_null(strstr(err.msg, strerror(EFBIG)));
	b = slurp(p, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	free(a);
	free(b);
	assert_true(no_temp_files());
	unlink(p);
}

/* (g) mode and owner survive; a symlink keeps pointing at the new file. */
static void test_mode_owner_symlink(void **state)
{
	char p[512];
	char l[512];
	struct fz f;
	struct pt_error err;
	struct stat st;
	struct stat lst;

	(void)state;
	if (!have_python())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no " PY " with zipfile");
	pathf(p, sizeof(p), "mode.zip");
	pathf(l, sizeof(l), "link.zip");
	make_pyzip(p);
	assert_int_equal(chmod(p, 0640), 0);
	if (geteuid() == 0)
		assert_int_equal(chown(p, 1234, 5678), 0);
	assert_int_equal(symlink("mode.zip", l), 0);
	fz_open(&f, l);
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(l, f.z, NULL, 0, NULL, NULL, &err), 0);
	fz_close(&f);
	assert_int_equal(lstat(l, &lst), 0);
	assert_true(S_ISLNK(lst.st_mode));
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	if (geteuid() == 0) {
		assert_int_equal(st.st_uid, 1234);
		assert_int_equal(st.st_gid, 5678);
	}
	check_archive(p, false);
	assert_true(no_temp_files());
	unlink(l);
	unlink(p);
}

static int zero_read(void *ctx, void *buf, size_t n, uint64_t off)
{
	(void)ctx;
	(void)off;
	memset(buf, 0, n);
	return 0;
}

/*
 * ZIP64 per record (docs/FORMATS.md, "ZIP64"): a record >= 4 GiB, and a
 * record whose header lies beyond 4 GiB.  Growing a 5-byte tensor to 4 GiB +
 * 5 bytes must give exactly what torch.save writes.  Needs ~13 GB of disk and
 * ~5 GB of memory, so it runs only with PTFS_BIG_TESTS=1.
 */
static void test_big_zip64_torch(void **state)
{
	static const char expr[] =
		"dict(x=torch.zeros(2**32 + 5, dtype=torch.uint8))";
	char pa[512];
	char pb[512];
	char cmd[1200];
	struct fz fa;
	struct fz fb;
	struct pt_zw_change ch[2] = { { 0 } };
	struct pt_error err;
	uint8_t *pkl;
	size_t npkl;

	(void)state;
	if (!getenv("PTFS_BIG_TESTS")) {
		print_message("skipped: 4 GiB test (opt-in: PTFS_BIG_TESTS=1, 13 GB of disk)\n");
		skip();
	}
	if (!have_torch())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no torch in " PY);
	pathf(pa, sizeof(pa), "biga");
	assert_int_equal(mkdir(pa, 0700), 0);
	pathf(pa, sizeof(pa), "bigb");
	assert_int_equal(mkdir(pa, 0700), 0);
	pathf(pa, sizeof(pa), "biga/m.pt");
	pathf(pb, sizeof(pb), "bigb/m.pt");
	make_torch(pa, "dict(x=torch.zeros(5, dtype=torch.uint8))");
	make_torch(pb, expr);

	fz_open(&fb, pb);
	assert_true(fz_find(&fb, "data/0")->zip64);
	assert_int_equal(pt_zip_read(fb.z, fz_find(&fb, "data.pkl"), &pkl,
				     &npkl, &fb.err), 0);
	fz_close(&fb);
	fz_open(&fa, pa);
	ch[0].entry = fz_find(&fa, "data.pkl");
	ch[0].size = npkl;
	ch[0].read = mem_read;
	ch[0].ctx = pkl;
	ch[1].entry = fz_find(&fa, "data/0");
	ch[1].size = (1ull << 32) + 5;
	ch[1].read = zero_read;
	ch[1].ctx = NULL;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(pa, fa.z, ch, 2, NULL, NULL, &err), 0);
	fz_close(&fa);
	free(pkl);
	snprintf(cmd, sizeof(cmd), "cmp %s %s", pa, pb);
	assert_int_equal(system(cmd), 0);

	/* zero changes on a ZIP64 torch file: identical again */
	fz_open(&fb, pb);
	assert_int_equal(pt_zip_rewrite(pb, fb.z, NULL, 0, NULL, NULL, &err),
			 0);
	fz_close(&fb);
	assert_int_equal(system(cmd), 0);
	py_testzip(pa);
	assert_true(no_temp_files());
	unlink(pa);
	unlink(pb);
}

/* ---- plans: records dropped, added, replaced, reordered ---------------- */

/* One record as it was before a plan: where its payload was, its bytes. */
struct snap {
	char name[64];
	uint64_t lho;
	uint64_t data_off;
	uint8_t *data;
	size_t len;
};

/* Every record of @f, in central directory order. */
static size_t snap_all(struct fz *f, struct snap *s, size_t cap)
{
	size_t n = (size_t)pt_zip_info(f->z)->n_entries;
	size_t i;

	assert_true(n <= cap);
	for (i = 0; i < n; i++) {
		const struct pt_zip_entry *e = pt_zip_entry_at(f->z, i);

		assert_true(e->name_len < sizeof(s[i].name));
		memcpy(s[i].name, e->name, e->name_len + 1);
		s[i].lho = e->lho;
		s[i].data_off = e->data_off;
		assert_int_equal(pt_zip_read(f->z, e, &s[i].data, &s[i].len,
					     &f->err), 0);
	}
	return n;
}

static void snap_free(struct snap *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(s[i].data);
}

static const struct snap *snap_find(const struct snap *s, size_t n,
				    const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(s[i].name, name) == 0)
			return &s[i];
	fail_msg("no record '%s' before the plan", name);
	return NULL;
}

/*
 * The local header of @e ends with the FB padding block (docs/FORMATS.md,
 * "Record alignment"): id 0x4246, its length, that many 'Z' bytes, and
 * the payload right after it.
 */
static void check_fb(int fd, const struct pt_zip_entry *e)
{
	uint8_t h[30];
	uint8_t *x;
	size_t xl;
	size_t pos = 0;
	bool fb = false;

	assert_int_equal(pread(fd, h, 30, (off_t)e->lho), 30);
	xl = pt_le16(h + 28);
	x = malloc(xl + 1);
	assert_non_null(x);
	assert_int_equal(pread(fd, x, xl, (off_t)(e->lho + 30 + e->name_len)),
			 (ssize_t)xl);
	while (pos + 4 <= xl) {
		size_t bl = pt_le16(x + pos + 2);
		size_t i;

		assert_true(pos + 4 + bl <= xl);
		if (pt_le16(x + pos) == 0x4246) {
			for (i = 0; i < bl; i++)
				assert_int_equal(x[pos + 4 + i], 'Z');
			assert_int_equal(pos + 4 + bl, xl);
			fb = true;
		}
		pos += 4 + bl;
	}
	free(x);
	if (!fb)
		fail_msg("%s: no FB padding block", e->name);
	assert_int_equal(e->data_off, e->lho + 30 + e->name_len + xl);
}

/*
 * After a plan: our reader and Python's zipfile accept @path, every
 * payload is aligned to @align with an FB block before it, and the records
 * kept from @old (not in @changed) have their old bytes; those that moved
 * and span a block kept their payload offset modulo 4096.  Returns how
 * many of them moved.
 */
static unsigned check_plan(const char *path, const struct snap *old,
			   size_t nold, const char *const *changed,
			   uint64_t align)
{
	struct fz f;
	uint64_t i;
	unsigned moved = 0;

	check_archive(path, true);
	fz_open(&f, path);
	for (i = 0; i < pt_zip_info(f.z)->n_entries; i++) {
		const struct pt_zip_entry *e = pt_zip_entry_at(f.z, i);
		const struct snap *o = NULL;
		const char *const *c;
		uint8_t *p;
		size_t n;
		size_t k;

		if (e->data_off % align != 0)
			fail_msg("%s: payload at %llu, not a multiple of %llu",
				 e->name, (unsigned long long)e->data_off,
				 (unsigned long long)align);
		check_fb(f.fd, e);
		for (k = 0; k < nold; k++)
			if (strcmp(old[k].name, e->name) == 0)
				o = &old[k];
		for (c = changed; c && *c; c++)
			if (strcmp(*c, e->name) == 0)
				o = NULL;
		if (!o)
			continue;
		assert_int_equal(pt_zip_read(f.z, e, &p, &n, &f.err), 0);
		assert_int_equal(n, o->len);
		assert_memory_equal(p, o->data, n);
		free(p);
		if (e->lho != o->lho && o->len >= 4096 &&
		    o->data_off % align == 0) {
			moved++;
			if (e->data_off % 4096 != o->data_off % 4096)
				fail_msg("%s: payload moved from %llu to %llu, "
					 "not congruent modulo 4096", e->name,
					 (unsigned long long)o->data_off,
					 (unsigned long long)e->data_off);
		}
	}
	fz_close(&f);
	return moved;
}

/* Integer tensors of 12000, 40, 16384 and 56 bytes (data/0 .. data/3). */
#define PLAN_EXPR "dict(a=torch.arange(3000, dtype=torch.int32), " \
		  "b=torch.arange(5), c=torch.arange(2048), " \
		  "d=torch.full((7,), 3))"

/* The records of @f in file order, as a plan keeping all of them. */
static size_t plan_keep_all(struct fz *f, struct pt_zw_rec *plan, size_t cap)
{
	size_t n = (size_t)pt_zip_info(f->z)->n_entries;
	size_t i;
	size_t j;

	assert_true(n <= cap);
	memset(plan, 0, n * sizeof(*plan));
	for (i = 0; i < n; i++)
		plan[i].entry = pt_zip_entry_at(f->z, i);
	/* insertion sort by local header offset */
	for (i = 1; i < n; i++)
		for (j = i; j > 0 && plan[j - 1].entry->lho >
				     plan[j].entry->lho; j--) {
			struct pt_zw_rec t = plan[j];

			plan[j] = plan[j - 1];
			plan[j - 1] = t;
		}
	return n;
}

/* Remove the record named "<prefix>/@rel" from @plan. */
static size_t plan_drop(struct fz *f, struct pt_zw_rec *plan, size_t n,
			const char *rel)
{
	const struct pt_zip_entry *e = fz_find(f, rel);
	size_t i;

	for (i = 0; i < n; i++)
		if (plan[i].entry == e) {
			memmove(&plan[i], &plan[i + 1],
				(n - i - 1) * sizeof(*plan));
			return n - 1;
		}
	fail_msg("'%s' is not in the plan", rel);
	return n;
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

/* Dropping a middle record: later ones move, the big one by whole blocks. */
static void test_plan_drop(void **state)
{
	char p[512];
	struct fz f;
	struct snap old[16];
	struct pt_zw_rec plan[16];
	struct pt_error err;
	uint64_t size;
	size_t nold;
	size_t n;

	(void)state;
	if (!have_torch())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no torch in " PY);
	pathf(p, sizeof(p), "drop.pt");
	make_torch(p, PLAN_EXPR);
	fz_open(&f, p);
	nold = snap_all(&f, old, 16);
	n = plan_keep_all(&f, plan, 16);
	n = plan_drop(&f, plan, n, "data/1");
	pt_error_clear(&err);
	assert_int_equal(pt_zip_plan_size(f.z, plan, n, &size, &err), 0);
	assert_int_equal(pt_zip_write_plan(p, f.z, plan, n, NULL, NULL, &err),
			 0);
	fz_close(&f);
	assert_int_equal(file_size(p), size);
	/* data/2 (16 KiB) moved and kept its offset modulo 4096 */
	assert_int_equal(check_plan(p, old, nold, NULL, 64), 1);
	fz_open(&f, p);
	assert_int_equal(pt_zip_info(f.z)->n_entries, nold - 1);
	assert_null(pt_zip_find_rel(f.z, "data/1"));
	fz_close(&f);
	assert_true(no_temp_files());
	snap_free(old, nold);
	unlink(p);
}

/*
 * Records added (one small, one empty) and the rest reordered: torch
 * still loads it equal, also with weights_only; the new records look
 * like torch's own; the central directory follows the plan.
 */
static void test_plan_add_reorder_torch(void **state)
{
	static const char load[] =
		"import sys, torch\n"
		"for wo in (False, True):\n"
		"    d = torch.load(sys.argv[1], weights_only=wo)\n"
		"    assert list(d) == ['a', 'b', 'c', 'd']\n"
		"    assert torch.equal(d['a'], torch.arange(3000, dtype=torch.int32))\n"
		"    assert torch.equal(d['b'], torch.arange(5))\n"
		"    assert torch.equal(d['c'], torch.arange(2048))\n"
		"    assert torch.equal(d['d'], torch.full((7,), 3))\n";
	static char note[] = "not a storage";
	char p[512];
	char nn[64];
	char ne[64];
	char names[16][64];
	struct fz f;
	struct snap old[16];
	struct pt_zw_rec plan[16];
	struct pt_zw_change add = { 0 };
	struct pt_error err;
	const struct pt_zip_entry *e;
	const struct pt_zip_entry *t;
	uint32_t crc = 0;
	uint16_t tflags;
	uint16_t ttime;
	uint16_t tdate;
	uint16_t tmade;
	uint16_t tneeded;
	uint8_t h[30];
	size_t nold;
	size_t n;
	size_t i;

	(void)state;
	if (!have_torch())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no torch in " PY);
	pathf(p, sizeof(p), "add.pt");
	make_torch(p, PLAN_EXPR);
	fz_open(&f, p);
	nold = snap_all(&f, old, 16);
	t = pt_zip_entry_at(f.z, 0);
	tflags = t->flags;
	ttime = t->mtime;
	tdate = t->mdate;
	tmade = t->version_made;
	tneeded = t->version_needed;
	snprintf(nn, sizeof(nn), "%s/extra/note", pt_zip_info(f.z)->prefix);
	snprintf(ne, sizeof(ne), "%s/extra/empty", pt_zip_info(f.z)->prefix);
	/* reversed, with the new records between the old ones */
	memset(plan, 0, sizeof(plan));
	n = 0;
	for (i = nold; i-- > 0;) {
		plan[n++].entry = pt_zip_entry_at(f.z, i);
		if (i == 3) {
			add.size = sizeof(note) - 1;
			add.read = mem_read;
			add.ctx = note;
			add.crc_out = &crc;
			plan[n].name = nn;
			plan[n++].change = &add;
		}
		if (i == 1)
			plan[n++].name = ne;
	}
	for (i = 0; i < n; i++)
		snprintf(names[i], sizeof(names[i]), "%s",
			 plan[i].entry ? plan[i].entry->name : plan[i].name);
	pt_error_clear(&err);
	assert_int_equal(pt_zip_write_plan(p, f.z, plan, n, NULL, NULL, &err),
			 0);
	fz_close(&f);
	assert_int_equal(crc, pt_crc32(0, note, sizeof(note) - 1));
	check_plan(p, old, nold, NULL, 64);
	assert_int_equal(py(load, p), 0);

	fz_open(&f, p);
	assert_int_equal(pt_zip_info(f.z)->n_entries, n);
	for (i = 0; i < n; i++) {
		e = pt_zip_entry_at(f.z, i);
		assert_string_equal(e->name, names[i]);
		if (i > 0)
			assert_true(e->lho > pt_zip_entry_at(f.z, i - 1)->lho);
	}
	e = fz_find(&f, "extra/note");
	assert_int_equal(e->usize, sizeof(note) - 1);
	assert_int_equal(e->crc32, crc);
	assert_int_equal(e->method, PT_ZIP_STORED);
	assert_int_equal(e->flags, tflags);
	assert_int_equal(e->mtime, ttime);
	assert_int_equal(e->mdate, tdate);
	assert_int_equal(e->version_made, tmade);
	assert_int_equal(e->version_needed, tneeded);
	assert_true(e->has_descriptor);
	assert_int_equal(pread(f.fd, h, 30, (off_t)e->lho), 30);
	assert_int_equal(pt_le16(h + 4), 0);            /* version */
	assert_int_equal(pt_le16(h + 6), 0x0808);
	assert_int_equal(pt_le32(h + 14), 0);           /* CRC, sizes */
	assert_int_equal(pt_le32(h + 18), 0);
	assert_int_equal(pt_le32(h + 22), 0);
	e = fz_find(&f, "extra/empty");
	assert_int_equal(e->usize, 0);
	assert_int_equal(e->flags, 0x0800);
	assert_false(e->has_descriptor);
	fz_close(&f);
	assert_true(no_temp_files());
	snap_free(old, nold);
	unlink(p);
}

/* One plan that replaces a record (larger), drops one and renames one. */
static void test_plan_replace_drop(void **state)
{
	char p[512];
	char rn[64];
	char c0[64];
	const char *chg[2] = { c0, NULL };
	struct fz f;
	struct snap old[16];
	struct pt_zw_rec plan[16];
	struct pt_zw_change ch = { 0 };
	struct pt_error err;
	const struct snap *o;
	uint8_t *b;
	size_t nb;
	size_t nold;
	size_t n;
	size_t i;

	(void)state;
	if (!have_torch())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no torch in " PY);
	pathf(p, sizeof(p), "repl.pt");
	make_torch(p, PLAN_EXPR);
	fz_open(&f, p);
	nold = snap_all(&f, old, 16);
	n = plan_keep_all(&f, plan, 16);
	n = plan_drop(&f, plan, n, "data/3");
	ch.entry = fz_find(&f, "data/0");
	ch.size = 13000;
	ch.read = pat_read;
	ch.ctx = (void *)(uintptr_t)11;
	snprintf(c0, sizeof(c0), "%s", ch.entry->name);
	snprintf(rn, sizeof(rn), "%s/data/renamed", pt_zip_info(f.z)->prefix);
	for (i = 0; i < n; i++) {
		if (plan[i].entry == ch.entry)
			plan[i].change = &ch;
		if (plan[i].entry == fz_find(&f, "data/1"))
			plan[i].name = rn;
	}
	pt_error_clear(&err);
	assert_int_equal(pt_zip_write_plan(p, f.z, plan, n, NULL, NULL, &err),
			 0);
	fz_close(&f);
	/* data/2 moved by the growth of data/0, whole blocks kept */
	assert_int_equal(check_plan(p, old, nold, chg, 64), 1);
	fz_open(&f, p);
	assert_int_equal(pt_zip_info(f.z)->n_entries, nold - 1);
	assert_null(pt_zip_find_rel(f.z, "data/3"));
	assert_null(pt_zip_find_rel(f.z, "data/1"));
	assert_int_equal(pt_zip_read(f.z, fz_find(&f, "data/0"), &b, &nb,
				     &f.err), 0);
	assert_int_equal(nb, 13000);
	pat_check(b, nb, 11);
	free(b);
	o = NULL;
	for (i = 0; i < nold; i++)
		if (strstr(old[i].name, "/data/1"))
			o = &old[i];
	assert_non_null(o);
	assert_int_equal(pt_zip_read(f.z, fz_find(&f, "data/renamed"), &b,
				     &nb, &f.err), 0);
	assert_int_equal(nb, o->len);
	assert_memory_equal(b, o->data, nb);
	free(b);
	fz_close(&f);
	assert_true(no_temp_files());
	snap_free(old, nold);
	unlink(p);
}

/* @path still holds exactly @a (@na bytes). */
static void assert_same(const char *path, const uint8_t *a, size_t na)
{
	uint8_t *b;
	size_t nb;

	b = slurp(path, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	free(b);
}

/* A refused plan: -EINVAL, one line naming @what, nothing written. */
static void refused(const char *path, struct fz *f,
		    const struct pt_zw_rec *plan, size_t n, const char *what,
		    const uint8_t *a, size_t na)
{
	struct pt_error err;
	uint64_t size;
	int rc;

	pt_error_clear(&err);
	rc = pt_zip_write_plan(path, f->z, plan, n, NULL, NULL, &err);
	if (rc != -EINVAL)
		fail_msg("%s: %d (%s), not -EINVAL", what, rc, err.msg);
	if (!strstr(err.msg, what) || strchr(err.msg, '\n'))
		fail_msg("message '%s' does not name '%s'", err.msg, what);
	pt_error_clear(&err);
	assert_int_equal(pt_zip_plan_size(f->z, plan, n, &size, &err),
			 -EINVAL);
	assert_same(path, a, na);
	assert_true(no_temp_files());
}

/* Bad plans are refused before anything is written. */
static void test_plan_bad(void **state)
{
	char p[512];
	char dup[64];
	char *longname;
	uint8_t *a;
	size_t na;
	struct fz f;
	struct fz g;
	struct pt_zw_rec plan[16];
	struct pt_zw_change ch = { 0 };
	size_t n;

	(void)state;
	if (!have_python())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no " PY " with zipfile");
	pathf(p, sizeof(p), "bad.zip");
	make_pyzip(p);
	a = slurp(p, &na);
	fz_open(&f, p);
	n = plan_keep_all(&f, plan, 15);

	/* a new record with the name of a kept one */
	plan[n].entry = NULL;
	plan[n].name = "q/tail";
	plan[n].change = NULL;
	refused(p, &f, plan, n + 1, "'q/tail' is twice", a, na);
	/* two new records of one name */
	plan[n - 1].entry = NULL;
	snprintf(dup, sizeof(dup), "q/new");
	plan[n - 1].name = dup;
	plan[n].name = "q/new";
	refused(p, &f, plan, n + 1, "'q/new' is twice", a, na);
	/* a kept record renamed onto another */
	n = plan_keep_all(&f, plan, 15);
	plan[0].name = "q/tail";
	refused(p, &f, plan, n, "'q/tail' is twice", a, na);
	/* names: empty, 65536 bytes, none for a new record */
	plan[0].name = "";
	refused(p, &f, plan, n, "1 to 65535 bytes", a, na);
	longname = malloc(65537);
	assert_non_null(longname);
	memset(longname, 'x', 65536);
	longname[65536] = '\0';
	plan[0].name = longname;
	refused(p, &f, plan, n, "1 to 65535 bytes", a, na);
	plan[0].entry = NULL;
	plan[0].name = NULL;
	refused(p, &f, plan, n, "needs a name", a, na);
	free(longname);
	/* an entry of another archive; a change of another record */
	n = plan_keep_all(&f, plan, 15);
	fz_open(&g, p);
	plan[1].entry = fz_find(&g, "data/0");
	refused(p, &f, plan, n, "not in this archive", a, na);
	fz_close(&g);
	n = plan_keep_all(&f, plan, 15);
	ch.entry = fz_find(&f, "tail");
	plan[0].change = &ch;
	refused(p, &f, plan, n, "its change is for 'q/tail'", a, na);
	/* new contents without a callback */
	ch.entry = NULL;
	ch.size = 10;
	refused(p, &f, plan, n, "bad change", a, na);
	fz_close(&f);
	free(a);
	unlink(p);
}

/*
 * The alignment of the new archive comes from its own
 * ".storage_alignment"; with ".format_version" in it, moved records get
 * torch's plain padding, not the block-keeping one (docs/FORMATS.md,
 * "Computed storage offsets").
 */
static void test_plan_alignment(void **state)
{
	static char a256[] = "256\n";
	char p[512];
	char na[64];
	char nf[64];
	struct fz f;
	struct snap old[16];
	struct pt_zw_rec plan[16];
	struct pt_zw_change al = { 0 };
	const struct pt_zip_entry *e;
	struct pt_error err;
	size_t nold;
	size_t n;

	(void)state;
	if (!have_torch())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no torch in " PY);
	pathf(p, sizeof(p), "align.pt");
	make_torch(p, PLAN_EXPR);
	fz_open(&f, p);
	nold = snap_all(&f, old, 16);
	n = plan_keep_all(&f, plan, 15);
	snprintf(na, sizeof(na), "%s/.storage_alignment",
		 pt_zip_info(f.z)->prefix);
	memmove(&plan[1], &plan[0], n * sizeof(*plan));
	memset(&plan[0], 0, sizeof(plan[0]));
	al.size = 4;
	al.read = mem_read;
	al.ctx = a256;
	plan[0].name = na;
	plan[0].change = &al;
	pt_error_clear(&err);
	assert_int_equal(pt_zip_write_plan(p, f.z, plan, n + 1, NULL, NULL,
					   &err), 0);
	fz_close(&f);
	check_plan(p, old, nold, NULL, 256);

	/* drop data/1 and add .format_version: data/2 padded as torch does */
	snap_free(old, nold);
	fz_open(&f, p);
	nold = snap_all(&f, old, 16);
	n = plan_keep_all(&f, plan, 15);
	n = plan_drop(&f, plan, n, "data/1");
	snprintf(nf, sizeof(nf), "%s/.format_version", pt_zip_info(f.z)->prefix);
	memset(&plan[n], 0, sizeof(plan[n]));
	plan[n++].name = nf;
	assert_int_equal(pt_zip_write_plan(p, f.z, plan, n, NULL, NULL, &err),
			 0);
	fz_close(&f);
	check_plan(p, NULL, 0, NULL, 256);
	fz_open(&f, p);
	e = fz_find(&f, "data/2");
	assert_true(e->data_off - (e->lho + 30 + e->name_len + 4) < 256);
	assert_true(e->lho != snap_find(old, nold, e->name)->lho);
	fz_close(&f);
	assert_true(no_temp_files());
	snap_free(old, nold);
	unlink(p);
}

/*
 * The space check: on a 4 MiB tmpfs a plan that needs more fails with
 * -ENOSPC before anything is created; one that fits is written; a rewrite
 * of a 2.5 MiB archive needs a second copy's room and fails up front.
 */
static void test_plan_space(void **state)
{
	char dir[512];
	char p[600];
	uint8_t *a;
	size_t na;
	struct fz f;
	struct pt_zw_rec plan[16];
	struct pt_zw_change big = { 0 };
	struct pt_error err;
	size_t n;
	int rc;

	(void)state;
	if (!have_python())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no " PY " with zipfile");
	if (geteuid() != 0)
		PTFS_SKIP("PTFS_REQUIRE_ROOT", "not root: no tmpfs to fill");
	pathf(dir, sizeof(dir), "small");
	assert_int_equal(mkdir(dir, 0700), 0);
	if (mount("tmpfs", dir, "tmpfs", 0, "size=4m") != 0)
		PTFS_SKIP("PTFS_REQUIRE_ROOT", "mount tmpfs: %s",
			  strerror(errno));
	snprintf(p, sizeof(p), "%s/m.zip", dir);
	make_pyzip(p);
	a = slurp(p, &na);
	fz_open(&f, p);
	n = plan_keep_all(&f, plan, 15);
	memset(&plan[n], 0, sizeof(plan[n]));
	plan[n].name = "q/big";
	plan[n].change = &big;
	big.read = pat_read;
	big.size = 8 << 20;
	pt_error_clear(&err);
	rc = pt_zip_write_plan(p, f.z, plan, n + 1, NULL, NULL, &err);
	assert_int_equal(rc, -ENOSPC);
	if (!strstr(err.msg, "commit: needs ") || !strstr(err.msg, " free") ||
	    !strstr(err.msg, dir))
		fail_msg("message: %s", err.msg);
	assert_same(p, a, na);
	assert_true(no_temp_in(dir));

	big.size = 5 << 19;     /* 2.5 MiB */
	rc = pt_zip_write_plan(p, f.z, plan, n + 1, NULL, NULL, &err);
	fz_close(&f);
	if (rc)
		fail_msg("%d %s", rc, err.msg);
	check_archive(p, false);
	free(a);
	a = slurp(p, &na);
	fz_open(&f, p);
	pt_error_clear(&err);
	assert_int_equal(pt_zip_rewrite(p, f.z, NULL, 0, NULL, NULL, &err),
			 -ENOSPC);
	assert_non_null(strstr(err.msg, "commit: needs "));
	fz_close(&f);
	assert_same(p, a, na);
	assert_true(no_temp_in(dir));
	free(a);
	unlink(p);
	assert_int_equal(umount(dir), 0);
	rmdir(dir);
}

/* A plan that drops, keeps verbatim, moves and adds records of @f. */
static size_t plan_mixed(struct fz *f, struct pt_zw_rec *plan,
			 struct pt_zw_change *add)
{
	size_t n = plan_keep_all(f, plan, 15);

	n = plan_drop(f, plan, n, "empty");
	memset(&plan[n], 0, sizeof(plan[n]));
	memset(add, 0, sizeof(*add));
	add->size = 5000;
	add->read = pat_read;
	plan[n].name = "q/new";
	plan[n].change = add;
	return n + 1;
}

/*
 * Every step of a plan's commit can fail (ENOSPC) or die (SIGKILL): the
 * original stays as it was, and no temporary file is left (after a kill,
 * none the sweep would not remove).
 */
static void test_plan_faults(void **state)
{
	static const char *const steps[] = {
		"create", "owner", "mode", "write", "copy", "fsync", "close",
		"rename",
	};
	char p[512];
	char note[256];
	uint8_t *a;
	size_t na;
	struct fz f;
	struct pt_zw_rec plan[16];
	struct pt_zw_change add;
	struct pt_error err;
	size_t n;
	size_t i;
	pid_t pid;
	int st;
	int rc;

	(void)state;
	if (!have_python())
		PTFS_SKIP("PTFS_REQUIRE_PYTHON", "no " PY " with zipfile");
	pathf(p, sizeof(p), "faults.zip");
	make_pyzip(p);
	a = slurp(p, &na);
	fz_open(&f, p);
	n = plan_mixed(&f, plan, &add);
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		pt_fault_set(steps[i], 1, ENOSPC);
		pt_error_clear(&err);
		rc = pt_zip_write_plan(p, f.z, plan, n, NULL, NULL, &err);
		pt_fault_set(NULL, 0, 0);
		if (rc != -ENOSPC)
			fail_msg("step %s: %d %s", steps[i], rc, err.msg);
		assert_non_null(strstr(err.msg, strerror(ENOSPC)));
		assert_null(strchr(err.msg, '\n'));
		assert_same(p, a, na);
		assert_true(no_temp_files());
	}
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			pt_fault_set(steps[i], 1, -1);
			pt_error_clear(&err);
			pt_zip_write_plan(p, f.z, plan, n, NULL, NULL, &err);
			_exit(3);
		}
		assert_int_equal(waitpid(pid, &st, 0), pid);
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
			fail_msg("step %s: not killed (%d)", steps[i], st);
		assert_same(p, a, na);
		pt_replace_sweep(p, false, true, note, sizeof(note));
		assert_true(no_temp_files());
	}
	/* the plan reaches every step; then it is written */
	pt_fault_set(NULL, 0, 0);
	pt_error_clear(&err);
	assert_int_equal(pt_zip_write_plan(p, f.z, plan, n, NULL, NULL, &err),
			 0);
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (pt_fault_count(steps[i]) == 0)
			fail_msg("the plan never reached step %s", steps[i]);
	fz_close(&f);
	check_archive(p, false);
	fz_open(&f, p);
	assert_null(pt_zip_find_rel(f.z, "empty"));
	assert_int_equal(fz_find(&f, "new")->usize, 5000);
	fz_close(&f);
	free(a);
	unlink(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32),
		cmocka_unit_test(test_identity_torch),
		cmocka_unit_test(test_same_size_torch),
		cmocka_unit_test(test_size_change_torch),
		cmocka_unit_test(test_many_records),
		cmocka_unit_test(test_zip64_extra_and_deflate),
		cmocka_unit_test(test_atomic),
		cmocka_unit_test(test_write_error),
		cmocka_unit_test(test_mode_owner_symlink),
		cmocka_unit_test(test_big_zip64_torch),
		cmocka_unit_test(test_plan_drop),
		cmocka_unit_test(test_plan_add_reorder_torch),
		cmocka_unit_test(test_plan_replace_drop),
		cmocka_unit_test(test_plan_bad),
		cmocka_unit_test(test_plan_alignment),
		cmocka_unit_test(test_plan_space),
		cmocka_unit_test(test_plan_faults),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
