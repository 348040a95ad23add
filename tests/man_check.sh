#!/bin/bash
# SPDX-License-Identifier: MIT
# The manual page renders without a warning and documents every command
# and option `ptfs --help` prints.  Usage: man_check.sh PTFS MANPAGE
set -uo pipefail
ptfs=$1 page=$2
status=0
warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
if [ -n "$warnings" ]; then
	echo "FAIL: man --warnings -l $page:"
	echo "$warnings"
	status=1
fi
# The rendered text in ASCII (hyphens stay '-'), without bold/underline.
text=$(LC_ALL=C MANWIDTH=200 MAN_KEEP_FORMATTING=0 man -E ascii -l "$page" 2>/dev/null | col -b)
help=$("$ptfs" --help) || { echo "FAIL: ptfs --help failed"; exit 1; }
n=0
# every -x / --long option, every -o NAME, every subcommand
opts=$(grep -oE '(^|[][ ,])--?[A-Za-z][A-Za-z_-]*' <<<"$help" | sed 's/^[][ ,]*//' | sort -u)
oopts=$(grep -oE -- '-o [a-z_]+' <<<"$help" | cut -c4- | grep -vx 'OPTION' | sort -u)
cmds=$(grep -oE '^ *(usage: )?ptfs [a-z]+' <<<"$help" | awk '{print $NF}' | sort -u)
for o in $opts; do
	n=$((n + 1))
	grep -qE -- "(^|[^A-Za-z-])$o([^A-Za-z_-]|$)" <<<"$text" || { echo "FAIL: option $o of --help is not in $page"; status=1; }
done
for o in $oopts; do
	n=$((n + 1))
	grep -qE -- "-o $o" <<<"$text" || { echo "FAIL: -o $o of --help is not in $page"; status=1; }
done
for c in $cmds; do
	n=$((n + 1))
	grep -qE -- "ptfs $c " <<<"$text" || { echo "FAIL: command ptfs $c of --help is not in $page"; status=1; }
done
# every list of export targets (--to a|b|c) is the exporter table's, in
# its order: the table is what `ptfs export --list-targets` prints
targets=$("$ptfs" export --list-targets | awk '{print $1}' | paste -sd'|')
[ -n "$targets" ] || { echo "FAIL: ptfs export --list-targets printed no target"; status=1; }
lists=$(grep -oE -- '--to [a-z0-9_]+(\|[a-z0-9_]+)+' <<<"$text" | cut -c6- | sort -u)
[ -n "$lists" ] || { echo "FAIL: $page lists no export targets (--to a|b|c)"; status=1; }
for l in $lists; do
	n=$((n + 1))
	[ "$l" = "$targets" ] || { echo "FAIL: $page lists --to $l, ptfs export --list-targets $targets"; status=1; }
done
# the page's header names the version the binary reports
version=$("$ptfs" --version | head -1)
grep -q "^\.TH PTFS 1 \"[^\"]*\" \"$version\"" "$page" ||
	{ echo "FAIL: $page's .TH line does not name '$version'"; status=1; }
[ "$n" -ge 20 ] || { echo "FAIL: only $n options found in --help: the check is broken"; status=1; }
for section in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" FILES EXAMPLES LIMITS; do
	grep -qx "$section" <<<"$text" || { echo "FAIL: no $section section"; status=1; }
done
[ $status -eq 0 ] && echo "man page: renders cleanly; $n commands and options of --help all documented"
exit $status
