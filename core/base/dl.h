/* SPDX-License-Identifier: MIT */
/*
 * dl.h -- shared libraries that only some commands need, loaded with
 * dlopen() on first use: libarchive for tar checkpoints (fmt/tar.c),
 * libcrypto for sha256 (view/stats.c), libcurl for remote checkpoints (remote/curl_dl.h).
 * Linked, they and what they pull in (libxml2, ICU, libstdc++, lzma, zstd,
 * ...) are mapped and relocated by every ptfs process, `ptfs ls` of a
 * safetensors file as much as a mount; loaded on demand, only the process
 * that meets a tar checkpoint or hashes a tensor pays for them.
 *
 * A user lists the library's functions once, gets a table of pointers
 * typed from the library's own header, and then redirects the names to
 * the table, so the code calls them as usual:
 *
 *	#define ARC_FNS(X) X(archive_read_new) X(archive_read_free)
 *	PT_DL_DEFINE(arc, ARC_FNS, "libarchive.so.13",
 *		     "tar checkpoints need libarchive (Debian: libarchive13)");
 *	#define archive_read_new arc_fn.archive_read_new      (after the above)
 *	...
 *	if (pt_dl_load(&arc_dl, err)) return err->code;
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
/* Every name of a list in one string, each ending in a NUL. */
#define PT_DL_NAME(fn) #fn "\0"
#define PT_DL_ONE(fn) + 1

struct pt_dl {
	const char *soname;             /* "libarchive.so.13" */
	const char *need;               /* "tar checkpoints need libarchive (Debian: libarchive13)" */
	void *table;                    /* one function pointer per name, in
					 * the names' order: filled by
					 * pt_dl_load */
	const char *names;              /* "a\0b\0...\0" */
	int state;                      /* 0 not tried, 1 loaded, <0 failed */
	char msg[240];                  /* why it failed */
};

/*
 * @var_fn, the table of the functions the X-macro @FNS lists, and
 * @var_dl, the library that fills it.
 */
#define PT_DL_DEFINE(var, FNS, soname, need) \
	static struct { FNS(PT_DL_FIELD) } var##_fn; \
	PT_DL_CHECK(var, FNS); \
	static struct pt_dl var##_dl = PT_DL_INIT(var, FNS, soname, need)

/*
 * The same for a library that several files call (libcurl, core/remote):
 * PT_DL_DECLARE in the header they share, before the names are redirected
 * to the table, and PT_DL_DEFINE_SHARED in the one file that loads it
 * (@var_dl is that file's own).
 */
#define PT_DL_DECLARE(var, FNS) \
	struct var##_fns { FNS(PT_DL_FIELD) }; \
	extern struct var##_fns var##_fn
#define PT_DL_DEFINE_SHARED(var, FNS, soname, need) \
	struct var##_fns var##_fn; \
	PT_DL_CHECK(var, FNS); \
	static struct pt_dl var##_dl = PT_DL_INIT(var, FNS, soname, need)

#define PT_DL_CHECK(var, FNS) \
	_Static_assert(sizeof(var##_fn) == \
		       (0 FNS(PT_DL_ONE)) * sizeof(void (*)(void)), \
		       "one function pointer per name, no padding")
#define PT_DL_INIT(var, FNS, soname, need) \
	{ (soname), (need), &var##_fn, FNS(PT_DL_NAME), 0, "" }

/*
 * Load @dl's library and fill its table, once per process (thread-safe;
 * after the first call, one atomic load).  0, or -ENOTSUP with one line
 * in @err that says what needs the library, its Debian package and why
 * it could not be loaded (missing file, missing symbol).  The library
 * stays loaded until the process ends.
 */
int pt_dl_load(struct pt_dl *dl, struct pt_error *err);

#endif /* PTFS_CORE_BASE_DL_H */
