/* SPDX-License-Identifier: MIT */
/*
 * curl_dl.c -- the table of the libcurl functions core/remote calls, and
 * the variadic three passed on to it (see curl_dl.h).
 */
#include "remote/curl_dl.h"

#include <stdarg.h>

#define RM_CURL_NEED "remote checkpoints need libcurl " PTFS_CURL_MIN \
	" or later (Debian: libcurl4)"

PT_DL_DEFINE_SHARED(rm_curl, RM_CURL_FNS, "libcurl.so.4", RM_CURL_NEED);

int rm_curl_load(struct pt_error *err)
{
	const curl_version_info_data *v;
	int rc = pt_dl_load(&rm_curl_dl, err);

	if (rc)
		return rc;
	v = curl_version_info(CURLVERSION_NOW);
	if (!v || v->version_num < PTFS_CURL_MIN_NUM)
		return pt_fail(err, -ENOTSUP, "%s: libcurl.so.4 is %s",
			       RM_CURL_NEED, v ? v->version : "of no version");
	return 0;
}

/*
 * The value of a curl_easy_setopt() or curl_multi_setopt() option is of
 * the class its number says (curl.h's CURLOPTTYPE_* ranges): a long, a
 * data pointer, a function pointer or a curl_off_t, and then a data
 * pointer again (blobs).  curl.h's checks at the call have made sure it
 * is that one; it is read as such and passed on.  (The names are in
 * parentheses: curl.h makes them function-like macros.)
 */
#define RM_PASS(fn, h, o, ap) \
	((o) < CURLOPTTYPE_OBJECTPOINT ? \
		(rm_curl_fn.fn)(h, o, va_arg(ap, long)) : \
	 (o) < CURLOPTTYPE_FUNCTIONPOINT ? \
		(rm_curl_fn.fn)(h, o, va_arg(ap, void *)) : \
	 (o) < CURLOPTTYPE_OFF_T ? \
		(rm_curl_fn.fn)(h, o, va_arg(ap, void (*)(void))) : \
	 (o) < CURLOPTTYPE_BLOB ? \
		(rm_curl_fn.fn)(h, o, va_arg(ap, curl_off_t)) : \
		(rm_curl_fn.fn)(h, o, va_arg(ap, void *)))

CURLcode (curl_easy_setopt)(CURL *h, CURLoption o, ...)
{
	va_list ap;
	CURLcode rc;

	va_start(ap, o);
	rc = RM_PASS(curl_easy_setopt, h, o, ap);
	va_end(ap);
	return rc;
}

CURLMcode (curl_multi_setopt)(CURLM *m, CURLMoption o, ...)
{
	va_list ap;
	CURLMcode rc;

	va_start(ap, o);
	rc = RM_PASS(curl_multi_setopt, m, o, ap);
	va_end(ap);
	return rc;
}

/* Every CURLINFO_* takes a pointer to where the answer goes. */
CURLcode (curl_easy_getinfo)(CURL *h, CURLINFO i, ...)
{
	va_list ap;
	CURLcode rc;

	va_start(ap, i);
	rc = (rm_curl_fn.curl_easy_getinfo)(h, i, va_arg(ap, void *));
	va_end(ap);
	return rc;
}
