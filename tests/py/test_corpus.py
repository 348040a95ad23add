# SPDX-License-Identifier: MIT
"""The fixture corpus (../shared/fixtures/real, never part of the repo).

Without it every test marked fixture_corpus is left out of the run and this
one test reports "skipped: no fixture corpus"; PTFS_REQUIRE_FIXTURES=1 (CI)
turns that into a failure.
"""
import os

import pytest

from conftest import FIXTURES, HAVE_CORPUS, fixture_corpus, fixture_rows


@fixture_corpus
def test_corpus_present():
    if not HAVE_CORPUS:
        pytest.skip("no fixture corpus at %s" % FIXTURES)
    rows = fixture_rows()
    assert len(rows) > 200, len(rows)
    missing = [r["local_name"] for r in rows
               if not os.path.exists(os.path.join(FIXTURES, r["local_name"]))]
    assert not missing, missing[:5]
