#!/usr/bin/env bash
# The test command: install dependencies, then
#   1. "clone alone": clone this repository into a temporary directory with
#      nothing beside it and run its test suite there (one build); the
#      fixture tests must be reported as skipped, everything else passes;
#   2. build twice (optimised with warnings as errors; AddressSanitizer +
#      UndefinedBehaviorSanitizer) and run the whole suite on both (cmocka
#      unit tests, pytest integration tests with real torch.save files and
#      real FUSE mounts, the fixture corpus from ../shared when it is there,
#      the man page check);
#   3. build the Debian package, install it, use it, remove it (as root);
#   4. 30 seconds of libFuzzer per fuzz target.
# contrib/test.sh --one-build runs only the optimised build of step 2 (what
# step 1 runs inside the clone).
# Each stage ends with one line "STAGE: N passed, N failed, N skipped"
# (ctest's tests, the package check, the fuzz targets); the last line is the
# total, and the exit status is non-zero when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
one_build=false no_total=false
[ "${1:-}" = --one-build ] && one_build=true
[ "${2:-}" = --no-total ] && no_total=true
contrib/setup.sh
jobs=$(nproc)
status=0
verdicts=()     # "STAGE PASSED FAILED SKIPPED", one per stage run

# Record a stage's counts and print its line.
verdict() {
	verdicts+=("$1 $2 $3 $4")
	echo "$1: $2 passed, $3 failed, $4 skipped"
}

# The counts of ctest's log $2 as stage $1; a log without ctest's summary
# (the build failed) counts as one failure.
ctest_verdict() {
	local total failed skipped
	# no log at all (the build failed) must not end the script: sed's
	# status 2 under set -e and pipefail did
	total=$({ sed -n 's/.*tests passed, [0-9]* tests\{0,1\} failed out of \([0-9]*\).*/\1/p' "$2" 2>/dev/null || true; } | tail -n 1)
	if [ -z "$total" ]; then
		verdict "$1" 0 1 0
		return
	fi
	failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of.*/\1/p' "$2" | tail -n 1)
	skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(\*\*\*Skipped|Not Run)' "$2" || true)
	verdict "$1" $((total - failed - skipped)) "$failed" "$skipped"
}

# A test that cannot run here skips with a visible reason; these variables
# make such a skip a failure.  setup.sh installs Python, torch, FUSE,
# libcurl, libarchive, gio and shared-mime-info, so they are required; root tests are required when running as root; the
# fixture corpus when it is beside the clone (.ci/run requires it outright).
export PTFS_REQUIRE_FUSE=${PTFS_REQUIRE_FUSE:-1} PTFS_REQUIRE_PYTHON=${PTFS_REQUIRE_PYTHON:-1}
export PTFS_REQUIRE_CURL=${PTFS_REQUIRE_CURL:-1} PTFS_REQUIRE_LIBARCHIVE=${PTFS_REQUIRE_LIBARCHIVE:-1}
export PTFS_REQUIRE_DESKTOP=${PTFS_REQUIRE_DESKTOP:-1}
if [ "$(id -u)" -eq 0 ]; then
	export PTFS_REQUIRE_ROOT=${PTFS_REQUIRE_ROOT:-1}
fi
if [ -d ../shared/fixtures/real ]; then
	export PTFS_REQUIRE_FIXTURES=${PTFS_REQUIRE_FIXTURES:-1}
else
	echo "note: no ../shared/fixtures beside this clone: fixture tests are reported as skipped"
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# The last line: every stage's counts added up.
print_total() {
	local v p=0 f=0 k=0
	echo "== verdict"
	for v in "${verdicts[@]}"; do
		# the stage name may have a space: take the last three fields
		set -- $v
		shift $(($# - 3))
		p=$((p + $1)) f=$((f + $2)) k=$((k + $3))
	done
	[ "$status" -ne 0 ] && [ "$f" -eq 0 ] && f=1   # a failure outside any count
	echo "total: $p passed, $f failed, $k skipped"
}

# Features the configure summary must list as enabled.
ci_features="tar-format remote unit-tests integration-tests man-check bash-completion werror"

# Configure, build and test in build dir $1 with cmake flags $2...
build_and_test() {
	local dir=$1 feature enabled
	shift
	mkdir -p "$dir"
	cmake -S . -B "$dir" "$@" >"$dir/configure.log" || { cat "$dir/configure.log"; return 1; }
	# The configure summary must say every feature CI tests is on.
	sed -n '/build configuration:/,/^-- Configuring done/p' "$dir/configure.log"
	enabled=$(sed -n '/features have been enabled/,/features have been disabled/p' "$dir/configure.log")
	for feature in $ci_features; do
		grep -q "^ \* $feature," <<<"$enabled" || { echo "FAIL: feature $feature is off"; return 1; }
	done
	rm -f "$dir/ctest.log"
	cmake --build "$dir" -j "$jobs" || return 1
	(cd "$dir" && ctest --output-on-failure -j 2 2>&1 | tee ctest.log)
}

if ! $one_build; then
	echo "== clone alone: a clone in a temporary directory, nothing beside it"
	tmp=$(mktemp -d /tmp/ptfs-clone-XXXXXX)
	git clone -q "$PWD" "$tmp/ptfs"
	# the write soak (tests/py/test_write_soak.py) runs its full 150 s in
	# the optimised build below; here and under ASan a shorter run
	if (unset PTFS_REQUIRE_FIXTURES; PTFS_SOAK_SECONDS=${PTFS_SOAK_SECONDS:-30} \
		"$tmp/ptfs/contrib/test.sh" --one-build --no-total); then
		# the fixture tests are there, and reported as skipped
		grep -qE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: fixtures \.+\*+Skipped' \
			"$tmp/ptfs/build-test-release/ctest.log" ||
			{ echo "FAIL: clone alone: the fixture tests were not reported as skipped"; status=1; }
	else
		echo "FAIL: clone alone"
		status=1
	fi
	ctest_verdict "clone alone" "$tmp/ptfs/build-test-release/ctest.log"
	rm -rf "$tmp"
fi

for cfg in release asan; do
	$one_build && [ "$cfg" = asan ] && continue
	echo "== $cfg build"
	flags=(-DPTFS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
	[ "$cfg" = asan ] && flags+=(-DPTFS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
	if [ "$cfg" = asan ]; then
		PTFS_SOAK_SECONDS=${PTFS_SOAK_SECONDS:-60} build_and_test "build-test-$cfg" "${flags[@]}" || status=1
	else
		build_and_test "build-test-$cfg" "${flags[@]}" || status=1
	fi
	ctest_verdict "$cfg" "build-test-$cfg/ctest.log"
done
if $one_build; then
	$no_total || print_total
	exit $status
fi

# The Debian package, installed and used (contrib/deb-check.sh), as root.
if [ "$(id -u)" -eq 0 ]; then
	echo "== Debian package"
	if contrib/deb-check.sh build-deb; then
		verdict package 1 0 0
	else
		verdict package 0 1 0
		status=1
	fi
else
	echo "== Debian package: skipped (needs root for apt-get install)"
	if [ "${PTFS_REQUIRE_ROOT:-}" = 1 ]; then
		verdict package 0 1 0
		status=1
	else
		verdict package 0 0 1
	fi
fi

# A short fuzz run (about 2 minutes: build, then 30 s per target), only
# where clang can link libFuzzer (clang + libclang-rt-14-dev, which
# contrib/setup.sh installs).  A finding fails CI and is saved under
# tests/fuzz/regress/<target>/ for the replay tests.
if command -v clang >/dev/null 2>&1 &&
	printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
	clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1; then
	echo "== fuzz (30 s per target)"
	fuzz_log=$(mktemp /tmp/ptfs-fuzz-XXXXXX.log)
	fuzz_rc=0
	contrib/fuzz.sh 30 2>&1 | tee "$fuzz_log" || fuzz_rc=1
	ran=$(grep -c '^== fuzz_' "$fuzz_log" || true)
	# no finding is no match: grep's status 1 must not end the script
	# (set -e with pipefail), as it did after every clean fuzz run
	bad=$({ grep -oE '^fuzz_[a-z]+: (FAILED|finding saved)' "$fuzz_log" || true; } |
		cut -d: -f1 | sort -u | wc -l)
	[ "$fuzz_rc" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	[ "$bad" -gt "$ran" ] && ran=$bad
	verdict fuzz $((ran - bad)) "$bad" 0
	[ "$fuzz_rc" -eq 0 ] || status=1
	rm -f "$fuzz_log"
else
	echo "== fuzz: skipped (no clang with the libFuzzer runtime)"
	verdict fuzz 0 0 1
fi
print_total
exit $status
