# SPDX-License-Identifier: MIT
"""A write soak (in the manner of SQLite's crash tests) and the write
model's user reports as root and as user nobody.

The soak draws operations at random, from a printed seed
(PTFS_SOAK_SEED=N replays one run), for PTFS_SOAK_SECONDS of wall time
(default 150; the time only bounds how many steps run, nothing is
asserted about it), over a torch.save checkpoint (float32, int64 and
uint8 tensors from 3 bytes to 2.5 MiB, one storage shared by two tensors
and a view at an offset) and a safetensors file.  A Python model holds
what each checkpoint must contain after every step, and what its mount
must show; after every step the checkpoint's bytes, read with zipfile
(which checks every CRC-32 ptfs patched) or a safetensors reader of our
own, must equal the model: no difference, no silent loss.  The only
loss allowed is the writes a daemon killed with SIGKILL in the middle of
a commit had not committed yet ("at risk": the checkpoint must then be
exactly the old or the new contents).  The last line printed counts
every operation.
"""
import collections
import contextlib
import errno
import fcntl
import glob
import json
import os
import pwd
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np
import pytest
import torch

from conftest import PTFS, is_mounted, needs_fuse, required

CHUNK = 64 * 1024
REQUIRE_ROOT = required("PTFS_REQUIRE_ROOT")
RUNUSER = shutil.which("runuser") or shutil.which("setpriv")
FICLONE = 0x40049409


# ---------------------------------------------------------------- helpers

def sh(cmd, env):
    return subprocess.run(["sh", "-c", cmd], capture_output=True, env=env, timeout=120)


def ptfs(env, *args, input=None):
    return subprocess.run([PTFS, *args], capture_output=True, env=env,
                          input=input, timeout=300)


def can_clone(d):
    """Whether the filesystem of directory @d shares extents (FICLONE)."""
    a, b = os.path.join(d, ".clone-a"), os.path.join(d, ".clone-b")
    try:
        with open(a, "wb") as f:
            f.write(b"x" * 4096)
        with open(a, "rb") as src, open(b, "wb") as dst:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        return True
    except OSError:
        return False
    finally:
        for p in (a, b):
            with contextlib.suppress(OSError):
                os.unlink(p)


def save_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, bytes)."""
    hdr, off, blobs = {}, 0, []
    for name, (dt, shape, b) in tensors.items():
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack_from("<Q", raw)
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    return {k: raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]]
            for k, v in hdr.items() if k != "__metadata__"}


def read_torch_zip(path):
    """Every storage record's bytes by key; zipfile checks each CRC-32."""
    out = {}
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            m = re.fullmatch(r"[^/]+/data/(\d+)", name)
            if m:
                out[m.group(1)] = z.read(name)
    return out


class Target:
    """One checkpoint and the model of what it holds."""

    def __init__(self, name, path, kind, files, disk, reader):
        self.name = name
        self.path = path
        self.kind = kind            # "pt" or "st"
        self.files = files          # file name -> (storage key, offset, nbytes)
        self.disk = disk            # storage key -> bytes: the checkpoint now
        self.reader = reader
        self.mount = None           # a Mount while mounted
        self.view = None            # storage key -> bytearray: what the mount shows
        self.pending = None         # (bytes kept: storage key -> bytes, stale)

    def file_bytes(self, store, fname):
        key, off, n = self.files[fname]
        return bytes(store[key][off:off + n])


def make_targets(d, rng):
    rnd = lambda n: bytes(rng.getrandbits(8) for _ in range(n)) if n < 4096 \
        else rng.randbytes(n)
    ck = os.path.join(d, "ck.pt")
    w = torch.frombuffer(bytearray(rnd(4 * 40000)), dtype=torch.float32)
    tensors = {
        "f32": torch.frombuffer(bytearray(rnd(4 * 5)), dtype=torch.float32),
        "i64": torch.frombuffer(bytearray(rnd(8 * 3000)), dtype=torch.int64),
        "u8": torch.frombuffer(bytearray(rnd(2_600_003)), dtype=torch.uint8),
        "b3": torch.frombuffer(bytearray(rnd(3)), dtype=torch.uint8),
        "emb": w, "head": w, "tail": w[100:],
    }
    torch.save(tensors, ck)
    recs = read_torch_zip(ck)
    by_bytes = {v: k for k, v in recs.items()}
    files = {}
    for name, t in tensors.items():
        whole = t if name != "tail" else w
        key = by_bytes[whole.numpy().tobytes()]
        off = 0 if name != "tail" else 400
        files[name] = (key, off, t.numel() * t.element_size())
    pt = Target("ck.pt", ck, "pt", files, recs, read_torch_zip)

    st = os.path.join(d, "st.safetensors")
    sdef = {"x": ("F32", [1000], rnd(4000)), "y": ("I64", [7], rnd(56)),
            "z": ("U8", [70003], rnd(70003))}
    save_safetensors(st, sdef)
    sfiles = {k: (k, 0, len(v[2])) for k, v in sdef.items()}
    s = Target("st.safetensors", st, "st", sfiles, read_safetensors(st), read_safetensors)
    return [pt, s]


class Mount:
    """A background mount, unmounted by `ptfs umount` or, whatever happens,
    by fusermount3 -u -z at the end."""

    def __init__(self, ck, way, env, fault=None, ro=False):
        self.mnt = tempfile.mkdtemp(prefix="ptfs-soak-")
        self.env = dict(env)
        if fault:
            self.env["PTFS_FAULT"] = fault
        self.way = way
        self.fault = fault          # armed until seen to fire
        self.fired = False
        self.stale = False          # another program committed meanwhile
        self.dead = False
        self.touched = set()        # storage keys opened for writing
        r = subprocess.run([PTFS, "-o", "ro" if ro else "commit=" + way, ck, self.mnt],
                           capture_output=True, env=self.env, timeout=60)
        self.stderr = r.stderr.decode()
        self.ok = r.returncode == 0 and is_mounted(self.mnt)

    def path(self, name):
        return os.path.join(self.mnt, name)

    def close(self):
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.mnt)


class LoopFs:
    """A 64 MiB ext4 image loop-mounted (root only); detached at the end."""

    def __init__(self, base):
        self.img = os.path.join(base, "fs.img")
        self.dir = os.path.join(base, "fs")
        os.mkdir(self.dir)
        self.dev = None
        with open(self.img, "wb") as f:
            f.truncate(64 << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", self.img], check=True,
                       capture_output=True)
        self.dev = subprocess.run(["losetup", "--find", "--show", self.img], check=True,
                                  capture_output=True, text=True).stdout.strip()
        try:
            subprocess.run(["mount", self.dev, self.dir], check=True, capture_output=True)
        except subprocess.CalledProcessError:
            self.close()
            raise
        self.filler = os.path.join(self.dir, "filler")

    def fill(self, keep):
        """Leave about @keep bytes free."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for _ in range(64):     # the extent tree takes blocks too
                st = os.statvfs(self.dir)
                room = st.f_bfree * st.f_frsize - keep
                if room < 4096:
                    break
                try:
                    os.posix_fallocate(fd, os.fstat(fd).st_size, room)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    keep += 64 << 10
        finally:
            os.close(fd)

    def unfill(self):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.filler)

    @property
    def filled(self):
        return os.path.exists(self.filler)

    def close(self):
        if self.dev:
            if os.path.ismount(self.dir):
                subprocess.run(["umount", self.dir], capture_output=True)
                if os.path.ismount(self.dir):
                    subprocess.run(["umount", "-l", self.dir], capture_output=True)
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
            self.dev = None


def need_root_for(what):
    if os.geteuid() != 0:
        if REQUIRE_ROOT:
            pytest.fail("PTFS_REQUIRE_ROOT=1 but not root: " + what)
        pytest.skip("needs root: " + what)


# ---------------------------------------------------------------- the soak

COMMIT_ERR_STEPS = {          # steps before the point of no return
    "rewrite": ["create", "write", "fsync", "rename"],
    "clone": ["clone", "fsync", "rename"],
    "inplace": ["jwrite", "jfsync", "patch", "pfsync"],
}
COMMIT_KILL_STEPS = {         # anywhere in the commit
    "rewrite": ["create", "write", "fsync", "rename", "dirfsync"],
    "clone": ["clone", "write", "fsync", "rename", "dirfsync"],
    "inplace": ["jwrite", "jfsync", "patch", "pfsync", "jremove"],
}


class Soak:
    def __init__(self, tmp_path, seed, loop):
        self.rng = random.Random(seed)
        self.seed = seed
        self.tmp = tmp_path
        self.env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
        self.env.pop("PTFS_FAULT", None)
        self.state = str(tmp_path / "state" / "ptfs")
        self.loop = loop
        d = loop.dir if loop else str(tmp_path / "ck")
        os.makedirs(d, exist_ok=True)
        self.dir = d
        self.clone_ok = can_clone(d)
        self.targets = make_targets(d, self.rng)
        self.counts = collections.Counter()
        self.history = collections.deque(maxlen=40)
        self.at_risk = 0             # bytes lost to a SIGKILL mid-commit
        self.mounts = []
        self.src = str(tmp_path / "src.bin")

    # -- bookkeeping
    def note(self, what):
        words = what.split()
        self.counts[words[0]] += 1
        if words[0] == "write":
            self.counts["write:" + words[1]] += 1
        elif words[0] == "mount" and "fault=None" not in what:
            self.counts["mount:" + ("kill" if "KILL" in what else "fault")] += 1
        self.history.append(what)

    def fail(self, msg):
        pytest.fail("seed %d (PTFS_SOAK_SEED=%d replays), after:\n  %s\n%s" % (
            self.seed, self.seed, "\n  ".join(self.history), msg), pytrace=False)

    def check(self, cond, msg):
        if not cond:
            self.fail(msg)

    def pendings(self, t):
        """Every kept file of @t, beside it or in the state directory."""
        found = glob.glob(glob.escape(t.path) + ".ptfs-pending*")
        # in the state directory: named by the checkpoint's file name and
        # a hash of its real path
        found += glob.glob(os.path.join(self.state, glob.escape(os.path.basename(t.path))
                                        + "-" + "[0-9a-f]" * 16 + ".ptfs-pending*"))
        return found

    # -- the checks after every step
    def verify(self, t):
        try:
            got = t.reader(t.path)
        except Exception as e:      # a torn archive, a bad CRC
            self.fail("%s cannot be read: %r" % (t.name, e))
        for key, want in t.disk.items():
            if got.get(key) != want:
                diff = sum(a != b for a, b in zip(got.get(key, b""), want))
                self.fail("%s storage %s differs from the model in %d bytes"
                          % (t.name, key, diff))
        self.check(bool(self.pendings(t)) == (t.pending is not None),
                   "%s: pending files %s, model says %s" % (
                       t.name, self.pendings(t), t.pending is not None))
        m = t.mount
        if m and not m.stale and not m.dead:
            for fname in t.files:
                with open(m.path(fname), "rb") as f:
                    data = f.read()
                want = t.file_bytes(t.view, fname)
                if data != want:
                    diffs = [i for i in range(min(len(data), len(want)))
                             if data[i] != want[i]]
                    self.fail("%s: %s through the mount differs from the model: "
                              "%d of %d bytes read, %d differ, first at %s; "
                              "the checkpoint's bytes there: %s" % (
                                  t.name, fname, len(data), len(want), len(diffs),
                                  diffs[:1], diffs and data[diffs[0]:diffs[0] + 8]
                                  == t.file_bytes(t.disk, fname)[diffs[0]:diffs[0] + 8]))
        leftovers = [n for n in os.listdir(self.dir)
                     if ".ptfs-" in n and ".ptfs-pending" not in n]
        self.check(not leftovers, "left beside the checkpoints: %s" % leftovers)

    def verify_torch_load(self, t):
        if t.kind != "pt":
            return
        sd = torch.load(t.path, weights_only=True)
        for fname, (key, off, n) in t.files.items():
            self.check(sd[fname].numpy().tobytes() == t.disk[key][off:off + n],
                       "torch.load: %s differs" % fname)
        self.check(sd["emb"].data_ptr() == sd["head"].data_ptr() and
                   sd["tail"].data_ptr() == sd["emb"].data_ptr() + 400,
                   "torch.load: emb, head and tail no longer share a storage")

    # -- model updates
    def put(self, t, fname, off, data):
        key, lo, n = t.files[fname]
        assert off + len(data) <= n
        t.view[key][lo + off:lo + off + len(data)] = data

    def committed(self, t):
        t.disk = {k: bytes(v) for k, v in t.view.items()}

    def fail_possible(self, m):
        return (m.fault and "KILL" not in m.fault and not m.fired) or m.stale or \
            (m.way == "clone" and not self.clone_ok) or \
            (self.loop is not None and self.loop.filled)

    def fail_certain(self, m):
        return m.stale or (m.way == "clone" and not self.clone_ok)

    def dirty(self, t):
        return any(bytes(t.view[k]) != t.disk[k] for k in t.disk)

    # -- operations
    def op_mount(self, t):
        way = self.rng.choice(["auto", "rewrite", "clone", "inplace"])
        fault = None
        kind = self.rng.random()
        if kind < 0.15:
            step = self.rng.choice(COMMIT_ERR_STEPS["rewrite" if way == "auto" else way])
            fault = "%s:1:%s" % (step, self.rng.choice(["ENOSPC", "EIO"]))
        elif kind < 0.25:
            step = self.rng.choice(COMMIT_KILL_STEPS["rewrite" if way == "auto" else way])
            fault = "%s:1:KILL" % step
        if way == "auto" and fault and self.clone_ok:
            way = "rewrite"
        m = Mount(t.path, way, self.env, fault)
        self.mounts.append(m)
        self.note("mount %s commit=%s fault=%s" % (t.name, way, fault))
        self.check(m.ok, "mount failed: %s" % m.stderr)
        t.mount = m
        t.view = {k: bytearray(v) for k, v in t.disk.items()}
        if t.pending is not None:
            # a writable mount refuses to commit over kept writes
            self.check("mounted read-only until 'ptfs recover" in m.stderr, m.stderr)
            try:
                open(m.path(self.rng.choice(list(t.files))), "r+b").close()
                self.fail("a mount over a pending file took a write")
            except OSError as e:
                self.check(e.errno in (errno.EROFS, errno.EACCES), repr(e))
            self.op_umount(t)

    def random_bytes(self, n):
        return self.rng.randbytes(n)

    def op_write(self, t):
        m = t.mount
        fname = self.rng.choice(list(t.files))
        key, lo, n = t.files[fname]
        m.touched.add(key)
        self.last_key = key
        p = m.path(fname)
        how = self.rng.choice(["copyfile", "cp", "rplus", "cat", "dd_notrunc",
                               "dd_trunc", "dup", "memmap", "append"])
        wrong = self.rng.random() < 0.3
        if how in ("copyfile", "cp", "cat"):
            size = n if not wrong else self.rng.choice(
                [0, self.rng.randrange(0, n) if n > 1 else 0, n + 1])
            data = self.random_bytes(size)
            with open(self.src, "wb") as f:
                f.write(data)
            self.note("write %s %s %s %d/%d" % (how, t.name, fname, size, n))
            if how == "copyfile":
                try:
                    shutil.copyfile(self.src, p)
                    ok = True
                except OSError as e:
                    ok = False
                    err = e
            else:
                cmd = 'cp "%s" "%s"' % (self.src, p) if how == "cp" else \
                    'cat "%s" > "%s"' % (self.src, p)
                r = sh(cmd, self.env)
                ok, err = r.returncode == 0, r.stderr
            self.check(ok == (size == n), "%s at %d of %d bytes: %r" % (
                how, size, n, None if ok else err))
            self.dropped = not ok
            if ok:
                self.put(t, fname, 0, data)
        elif how == "rplus":
            off = self.rng.randrange(n)
            ln = self.rng.randint(1, min(n - off, 300000))
            data = self.random_bytes(ln)
            self.note("write rplus %s %s @%d+%d" % (t.name, fname, off, ln))
            with open(p, "r+b") as f:
                f.seek(off)
                f.write(data)
            self.put(t, fname, off, data)
        elif how in ("dd_notrunc", "dd_trunc"):
            # without conv=notrunc GNU dd opens with O_TRUNC when it
            # seeks no whole output block (OFF < bs: the bytes before OFF
            # read as zeros), else it ftruncate()s to OFF and keeps them
            aligned = how == "dd_trunc" and n > 512 and self.rng.random() < 0.5
            off = self.rng.randrange(n)
            if aligned:
                off -= off % 512
            ln = n - off if how == "dd_trunc" and not wrong else \
                self.rng.randint(1, min(n - off, 300000))
            data = self.random_bytes(ln)
            with open(self.src, "wb") as f:
                f.write(data)
            if aligned:
                args = "bs=512 seek=%d" % (off // 512)
            else:
                args = "bs=65536 seek=%d oflag=seek_bytes" % off
            if how == "dd_notrunc":
                args += " conv=notrunc"
            self.note("write %s %s %s @%d+%d/%d %s" % (how, t.name, fname, off, ln, n, args))
            r = sh('dd if="%s" of="%s" %s status=none' % (self.src, p, args), self.env)
            right = how == "dd_notrunc" or off + ln == n
            self.check((r.returncode == 0) == right, "dd: %r" % r.stderr)
            self.dropped = not right
            if right:
                if how == "dd_trunc" and not aligned and off < 65536:
                    self.put(t, fname, 0, bytes(off))
                self.put(t, fname, off, data)
        elif how == "dup":
            cut = self.rng.randrange(n + 1)
            finish = not wrong
            data = self.random_bytes(n)
            self.note("write dup %s %s cut=%d finish=%s" % (t.name, fname, cut, finish))
            fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
            dup = os.dup(fd)
            try:
                os.write(fd, data[:cut])
                try:
                    os.close(fd)
                    self.check(cut == n, "closing a copy at %d of %d bytes succeeded"
                               % (cut, n))
                except OSError as e:
                    self.check(e.errno == errno.EINVAL and cut != n, repr(e))
                if finish and cut < n:
                    os.write(dup, data[cut:])
            finally:
                try:
                    os.close(dup)
                    last_ok = True
                except OSError as e:
                    last_ok = False
                    self.check(e.errno == errno.EINVAL, repr(e))
            whole = finish or cut == n
            self.check(last_ok == whole, "last close: %s, file whole: %s" % (last_ok, whole))
            self.dropped = not whole
            if whole:
                self.put(t, fname, 0, data)
        elif how == "memmap":
            off = self.rng.randrange(n)
            ln = self.rng.randint(1, min(n - off, 200000))
            data = self.random_bytes(ln)
            self.note("write memmap %s %s @%d+%d" % (t.name, fname, off, ln))
            mm = np.memmap(p, dtype=np.uint8, mode="r+")
            try:
                mm[off:off + ln] = np.frombuffer(data, dtype=np.uint8)
                self.put(t, fname, off, data)
                try:
                    mm.flush()      # msync, and then an fsync: a commit
                except OSError:
                    pass            # judged by the fsync below
            finally:
                del mm
            self.op_fsync(t, fname)
        else:
            self.note("write append %s %s" % (t.name, fname))
            r = sh('printf x >> "%s" && echo ok' % p, self.env)
            self.check(b"ok" not in r.stdout, "an append past the tensor's end succeeded")

    def after_failed_commit(self, t, e):
        m = t.mount
        if m.fault and "KILL" in m.fault and \
                e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            self.killed(t)
            return True
        self.check(self.fail_possible(m), "fsync failed unexpectedly: %r" % e)
        if m.fault and not m.fired and not m.stale and \
                not (m.way == "clone" and not self.clone_ok) and \
                not (self.loop is not None and self.loop.filled):
            m.fired = True      # the fault is the only reason it can have
        return False

    def settle(self, t, key):
        """close(2) returns at FLUSH, before the kernel sends RELEASE, where
        a write of the wrong size is dropped and the kernel told to drop
        what it cached of the file (its size too): until then a reader
        sees the dropped write.  Wait for that event (the files of the
        storage show the model's bytes), counting the reads it took; a
        file that never does fails in verify()."""
        for _ in range(500):
            if all(open(t.mount.path(f), "rb").read() == t.file_bytes(t.view, f)
                   for f, (k, _o, _n) in t.files.items() if k == key):
                return
            self.counts["reads-before-release"] += 1
            time.sleep(0.01)

    def op_fsync(self, t, fname=None):
        m = t.mount
        fname = fname or self.rng.choice(list(t.files))
        self.note("fsync %s %s" % (t.name, fname))
        try:
            fd = os.open(m.path(fname), os.O_RDONLY)
        except OSError as e:
            if m.fault and "KILL" in m.fault and e.errno == errno.ENOTCONN:
                return self.killed(t)
            raise
        try:
            os.fsync(fd)
            ok = True
        except OSError as e:
            ok, err = False, e
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        if ok:
            self.check(not (self.fail_certain(m) and self.dirty(t)),
                       "a commit that had to fail succeeded")
            self.committed(t)
        else:
            self.check(err.errno in (errno.ENOSPC, errno.EIO, errno.ENOTCONN,
                                     errno.ECONNABORTED), repr(err))
            self.after_failed_commit(t, err)

    def killed(self, t):
        """The daemon died by SIGKILL in a commit: the checkpoint is the old
        or the new contents after `ptfs recover`; the uncommitted writes
        are the only loss allowed."""
        m = t.mount
        m.dead = True
        self.note("killed %s (%s)" % (t.name, m.fault))
        subprocess.run(["fusermount3", "-u", "-z", m.mnt], capture_output=True)
        t.mount = None
        journal = t.path + ".ptfs-journal"
        step = m.fault.split(":")[0]
        if os.path.exists(journal) and step in ("patch", "pfsync"):
            # read-only commands refuse and write nothing
            before = open(t.path, "rb").read()
            r = ptfs(self.env, "cat", t.path, next(iter(t.files)))
            if r.returncode == 0:
                # killed before the first patched byte: provably untouched
                self.check(b"had not written the checkpoint yet" in r.stderr, r.stderr)
                self.counts["journal-untouched"] += 1
            else:
                self.check(b"needs recovery" in r.stderr and b"ptfs recover" in r.stderr,
                           r.stderr)
                self.counts["journal-refused"] += 1
            if r.returncode != 0:
                # and so does a read-only mount
                ro = Mount(t.path, "auto", self.env, ro=True)
                self.mounts.append(ro)
                ro.close()
                self.check(not ro.ok and b"needs recovery" in ro.stderr.encode(),
                           "-o ro over an interrupted journal: %s" % ro.stderr)
            self.check(open(t.path, "rb").read() == before and os.path.exists(journal),
                       "a read-only command touched the checkpoint or its journal")
        new = {k: bytes(v) for k, v in t.view.items()}
        if self.pendings(t):
            # killed while saving the writes of a commit that had failed
            # (its dirfsync): the checkpoint is untouched and the kept
            # file is whole; op_recover applies it like any other
            ptfs(self.env, "ls", t.path)    # sweeps a dead commit's temporary
            self.check(t.reader(t.path) == t.disk,
                       "a failed commit killed while keeping its writes changed %s"
                       % t.name)
            t.pending = (new, m.stale)
            t.view = None
            self.counts["kill-pending"] += 1
            return True
        r = ptfs(self.env, "recover", t.path)
        self.check(r.returncode == 0, "recover after a kill: %r" % r.stderr)
        ptfs(self.env, "ls", t.path)    # sweeps a dead commit's temporary
        if os.path.exists(journal + ".invalid"):
            # a journal killed before it was whole: set aside, never applied
            os.unlink(journal + ".invalid")
            self.counts["journal-invalid"] += 1
        got = t.reader(t.path)
        if got == t.disk:
            lost = sum(sum(a != b for a, b in zip(new[k], t.disk[k])) for k in new)
            self.at_risk += lost
            self.counts["kill-old"] += 1
        elif got == new:
            t.disk = new
            self.counts["kill-new"] += 1
        else:
            self.fail("after a kill mid-commit %s is neither old nor new" % t.name)
        t.view = None
        return True

    def op_umount(self, t):
        m = t.mount
        dirty = self.dirty(t)
        self.note("umount %s dirty=%s" % (t.name, dirty))
        r = subprocess.run([PTFS, "umount", m.mnt], capture_output=True,
                           env=self.env, timeout=300)
        err = r.stderr.decode()
        if m.fault and "KILL" in m.fault and r.returncode != 0 and \
                "left no verdict" in err:
            # killed in the commit, or in saving the pending file after
            # a commit that failed (its dirfsync)
            self.killed(t)
            m.close()
            return
        self.check(not is_mounted(m.mnt), "still mounted after ptfs umount")
        m.close()
        t.mount = None
        if r.returncode == 0:
            self.check(not (self.fail_certain(m) and dirty),
                       "unmount commit that had to fail succeeded: %s" % err)
            self.committed(t)
        else:
            self.check(r.returncode == 1 and ".ptfs-pending" in err, err)
            self.check(self.fail_possible(m) and (dirty or m.touched),
                       "unmount failed: %s" % err)
            self.check(t.pending is None, "two pending files")
            t.pending = ({k: bytes(v) for k, v in t.view.items()}, m.stale)
        t.view = None

    def op_set(self, t):
        fname = self.rng.choice(list(t.files))
        key, lo, n = t.files[fname]
        m = t.mount
        if m and key in m.touched:
            return          # the mount's chunks would cover the set's bytes
        data = self.random_bytes(n)
        self.note("set %s %s mounted=%s" % (t.name, fname, m is not None))
        r = ptfs(self.env, "set", t.path, fname, input=data)
        if t.pending is not None:
            self.check(r.returncode == 1 and b"ptfs recover" in r.stderr, r.stderr)
            return
        if r.returncode != 0:
            self.check(self.loop is not None and self.loop.filled
                       and b"No space" in r.stderr, r.stderr)
            return
        base = dict(t.disk)
        base[key] = base[key][:lo] + data + base[key][lo + n:]
        t.disk = base
        if m:
            # the mount's later commits fail, its writes are kept
            m.stale = True
            t.view[key][lo:lo + n] = data

    def op_recover(self, t):
        kept, stale = t.pending
        how = self.rng.choice(["", "", "--discard"]) if not stale else \
            self.rng.choice(["--force", "--discard"])
        self.note("recover %s %s stale=%s" % (t.name, how or "apply", stale))
        if stale:
            r = ptfs(self.env, "recover", t.path)
            self.check(r.returncode == 1 and b"changed since" in r.stderr, r.stderr)
        r = ptfs(self.env, "recover", *([how] if how else []), t.path)
        if r.returncode != 0:
            self.check(self.loop is not None and self.loop.filled and how != "--discard",
                       "recover failed: %r" % r.stderr)
            return
        if how != "--discard":
            t.disk = kept
        t.pending = None

    def op_fill(self):
        if self.loop.filled:
            self.note("unfill")
            self.loop.unfill()
        else:
            self.note("fill")
            self.loop.fill(self.rng.choice([64 << 10, 512 << 10]))

    def step(self):
        t = self.rng.choice(self.targets)
        r = self.rng.random()
        if self.loop and r < 0.04:
            self.op_fill()
        elif t.mount is None:
            if t.pending is not None and r < 0.5:
                self.op_recover(t)
            elif r < 0.6:
                self.op_mount(t)
            elif r < 0.75:
                self.op_set(t)
            else:
                return
        elif t.mount.stale:
            if r < 0.3:
                self.op_fsync(t)
            else:
                self.op_umount(t)
        elif r < 0.65:
            self.dropped = False
            self.op_write(t)
            if self.dropped and t.mount:
                self.settle(t, self.last_key)
        elif r < 0.8:
            self.op_fsync(t)
        elif r < 0.84:
            self.op_set(t)
        else:
            self.op_umount(t)
        for x in self.targets:
            self.verify(x)

    def finish(self):
        if self.loop:
            self.loop.unfill()
        for t in self.targets:
            if t.mount:
                self.op_umount(t)
            if t.pending is not None:
                kept, stale = t.pending
                r = ptfs(self.env, "recover", *(["--force"] if stale else []), t.path)
                self.check(r.returncode == 0, r.stderr)
                t.disk, t.pending = kept, None
                self.counts["recover"] += 1
            self.verify(t)
            self.verify_torch_load(t)

    def close(self):
        for m in self.mounts:
            m.close()


@needs_fuse
def test_write_soak(tmp_path):
    seconds = float(os.environ.get("PTFS_SOAK_SECONDS", "150"))
    seed = int(os.environ.get("PTFS_SOAK_SEED") or random.SystemRandom().randrange(1 << 32))
    print("soak seed %d (PTFS_SOAK_SEED=%d replays it)" % (seed, seed))
    loop = None
    if os.geteuid() == 0 and shutil.which("mkfs.ext4") and shutil.which("losetup"):
        loop = LoopFs(str(tmp_path))
    else:
        print("not root: no loop-mounted filesystem, no real ENOSPC in this soak")
    s = None
    try:
        s = Soak(tmp_path, seed, loop)
        end = time.monotonic() + seconds
        steps = 0
        while time.monotonic() < end:
            s.step()
            steps += 1
        s.finish()
        report = " ".join("%s=%d" % kv for kv in sorted(s.counts.items()))
        print("soak seed %d: %d steps, %s, at-risk bytes lost to kills=%d, "
              "differences=0, silent losses=0" % (seed, steps, report, s.at_risk))
        assert steps > 0
    finally:
        if s:
            s.close()
        if loop:
            loop.close()


# ------------------------------------------- what the soak found (seed 1)

def _mount_bg(tmp_path, ck, *opts):
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    mnt = tempfile.mkdtemp(prefix="ptfs-soak-")
    r = subprocess.run([PTFS, *opts, ck, mnt], capture_output=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return mnt, env


@needs_fuse
@pytest.mark.parametrize("second", ["same", "tied", "view"])
def test_wrong_size_write_keeps_earlier_uncommitted_writes(tmp_path, second):
    """A write of the wrong size gives the tensor back the bytes it had
    before that write, not the checkpoint's: a whole write closed with
    success (not yet committed) to the tensor, or to another tensor of the
    same storage, is not dropped by a later `cat half > FILE`."""
    ck = str(tmp_path / "ck.pt")
    w = torch.zeros(40000, dtype=torch.float32)
    torch.save({"emb": w, "head": w, "tail": w[100:]}, ck)
    first = os.urandom(160000)
    mnt, env = _mount_bg(tmp_path, ck)
    try:
        with open(os.path.join(mnt, "emb"), "r+b") as f:
            f.write(first)
        other = {"same": "emb", "tied": "head", "view": "tail"}[second]
        half = tmp_path / "half.bin"
        half.write_bytes(b"\1" * 1000)
        r = sh('cat "%s" > "%s"' % (half, os.path.join(mnt, other)), env)
        assert r.returncode != 0 and b"Invalid argument" in r.stderr, r
        assert open(os.path.join(mnt, "emb"), "rb").read() == first
        r = subprocess.run([PTFS, "umount", mnt], capture_output=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        os.rmdir(mnt)
    got = torch.load(ck, weights_only=True)
    assert got["emb"].numpy().tobytes() == first
    assert got["head"].numpy().tobytes() == first


# ------------------------------- the user reports, as root and as nobody

def _as(user, cmd, env=None):
    """Run shell @cmd as @user ("root": this process's user)."""
    if user == "root":
        argv = ["sh", "-c", cmd]
    elif os.path.basename(RUNUSER) == "runuser":
        argv = [RUNUSER, "-u", "nobody", "--", "sh", "-c", cmd]
    else:
        argv = [RUNUSER, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                "sh", "-c", cmd]
    return subprocess.run(argv, capture_output=True, env=env, timeout=120)


def _need_nobody():
    if os.geteuid() != 0 or not RUNUSER:
        if REQUIRE_ROOT:
            pytest.fail("PTFS_REQUIRE_ROOT=1 but not root or no runuser")
        pytest.skip("needs root and runuser to act as user nobody")


def _shared_dir():
    """A directory under /tmp every user may enter (the test's tmp_path is
    root's alone)."""
    d = tempfile.mkdtemp(prefix="ptfs-soak-users-")
    os.chmod(d, 0o755)
    return d


def _user_ckpt(path, uid):
    w = torch.zeros(4096, dtype=torch.float32)
    torch.save({"emb": w, "head": w, "b": torch.arange(10, dtype=torch.int64)}, path)
    os.chown(path, uid, uid)
    os.chmod(path, 0o644)
    return path


def _reports(who, mnt, src, env=None):
    """The reports, run by @who against tensor files of 16384 bytes: each
    must be refused (the tensor keeps its bytes) or committed as for
    root.  Returns the bytes 'emb' must hold now."""
    emb, head = os.path.join(mnt, "emb"), os.path.join(mnt, "head")
    half, full, patch = (os.path.join(src, n) for n in ("half", "full", "patch"))
    old = open(emb, "rb").read()
    # report: `cat half > FILE` said nothing and left half a tensor
    r = _as(who, 'cat "%s" > "%s"' % (half, emb), env)
    assert r.returncode != 0 and b"Invalid argument" in r.stderr, (who, r)
    assert open(emb, "rb").read() == old
    # report: dd without conv=notrunc cut the tensor short
    r = _as(who, 'dd if=/dev/zero of="%s" bs=100 count=1 status=none' % emb, env)
    assert r.returncode != 0 and b"Invalid argument" in r.stderr, (who, r)
    assert open(emb, "rb").read() == old
    # report: a right-size `cat` through the shell was refused or lost
    r = _as(who, 'cat "%s" > "%s"' % (full, emb), env)
    assert r.returncode == 0, (who, r)
    new = open(full, "rb").read()
    assert open(emb, "rb").read() == new
    # dd conv=notrunc patches in place
    r = _as(who, 'dd if="%s" of="%s" bs=512 seek=3 conv=notrunc status=none'
            % (patch, emb), env)
    assert r.returncode == 0, (who, r)
    new = new[:1536] + open(patch, "rb").read() + new[2048:]
    # found by the soak: a later wrong-size write to the tied tensor
    # drops itself, never the writes before it
    r = _as(who, 'cat "%s" > "%s"' % (half, head), env)
    assert r.returncode != 0 and b"Invalid argument" in r.stderr, (who, r)
    assert open(emb, "rb").read() == new
    assert open(head, "rb").read() == new
    return new


def _sources(d):
    with open(os.path.join(d, "half"), "wb") as f:
        f.write(os.urandom(8192))
    with open(os.path.join(d, "full"), "wb") as f:
        f.write(os.urandom(16384))
    with open(os.path.join(d, "patch"), "wb") as f:
        f.write(os.urandom(512))
    for n in ("half", "full", "patch"):
        os.chmod(os.path.join(d, n), 0o644)


@needs_fuse
@pytest.mark.parametrize("who", ["root", "nobody"])
def test_user_reports_through_allow_other(tmp_path, who):
    """Root mounts a checkpoint nobody owns with -o allow_other; @who
    writes through the mount with the shell: nobody's writes are
    committed or refused exactly as root's, and `ptfs umount` commits."""
    _need_nobody()
    nobody = pwd.getpwnam("nobody").pw_uid
    d = _shared_dir()
    mnt = os.path.join(d, "mnt")
    os.mkdir(mnt)
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    try:
        ck = _user_ckpt(os.path.join(d, "ck.pt"), nobody)
        _sources(d)
        r = subprocess.run([PTFS, "-o", "allow_other", ck, mnt], capture_output=True,
                           env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        new = _reports(who, mnt, d)
        r = subprocess.run([PTFS, "umount", mnt], capture_output=True, env=env, timeout=120)
        assert r.returncode == 0 and b"committed on unmount" in r.stderr, r.stderr
        got = torch.load(ck, weights_only=True)
        assert got["emb"].numpy().tobytes() == new
        assert got["head"].numpy().tobytes() == new
        assert got["b"].tolist() == list(range(10))
        st = os.stat(ck)
        assert (st.st_uid, st.st_gid) == (nobody, nobody)
        assert not glob.glob(ck + ".ptfs-*")
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


@needs_fuse
def test_nobody_mounts_writes_and_unmounts_its_own(tmp_path):
    """User nobody (HOME /nonexistent, no XDG_STATE_HOME) mounts its own
    checkpoint in a directory it owns, runs the reports through it and
    `ptfs umount` itself: exit 0, the writes committed, the daemon's lines
    in /tmp/ptfs-UID/ptfs.log when the machine has no syslog."""
    _need_nobody()
    if _as("nobody", "exec /usr/bin/python3 -c \"import os; "
           "os.close(os.open('/dev/fuse', os.O_RDWR))\"").returncode != 0:
        pytest.skip("machine policy: user nobody may not open /dev/fuse (mode %o), "
                    "so only root mounts here"
                    % (os.stat("/dev/fuse").st_mode & 0o777))
    nobody = pwd.getpwnam("nobody").pw_uid
    d = _shared_dir()
    own = os.path.join(d, "own")        # nobody's: the checkpoint and the mount
    os.mkdir(own)
    os.chown(own, nobody, nobody)
    mnt = os.path.join(own, "mnt")
    exe = os.path.join(d, "ptfs")       # the build tree may be root's alone
    shutil.copy2(PTFS, exe)
    os.chmod(exe, 0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME="/nonexistent", PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    try:
        ck = _user_ckpt(os.path.join(own, "ck.pt"), nobody)
        _sources(d)
        r = _as("nobody", 'mkdir "%s" && "%s" "%s" "%s"' % (mnt, exe, ck, mnt), env)
        assert r.returncode == 0, r.stderr
        new = _reports("nobody", mnt, d, env)
        r = _as("nobody", '"%s" umount "%s"' % (exe, mnt), env)
        assert r.returncode == 0 and b"committed on unmount" in r.stderr, r.stderr
        assert not is_mounted(mnt)
        got = torch.load(ck, weights_only=True)
        assert got["emb"].numpy().tobytes() == new
        assert os.stat(ck).st_uid == nobody
        if not os.path.exists("/dev/log"):
            log = "/tmp/ptfs-%d/ptfs.log" % nobody
            text = open(log, errors="replace").read()
            assert "%s: committed on unmount" % ck in text, text[-2000:]
    finally:
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


@needs_fuse
def test_real_enospc_keeps_the_writes_until_recover(tmp_path):
    """A 64 MiB ext4 image, loop-mounted, filled until a rewrite has no
    room: fsync fails with ENOSPC and the mount keeps the writes; the
    unmount's commit fails, the writes are kept (beside the checkpoint or
    in the state directory), the checkpoint is untouched; with room again
    `ptfs recover` applies them."""
    need_root_for("a loop-mounted ext4 image to run out of space")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    loop = LoopFs(str(tmp_path))
    mnt = None
    try:
        ck = os.path.join(loop.dir, "ck.pt")
        torch.save({"big": torch.zeros(6 << 20, dtype=torch.uint8),
                    "w": torch.arange(1000, dtype=torch.int64)}, ck)
        raw = open(ck, "rb").read()
        new = os.urandom(8000)
        loop.fill(1 << 20)      # room for a journal, not for a second copy
        m = Mount(ck, "rewrite", env)
        mnt = m.mnt
        assert m.ok, m.stderr
        with open(m.path("w"), "r+b") as f:
            f.write(new)
            f.flush()
            with pytest.raises(OSError) as e:
                os.fsync(f.fileno())
            assert e.value.errno == errno.ENOSPC
        assert open(m.path("w"), "rb").read() == new     # still in the mount
        r = subprocess.run([PTFS, "umount", m.mnt], capture_output=True, env=env,
                           timeout=120)
        err = r.stderr.decode()
        assert r.returncode == 1 and ".ptfs-pending" in err and "No space" in err, err
        assert open(ck, "rb").read() == raw
        kept = glob.glob(ck + ".ptfs-pending*") + glob.glob(
            str(tmp_path / "state" / "ptfs" / ("%s-*.ptfs-pending*" % os.path.basename(ck))))
        assert len(kept) == 1 and kept[0] in err, (kept, err)
        r = ptfs(env, "recover", ck)
        assert r.returncode == 1 and b"No space" in r.stderr, r.stderr
        assert os.path.exists(kept[0]) and open(ck, "rb").read() == raw
        loop.unfill()
        r = ptfs(env, "recover", ck)
        assert r.returncode == 0 and b"applied 8000 bytes" in r.stderr, r.stderr
        assert not os.path.exists(kept[0])
        got = torch.load(ck, weights_only=True)
        assert got["w"].numpy().tobytes() == new
        assert not any(got["big"].tolist()[:4096])
    finally:
        if mnt and is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        if mnt:
            with contextlib.suppress(OSError):
                os.rmdir(mnt)
        loop.close()


@needs_fuse
def test_state_dir_pending_found_after_outside_replace(tmp_path):
    """A mount whose checkpoint another program replaced (ptfs set: a new
    inode) cannot commit at unmount, and a full disk sends its writes to
    the state directory: `ptfs recover --force` must still find them."""
    need_root_for("a loop-mounted ext4 image to run out of space")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    loop = LoopFs(str(tmp_path))
    m = None
    try:
        ck = os.path.join(loop.dir, "ck.pt")
        torch.save({"big": torch.zeros(6 << 20, dtype=torch.uint8),
                    "w": torch.arange(1000, dtype=torch.int64),
                    "b": torch.zeros(10, dtype=torch.uint8)}, ck)
        new = os.urandom(8000)
        m = Mount(ck, "rewrite", env)
        assert m.ok, m.stderr
        with open(m.path("w"), "r+b") as f:
            f.write(new)
        r = ptfs(env, "set", ck, "b", input=b"\7" * 10)
        assert r.returncode == 0, r.stderr
        loop.fill(64 << 10)
        r = subprocess.run([PTFS, "umount", m.mnt], capture_output=True, env=env, timeout=120)
        err = r.stderr.decode()
        assert r.returncode == 1 and str(tmp_path / "state") in err, err
        loop.unfill()
        r = ptfs(env, "recover", "--force", ck)
        assert r.returncode == 0 and b"applied" in r.stderr, r.stderr
        got = torch.load(ck, weights_only=True)
        assert got["w"].numpy().tobytes() == new
    finally:
        if m:
            m.close()
        loop.close()
