/* SPDX-License-Identifier: MIT */
/*
 * dl.c -- a library's functions found with dlsym on first use (see dl.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/dl.h"

/* One lock for every library: loading happens once per library. */
static pthread_mutex_t pt_dl_mu = PTHREAD_MUTEX_INITIALIZER;

/* dlopen + dlsym of every name; the state and message of the outcome. */
static int pt_dl_open(struct pt_dl *dl)
{
	void *lib = dlopen(dl->soname, RTLD_NOW | RTLD_LOCAL);
	const char *name;
	size_t i;

	if (!lib) {
		snprintf(dl->msg, sizeof(dl->msg), "%s: %s", dl->need, dlerror());
		return -ENOTSUP;
	}
	for (name = dl->names, i = 0; *name; name += strlen(name) + 1, i++) {
		void *p = dlsym(lib, name);

		if (!p) {
			snprintf(dl->msg, sizeof(dl->msg), "%s: %s has no %s (too old?)",
				 dl->need, dl->soname, name);
			dlclose(lib);
			return -ENOTSUP;
		}
		/* POSIX lets a dlsym() result become a function pointer; ISO C
		 * has no such conversion, so copy the bytes */
		memcpy((char *)dl->table + i * sizeof(void (*)(void)), &p, sizeof(p));
	}
	return 1;
}

int pt_dl_load(struct pt_dl *dl, struct pt_error *err)
{
	int state = __atomic_load_n(&dl->state, __ATOMIC_ACQUIRE);

	if (state == 0) {
		pthread_mutex_lock(&pt_dl_mu);
		state = dl->state;
		if (state == 0) {
			state = pt_dl_open(dl);
			__atomic_store_n(&dl->state, state, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&pt_dl_mu);
	}
	if (state < 0)
		return pt_fail(err, state, "%s", dl->msg);
	return 0;
}
