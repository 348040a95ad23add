# SPDX-License-Identifier: MIT
"""The ptfs benchmark suite: reads, opening, memory, commits, settings.

Run it through contrib/bench.sh, which builds a Release ptfs first:

    contrib/bench.sh [--quick] [--reps N] [--no-settings] [--json FILE]

Every measurement alternates its contenders inside each repetition (the
order flips on odd repetitions) and quotes the median over the
repetitions; ratios are ratios of medians, written as "speed relative to
the reference" (>1 = faster than the reference).  Checkpoints are
generated with torch.save into a temp dir and removed at the end; every
mount is taken down on exit, error or signal.
"""
import argparse
import collections
import contextlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen      # noqa: E402
import lib      # noqa: E402
from lib import GiB, MiB, Mount, drop_cache, median, read_range, timed  # noqa: E402


class Results:
    def __init__(self):
        self.rows = []       # dicts
        self.notes = []

    def add(self, section, label, samples, nbytes=None, ref=None, target=None,
            unit="s", extra=""):
        row = {"section": section, "label": label, "samples": list(samples),
               "median": median(samples), "nbytes": nbytes, "ref": ref,
               "target": target, "unit": unit, "extra": extra}
        self.rows.append(row)
        return row

    def find(self, section, label):
        for r in self.rows:
            if r["section"] == section and r["label"] == label:
                return r
        return None

    def note(self, text):
        self.notes.append(text)
        print("  note: " + text, flush=True)

    def speed_vs_ref(self, r):
        if not r["ref"] or r["unit"] != "s":
            return None
        ref = self.find(r["section"], r["ref"])
        if not ref or not r["median"] or r["median"] != r["median"]:
            return None
        return ref["median"] / r["median"]

    def table(self):
        out = []
        hdr = "%-44s %11s %10s %9s %s" % ("measurement", "median", "rate", "speed", "target")
        section = None
        for r in self.rows:
            if r["section"] != section:
                section = r["section"]
                out.append("")
                out.append("== " + section)
                out.append(hdr)
            if r["median"] != r["median"]:
                med = "n/a"
            elif r["unit"] == "s":
                med = "%.4f s" % r["median"] if r["median"] < 10 else "%.2f s" % r["median"]
            elif r["unit"] == "MiB":
                med = "%.1f MiB" % (r["median"] / MiB)
            else:
                med = "%s %s" % (r["median"], r["unit"])
            rate = ""
            if r["nbytes"] and r["unit"] == "s" and r["median"] > 0:
                rate = "%.2f GiB/s" % (r["nbytes"] / r["median"] / GiB)
            sp = self.speed_vs_ref(r)
            speed = "%.2fx" % sp if sp is not None else ("ref" if r["ref"] is None and r["target"] is None and r["unit"] == "s" and med != "n/a" else "")
            tgt = ""
            if r["target"] is not None:
                kind, val = r["target"]
                if kind == "speed" and sp is not None:
                    tgt = ">= %gx: %s" % (val, "HOLDS" if sp >= val else "MISSED")
                elif kind == "time":
                    tgt = "< %g s: %s" % (val, "HOLDS" if r["median"] < val else "MISSED")
                elif kind == "max":
                    tgt = "< %.0f MiB: %s" % (val / MiB, "HOLDS" if r["median"] < val else "MISSED")
            line = "%-44s %11s %10s %9s %s" % (r["label"][:44], med, rate, speed, tgt)
            if r["extra"]:
                line += "  " + r["extra"]
            out.append(line.rstrip())
        return "\n".join(out)


def log(msg):
    print(msg, flush=True)


def alternate(rep, items):
    return list(items) if rep % 2 == 0 else list(reversed(items))


def tensor_meta(mnt, name):
    with open(os.path.join(mnt, name + ".json")) as f:
        return json.load(f)


def bdi_path(mnt):
    real = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split()
            if p[4] == real:
                return "/sys/class/bdi/%s/read_ahead_kb" % p[2]
    return None


def record_prefix(ckpt):
    return os.path.splitext(os.path.basename(ckpt))[0]


# ---- 1. sequential read -------------------------------------------------

def bench_seq(ctx, R):
    sec = "1. sequential read of a %s tensor, 1 MiB reads" % ctx.human(ctx.seq_bytes)
    ck, mnt = ctx.ck["seq"], ctx.mnt("seq")
    # The FUSE floor: libfuse's own passthrough_hp (example/passthrough_hp.cc
    # of the libfuse release the system has, built in /tmp and found
    # through $PTFS_BENCH_PEERS) serving the checkpoint's directory, the
    # same byte range read through it.
    pthp = find_peer("passthrough_hp")
    if not pthp:
        R.note("passthrough_hp not found (PATH, $PTFS_BENCH_PEERS): no FUSE floor rows")
    with contextlib.ExitStack() as stack:
        stack.enter_context(Mount([ctx.ptfs, ck], mnt))
        meta = tensor_meta(mnt, "w")
        off, n = meta["file_offset"], meta["nbytes"]
        tf = os.path.join(mnt, "w")
        who = {"direct": (lambda: read_range(ck, off, n)),
               "mount": (lambda: read_range(tf, 0, n))}
        pf = None
        if pthp:
            pmnt = ctx.mnt("passthrough")
            stack.enter_context(Mount([pthp, os.path.dirname(os.path.abspath(ck))], pmnt))
            pf = os.path.join(pmnt, os.path.basename(ck))
            who["floor"] = lambda: read_range(pf, off, n)
        # the .pt's page cache filled before timing; the FUSE caches are
        # filled by refill() below, before each warm repetition
        who["direct"]()
        fill = [(tf, 0)] + ([(pf, off)] if pf else [])

        def drop_fuse():
            for f, _ in fill:
                drop_cache(f)

        def refill(rep):
            # Of two FUSE files filled one after the other, the first
            # reads slower from the page cache on these guests, whichever
            # daemon serves it (docs/BENCHMARKS.md, seventh and eighth
            # sessions).  So each repetition fills both afresh, in
            # alternated order, and the state runs an even number of
            # repetitions.
            drop_fuse()
            for f, o in alternate(rep, fill):
                read_range(f, o, n)

        def none(*_):
            pass
        # (state, before each repetition, before a direct read, before a
        # read through FUSE)
        states = [
            ("warm (.pt and FUSE page cache warm)", refill, none, none),
            ("warm .pt, FUSE cache dropped", none, none, drop_fuse),
            ("cold (.pt and FUSE cache dropped)", none, lambda: drop_cache(ck),
             lambda: (drop_cache(ck), drop_fuse())),
        ]
        for sname, prep_rep, prep_d, prep_m in states:
            t = {k: [] for k in who}
            reps = ctx.reps + (ctx.reps % 2 if prep_rep is refill else 0)
            for rep in range(reps):
                prep_rep(rep)
                for k in alternate(rep, list(who)):
                    (prep_d if k == "direct" else prep_m)()
                    t[k].append(timed(who[k]))
            ref = "%s: .pt byte range (direct)" % sname
            R.add(sec, ref, t["direct"], nbytes=n)
            R.add(sec, "%s: mount/w" % sname, t["mount"], nbytes=n, ref=ref, target=("speed", 0.9))
            if pf:
                fl = "%s: passthrough_hp .pt range" % sname
                R.add(sec, fl, t["floor"], nbytes=n, ref=ref)
                per = [math.log(f / m) for f, m in zip(t["floor"], t["mount"])]
                R.add(sec, "%s: mount/w against the floor" % sname, t["mount"], nbytes=n,
                      ref=fl, target=("speed", 0.95),
                      extra="(per repetition, geometric mean %.2f)"
                      % math.exp(sum(per) / len(per)))
        # check that the cache control did what we say
        drop_cache(ck)
        drop_cache(tf)
        R.note("after posix_fadvise(DONTNEED): %.0f%% of seq.pt and %.0f%% of mount/w still cached"
               % (100 * lib.cached_fraction(ck), 100 * lib.cached_fraction(tf)))
        read_range(tf, 0, n)
        R.note("after one read through the mount: %.0f%% of seq.pt and %.0f%% of mount/w cached"
               " (the data sits in the page cache twice)"
               % (100 * lib.cached_fraction(ck), 100 * lib.cached_fraction(tf)))


# ---- 2. numpy.memmap ---------------------------------------------------

def bench_memmap(ctx, R):
    import numpy as np
    sec = "2. numpy.memmap of the %s tensor" % ctx.human(ctx.seq_bytes)
    ck, mnt = ctx.ck["seq"], ctx.mnt("seq")
    nrand = 20000 if not ctx.quick else 5000
    with Mount([ctx.ptfs, ck], mnt):
        meta = tensor_meta(mnt, "w")
        off, n = meta["file_offset"], meta["nbytes"]
        tf = os.path.join(mnt, "w")
        rng = random.Random(42)
        offs = [rng.randrange(0, n - 4096) for _ in range(nrand)]

        def rand_reads(mm):
            s = 0
            for o in offs:
                s += len(mm[o:o + 4096].tobytes())
            return s

        def open_d(dtype):
            return np.memmap(ck, dtype=dtype, mode="r", offset=off,
                             shape=(n // np.dtype(dtype).itemsize,))

        def open_m(dtype):
            return np.memmap(tf, dtype=dtype, mode="r")

        def run(kind, opener):
            if kind == "rand":
                mm = opener(np.uint8)
                rand_reads(mm)
            else:
                mm = opener(np.float32)
                mm.sum(dtype=np.float64)
            del mm

        read_range(ck, off, n)
        read_range(tf, 0, n)
        for kind, desc, nb in (("rand", "%d random 4 KiB reads" % nrand, None),
                               ("sum", "full pass (sum)", n)):
            for sname, prep in (("warm", lambda: None),
                                ("FUSE cache dropped", lambda: drop_cache(tf))):
                td, tm = [], []
                for rep in range(ctx.reps):
                    for who in alternate(rep, ("direct", "mount")):
                        if who == "direct":
                            td.append(timed(run, kind, open_d))
                        else:
                            prep()
                            tm.append(timed(run, kind, open_m))
                ref = "%s, %s: memmap .pt at offset" % (desc, sname)
                R.add(sec, ref, td, nbytes=nb)
                R.add(sec, "%s, %s: memmap mount/w" % (desc, sname), tm, nbytes=nb, ref=ref)


# ---- 3. open and list --------------------------------------------------

def torch_load_iter(path):
    import torch
    sd = torch.load(path, weights_only=True)
    k = 0
    for name, t in sd.items():
        k += t.numel() + len(t.shape) + len(name)
        t.dtype
    return k


def read_small(path):
    """os.open/os.read: Python's open() adds an isatty() ioctl, which FUSE
    forwards to the daemon (one more round trip per file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 1 << 16):
            pass
    finally:
        os.close(fd)


def cpu_now():
    """CPU seconds of this process plus its waited-for children."""
    a = os.times()
    return a.user + a.system + a.children_user + a.children_system


def count_opcodes(logpath):
    c = collections.Counter()
    rx = re.compile(r"opcode: (\w+)")
    with open(logpath, errors="replace") as f:
        for line in f:
            m = rx.search(line)
            if m:
                c[m.group(1)] += 1
    return c


# Archive mounters that can list a torch.save file (a ZIP), each found on
# PATH or in $PTFS_BENCH_PEERS (a directory holding binaries built
# elsewhere, e.g. mount-zip and fuse-archive from source in /tmp): argv
# without the mountpoint.  fuse-zip and archivemount are Debian packages.
LIST_PEERS = [("mount-zip", ["mount-zip"]), ("fuse-archive", ["fuse-archive"]),
              ("fuse-zip", ["fuse-zip", "-r"]), ("archivemount", ["archivemount", "-o", "readonly"])]


def find_peer(name):
    d = os.environ.get("PTFS_BENCH_PEERS")
    if d and os.access(os.path.join(d, name), os.X_OK):
        return os.path.join(d, name)
    return shutil.which(name)


def walk_json(mnt):
    for root, dirs, files in os.walk(mnt):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for fn in files:
            if fn.endswith(".json"):
                read_small(os.path.join(root, fn))


def bench_open(ctx, R):
    for count in ctx.many_counts:
        bench_open_one(ctx, R, count)


def bench_open_one(ctx, R, count):
    import torch  # noqa: F401  (imported before timing: favours torch)
    ck = ctx.ck["many"] if count == ctx.many else ctx.ck["many%d" % count]
    sec = "3. open and list a checkpoint of %d tensors" % count
    mnt = ctx.mnt("many")
    P = ctx.ptfs
    reps = ctx.reps if count <= 20000 else max(3, ctx.reps // 2)

    def mount_tree():
        with Mount([P, ck], mnt):
            with open(os.path.join(mnt, ".ptfs", "tree.json"), "rb") as f:
                f.read()

    def mount_ls(*opts):
        with Mount([P, *opts, ck], mnt):
            subprocess.run(["ls", "-lR", mnt], stdout=subprocess.DEVNULL, check=True)
            walk_json(mnt)

    def mount_lsR(argv):
        with Mount(argv + [ck], mnt):
            subprocess.run(["ls", "-R", mnt], stdout=subprocess.DEVNULL, check=True)

    def mount_only():
        with Mount([P, ck], mnt):
            pass

    def cli(*args):
        subprocess.run([P, *args], stdout=subprocess.DEVNULL, check=True)

    peers = [(n, [find_peer(n)] + argv[1:]) for n, argv in LIST_PEERS if find_peer(n)]
    for n, _ in LIST_PEERS:
        if not find_peer(n):
            R.note("%s not found (PATH, $PTFS_BENCH_PEERS); its rows are skipped" % n)
    contenders = [
        ("torch.load(weights_only=True) + iterate", lambda: torch_load_iter(ck)),
        ("(a) mount + read /.ptfs/tree.json + umount", mount_tree),
        ("(b) mount + ls -lR + read every .json + umount", mount_ls),
        ("(b) the same, mounted -o ro", lambda: mount_ls("-o", "ro")),
        ("    mount + umount alone", mount_only),
        ("(c) ptfs ls (no FUSE)", lambda: cli("ls", "--max", "1000000000", ck)),
        ("(c) ptfs info (no FUSE)", lambda: cli("info", ck)),
        ("(d) ptfs: mount + first ls -R + umount", lambda: mount_lsR([P])),
    ]
    for n, argv in peers:
        contenders.append(("(d) %s: mount + first ls -R + umount" % n,
                           lambda argv=argv: mount_lsR(argv)))
    for _, fn in contenders:       # warm the page cache and torch
        fn()
    samples = {name: [] for name, _ in contenders}
    cpu = {name: [] for name, _ in contenders}
    for rep in range(reps):
        for name, fn in alternate(rep, contenders):
            c0 = cpu_now()
            samples[name].append(timed(fn))
            cpu[name].append(cpu_now() - c0)
    ref = contenders[0][0]
    R.add(sec, ref, samples[ref], extra="(CPU %.3f s)" % median(cpu[ref]))
    targets = {"(a)": 12, "(c)": 25, "(b) mount": 3}
    for name, _ in contenders[1:]:
        tgt = next((("speed", v) for k, v in targets.items() if name.startswith(k)), None)
        ex = ""
        if name.startswith("(c)"):
            ex = "(CPU %.3f s: %.1fx torch's CPU)" % (median(cpu[name]), median(cpu[ref]) / max(median(cpu[name]), 1e-9))
        if name.startswith("(d)"):
            ex = "(%.1f ms)" % (1000 * median(samples[name]))
        R.add(sec, name, samples[name], ref=ref, target=tgt, extra=ex)

    # daemon peak memory after mount + ls -lR, 3 fresh mounts each
    mem = [("ptfs", [P, "-f"])] + [(n, argv + ["-f"]) for n, argv in peers]
    hwm = {n: [] for n, _ in mem}
    for rep in range(3):
        for n, argv in alternate(rep, mem):
            with Mount(argv + [ck], mnt, foreground=True) as m:
                subprocess.run(["ls", "-lR", mnt], stdout=subprocess.DEVNULL, check=True)
                hwm[n].append(lib.vm_status(m.pid, "VmHWM"))
    for n, _ in mem:
        R.add(sec, "daemon VmHWM after mount + ls -lR: %s" % n, hwm[n], unit="MiB",
              target=("max", 21 * MiB) if n == "ptfs" and count <= 20000 else None)

    # FUSE round trips: one untimed run each with the daemon in debug mode
    for label, opts, work in (
            ("(a) tree.json", [], lambda: open(os.path.join(mnt, ".ptfs", "tree.json"), "rb").read()),
            ("(b) ls -lR + every .json", [], None),
            ("(b) ls -lR + every .json, -o ro", ["-o", "ro"], None)):
        logp = os.path.join(ctx.tmp, "fuse-debug.log")
        with open(logp, "w") as lf:
            with Mount([P, "-d", *opts, ck], mnt, foreground=True, stderr=lf):
                if work:
                    work()
                else:
                    subprocess.run(["ls", "-lR", mnt], stdout=subprocess.DEVNULL, check=True)
                    walk_json(mnt)
        c = count_opcodes(logp)
        os.unlink(logp)
        top = ", ".join("%s %d" % kv for kv in c.most_common(6))
        R.note("%d tensors: FUSE round trips for %s (mount to umount, ptfs -d): %d requests: %s"
               % (count, label, sum(c.values()), top))


# ---- 4. daemon memory --------------------------------------------------

def bench_memory(ctx, R):
    sec = "4. daemon memory serving a %s checkpoint end to end" % ctx.human(os.path.getsize(ctx.ck["big"]))
    ck, mnt = ctx.ck["big"], ctx.mnt("big")
    hwm_open, hwm_end, times = [], [], []
    total = 0
    reps = max(3, ctx.reps // 2)
    for rep in range(reps):
        with Mount([ctx.ptfs, "-f", ck], mnt, foreground=True) as m:
            hwm_open.append(lib.vm_status(m.pid, "VmHWM"))
            files = sorted(e.path for e in os.scandir(mnt)
                           if e.is_file() and not e.name.endswith(".json"))
            t0 = time.perf_counter()
            total = 0
            for p in files:
                total += read_range(p, 0, os.path.getsize(p))
            times.append(time.perf_counter() - t0)
            hwm_end.append(lib.vm_status(m.pid, "VmHWM"))
    R.add(sec, "ptfs VmHWM after mount (%d reps)" % reps, hwm_open, unit="MiB")
    R.add(sec, "ptfs VmHWM after reading all %d tensors" % len(files), hwm_end, unit="MiB",
          target=("max", 64 * MiB), extra="(max over reps %.1f MiB)" % (max(hwm_end) / MiB))
    R.add(sec, "read time of the %s through the mount" % ctx.human(total), times, nbytes=total)
    # reference: what torch.load needs for the same file (one run)
    code = ("import resource,torch,sys; torch.load(sys.argv[1], weights_only=True); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, ck], capture_output=True, text=True)
    if out.returncode == 0:
        R.add(sec, "reference: torch.load peak RSS (1 run)", [int(out.stdout.split()[-1]) * 1024],
              unit="MiB")


# ---- 5. peer mounters --------------------------------------------------

def bench_peers(ctx, R):
    for ckname, with_archivemount in (("peer", True), ("seq", False)):
        ck = ctx.ck[ckname]
        size = os.path.getsize(ck)
        rec = "%s/data/0" % record_prefix(ck)
        sec = "5. peers: read storage record %s (%s), fresh mount each" % (rec, ctx.human(size))
        mnt = ctx.mnt("peer")
        cont = [
            ("fuse-zip -r: archive/" + rec, ["fuse-zip", "-r", ck], rec),
            ("ptfs: /.ptfs/records/" + rec, [ctx.ptfs, ck], ".ptfs/records/" + rec),
            ("ptfs: tensor file /w", [ctx.ptfs, ck], "w"),
        ]
        if with_archivemount:
            cont.insert(0, ("archivemount -o readonly: archive/" + rec,
                            ["archivemount", "-o", "readonly", ck], rec))
        have = [c for c in cont if shutil.which(c[1][0]) or os.path.exists(c[1][0])]
        for c in cont:
            if c not in have:
                R.note("%s not installed; skipped" % c[1][0])
        read_range(ck, 0, size)                     # .pt warm
        rt = {c[0]: [] for c in have}
        mt = {c[0]: [] for c in have}
        nbytes = None
        for rep in range(ctx.reps):
            for label, argv, rel in alternate(rep, have):
                t0 = time.perf_counter()
                with Mount(argv, mnt):
                    t1 = time.perf_counter()
                    p = os.path.join(mnt, rel)
                    nbytes = os.path.getsize(p)
                    rt[label].append(timed(read_range, p, 0, nbytes))
                mt[label].append(t1 - t0)
        ref = have[0][0]
        for label, _, _ in have:
            R.add(sec, label, rt[label], nbytes=nbytes, ref=None if label == ref else ref,
                  extra="(mount %.1f ms)" % (1000 * median(mt[label])))


# ---- 6. commit ---------------------------------------------------------

def set_available(ctx):
    probe = os.path.join(ctx.tmp, "probe-copy.pt")
    shutil.copy(ctx.ck["probe"], probe)
    data = bytes(range(64))
    try:
        r = subprocess.run([ctx.ptfs, "set", probe, "small"], input=data, capture_output=True)
        if r.returncode != 0:
            return False, (r.stderr.decode(errors="replace").strip() or "exit %d" % r.returncode)
        c = subprocess.run([ctx.ptfs, "cat", probe, "small"], capture_output=True)
        if c.stdout != data:
            return False, "ptfs set exited 0 but ptfs cat does not show the new bytes"
        return True, ""
    finally:
        os.unlink(probe)


def bench_commit(ctx, R):
    ck = ctx.ck["big"]
    sec = "6. commit one changed tensor in a %s checkpoint" % ctx.human(os.path.getsize(ck))
    ok, why = set_available(ctx)
    if not ok:
        R.note("commit benchmark: `ptfs set` not available (%s); skipped" % why)
        R.add(sec, "ptfs set: not available", [float("nan")], extra=why[:60])
        return
    copy = os.path.join(ctx.tmp, "big-copy.pt")
    read_range(ck, 0, os.path.getsize(ck))
    small = subprocess.run([ctx.ptfs, "cat", ck, "small"], capture_output=True, check=True).stdout
    tc, tcs, ts = [], [], []

    def do_cp():
        subprocess.run(["cp", ck, copy], check=True)

    def do_cp_sync():
        subprocess.run(["cp", ck, copy], check=True)
        subprocess.run(["sync", copy], check=True)

    last = None
    for rep in range(ctx.reps):
        for who in alternate(rep, ("cp", "cp+sync", "set")):
            if who == "set":
                last = bytes([rep % 251]) * len(small)
                t0 = time.perf_counter()
                subprocess.run([ctx.ptfs, "set", ck, "small"], input=last, check=True,
                               stdout=subprocess.DEVNULL)
                ts.append(time.perf_counter() - t0)
            else:
                (tc if who == "cp" else tcs).append(timed(do_cp if who == "cp" else do_cp_sync))
                os.unlink(copy)
    got = subprocess.run([ctx.ptfs, "cat", ck, "small"], capture_output=True).stdout
    if got != last:
        R.note("commit benchmark: after ptfs set, ptfs cat shows different bytes!")
    R.add(sec, "cp of the checkpoint (same fs)", tc)
    R.add(sec, "cp + sync FILE", tcs, ref="cp of the checkpoint (same fs)")
    R.add(sec, "ptfs set of one %d-byte tensor" % len(small), ts,
          ref="cp of the checkpoint (same fs)", target=("speed", 0.8))


# ---- 6b. commit ways ------------------------------------------------------

def make_commit_ck(path, nbytes):
    """nbytes of float32 "w" plus a 12 KiB tensor "t" (3072 float32)."""
    import torch
    torch.save({"w": torch.zeros(nbytes // 4, dtype=torch.float32),
                "t": torch.zeros(3072, dtype=torch.float32)}, path)


class LoopXfs:
    """A loop-mounted XFS image with reflink, under @d; None when this
    machine cannot (not root, no loop devices): the caller notes it."""

    def __init__(self, d, size):
        self.d, self.size, self.dev, self.mnt, self.why = d, size, None, None, None

    def __enter__(self):
        img = os.path.join(self.d, "xfs.img")
        try:
            if os.geteuid() != 0:
                raise RuntimeError("not root")
            with open(img, "wb") as f:
                f.truncate(self.size)
            subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", img], check=True,
                           capture_output=True)
            self.dev = subprocess.run(["losetup", "-f", "--show", img], check=True,
                                      capture_output=True).stdout.decode().strip()
            self.mnt = os.path.join(self.d, "xfs")
            os.makedirs(self.mnt, exist_ok=True)
            subprocess.run(["mount", self.dev, self.mnt], check=True, capture_output=True)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
            self.why = str(e)
            self.__exit__()
        return self

    def __exit__(self, *exc):
        # a ptfs daemon that served a file here may still be exiting:
        # retry, and detach lazily as the last resort
        for _ in range(100):
            if not (self.mnt and os.path.ismount(self.mnt)):
                break
            if subprocess.run(["umount", self.mnt], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
            self.dev = None
        img = os.path.join(self.d, "xfs.img")
        if os.path.exists(img):
            os.unlink(img)
        return False


def time_set(ctx, ck, way, data):
    t0 = time.perf_counter()
    r = subprocess.run([ctx.ptfs, "set", "-v", "-o", "commit=" + way, ck, "t"], input=data,
                       capture_output=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError("ptfs set -o commit=%s: %s" % (way, r.stderr.decode().strip()))
    return dt, r.stderr.decode().strip()


def commit_ways(ctx, R, sec, ck, ways):
    """ptfs set of the 12 KiB tensor, each way alternated with the others."""
    samples = {w: [] for w in ways}
    said = {}
    for rep in range(ctx.reps):
        for w in alternate(rep, ways):
            data = bytes([(rep * 7 + len(w)) % 251]) * (3072 * 4)
            dt, msg = time_set(ctx, ck, w, data)
            samples[w].append(dt)
            said[w] = msg.split("(", 1)[-1].rstrip(")")
    ref = "ptfs set -o commit=%s" % ways[0]
    for w in ways:
        label = "ptfs set -o commit=%s" % w
        R.add(sec, label, samples[w], extra="(%s)" % said[w],
              ref=None if label == ref else ref, target=None if label == ref else ("speed", 20.0))


def memmap_flush(ctx, R, sec, ck, ways, mnt):
    """numpy.memmap(r+) of mount/w, a 9 MB edit, flush(): each way."""
    import numpy as np
    samples = {w: [] for w in ways}
    for rep in range(ctx.reps):
        for w in alternate(rep, ways):
            with Mount([ctx.ptfs, "-o", "commit=" + w, ck], mnt):
                m = np.memmap(os.path.join(mnt, "w"), dtype=np.float32, mode="r+")
                lo = (rep * 4099 * 1024) % (m.shape[0] - (9 << 20) // 4)
                m[lo:lo + (9 << 20) // 4] = rep + 1.0
                t0 = time.perf_counter()
                m.flush()
                samples[w].append(time.perf_counter() - t0)
                del m
    ref = "flush(), -o commit=%s" % ways[0]
    for w in ways:
        label = "flush(), -o commit=%s" % w
        R.add(sec, label, samples[w],
              ref=None if label == ref else ref, target=None if label == ref else ("time", 0.2))


def bench_commit_ways(ctx, R):
    nbytes = (256 * MiB) if ctx.quick else (1 * GiB)
    ck = os.path.join(ctx.tmp, "commit.pt")
    make_commit_ck(ck, nbytes)
    size = ctx.human(os.path.getsize(ck))
    sec = "6b. commit of one 12 KiB tensor in a %s checkpoint, work disk (%s)" % (
        size, fs_type(ctx.tmp))
    commit_ways(ctx, R, sec, ck, ["rewrite", "inplace"])
    sec = "6c. memmap.flush() of a 9 MiB edit through a mount, work disk (%s)" % fs_type(ctx.tmp)
    memmap_flush(ctx, R, sec, ck, ["rewrite", "inplace"], ctx.mnt("flush"))
    with LoopXfs(ctx.tmp, 2 * os.path.getsize(ck) + 512 * MiB) as x:
        if x.why:
            R.note("commit ways on XFS: skipped (%s)" % x.why)
        else:
            xck = os.path.join(x.mnt, "commit.pt")
            shutil.copy(ck, xck)
            sec = "6d. commit of one 12 KiB tensor in a %s checkpoint, loop XFS reflink=1" % size
            commit_ways(ctx, R, sec, xck, ["rewrite", "clone"])
            sec = "6e. memmap.flush() of a 9 MiB edit through a mount, loop XFS reflink=1"
            memmap_flush(ctx, R, sec, xck, ["rewrite", "clone"], ctx.mnt("flush-xfs"))
            os.unlink(xck)
    os.unlink(ck)


def fs_type(path):
    r = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", path], capture_output=True)
    return r.stdout.decode().strip() or "?"


# ---- 7. settings -------------------------------------------------------

def bench_settings(ctx, R):
    sec = "7. settings: sequential read of mount/w, warm .pt, FUSE cache dropped"
    ck, mnt = ctx.ck["seq"], ctx.mnt("settings")
    n = None
    var = ctx.variant
    configs = [("default (multithreaded, ra 1 MiB, 512 KiB reqs: splice)", ctx.ptfs, [], None, None),
               ("-s single-threaded", ctx.ptfs, ["-s"], None, None),
               ("readahead 128 KiB (bdi read_ahead_kb)", ctx.ptfs, [], None, 128),
               ("readahead 4 MiB (bdi read_ahead_kb)", ctx.ptfs, [], None, 4096)]
    if var:
        configs += [
            ("variant: 1 MiB requests (pipe too small: copies)", var, [], {"PTFS_BENCH_MAX_IO": "1048576"}, None),
            ("variant: 512 KiB, -s", var, ["-s"], {"PTFS_BENCH_MAX_IO": "524288"}, None),
            ("variant: 512 KiB, splice without MOVE", var, [],
             {"PTFS_BENCH_MAX_IO": "524288", "PTFS_BENCH_NO_SPLICE_MOVE": "1"}, None),
            ("variant: 512 KiB, no splice (copy)", var, [],
             {"PTFS_BENCH_MAX_IO": "524288", "PTFS_BENCH_NO_SPLICE_WRITE": "1"}, None),
            ("variant: 256 KiB requests (splice)", var, [], {"PTFS_BENCH_MAX_IO": "262144"}, None),
            ("variant: 128 KiB requests (splice)", var, [], {"PTFS_BENCH_MAX_IO": "131072"}, None),
            ("variant: 1 MiB, no splice (copy)", var, [], {"PTFS_BENCH_NO_SPLICE_WRITE": "1"}, None),
        ]
    else:
        R.note("settings: no variant build; splice and request-size variants skipped")
    samples = {c[0]: [] for c in configs}
    for rep in range(ctx.reps):
        for label, binary, opts, env, ra in alternate(rep, configs):
            e = dict(os.environ, **env) if env else None
            with Mount([binary, *opts, ck], mnt, env=e):
                if ra:
                    bp = bdi_path(mnt)
                    with open(bp, "w") as f:
                        f.write("%d\n" % ra)
                tf = os.path.join(mnt, "w")
                n = os.path.getsize(tf)
                samples[label].append(timed(read_range, tf, 0, n))
    ref = configs[0][0]
    for c in configs:
        R.add(sec, c[0], samples[c[0]], nbytes=n, ref=None if c[0] == ref else ref)


# ---- driver ------------------------------------------------------------

class Ctx:
    def human(self, b):
        return "%.0f GiB" % (b / GiB) if b >= GiB else "%.0f MiB" % (b / MiB)

    def mnt(self, name):
        p = os.path.join(self.tmp, "mnt-" + name)
        os.makedirs(p, exist_ok=True)
        return p


SECTIONS = {"seq": bench_seq, "memmap": bench_memmap, "open": bench_open,
            "memory": bench_memory, "peers": bench_peers, "commit": bench_commit,
            "commitways": bench_commit_ways,
            "settings": bench_settings}


# The checkpoints each section reads (gen.generate names).
NEEDS = {"seq": {"seq"}, "memmap": {"seq"}, "open": {"many"}, "memory": {"big"},
         "peers": {"peer", "seq"}, "commit": {"big", "probe"}, "commitways": {"seq", "big", "probe"},
         "settings": {"seq"}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptfs", required=True, help="the ptfs binary (Release build)")
    ap.add_argument("--variant", help="the settings-variant ptfs binary (see variant.py)")
    ap.add_argument("--tmp", help="work dir (default: a new dir under $TMPDIR or /tmp)")
    ap.add_argument("--quick", action="store_true", help="small checkpoints, 3 repetitions")
    ap.add_argument("--reps", type=int, help="repetitions (default 7, --quick 3)")
    ap.add_argument("--only", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--json", help="also write the raw samples here")
    ap.add_argument("--many", help="tensor counts for section 3 (default 20000,100000; --quick 20000)")
    a = ap.parse_args()

    ctx = Ctx()
    ctx.ptfs = os.path.abspath(a.ptfs)
    ctx.variant = os.path.abspath(a.variant) if a.variant else None
    ctx.quick = a.quick
    ctx.reps = a.reps or (3 if a.quick else 7)
    ctx.tmp = a.tmp or tempfile.mkdtemp(prefix="ptfs-bench.")
    made_tmp = not a.tmp
    os.makedirs(ctx.tmp, exist_ok=True)
    only = a.only.split(",") if a.only else list(SECTIONS)
    R = Results()
    try:
        log("ptfs benchmark: %d repetitions, work dir %s" % (ctx.reps, ctx.tmp))
        log("generating checkpoints with torch.save ...")
        ctx.many = gen.sizes(a.quick)["many"]
        ctx.many_counts = [int(x) for x in a.many.split(",")] if a.many else \
            ([ctx.many] if a.quick else [ctx.many, 100000])
        need = None
        if a.only:
            need = set()
            for name in only:
                need |= NEEDS.get(name, set())
        ctx.ck = gen.generate(ctx.tmp, a.quick, log=log, names=need,
                              many_counts=ctx.many_counts)
        ctx.seq_bytes = gen.sizes(a.quick)["seq"]
        for name in only:
            log("running %s ..." % name)
            t0 = time.monotonic()
            SECTIONS[name](ctx, R)
            log("  (%s took %.0f s)" % (name, time.monotonic() - t0))
    finally:
        lib.umount_all()
        print(R.table())
        print()
        for n in R.notes:
            print("note: " + n)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"reps": ctx.reps, "quick": a.quick, "rows": R.rows, "notes": R.notes},
                          f, indent=1, default=str)
        if made_tmp:
            shutil.rmtree(ctx.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
