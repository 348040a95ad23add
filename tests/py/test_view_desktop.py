# SPDX-License-Identifier: MIT
"""A real file manager on a real mount: pcmanfm under Xvfb opens a ptfs
mount in thumbnail view, with the MIME package and the thumbnailer of
contrib/desktop/ installed under the test's own XDG directories; the
thumbnails must land in the test's $HOME cache, drawn by `ptfs thumbnail`
from the tensor bytes the mount serves."""
import hashlib
import os
import shutil
import signal
import subprocess
import time

import pytest
import torch

from conftest import PTFS, ROOT, mounted, needs_fuse
from viewutil import png_decode

REQUIRE = os.environ.get("PTFS_REQUIRE_FUSE") == "1"
HAVE = shutil.which("pcmanfm") and shutil.which("xvfb-run") and shutil.which("update-mime-database")


def desktop_env(tmp):
    home = os.path.join(tmp, "home")
    share = os.path.join(tmp, "share")
    for d in ("home/.config/libfm", "home/.config/pcmanfm/default",
              "share/mime/packages", "share/thumbnailers"):
        os.makedirs(os.path.join(tmp, d))
    with open(os.path.join(home, ".config/libfm/libfm.conf"), "w") as f:
        f.write("[config]\nshow_thumbnail=1\nthumbnail_local=1\nthumbnail_max=0\n")
    with open(os.path.join(home, ".config/pcmanfm/default/pcmanfm.conf"), "w") as f:
        f.write("[ui]\nview_mode=thumbnail\n")
    shutil.copy(os.path.join(ROOT, "contrib/desktop/ptfs-tensor.xml"),
                os.path.join(share, "mime/packages"))
    subprocess.run(["update-mime-database", os.path.join(share, "mime")],
                   check=True, capture_output=True)
    with open(os.path.join(ROOT, "contrib/desktop/ptfs.thumbnailer")) as f:
        entry = f.read().replace("TryExec=ptfs", "TryExec=" + PTFS)
        entry = entry.replace("Exec=ptfs", "Exec=" + PTFS)
    with open(os.path.join(share, "thumbnailers/ptfs.thumbnailer"), "w") as f:
        f.write(entry)
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=home + "/.config",
               XDG_CACHE_HOME=home + "/.cache", XDG_DATA_HOME=home + "/.local/share",
               XDG_DATA_DIRS=share + ":/usr/share")
    env.pop("DISPLAY", None)
    return env, os.path.join(home, ".cache/thumbnails")


@pytest.mark.skipif(not HAVE and not REQUIRE, reason="pcmanfm or xvfb-run not installed")
@needs_fuse
def test_pcmanfm_thumbnails(tmp_path):
    assert HAVE, "PTFS_REQUIRE_FUSE=1: pcmanfm and xvfb-run must be installed (contrib/setup.sh)"
    torch.manual_seed(0)
    ck = str(tmp_path / "sd.pt")
    torch.save({"enc.0.weight": torch.randn(64, 32), "enc.0.bias": torch.randn(32),
                "head.weight": torch.eye(16)}, ck)
    env, cache = desktop_env(str(tmp_path))
    with mounted(ck, "-o", "previews") as m:
        want = {hashlib.md5(("file://" + os.path.join(m, n)).encode()).hexdigest() + ".png": n
                for n in ("enc.0.weight", "enc.0.bias", "head.weight")}
        proc = subprocess.Popen(["xvfb-run", "-a", "-s", "-screen 0 1280x1024x24",
                                 "pcmanfm", "--no-desktop", m],
                                env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        found = {}
        try:
            deadline = time.time() + 90
            while time.time() < deadline and len(found) < len(want):
                for size in ("normal", "large"):
                    d = os.path.join(cache, size)
                    for f in os.listdir(d) if os.path.isdir(d) else ():
                        if f in want:
                            found[want[f]] = os.path.join(d, f)
                time.sleep(0.5)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert set(found) == set(want.values()), found
        time.sleep(0.5)          # the thumbnail is renamed into place whole
        w, h, rows = png_decode(open(found["head.weight"], "rb").read())
        assert w == h and w >= 64
        assert rows[0][0] == (178, 24, 43) and rows[0][w - 1] == (255, 255, 255)
