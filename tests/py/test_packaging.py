# SPDX-License-Identifier: MIT
"""What a new user meets first: contrib/setup.sh --demo installs only what
the demo needs, and contrib/demo.sh shows the model before ptfs's own
files.  (The package itself: contrib/deb-check.sh, lintian included, and
tests/install_check.sh.)"""
import os
import subprocess

from conftest import PTFS, ROOT, needs_fuse


def setup_list(*args):
    r = subprocess.run(["bash", os.path.join(ROOT, "contrib", "setup.sh"), *args, "--list"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def test_setup_demo_installs_only_what_it_needs():
    everything = setup_list()
    demo = setup_list("--demo")
    run = setup_list("--demo-run")
    assert {"hyperfine", "fuse-zip", "archivemount", "lintian"} <= everything
    for bench in ("hyperfine", "fuse-zip", "archivemount", "lintian", "pcmanfm",
                  "nginx-light", "libcmocka-dev", "clang"):
        assert bench not in demo and bench not in run, bench
    assert {"python3-torch", "python3-numpy", "libfuse3-dev", "cmake"} <= demo
    assert run == {"fuse3", "python3-torch", "python3-numpy"}
    assert demo < everything
    r = subprocess.run(["bash", os.path.join(ROOT, "contrib", "setup.sh"), "--bogus"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("usage:")


@needs_fuse
def test_demo_shows_the_model_first(tmp_path):
    env = dict(os.environ, PTFS=PTFS, PTFS_DEMO_DIR=str(tmp_path / "demo"))
    r = subprocess.run(["bash", os.path.join(ROOT, "contrib", "demo.sh"), "--umount"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("$ ptfs ")
    listing = lines[1:lines.index(next(x for x in lines if x.startswith("$ ls -A .ptfs")))]
    # the model's own entries, and nothing of /.ptfs among them
    assert "./model/0.weight" in listing and "./optimizer" in listing
    assert not any(".ptfs" in x for x in listing), listing
    # /.ptfs: one line of names after the tree
    summary = lines[len(listing) + 2]
    assert "records" in summary.split() and "tree.json" in summary.split()
    assert not os.path.ismount(tmp_path / "demo" / "mnt")
