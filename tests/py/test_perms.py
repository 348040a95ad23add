# SPDX-License-Identifier: MIT
"""Permissions of the mounted tree, enforced by the kernel for every user
(default_permissions): a second real user (nobody) against allow_other
mounts of root's checkpoints of modes 0600, 0640, 0644 and 0666, and of a
checkpoint nobody owns.  Reads and writes are refused or allowed exactly
as the checkpoint's mode says, and an allowed write is committed."""
import os
import pwd
import shutil
import stat
import subprocess
import tempfile

import pytest
import torch

from conftest import PTFS, mounted, needs_fuse

REQUIRE_ROOT = os.environ.get("PTFS_REQUIRE_ROOT") == "1"
RUNUSER = shutil.which("runuser") or shutil.which("setpriv")


def need_root():
    if os.geteuid() != 0 or not RUNUSER:
        if REQUIRE_ROOT:
            pytest.fail("PTFS_REQUIRE_ROOT=1 but not root or no runuser")
        pytest.skip("needs root and runuser to act as user nobody")


# exit 0 when the caller may open /dev/fuse for reading and writing
NOBODY_OPENS_FUSE = "import os; os.close(os.open('/dev/fuse', os.O_RDWR))"
# the permission bits of argv[1], printed to stdout
MODE_OF = "import os, stat, sys; print(oct(stat.S_IMODE(os.stat(sys.argv[1]).st_mode)))"


def as_nobody(code, *args):
    """Run Python @code as user nobody; return (exit status, stderr and
    stdout)."""
    if os.path.basename(RUNUSER) == "runuser":
        cmd = [RUNUSER, "-u", "nobody", "--"]
    else:
        cmd = [RUNUSER, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    r = subprocess.run(cmd + ["/usr/bin/python3", "-c", code, *args],
                       capture_output=True, timeout=60)
    return r.returncode, r.stderr.decode() + r.stdout.decode()


READ = """
import sys
try:
    open(sys.argv[1], 'rb').read()
except PermissionError:
    sys.exit(13)
"""
LIST = """
import os, sys
try:
    os.listdir(sys.argv[1])
except PermissionError:
    sys.exit(13)
"""
WRITE = """
import sys
try:
    with open(sys.argv[1], 'r+b') as f:
        f.write(bytes([7]) * 8)
except PermissionError:
    sys.exit(13)
"""


def make(tmp_path, mode, owner=None):
    d = tmp_path / ("m%o" % mode)
    d.mkdir()
    p = str(d / "ck.pt")
    torch.save({"w": torch.arange(16, dtype=torch.int64)}, p)
    if owner is not None:
        os.chown(p, owner, owner)
    os.chmod(p, mode)
    return p


@needs_fuse
@pytest.mark.parametrize("mode,read,write", [
    (0o600, False, False),
    (0o640, False, False),      # nobody is not in root's group
    (0o644, True, False),
    (0o666, True, True),
])
def test_nobody_against_root_checkpoint(tmp_path, mode, read, write):
    need_root()
    ck = make(tmp_path, mode)
    with mounted(ck, "-o", "allow_other") as mnt:
        st = os.stat(os.path.join(mnt, "w"))
        assert st.st_uid == 0 and st.st_gid == 0
        assert stat.S_IMODE(st.st_mode) == mode
        dmode = stat.S_IMODE(os.stat(mnt).st_mode)
        # read bits plus search, and in a writable mount the owner's
        # write bit (the owner may rm, mv and mkdir: README "Surgery")
        assert dmode == (mode & 0o444) | ((mode & 0o444) >> 2) | (mode & 0o200)
        w = os.path.join(mnt, "w")
        rc, err = as_nobody(LIST, mnt)
        assert rc == (0 if read else 13), err
        rc, err = as_nobody(READ, w)
        assert rc == (0 if read else 13), err
        rc, err = as_nobody(WRITE, w)
        assert rc == (0 if write else 13), err
        # root is still allowed everything
        assert open(w, "rb").read(8) == (b"\x07" * 8 if write else bytes(8))
    got = torch.load(ck)["w"]
    assert got[0].item() == (0x0707070707070707 if write else 0)
    assert got[1:].tolist() == list(range(1, 16))


@needs_fuse
def test_nobody_owns_checkpoint(tmp_path):
    need_root()
    nobody = pwd.getpwnam("nobody").pw_uid
    ck = make(tmp_path, 0o600, owner=nobody)
    with mounted(ck, "-o", "allow_other") as mnt:
        st = os.stat(os.path.join(mnt, "w"))
        assert st.st_uid == nobody
        rc, err = as_nobody(WRITE, os.path.join(mnt, "w"))
        assert rc == 0, err
    assert torch.load(ck)["w"][0].item() == 0x0707070707070707


@needs_fuse
def test_readonly_modes(tmp_path):
    need_root()
    ck = make(tmp_path, 0o640)
    with mounted(ck, "-o", "ro,allow_other") as mnt:
        assert stat.S_IMODE(os.stat(os.path.join(mnt, "w")).st_mode) == 0o440
        assert stat.S_IMODE(os.stat(mnt).st_mode) == 0o550
        assert stat.S_IMODE(os.stat(os.path.join(mnt, "w.json")).st_mode) == 0o440


@needs_fuse
def test_unwritable_directory_mounts_read_only(tmp_path):
    """A checkpoint the user owns in a directory they cannot write: every
    commit writes beside the file, so the mount is read-only (and says so)
    instead of taking writes it can never commit."""
    need_root()
    nobody = pwd.getpwnam("nobody").pw_uid
    base = tempfile.mkdtemp(prefix="ptfs-perm-")   # /tmp: nobody may enter
    os.chmod(base, 0o755)
    ck = os.path.join(base, "ck.pt")
    torch.save({"w": torch.arange(16, dtype=torch.int64)}, ck)
    os.chown(ck, nobody, nobody)
    mnt = tempfile.mkdtemp(prefix="ptfs-mnt-")
    os.chown(mnt, nobody, nobody)
    cmd = [RUNUSER, "-u", "nobody", "--"] if os.path.basename(RUNUSER) == "runuser" else \
        [RUNUSER, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    # nobody runs a copy of the binary: the build tree may lie in a
    # directory only root can enter (a clone under mktemp -d is 0700)
    exe = os.path.join(base, "ptfs")
    shutil.copy2(PTFS, exe)
    os.chmod(exe, 0o755)
    # ask the machine, do not assume: Debian makes /dev/fuse 0666, some
    # containers and hardened hosts 0600 (then only root may mount)
    can_fuse = as_nobody(NOBODY_OPENS_FUSE)[0] == 0
    try:
        r = subprocess.run(cmd + [exe, ck, mnt], capture_output=True, timeout=60)
        # decided before mounting, whether or not the mount succeeds
        assert b"is not writable by this user" in r.stderr and b"mounted read-only" in r.stderr
        if can_fuse:
            assert r.returncode == 0, r.stderr
            # without allow_other only nobody may look inside the mount;
            # tensor files have the checkpoint's mode without write bits
            rc, out = as_nobody(MODE_OF, os.path.join(mnt, "w"))
            want = stat.S_IMODE(os.stat(ck).st_mode) & ~0o222
            assert rc == 0 and out.strip() == oct(want), out
        else:
            assert r.returncode != 0 and b"/dev/fuse" in r.stderr, r.stderr
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        os.rmdir(mnt)
        shutil.rmtree(base, ignore_errors=True)
