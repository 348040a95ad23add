# SPDX-License-Identifier: MIT
"""Tests of contrib/check-structure.py: tiny synthetic source trees, built
with cc into the object layout CMake makes, that the checker must reject
(a call up a layer, an include of a higher layer's header, a cycle, a
folder in no layer, a call up through a function pointer, a long
function whatever its brace style, a long static inline function in a
header) and the ones it must pass.

    /usr/bin/python3 -m pytest tests/structure
"""
import contextlib
import importlib.util
import io
import os
import re
import subprocess
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "contrib", "check-structure.py")


def load():
    spec = importlib.util.spec_from_file_location("check_structure", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tree(tmp_path, files, edges=None, max_lines=None):
    """Write @files ({path: text}) under tmp_path/src, compile each .c into
    tmp_path/build as CMake would, run the checker with the allow-list
    @edges (default: none); return (exit status, output)."""
    src, build = tmp_path / "src", tmp_path / "build"
    for rel, text in files.items():
        p = src / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    for rel in files:
        if rel.endswith(".c"):
            obj = build / "CMakeFiles" / "ptfs_core.dir" / (rel + ".o")
            obj.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cc", "-c", "-I", str(src / "core"), "-o",
                            str(obj), str(src / rel)], check=True)
    mod = load()
    mod.POINTER_EDGES = dict(edges or {})
    argv = [str(build), "--root", str(src)]
    if max_lines:
        argv += ["--max-lines", str(max_lines)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = mod.main(argv)
    return rc, out.getvalue()


BASE = {
    "core/base/a.h": "int a(void);\n",
    "core/base/a.c": '#include "base/a.h"\nint a(void)\n{\n\treturn 1;\n}\n',
}


def test_clean_tree_passes(tmp_path):
    rc, out = tree(tmp_path, dict(BASE, **{
        "core/io/b.c": '#include "base/a.h"\nint b(void)\n{\n\treturn a();\n}\n'}))
    assert rc == 0, out
    assert "upward calls: 0" in out and "in no layer: 0" in out


def test_call_up_a_layer(tmp_path):
    rc, out = tree(tmp_path, {
        "core/base/a.c": "int b(void);\nint a(void)\n{\n\treturn b();\n}\n",
        "core/io/b.c": "int b(void)\n{\n\treturn 2;\n}\n"})
    assert rc == 1
    assert "upward call: core/base/a.c -> core/io/b.c" in out


def test_include_of_a_higher_layer(tmp_path):
    """A header of a higher layer included by a lower one fails, even when
    nothing of it is called."""
    rc, out = tree(tmp_path, dict(BASE, **{
        "core/io/b.h": "struct b { int x; };\n",
        "core/base/c.c": '#include "io/b.h"\nint c(struct b *p)\n{\n\treturn p->x;\n}\n'}))
    assert rc == 1
    assert "upward include: core/base/c.c includes core/io/b.h" in out
    rc, out = tree(tmp_path / "ok", dict(BASE, **{
        "core/io/b.h": '#include "base/a.h"\nstruct b { int x; };\n'}))
    assert rc == 0, out


def test_cycle(tmp_path):
    rc, out = tree(tmp_path, {
        "core/io/x.c": "int y(int);\nint x(int n)\n{\n\treturn n ? y(n - 1) : 0;\n}\n",
        "core/io/y.c": "int x(int);\nint y(int n)\n{\n\treturn n ? x(n - 1) : 1;\n}\n"})
    assert rc == 1
    assert "cycle: core/io/x.c <-> core/io/y.c" in out


def test_object_in_no_layer(tmp_path):
    rc, out = tree(tmp_path, dict(BASE, **{
        "core/zzz/c.c": '#include "base/a.h"\nint c(void)\n{\n\treturn a();\n}\n'}))
    assert rc == 1
    assert "unknown folder: core/zzz/c.c" in out


def test_header_in_no_layer(tmp_path):
    rc, out = tree(tmp_path, dict(BASE, **{"core/zzz/h.h": "int h(void);\n"}))
    assert rc == 1
    assert "unknown folder: core/zzz/h.h" in out


def long_body(n):
    return "".join("\tv += %d;\n" % i for i in range(n))


def test_long_function_brace_on_signature_line(tmp_path):
    text = "int f(int v) {\n" + long_body(130) + "\treturn v;\n}\n"
    rc, out = tree(tmp_path, {"core/base/long.c": text})
    assert rc == 1
    assert "long function: core/base/long.c:1 f: 133 lines" in out


def test_long_function_measured_from_its_brace(tmp_path):
    # 118 statements: 121 lines from brace to brace, one over 120
    text = ("static int\ng(int v)\n{\n" + long_body(118) +
            "\treturn v;\n}\nint h(void)\n{\n\treturn g(1);\n}\n")
    rc, out = tree(tmp_path, {"core/base/g.c": text})
    assert rc == 1
    assert "long function: core/base/g.c:2 g: 121 lines (limit 120)" in out
    rc, out = tree(tmp_path, {"core/base/g.c": text}, max_lines=121)
    assert rc == 0, out


def test_long_static_inline_in_header(tmp_path):
    hdr = ("static inline int big(int v)\n{\n" + long_body(125) +
           "\treturn v;\n}\n")
    rc, out = tree(tmp_path, dict(BASE, **{"core/base/big.h": hdr}))
    assert rc == 1
    assert "long function: core/base/big.h:1 big: 128 lines" in out


TABLE = {
    "core/base/t.h": """\
        struct tbl {
        	const char *name;
        	int (*f)(void);
        };
        int call(const struct tbl *p);
        """,
    "core/base/t.c": """\
        #include "base/t.h"
        int call(const struct tbl *p)
        {
        	return p->f();
        }
        """,
    "core/io/u.c": """\
        #include "base/t.h"
        static int g(void)
        {
        	return 1;
        }
        const struct tbl u_tbl = {
        	.name = "u",
        	.f = g,
        };
        """,
}


def test_pointer_call_up_must_be_listed(tmp_path):
    rc, out = tree(tmp_path, TABLE)
    assert rc == 1
    assert ("pointer call up: core/base/t.c -> core/io/u.c through tbl.f "
            "(not in POINTER_EDGES)") in out


def test_listed_pointer_edge_passes(tmp_path):
    rc, out = tree(tmp_path, TABLE, {("tbl.f", "core/io/u.c"): "a plug-in"})
    assert rc == 0, out
    assert "1 allowed, 0 not" in out
    rc, out = tree(tmp_path, TABLE, {("tbl.*", "core/io/"): "a plug-in"})
    assert rc == 0, out


def test_stale_pointer_edge_fails(tmp_path):
    rc, out = tree(tmp_path, BASE, {("tbl.f", "core/io/u.c"): "gone"})
    assert rc == 1
    assert "stale POINTER_EDGES entry: tbl.f into core/io/u.c" in out


def test_pointer_table_in_own_layer_passes(tmp_path):
    files = dict(TABLE)
    files["core/base/u.c"] = files.pop("core/io/u.c")
    rc, out = tree(tmp_path, files)
    assert rc == 0, out


def test_stored_callback_through_a_setter(tmp_path):
    """A hook handed down by a setter (its parameter of the hook's typedef)
    and called later from the lower layer: a call up, by assignment
    through a member, or by a global function of another file."""
    rc, out = tree(tmp_path, {
        "core/base/o.h": """\
            typedef int (*hook_fn)(void *ctx);
            struct obj {
            	hook_fn hook;
            	void *ctx;
            };
            void obj_set(struct obj *o, hook_fn fn, void *ctx);
            int obj_fire(struct obj *o);
            """,
        "core/base/o.c": """\
            #include "base/o.h"
            void obj_set(struct obj *o, hook_fn fn, void *ctx)
            {
            	o->hook = fn;
            	o->ctx = ctx;
            }
            int obj_fire(struct obj *o)
            {
            	return o->hook(o->ctx);
            }
            """,
        "fs/m.c": """\
            #include "base/o.h"
            int fs_hook(void *ctx);
            int mount_it(struct obj *o)
            {
            	obj_set(o, fs_hook, 0);
            	return obj_fire(o);
            }
            """,
        "fs/hook.c": """\
            int fs_hook(void *ctx)
            {
            	return ctx != 0;
            }
            """})
    assert rc == 1
    assert "pointer call up: core/base/o.c -> fs/hook.c through obj.hook" in out


def test_private_struct_with_same_member_is_not_a_slot(tmp_path):
    """p->f() on a struct private to a .c file is not the header's slot f."""
    files = dict(TABLE)
    files["core/base/t.c"] = """\
        #include "base/t.h"
        struct job {
        	int (*f)(void);
        };
        static int one(void)
        {
        	return 1;
        }
        int call(const struct tbl *unused)
        {
        	struct job *p = &(struct job){ .f = one };

        	(void)unused;
        	return p->f();
        }
        """
    rc, out = tree(tmp_path, files)
    assert rc == 0, out


def test_positional_initializer_is_read(tmp_path):
    """{ "u", g } fills the second member, f: the same call up."""
    files = dict(TABLE)
    files["core/io/u.c"] = re.sub(r'\.name = "u",\s*\.f = g,', '"u", g',
                                  files["core/io/u.c"])
    assert '"u", g' in files["core/io/u.c"]
    rc, out = tree(tmp_path, files)
    assert rc == 1
    assert "pointer call up: core/base/t.c -> core/io/u.c through tbl.f" in out


def test_unreadable_initializer_fails(tmp_path):
    """A function in an initializer that mixes positions and names (or has
    more items than the struct members) cannot be placed: an error."""
    files = dict(TABLE)
    files["core/io/u.c"] = re.sub(r'\.name = "u",\s*\.f = g,',
                                  '.name = "u", g', files["core/io/u.c"])
    assert '.name = "u", g' in files["core/io/u.c"]
    rc, out = tree(tmp_path, files)
    assert rc == 1
    assert "unreadable initializer: core/io/u.c: which member of struct tbl takes g?" in out


def test_call_through_a_returned_pointer(tmp_path):
    """get()->f(): the receiver's type is what get() returns."""
    files = dict(TABLE)
    files["core/base/t.h"] += "const struct tbl *get(void);\n"
    files["core/base/t.c"] = """\
        #include "base/t.h"
        extern const struct tbl u_tbl;
        const struct tbl *get(void)
        {
        	return &u_tbl;
        }
        int call(const struct tbl *p)
        {
        	(void)p;
        	return get()->f();
        }
        """
    rc, out = tree(tmp_path, files)
    assert rc == 1
    assert "pointer call up: core/base/t.c -> core/io/u.c through tbl.f" in out


def test_slot_in_a_header_not_included_is_not_called(tmp_path):
    """(cast)->f() with the receiver's type unknown here: only structs
    whose definition the file sees (its own, its includes) are
    candidates, not tbl of a header it does not include."""
    files = dict(TABLE)
    files["core/base/t.c"] = """\
        #include "base/t.h"
        int call(const struct tbl *p)
        {
        	return p->name != 0;
        }
        """
    files["core/base/w.c"] = """\
        struct job {
        	int (*f)(void);
        };
        int w(void *p);
        int w(void *p)
        {
        	return ((struct job *)p)->f();
        }
        """
    rc, out = tree(tmp_path, files)
    assert rc == 0, out


def test_real_tree_layers_are_one_list():
    """core/LAYERS is the one place the order is written: every folder of
    core/ holding a source file is in it."""
    mod = load()
    root = os.path.join(HERE, "..", "..")
    folders = {os.path.dirname(p) for p in mod.sources(root, (".c",))}
    missing = sorted(f for f in folders if mod.layer_of(f + "/x.c") is None)
    assert not missing, missing
