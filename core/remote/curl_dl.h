/* SPDX-License-Identifier: MIT */
/*
 * curl_dl.h -- libcurl, loaded with dlopen("libcurl.so.4") when the first
 * remote checkpoint is opened (base/dl.h), so that ptfs starts without
 * loading it (and OpenSSL behind it) for local files, and runs without it
 * installed.  core/remote includes this header instead of <curl/curl.h>
 * and calls the curl_* functions by their names; the headers come from
 * libcurl4-openssl-dev at build time, the library at run time.
 *
 * Every function's type is the one curl.h declares (base/dl.h), and
 * curl.h's own checks of curl_easy_setopt() and curl_easy_getinfo()
 * arguments (typecheck-gcc.h: a long for a long option, a write callback
 * for CURLOPT_WRITEFUNCTION...) stay on: those functions keep their names,
 * and their symbols are bound (an asm label) to rm_curl_*() in curl_dl.c,
 * which pass the one value on to the library's function.  The checks are
 * made at -O1 and above; CMakeLists.txt compiles core/remote so that their
 * warnings are not taken for warnings of a system header.
 */
#ifndef PTFS_CORE_REMOTE_CURL_DL_H
#define PTFS_CORE_REMOTE_CURL_DL_H

#include <curl/curl.h>

#include "base/dl.h"
#include "base/error.h"

#define RM_CURL_FNS(X) \
	X(curl_global_init) X(curl_version_info) \
	X(curl_easy_init) X(curl_easy_setopt) X(curl_easy_getinfo) \
	X(curl_easy_perform) X(curl_easy_cleanup) X(curl_easy_strerror) \
	X(curl_slist_append) X(curl_slist_free_all) \
	X(curl_multi_init) X(curl_multi_setopt) X(curl_multi_add_handle) \
	X(curl_multi_remove_handle) X(curl_multi_perform) X(curl_multi_poll) \
	X(curl_multi_wakeup) X(curl_multi_info_read) X(curl_multi_cleanup)

PT_DL_DECLARE(rm_curl, RM_CURL_FNS);

/*
 * Load libcurl once (thread-safe): 0, or -ENOTSUP with one line naming
 * the Debian package, also when the library is older than the version
 * the build requires (PTFS_CURL_MIN, CMakeLists.txt).
 */
int rm_curl_load(struct pt_error *err);

/* the variadic three: called through curl.h's checking macros */
extern __typeof__(curl_easy_setopt) curl_easy_setopt
	__asm__("rm_curl_easy_setopt");
extern __typeof__(curl_easy_getinfo) curl_easy_getinfo
	__asm__("rm_curl_easy_getinfo");
extern __typeof__(curl_multi_setopt) curl_multi_setopt
	__asm__("rm_curl_multi_setopt");

/* the others: straight through the table */
#define curl_global_init rm_curl_fn.curl_global_init
#define curl_version_info rm_curl_fn.curl_version_info
#define curl_easy_init rm_curl_fn.curl_easy_init
#define curl_easy_perform rm_curl_fn.curl_easy_perform
#define curl_easy_cleanup rm_curl_fn.curl_easy_cleanup
#define curl_easy_strerror rm_curl_fn.curl_easy_strerror
#define curl_slist_append rm_curl_fn.curl_slist_append
#define curl_slist_free_all rm_curl_fn.curl_slist_free_all
#define curl_multi_init rm_curl_fn.curl_multi_init
#define curl_multi_add_handle rm_curl_fn.curl_multi_add_handle
#define curl_multi_remove_handle rm_curl_fn.curl_multi_remove_handle
#define curl_multi_perform rm_curl_fn.curl_multi_perform
#define curl_multi_poll rm_curl_fn.curl_multi_poll
#define curl_multi_wakeup rm_curl_fn.curl_multi_wakeup
#define curl_multi_info_read rm_curl_fn.curl_multi_info_read
#define curl_multi_cleanup rm_curl_fn.curl_multi_cleanup

#endif /* PTFS_CORE_REMOTE_CURL_DL_H */
