# SPDX-License-Identifier: MIT
"""The undo journal of in-place commits is not a way into other users'
files (core/container/journal.h, "Trust").

As root, in a sticky world-writable directory like /tmp: a root-owned 0644
checkpoint, and user nobody plants FILE.ptfs-journal beside it -- a
forgery with valid checksums, bound to the checkpoint's device, inode and
size, that would write chosen bytes into it if applied.  `ptfs ls`, `cat`,
`info` and mounts (read-only or not) never apply it; the read-only ones
leave it where it is, and each says so in one line.  A journal with bad
size fields does not keep the checkpoint from opening.  A real journal of
a killed commit makes the read-only commands refuse ("needs recovery")
without changing a byte or a time stamp of the checkpoint or the journal.
"""
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import zlib

import pytest
import torch

from conftest import PTFS, have_fuse, mounted, run

REQUIRE_ROOT = os.environ.get("PTFS_REQUIRE_ROOT") == "1"
RUNUSER = shutil.which("runuser") or shutil.which("setpriv")
SECTOR = 512


def need_root():
    if os.geteuid() != 0 or not RUNUSER:
        if REQUIRE_ROOT:
            pytest.fail("PTFS_REQUIRE_ROOT=1 but not root or no runuser")
        pytest.skip("needs root and runuser to act as user nobody")


def as_nobody(code, *args, input=None):
    """Run Python @code as user nobody; return the CompletedProcess."""
    if os.path.basename(RUNUSER) == "runuser":
        cmd = [RUNUSER, "-u", "nobody", "--"]
    else:
        cmd = [RUNUSER, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    return subprocess.run(cmd + ["/usr/bin/python3", "-c", code, *args],
                          input=input, capture_output=True, timeout=60)


# nobody writes stdin into argv[1], a new file of its own, mode 0600
PLANT = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, sys.stdin.buffer.read())
os.close(fd)
"""


@pytest.fixture
def sticky_dir():
    """A fresh directory like /tmp: world-writable, sticky."""
    d = tempfile.mkdtemp(prefix="ptfs-sticky-", dir="/tmp")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def root_checkpoint(d):
    ck = os.path.join(d, "model.pt")
    torch.save({"w": torch.arange(3072, dtype=torch.int32)}, ck)
    os.chmod(ck, 0o644)
    return ck


def forge(ck, off, payload, size_field=None):
    """A journal (format of journal.h) that passes every check but its
    owner's: bound to @ck's device, inode and size, one range at @off whose
    "old bytes" are @payload and whose "new bytes" CRCs are those of what
    @ck holds now -- so recovery would take every sector for new and write
    @payload back."""
    st = os.stat(ck)
    with open(ck, "rb") as f:
        f.seek(off)
        cur = f.read(len(payload))
    crcs, at = b"", off
    while at < off + len(payload):
        end = min((at // SECTOR + 1) * SECTOR, off + len(payload))
        crcs += struct.pack("<I", zlib.crc32(cur[at - off:end - off]))
        at = end
    n = 1 if size_field is None else size_field
    h = struct.pack("<8sIIQQQQQQQ", b"PTFSJRNL", 2, 80, st.st_size, n,
                    len(payload), st.st_ino, SECTOR, st.st_dev, 0)
    h += struct.pack("<II", zlib.crc32(h), 0)
    body = struct.pack("<QQ", off, len(payload)) + payload + crcs
    return h + body + struct.pack("<I", zlib.crc32(body)) + b"PTFSJEND"


def snapshot(*paths):
    out = []
    for p in paths:
        st = os.stat(p)
        with open(p, "rb") as f:
            out.append((f.read(), st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return out


def one_line(stderr):
    lines = stderr.decode(errors="replace").splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_forgery_is_valid_but_for_its_owner(sticky_dir):
    """Control: the same forgery owned by root is a journal recovery would
    apply -- the read-only commands refuse the checkpoint until
    `ptfs recover` -- so the next test's refusal is the owner check's."""
    need_root()
    ck = root_checkpoint(sticky_dir)
    j = ck + ".ptfs-journal"
    with open(j, "wb") as f:
        f.write(forge(ck, 1000, b"\x41" * 700))
    os.chmod(j, 0o600)
    before = snapshot(ck, j)
    r = run("ls", ck)
    assert r.returncode == 1, r.stderr
    assert "needs recovery" in one_line(r.stderr)
    assert snapshot(ck, j) == before


def test_forged_journal_of_another_user(sticky_dir):
    need_root()
    ck = root_checkpoint(sticky_dir)
    j = ck + ".ptfs-journal"
    r = as_nobody(PLANT, j, input=forge(ck, 1000, b"\x41" * 700))
    assert r.returncode == 0, r.stderr
    assert os.stat(j).st_uid != 0
    before = snapshot(ck, j)
    for args in (("ls", ck), ("cat", ck, "w"), ("info", ck)):
        r = run(*args)
        assert r.returncode == 0, (args, r.stderr)
        line = one_line(r.stderr)
        assert "untrusted journal" in line and "owned by uid" in line, line
        assert "ignored" in line, line
        # read-only: the journal stays where it is, nothing is written
        assert snapshot(ck, j) == before, args
    assert not os.path.exists(j + ".invalid")
    r = run("cat", ck, "w")
    assert r.stdout == torch.arange(3072, dtype=torch.int32).numpy().tobytes()
    if not have_fuse:
        return
    for opts in (("-o", "ro"), ()):
        with mounted(ck, *opts) as mnt:
            with open(os.path.join(mnt, "w"), "rb") as f:
                assert len(f.read()) == 3072 * 4
        with open(ck, "rb") as f:
            assert f.read() == before[0][0], opts


def test_bad_size_field_does_not_block(sticky_dir):
    need_root()
    ck = root_checkpoint(sticky_dir)
    j = ck + ".ptfs-journal"
    r = as_nobody(PLANT, j, input=forge(ck, 1000, b"\x41" * 700,
                                        size_field=1 << 40))
    assert r.returncode == 0, r.stderr
    before = snapshot(ck, j)
    r = run("ls", ck)
    assert r.returncode == 0, r.stderr
    assert "journal" in one_line(r.stderr)
    assert snapshot(ck, j) == before
    # owned by root, it is still only set aside -- never a refusal
    os.unlink(j)
    with open(j, "wb") as f:
        f.write(forge(ck, 1000, b"\x41" * 700, size_field=1 << 40))
    os.chmod(j, 0o600)
    r = run("ls", ck)
    assert r.returncode == 0, r.stderr
    assert "bad size fields" in one_line(r.stderr)
    assert snapshot(ck)[0] == before[0]


def test_real_journal_read_only_refuses(tmp_path):
    """A commit killed half-way leaves a valid journal: `ptfs ls` and
    `ptfs cat` refuse with one line naming `ptfs recover`, and change
    nothing on disk."""
    ck = str(tmp_path / "model.pt")
    torch.save({"w": torch.arange(3072, dtype=torch.int32),
                "b": torch.arange(100, dtype=torch.int64)}, ck)
    j = ck + ".ptfs-journal"
    new = torch.full((3072,), 7, dtype=torch.int32).numpy().tobytes()
    r = subprocess.run([PTFS, "set", "-o", "commit=inplace", ck, "w"],
                       input=new, capture_output=True, timeout=60,
                       env=dict(os.environ, PTFS_FAULT="patch:2:KILL"))
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert os.path.exists(j)
    before = snapshot(ck, j)
    for args in (("ls", ck), ("cat", ck, "w"), ("info", ck)):
        r = run(*args)
        assert r.returncode == 1, (args, r.stderr)
        line = one_line(r.stderr)
        assert "needs recovery" in line and "ptfs recover" in line, line
        assert snapshot(ck, j) == before, args
    assert sorted(os.listdir(str(tmp_path))) == ["model.pt", "model.pt.ptfs-journal"]


def test_recover_sets_forgery_aside(sticky_dir):
    """`ptfs recover` (it may write) as root: the forgery is renamed aside,
    never applied, never deleted; one line says so."""
    need_root()
    ck = root_checkpoint(sticky_dir)
    j = ck + ".ptfs-journal"
    r = as_nobody(PLANT, j, input=forge(ck, 1000, b"\x41" * 700))
    assert r.returncode == 0, r.stderr
    before = snapshot(ck)
    forged = open(j, "rb").read()
    r = run("recover", ck)
    assert r.returncode == 0, r.stderr
    line = one_line(r.stderr)
    assert "untrusted journal" in line and "kept as" in line, line
    assert snapshot(ck) == before
    assert not os.path.exists(j)
    assert open(j + ".invalid", "rb").read() == forged


def test_recover_leaves_resaved_checkpoint(tmp_path):
    """Killed half-way, then torch.save to the same path (same inode, same
    size): `ptfs recover` does not roll the newer file back; it sets the
    journal aside and says another program wrote the checkpoint."""
    ck = str(tmp_path / "model.pt")
    torch.save({"w": torch.arange(3072, dtype=torch.int32)}, ck)
    new = torch.full((3072,), 7, dtype=torch.int32).numpy().tobytes()
    r = subprocess.run([PTFS, "set", "-o", "commit=inplace", ck, "w"],
                       input=new, capture_output=True, timeout=60,
                       env=dict(os.environ, PTFS_FAULT="patch:2:KILL"))
    assert r.returncode == -signal.SIGKILL, r.stderr
    ino = os.stat(ck).st_ino
    newer = {"w": torch.arange(3072, dtype=torch.int32) * 5}
    torch.save(newer, ck)
    assert os.stat(ck).st_ino == ino
    before = snapshot(ck)
    r = run("ls", ck)               # read-only: mentioned, not refused
    assert r.returncode == 0, r.stderr
    assert "neither the old nor the new" in one_line(r.stderr)
    r = run("recover", ck)
    assert r.returncode == 0, r.stderr
    assert "written by another program" in one_line(r.stderr)
    assert snapshot(ck) == before
    assert os.path.exists(ck + ".ptfs-journal.invalid")
    assert torch.equal(torch.load(ck, weights_only=True)["w"], newer["w"])
