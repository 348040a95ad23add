#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What a file manager calls the files of ptfs mounts: every checkpoint of
a corpus (PROVENANCE.tsv's list, files under malicious/ left out) is
mounted the way `ptfs open` mounts it, and every regular file of the tree
a file manager shows (/.ptfs is hidden and left out) is typed by GLib,
`gio info -a standard::content-type`, with the MIME packages of
contrib/desktop/ installed in a private XDG_DATA_HOME.  A tensor file is
one with the user.ptfs.dtype attribute.  Prints the counts of tensor files
typed application/x-ptfs-tensor and of other files typed so, and the most
frequent names of each miss.

    /usr/bin/python3 contrib/bench/mimetypes.py --ptfs build/ptfs
    /usr/bin/python3 contrib/bench/mimetypes.py --opts ro,nested,previews \\
        --xml old-ptfs-tensor.xml          # the layout and package before
"""
import argparse
import collections
import csv
import os
import shutil
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import lib  # noqa: E402

TENSOR_TYPE = "application/x-ptfs-tensor"


def mime_env(tmp, xmls):
    """An environment whose MIME database is /usr/share's plus @xmls."""
    data = os.path.join(tmp, "share")
    os.makedirs(os.path.join(data, "mime/packages"))
    for x in xmls:
        shutil.copy(x, os.path.join(data, "mime/packages"))
    subprocess.run(["update-mime-database", os.path.join(data, "mime")], check=True,
                   capture_output=True)
    return dict(os.environ, HOME=tmp, XDG_DATA_HOME=data, XDG_DATA_DIRS="/usr/share")


def content_types(paths, env):
    """{path: content type} from gio, 200 files a run."""
    out = {}
    for i in range(0, len(paths), 200):
        r = subprocess.run(["gio", "info", "-a", "standard::content-type"] + paths[i:i + 200],
                           env=env, capture_output=True, text=True, errors="surrogateescape")
        path = None
        for line in r.stdout.splitlines():
            if line.startswith("local path: "):
                path = line[len("local path: "):]
            elif line.strip().startswith("standard::content-type: ") and path is not None:
                out[path] = line.split(": ", 1)[1]
    return out


def tree_files(mnt, dotptfs):
    """The regular files below @mnt, /.ptfs left out unless @dotptfs;
    (path, is_tensor)."""
    for d, dirs, files in os.walk(mnt):
        if d == mnt and ".ptfs" in dirs and not dotptfs:
            dirs.remove(".ptfs")
        for f in files:
            p = os.path.join(d, f)
            try:
                if not stat.S_ISREG(os.lstat(p).st_mode):
                    continue
                tensor = True
                try:
                    os.getxattr(p, "user.ptfs.dtype", follow_symlinks=False)
                except OSError:
                    tensor = False
            except OSError:
                continue
            yield p, tensor


def checkpoints(corpus):
    with open(os.path.join(corpus, "PROVENANCE.tsv")) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            name = row["local_name"]
            if "/malicious/" not in "/" + name:
                yield os.path.join(corpus, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptfs", default=os.path.join(ROOT, "build", "ptfs"))
    ap.add_argument("--corpus", default="/work/shared/fixtures/real")
    ap.add_argument("--opts", default="ro,nested,previews,suffix",
                    help="mount options (default: those of `ptfs open`)")
    ap.add_argument("--xml", action="append",
                    help="MIME package(s) to install (default: contrib/desktop/*.xml)")
    ap.add_argument("--dotptfs", action="store_true",
                    help="count the files below /.ptfs too (hidden in file managers)")
    a = ap.parse_args()
    for tool in ("gio", "update-mime-database"):
        if not shutil.which(tool):
            raise SystemExit("needs %s (apt-get install libglib2.0-bin shared-mime-info)" % tool)
    xmls = a.xml or [os.path.join(ROOT, "contrib/desktop", x)
                     for x in ("ptfs-tensor.xml", "ptfs-checkpoint.xml")]
    tmp = tempfile.mkdtemp(prefix="ptfs-bench-mime-")
    counts = collections.Counter()
    missed, wrong = collections.Counter(), collections.Counter()
    try:
        env = mime_env(tmp, xmls)
        mnt = os.path.join(tmp, "mnt")
        for ck in checkpoints(a.corpus):
            try:
                with lib.Mount([a.ptfs, "-o", a.opts, ck], mnt):
                    files = list(tree_files(mnt, a.dotptfs))
                    types = content_types([p for p, _ in files], env)
            except RuntimeError:        # not a checkpoint ptfs mounts
                counts["checkpoints not mounted"] += 1
                continue
            counts["checkpoints mounted"] += 1
            for p, tensor in files:
                typed = types.get(p) == TENSOR_TYPE
                base = os.path.basename(p)
                if tensor:
                    counts["tensor files"] += 1
                    counts["tensor files typed as tensors"] += typed
                    if not typed:
                        missed[base] += 1
                else:
                    counts["other files"] += 1
                    counts["other files typed as tensors"] += typed
                    if typed:
                        wrong[base] += 1
    finally:
        lib.umount_all()
        shutil.rmtree(tmp, ignore_errors=True)
    print("layout: -o %s%s; packages: %s" % (a.opts, ", /.ptfs too" if a.dotptfs else "", ", ".join(os.path.basename(x) for x in xmls)))
    for k in ("checkpoints mounted", "checkpoints not mounted", "tensor files",
              "tensor files typed as tensors", "other files", "other files typed as tensors"):
        print("%-32s %d" % (k, counts[k]))
    if counts["tensor files"]:
        print("tensor files typed: %.1f%%" % (100.0 * counts["tensor files typed as tensors"]
                                             / counts["tensor files"]))
    for title, c in (("tensor files not typed as tensors", missed),
                     ("other files typed as tensors", wrong)):
        if c:
            print("%s, by name: %s" % (title, ", ".join("%s %d" % kv for kv in c.most_common(15))))


if __name__ == "__main__":
    main()
