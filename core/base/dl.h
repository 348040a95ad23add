/* SPDX-License-Identifier: MIT */
/*
 * dl.h -- shared libraries that only some commands need, loaded with
 * dlopen() on first use: libarchive for tar checkpoints (fmt/tar.c),
 * libcrypto for sha256 (view/stats.c), libpng for previews (view/png.c).
 * Linked, they and what they pull in (libxml2, ICU, libstdc++, lzma, zstd,
 * ...) are mapped and relocated by every ptfs process, `ptfs ls` of a
 * safetensors file as much as a mount; loaded on demand, only the process
 * that meets a tar checkpoint or draws a preview pays for them.
 *
 * A user keeps the library's functions in a table typed from the
 * library's own header, lists their names once, and then redirects the
 * names to the table, so the code calls them as usual:
 *
 *	#define PNG_FNS(X) X(png_create_write_struct) X(png_write_row)
 *	static struct { PNG_FNS(PT_DL_FIELD) } png_fn;
 *	#define PNG_SYM(fn) PT_DL_SYM(png_fn, fn)
 *	static const struct pt_dl_sym png_syms[] = { PNG_FNS(PNG_SYM) };
 *	static struct pt_dl png_dl = PT_DL_INIT("libpng16.so.16",
 *		"previews need libpng (Debian: libpng16-16)", &png_fn, png_syms);
 *	#define png_write_row png_fn.png_write_row      (after the above)
 *	...
 *	if (pt_dl_load(&png_dl, err)) return err->code;
 *
 * The build needs the library's headers only; the package still depends
 * on the library (CMakeLists.txt, CPACK_DEBIAN_PACKAGE_DEPENDS).
 */
#ifndef PTFS_CORE_BASE_DL_H
#define PTFS_CORE_BASE_DL_H

#include <stddef.h>

#include "base/error.h"

/* A field of a function table: a pointer of the function's own type. */
#define PT_DL_FIELD(fn) __typeof__(fn) *fn;
/* The entry of the name list for field @fn of table @table. */
#define PT_DL_SYM(table, fn) { #fn, offsetof(__typeof__(table), fn) },
#define PT_DL_INIT(soname, need, table, syms) \
	{ (soname), (need), (table), (syms), sizeof(syms) / sizeof((syms)[0]), 0, "" }

struct pt_dl_sym {
	const char *name;               /* the symbol */
	size_t off;                     /* of its pointer in the table */
};

struct pt_dl {
	const char *soname;             /* "libarchive.so.13" */
	const char *need;               /* "tar checkpoints need libarchive (Debian: libarchive13)" */
	void *table;                    /* the pointers, filled by pt_dl_load */
	const struct pt_dl_sym *syms;
	size_t n_syms;
	int state;                      /* 0 not tried, 1 loaded, <0 failed */
	char msg[240];                  /* why it failed */
};

/*
 * Load @dl's library and fill its table, once per process (thread-safe;
 * after the first call, one atomic load).  0, or -ENOTSUP with one line
 * in @err that says what needs the library, its Debian package and why
 * it could not be loaded (missing file, missing symbol).  The library
 * stays loaded until the process ends.
 */
int pt_dl_load(struct pt_dl *dl, struct pt_error *err);

#endif /* PTFS_CORE_BASE_DL_H */
