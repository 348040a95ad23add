/* SPDX-License-Identifier: MIT */
/*
 * info.c -- what ckpt.h tells of an open checkpoint's state: its warnings,
 * its format's name, how many commits and layout changes it has seen, and
 * the summary `ptfs info` and /.ptfs/info.txt show.  Apart from ckpt.c,
 * so that the formats (a sharded index reports its shards' formats and
 * warnings) and the tree (which asks for the commit counts) read them
 * without a cycle through ckpt.c, which calls both.
 */
#include "ckpt/ckpt_i.h"

#include <string.h>

const char *pt_ckpt_warnings(const struct pt_ckpt *ck)
{
	return ck->warnings.p ? ck->warnings.p : "";
}

/* Counted by ckpt.c's commits. */
uint64_t pt_ckpt_layout_gen(const struct pt_ckpt *ck)
{
	return __atomic_load_n(&ck->layout_gen, __ATOMIC_ACQUIRE);
}

uint64_t pt_ckpt_tensor_reads(const struct pt_ckpt *ck)
{
	return __atomic_load_n(&ck->tensor_reads, __ATOMIC_RELAXED);
}

uint32_t pt_ckpt_commits(const struct pt_ckpt *ck)
{
	return __atomic_load_n(&ck->commits, __ATOMIC_ACQUIRE);
}

const char *pt_ckpt_format(const struct pt_ckpt *ck)
{
	if (ck->kind_name)
		return ck->kind_name;
	return ck->fmt ? ck->fmt->name : "unknown";
}

static void human(struct pt_buf *out, uint64_t n)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		pt_buf_printf(out, "%llu B", (unsigned long long)n);
	else
		pt_buf_printf(out, "%.1f %s", v, units[u]);
}

void pt_ckpt_info(struct pt_ckpt *ck, struct pt_buf *out)
{
	struct {
		const char *name;
		uint64_t count;
		uint64_t bytes;
	} dt[48];
	size_t ndt = 0, i, k;
	uint64_t sbytes = 0;

	memset(dt, 0, sizeof(dt));
	pt_buf_printf(out, "file: %s\n", ck->path);
	pt_buf_printf(out, "format: %s\n", pt_ckpt_format(ck));
	pt_buf_printf(out, "size: %llu bytes\n", (unsigned long long)ck->src->size);
	if (ck->zip) {
		const struct pt_zip_info *zi = pt_zip_info(ck->zip);
		pt_buf_printf(out, "records: %llu\n", (unsigned long long)zi->n_entries);
		pt_buf_printf(out, "archive prefix: %s\n", zi->prefix[0] ? zi->prefix : "(none)");
	}
	if (ck->version)
		pt_buf_printf(out, "format version: %s\n", ck->version);
	pt_buf_printf(out, "byte order: %s\n", ck->byteorder == '>' ? "big" : "little");
	for (i = 0; i < (size_t)ck->n_pickles; i++)
		if (ck->pickles[i].pk)
			pt_buf_printf(out, "pickle %s: protocol %d, %zu bytes, %u values\n",
				      ck->pickles[i].label,
				      pt_pickle_protocol(ck->pickles[i].pk),
				      ck->pickles[i].len,
				      pt_pickle_count(ck->pickles[i].pk));
	for (k = 0; k < ck->n_st; k++) {
		const struct pt_storage *s = ck->st_list[k];
		const char *name = s->dtype ? s->dtype->name : "?";
		sbytes += s->nbytes;
		/* names of one dtype are one string: compare pointers first */
		for (i = 0; i < ndt; i++)
			if (dt[i].name == name || strcmp(dt[i].name, name) == 0)
				break;
		if (i == ndt && ndt < 48)
			dt[ndt++].name = name;
		if (i < 48) {
			dt[i].count++;
			dt[i].bytes += s->nbytes;
		}
	}
	pt_buf_printf(out, "storages: %llu (", (unsigned long long)ck->n_st);
	human(out, sbytes);
	pt_buf_puts(out, ")\n");
	pt_buf_printf(out, "tensors: %llu (", (unsigned long long)ck->n_tensors);
	human(out, ck->tensor_bytes);
	pt_buf_puts(out, " of elements)\n");
	if (ndt) {
		pt_buf_puts(out, "storage dtypes:");
		for (i = 0; i < ndt; i++) {
			pt_buf_printf(out, "%s %s x%llu (", i ? "," : "", dt[i].name,
				      (unsigned long long)dt[i].count);
			human(out, dt[i].bytes);
			pt_buf_putc(out, ')');
		}
		pt_buf_putc(out, '\n');
	}
	if (ck->globals.len) {
		pt_buf_puts(out, "imports:");
		pt_buf_add(out, ck->globals.p, ck->globals.len - 1);
		pt_buf_puts(out, ck->globals.len > 8192 ? ", ...\n" : "\n");
	}
	if (ck->notes.len)
		pt_buf_add(out, ck->notes.p, ck->notes.len);
	if (ck->warnings.len) {
		const char *p = ck->warnings.p;
		while (*p) {
			const char *e = strchr(p, '\n');
			size_t len = e ? (size_t)(e - p) : strlen(p);
			pt_buf_puts(out, "warning: ");
			pt_buf_add(out, p, len);
			pt_buf_putc(out, '\n');
			p += len + (e ? 1 : 0);
		}
	} else {
		pt_buf_puts(out, "warnings: none\n");
	}
}
