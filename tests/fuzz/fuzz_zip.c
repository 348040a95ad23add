/* SPDX-License-Identifier: MIT */
/*
 * fuzz_zip.c -- libFuzzer target for the ZIP index (core/container/zip.c).
 *
 * Opens the input as an archive over a memory source and, when the index
 * accepts it, reads every entry whole (pt_zip_read) and in pieces
 * (pt_zip_pread), checking what pt_zip_open() promises: every record lies
 * inside the file and before the central directory, names are
 * NUL-terminated with no NUL inside, lookups by name find the entry, and
 * reads return exactly the bytes the entry declares.
 */
#include <string.h>

#include "fuzz.h"
#include "base/pt_limits.h"
#include "io/source.h"
#include "container/zip.h"

/* Inflate at most this much per input: keeps each run fast and small. */
#define FUZZ_INFLATE_MAX (8u << 20)

static void check_entry(struct pt_zip *z, const struct pt_zip_info *in,
			const struct pt_zip_entry *e, uint64_t i,
			const uint8_t *data, uint64_t size)
{
	struct pt_error err = { 0 };
	uint8_t *buf = NULL;
	uint8_t piece[257];
	size_t len = 0;
	uint64_t off;
	int rc;

	FUZZ_CHECK(e->index == i);
	FUZZ_CHECK(e->name[e->name_len] == '\0');
	FUZZ_CHECK(strlen(e->name) == e->name_len);
	FUZZ_CHECK(e->name_len > 0);
	FUZZ_CHECK(e->method == PT_ZIP_STORED || e->method == PT_ZIP_DEFLATED);
	FUZZ_CHECK(e->data_off >= e->lho + 30);
	FUZZ_CHECK(e->data_off <= size);
	FUZZ_CHECK(e->csize <= size - e->data_off);
	FUZZ_CHECK(e->data_end == e->data_off + e->csize);
	FUZZ_CHECK(e->end >= e->data_end);
	FUZZ_CHECK(e->end <= in->cd_off);
	FUZZ_CHECK(in->cd_off + in->cd_size <= size);
	if (e->method == PT_ZIP_STORED)
		FUZZ_CHECK(e->usize == e->csize);
	FUZZ_CHECK(pt_zip_find(z, e->name) == e);
	FUZZ_CHECK(pt_zip_entry_at(z, i) == e);

	if (e->usize > FUZZ_INFLATE_MAX)
		return;
	rc = pt_zip_read(z, e, &buf, &len, &err);
	if (rc) {
		FUZZ_CHECK(rc < 0);
		FUZZ_CHECK(buf == NULL);
		FUZZ_CHECK(err.msg[0] != '\0');
		FUZZ_CHECK(e->method != PT_ZIP_STORED);
		return;
	}
	FUZZ_CHECK(len == e->usize);
	FUZZ_CHECK(buf[len] == 0);
	if (e->method == PT_ZIP_STORED)
		FUZZ_CHECK(len == 0 || memcmp(buf, data + e->data_off,
						   len) == 0);
	/* Reads in odd-sized pieces must reassemble the same bytes, and a
	 * read past the end returns 0. */
	for (off = 0; off < len; off += sizeof(piece)) {
		long long got = pt_zip_pread(z, e, piece, sizeof(piece), off,
					     &err);
		uint64_t want = len - off < sizeof(piece) ? len - off :
							    sizeof(piece);

		FUZZ_CHECK(got >= 0 && (uint64_t)got == want);
		FUZZ_CHECK(memcmp(piece, buf + off, (size_t)got) == 0);
		if (off >= 64 * sizeof(piece))
			break;
	}
	FUZZ_CHECK(pt_zip_pread(z, e, piece, sizeof(piece), len, &err) == 0);
	FUZZ_CHECK(pt_zip_pread(z, e, piece, sizeof(piece), UINT64_MAX,
				&err) == 0);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pt_source *src = NULL;
	struct pt_limits lim;
	struct pt_error err = { 0 };
	struct pt_zip *z = NULL;
	const struct pt_zip_info *in;
	uint64_t i;
	int rc;

	pt_limits_default(&lim);
	lim.max_records = 100000;
	lim.max_inflate_bytes = FUZZ_INFLATE_MAX;
	FUZZ_CHECK(pt_source_mem(data, size, "fuzz.zip", &src, &err) == 0);
	rc = pt_zip_open(&z, src, &lim, &err);
	if (rc) {
		pt_source_close(src);
		FUZZ_CHECK(rc < 0);
		FUZZ_CHECK(z == NULL);
		FUZZ_CHECK(err.code == rc);
		FUZZ_CHECK(err.msg[0] != '\0');
		return 0;
	}
	in = pt_zip_info(z);
	FUZZ_CHECK(in->n_entries <= lim.max_records);
	FUZZ_CHECK(in->prefix != NULL);
	FUZZ_CHECK(pt_zip_entry_at(z, in->n_entries) == NULL);
	for (i = 0; i < in->n_entries; i++)
		check_entry(z, in, pt_zip_entry_at(z, i), i, data, size);
	(void)pt_zip_find_rel(z, "data.pkl");
	pt_zip_close(z);
	pt_source_close(src);
	return 0;
}
