# SPDX-License-Identifier: MIT
"""The canary: checkpoints made here whose pickles would run a command if
unpickled.  Python's own unpickler does run it (so the canary works);
ptfs ls/cat/info and the mount never do."""
import os
import pickle
import subprocess
import sys
import zipfile

import torch

from conftest import inert_run, mounted, needs_fuse, run


def payload(canary):
    """Protocol-2 pickle of {'w': os.system('touch CANARY')}, built opcode
    by opcode: nothing here runs it."""
    cmd = ("touch %s" % canary).encode()
    return (b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01"
            b"cos\nsystem\nq\x02X" + len(cmd).to_bytes(4, "little") + cmd +
            b"q\x03\x85q\x04Rq\x05s.")


def make_checkpoint(path, canary):
    """A torch.save archive with the payload in place of its data.pkl."""
    torch.save({"t": torch.arange(4)}, path)
    with zipfile.ZipFile(path) as z:
        items = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in items:
            z.writestr(name, payload(canary) if name.endswith("/data.pkl") else data)


def test_python_runs_the_payload(tmp_path):
    """Proof that the canary can fail: a real unpickler creates the file."""
    canary = tmp_path / "CANARY"
    blob = tmp_path / "p.pkl"
    blob.write_bytes(payload(canary))
    subprocess.run([sys.executable, "-c",
                    "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))",
                    str(blob)], check=True, capture_output=True)
    assert canary.exists()


def test_plain_pickle_is_inert(tmp_path):
    canary = tmp_path / "CANARY"
    blob = tmp_path / "p.pkl"
    blob.write_bytes(payload(canary))
    for args in (["info", str(blob)], ["ls", "-a", str(blob)]):
        r, execs, connects, left = inert_run(args, tmp_path / args[0])
        assert len(execs) == 1 and not connects and not left, (execs, connects, left)
        assert not canary.exists()
    assert "dangerous global os.system" in run("info", str(blob)).stdout.decode()


def test_checkpoint_is_inert(tmp_path):
    canary = tmp_path / "CANARY"
    ck = str(tmp_path / "m.pt")
    make_checkpoint(ck, canary)
    for args in (["info", ck], ["ls", "-a", ck], ["cat", ck, ".ptfs/pickle.txt"]):
        r, execs, connects, left = inert_run(args, tmp_path / args[0])
        assert r.returncode == 0, r.stderr.decode()
        assert len(execs) == 1 and not connects and not left, (execs, connects, left)
    assert not canary.exists()


@needs_fuse
def test_mount_is_inert(tmp_path):
    canary = tmp_path / "CANARY"
    ck = str(tmp_path / "m.pt")
    make_checkpoint(ck, canary)
    with mounted(ck, "-o", "ro") as mnt:
        for d, _, files in os.walk(mnt):
            for f in files:
                with open(os.path.join(d, f), "rb") as fh:
                    fh.read()
    assert not canary.exists()
