"""Property-based tests from the OpenAPI schema (schemathesis) against a real uvicorn server:
whatever the input, the service answers it -- 2xx/4xx with a JSON error -- never a 500."""

from __future__ import annotations

import numpy as np
import pytest

schemathesis = pytest.importorskip("schemathesis")
uvicorn = pytest.importorskip("uvicorn")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from tests.api_support import running_app  # noqa: E402
from vecserve.api import create_app  # noqa: E402
from vecserve.loader import load_arrays  # noqa: E402
from vecserve.service.settings import Settings  # noqa: E402
from vecserve.store import Store  # noqa: E402

MAX_EXAMPLES = 20
TOKENS = ["king", "queen", "man", "woman", "a,b", "", "0", "日本"] + [f"w{i}" for i in range(92)]

schema = schemathesis.openapi.from_dict(create_app(Settings(default_model="S")).openapi())


@pytest.fixture(scope="module")
def base_url(redis_url, tmp_path_factory):
    store = Store.from_url(redis_url)
    vectors = np.random.default_rng(0).standard_normal((len(TOKENS), 8)).astype(np.float32)
    load_arrays(TOKENS, vectors, name="S", store=store, progress=False)
    app = create_app(
        Settings(
            redis_url=redis_url,
            default_model="S",
            cache_dir=tmp_path_factory.mktemp("cache"),
            max_words=50,
            max_topn=50,
        )
    )
    with running_app(app) as url:
        yield url
    store.client.flushall()
    store.close()


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_no_server_errors(case, base_url):
    response = case.call_and_validate(base_url=base_url, checks=[not_a_server_error])
    assert response.status_code < 500 or response.status_code == 503, response.text
    if response.status_code >= 400:
        body = response.json()
        assert set(body) >= {"error", "detail"}
