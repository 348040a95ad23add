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
for cfg in release asan; do
	dir=build-test-$cfg
	flags=(-DPTFS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
	[ "$cfg" = asan ] && flags+=(-DPTFS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
	echo "== $cfg build"
	cmake -S . -B "$dir" "${flags[@]}" >/dev/null
	cmake --build "$dir" -j "$jobs"
	echo "== $cfg tests"
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
	(cd "$dir" && ctest --output-on-failure -j 2) || status=1
done
exit $status
