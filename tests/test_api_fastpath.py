"""``GET /vectors`` answered by :class:`vecserve.service.fastpath.VectorsFastRoute` exactly
as the FastAPI route answers it: same status, headers, body and metrics, for valid and
invalid queries."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vecserve.api import MostSimilarFastRoute, VectorsFastRoute, create_app
from vecserve.loader import load_arrays
from vecserve.service.settings import Settings

from .api_support import AppClient

TOKENS = [f"w{i}" for i in range(20)] + ["café", "a,b"]

QUERIES = [
    ("words=w1,w2", {}),
    ("words=w1,nope,caf%C3%A9&missing=zeros", {}),
    ("words=w1&words=w2,w3&format=npy", {}),
    ("words=w1,nope&missing=error", {}),
    ("words=w1,nope&format=binary", {}),
    ("words=w1", {"accept": "application/octet-stream"}),
    ("words=w1", {"accept": "application/json;q=0.5, application/x-npy"}),
    ("words=w1", {"accept": "text/csv"}),
    ("words=w1&model=", {}),
    ("words=w1&model=NOPE", {}),
    ("words=w1&model=bad%20name", {}),
    ("words=w1&model=NOPE&model=M", {}),
    ("words=w1&missing=explode", {}),
    ("words=w1&format=", {}),
    ("words=w1&format=csv&missing=nope", {}),
    ("words=", {}),
    ("words=,,,", {}),
    ("words=a,b,c,d,e,f", {}),
    ("", {}),
    ("model=M", {}),
    ("words=w1&unknown=1", {}),
]


@pytest.fixture
def apps(redis_url, store, tmp_path):
    """The app as served, and the same app without the fast route (FastAPI only)."""
    vectors = np.random.default_rng(5).standard_normal((len(TOKENS), 4)).astype(np.float32)
    load_arrays(TOKENS, vectors, name="M", store=store, progress=False)
    # No vector cache: when each app's cache starts tracking is a matter of timing, and
    # its hit counters would differ between the two apps for that reason alone.
    settings = Settings(
        redis_url=redis_url, default_model="M", max_words=5, model_ttl=0, vector_cache=0
    )
    fast, plain = create_app(settings), create_app(settings)
    plain.router.routes = [r for r in plain.router.routes if not isinstance(r, VectorsFastRoute)]
    assert any(isinstance(r, VectorsFastRoute) for r in fast.router.routes)
    with AppClient(fast) as f, AppClient(plain) as p:
        yield f, p


def _comparable(resp) -> tuple:
    headers = {k: v for k, v in resp.headers.items() if k != "date"}
    return resp.status_code, headers, resp.content


@pytest.mark.parametrize(("query", "headers"), QUERIES)
def test_same_answer_as_the_fastapi_route(apps, query, headers):
    fast, plain = apps
    got = fast.get(f"/vectors?{query}", headers=headers)
    want = plain.get(f"/vectors?{query}", headers=headers)
    assert _comparable(got) == _comparable(want)


def test_same_metrics_as_the_fastapi_route(apps):
    def counters(client) -> list[str]:
        text = client.get("/metrics").text
        return [
            line
            for line in text.splitlines()
            if not re.match(r"vecserve_request_duration_seconds_(bucket|sum)", line)
        ]

    for client in apps:
        for query, headers in QUERIES:
            client.get(f"/vectors?{query}", headers=headers)
    fast, plain = (counters(c) for c in apps)
    assert fast == plain
    assert any('endpoint="/vectors",method="GET",status="200"' in line for line in fast)


def test_fast_route_serves_valid_queries_and_hands_on_the_rest(apps, monkeypatch):
    fast, _ = apps
    route = next(r for r in fast.app.router.routes if isinstance(r, VectorsFastRoute))
    calls = []  # the queries the fast route answered; the FastAPI route answers the rest
    real = route.handle

    async def spy(scope, receive, send):
        calls.append(scope["query_string"])
        await real(scope, receive, send)

    monkeypatch.setattr(route, "handle", spy)
    assert fast.get("/vectors?words=w1,nope&format=binary").status_code == 200
    assert fast.get("/vectors?words=nope&missing=error").status_code == 404
    assert fast.get("/vectors?words=w1&model=bad%20name").status_code == 422
    answered = [b"words=w1,nope&format=binary", b"words=nope&missing=error"]
    assert calls == [*answered, b"words=w1&model=bad%20name"]
    assert fast.get("/vectors?words=w1&missing=explode").status_code == 422
    assert fast.get("/vectors").status_code == 422
    assert fast.post("/vectors", json={"words": ["w1"]}).status_code == 200
    assert calls == [*answered, b"words=w1&model=bad%20name"]


def test_dependency_overrides_still_apply(apps):
    from vecserve.service.deps import get_settings

    fast, _ = apps
    fast.app.dependency_overrides[get_settings] = lambda: Settings(default_model="OTHER")
    body = fast.get("/vectors?words=w1").json()
    assert body["error"] == "ModelNotFound" and "OTHER" in body["detail"]


def test_openapi_is_unchanged(redis_url):
    """The fast routes (GET /vectors, GET /most_similar) add nothing to the schema."""
    settings = Settings(redis_url=redis_url, default_model="M")
    fast, plain = create_app(settings), create_app(settings)
    fast_kinds = (VectorsFastRoute, MostSimilarFastRoute)
    plain.router.routes = [r for r in plain.router.routes if not isinstance(r, fast_kinds)]
    assert len(plain.router.routes) == len(fast.router.routes) - 2
    assert fast.openapi() == plain.openapi()
    params = {p["name"] for p in fast.openapi()["paths"]["/vectors"]["get"]["parameters"]}
    assert params == {"model", "words", "missing", "format"}
