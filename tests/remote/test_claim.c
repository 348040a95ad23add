/* SPDX-License-Identifier: MIT */
/*
 * test_claim.c -- the claims of the block cache (core/remote/cache.c,
 * "One download per block"): two opens of one object's cache are two
 * open file descriptions, whose OFD locks exclude each other as two
 * processes' do.  A claim takes the run it can from its first block and
 * tells where another's claim ends; released blocks can be claimed again;
 * a dead process's claims are gone; without the inflight file every claim
 * succeeds.  No server needed.
 */
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "remote/remote_i.h"

struct two {
	char root[64];
	struct rm_cache a, b;
};

static void open_one(struct two *t, struct rm_cache *c)
{
	struct pt_error err;
	struct rm_meta m;

	memset(&m, 0, sizeof(m));
	m.size = 1000 * RM_BLOCK;
	snprintf(m.etag, sizeof(m.etag), "\"e1\"");
	snprintf(m.ident, sizeof(m.ident), "\"e1\"");
	pt_error_clear(&err);
	assert_int_equal(rm_cache_open(c, t->root, "http://h/m.pt", &m, &err), 0);
	assert_true(c->inflight_fd >= 0);
}

static int setup(void **state)
{
	struct two *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	snprintf(t->root, sizeof(t->root), "/tmp/ptfs-claim-XXXXXX");
	assert_non_null(mkdtemp(t->root));
	open_one(t, &t->a);
	open_one(t, &t->b);
	*state = t;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int teardown(void **state)
{
	struct two *t = *state;

	rm_cache_close(&t->a);
	rm_cache_close(&t->b);
	assert_int_equal(nftw(t->root, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
	free(t);
	return 0;
}

static void claim_takes_the_run_before_another(void **state)
{
	struct two *t = *state;
	uint64_t end;

	assert_true(rm_cache_claim(&t->a, 10, 20, &end));
	assert_int_equal(end, 20);
	/* b: block 10 is a's, up to 20 */
	assert_false(rm_cache_claim(&t->b, 10, 40, &end));
	assert_int_equal(end, 20);
	assert_false(rm_cache_claim(&t->b, 15, 18, &end));
	assert_int_equal(end, 18);
	/* from 0: the run before a's claim */
	assert_true(rm_cache_claim(&t->b, 0, 40, &end));
	assert_int_equal(end, 10);
	/* a again, over its own claim and b's: its own run */
	assert_true(rm_cache_claim(&t->a, 12, 40, &end));
	assert_int_equal(end, 40);
	assert_false(rm_cache_claim(&t->a, 0, 40, &end));
	assert_int_equal(end, 10);
}

static void released_blocks_can_be_claimed(void **state)
{
	struct two *t = *state;
	uint64_t end;

	assert_true(rm_cache_claim(&t->a, 0, 8, &end));
	rm_cache_release(&t->a, 0, 4);
	assert_true(rm_cache_claim(&t->b, 0, 8, &end));
	assert_int_equal(end, 4);
	rm_cache_release(&t->a, 4, 8);
	assert_true(rm_cache_claim(&t->b, 4, 8, &end));
	assert_int_equal(end, 8);
	assert_false(rm_cache_claim(&t->a, 0, 8, &end));
	assert_int_equal(end, 8);
}

static void unclaimed_clears_free_blocks_only(void **state)
{
	struct two *t = *state;
	uint8_t bits[16];
	uint64_t end, b;

	/* a holds 3-5 and 9-11; b's own claim of 20 is no other's */
	assert_true(rm_cache_claim(&t->a, 3, 5, &end));
	assert_true(rm_cache_claim(&t->a, 9, 11, &end));
	assert_true(rm_cache_claim(&t->b, 20, 21, &end));
	memset(bits, 0xff, sizeof(bits));
	rm_cache_unclaimed(&t->b, bits, 0, 30);
	for (b = 0; b < 30; b++)
		assert_int_equal(rm_bit(bits, b),
				 (b >= 3 && b < 5) || (b >= 9 && b < 11));
	assert_true(rm_bit(bits, 30));      /* outside: untouched */
}

static void a_dead_process_claims_nothing(void **state)
{
	struct two *t = *state;
	int ready[2];
	uint64_t end;
	pid_t pid;
	char c;

	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rm_cache k;

		open_one(t, &k);
		if (!rm_cache_claim(&k, 100, 200, &end) || end != 200)
			_exit(1);
		if (write(ready[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	assert_false(rm_cache_claim(&t->a, 150, 300, &end));
	assert_int_equal(end, 200);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	assert_true(rm_cache_claim(&t->a, 150, 300, &end));
	assert_int_equal(end, 300);
}

static void without_the_file_everything_is_claimed(void **state)
{
	struct two *t = *state;
	uint64_t end;

	assert_true(rm_cache_claim(&t->a, 0, 50, &end));
	close(t->b.inflight_fd);
	t->b.inflight_fd = -1;
	assert_true(rm_cache_claim(&t->b, 0, 50, &end));
	assert_int_equal(end, 50);
	rm_cache_release(&t->b, 0, 50);         /* nothing to release */
	assert_true(rm_cache_claim(&t->a, 0, 50, &end));
	assert_int_equal(end, 50);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(claim_takes_the_run_before_another,
						setup, teardown),
		cmocka_unit_test_setup_teardown(released_blocks_can_be_claimed,
						setup, teardown),
		cmocka_unit_test_setup_teardown(unclaimed_clears_free_blocks_only,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_dead_process_claims_nothing,
						setup, teardown),
		cmocka_unit_test_setup_teardown(without_the_file_everything_is_claimed,
						setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
