"""``GET /most_similar`` answered by :class:`vecserve.service.fastpath.MostSimilarFastRoute`
exactly as the FastAPI route answers it (same status, headers, body and metrics), ready approximate
queries on the event loop when the service does not coalesce (in the thread pool when it
does), everything else in the thread pool or by FastAPI itself."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from vecserve.api import MostSimilarFastRoute, create_app
from vecserve.loader import load_arrays
from vecserve.service import similar
from vecserve.service.settings import Settings

from .api_support import AppClient, wait_for_ann

N, DIM = 3000, 16
TOKENS = [f"w{i}" for i in range(N - 1)] + ["café"]

QUERIES = [
    "positive=w1&approx=true",
    "positive=w1,w2&negative=w3&topn=5&approx=true",
    "positive=w1&positive=caf%C3%A9&approx=1",
    "positive=caf%C3%A9&topn=0&approx=true",
    "positive=w4&topn=3&approx=TRUE&model=M",
    "positive=w5&topn=3&approx=true&model=NOPE",
    "positive=w5&topn=3&approx=true&model=bad%20name",
    "positive=nope&approx=true",
    "approx=true",
    "positive=w1&topn=-1&approx=true",
    "positive=w1&topn=abc&approx=true",
    "positive=w1&topn=100000&approx=true",
    "positive=w1&topn=3&topn=4&approx=true",
    "positive=w1&approx=true&approx=false",
    "positive=w1&approx=yes",
    "positive=w1&approx=false",
    "positive=w1&topn=4",
    "positive=w1&restrict_vocab=100&approx=true",
    "positive=w1,w2&negative=w3&cosmul=true&approx=true",
    "positive=w1&approx=true&unknown=1",
    "positive=&approx=true",
    "positive=w1,w2,w3,w4,w5,w6,w7,w8,w9&approx=true",
]


@pytest.fixture
def model(store):
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((20, DIM))
    vectors = centres[rng.integers(0, 20, N)] + 0.4 * rng.standard_normal((N, DIM))
    load_arrays(TOKENS, vectors.astype(np.float32), name="M", store=store, progress=False)


def _settings(redis_url, tmp_path, **kw) -> Settings:
    return Settings(
        redis_url=redis_url,
        default_model="M",
        preload=True,
        cache_dir=tmp_path,
        max_words=8,
        max_topn=1000,
        model_ttl=0,
        vector_cache=0,
        **kw,
    )


@pytest.fixture
def apps(redis_url, model, tmp_path):
    """The app as served, and the same app without the fast route (FastAPI only), both
    with the approximate index ready (one build: the second maps the first's file)."""
    settings = _settings(redis_url, tmp_path, ann=True)
    fast, plain = create_app(settings), create_app(settings)
    plain.router.routes = [
        r for r in plain.router.routes if not isinstance(r, MostSimilarFastRoute)
    ]
    assert any(isinstance(r, MostSimilarFastRoute) for r in fast.router.routes)
    with AppClient(fast) as f, AppClient(plain) as p:
        wait_for_ann(f, "M")
        wait_for_ann(p, "M")
        yield f, p


def _comparable(resp) -> tuple:
    headers = {k: v for k, v in resp.headers.items() if k != "date"}
    return resp.status_code, headers, resp.content


@pytest.mark.parametrize("query", QUERIES)
def test_same_answer_as_the_fastapi_route(apps, query):
    fast, plain = apps
    got, want = fast.get(f"/most_similar?{query}"), plain.get(f"/most_similar?{query}")
    assert _comparable(got) == _comparable(want)


def test_the_answers_are_approximate_where_asked(apps):
    fast, _ = apps
    body = fast.get("/most_similar?positive=w1,w2&negative=w3&topn=5&approx=true").json()
    assert body["approximate"] is True and len(body["results"]) == 5
    assert {"w1", "w2", "w3"}.isdisjoint(w for w, _ in body["results"])
    assert fast.get("/most_similar?positive=w1&topn=5").json()["approximate"] is False


def test_same_metrics_as_the_fastapi_route(apps):
    """The counters the queries add (the fixture's polling of /models/M differs)."""

    def counters(client) -> dict[str, float]:
        out = {}
        for line in client.get("/metrics").text.splitlines():
            if line.startswith("#") or re.match(
                r"vecserve_(request_duration_seconds|index_"
                r"build|ann_|uptime|process)",
                line,
            ):
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    deltas = []
    for client in apps:
        before = counters(client)
        for query in QUERIES:
            client.get(f"/most_similar?{query}")
        after = counters(client)
        deltas.append(
            {
                k: v - before.get(k, 0.0)
                for k, v in after.items()
                if v != before.get(k, 0.0) and "/metrics" not in k
            }
        )
    fast, plain = deltas
    assert fast == plain
    assert fast['vecserve_requests_total{endpoint="/most_similar",method="GET",status="200"}'] > 5
    assert fast['vecserve_cache_misses_total{cache="model"}'] > 0  # model_ttl=0: one a query


def _where(monkeypatch) -> list[str]:
    """Where each most_similar answer is computed: "loop" or "pool"."""
    seen, real = [], similar.most_similar

    def spy(*args, **kwargs):
        try:
            asyncio.get_running_loop()
            seen.append("loop")
        except RuntimeError:
            seen.append("pool")
        return real(*args, **kwargs)

    monkeypatch.setattr(similar, "most_similar", spy)
    return seen


@pytest.fixture
def uncoalesced(redis_url, model, tmp_path):
    """The app as served with coalescing off (``VECSERVE_COALESCE=0``), its index ready."""
    with AppClient(create_app(_settings(redis_url, tmp_path, ann=True, coalesce=False))) as c:
        wait_for_ann(c, "M")
        yield c


def test_ready_approximate_queries_coalesce_in_the_pool(apps, monkeypatch):
    # a query may wait for a batch under way: never on the event loop
    fast, _ = apps
    seen = _where(monkeypatch)
    for word in ["w1", "w2"]:
        assert fast.get(f"/most_similar?positive={word}&approx=true").json()["approximate"]
    assert seen == ["pool", "pool"]


def test_ready_approximate_queries_run_on_the_event_loop(uncoalesced, monkeypatch):
    fast = uncoalesced
    fast.get("/most_similar?positive=w9&approx=true")  # the context learns Redis answers
    seen = _where(monkeypatch)
    for word in ["w1", "w2", "w3"]:
        assert fast.get(f"/most_similar?positive={word}&approx=true").status_code == 200
    assert seen == ["loop"] * 3
    seen.clear()
    assert fast.get("/most_similar?positive=w1").json()["approximate"] is False  # exact
    assert fast.get("/most_similar?positive=w1&restrict_vocab=50&approx=1").status_code == 200
    assert seen == ["pool", "pool"]


def test_without_a_ready_index_the_exact_answer_runs_in_the_pool(
    redis_url, model, tmp_path, monkeypatch
):
    """No ANN index (none enabled): approximate queries are answered exactly, flagged,
    and never on the event loop (an exact scan of every row)."""
    with AppClient(create_app(_settings(redis_url, tmp_path, ann=False))) as client:
        client.get("/most_similar?positive=w9&approx=true")
        seen = _where(monkeypatch)
        body = client.get("/most_similar?positive=w1&topn=4&approx=true").json()
        assert body["approximate"] is False and body["approximate_status"]
        assert len(body["results"]) == 4
        assert seen[-1] == "pool" and "loop" not in seen[1:]


def test_dependency_overrides_still_apply(apps):
    from vecserve.service.deps import get_settings

    fast, _ = apps
    fast.app.dependency_overrides[get_settings] = lambda: Settings(default_model="OTHER")
    body = fast.get("/most_similar?positive=w1&approx=true").json()
    assert body["error"] == "ModelNotFound" and "OTHER" in body["detail"]
