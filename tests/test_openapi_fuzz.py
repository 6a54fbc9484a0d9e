"""The OpenAPI document is the contract: Schemathesis (the ecosystem's OpenAPI fuzzer, its
CLI in a subprocess) sends requests generated from ``/openapi.json`` to the real service
under uvicorn and runs every check it has (``--checks all``): no 5xx, every request the
document calls valid is accepted and every one it calls invalid refused, answers match
their declared status codes, content types, headers and schemas, ``405`` answers list
the path's methods in ``Allow``.

Phases: examples, coverage (every keyword's boundary and violation) and fuzzing, a fixed
seed and a bounded number of cases per operation (about 20 s on the 2-core box). One
worker: with two, the coverage phase of Schemathesis 4.32.5 crashes inside the tool now
and then (a race in Hypothesis' lambda-source cache: "AST constructor recursion depth
mismatch"), which is what DESIGN.md saw. What the document cannot say, this
test pins for its own service: a vector's length is the model's dimension (``DIM``,
written into the single query's schema of the document the tool reads: in a batch, a
vector of another length is that query's error, reported in its slot, so there any length
is valid), and ``dims`` of ``/embed`` runs to the model's dimension; the model has word
counts, so ``pooling=sif`` can be asked of it; the transport's limits are set out of the way:
the request body (``max_body_bytes``, answered 413) and the request line (uvicorn's
httptools refuses one over 64 KiB with a plain-text 400 before the app sees it; the tool
sends up to ``max_words`` long words in a GET, so the server here is uvicorn's h11 with a
larger limit).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import httpx
import numpy as np
import pytest

pytest.importorskip("schemathesis")

from tests.api_support import running_app
from vecserve.api import create_app
from vecserve.loader import load_arrays
from vecserve.service.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DIM = 8
SEED = 20261126
MAX_EXAMPLES = 40
TOKENS = ["king", "queen", "man", "woman", "a,b", "", "0", "日本"] + [f"w{i}" for i in range(92)]


@pytest.fixture
def base_url(redis_url, store, tmp_path):
    vectors = np.random.default_rng(0).standard_normal((len(TOKENS), DIM)).astype(np.float32)
    counts = np.arange(len(TOKENS), 0, -1) * 10  # word counts: SIF pooling needs them
    load_arrays(TOKENS, vectors, name="S", store=store, counts=counts, progress=False)
    settings = Settings(
        redis_url=redis_url,
        default_model="S",
        cache_dir=tmp_path / "cache",
        max_body_bytes=64 << 20,
    )
    big = 16 << 20
    with running_app(create_app(settings), http="h11", h11_max_incomplete_event_size=big) as url:
        yield url


def pin_vector_length(node, dim: int) -> None:
    """Every vector of the document (``{"vector": [...]}`` and bare ones) has ``dim``
    numbers: what "a vector of dim numbers" means for this test's model."""
    if isinstance(node, dict):
        about = node.get("description", "")
        if about.startswith("a vector of dim numbers"):
            node["properties"]["vector"].update(minItems=dim, maxItems=dim)
        elif about.startswith("a bare vector of dim numbers"):
            node.update(minItems=dim, maxItems=dim)
        for value in node.values():
            pin_vector_length(value, dim)
    elif isinstance(node, list):
        for value in node:
            pin_vector_length(value, dim)


def pin_embed_dims(doc, dim: int) -> None:
    """``dims`` of both ``/embed`` forms runs to ``dim``: this test's model's dimension."""
    doc["components"]["schemas"]["EmbedRequest"]["properties"]["dims"]["anyOf"][0]["maximum"] = dim
    for param in doc["paths"]["/embed"]["get"]["parameters"]:
        if param["name"] == "dims":
            param["schema"]["anyOf"][0]["maximum"] = dim


def test_the_service_keeps_its_openapi_contract(base_url, tmp_path):
    doc = httpx.get(f"{base_url}/openapi.json").json()
    pin_vector_length(doc["components"]["schemas"]["MostSimilarRequest"], DIM)
    pin_embed_dims(doc, DIM)
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(doc))
    st = shutil.which("schemathesis", path=str(sys.prefix) + "/bin") or "schemathesis"
    argv = [
        st,
        "run",
        str(schema),
        "--url",
        base_url,
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--no-color",
        "--suppress-health-check",
        "all",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=280, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-20_000:]
    assert "No issues found" in out or " passed" in out, out[-5_000:]
