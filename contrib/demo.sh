#!/usr/bin/env bash
# Quick start: install, build, save a demo checkpoint with torch, mount it
# and show its tree.  The mount is left up at /tmp/ptfs-demo/mnt for you to
# explore (unmount with: ptfs umount /tmp/ptfs-demo/mnt); pass --umount
# to unmount at the end.
#
# PTFS=/usr/bin/ptfs contrib/demo.sh runs the demo with an installed ptfs
# instead of building one (contrib/deb-check.sh does, after installing the
# .deb); PTFS_DEMO_DIR changes /tmp/ptfs-demo.
set -euo pipefail
cd "$(dirname "$0")/.."
# only what the demo needs (contrib/setup.sh --demo --list says what)
if [ -z "${PTFS:-}" ]; then
	contrib/setup.sh --demo
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build build -j "$(nproc)" >/dev/null
	PTFS=build/ptfs
else
	contrib/setup.sh --demo-run
fi
demo=${PTFS_DEMO_DIR:-/tmp/ptfs-demo}
mkdir -p "$demo/mnt"
mountpoint -q "$demo/mnt" && fusermount3 -u "$demo/mnt"
/usr/bin/python3 - "$demo/model.pt" <<'PY'
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
opt = torch.optim.Adam(model.parameters())
model(torch.randn(5, 4)).sum().backward()
opt.step()
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
            "epoch": 3, "lr": 1e-3, "name": "demo"}, sys.argv[1])
PY
"$PTFS" "$demo/model.pt" "$demo/mnt"
# the model first; ptfs's own files in /.ptfs after it, as a summary
echo "\$ ptfs $demo/model.pt $demo/mnt && cd $demo/mnt && find . -path ./.ptfs -prune -o -print"
(cd "$demo/mnt" && find . -path ./.ptfs -prune -o -print | sort)
echo "\$ ls -A .ptfs    # ptfs's own files: raw records, the pickle, tree.json, info.txt, ..."
ls -A "$demo/mnt/.ptfs" | tr '\n' ' '
echo
echo "\$ cat model/0.weight.json"
cat "$demo/mnt/model/0.weight.json"
echo "\$ python3 -c 'numpy.fromfile(\"model/0.weight\", numpy.float32)'"
/usr/bin/python3 -c "import numpy; print(numpy.fromfile('$demo/mnt/model/0.weight', numpy.float32).reshape(3, 4))"
if [ "${1:-}" = "--umount" ]; then
	"$PTFS" umount "$demo/mnt"
else
	echo "mounted at $demo/mnt; unmount with: ptfs umount $demo/mnt"
fi
