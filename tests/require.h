/* SPDX-License-Identifier: MIT */
/*
 * require.h -- skips that CI can turn into failures (cmocka side).
 *
 * A unit test that cannot run here (no /usr/bin/python3, no torch, no
 * fixture corpus beside the clone, not root, no user xattrs in /tmp)
 * prints one "skipped: WHY" line and calls cmocka's skip().  When the
 * environment variable that covers the reason is "1" (PTFS_REQUIRE_PYTHON,
 * PTFS_REQUIRE_FIXTURES, PTFS_REQUIRE_ROOT, PTFS_REQUIRE_XATTR,
 * PTFS_REQUIRE_CURL, PTFS_REQUIRE_LIBARCHIVE; contrib/test.sh sets those
 * its machine must meet),
 * the same call fails the test instead, so a green CI run means every test
 * ran.  Never print "skipped" and return: that reports a pass.
 * tests/py/conftest.py does the same for pytest.  Include after <cmocka.h>.
 */
#ifndef PTFS_TESTS_REQUIRE_H
#define PTFS_TESTS_REQUIRE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Is $var set to "1"? */
static inline bool ptfs_required(const char *var)
{
	const char *v = getenv(var);

	return v && strcmp(v, "1") == 0;
}

/* Format the reason (a function, so long paths are cut, not warned of). */
__attribute__((format(printf, 3, 4)))
static inline void ptfs_why(char *buf, size_t n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, n, fmt, ap);
	va_end(ap);
}

/* Skip the current test with a visible reason, or fail it when $var=1. */
#define PTFS_SKIP(var, ...)                                                  \
	do {                                                                 \
		char why_[512];                                              \
		ptfs_why(why_, sizeof(why_), __VA_ARGS__);                    \
		if (ptfs_required(var))                                      \
			fail_msg("%s (required: %s=1)", why_, var);          \
		print_message("skipped: %s\n", why_);                        \
		skip();                                                      \
	} while (0)

/*
 * The shared documents and fixtures: $PTFS_SHARED (ctest sets it), else
 * <source>/../shared, found from this header's own path.  Returns a static
 * string.
 */
static inline const char *ptfs_shared_dir(void)
{
	static char buf[4096];
	const char *env = getenv("PTFS_SHARED");
	const char *file = __FILE__;
	const char *slash = strrchr(file, '/');

	if (env && env[0])
		return env;
	/* <source>/tests/require.h -> <source>/../shared */
	if (slash)
		snprintf(buf, sizeof(buf), "%.*s/../../shared", (int)(slash - file), file);
	else
		snprintf(buf, sizeof(buf), "../../shared");
	return buf;
}

#endif
