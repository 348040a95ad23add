# SPDX-License-Identifier: MIT
"""A throw-away ptfs build for the settings experiments.

fs/mount.c fixes its request size and always asks for splice, and libfuse
3.14 does not parse -o no_splice_write for a low-level daemon that does not
call fuse_apply_conn_info_opts.  To measure what those settings are worth
we copy the sources into the benchmark's temp dir, turn the constants of
ptfs_op_init into environment look-ups, and build that copy:

    PTFS_BENCH_MAX_IO=N           conn->max_write (hence max_pages, the
                                  largest READ) and conn->max_readahead
    PTFS_BENCH_NO_SPLICE_WRITE=1  do not want FUSE_CAP_SPLICE_WRITE
    PTFS_BENCH_NO_SPLICE_MOVE=1   do not want FUSE_CAP_SPLICE_MOVE

The project's own sources are never touched.  If fs/mount.c no longer has
the lines we rewrite, the variant is skipped with a message.
"""
import os
import re
import shutil
import subprocess
import sys

HELPER = r'''
#include <stdlib.h>
static unsigned bench_env_u(const char *name, unsigned dflt)
{
	const char *v = getenv(name);
	return v && *v ? (unsigned)strtoul(v, NULL, 0) : dflt;
}
'''

REWRITES = [
    (r"conn->want \|= FUSE_CAP_SPLICE_WRITE;",
     'if (!getenv("PTFS_BENCH_NO_SPLICE_WRITE")) conn->want |= FUSE_CAP_SPLICE_WRITE;'),
    (r"conn->want \|= FUSE_CAP_SPLICE_MOVE;",
     'if (!getenv("PTFS_BENCH_NO_SPLICE_MOVE")) conn->want |= FUSE_CAP_SPLICE_MOVE;'),
    (r"conn->max_write = io_size\(\);",
     'conn->max_write = bench_env_u("PTFS_BENCH_MAX_IO", io_size());'),
    (r"conn->max_readahead = PTFS_MAX_IO;",
     'conn->max_readahead = bench_env_u("PTFS_BENCH_MAX_IO", PTFS_MAX_IO);'),
]


def _log(msg):
    print(msg, file=sys.stderr)  # stdout carries the binary's path


def build(srcroot, workdir, log=_log):
    """Returns the path of the variant binary, or None (with a log line)."""
    src = os.path.join(workdir, "variant-src")
    bld = os.path.join(workdir, "variant-build")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    for d in ("core", "fs"):
        shutil.copytree(os.path.join(srcroot, d), os.path.join(src, d))
    shutil.copy(os.path.join(srcroot, "CMakeLists.txt"), src)
    mc = os.path.join(src, "fs", "mount.c")
    with open(mc) as f:
        text = f.read()
    for pat, rep in REWRITES:
        text, n = re.subn(pat, rep, text)
        if n != 1:
            log("  settings variant: fs/mount.c no longer has '%s'; skipped" % pat.replace("\\", ""))
            return None
    # the helper goes after the last #include
    last = [m.end() for m in re.finditer(r"^#include .*$", text, re.M)][-1]
    text = text[:last] + "\n" + HELPER + text[last:]
    with open(mc, "w") as f:
        f.write(text)
    try:
        subprocess.run(["cmake", "-S", src, "-B", bld, "-DCMAKE_BUILD_TYPE=Release",
                        "-DBUILD_TESTING=OFF"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", bld, "-j2", "--target", "ptfs"], check=True,
                       stdout=subprocess.DEVNULL)
    except subprocess.CalledProcessError as e:
        log("  settings variant: build failed (%s); skipped" % e)
        return None
    return os.path.join(bld, "ptfs")
