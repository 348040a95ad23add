#!/usr/bin/env bash
# Install what ptfs needs on Debian 12.  Safe to run again; skips apt when
# everything is already there.
#
#   contrib/setup.sh            everything: build, tests, packaging checks,
#                               benchmarks (CI)
#   contrib/setup.sh --demo     what contrib/demo.sh needs to build ptfs and
#                               save its checkpoint with torch
#   contrib/setup.sh --demo-run what contrib/demo.sh needs with an installed
#                               ptfs (PTFS=/usr/bin/ptfs)
#   ... --list                  print the packages instead of installing
set -euo pipefail
# to build ptfs (libarchive and libcurl are optional: the tar format of
# torch <= 0.1.9 and remote checkpoints)
build=(build-essential cmake pkg-config libfuse3-dev fuse3 uthash-dev
       libdeflate-dev zlib1g-dev libssl-dev)
# the demo: torch saves the checkpoint, numpy reads a tensor file
demo=(python3-torch python3-numpy)
pkgs=()
list=""
for a in "$@"; do
	case $a in
	--demo) pkgs=("${build[@]}" "${demo[@]}") ;;
	--demo-run) pkgs=(fuse3 "${demo[@]}") ;;
	--list) list=1 ;;
	*) echo "usage: contrib/setup.sh [--demo | --demo-run] [--list]" >&2; exit 2 ;;
	esac
done
if [ ${#pkgs[@]} -eq 0 ]; then
	pkgs=("${build[@]}" "${demo[@]}" clang libclang-rt-14-dev libarchive-dev
	      libcmocka-dev python3-pytest attr strace man-db bsdextrautils dpkg-dev
	      bash-completion)
	pkgs+=(universal-ctags)                           # contrib/check-structure.py
	pkgs+=(xfsprogs btrfs-progs util-linux)          # reflink commit tests
	pkgs+=(libcurl4-openssl-dev nginx-light openssl)  # remote sources and their tests
	pkgs+=(xvfb pcmanfm x11-utils)                    # the file-manager tests
	pkgs+=(libglib2.0-bin desktop-file-utils)         # gio open, update-desktop-database
	pkgs+=(shared-mime-info)                          # update-mime-database (test_view_types)
	pkgs+=(python3-onnx)                              # tests/py/test_onnx.py
	pkgs+=(lintian)                                   # contrib/deb-check.sh
	pkgs+=(hyperfine fuse-zip archivemount)           # contrib/bench.sh's peers
fi
if [ -n "$list" ]; then
	printf '%s\n' "${pkgs[@]}"
	exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
