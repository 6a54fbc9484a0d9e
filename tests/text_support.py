"""What the text tests share: a module's own flushed store, and the head of the corpus.

A test module takes the store fixture by assignment (``st = text_support.st``): pytest
finds a fixture by its name among the module's attributes, and every module gets its own
instance (module scope), flushed before its first test and after its last.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from vecserve.store import Store

CORPUS = Path(os.environ.get("VECSERVE_TEST_CORPUS", "/work/shared/data/wiki100m.zip"))


@pytest.fixture(scope="module", name="st")
def st(redis_url):
    """A Store on the test server, empty when the module starts and when it ends."""
    s = Store.from_url(redis_url)
    s.client.flushall()
    yield s
    s.client.flushall()
    s.close()


def corpus_head(n_bytes: int) -> bytes:
    """The first ``n_bytes`` of wiki100m's text (the test skips where there is no corpus)."""
    if not CORPUS.exists():
        pytest.skip(f"no corpus at {CORPUS}")
    with zipfile.ZipFile(CORPUS) as z:
        return z.open(z.namelist()[0]).read(n_bytes)
