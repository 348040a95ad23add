# SPDX-License-Identifier: MIT
"""Commits that cannot hurt.

- the Hugging Face cache layout (snapshots/REV/FILE -> ../../blobs/HASH,
  relative and absolute symlinks) for .pt and safetensors, through
  `ptfs set` and through the mount: the blob changes, the links stay;
- archives written by Python's zipfile (stored, deflated pickle, data
  descriptors): every commit way succeeds, says which way it wrote, and a
  second commit works (no "size changed", no ESTALE);
- a fault injected at every step of every writer (PTFS_FAULT) leaves the
  checkpoint byte-identical, with the real errno in the message;
- SIGKILL at random moments of `-o commit=inplace` commits of a large
  checkpoint, then any ptfs command: torch.load and zipfile.testzip() see
  the old or the new file, never a mix; damaged and foreign journals;
- clone commits on real XFS (reflink) and btrfs images, loop-mounted here.
"""
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import zipfile

import numpy as np
import pytest
import torch

from conftest import PTFS, mounted, needs_fuse, run

REQUIRE_ROOT = os.environ.get("PTFS_REQUIRE_ROOT") == "1"


def write_st(path, tensors):
    """A safetensors file: [u64le N][JSON][data] (int32 tensors)."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype=np.int32).tobytes()
        header[name] = {"dtype": "I32", "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return path


def read_st(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        a, b = h[name]["data_offsets"]
        f.seek(8 + n + a)
        return f.read(b - a)


def base_tensors():
    return {"w": torch.arange(3072, dtype=torch.int32),
            "b": torch.arange(100, dtype=torch.int64) * 3}


def save_pt(path, obj=None):
    torch.save(obj if obj is not None else base_tensors(), path)
    return path


def tensor_bytes(path, name):
    """The bytes of a tensor, as a reader other than ptfs sees them."""
    with open(path, "rb") as f:
        if f.read(2) != b"PK":
            return read_st(path, name)
    t = torch.load(path, weights_only=True)[name]
    return t.numpy().tobytes()


def check_pt(path):
    """testzip() (central directory CRCs against the data), and the CRCs
    zipfile does not look at: the local header's (unless bit 3 left it 0)
    and the data descriptor's."""
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        infos = z.infolist()
    with open(path, "rb") as f:
        for info in infos:
            f.seek(info.header_offset)
            h = f.read(30)
            assert h[:4] == b"PK\3\4"
            flags, crc = struct.unpack("<H", h[6:8])[0], struct.unpack("<I", h[14:18])[0]
            n, e = struct.unpack("<HH", h[26:30])
            if not (flags & 8 and crc == 0):
                assert crc == info.CRC, (info.filename, "local header")
            if flags & 8:
                f.seek(info.header_offset + 30 + n + e + info.compress_size)
                d = f.read(8)
                dcrc = struct.unpack("<I", d[4:8] if d[:4] == b"PK\7\x08" else d[:4])[0]
                assert dcrc == info.CRC, (info.filename, "data descriptor")


def temporaries(d):
    return [n for n in os.listdir(d) if ".ptfs-" in n]


# ---- the Hugging Face cache layout ---------------------------------------

@pytest.fixture(params=["pt", "safetensors"])
def kind(request):
    return request.param


def hf_cache(tmp_path, kind, absolute):
    root = tmp_path / "models--org--name"
    (root / "blobs").mkdir(parents=True)
    (root / "snapshots" / "abc123").mkdir(parents=True)
    blob = str(root / "blobs" / "9f86d081884c7d65")
    if kind == "pt":
        save_pt(blob)
    else:
        write_st(blob, {"w": np.arange(3072), "b": np.arange(100)})
    link = str(root / "snapshots" / "abc123" / ("model." + kind))
    os.symlink(blob if absolute else "../../blobs/9f86d081884c7d65", link)
    return blob, link


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
def test_hf_cache_set(tmp_path, kind, absolute):
    blob, link = hf_cache(tmp_path, kind, absolute)
    new = np.full(3072, 7, dtype=np.int32).tobytes()
    r = run("set", "-v", link, "w", input=new)
    assert r.returncode == 0, r.stderr
    assert b"committed (" in r.stderr
    assert os.path.islink(link)
    assert tensor_bytes(blob, "w") == new
    assert tensor_bytes(link, "w") == new
    assert not temporaries(os.path.dirname(blob))
    assert not temporaries(os.path.dirname(link))


@needs_fuse
@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
def test_hf_cache_mount(tmp_path, kind, absolute):
    blob, link = hf_cache(tmp_path, kind, absolute)
    new = np.full(3072, 9, dtype=np.int32).tobytes()
    with mounted(link) as mnt:
        with open(os.path.join(mnt, "w"), "r+b") as f:
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        # and once more: the second commit sees the new file
        with open(os.path.join(mnt, "w"), "r+b") as f:
            f.write(new[:4])
            os.fsync(f.fileno())
    assert os.path.islink(link)
    assert tensor_bytes(blob, "w") == new
    assert not temporaries(os.path.dirname(blob))


# ---- archives written by Python's zipfile ---------------------------------

class Unseekable:
    """A write-only stream: zipfile then writes data descriptors."""

    def __init__(self, f):
        self.f = f

    def write(self, b):
        return self.f.write(b)

    def flush(self):
        self.f.flush()


def python_zip(tmp_path, layout):
    """torch's records, rewritten by Python's zipfile."""
    src = save_pt(str(tmp_path / "torch.pt"))
    out = str(tmp_path / ("py-%s.pt" % layout))
    with zipfile.ZipFile(src) as z:
        recs = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with open(out, "wb") as f:
        target = Unseekable(f) if layout == "descriptor" else f
        with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as w:
            for name, data in recs:
                deflate = layout == "deflated" and name.endswith("data.pkl")
                w.writestr(zipfile.ZipInfo(name), data,
                           compress_type=zipfile.ZIP_DEFLATED if deflate
                           else zipfile.ZIP_STORED)
    with zipfile.ZipFile(out) as z:
        flags = {i.flag_bits & 8 for i in z.infolist()}
        assert flags == ({8} if layout == "descriptor" else {0})
    return out


@pytest.mark.parametrize("layout", ["stored", "deflated", "descriptor"])
@pytest.mark.parametrize("way", ["auto", "rewrite", "inplace"])
def test_python_zipfile_set(tmp_path, layout, way):
    ck = python_zip(tmp_path, layout)
    for k in (5, 6):
        new = np.full(3072, k, dtype=np.int32).tobytes()
        r = run("set", "-v", "-o", "commit=" + way, ck, "w", input=new)
        assert r.returncode == 0, r.stderr
        assert ("(%s," % ("rewrite" if way == "auto" else way)).encode() in r.stderr \
            or b"(clone," in r.stderr, r.stderr
        check_pt(ck)
        assert tensor_bytes(ck, "w") == new
        assert torch.equal(torch.load(ck, weights_only=True)["b"],
                           base_tensors()["b"])
        # and ptfs reads it back
        r = run("cat", ck, "w")
        assert r.returncode == 0 and r.stdout == new


@needs_fuse
@pytest.mark.parametrize("layout", ["stored", "descriptor"])
def test_python_zipfile_mount_rewrite(tmp_path, layout):
    """The rewriter moves records of a Python archive: the mount reindexes
    and goes on serving and committing (was: ESTALE forever)."""
    ck = python_zip(tmp_path, layout)
    with mounted(ck, "-o", "commit=rewrite") as mnt:
        for k in (3, 4):
            new = np.full(3072, k, dtype=np.int32).tobytes()
            with open(os.path.join(mnt, "w"), "r+b") as f:
                f.write(new)
                os.fsync(f.fileno())
            with open(os.path.join(mnt, "w"), "rb") as f:
                assert f.read() == new
            with open(os.path.join(mnt, "b"), "rb") as f:
                assert f.read() == base_tensors()["b"].numpy().tobytes()
    check_pt(ck)
    assert tensor_bytes(ck, "w") == new


def data_offsets(path):
    """Where each record's data starts, from the local headers."""
    out = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            f.seek(info.header_offset + 26)
            n, e = struct.unpack("<HH", f.read(4))
            out[info.filename] = info.header_offset + 30 + n + e
    return out


@needs_fuse
def test_moved_records_fresh_metadata(tmp_path):
    """After a commit that moved records, everything that states an offset
    says the new one, through the same mount: NAME.json (read, or pushed
    into the kernel's cache ahead of a reader) with its size, tree.json,
    info.txt's file size, /.ptfs/export/npy/NAME.json (was: the kernel
    kept the old text and size, and the daemon the old tree.json)."""
    # 'b' lies at 9951 in Python's layout and at 10048 once the rewriter
    # aligned the records: its sidecar grows by one digit
    obj = {"a": torch.zeros(9500, dtype=torch.int8),
           "b": torch.arange(16, dtype=torch.int32),
           "c": torch.arange(8, dtype=torch.float64)}
    src = str(tmp_path / "src.pt")
    torch.save(obj, src)
    ck = str(tmp_path / "py.pt")
    with zipfile.ZipFile(src) as z:
        recs = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(ck, "w", zipfile.ZIP_STORED) as w:
        for name, data in recs:
            w.writestr(zipfile.ZipInfo(name), data)
    # torch names the records after the file: src/data/0, ...
    rec = {k: "src/data/%d" % i for i, k in enumerate(obj)}
    before = data_offsets(ck)

    def read(mnt, rel):
        with open(os.path.join(mnt, rel), "rb") as f:
            data = f.read()
        assert os.stat(os.path.join(mnt, rel)).st_size == len(data), rel
        return data

    def offsets_of(mnt, sidecars=obj):
        """file_offset per tensor, as each generated file states it."""
        side = {k: json.loads(read(mnt, k + ".json"))["file_offset"]
                for k in sidecars}
        tree = {e["path"]: e["tensor"]["file_offset"]
                for e in json.loads(read(mnt, ".ptfs/tree.json"))["entries"]}
        npy = {k: json.loads(read(mnt, ".ptfs/export/npy/%s.json" % k))["file_offset"]
               for k in obj}
        return side, tree, npy

    with mounted(ck, "-o", "commit=rewrite") as mnt:
        # the kernel is shown every file; reading a.json then pushes
        # b.json and c.json into its cache (fs/push.c), unread
        for k in obj:
            os.stat(os.path.join(mnt, k + ".json"))
        side, tree, npy = offsets_of(mnt, ["a"])
        assert side["a"] == before[rec["a"]]
        assert tree["b"] == npy["b"] == before[rec["b"]] < 10000
        info = read(mnt, ".ptfs/info.txt").decode()
        assert "size: %d bytes" % os.path.getsize(ck) in info

        new = bytes(range(256)) * 37 + bytes(28)
        with open(os.path.join(mnt, "a"), "r+b") as f:
            f.write(new)
            os.fsync(f.fileno())
        after = data_offsets(ck)
        assert after[rec["b"]] >= 10000, "the records did not move"

        side, tree, npy = offsets_of(mnt)
        want = {k: after[rec[k]] for k in obj}
        assert side == want
        assert tree == want
        assert npy == want
        info = read(mnt, ".ptfs/info.txt").decode()
        assert "size: %d bytes" % os.path.getsize(ck) in info
        # the bytes at each stated offset are the tensor's
        with open(ck, "rb") as f:
            for k in obj:
                data = read(mnt, k)
                f.seek(side[k])
                assert f.read(len(data)) == data, k
        assert read(mnt, "a") == new
    loaded = torch.load(ck, weights_only=True)
    assert loaded["a"].numpy().tobytes() == new
    assert torch.equal(loaded["b"], obj["b"]) and torch.equal(loaded["c"], obj["c"])


@needs_fuse
@pytest.mark.parametrize("way", ["inplace", "rewrite", "moved"])
def test_records_fresh_after_commit(tmp_path, way):
    """/.ptfs/records/RECORD of a written tensor shows the committed bytes
    through the same mount, whether the commit patched the record where it
    lies (torch's layout: inplace, rewrite) or the rewriter moved it (a
    Python archive) (was: the kernel kept the pages it had read before the
    commit, keep_cache, for as long as it liked)."""
    if way == "moved":
        ck = python_zip(tmp_path, "stored")
    else:
        ck = save_pt(str(tmp_path / "ck.pt"))
    old = base_tensors()["w"].numpy().tobytes()
    other = base_tensors()["b"].numpy().tobytes()
    new = np.full(3072, 11, dtype=np.int32).tobytes()
    before = data_offsets(ck)

    def read(path):
        with open(path, "rb") as f:
            data = f.read()
        assert os.stat(path).st_size == len(data), path
        return data

    with mounted(ck, "-o", "commit=" + ("rewrite" if way == "moved" else way)) as mnt:
        rec = {k: json.loads(read(os.path.join(mnt, k + ".json")))["storage_record"]
               for k in ("w", "b")}
        path = {k: os.path.join(mnt, ".ptfs", "records", rec[k]) for k in rec}
        # now in the kernel's page cache
        assert read(path["w"]) == old
        assert read(path["b"]) == other
        with open(os.path.join(mnt, "w"), "r+b") as f:
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        after = data_offsets(ck)
        if way == "moved":
            assert after[rec["w"]] != before[rec["w"]], "the record did not move"
        else:
            assert after == before
        assert read(path["w"]) == new
        assert read(path["b"]) == other
        # a second commit, with the records where the first one left them
        with open(os.path.join(mnt, "w"), "r+b") as f:
            f.write(old[:8])
            f.flush()
            os.fsync(f.fileno())
        assert read(path["w"]) == old[:8] + new[8:]
    assert tensor_bytes(ck, "w") == old[:8] + new[8:]
    check_pt(ck)


# ---- faults at every step ---------------------------------------------------

REWRITE_STEPS = ["create", "owner", "mode", "write", "copy", "patch", "fsync",
                 "close", "rename"]
INPLACE_STEPS = ["jcreate", "jwrite", "jfsync", "patch", "pfsync"]


def make_ck(tmp_path, kind):
    if kind == "pt":
        return save_pt(str(tmp_path / "m.pt"))
    return write_st(str(tmp_path / "m.safetensors"),
                    {"w": np.arange(3072), "b": np.arange(100)})


@pytest.mark.parametrize("way,step", [("rewrite", s) for s in REWRITE_STEPS] +
                         [("inplace", s) for s in INPLACE_STEPS])
def test_fault_every_step(tmp_path, kind, way, step):
    ck = make_ck(tmp_path, kind)
    before = open(ck, "rb").read()
    os.chmod(ck, 0o640)
    new = np.full(3072, 1, dtype=np.int32).tobytes()
    env = dict(os.environ, PTFS_FAULT="%s:1:ENOSPC" % step)
    r = subprocess.run([PTFS, "set", "-o", "commit=" + way, ck, "w"], input=new,
                       capture_output=True, env=env, timeout=60)
    after = open(ck, "rb").read()
    if r.returncode == 0:
        # this writer has no such step (the ZIP rewriter copies with its
        # own loop; safetensors has no "write" of headers): it committed
        assert step in ("write", "copy", "patch"), r.stderr
        assert tensor_bytes(ck, "w") == new
    else:
        assert r.returncode == 1
        assert b"No space left on device" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert after == before
    assert not temporaries(str(tmp_path))
    assert not os.path.exists(ck + ".ptfs-journal")
    assert os.stat(ck).st_mode & 0o777 == 0o640


def test_fault_steps_are_reached(tmp_path, kind):
    """Each step above fails at least one writer (no step name is dead)."""
    failed = set()
    for way, steps in (("rewrite", REWRITE_STEPS), ("inplace", INPLACE_STEPS)):
        for step in steps:
            ck = make_ck(tmp_path / ("%s-%s" % (way, step)) if False else tmp_path, kind)
            env = dict(os.environ, PTFS_FAULT="%s:1:EIO" % step)
            r = subprocess.run([PTFS, "set", "-o", "commit=" + way, ck, "w"],
                               input=bytes(3072 * 4), capture_output=True,
                               env=env, timeout=60)
            if r.returncode:
                failed.add(step)
    assert failed >= set(INPLACE_STEPS) | {"create", "owner", "mode", "fsync",
                                           "close", "rename"}


# ---- kill -9 during in-place commits ---------------------------------------

BIG = 64 << 20          # int32 elements of the big tensor: 256 MiB


def big_ck(tmp_path, kind):
    big = np.zeros(BIG, dtype=np.int32)
    if kind == "pt":
        p = str(tmp_path / "big.pt")
        torch.save({"big": torch.from_numpy(big), "w": torch.arange(3072, dtype=torch.int32)}, p)
    else:
        p = write_st(str(tmp_path / "big.safetensors"), {"big": big, "w": np.arange(3072)})
    return p


def big_bytes(path):
    if path.endswith(".safetensors"):
        return read_st(path, "big")
    r = run("cat", path, "big")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_kill9_inplace(tmp_path, kind):
    ck = big_ck(tmp_path, kind)
    current = big_bytes(ck)
    rng = random.Random(13)
    outcomes = {"old": 0, "new": 0, "rolled back": 0}
    # how long one commit takes here, to kill within it
    current = np.full(len(current) // 4, 99, dtype=np.int32).tobytes()
    with open(str(tmp_path / "same.bin"), "wb") as f:
        f.write(current)
    t0 = time.monotonic()
    with open(str(tmp_path / "same.bin"), "rb") as f:
        r = subprocess.run([PTFS, "set", "-o", "commit=inplace", ck, "big"],
                           stdin=f, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    took = time.monotonic() - t0
    for i in range(10):
        newf = str(tmp_path / "new.bin")
        new = np.full(len(current) // 4, i + 1, dtype=np.int32).tobytes()
        with open(newf, "wb") as f:
            f.write(new)
        with open(newf, "rb") as f:
            p = subprocess.Popen([PTFS, "set", "-o", "commit=inplace", ck, "big"],
                                 stdin=f, stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.0, 1.5 * took))
            p.send_signal(signal.SIGKILL)
            p.wait()
        # a read-only command never writes: it refuses a checkpoint that
        # needs a roll-back; `ptfs recover` rolls back and says so
        journal = os.path.exists(ck + ".ptfs-journal")
        before = open(ck, "rb").read()
        r = run("ls", ck)
        assert r.returncode == 0 or b"needs recovery: run 'ptfs recover" in r.stderr, r.stderr
        assert r.returncode == 0 or journal
        assert open(ck, "rb").read() == before
        r = run("recover", ck)
        assert r.returncode == 0, r.stderr
        if b"rolled back" in r.stderr:
            outcomes["rolled back"] += 1
        assert not os.path.exists(ck + ".ptfs-journal")
        got = big_bytes(ck)
        assert got in (current, new), "a mix of old and new"
        outcomes["new" if got == new else "old"] += 1
        current = got
        if kind == "pt":
            check_pt(ck)
            assert torch.load(ck, weights_only=True)["w"].tolist() == list(range(3072))
    print(outcomes, "one commit: %.2f s" % took)
    assert outcomes["old"] >= 1, outcomes   # some kill landed mid-commit


def test_crash_at_each_step_then_any_command(tmp_path, kind):
    ck = make_ck(tmp_path, kind)
    old = tensor_bytes(ck, "w")
    new = np.full(3072, 2, dtype=np.int32).tobytes()
    for step, n in (("jwrite", 2), ("jfsync", 1), ("patch", 1), ("patch", 2),
                    ("pfsync", 1), ("jdone", 1), ("jremove", 1)):
        env = dict(os.environ, PTFS_FAULT="%s:%d:KILL" % (step, n))
        r = subprocess.run([PTFS, "set", "-o", "commit=inplace", ck, "w"],
                           input=new, capture_output=True, env=env, timeout=60)
        if r.returncode == 0 and (step, n) == ("patch", 2):
            # safetensors patches one range: no second patch write
            assert kind == "safetensors" and tensor_bytes(ck, "w") == new
            assert run("set", ck, "w", input=old).returncode == 0
            continue
        assert r.returncode == -signal.SIGKILL, (step, r.returncode, r.stderr)
        # `info` may refuse (needs recovery) or read it; `recover` brings
        # it back to old or new and says what it did with the journal
        info = run("info", ck)
        assert info.returncode == 0 or b"needs recovery" in info.stderr, info.stderr
        rec = run("recover", ck)
        assert rec.returncode == 0, rec.stderr
        if os.path.exists(ck + ".ptfs-journal.invalid"):
            os.unlink(ck + ".ptfs-journal.invalid")
        else:
            assert b"journal" in rec.stderr, (step, rec.stderr)
        assert not os.path.exists(ck + ".ptfs-journal")
        got = tensor_bytes(ck, "w")
        assert got in (old, new), step
        if kind == "pt":
            check_pt(ck)
        # restore the old contents for the next step
        assert run("set", ck, "w", input=old).returncode == 0


def test_damaged_and_foreign_journal(tmp_path, kind):
    ck = make_ck(tmp_path, kind)
    before = open(ck, "rb").read()
    j = ck + ".ptfs-journal"
    new = np.full(3072, 2, dtype=np.int32).tobytes()
    env = dict(os.environ, PTFS_FAULT="patch:1:KILL")
    # killed before the first byte of the checkpoint changed: the journal
    # is complete; damage it the way an unfinished one would look
    for damage in ("truncate", "flip"):
        subprocess.run([PTFS, "set", "-o", "commit=inplace", ck, "w"], input=new,
                       capture_output=True, env=env, timeout=60)
        data = bytearray(open(j, "rb").read())
        if damage == "truncate":
            data = data[:len(data) // 2]
        else:
            data[len(data) // 2] ^= 0x40
        open(j, "wb").write(data)
        # read-only: reported, nothing moved
        r = run("ls", ck)
        assert os.path.exists(j) and open(ck, "rb").read() == before
        r = run("recover", ck)
        assert r.returncode == 0, r.stderr
        # a damaged journal is never applied and never said to prove the
        # file untouched: it is set aside, and the file's state is told
        assert b"damaged journal" in r.stderr and b"old bytes" in r.stderr, r.stderr
        assert b"never touched" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert open(ck, "rb").read() == before
        assert os.path.exists(j + ".invalid") and not os.path.exists(j)
        os.unlink(j + ".invalid")
    # a journal for another file: refused, nothing touched
    subprocess.run([PTFS, "set", "-o", "commit=inplace", ck, "w"], input=new,
                   capture_output=True, env=dict(os.environ, PTFS_FAULT="patch:1:KILL"),
                   timeout=60)
    assert os.path.exists(j)
    # another checkpoint under the name (another inode, another size)
    os.unlink(ck)
    if kind == "pt":
        save_pt(ck, {"w": torch.arange(3072, dtype=torch.int32), "c": torch.zeros(7)})
    else:
        write_st(ck, {"w": np.arange(3072), "c": np.arange(7)})
    other = open(ck, "rb").read()
    # read-only: one line, nothing moved, the file used as it is
    r = run("info", ck)
    assert r.returncode == 0, r.stderr
    assert b"another file" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert open(ck, "rb").read() == other and os.path.exists(j)
    # a writer sets it aside (never applied) and goes on
    r = run("set", "-o", "commit=inplace", ck, "w", input=new)
    assert r.returncode == 0, r.stderr
    assert b"another file" in r.stderr
    assert os.path.exists(j + ".invalid") and not os.path.exists(j)
    assert tensor_bytes(ck, "w") == new


# ---- clone commits on real XFS and btrfs -----------------------------------

def have_cmd(c):
    return shutil.which(c) is not None


@pytest.fixture(params=["xfs", "btrfs"])
def reflink_fs(request, tmp_path):
    fs = request.param
    mkfs = {"xfs": ["mkfs.xfs", "-q", "-m", "reflink=1"],
            "btrfs": ["mkfs.btrfs", "-q"]}[fs]
    why = None
    if os.geteuid() != 0:
        why = "needs root to loop-mount a %s image" % fs
    elif not have_cmd(mkfs[0]) or not have_cmd("losetup"):
        why = "%s or losetup missing" % mkfs[0]
    if why:
        if REQUIRE_ROOT:
            pytest.fail("PTFS_REQUIRE_ROOT=1: " + why)
        pytest.skip(why)
    img = str(tmp_path / ("%s.img" % fs))
    mnt = tempfile.mkdtemp(prefix="ptfs-%s-" % fs)
    dev = None
    mounted_fs = False
    try:
        with open(img, "wb") as f:
            f.truncate(600 << 20)
        subprocess.run(mkfs + [img], check=True, capture_output=True)
        r = subprocess.run(["losetup", "-f", "--show", img], capture_output=True)
        if r.returncode != 0:
            msg = "loop devices unavailable: " + r.stderr.decode().strip()
            if REQUIRE_ROOT:
                pytest.fail("PTFS_REQUIRE_ROOT=1: " + msg)
            pytest.skip(msg)
        dev = r.stdout.decode().strip()
        subprocess.run(["mount", dev, mnt], check=True, capture_output=True)
        mounted_fs = True
        yield mnt
    finally:
        # a ptfs daemon that served a file here may still be exiting
        for _ in range(100):
            if not mounted_fs or subprocess.run(["umount", mnt],
                                                capture_output=True).returncode == 0:
                mounted_fs = False
                break
            time.sleep(0.1)
        if mounted_fs:
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        if dev:
            subprocess.run(["losetup", "-d", dev], capture_output=True)
        os.rmdir(mnt)


def test_clone_commit(reflink_fs, kind):
    d = reflink_fs
    if kind == "pt":
        ck = save_pt(os.path.join(d, "m.pt"), {"big": torch.zeros(32 << 20, dtype=torch.int32),
                                               "w": torch.arange(3072, dtype=torch.int32)})
    else:
        ck = write_st(os.path.join(d, "m.safetensors"),
                      {"big": np.zeros(32 << 20), "w": np.arange(3072)})
    os.chmod(ck, 0o600)
    subprocess.run(["sync", "-f", ck], check=True)   # btrfs: settle delalloc
    free_before = shutil.disk_usage(d).free
    new = np.full(3072, 11, dtype=np.int32).tobytes()
    r = run("set", "-v", ck, "w", input=new)
    assert r.returncode == 0, r.stderr
    assert b"(clone, 12" in r.stderr, r.stderr     # 12 KiB (+ CRC fields)
    assert tensor_bytes(ck, "w") == new
    if kind == "pt":
        check_pt(ck)
    assert os.stat(ck).st_mode & 0o777 == 0o600
    # a 128 MiB file cloned, not copied: far less than a copy's worth used
    subprocess.run(["sync", "-f", ck], check=True)
    assert free_before - shutil.disk_usage(d).free < (16 << 20)
    assert not temporaries(d)
    # an explicit clone works; inplace too
    assert run("set", "-o", "commit=clone", ck, "w", input=new).returncode == 0
    r = run("set", "-v", "-o", "commit=inplace", ck, "w", input=new[::-1])
    assert r.returncode == 0 and b"(inplace," in r.stderr


@needs_fuse
def test_clone_commit_through_mount(reflink_fs):
    ck = save_pt(os.path.join(reflink_fs, "m.pt"))
    new = np.full(3072, 12, dtype=np.int32).tobytes()
    log = tempfile.TemporaryFile()
    mnt = tempfile.mkdtemp(prefix="ptfs-mnt-")
    p = subprocess.Popen([PTFS, "-f", ck, mnt], stderr=log)
    try:
        deadline = time.time() + 30
        while not os.path.ismount(mnt):
            assert p.poll() is None and time.time() < deadline
            time.sleep(0.02)
        with open(os.path.join(mnt, "w"), "r+b") as f:
            f.write(new)
            os.fsync(f.fileno())
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        p.wait(timeout=60)
        os.rmdir(mnt)
    log.seek(0)
    text = log.read().decode()
    assert "committed on fsync (clone," in text, text
    assert tensor_bytes(ck, "w") == new


def test_clone_refused_where_unsupported(tmp_path):
    """commit=clone on a filesystem without FICLONE: one clear line."""
    ck = save_pt(str(tmp_path / "m.pt"))
    r = run("set", "-o", "commit=clone", ck, "w", input=bytes(3072 * 4))
    if r.returncode == 0:
        pytest.skip("%s can clone files" % tmp_path)
    assert b"cannot clone" in r.stderr and len(r.stderr.splitlines()) == 1


def test_resaved_after_crash_is_not_rolled_back(tmp_path):
    """An in-place commit is killed; the training job then torch.saves the
    checkpoint again to the same path (same inode, same size).  The next
    ptfs command must not put the journal's old bytes into the newer file."""
    ck = save_pt(str(tmp_path / "m.pt"))
    new = np.full(3072, 2, dtype=np.int32).tobytes()
    r = subprocess.run([PTFS, "set", "-o", "commit=inplace", ck, "w"], input=new,
                       capture_output=True, timeout=60,
                       env=dict(os.environ, PTFS_FAULT="patch:2:KILL"))
    assert r.returncode == -signal.SIGKILL
    assert os.path.exists(ck + ".ptfs-journal")
    ino = os.stat(ck).st_ino
    newer = {"w": torch.arange(3072, dtype=torch.int32) * 5,
             "b": torch.arange(100, dtype=torch.int64) * 3}
    torch.save(newer, ck)
    assert os.stat(ck).st_ino == ino
    before = open(ck, "rb").read()
    r = run("ls", ck)
    assert r.returncode == 0, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert open(ck, "rb").read() == before
    r = run("recover", ck)
    assert r.returncode == 0 and b"written by another program" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert open(ck, "rb").read() == before
    assert not os.path.exists(ck + ".ptfs-journal")
    assert torch.equal(torch.load(ck, weights_only=True)["w"], newer["w"])


def test_killed_rewrite_leaves_no_temporary_for_long(tmp_path, kind):
    """kill -9 during a rewrite leaves a full-size temporary file; the next
    ptfs command that opens the checkpoint removes it and says so."""
    ck = make_ck(tmp_path, kind)
    before = open(ck, "rb").read()
    for way in ("rewrite", "clone"):
        r = subprocess.run([PTFS, "set", "-o", "commit=" + way, ck, "w"],
                           input=bytes(3072 * 4), capture_output=True, timeout=60,
                           env=dict(os.environ, PTFS_FAULT="fsync:1:KILL"))
        if r.returncode != -signal.SIGKILL:
            assert way == "clone" and b"cannot clone" in r.stderr
            continue
        left = temporaries(str(tmp_path))
        assert len(left) == 1
        # a read-only command counts it; a writable open removes it at
        # once, whatever its age (no live writer holds its lock)
        r = run("ls", ck)
        assert r.returncode == 0 and b"found 1 temporary file" in r.stderr, r.stderr
        assert len(temporaries(str(tmp_path))) == 1
        r = run("recover", ck)
        assert r.returncode == 0, r.stderr
        assert b"removed 1 temporary file" in r.stderr, r.stderr
        assert not temporaries(str(tmp_path))
        assert open(ck, "rb").read() == before
