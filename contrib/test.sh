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
set -euo pipefail
cd "$(dirname "$0")/.."
one_build=false
[ "${1:-}" = --one-build ] && one_build=true
contrib/setup.sh
jobs=$(nproc)
status=0

# A test that cannot run here skips with a visible reason; these variables
# make such a skip a failure.  setup.sh installs Python, torch and FUSE, so
# they are required; root tests are required when running as root; the
# fixture corpus when it is beside the clone (.ci/run requires it outright).
export PTFS_REQUIRE_FUSE=${PTFS_REQUIRE_FUSE:-1} PTFS_REQUIRE_PYTHON=${PTFS_REQUIRE_PYTHON:-1}
if [ "$(id -u)" -eq 0 ]; then
	export PTFS_REQUIRE_ROOT=${PTFS_REQUIRE_ROOT:-1}
fi
if [ -d ../shared/fixtures/real ]; then
	export PTFS_REQUIRE_FIXTURES=${PTFS_REQUIRE_FIXTURES:-1}
else
	echo "note: no ../shared/fixtures beside this clone: fixture tests are reported as skipped"
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

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
	cmake --build "$dir" -j "$jobs" || return 1
	(cd "$dir" && ctest --output-on-failure -j 2 2>&1 | tee ctest.log)
}

if ! $one_build; then
	echo "== clone alone: a clone in a temporary directory, nothing beside it"
	tmp=$(mktemp -d /tmp/ptfs-clone-XXXXXX)
	git clone -q "$PWD" "$tmp/ptfs"
	if (unset PTFS_REQUIRE_FIXTURES; "$tmp/ptfs/contrib/test.sh" --one-build); then
		# the fixture tests are there, and reported as skipped
		grep -qE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: fixtures \.+\*+Skipped' \
			"$tmp/ptfs/build-test-release/ctest.log" ||
			{ echo "FAIL: clone alone: the fixture tests were not reported as skipped"; status=1; }
	else
		echo "FAIL: clone alone"
		status=1
	fi
	rm -rf "$tmp"
fi

for cfg in release asan; do
	$one_build && [ "$cfg" = asan ] && continue
	echo "== $cfg build"
	flags=(-DPTFS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
	[ "$cfg" = asan ] && flags+=(-DPTFS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
	build_and_test "build-test-$cfg" "${flags[@]}" || status=1
done
$one_build && exit $status

# The Debian package, installed and used (contrib/deb-check.sh), as root.
if [ "$(id -u)" -eq 0 ]; then
	echo "== Debian package"
	contrib/deb-check.sh build-deb || status=1
else
	echo "== Debian package: skipped (needs root for apt-get install)"
	[ "${PTFS_REQUIRE_ROOT:-}" = 1 ] && status=1
fi

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
