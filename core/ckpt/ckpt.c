/* SPDX-License-Identifier: MIT */
/*
 * ckpt.c -- open a checkpoint: detect its container from its bytes, hand it
 * to that format's module, interpret the result and build the tree root.
 */
#include "ckpt/ckpt_i.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void pt_ckpt_opts_default(struct pt_ckpt_opts *o)
{
	memset(o, 0, sizeof(*o));
	pt_limits_default(&o->limits);
}

void *pt__own(struct pt_ckpt *ck, void *p)
{
	if (!p)
		return NULL;
	if (ck->n_owned == ck->cap_owned) {
		size_t nc = ck->cap_owned ? ck->cap_owned * 2 : 256;
		void **q = realloc(ck->owned, nc * sizeof(*q));
		if (!q) {
			free(p);
			return NULL;
		}
		ck->owned = q;
		ck->cap_owned = nc;
	}
	ck->owned[ck->n_owned++] = p;
	return p;
}

/* pt__alloc() blocks: 64 KiB, or one of its own for a big request. */
#define PT_BLK_SIZE (64u << 10)

struct pt_blk {
	struct pt_blk *next;
	size_t used, size;
	max_align_t data[];
};

void *pt__alloc(struct pt_ckpt *ck, size_t n)
{
	struct pt_blk *b = ck->blks;
	size_t need = n ? (n + 15) & ~(size_t)15 : 16;
	uint8_t *p;

	if (need < n)
		return NULL;
	if (need > PT_BLK_SIZE / 4) {
		if (need > SIZE_MAX - sizeof(*b))
			return NULL;
		b = malloc(sizeof(*b) + need);
		if (!b)
			return NULL;
		b->used = b->size = need;
		/* behind the head, which keeps filling */
		b->next = ck->blks ? ck->blks->next : NULL;
		if (ck->blks)
			ck->blks->next = b;
		else
			ck->blks = b;
		memset(b->data, 0, n);
		return b->data;
	}
	if (!b || b->size - b->used < need) {
		b = malloc(sizeof(*b) + PT_BLK_SIZE);
		if (!b)
			return NULL;
		b->used = 0;
		b->size = PT_BLK_SIZE;
		b->next = ck->blks;
		ck->blks = b;
	}
	p = (uint8_t *)b->data + b->used;
	b->used += need;
	memset(p, 0, n);
	return p;
}

int pt__add_meta_file(struct pt_ckpt *ck, const char *name, void *data,
		      size_t len)
{
	struct pt_meta_file *m;

	if (!pt__own(ck, data))
		return -ENOMEM;
	if (ck->n_meta_files == PT_MAX_META_FILES)
		return -EFBIG;
	m = &ck->meta_files[ck->n_meta_files++];
	m->name = name;
	m->data = data;
	m->len = len;
	return 0;
}

int pt__add_meta_dir(struct pt_ckpt *ck, const char *name,
		     struct pt_value *root, const char *records)
{
	struct pt_meta_dir *m;

	if (ck->n_meta_dirs == PT_MAX_META_DIRS)
		return -EFBIG;
	m = &ck->meta_dirs[ck->n_meta_dirs++];
	m->name = name;
	m->root = root;
	m->records = records;
	return 0;
}

void pt__warn(struct pt_ckpt *ck, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (ck->warnings.p && strstr(ck->warnings.p, line))
		return;
	pt_buf_puts(&ck->warnings, line);
	pt_buf_putc(&ck->warnings, '\n');
}

/* Keep a decoded pickle (and its bytes, unless @borrowed) until close. */
static int keep_pickle(struct pt_ckpt *ck, struct pt_pickle *pk, uint8_t *buf,
		       size_t len, const char *label, uint64_t file_off,
		       bool borrowed, struct pt_error *err)
{
	struct pt_pickled *pd;

	if (ck->n_pickles == PT_MAX_PICKLES) {
		pt_pickle_free(pk);
		if (!borrowed)
			free(buf);
		return pt_fail(err, -EFBIG, "too many pickles");
	}
	pd = &ck->pickles[ck->n_pickles++];
	pd->pk = pk;
	pd->buf = buf;
	pd->len = len;
	pd->label = label;
	pd->file_off = file_off;
	pd->borrowed = borrowed;
	return 0;
}

int pt__load_pickle(struct pt_ckpt *ck, uint8_t *buf, size_t len,
		    const char *label, uint64_t file_off,
		    struct pt_value **root, size_t *used, struct pt_error *err)
{
	struct pt_pickle *pk = NULL;
	size_t u = 0;
	int rc;

	if (len > ck->opts.limits.max_pickle_bytes) {
		free(buf);
		return pt_fail(err, -EFBIG,
			       "%s: %zu bytes exceeds the pickle limit of %" PRIu64,
			       label, len, ck->opts.limits.max_pickle_bytes);
	}
	rc = pt_pickle_load(&pk, buf, len, &u, &ck->opts.limits, err);
	if (rc) {
		pt_error_prefix(err, "%s", label);
		free(buf);
		return rc;
	}
	rc = keep_pickle(ck, pk, buf, len, label, file_off, false, err);
	if (rc)
		return rc;
	*root = pt_pickle_root(pk);
	if (used)
		*used = u;
	return 0;
}

int pt__add_pickle(struct pt_ckpt *ck, struct pt_pickle *pk, uint8_t *buf,
		   size_t len, const char *label, uint64_t file_off,
		   struct pt_error *err)
{
	return keep_pickle(ck, pk, buf, len, label, file_off, true, err);
}

/* Globals whose presence means a full unpickler would run code. */
static const char *const dangerous_modules[] = {
	"os", "posix", "nt", "subprocess", "sys", "builtins", "__builtin__",
	"socket", "shutil", "runpy", "pty", "commands", "webbrowser",
	"importlib", "pickle", "_pickle", "marshal", "ctypes", "code",
	"pdb", "timeit", "bdb", "operator", "functools", "types", "platform",
	"asyncio", "multiprocessing", "requests", "urllib", "http", "ssl",
	"tempfile", "glob", "io", "codecs", "zipimport", "pip", "setuptools",
	"distutils", "numpy.testing", "torch.hub", "torch.serialization",
	"torch.jit", "torch._inductor", "torch.utils.cpp_extension",
};

static const char *const safe_builtins[] = {
	"set", "frozenset", "bytearray", "bytes", "complex", "dict", "list",
	"tuple", "slice", "object", "int", "float", "str", "bool", "range",
};

static bool global_is_dangerous(const char *m, const char *n)
{
	size_t i;

	if (strcmp(m, "builtins") == 0 || strcmp(m, "__builtin__") == 0) {
		for (i = 0; i < sizeof(safe_builtins) / sizeof(*safe_builtins); i++)
			if (strcmp(n, safe_builtins[i]) == 0)
				return false;
		return true;
	}
	if (strcmp(m, "torch.serialization") == 0 && strcmp(n, "_get_layout") == 0)
		return false;
	if (strcmp(m, "torch.jit._pickle") == 0)
		return false;
	for (i = 0; i < sizeof(dangerous_modules) / sizeof(*dangerous_modules); i++) {
		size_t k = strlen(dangerous_modules[i]);
		if (strncmp(m, dangerous_modules[i], k) == 0 &&
		    (m[k] == '\0' || m[k] == '.'))
			return true;
	}
	if (strcmp(m, "torch") == 0 && strcmp(n, "load") == 0)
		return true;
	if (strcmp(m, "torch.storage") == 0 && strcmp(n, "_load_from_bytes") == 0)
		return true;
	return false;
}

/* List each distinct global once in the summary ("imports: ..."), as the
 * names a full unpickler would import; capped so a hostile file cannot
 * make the summary huge. */
static void note_global(struct pt_ckpt *ck, const char *m, const char *n)
{
	char name[256];

	snprintf(name, sizeof(name), " %s.%s,", m, n);
	if (ck->globals.len > 8192 || (ck->globals.p && strstr(ck->globals.p, name)))
		return;
	pt_buf_puts(&ck->globals, name);
}

void pt__note_global(struct pt_ckpt *ck, const struct pt_value *g)
{
	const char *m = g->u.global.module, *n = g->u.global.name;

	if (g->id == UINT32_MAX) /* made by a format, not named by the file */
		return;
	note_global(ck, m, n);
	if (global_is_dangerous(m, n))
		pt__warn(ck, "dangerous global %s.%s: a full unpickler (torch.load with weights_only=False) would import it",
			 m, n);
}

static char *make_stem(const char *path)
{
	const char *base = strrchr(path, '/');
	const char *dot;
	char *s;

	base = base ? base + 1 : path;
	dot = strrchr(base, '.');
	if (!dot || dot == base)
		dot = base + strlen(base);
	s = strndup(base, (size_t)(dot - base));
	return s;
}

static int ckpt_init(struct pt_ckpt **out, const char *path,
		     const struct pt_ckpt_opts *opts, struct pt_error *err)
{
	struct pt_ckpt *ck = calloc(1, sizeof(*ck));

	*out = NULL;
	if (!ck)
		return pt_fail(err, -ENOMEM, "out of memory");
	ck->byteorder = '<';
	if (opts)
		ck->opts = *opts;
	else
		pt_ckpt_opts_default(&ck->opts);
	pt_buf_init(&ck->warnings);
	pt_buf_init(&ck->notes);
	pt_buf_init(&ck->globals);
	/* absolute: the daemon chdir()s to / when it detaches, and a commit
	 * must still find the file (a memory source keeps its name) */
	ck->path = path[0] == '/' ? strdup(path) : realpath(path, NULL);
	if (!ck->path)
		ck->path = strdup(path);
	ck->stem = make_stem(path);
	if (!ck->path || !ck->stem) {
		pt_ckpt_close(ck);
		return pt_fail(err, -ENOMEM, "out of memory");
	}
	*out = ck;
	return 0;
}

static int ckpt_load(struct pt_ckpt *ck, struct pt_error *err)
{
	uint8_t head[PT_PROBE_HEAD];
	size_t n = ck->src->size < sizeof(head) ? (size_t)ck->src->size : sizeof(head);
	size_t i;
	int rc;

	if (ck->src->size == 0)
		return pt_fail(err, -EBADMSG, "empty file, not a checkpoint");
	rc = pt_source_read(ck->src, head, n, 0, err);
	if (rc)
		return rc;
	for (i = 0; pt_formats[i]; i++) {
		rc = pt_formats[i]->probe(ck, head, n, err);
		if (rc < 0)
			return rc;
		if (rc > 0) {
			ck->fmt = pt_formats[i];
			break;
		}
	}
	if (!ck->fmt)
		return pt_fail(err, -ENOTSUP,
			       "not a PyTorch checkpoint (unrecognised format, first bytes %02x %02x %02x %02x)",
			       head[0], n > 1 ? head[1] : 0, n > 2 ? head[2] : 0,
			       n > 3 ? head[3] : 0);
	rc = ck->fmt->open(ck, err);
	if (rc)
		return rc;
	rc = pt__classify(ck, err);
	if (rc)
		return rc;
	for (i = 0; i < (size_t)ck->n_meta_dirs; i++) {
		if (!ck->meta_dirs[i].root)
			continue;
		rc = pt__classify_value(ck, ck->meta_dirs[i].root, err);
		if (rc) {
			pt_error_prefix(err, "/.ptfs/%s", ck->meta_dirs[i].name);
			return rc;
		}
	}
	return pt__tree_new(ck, err);
}

/* The file to open for directory @dir, from the first format whose
 * probe_dir() claims it (malloc()ed in *@out). */
static int probe_dir(const char *dir, char **out, struct pt_error *err)
{
	size_t i;
	int rc;

	*out = NULL;
	for (i = 0; pt_formats[i]; i++) {
		if (!pt_formats[i]->probe_dir)
			continue;
		rc = pt_formats[i]->probe_dir(dir, out, err);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	return pt_fail(err, -EISDIR, "is a directory, not a checkpoint");
}

/* A checkpoint over @src (owned from here on, also on failure): bare, or
 * loaded (probed and opened) when @load. */
static int ckpt_of_source(struct pt_ckpt **out, struct pt_source *src,
			  bool load, const struct pt_ckpt_opts *opts,
			  struct pt_error *err)
{
	struct pt_ckpt *ck = NULL;
	int rc;

	*out = NULL;
	rc = ckpt_init(&ck, src->name, opts, err);
	if (rc) {
		pt_source_close(src);
		return rc;
	}
	ck->src = src;
	rc = load ? ckpt_load(ck, err) : 0;
	if (rc) {
		pt_ckpt_close(ck);
		return rc;
	}
	*out = ck;
	return 0;
}

int pt__ckpt_open_raw(struct pt_ckpt **out, struct pt_source *src,
		      const struct pt_ckpt_opts *opts, struct pt_error *err)
{
	return ckpt_of_source(out, src, false, opts, err);
}

int pt__ckpt_open_source(struct pt_ckpt **out, struct pt_source *src,
			 const struct pt_ckpt_opts *opts, struct pt_error *err)
{
	return ckpt_of_source(out, src, true, opts, err);
}

int pt_ckpt_open_source(struct pt_ckpt **out, struct pt_source *src,
			const struct pt_ckpt_opts *opts, struct pt_error *err)
{
	return ckpt_of_source(out, src, true, opts, err);
}

int pt_ckpt_open(struct pt_ckpt **out, const char *path,
		 const struct pt_ckpt_opts *opts, struct pt_error *err)
{
	struct pt_ckpt *ck = NULL;
	struct stat st;
	int rc;

	*out = NULL;
	rc = ckpt_init(&ck, path, opts, err);
	if (rc)
		return rc;
	if (stat(ck->path, &st) == 0 && S_ISDIR(st.st_mode)) {
		/* a distributed checkpoint (a .metadata file, FORMAT.md §0,
		 * §7) opens its .metadata (fmt/dcp.c), a directory of shards
		 * its *.index.json (fmt/sharded.c); ck->path names that file
		 * from here on */
		char *index = NULL;

		rc = probe_dir(path, &index, err);
		if (rc)
			goto out;
		free(ck->path);
		ck->path = index;
	}
	/* an interrupted in-place commit is rolled back before anything
	 * reads the file (container/journal.h) */
	rc = pt_journal_recover(ck->path, ck->recovery, sizeof(ck->recovery), err);
	if (rc < 0)
		goto out;
	rc = pt_source_open_file(ck->path, &ck->src, err);
	if (rc)
		goto out;
	rc = ckpt_load(ck, err);
	if (rc == 0 && ck->recovery[0])
		pt_buf_printf(&ck->notes, "journal: %s\n", ck->recovery);
	if (rc)
		goto out;
	*out = ck;
	ck = NULL;
out:
	pt_ckpt_close(ck);
	return rc;
}

int pt_ckpt_open_mem(struct pt_ckpt **out, const void *mem, size_t len,
		     const char *name, const struct pt_ckpt_opts *opts,
		     struct pt_error *err)
{
	struct pt_ckpt *ck = NULL;
	int rc;

	*out = NULL;
	rc = ckpt_init(&ck, name, opts, err);
	if (rc)
		return rc;
	rc = pt_source_mem(mem, len, ck->path, &ck->src, err);
	if (!rc)
		rc = ckpt_load(ck, err);
	if (rc) {
		pt_ckpt_close(ck);
		return rc;
	}
	*out = ck;
	return 0;
}

void pt_ckpt_close(struct pt_ckpt *ck)
{
	size_t i;
	int k;

	if (!ck)
		return;
	pt__tree_free(ck);
	if (ck->fmt && ck->fmt->close)
		ck->fmt->close(ck);
	for (k = 0; k < ck->n_pickles; k++) {
		pt_pickle_free(ck->pickles[k].pk);
		if (!ck->pickles[k].borrowed)
			free(ck->pickles[k].buf);
	}
	{
		struct pt_storage *s, *tmp;
		HASH_ITER(hh, ck->storages, s, tmp) {
			HASH_DEL(ck->storages, s);
		}
	}
	pt_zip_close(ck->zip);
	for (i = 0; i < ck->n_owned; i++)
		free(ck->owned[i]);
	free(ck->owned);
	while (ck->blks) {
		struct pt_blk *b = ck->blks;

		ck->blks = b->next;
		free(b);
	}
	pt_buf_free(&ck->warnings);
	pt_buf_free(&ck->notes);
	pt_buf_free(&ck->globals);
	pt_source_close(ck->src);
	free(ck->path);
	free(ck->stem);
	free(ck);
}

const char *pt_ckpt_warnings(const struct pt_ckpt *ck)
{
	return ck->warnings.p ? ck->warnings.p : "";
}

const char *pt_ckpt_format(const struct pt_ckpt *ck)
{
	if (ck->kind_name)
		return ck->kind_name;
	return ck->fmt ? ck->fmt->name : "unknown";
}

int pt_ckpt_read(const struct pt_ckpt *ck, void *buf, size_t n,
		 uint64_t off, struct pt_error *err)
{
	return pt_source_read(ck->src, buf, n, off, err);
}

bool pt_ckpt_extent(const struct pt_ckpt *ck, uint64_t off, uint64_t n,
		    int *fd, uint64_t *file_off)
{
	return pt_source_extent(ck->src, off, n, fd, file_off);
}

int pt_ckpt_check(const struct pt_ckpt *ck, struct pt_error *err)
{
	return pt_source_check(ck->src, PT_CHECK_READS, err);
}

uint64_t pt_ckpt_size(const struct pt_ckpt *ck)
{
	return ck->src->size;
}

struct timespec pt_ckpt_mtime(const struct pt_ckpt *ck)
{
	return ck->src->mtime;
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
	struct pt_storage *s, *tmp;
	struct {
		const char *name;
		uint64_t count;
		uint64_t bytes;
	} dt[48];
	size_t ndt = 0, i;
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
	HASH_ITER(hh, ck->storages, s, tmp) {
		const char *name = s->dtype ? s->dtype->name : "?";
		sbytes += s->nbytes;
		for (i = 0; i < ndt; i++)
			if (strcmp(dt[i].name, name) == 0)
				break;
		if (i == ndt && ndt < 48)
			dt[ndt++].name = name;
		if (i < 48) {
			dt[i].count++;
			dt[i].bytes += s->nbytes;
		}
	}
	pt_buf_printf(out, "storages: %llu (", (unsigned long long)HASH_COUNT(ck->storages));
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

/* ---- commits ---- */

uint64_t pt_storage_size(const struct pt_storage *st)
{
	return st->nbytes;
}

uint64_t pt_storage_file_offset(const struct pt_storage *st)
{
	return st->file_off;
}

size_t pt_storage_index(const struct pt_storage *st)
{
	return (size_t)st->id;
}

size_t pt_ckpt_storage_count(const struct pt_ckpt *ck)
{
	return (size_t)ck->n_storages;
}

const char *pt_storage_record(const struct pt_storage *st)
{
	return st->entry ? st->entry->name : st->key;
}

void pt_ckpt_set_storage_hook(struct pt_ckpt *ck, pt_storage_hook fn,
			      void *ctx)
{
	ck->hook_ctx = ctx;
	ck->hook = fn;
}

bool pt_ckpt_writable(const struct pt_ckpt *ck)
{
	return pt_source_local_path(ck->src) && ck->fmt && ck->fmt->commit;
}

const char *pt_ckpt_last_commit(const struct pt_ckpt *ck)
{
	return ck->last_commit;
}

const char *pt_ckpt_recovery(const struct pt_ckpt *ck)
{
	return ck->recovery;
}

/*
 * The ZIP64 rewriter may have moved records (an archive not in torch's
 * layout, e.g. written by Python's zipfile): index the new file and move
 * every storage and pickle offset with its record.  The commit is done
 * whatever happens here: a problem is a warning.
 */
static void reindex_after_commit(struct pt_ckpt *ck)
{
	struct pt_error err;
	struct pt_zip *fresh = NULL;
	uint64_t **offs;
	size_t n = 0;

	pt_error_clear(&err);
	offs = calloc((size_t)ck->n_storages + (size_t)ck->n_pickles + 1, sizeof(*offs));
	if (offs && pt_zip_open(&fresh, ck->src, &ck->opts.limits, &err) == 0) {
		struct pt_storage *s, *tmp;
		int k;

		HASH_ITER(hh, ck->storages, s, tmp)
			if (s->kind == PT_ST_FILE && !s->home)
				offs[n++] = &s->file_off;
		for (k = 0; k < ck->n_pickles; k++)
			offs[n++] = &ck->pickles[k].file_off;
		(void)pt_zip_adopt_layout(ck->zip, fresh, offs, n, &err);
	}
	if (!offs)
		pt_fail(&err, -ENOMEM, "out of memory");
	if (err.code)
		pt__warn(ck, "after the commit: %s; remount to read the new file", err.msg);
	pt_zip_close(fresh);
	free(offs);
}

int pt_ckpt_commit(struct pt_ckpt *ck, const struct pt_commit *c, size_t n,
		   struct pt_error *err)
{
	struct pt_error e2;
	size_t i;
	int rc;

	if (!pt_ckpt_writable(ck))
		return pt_fail(err, -EROFS, "%s checkpoints cannot be written",
			       pt_ckpt_format(ck));
	if (n == 0)
		return 0;
	for (i = 0; i < n; i++)
		if (!c[i].st->writable || c[i].st->kind != PT_ST_FILE)
			return pt_fail(err, -EROFS, "storage '%s' cannot be written",
				       c[i].st->key);
	ck->commit_moved = false;
	rc = ck->fmt->commit(ck, c, n, err);
	if (rc)
		return rc;
	/*
	 * Renamed or patched: that is the commit, and it is never reported
	 * as failed from here on.  Read the new file through the same
	 * descriptor number; after the rewriter moved records, index it
	 * again.  A problem is a warning (the mount logs it).
	 */
	pt_error_clear(&e2);
	if (pt_source_reopen(ck->src, &e2) != 0)
		pt__warn(ck, "after the commit: %s; remount to read the new file", e2.msg);
	else if (ck->commit_moved && ck->zip)
		reindex_after_commit(ck);
	return 0;
}
