#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build the Debian package (cpack -G DEB), check it with lintian (an error
# fails; warnings are printed), its dependencies and files (every document
# the README links), install it with apt-get, use the installed ptfs
# (--version, the man page, the completion, the demo, mount -t
# fuse.ptfs), then remove it.
# Usage: contrib/deb-check.sh [BUILD_DIR]   (as root; CI runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-deb}
fail() { echo "deb-check: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (apt-get install)"
if dpkg-query -W -f='${Status}' ptfs 2>/dev/null | grep -q "install ok installed"; then
	fail "a ptfs package is already installed; remove it first (apt-get remove ptfs)"
fi

echo "== package"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF >/dev/null
cmake --build "$dir" -j "$(nproc)" >/dev/null
rm -f "$dir"/ptfs_*.deb
(cd "$dir" && cpack -G DEB >/dev/null)
debs=("$dir"/ptfs_*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "cpack made no single ptfs_*.deb"
deb=$(realpath "${debs[0]}")
echo "$(basename "$deb"): $(stat -c %s "$deb") bytes"
command -v lintian >/dev/null || fail "lintian is not installed (contrib/setup.sh installs it)"
# root is fine here: the package is only read
lint=$(lintian --allow-root --info "$deb" 2>&1) || true
echo "$lint" | grep -E '^[EW]:' || true
if grep -q '^E:' <<<"$lint"; then
	fail "lintian reports errors (above)"
fi
echo "lintian: no errors ($(grep -c '^W:' <<<"$lint" || true) warnings)"
maint=$(dpkg-deb -f "$deb" Maintainer)
grep -qE '^[^<]+ <[^@ ]+@[^@ ]+\.[a-z]+>$' <<<"$maint" || fail "Maintainer '$maint' is not 'Name <address>'"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
# libarchive13 and libssl3 are loaded with dlopen: declared by
# CMakeLists.txt, not found by dpkg-shlibdeps
for d in fuse3 libfuse3-3 libdeflate0 libarchive13 libssl3 libc6; do
	grep -qE "(^|, )$d( |,|$)" <<<"$depends" || fail "Depends lacks $d"
done
recommends=$(dpkg-deb -f "$deb" Recommends)
echo "Recommends: $recommends"
grep -qE "(^|, )libcurl4( |,|$)" <<<"$depends, $recommends" || fail "neither Depends nor Recommends has libcurl4"
files=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/bin/ptfs ./usr/share/man/man1/ptfs.1.gz \
	./usr/share/bash-completion/completions/ptfs ./usr/share/doc/ptfs/README.md \
	./usr/share/doc/ptfs/copyright ./usr/share/doc/ptfs/changelog.Debian.gz \
	./usr/share/applications/ptfs.desktop ./usr/share/mime/packages/ptfs-checkpoint.xml \
	./usr/share/mime/packages/ptfs-tensor.xml ./usr/share/thumbnailers/ptfs.thumbnailer; do
	grep -qx -- "$f" <<<"$files" || fail "package lacks $f"
done
# what the README links or names, where its relative links lead
for f in $(grep -oE 'docs/[A-Za-z_]+\.md' README.md | sort -u); do
	grep -qx -- "./usr/share/doc/ptfs/$f" <<<"$files" || fail "package lacks $f (README.md links it)"
done

echo "== install"
mnt=$(mktemp -d /tmp/ptfs-deb-XXXXXX)
cleanup() {
	mountpoint -q "$mnt/mnt" 2>/dev/null && umount "$mnt/mnt"
	mountpoint -q "$mnt/demo/mnt" 2>/dev/null && fusermount3 -u "$mnt/demo/mnt"
	DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq ptfs >/dev/null || true
	rm -rf "$mnt"
}
trap cleanup EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >/dev/null
[ "$(command -v ptfs)" = /usr/bin/ptfs ] || fail "ptfs is not /usr/bin/ptfs on PATH"
/usr/bin/ptfs --version
/usr/bin/ptfs --version | grep -q "tar (torch <= 0.1.9)" || fail "the package's ptfs has no tar format"
[ "$(man -w ptfs)" = /usr/share/man/man1/ptfs.1.gz ] || fail "man -w ptfs: $(man -w ptfs)"
page=$(MANWIDTH=80 man ptfs 2>/dev/null || true)
grep -q "mount a PyTorch checkpoint" <<<"$page" || fail "man ptfs"
# (the loader returns 124, "try again", once it has loaded a completion)
bash -c 'source /usr/share/bash-completion/bash_completion
	_completion_loader ptfs; complete -p ptfs' | grep -q "complete -F _ptfs ptfs" ||
	fail "bash-completion does not load the ptfs completion"
# "Open with ptfs": the triggers of shared-mime-info and desktop-file-utils
# made the caches GLib reads
if command -v gio >/dev/null && command -v update-desktop-database >/dev/null; then
	# triggers apt left pending (deferred configuration) are run first
	dpkg --triggers-only --pending >/dev/null 2>&1 || true
	# the whole answer first: grep -q stops at the first match, and gio,
	# still writing, then dies of SIGPIPE, which pipefail made a failure
	handlers=$(gio mime application/x-ptfs-pytorch 2>&1 || true)
	grep -q ptfs.desktop <<<"$handlers" ||
		fail "gio mime application/x-ptfs-pytorch does not name ptfs.desktop: $handlers"
fi

echo "== demo with the installed ptfs"
PTFS=/usr/bin/ptfs PTFS_DEMO_DIR="$mnt/demo" contrib/demo.sh --umount

echo "== the package ignores PTFS_FAULT (fault injection is for test builds)"
/usr/bin/ptfs --version | grep -q "fault injection" && fail "the package's ptfs reads PTFS_FAULT"
/usr/bin/ptfs cat "$mnt/demo/model.pt" model/0.weight >"$mnt/w.bin" || fail "ptfs cat"
for f in create:1:ENOSPC write:1:EIO rename:1:KILL patch:1:KILL; do
	PTFS_FAULT=$f /usr/bin/ptfs set "$mnt/demo/model.pt" model/0.weight <"$mnt/w.bin" ||
		fail "PTFS_FAULT=$f changed what the package's ptfs set does"
done

echo "== mount -t fuse.ptfs with the installed ptfs"
# mount.fuse3 runs ptfs through /bin/sh with its default PATH, where
# /usr/local comes first: an earlier `cmake --install` would shadow us
helper=$(env -i /bin/sh -c 'command -v ptfs')
[ "$helper" = /usr/bin/ptfs ] || fail "mount.fuse3 would run $helper, not /usr/bin/ptfs"
mkdir "$mnt/mnt"
mount -t fuse.ptfs "$mnt/demo/model.pt" "$mnt/mnt" -o ro,noatime
findmnt -n -o FSTYPE,SOURCE,OPTIONS "$mnt/mnt"
[ -s "$mnt/mnt/model/0.weight" ] || fail "no model/0.weight in the mount"
umount "$mnt/mnt"

echo "== remove"
trap - EXIT
cleanup
[ ! -e /usr/bin/ptfs ] || fail "/usr/bin/ptfs left after apt-get remove"
echo "deb-check: OK"
