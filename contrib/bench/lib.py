# SPDX-License-Identifier: MIT
"""Helpers for the benchmark suite: mounts that always come down, page
cache control, timing and medians."""
import atexit
import ctypes
import os
import signal
import statistics
import subprocess
import sys
import time

MiB = 1 << 20
GiB = 1 << 30

_mounts = []          # mountpoints we mounted and have not unmounted yet


def is_mounted(mnt):
    real = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4] == real:
                return True
    return False


def _umount(mnt, lazy_last=True):
    for i in range(50):
        if not is_mounted(mnt):
            return True
        r = subprocess.run(["fusermount3", "-u", mnt], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if r.returncode == 0:
            return True
        time.sleep(0.1)
    if lazy_last:
        subprocess.run(["fusermount3", "-u", "-z", mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return not is_mounted(mnt)


def umount_all():
    while _mounts:
        m = _mounts.pop()
        _umount(m)


atexit.register(umount_all)


def _on_signal(sig, frame):
    umount_all()
    sys.exit(128 + sig)


for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_s, _on_signal)


class Mount:
    """A FUSE mount that is unmounted on leaving the with-block, even on
    error.  argv is the mounter's command without the mountpoint.  With
    foreground=True the daemon runs as our child (ptfs -f / -d) and
    self.pid is its pid; otherwise the mounter daemonises and we wait for
    it to return."""

    def __init__(self, argv, mnt, foreground=False, stderr=None, env=None):
        self.argv, self.mnt, self.fg = list(argv), mnt, foreground
        self.stderr, self.env = stderr, env
        self.proc = None
        self.pid = None

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        if is_mounted(self.mnt):
            raise RuntimeError("%s is already a mountpoint" % self.mnt)
        _mounts.append(self.mnt)
        cmd = self.argv + [self.mnt]
        if self.fg:
            self.proc = subprocess.Popen(cmd, stderr=self.stderr or subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, env=self.env)
            self.pid = self.proc.pid
            t0 = time.monotonic()
            while not is_mounted(self.mnt):
                if self.proc.poll() is not None:
                    raise RuntimeError("%s exited with %d" % (cmd, self.proc.returncode))
                if time.monotonic() - t0 > 60:
                    raise RuntimeError("%s did not mount" % cmd)
                time.sleep(0.005)
        else:
            r = subprocess.run(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               env=self.env)
            if r.returncode != 0 or not is_mounted(self.mnt):
                raise RuntimeError("%s failed (%d): %s" % (cmd, r.returncode,
                                                         r.stderr.decode(errors="replace").strip()))
        return self

    def __exit__(self, *exc):
        self.umount()
        return False

    def umount(self):
        if self.mnt in _mounts:
            ok = _umount(self.mnt)
            _mounts.remove(self.mnt)
            if not ok:
                print("warning: could not unmount %s" % self.mnt, file=sys.stderr)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()      # our own child, by pid
                self.proc.wait()
            self.proc = None


def drop_cache(path):
    """Drop the clean page-cache pages of one file (works on FUSE files
    too: generic_fadvise invalidates the inode's mapping)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_fraction(path):
    """Fraction of the file's pages resident in the page cache (fincore)."""
    try:
        out = subprocess.run(["fincore", "-b", "-n", "-o", "RES,SIZE", path],
                             capture_output=True, text=True, check=True).stdout.split()
        res, size = int(out[0]), int(out[1])
        return res / size if size else 1.0
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return float("nan")


PAGE = 4096
_buf = bytearray(MiB + PAGE)
_buf_addr = ctypes.addressof((ctypes.c_char * len(_buf)).from_buffer(_buf))


def read_range(path, offset, length, bs=MiB):
    """Sequential read of [offset, offset+length) with bs-sized readinto
    calls: the same loop for the checkpoint and the mounted file.

    The buffer is placed half a page away from the file offset's place in
    its page, for every reader alike.  On the machines this ran on (AMD
    EPYC guests) the kernel's copy to user space runs at half speed when
    destination and source sit at nearly the same offset in their pages:
    1 GiB of a cached ext4 file read from offset 4096 took 0.136 s, from
    offset 384 0.058 s, into the same buffer; a tensor file starts at 0
    and its range in the .pt does not, so without this the warm rows
    compared alignments, not readers."""
    if bs > MiB:
        raise ValueError("read_range: bs above 1 MiB")
    shift = (offset % PAGE + PAGE // 2 - _buf_addr % PAGE) % PAGE
    view = memoryview(_buf)[shift:shift + bs]
    left = length
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        while left > 0:
            n = f.readinto(view if left >= bs else view[:left])
            if not n:
                raise IOError("%s: short read, %d bytes left" % (path, left))
            left -= n
    return length


def timed(fn, *a, **kw):
    t0 = time.perf_counter()
    fn(*a, **kw)
    return time.perf_counter() - t0


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def vm_status(pid, key):
    """A /proc/PID/status field in bytes (VmHWM, VmRSS)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None
