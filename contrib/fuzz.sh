#!/usr/bin/env bash
# Fuzz every libFuzzer target (tests/fuzz/) for SECONDS each (default 60).
#
#   contrib/fuzz.sh [SECONDS]
#
# Configures a clang build with -DPTFS_FUZZ=ON in build-fuzz, writes the
# seed corpora (tests/fuzz/make_seeds.py), then runs fuzz_zip, fuzz_pickle,
# fuzz_pkemit, fuzz_ckpt, fuzz_tree, fuzz_edit, fuzz_journal, fuzz_pending, fuzz_http, fuzz_onnx and fuzz_ini one after another, each on all cores (FUZZ_JOBS, default
# nproc) for SECONDS.  New coverage accumulates in build-fuzz/corpus/<target>
# (kept between runs).  Any crash, hang (-timeout), leak or out-of-memory
# (-rss_limit_mb) fails the script, and the input is saved as
# tests/fuzz/regress/<target>/<sha1> so CTest replays it from then on
# (fuzz-replay-<target>).  Needs clang and libclang-rt-14-dev.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
jobs=${FUZZ_JOBS:-$(nproc)}
dir=build-fuzz
targets=(zip pickle pkemit ckpt tree edit journal pending http onnx ini)

CC=${CC_FUZZ:-clang} cmake -S . -B "$dir" -DPTFS_FUZZ=ON -DBUILD_TESTING=OFF \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="${CC_FUZZ:-clang}" >/dev/null
cmake --build "$dir" -j "$jobs" --target "${targets[@]/#/fuzz_}"
/usr/bin/python3 tests/fuzz/make_seeds.py "$dir/seeds"

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
status=0
for t in "${targets[@]}"; do
	corpus=$dir/corpus/$t
	art=$dir/artifacts/$t
	regress=tests/fuzz/regress/$t
	mkdir -p "$corpus" "$art" "$regress"
	rm -f "$art"/*
	echo "== fuzz_$t: ${secs}s on $jobs jobs"
	sd=$t
	[ "$t" = tree ] && sd=ckpt     # whole checkpoints, like fuzz_ckpt
	[ "$t" = edit ] && sd=ckpt     # surgery on whole checkpoints
	[ "$t" = pkemit ] && sd=pickle # writes back what fuzz_pickle reads
	seeds=("$PWD/$dir/seeds/$sd" "$PWD/$regress")
	# fuzz_journal, fuzz_pending: real journals and pending files, kept
	# in their regress folders
	[ "$t" = journal ] && seeds=("$PWD/$regress")
	[ "$t" = pending ] && seeds=("$PWD/$regress")
	shared=${PTFS_SHARED:-$PWD/../shared}/fixtures/real
	[ "$t" != pickle ] && [ "$t" != pkemit ] && [ "$t" != journal ] && [ "$t" != pending ] && [ "$t" != http ] && [ -d "$shared" ] && seeds+=("$shared")
	rc=0
	# Fork mode ignores timeouts and OOMs unless told otherwise: a hang
	# or a memory blow-up is a finding here.  The first finding stops.
	(cd "$dir" && "./fuzz_$t" -fork="$jobs" -max_total_time="$secs" \
		-ignore_timeouts=0 -ignore_ooms=0 -ignore_crashes=0 \
		-max_len=1048576 -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="artifacts/$t/" -print_final_stats=1 \
		"corpus/$t" "${seeds[@]}" >"artifacts/$t.log" 2>&1) || rc=$?
	tail -n 12 "$dir/artifacts/$t.log"
	found=0
	for f in "$art"/*; do
		[ -f "$f" ] || continue
		sum=$(sha1sum "$f" | cut -d' ' -f1)
		cp "$f" "$regress/$sum"
		echo "fuzz_$t: finding saved as $regress/$sum ($(basename "$f"))"
		found=1
	done
	if [ $rc -ne 0 ] || [ $found -ne 0 ]; then
		echo "fuzz_$t: FAILED (exit $rc); log: $dir/artifacts/$t.log"
		status=1
	fi
done
exit $status
