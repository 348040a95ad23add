#!/bin/bash
# SPDX-License-Identifier: MIT
# `cmake --install` puts everything under the prefix: the binary, the
# compressed manual page, the bash completion, the documents (all the
# README links) and Debian's copyright and changelog.  Installs
# the build tree $1 into a temporary prefix and looks.
set -uo pipefail
build=$1
prefix=$(mktemp -d /tmp/ptfs-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
status=0
cmake --install "$build" --prefix "$prefix" >/dev/null || { echo "FAIL: cmake --install"; exit 1; }
# every document the README links or names, where its relative links lead
docs=$(cd "$(dirname "$0")/.." && grep -oE 'docs/[A-Za-z_]+\.md' README.md | sort -u | sed 's|^|share/doc/ptfs/|')
for f in bin/ptfs share/man/man1/ptfs.1.gz share/bash-completion/completions/ptfs \
	share/doc/ptfs/README.md $docs share/doc/ptfs/LICENSE \
	share/doc/ptfs/copyright share/doc/ptfs/changelog.Debian.gz; do
	[ -s "$prefix/$f" ] || { echo "FAIL: $f not installed"; status=1; }
done
"$prefix/bin/ptfs" --version | grep -q '^ptfs ' || { echo "FAIL: installed ptfs --version"; status=1; }
if command -v man >/dev/null; then
	MANWIDTH=80 man -l "$prefix/share/man/man1/ptfs.1.gz" 2>/dev/null | grep -q "mount a PyTorch checkpoint" ||
		{ echo "FAIL: the installed manual page does not render"; status=1; }
fi
bash -c 'source "$1" && complete -p ptfs' _ "$prefix/share/bash-completion/completions/ptfs" |
	grep -q "complete -F _ptfs ptfs" || { echo "FAIL: the installed completion does not register"; status=1; }
[ $status -eq 0 ] && echo "install: $(cd "$prefix" && find . -type f | wc -l) files under the prefix, all there"
exit $status
