#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A file manager's first visit of a 200-tensor folder with previews: pcmanfm
under Xvfb opens a ptfs mount (-o previews) in thumbnail view, with the
MIME package and thumbnailer of contrib/desktop/ in a private XDG tree and
$HOME; prints when the first and the last tensor thumbnails landed in the
thumbnail cache (from pcmanfm's start, Xvfb start included).

    /usr/bin/python3 contrib/bench/pcmanfm.py --ptfs build/ptfs
"""
import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
import lib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptfs", default=os.path.join(ROOT, "build", "ptfs"))
    ap.add_argument("--tensors", type=int, default=200)
    a = ap.parse_args()
    for tool in ("pcmanfm", "xvfb-run", "update-mime-database"):
        if not shutil.which(tool):
            raise SystemExit("needs %s (apt-get install pcmanfm xvfb shared-mime-info)" % tool)
    import torch
    d = tempfile.mkdtemp(prefix="ptfs-bench-pcmanfm-")
    try:
        ck = os.path.join(d, "many.pt")
        torch.manual_seed(0)
        torch.save({"blocks.%d.%s.weight" % (i // 4, "qkvo"[i % 4]): torch.randn(256, 256)
                    for i in range(a.tensors)}, ck)
        os.environ["PTFS_BIN"] = os.path.abspath(a.ptfs)    # read by conftest
        from test_view_desktop import desktop_env
        env, cache = desktop_env(d)
        mnt = os.path.join(d, "mnt")
        with lib.Mount([os.path.abspath(a.ptfs), "-o", "previews", ck], mnt):
            names = [n for n in os.listdir(mnt)
                     if not n.startswith(".") and not n.endswith((".json", ".png"))]
            want = {hashlib.md5(("file://" + os.path.join(mnt, n)).encode()).hexdigest() + ".png"
                    for n in names}
            t0 = time.time()
            p = subprocess.Popen(["xvfb-run", "-a", "-s", "-screen 0 1920x1080x24",
                                  "pcmanfm", "--no-desktop", mnt], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
            first, last, n_last = None, 0.0, 0
            try:
                while time.time() - t0 < 300:
                    nd = os.path.join(cache, "normal")
                    got = set(os.listdir(nd)) & want if os.path.isdir(nd) else set()
                    now = time.time() - t0
                    if got and first is None:
                        first = now
                    if len(got) > n_last:
                        n_last, last = len(got), now
                    if len(got) == len(want) or (first and now - last > 40):
                        break
                    time.sleep(0.2)
            finally:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait()
        print("pcmanfm, %d tensors: first thumbnail after %.2f s, %d of %d after %.2f s"
              % (len(want), first or -1, n_last, len(want), last))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
