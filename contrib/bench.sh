#!/usr/bin/env bash
# The benchmark command: build a Release ptfs, generate the
# checkpoints with torch.save in a temp dir, run every measurement
# (alternating contenders, 7 repetitions, medians and ratios), print the
# table, remove the temp dir and leave no mount behind.
#
#   contrib/bench.sh [--quick] [--reps N] [--only seq,memmap,open,memory,peers,commit,commitways,settings]
#                    [--no-settings] [--json FILE] [--many 20000,100000]
#
# --quick: 256 MiB / 512 MiB checkpoints, 3 repetitions, no settings build.
# --many: tensor counts of the state dicts that section 3 opens and lists.
# Needs /usr/bin/python3 with torch and numpy, fusermount3, and for the
# peers fuse-zip and archivemount (Debian); mount-zip and fuse-archive are
# used when on PATH or in $PTFS_BENCH_PEERS (binaries built elsewhere).
# Disk: ~3.5 GiB under $TMPDIR (or /tmp), plus a 2 GiB copy during the
# commit measurement.  Full mode took ~11 min on 2 vCPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
quick=0 settings=1 only=0
args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1; args+=("$1") ;;
	--no-settings) settings=0 ;;
	--only) only=1; args+=("$1" "$2"); shift ;;
	--reps|--json|--many) args+=("$1" "$2"); shift ;;
	-h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ $quick = 1 ] && settings=0

work=$(mktemp -d "${TMPDIR:-/tmp}/ptfs-bench.XXXXXX")
cleanup() {
	# the Python side unmounts what it mounts; this is the last net
	if [ -d "$work" ]; then
		for m in "$work"/mnt-*; do
			[ -d "$m" ] && mountpoint -q "$m" && fusermount3 -u -z "$m" 2>/dev/null || true
		done
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

echo "== building Release ptfs in $work/build"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build "$work/build" -j "$(nproc)" --target ptfs >/dev/null
variant=()
if [ $settings = 1 ]; then
	echo "== building the settings variant (see contrib/bench/variant.py)"
	v=$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import variant; print(variant.build(sys.argv[2], sys.argv[3]) or "")' \
		"$src/contrib/bench" "$src" "$work")
	[ -n "$v" ] && variant=(--variant "$v")
elif [ $only = 0 ]; then
	args+=(--only "$(echo seq memmap open memory peers commit commitways | tr ' ' ,)")
fi
/usr/bin/python3 "$src/contrib/bench/run.py" --ptfs "$work/build/ptfs" --tmp "$work/data" \
	"${variant[@]}" "${args[@]}"
