#!/bin/sh
# SPDX-License-Identifier: MIT
# Run the pytest suite (arguments go to pytest) with Debian's Python, the
# one with torch; "run.sh --script FILE ARGS" runs a Python script instead.  Without it: one "skipped:" line and exit 77, which ctest
# reports as skipped; PTFS_REQUIRE_PYTHON=1 (CI) makes that a failure.
py=/usr/bin/python3
if ! "$py" -c 'import pytest, torch, numpy' >/dev/null 2>&1; then
	echo "skipped: $py with pytest, torch and numpy not found" \
	     "(Debian: python3-pytest python3-torch python3-numpy)"
	if [ "${PTFS_REQUIRE_PYTHON:-}" = 1 ]; then
		echo "required by PTFS_REQUIRE_PYTHON=1"
		exit 1
	fi
	exit 77
fi
if [ "${1:-}" = --script ]; then
	shift
	exec "$py" "$@"
fi
cd "$(dirname "$0")" || exit 1
exec "$py" -m pytest -q -rs -p no:cacheprovider "$@"
