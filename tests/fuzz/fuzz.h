/* SPDX-License-Identifier: MIT */
/*
 * fuzz.h -- what the fuzz targets share: the libFuzzer entry point's
 * prototype (so -Wmissing-prototypes holds) and an invariant check that
 * aborts in every build, so a broken invariant is a finding under libFuzzer
 * and a failed test under the replay driver.
 */
#ifndef PTFS_TESTS_FUZZ_H
#define PTFS_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Not assert(): it must also hold in NDEBUG builds. */
#define FUZZ_CHECK(cond)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "%s:%d: invariant failed: %s\n",   \
				__FILE__, __LINE__, #cond);                 \
			abort();                                            \
		}                                                           \
	} while (0)

#endif /* PTFS_TESTS_FUZZ_H */
