#!/usr/bin/env bash
# The test command: install dependencies, build twice (optimised with
# warnings as errors; AddressSanitizer + UndefinedBehaviorSanitizer) and run
# the whole suite (cmocka unit tests + pytest integration tests with real
# torch.save files and real FUSE mounts) on both builds.
set -euo pipefail
cd "$(dirname "$0")/.."
contrib/setup.sh
jobs=$(nproc)
status=0
# Every test that cannot run here (no FUSE, no fixture corpus beside the
# clone, no Python with torch, not root) would skip; in CI that is a
# failure, so a green run means everything ran.
export PTFS_REQUIRE_FUSE=1 PTFS_REQUIRE_FIXTURES=1 PTFS_REQUIRE_PYTHON=1 PTFS_REQUIRE_ROOT=1
# Features the configure summary must list as enabled.
ci_features="tar-format unit-tests integration-tests man-check werror"
for cfg in release asan; do
	dir=build-test-$cfg
	flags=(-DPTFS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
	[ "$cfg" = asan ] && flags+=(-DPTFS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
	echo "== $cfg build"
	mkdir -p "$dir"
	cmake -S . -B "$dir" "${flags[@]}" >"$dir/configure.log" || { cat "$dir/configure.log"; exit 1; }
	# The configure summary must say every feature CI tests is on.
	sed -n '/build configuration:/,/^-- Configuring done/p' "$dir/configure.log"
	enabled=$(sed -n '/features have been enabled/,/features have been disabled/p' "$dir/configure.log")
	for feature in $ci_features; do
		grep -q "^ \* $feature," <<<"$enabled" || { echo "FAIL: feature $feature is off"; status=1; }
	done
	cmake --build "$dir" -j "$jobs"
	echo "== $cfg tests"
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
	(cd "$dir" && ctest --output-on-failure -j 2) || status=1
done
# A short fuzz run (about 2 minutes: build, then 30 s per target), only
# where clang can link libFuzzer (clang + libclang-rt-14-dev, which
# contrib/setup.sh installs).  A finding fails CI and is saved under
# tests/fuzz/regress/<target>/ for the replay tests.
if command -v clang >/dev/null 2>&1 &&
	printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
	clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1; then
	echo "== fuzz (30 s per target)"
	contrib/fuzz.sh 30 || status=1
else
	echo "== fuzz: skipped (no clang with the libFuzzer runtime)"
fi
exit $status
