/* SPDX-License-Identifier: MIT */
/*
 * curl_dl.c -- the libcurl functions core/remote uses, found with dlsym in
 * libcurl.so.4 on first use (see curl_dl.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "remote/curl_dl.h"

struct rm_curl rm_curl;

static pthread_once_t rm_curl_once = PTHREAD_ONCE_INIT;
static int rm_curl_rc;
static char rm_curl_msg[256];

/* dlsym() gives a void *; POSIX guarantees it converts to a function
 * pointer, which ISO C does not say: go through memcpy. */
static int rm_sym(void *lib, const char *name, void *slot, size_t size)
{
	void *p = dlsym(lib, name);

	if (!p) {
		snprintf(rm_curl_msg, sizeof(rm_curl_msg),
			 "libcurl.so.4 has no %s (libcurl 7.68 or later needed)",
			 name);
		return -ENOTSUP;
	}
	memcpy(slot, &p, size);
	return 0;
}

#define RM_SYM(field, name) \
	(rc = rc ? rc : rm_sym(lib, name, &rm_curl.field, sizeof(rm_curl.field)))

static void rm_curl_open(void)
{
	void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
	int rc = 0;

	if (!lib) {
		snprintf(rm_curl_msg, sizeof(rm_curl_msg),
			 "remote checkpoints need libcurl (Debian: libcurl4): %s",
			 dlerror());
		rm_curl_rc = -ENOTSUP;
		return;
	}
	RM_SYM(global_init, "curl_global_init");
	RM_SYM(easy_init, "curl_easy_init");
	RM_SYM(easy_setopt, "curl_easy_setopt");
	RM_SYM(easy_getinfo, "curl_easy_getinfo");
	RM_SYM(easy_perform, "curl_easy_perform");
	RM_SYM(easy_cleanup, "curl_easy_cleanup");
	RM_SYM(easy_strerror, "curl_easy_strerror");
	RM_SYM(slist_append, "curl_slist_append");
	RM_SYM(slist_free_all, "curl_slist_free_all");
	RM_SYM(multi_init, "curl_multi_init");
	RM_SYM(multi_setopt, "curl_multi_setopt");
	RM_SYM(multi_add_handle, "curl_multi_add_handle");
	RM_SYM(multi_remove_handle, "curl_multi_remove_handle");
	RM_SYM(multi_perform, "curl_multi_perform");
	RM_SYM(multi_poll, "curl_multi_poll");
	RM_SYM(multi_wakeup, "curl_multi_wakeup");
	RM_SYM(multi_info_read, "curl_multi_info_read");
	RM_SYM(multi_cleanup, "curl_multi_cleanup");
	rm_curl_rc = rc;    /* the library stays loaded for the process */
}

int rm_curl_load(struct pt_error *err)
{
	pthread_once(&rm_curl_once, rm_curl_open);
	if (rm_curl_rc)
		return pt_fail(err, rm_curl_rc, "%s", rm_curl_msg);
	return 0;
}
