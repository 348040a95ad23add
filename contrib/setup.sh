#!/usr/bin/env bash
# Install everything ptfs needs to build, run and test on Debian 12.
# Safe to run again; skips apt when everything is already there.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev
      libfuse3-dev fuse3 libarchive-dev uthash-dev libdeflate-dev
      libcmocka-dev python3-pytest python3-torch python3-numpy attr
      strace man-db bsdextrautils dpkg-dev bash-completion)
pkgs+=(zlib1g-dev xfsprogs btrfs-progs util-linux hyperfine)  # issue 13: crc32_combine, reflink tests, bench
pkgs+=(libcurl4-openssl-dev nginx-light openssl)  # issue 16: remote sources and their tests
pkgs+=(fuse-zip archivemount)  # issue 17: peer mounters in contrib/bench.sh (optional there)
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
