# SPDX-License-Identifier: MIT
"""The documentation tells the truth about the sources it names.

- No reference to a tracker's numbered items anywhere a reader of the
  repository looks: a reader cannot see the tracker.
- Comments cite format facts as docs/FORMATS.md, "HEADING", and every such
  heading exists; the outside format reference the repository does not
  ship, and its numbered sections, are cited nowhere.
- Every function the walks of docs/ARCHITECTURE.md name (the sections
  "How a ...": a FUSE read, a FUSE write, a remote checkpoint) is defined
  in core/ or fs/.

Plain file checks: no build, no mount, no torch.
"""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Findings allowed for a while, as (path, text found): empty, and a test
# below fails on an entry whose finding is gone, so it cannot rot.
ALLOWED = set()

SCANNED = ["core", "fs", "tests", "contrib", "docs", "README.md",
           "CMakeLists.txt"]
TEXT_EXT = {".c", ".h", ".py", ".sh", ".md", ".txt", ".cmake", ".1",
            ".json", ".in", ".xml", ".desktop", ".thumbnailer", ""}

# a tracker's item numbers in any of the usual spellings: singular or
# plural, capitalised or not, with or without '#' (the pattern is spelt
# in two pieces so that this file does not match itself)
TRACKER = re.compile(r"\b[Ii]ss" r"ues?\s+#?\d+")
OLD_REF = re.compile(r"(?<![\w/])FORMAT\.md")
# §N or §N.M; the ZIP specification's sections (APPNOTE §4.3.16) have three
# levels and are fine
OLD_SECTION = re.compile(r"§\d+(?:\.\d+)?(?!\.?\d)")
CITATION = re.compile(r'docs/FORMATS\.md,\s+"([^"]+)"')
# a line break inside a comment or docstring, with its continuation marker
CONTINUATION = re.compile(r"[ \t]*\n[ \t]*(?:\*(?!/)|#|//)?[ \t]*")


def sources():
    """(relative path, text) of every text file under SCANNED."""
    for top in SCANNED:
        path = os.path.join(ROOT, top)
        if os.path.isfile(path):
            names = [path]
        else:
            names = []
            for d, subdirs, files in os.walk(path):
                subdirs[:] = [s for s in subdirs
                              if not s.startswith((".", "build"))
                              and s != "__pycache__"]
                names += [os.path.join(d, f) for f in files]
        for name in sorted(names):
            # this file spells out what it looks for
            if os.path.splitext(name)[1] not in TEXT_EXT or \
                    os.path.samefile(name, __file__):
                continue
            with open(name, "rb") as f:
                data = f.read()
            if b"\0" in data:
                continue
            yield (os.path.relpath(name, ROOT),
                   data.decode("utf-8", errors="replace"))


def findings(pattern, text):
    """(line number, matched text) of each match of @pattern in @text."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(0))
            for m in pattern.finditer(text)]


def report(found):
    return "\n".join("%s:%d: %s" % f for f in found)


def test_allowed_findings_still_exist():
    """An entry of ALLOWED whose finding is gone is removed with it."""
    texts = dict(sources())
    gone = [(path, hit) for path, hit in sorted(ALLOWED)
            if hit not in texts.get(path, "")]
    assert not gone, "remove from ALLOWED (fixed): %s" % gone


def test_no_tracker_issue_numbers():
    found = [(path, line, hit)
             for path, text in sources()
             for line, hit in findings(TRACKER, text)
             if (path, hit) not in ALLOWED]
    assert not found, "tracker issue numbers a reader cannot look up " \
        "(say what it is about instead):\n" + report(found)


def test_no_citation_of_the_unshipped_format_reference():
    found = [(path, line, hit)
             for path, text in sources()
             for pattern in (OLD_REF, OLD_SECTION)
             for line, hit in findings(pattern, text)
             if (path, hit) not in ALLOWED]
    assert not found, "cite docs/FORMATS.md, \"HEADING\" instead:\n" + \
        report(found)


def formats_headings():
    with open(os.path.join(ROOT, "docs", "FORMATS.md"),
              encoding="utf-8") as f:
        return {line.lstrip("#").strip() for line in f
                if line.startswith("#")}


def test_cited_formats_headings_exist():
    headings = formats_headings()
    cited = 0
    found = []
    for path, text in sources():
        # a citation may be wrapped over two comment lines
        joined = CONTINUATION.sub(" ", text)
        for m in CITATION.finditer(joined):
            cited += 1
            heading = " ".join(m.group(1).split())
            if heading not in headings and heading != "HEADING":
                found.append((path, heading))
    assert cited >= 20, "citations of docs/FORMATS.md went missing"
    assert not found, "docs/FORMATS.md has no such heading:\n" + \
        "\n".join("%s: \"%s\"" % f for f in found)


def walks():
    """The text of docs/ARCHITECTURE.md's sections "## How a ..."."""
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"),
              encoding="utf-8") as f:
        doc = f.read()
    return re.findall(r"^## (How a .*?)(?=^## |\Z)", doc, re.M | re.S)


def defined_functions():
    """Names defined or declared at the start of a line in core/ and fs/
    (a function or a table: NAME( or NAME[)."""
    names = set()
    head = re.compile(r"^[A-Za-z_][\w \t*]*?\b([a-z_][a-z0-9_]*)\s*[(\[]",
                      re.M)
    for path, text in sources():
        if path.startswith(("core/", "fs/")) and path.endswith((".c", ".h")):
            names.update(head.findall(text))
    return names


def test_architecture_walks_name_real_functions():
    sections = walks()
    titles = [s.splitlines()[0] for s in sections]
    assert len(sections) >= 3, "walks missing: only %s" % titles
    defined = defined_functions()
    cited, found = set(), []
    for section in sections:
        for name in re.findall(r"`([a-z_][a-z0-9_]*_[a-z0-9_]*)(?:\(\))?`",
                               section):
            cited.add(name)
            if name not in defined:
                found.append("%s (in \"%s\")"
                             % (name, section.splitlines()[0]))
    assert len(cited) >= 20, "the walks name few functions: %s" % cited
    assert not found, "docs/ARCHITECTURE.md names functions that do not " \
        "exist:\n" + "\n".join(found)
