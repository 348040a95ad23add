# SPDX-License-Identifier: MIT
"""A real file manager on a real mount: pcmanfm under Xvfb opens a ptfs
mount in thumbnail view, with the MIME package and the thumbnailer of
contrib/desktop/ installed under the test's own XDG directories; the
thumbnails must land in the test's $HOME cache, drawn by `ptfs thumbnail`
from the tensor bytes the mount serves.  And a checkpoint opened as a file
manager opens it: `gio open model.pt` runs the desktop entry
(contrib/desktop/ptfs.desktop, `ptfs open`), which mounts it under
$XDG_RUNTIME_DIR and has pcmanfm show the folder; `ptfs close` unmounts."""
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid

import pytest
import torch

from conftest import PTFS, ROOT, mounted, needs_fuse
from viewutil import png_decode

REQUIRE = os.environ.get("PTFS_REQUIRE_FUSE") == "1"
HAVE = shutil.which("pcmanfm") and shutil.which("xvfb-run") and shutil.which("update-mime-database")


def desktop_env(tmp, thumbnail_max=0):
    home = os.path.join(tmp, "home")
    share = os.path.join(tmp, "share")
    for d in ("home/.config/libfm", "home/.config/pcmanfm/default",
              "share/mime/packages", "share/thumbnailers"):
        os.makedirs(os.path.join(tmp, d))
    with open(os.path.join(home, ".config/libfm/libfm.conf"), "w") as f:
        f.write("[config]\nshow_thumbnail=1\nthumbnail_local=1\nthumbnail_max=%d\n"
                % thumbnail_max)
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


def pcmanfm_thumbnails(m, names, env, cache):
    """pcmanfm under Xvfb shows folder @m: {name: thumbnail path} of the
    files @names whose thumbnails landed in @cache within 90 s."""
    want = {hashlib.md5(("file://" + os.path.join(m, n)).encode()).hexdigest() + ".png": n
            for n in names}
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
    return found


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
        found = pcmanfm_thumbnails(m, ("enc.0.weight", "enc.0.bias", "head.weight"), env, cache)
        assert set(found) == {"enc.0.weight", "enc.0.bias", "head.weight"}, found
        time.sleep(0.5)          # the thumbnail is renamed into place whole
        w, h, rows = png_decode(open(found["head.weight"], "rb").read())
        assert w == h and w >= 64
        assert rows[0][0] == (178, 24, 43) and rows[0][w - 1] == (255, 255, 255)


@pytest.mark.skipif(not HAVE and not REQUIRE, reason="pcmanfm or xvfb-run not installed")
@needs_fuse
def test_pcmanfm_thumbnails_past_thumbnail_max(tmp_path):
    """libfm's thumbnail_max (2048 KiB in Debian's libfm.conf) caps only
    the images pcmanfm decodes itself: a 4 MiB tensor file, of a type
    whose name says it (-o suffix: exp_avg.tensor), still goes to the
    thumbnailer."""
    assert HAVE, "PTFS_REQUIRE_FUSE=1: pcmanfm and xvfb-run must be installed (contrib/setup.sh)"
    torch.manual_seed(0)
    ck = str(tmp_path / "opt.pt")
    torch.save({"state": {0: {"exp_avg": torch.randn(1024, 1024), "step": torch.tensor(3.0)}}},
               ck)
    env, cache = desktop_env(str(tmp_path), thumbnail_max=2048)
    with mounted(ck, "-o", "nested,suffix") as m:
        d = os.path.join(m, "state/0")
        assert os.path.getsize(os.path.join(d, "exp_avg.tensor")) == 4 << 20
        found = pcmanfm_thumbnails(d, ("exp_avg.tensor", "step.tensor"), env, cache)
        assert set(found) == {"exp_avg.tensor", "step.tensor"}, found
        time.sleep(0.5)          # the thumbnail is renamed into place whole
        w, h, _ = png_decode(open(found["exp_avg.tensor"], "rb").read())
        assert w == h and w >= 64


HAVE_OPEN = (HAVE and shutil.which("gio") and shutil.which("Xvfb") and shutil.which("xwininfo")
             and shutil.which("update-desktop-database"))


def install_opener(env, tmp):
    """The checkpoint MIME types and the desktop entry in XDG_DATA_HOME, as
    `cmake --install` puts them in share/; pcmanfm the folder handler."""
    data = env["XDG_DATA_HOME"]
    for d in ("mime/packages", "applications"):
        os.makedirs(os.path.join(data, d), exist_ok=True)
    for x in ("ptfs-checkpoint.xml", "ptfs-tensor.xml"):
        shutil.copy(os.path.join(ROOT, "contrib/desktop", x), os.path.join(data, "mime/packages"))
    subprocess.run(["update-mime-database", os.path.join(data, "mime")],
                   check=True, capture_output=True)
    with open(os.path.join(ROOT, "contrib/desktop/ptfs.desktop")) as f:
        entry = f.read().replace("TryExec=ptfs", "TryExec=" + PTFS)
        entry = entry.replace("Exec=ptfs", "Exec=" + PTFS)
    with open(os.path.join(data, "applications/ptfs.desktop"), "w") as f:
        f.write(entry)
    # GLib looks the handlers of a type up in mimeinfo.cache
    subprocess.run(["update-desktop-database", os.path.join(data, "applications")],
                   check=True, capture_output=True)
    with open(os.path.join(env["XDG_CONFIG_HOME"], "mimeapps.list"), "w") as f:
        f.write("[Default Applications]\ninode/directory=pcmanfm.desktop\n")
    run = os.path.join(tmp, "run")
    os.mkdir(run, 0o700)
    env["XDG_RUNTIME_DIR"] = run
    return run


def mount_points():
    """Every mount point, mountinfo's octal escapes (\\040) undone."""
    with open("/proc/self/mountinfo") as f:
        return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
                for line in f]


def mounts_below(run):
    return [m for m in mount_points() if m.startswith(run + "/")]


def marked(mark, comm=None):
    """The processes started with PTFS_TEST_MARK=@mark in their
    environment (those named @comm): what gio, ptfs open and pcmanfm left
    running, and the ptfs daemon."""
    pids = []
    for p in os.listdir("/proc"):
        try:
            with open("/proc/%s/environ" % p, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/comm" % p) as f:
                name = f.read().strip()
        except (OSError, ValueError):
            continue
        if ("PTFS_TEST_MARK=" + mark).encode() in env and comm in (None, name):
            pids.append(int(p))
    return pids


def start_xvfb(env):
    r, w = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x1024x24",
                             "-nolisten", "tcp"], pass_fds=(w,), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    os.close(w)
    num = b""
    while not num.endswith(b"\n"):
        c = os.read(r, 16)
        if not c:
            break
        num += c
    os.close(r)
    assert num.strip().isdigit(), "Xvfb did not start"
    env["DISPLAY"] = ":" + num.decode().strip()
    return xvfb


def wait_for(cond, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.3)
    return cond()


def window_titles(env):
    r = subprocess.run(["xwininfo", "-root", "-tree"], env=env, capture_output=True, text=True)
    return r.stdout


@pytest.mark.skipif(not HAVE_OPEN and not REQUIRE, reason="gio, Xvfb, xwininfo, update-desktop-database or pcmanfm not installed")
@needs_fuse
@pytest.mark.parametrize("opener", ["gio", "pcmanfm"])
def test_gio_open_mounts_and_pcmanfm_shows(tmp_path, opener):
    """@opener opens model.pt: `gio open` (what GNOME Files and most
    launchers do) or `pcmanfm model.pt` (libfm's own launch of a file with
    its default application, as on a double-click)."""
    assert HAVE_OPEN, "PTFS_REQUIRE_FUSE=1: gio, Xvfb, xwininfo, update-desktop-database and pcmanfm must be installed (contrib/setup.sh)"
    torch.manual_seed(0)
    ck = str(tmp_path / "model.pt")
    sd = {"enc.0.weight": torch.randn(64, 32), "enc.0.bias": torch.randn(32),
          "head.weight": torch.eye(16), "weight": torch.eye(16)}
    torch.save(sd, ck)
    env, cache = desktop_env(str(tmp_path))
    run = install_opener(env, str(tmp_path))
    mark = uuid.uuid4().hex
    env["PTFS_TEST_MARK"] = mark
    xvfb = start_xvfb(env)
    try:
        # the file manager's double-click: the default application of the file
        for name, mime in (("model.pt", "pytorch"), ("m.pth", "pytorch"),
                           ("pytorch_model.bin", "pytorch"), ("m.safetensors", "safetensors"),
                           ("m.onnx", "onnx")):
            p = tmp_path / "types" / name
            p.parent.mkdir(exist_ok=True)
            p.write_bytes(b"\0" * 64)
            r = subprocess.run(["gio", "info", "-a", "standard::content-type", str(p)], env=env,
                               capture_output=True, text=True, timeout=60)
            assert "application/x-ptfs-" + mime in r.stdout, (name, r.stdout, r.stderr)
            r = subprocess.run(["gio", "mime", "application/x-ptfs-" + mime], env=env,
                               capture_output=True, text=True, timeout=60)
            assert "ptfs.desktop" in r.stdout, r.stdout + r.stderr
        # to a file, not a pipe: pcmanfm inherits it and keeps it open
        log = open(str(tmp_path / "gio.log"), "w+")
        if opener == "gio":
            r = subprocess.run(["gio", "open", ck], env=env, stdout=log, stderr=log, timeout=60)
            assert r.returncode == 0, log.seek(0) or log.read()
        else:
            subprocess.Popen(["pcmanfm", "--no-desktop", ck], env=env, stdout=log, stderr=log,
                             start_new_session=True)
        mps = wait_for(lambda: mounts_below(run), 60)
        assert len(mps) == 1, mps
        mp = mps[0]
        assert os.path.basename(mp) == "model.pt" and os.path.dirname(os.path.dirname(mp)) == run + "/ptfs"
        # the browsing layout, read-only: module folders, a picture beside
        # every tensor, tensor files named NAME.tensor (their MIME type)
        assert sorted(os.listdir(mp)) == [".ptfs", "enc", "head", "weight.json", "weight.png",
                                          "weight.tensor"]
        assert sorted(os.listdir(os.path.join(mp, "enc/0"))) == [
            "bias.json", "bias.png", "bias.tensor", "weight.json", "weight.png", "weight.tensor"]
        with open(os.path.join(mp, "head/weight.tensor"), "rb") as f:
            assert f.read() == sd["head.weight"].numpy().tobytes()
        with pytest.raises(OSError):
            open(os.path.join(mp, "head/weight.tensor"), "r+b")
        # pcmanfm shows the folder: its window is titled by it, and it
        # thumbnails the tensor files in it
        assert wait_for(lambda: '"model.pt"' in window_titles(env), 60), window_titles(env)
        thumb = hashlib.md5(("file://" + os.path.join(mp, "weight.tensor")).encode()).hexdigest() + ".png"
        found = wait_for(lambda: [d for d in ("normal", "large")
                                  if os.path.exists(os.path.join(cache, d, thumb))], 60)
        assert found, "no thumbnail of the folder's tensor file"
        # a second open finds the mount
        r = subprocess.run([PTFS, "open", "-n", ck], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and r.stdout == mp + "\n", (r.stdout, r.stderr)
        with open(str(tmp_path / "open.out"), "w+") as out:
            r = subprocess.run([PTFS, "open", ck], env=env, stdout=out, stderr=log, timeout=60)
            out.seek(0)
            assert r.returncode == 0 and out.read() == mp + "\n"
        assert mounts_below(run) == [mp]
        # closing unmounts and removes the folder; a second close says so
        fms = marked(mark, "pcmanfm")
        assert fms
        for p in fms:
            os.kill(p, signal.SIGTERM)   # pcmanfm lets go of the folder
        wait_for(lambda: not marked(mark, "pcmanfm"), 20)
        r = subprocess.run([PTFS, "close", ck], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert mounts_below(run) == [] and not os.path.exists(os.path.dirname(mp))
        r = subprocess.run([PTFS, "close", ck], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1 and "not open" in r.stderr, r.stderr
    finally:
        for m in reversed(mounts_below(run)):
            subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True)
        for p in marked(mark):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        xvfb.kill()
        xvfb.wait()


@needs_fuse
def test_open_without_runtime_dir_reuse_and_dead_daemon(tmp_path):
    """`ptfs open -n` (no Xvfb): the folder below the state directory when
    there is no XDG_RUNTIME_DIR, a name with a space, a safetensors file,
    a second open that finds the mount, a mount whose daemon was killed
    made again, and close by folder."""
    from test_safetensors import write_st
    import numpy as np
    ck = str(tmp_path / "my model.safetensors")
    write_st(ck, [("enc.0.weight", "F32", [2, 3], np.arange(6, dtype=np.float32).tobytes())])
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("XDG_RUNTIME_DIR", None)
    mps = []
    try:
        r = subprocess.run([PTFS, "open", "-n", ck], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        mp = r.stdout.rstrip("\n")
        mps.append(mp)
        assert mp.startswith(str(tmp_path / "state/ptfs/open") + "/")
        assert os.path.basename(mp) == "my model.safetensors" and mp in mount_points()
        with open(os.path.join(mp, "enc/0/weight.tensor"), "rb") as f:
            assert f.read() == np.arange(6, dtype=np.float32).tobytes()
        r = subprocess.run([PTFS, "open", "-n", ck], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and r.stdout == mp + "\n", r.stderr
        assert mount_points().count(mp) == 1
        # the daemon dies: the next open mounts again
        pid = int(os.getxattr(mp, "user.ptfs.daemon").split()[0])
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10)
        with pytest.raises(OSError):
            os.listdir(mp)
        r = subprocess.run([PTFS, "open", "-n", ck], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and r.stdout == mp + "\n", r.stderr
        assert "enc" in os.listdir(mp)
        r = subprocess.run([PTFS, "close", mp], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert mp not in mount_points()
    finally:
        for m in mps:
            if m in mount_points():
                subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True)
