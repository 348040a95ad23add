#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Structural checks CI runs over a build tree and the sources.

    contrib/check-structure.py BUILD_DIR [--max-lines N] [--root DIR]

1. Layers.  Every object file of the ptfs_core library, ptfs_remote and the
   ptfs executable is read with nm: a file that uses (undefined symbol) what
   another defines depends on it.  A strongly connected component of more
   than one file is a cycle; a file that depends on a file of a higher
   layer (core/LAYERS, lowest first) is an upward call; an object or source
   file (.c, .h) whose folder is in no layer is an error, never skipped.
   An #include of a header of a higher layer is an error too.
2. Calls through function pointers, which nm cannot see.  A struct member
   of function-pointer type (written out, or a typedef of one) in core/ or
   fs/ is a slot.  A function put into a slot -- by a designated or
   positional initializer, an assignment, or as the argument of a function
   whose parameter has the slot's typedef (a setter that stores it) -- is
   called by every file that calls through the slot (x->slot(...),
   f(...)->slot(...)).  The receiver's struct is taken from declarations
   when they say it, else every struct with such a slot that the calling
   file sees through its includes.  A call from a lower layer into a
   higher one this way must be listed in POINTER_EDGES, by slot and the
   file defining the function, with the reason; an entry that matches
   nothing is an error, so the list stays true, and so is an initializer
   that puts a function where this reading cannot tell the member.  Not
   seen: a slot copied into a local variable before the call, and a
   function pointer argument called before the call returns (a callback
   like qsort's, which is no stored edge).
3. Function length: no function in core/ or fs/, static inline functions
   of headers included, has a body longer than --max-lines lines (default
   120), counted from the line of its opening brace to the closing one.
   Where functions start and end comes from universal-ctags (end: field),
   so no brace style escapes.

--root DIR reads the sources from DIR instead of this script's tree (the
checker's own tests, tests/structure/).  Prints one line per finding and a
summary; exits 1 when anything is found.
"""
import os
import re
import subprocess
import sys


SCRIPT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_layers = []    # [(folder, layer index)] of the tree being checked


def read_layers(root):
    """core/LAYERS of @root (else of this script's tree): one layer a line,
    lowest first, its name then its folders; '#' starts a comment.
    Returns [(folder, layer index)]: a file may depend on files of its own
    layer or a lower one."""
    path = os.path.join(root, "core", "LAYERS")
    if not os.path.exists(path):
        path = os.path.join(SCRIPT_ROOT, "core", "LAYERS")
    out, index = [], 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            words = line.split("#", 1)[0].split()
            if words:
                out += [(folder.rstrip("/"), index) for folder in words[1:]]
                index += 1
    return out


def layers():
    """The layer folders of the tree being checked, as (folder, index)."""
    if not _layers:
        _layers.extend(read_layers(SCRIPT_ROOT))
    return _layers


# Calls from a lower layer up into a higher one through a pointer table or
# a stored callback, allowed by name: (struct.member, or struct.* for a
# whole table; the file, or folder/, defining the function called) -> why.
POINTER_EDGES = {
    ("pt_source_ops.*", "fs/overlay.c"):
        "the mount's uncommitted writes are a source layered over the "
        "checkpoint's (pt_ckpt_set_layer): one READ path for every tensor",
    ("pt_vm.reduce", "core/ckpt/torch.c"):
        "the lean load of data.pkl hands each REDUCE to the checkpoint's "
        "classifier of torch values as it is decoded",
    ("pt_source_ops.*", "core/remote/source.c"):
        "a remote object is one more pt_source: io reads it through the "
        "same vtable as a local file",
    ("pt_ckpt.progress", "fs/progress.c"):
        "the progress bar of the command line, fed by the checkpoint",
    ("pt_commit.read", "fs/"):
        "a commit's new bytes come from its caller: a file named on the "
        "command line, the daemon's uncommitted writes",
    ("pt_zp_change.read", "core/fmt/zip.c"):
        "an in-place ZIP patch reads the new bytes from the commit",
    ("pt_zw_change.read", "core/fmt/"):
        "a rewritten ZIP reads the new bytes from the commit, or from the "
        "pickle and the new tensors a restructure writes",
    ("pt_cancel.fn", "fs/mount.c"):
        "long core loops ask whether FUSE interrupted the request",
    ("pt_preview_src.read", "fs/view.c"):
        "previews of a tensor read its bytes through the caller",
    ("pt_remote_opts.log", "fs/remote.c"):
        "the remote engine's log lines go to the daemon's log",
    ("pt_vfile.*", "core/export/"):
        "the tree serves /.ptfs/export/ through each exporter's generated "
        "form (pt_exporters[])",
    ("pt_vfile.*", "fs/view_mount.c"):
        "the tree serves the stat view's generated files through it",
    ("pt_tree.pic_fn", "fs/view_mount.c"):
        "NAME.png previews are drawn by the front end that asked for them",
    ("pt_tree.pic_size_fn", "fs/view_mount.c"):
        "and sized by it, from the tensor's shape",
}

TARGETS = ("ptfs_core.dir", "ptfs_remote.dir", "ptfs.dir")
TOPS = ("core", "fs")


def layer_of(path):
    """Index in layers() of the folder holding @path, or None."""
    best = None
    for folder, i in layers():
        if path.startswith(folder + "/"):
            best = i
    return best


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


def check_layers(build, root):
    # an object whose source is gone was left by an earlier build of a
    # build directory reused across a move of files: not part of this one
    objs = {src: obj for src, obj in objects(build).items()
            if os.path.exists(os.path.join(root, src))}
    if not objs:
        print(f"check-structure: no object files under {build}/CMakeFiles")
        return 1
    unknown = 0
    # the objects, and the sources of this tree (headers, files this build
    # left out)
    for src in sorted(set(objs) | set(sources(root, (".c", ".h")))):
        if layer_of(src) is None:
            unknown += 1
            print(f"unknown folder: {src} is in no layer (core/LAYERS)")
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
    for src, deps in sorted(graph.items()):
        ls = layer_of(src)
        for d in sorted(deps):
            ld = layer_of(d)
            if ls is not None and ld is not None and ld > ls:
                upward += 1
                print(f"upward call: {src} -> {d}")
    print(f"files: {len(objs)}; cycles: {bad}; upward calls: {upward}; "
          f"in no layer: {unknown}")
    return 1 if bad or upward or unknown else 0


def check_includes(root):
    """No file includes a header of a higher layer: a lower layer that
    sees a higher one's types is one edit away from calling it."""
    files = sources(root, (".c", ".h"))
    fileset = set(files)
    upward = 0
    for f in files:
        lf = layer_of(f)
        for inc in INCLUDE.findall(read(root, f)):
            # resolved as the compiler would: beside the file, then the
            # include path (core/, fs/)
            for d in (os.path.dirname(f), "core", "fs"):
                target = os.path.normpath(os.path.join(d, inc))
                if target in fileset:
                    break
            else:
                continue
            lt = layer_of(target)
            if lf is not None and lt is not None and lt > lf:
                upward += 1
                print(f"upward include: {f} includes {target}")
    print(f"includes of a higher layer's header: {upward}")
    return 1 if upward else 0


# ---- calls through function pointers --------------------------------------

def sources(root, exts):
    """Paths (relative to @root) of the files under core/ and fs/ ending in
    one of @exts, sorted."""
    out = []
    for top in TOPS:
        for d, _dirs, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith(exts):
                    out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def strip_c(text):
    """@text with comments, string and character literals blanked (line
    breaks kept, so offsets and line numbers still hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(text, i, open_="{", close="}"):
    """Index just past the bracket that closes the one at @i."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def split_top(text, sep):
    """@text split at @sep outside brackets."""
    parts, depth, start = [], 0, 0
    for j, c in enumerate(text):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:j])
            start = j + 1
    parts.append(text[start:])
    return parts


FP_TYPEDEF = re.compile(r"\btypedef\b[^;]*?\(\s*\*\s*(\w+)\s*\)\s*\(")
STRUCT_DEF = re.compile(r"\bstruct\s+(\w+)\s*\{")
FP_MEMBER = re.compile(r"\(\s*\*\s*(\w+)\s*\)\s*\(")
PLAIN_MEMBER = re.compile(r"^\s*(?:const\s+)?(?:struct\s+)?(\w+)\s+"
                          r"(?:const\s+)?(\**)\s*(\w+)\s*(?:\[[^]]*\])?\s*$")
STRUCT_VAR = re.compile(r"\bstruct\s+(\w+)\s*(?:const\s+)?\**\s*"
                        r"(?:const\s+)?(\w+)\s*[;,)=\[]")
PROTO = re.compile(r"\b(\w+)\s*\(([^;{}()]*(?:\([^;{}]*\)[^;{}()]*)*)\)\s*;")


def member_names(decl):
    """The names one member declaration declares, in order ("int a, b"
    declares two; "int (*f)(void)" one; a nested struct or union counts
    as one unnamed member)."""
    fp = FP_MEMBER.search(decl)
    if fp:
        return [fp.group(1)]
    if "{" in decl:
        return [None]
    out = []
    for piece in split_top(decl, ","):
        w = re.findall(r"\w+", re.sub(r"\[[^]]*\]|:\s*\w+\s*$", "", piece))
        if w:
            out.append(w[-1])
    return out


class Slots:
    """The function-pointer members (slots) of the structs of core/ and
    fs/.  A struct defined in a .c file is private to it: its slots are
    named "struct@file" and only that file reaches them by member (others
    fill them through a setter whose parameter has the slot's typedef)."""

    def __init__(self, root, files):
        self.slots = {}          # (struct, member) -> typedef name or None
        self.by_member = {}      # member -> {struct}
        self.fields = {}         # member name -> {struct it points to}
        self.cb_params = {}      # function -> [(argument index, typedef)]
        self.structs = set()     # every struct defined
        self.private = {}        # .c file -> {its own struct names}
        self.order = {}          # struct -> its members' names, in order
        self.returns = {}        # function -> {struct it returns a
                                 # pointer to} (declared in a header)
        self.home = {}           # struct -> the header defining it
        self.includes = {}       # file -> the files it includes
        self._seen = {}
        fileset = set(files)
        for f in files:
            self.includes[f] = [
                c for inc in INCLUDE.findall(read(root, f))
                for c in (os.path.normpath(os.path.join(d, inc)) for d in
                          ("core", "fs", os.path.dirname(f), "."))
                if c in fileset]
        texts = {f: strip_c(read(root, f)) for f in files}
        fp_types = set()
        for f, t in texts.items():
            if f.endswith(".h"):
                fp_types.update(FP_TYPEDEF.findall(t))
        self.fp_types = fp_types
        for f, t in texts.items():
            for m in STRUCT_DEF.finditer(t):
                name = m.group(1)
                if f.endswith(".c"):
                    self.private.setdefault(f, set()).add(name)
                    name = f"{name}@{f}"
                self.structs.add(name)
                self.home.setdefault(name, f)
                body = t[m.end():matching(t, m.end() - 1) - 1]
                self.order[name] = []
                for decl in split_top(body, ";"):
                    self.member(name, decl)
                    self.order[name] += member_names(decl)
            if not f.endswith(".h"):
                continue
            for m in RETURNS_STRUCT.finditer(t):
                self.returns.setdefault(m.group(2), set()).add(m.group(1))
            for m in PROTO.finditer(t):
                for i, par in enumerate(split_top(m.group(2), ",")):
                    w = [x for x in re.findall(r"\w+", par) if x != "const"]
                    if w and w[0] in fp_types:
                        self.cb_params.setdefault(m.group(1), []).append(
                            (i, w[0]))

    def member(self, struct, decl):
        fp = FP_MEMBER.search(decl)
        if fp and "(" not in decl[:fp.start()].replace("__attribute__", ""):
            self.add(struct, fp.group(1), None)
            return
        pm = PLAIN_MEMBER.match(decl.replace("\n", " "))
        if not pm:
            return
        ty, stars, name = pm.groups()
        if ty in self.fp_types and not stars:
            self.add(struct, name, ty)
        elif "struct" in decl.split(ty)[0]:
            self.fields.setdefault(name, set()).add(ty)

    def add(self, struct, member, typedef):
        self.slots[(struct, member)] = typedef
        self.by_member.setdefault(member, set()).add(struct)

    def name(self, struct, path):
        """The slot name of `struct @struct` as written in @path."""
        if struct in self.private.get(path, ()):
            return f"{struct}@{path}"
        return struct

    def has_slots(self, struct):
        return any(s == struct for s, _m in self.slots)

    def visible(self, path):
        """@path and every file it includes, directly or not."""
        if path not in self._seen:
            seen, todo = {path}, [path]
            while todo:
                for inc in self.includes.get(todo.pop(), ()):
                    if inc not in seen:
                        seen.add(inc)
                        todo.append(inc)
            self._seen[path] = seen
        return self._seen[path]

    def resolve(self, member, receiver, local, path):
        """The structs whose slot @member an access @receiver->@member in
        @path may be: those of @receiver's declared type when it is known
        (none when that struct has no such slot), else every struct with
        such a slot whose definition @path sees (its own, or one of the
        headers it includes)."""
        seen = self.visible(path)
        cands = {s for s in self.by_member.get(member, ())
                 if self.home.get(s) in seen}
        types = {self.name(t, path) for t in
                 local.get(receiver, set()) | self.fields.get(receiver, set())}
        if types & self.structs:
            return cands & types
        return cands


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8",
              errors="replace") as fh:
        return fh.read()


def enclosing_struct(text, pos):
    """The struct type of the initializer around @pos: `struct T x = {`,
    `(struct T){`, or None."""
    depth = 0
    for j in range(pos - 1, -1, -1):
        c = text[j]
        if c == "}":
            depth += 1
        elif c == "{":
            if depth:
                depth -= 1
                continue
            before = text[max(0, j - 200):j]
            m = re.search(r"struct\s+(\w+)[^;{}()]*=\s*$", before) or \
                re.search(r"\(\s*(?:const\s+)?struct\s+(\w+)\s*\)\s*$", before)
            if m:
                return m.group(1)
            if not re.search(r"[=,{]\s*$", before):
                return None     # a block, not an initializer
        elif c == ";" and depth == 0:
            return None
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
RETURNS_STRUCT = re.compile(r"\bstruct\s+(\w+)\s*\*+\s*(\w+)\s*\(")


def callee(text, close):
    """The name of the function whose call's ')' is at @close, or ""."""
    depth = 0
    for j in range(close, -1, -1):
        if text[j] == ")":
            depth += 1
        elif text[j] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"(\w+)\s*$", text[:j])
                return m.group(1) if m else ""
    return ""


INDEX = r"(?:\s*\[[^]]*\])?"
CALL_VIA = re.compile(r"(\w+|\))" + INDEX + r"\s*(?:->|\.)\s*(\w+)\s*\(")
SET_VIA = re.compile(r"(\w+)" + INDEX +
                     r"\s*(?:->|\.)\s*(\w+)\s*=\s*&?\s*(\w+)\s*;")
INIT = re.compile(r"[{,]\s*\.\s*(\w+)\s*=\s*&?\s*(\w+)\s*(?=[,}])")
CALL = re.compile(r"\b(\w+)\s*\(")
INIT_START = re.compile(r"\bstruct\s+(\w+)[^;{}()]*=\s*\{|"
                        r"\(\s*(?:const\s+)?struct\s+(\w+)\s*\)\s*\{")


def pointer_uses(path, text, slots, functions):
    """(calls, provides, unread): the slots @path calls through,
    {(struct, member)}; those it fills with functions, {(struct, member,
    function)}, by designated or positional initializers, assignments and
    setters; and functions put into a struct with slots where this
    reading cannot tell which member takes them, {(struct, function)}."""
    local = {}
    for m in STRUCT_VAR.finditer(text):
        local.setdefault(m.group(2), set()).add(m.group(1))
    for m in RETURNS_STRUCT.finditer(text):
        local.setdefault(m.group(2) + "()", set()).add(m.group(1))
    for name, types in slots.returns.items():
        local.setdefault(name + "()", set()).update(types)
    calls, provides, positional = set(), set(), set()
    for m in CALL_VIA.finditer(text):
        receiver = m.group(1)
        if receiver == ")":
            # f(...)->member(...): the type f returns
            receiver = callee(text, m.start(1)) + "()"
        for st in slots.resolve(m.group(2), receiver, local, path):
            calls.add((st, m.group(2)))
    for m in SET_VIA.finditer(text):
        if m.group(3) in functions:
            for st in slots.resolve(m.group(2), m.group(1), local, path):
                provides.add((st, m.group(2), m.group(3)))
    for m in INIT.finditer(text):
        if m.group(2) not in functions:
            continue
        st = enclosing_struct(text, m.start() + 1)
        st = slots.name(st, path) if st else None
        if st is not None and (st, m.group(1)) in slots.slots:
            provides.add((st, m.group(1), m.group(2)))
        elif st is None:
            for s in slots.resolve(m.group(1), "", {}, path):
                provides.add((s, m.group(1), m.group(2)))
    for m in INIT_START.finditer(text):
        # { a, f, g }: the i-th item fills the i-th member
        st = slots.name(m.group(1) or m.group(2), path)
        if not slots.has_slots(st):
            continue
        body = text[m.end():matching(text, m.end() - 1) - 1]
        items = [x.strip() for x in split_top(body, ",")]
        order = slots.order.get(st, [])
        for i, item in enumerate(items):
            fn = item.lstrip("&").strip()
            if fn not in functions:
                continue
            if i >= len(order) or any(x.startswith(".") for x in items):
                positional.add((st, fn))
            elif (st, order[i]) in slots.slots:
                provides.add((st, order[i], fn))
    for m in CALL.finditer(text):
        params = slots.cb_params.get(m.group(1))
        if not params:
            continue
        end = matching(text, m.end() - 1, "(", ")") - 1
        args = split_top(text[m.end():end], ",")
        for i, ty in params:
            fn = args[i].strip().lstrip("&").strip() if i < len(args) else ""
            if fn in functions:
                for key, t in slots.slots.items():
                    if t == ty:
                        provides.add(key + (fn,))
    return calls, provides, positional


def allowed_edge(struct, member, provider):
    for (slot, where), _why in POINTER_EDGES.items():
        if slot in (f"{struct}.{member}", f"{struct}.*") and (
                provider == where or
                (where.endswith("/") and provider.startswith(where))):
            return slot, where
    return None


def check_pointers(root, defined):
    """@defined: function name -> the files defining it."""
    files = sources(root, (".c", ".h"))
    slots = Slots(root, files)
    callers, providers = {}, {}
    unseen = 0
    for f in files:
        calls, provides, positional = pointer_uses(
            f, strip_c(read(root, f)), slots, defined)
        for st, fn in sorted(positional):
            unseen += 1
            print(f"unreadable initializer: {f}: which member of struct "
                  f"{st.split('@')[0]} takes {fn}? (write .member = {fn})")
        for k in calls:
            callers.setdefault(k, set()).add(f)
        for st, member, fn in provides:
            # the function runs where it is defined: a static one in
            # this file, a global one in the file defining it
            where = {f} if f in defined[fn] else defined[fn]
            providers.setdefault((st, member), set()).update(where)
    bad, allowed, used = 0, 0, set()
    for key in sorted(providers):
        for p in sorted(providers[key]):
            lp = layer_of(p)
            for c in sorted(callers.get(key, ())):
                lc = layer_of(c)
                if lp is None or lc is None or lc >= lp:
                    continue
                entry = allowed_edge(key[0].split("@")[0], key[1], p)
                if entry:
                    allowed += 1
                    used.add(entry)
                    continue
                bad += 1
                print(f"pointer call up: {c} -> {p} through "
                      f"{key[0].split('@')[0]}.{key[1]} (not in POINTER_EDGES)")
    stale = 0
    for slot, where in sorted(set(POINTER_EDGES) - used):
        stale += 1
        print(f"stale POINTER_EDGES entry: {slot} into {where} (no such "
              f"call up any more)")
    print(f"function-pointer slots: {len(slots.slots)}; calls up through "
          f"them: {allowed} allowed, {bad} not; stale entries: {stale}; "
          f"unreadable initializers: {unseen}")
    return 1 if bad or stale or unseen else 0


# ---- function length -------------------------------------------------------

def ctags(root, files):
    """[(file, function, first line, last line)] of the function
    definitions in @files (universal-ctags: kind f, with end lines)."""
    if not files:
        return []
    try:
        res = subprocess.run(
            ["ctags", "-f", "-", "--sort=no", "--language-force=C",
             "--kinds-C=f", "--fields=+ne", *files],
            capture_output=True, text=True, check=True, cwd=root)
    except FileNotFoundError:
        sys.exit("check-structure: universal-ctags is needed "
                 "(Debian: universal-ctags; contrib/setup.sh)")
    out = []
    for line in res.stdout.splitlines():
        f = line.split("\t")
        ext = dict(x.split(":", 1) for x in f[3:] if ":" in x)
        if "line" in ext and "end" in ext:
            out.append((f[1], f[0], int(ext["line"]), int(ext["end"])))
    return out


def check_lengths(root, funcs, limit):
    bad = 0
    texts = {}
    for path, name, first, last in funcs:
        if path not in texts:
            texts[path] = read(root, path).split("\n")
        lines = texts[path]
        brace = first
        while brace <= last and "{" not in strip_c(lines[brace - 1]):
            brace += 1
        n = last - brace + 1
        if n > limit:
            print(f"long function: {path}:{first} {name}: {n} lines "
                  f"(limit {limit})")
            bad += 1
    print(f"functions: {len(funcs)}; over {limit} lines: {bad}")
    return 1 if bad else 0


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    build = argv[0]
    limit = 120
    if "--max-lines" in argv:
        limit = int(argv[argv.index("--max-lines") + 1])
    root = SCRIPT_ROOT
    if "--root" in argv:
        root = os.path.abspath(argv[argv.index("--root") + 1])
    _layers[:] = read_layers(root)
    funcs = ctags(root, sources(root, (".c", ".h")))
    rc = check_layers(build, root)
    rc |= check_includes(root)
    defined = {}
    for path, name, _first, _last in funcs:
        defined.setdefault(name, set()).add(path)
    rc |= check_pointers(root, defined)
    rc |= check_lengths(root, funcs, limit)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
