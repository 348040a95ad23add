/* SPDX-License-Identifier: MIT */
/*
 * curl_dl.h -- libcurl, loaded with dlopen("libcurl.so.4") when the first
 * remote checkpoint is opened, so that ptfs starts without loading it (and
 * OpenSSL behind it) for local files, and runs without it installed.
 *
 * core/remote includes this header instead of <curl/curl.h>: the curl_*
 * names below become calls through the table (headers from
 * libcurl4-openssl-dev at build time, the library at run time).
 */
#ifndef PTFS_CORE_REMOTE_CURL_DL_H
#define PTFS_CORE_REMOTE_CURL_DL_H

#define CURL_DISABLE_TYPECHECK 1   /* plain function names, no wrappers */
#include <curl/curl.h>

#include "base/error.h"

struct rm_curl {
	CURLcode (*global_init)(long flags);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *h, CURLoption o, ...);
	CURLcode (*easy_getinfo)(CURL *h, CURLINFO i, ...);
	CURLcode (*easy_perform)(CURL *h);
	void (*easy_cleanup)(CURL *h);
	const char *(*easy_strerror)(CURLcode c);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_setopt)(CURLM *m, CURLMoption o, ...);
	CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
	CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
	CURLMcode (*multi_perform)(CURLM *m, int *running);
	CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd *extra, unsigned n,
				int timeout_ms, int *ret);
	CURLMcode (*multi_wakeup)(CURLM *m);
	CURLMsg *(*multi_info_read)(CURLM *m, int *left);
	CURLMcode (*multi_cleanup)(CURLM *m);
};

extern struct rm_curl rm_curl;

/* Load libcurl once (thread-safe); 0, or -ENOTSUP with one line. */
int rm_curl_load(struct pt_error *err);

/* curl.h's own function-like macros for these three go first */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init rm_curl.global_init
#define curl_easy_init rm_curl.easy_init
#define curl_easy_setopt rm_curl.easy_setopt
#define curl_easy_getinfo rm_curl.easy_getinfo
#define curl_easy_perform rm_curl.easy_perform
#define curl_easy_cleanup rm_curl.easy_cleanup
#define curl_easy_strerror rm_curl.easy_strerror
#define curl_slist_append rm_curl.slist_append
#define curl_slist_free_all rm_curl.slist_free_all
#define curl_multi_init rm_curl.multi_init
#define curl_multi_setopt rm_curl.multi_setopt
#define curl_multi_add_handle rm_curl.multi_add_handle
#define curl_multi_remove_handle rm_curl.multi_remove_handle
#define curl_multi_perform rm_curl.multi_perform
#define curl_multi_poll rm_curl.multi_poll
#define curl_multi_wakeup rm_curl.multi_wakeup
#define curl_multi_info_read rm_curl.multi_info_read
#define curl_multi_cleanup rm_curl.multi_cleanup

#endif /* PTFS_CORE_REMOTE_CURL_DL_H */
