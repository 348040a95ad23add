# SPDX-License-Identifier: MIT
"""Mounting the Unix way: `mount -t fuse.ptfs CHECKPOINT DIR -o ro` and an
fstab line (`mount --fstab FILE DIR`), both through mount.fuse3, which
runs `ptfs SOURCE MOUNTPOINT -o OPTIONS` with whatever options mount(8)
leaves.  Needs root (mount(8) of a FUSE type), in a private mount
namespace so nothing shows outside the test (tests/py/unix_mount.sh)."""
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

from conftest import PTFS, needs_fuse, needs_root, run

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = [needs_fuse, needs_root]


def test_mount_and_fstab(tmp_path):
    for tool in ("mount.fuse3", "unshare", "findmnt"):
        assert shutil.which(tool) or os.path.exists("/sbin/" + tool), tool
    ck = str(tmp_path / "model.pt")
    w = torch.arange(12, dtype=torch.float32)
    torch.save({"w": w, "b": torch.ones(3)}, ck)
    new = np.arange(100, 112, dtype=np.float32)
    (tmp_path / "new.bin").write_bytes(new.tobytes())
    work = str(tmp_path)
    r = subprocess.run(["unshare", "--mount", "--propagation", "private",
                        "bash", os.path.join(HERE, "unix_mount.sh"),
                        os.path.realpath(PTFS), ck, work],
                       capture_output=True, text=True, timeout=300)
    out = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    assert r.returncode == 0 and r.stdout.endswith("done\n"), (r.stdout, r.stderr)
    assert out["helper path"] == "/usr/local/sbin/ptfs"
    # mount -t fuse.ptfs -o ro: named after the checkpoint, read-only
    fstype, source, opts = out["m1"].split()
    assert (fstype, source) == ("fuse.ptfs", ck)
    assert "ro" in opts.split(",") and "noatime" not in opts.split(",")
    assert (tmp_path / "m1.w").read_bytes() == w.numpy().tobytes()
    assert out["m1 write"] == "refused"
    assert out["m1 daemon"] == "running"
    assert out["m1 after umount"] == "unmounted"
    # fstab with defaults, nofail, _netdev, user, x-*, comment=: accepted
    fstype, source, opts = out["m2"].split()
    assert (fstype, source) == ("fuse.ptfs", ck)
    assert {"ro", "noatime", "nosuid", "nodev"} <= set(opts.split(","))
    assert (tmp_path / "m2.w").read_bytes() == w.numpy().tobytes()
    # rw through fstab: the write was committed when it was unmounted
    assert "rw" in out["m3"].split()[2].split(",")
    assert np.array_equal(torch.load(ck)["w"].numpy(), new)
    assert torch.equal(torch.load(ck)["b"], torch.ones(3))
    # nothing left mounted outside or inside
    for m in ("m1", "m2", "m3"):
        assert not os.path.ismount(os.path.join(work, m))
    assert run("ls", ck).returncode == 0
