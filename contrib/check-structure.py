#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Structural checks CI runs over a build tree and the sources.

    contrib/check-structure.py BUILD_DIR [--max-lines N]

1. Cycles between source files.  Every object file of the ptfs_core library
   and the ptfs executable is read with nm: a file that uses (undefined
   symbol) what another defines depends on it.  Any strongly connected
   component of more than one file is a cycle; two files that call each
   other are the smallest one.  The layering rule of docs/ARCHITECTURE.md
   (no file calls a file of a higher layer) follows from this plus the
   folder order, which is checked too: a file in a lower layer folder may
   not depend on one in a higher folder.
2. Function length: no function definition in core/ or fs/ is longer than
   --max-lines lines (default 120), counted from the line that opens its
   body to the closing brace, in the style the project uses (the opening
   brace of a function on a line of its own, the closing one in column 0).

Prints one line per finding and a summary; exits 1 when anything is found.
"""
import os
import re
import subprocess
import sys

# Lowest first.  A file may depend on files of its own or a lower layer.
LAYERS = ["core/base", "core/io", "core/container", "core/decode",
          "core/fmt", "core/ckpt", "core/export", "core/view",
          "core/remote", "fs"]
TARGETS = ("ptfs_core.dir", "ptfs_remote.dir", "ptfs.dir")


def objects(build):
    """Map source path (relative to the tree) -> object file."""
    out = {}
    for root, _dirs, files in os.walk(os.path.join(build, "CMakeFiles")):
        parts = os.path.relpath(root, os.path.join(build, "CMakeFiles"))
        top = parts.split(os.sep)[0]
        if top not in TARGETS:
            continue
        for f in files:
            if f.endswith(".c.o"):
                rel = os.path.relpath(os.path.join(root, f),
                                      os.path.join(build, "CMakeFiles", top))
                out[rel[:-2]] = os.path.join(root, f)
    return out


def symbols(obj):
    res = subprocess.run(["nm", "--format=posix", obj], capture_output=True,
                         text=True, check=True)
    defined, undefined = set(), set()
    for line in res.stdout.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRCGSVW":  # global definitions only
            defined.add(name)
    return defined, undefined


def sccs(graph):
    """Tarjan's algorithm, iterative."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def layer_of(path):
    best = None
    for i, l in enumerate(LAYERS):
        if path.startswith(l + "/"):
            best = i
    return best


def check_cycles(build):
    objs = objects(build)
    if not objs:
        print(f"check-structure: no object files under {build}/CMakeFiles")
        return 1
    defs, undefs = {}, {}
    for src, obj in objs.items():
        defs[src], undefs[src] = symbols(obj)
    owner = {}
    for src, d in defs.items():
        for s in d:
            owner.setdefault(s, src)
    graph = {src: set() for src in objs}
    for src, u in undefs.items():
        for s in u:
            o = owner.get(s)
            if o and o != src:
                graph[src].add(o)
    bad = 0
    for comp in sccs(graph):
        if len(comp) > 1:
            bad += 1
            print("cycle: " + " <-> ".join(comp))
    upward = 0
    for src, deps in graph.items():
        ls = layer_of(src)
        for d in sorted(deps):
            ld = layer_of(d)
            if ls is not None and ld is not None and ld > ls:
                upward += 1
                print(f"upward call: {src} -> {d}")
    print(f"files: {len(objs)}; cycles: {bad}; upward calls: {upward}")
    return 1 if bad or upward else 0


FUNC_START = re.compile(r"^[A-Za-z_][^;]*\)\s*$")


def check_lengths(root, limit):
    bad = 0
    for top in ("core", "fs"):
        for d, _dirs, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(".c"):
                    continue
                path = os.path.join(d, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    lines = fh.read().split("\n")
                i = 0
                while i < len(lines):
                    if lines[i] == "{" and i > 0:
                        j = i - 1
                        while j > 0 and not FUNC_START.match(lines[j]) \
                                and lines[j] and lines[j][0] in " \t":
                            j -= 1
                        head = lines[j]
                        k = i + 1
                        while k < len(lines) and lines[k] != "}":
                            k += 1
                        n = k - i + 1
                        if n > limit and "(" in head:
                            name = head.split("(")[0].split()[-1].lstrip("*")
                            rel = os.path.relpath(path, root)
                            print(f"long function: {rel}:{j + 1} {name}: "
                                  f"{n} lines (limit {limit})")
                            bad += 1
                        i = k
                    i += 1
    print(f"functions over {limit} lines: {bad}")
    return 1 if bad else 0


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    build = argv[0]
    limit = 120
    if "--max-lines" in argv:
        limit = int(argv[argv.index("--max-lines") + 1])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rc = check_cycles(build)
    rc |= check_lengths(root, limit)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
