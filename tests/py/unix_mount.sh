#!/bin/bash
# SPDX-License-Identifier: MIT
# Run by test_unix_mount.py inside a private mount namespace (unshare -m):
# mounts a checkpoint the Unix way, through mount(8) and mount.fuse3, which
# runs "ptfs SOURCE MOUNTPOINT -o OPTIONS" found on the shell's default
# PATH.  To have that PATH find the ptfs under test, /usr/local/sbin is
# bind-mounted over with a directory holding it -- in this namespace only.
# Prints "key: value" lines for the test to check.
set -euo pipefail
ptfs=$1 ck=$2 work=$3
mkdir -p "$work/bin" "$work/m1" "$work/m2" "$work/m3"
ln -sf "$ptfs" "$work/bin/ptfs"
mount --bind "$work/bin" /usr/local/sbin
cleanup() {
	for m in m1 m2 m3; do
		if mountpoint -q "$work/$m"; then umount "$work/$m"; fi
	done
	umount /usr/local/sbin
}
trap cleanup EXIT
echo "helper path: $(env -i /bin/sh -c 'command -v ptfs')"

# The daemon of a mountpoint exits after umount, once pending writes are
# committed: wait for it.
daemon_running() {
	local p c
	for p in /proc/[0-9]*; do
		c=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
		case "$c" in
		ptfs\ *" $1 "* | */ptfs\ *" $1 "*) return 0 ;;
		esac
	done
	return 1
}
wait_daemon() {
	local i
	for i in $(seq 200); do
		daemon_running "$1" || return 0
		sleep 0.05
	done
	echo "daemon of $1 still running"
	return 1
}

# 1. mount -t fuse.ptfs ... -o ro
mount -t fuse.ptfs "$ck" "$work/m1" -o ro
echo "m1: $(findmnt -n -o FSTYPE,SOURCE,OPTIONS "$work/m1")"
cp "$work/m1/w" "$work/m1.w"
echo "m1 daemon: $(daemon_running "$work/m1" && echo running || echo absent)"
if (echo x >"$work/m1/w") 2>/dev/null; then echo "m1 write: allowed"; else echo "m1 write: refused"; fi
umount "$work/m1"
wait_daemon "$work/m1"
echo "m1 after umount: $(mountpoint -q "$work/m1" && echo mounted || echo unmounted)"

# 2. an fstab line with the options fstab lines carry; mount MOUNTPOINT
printf '%s %s fuse.ptfs %s 0 0\n' "$ck" "$work/m2" \
	"defaults,ro,noatime,nofail,_netdev,user,x-systemd.automount,comment=ptfs" >"$work/fstab"
mount --fstab "$work/fstab" "$work/m2"
echo "m2: $(findmnt -n -o FSTYPE,SOURCE,OPTIONS "$work/m2")"
cp "$work/m2/w" "$work/m2.w"
umount "$work/m2"
wait_daemon "$work/m2"

# 3. read-write through fstab: a write is committed at umount
printf '%s %s fuse.ptfs %s 0 0\n' "$ck" "$work/m3" "rw,noatime,nofail" >"$work/fstab"
mount --fstab "$work/fstab" "$work/m3"
echo "m3: $(findmnt -n -o FSTYPE,SOURCE,OPTIONS "$work/m3")"
cp "$work/new.bin" "$work/m3/w"
umount "$work/m3"
wait_daemon "$work/m3"
echo "done"
