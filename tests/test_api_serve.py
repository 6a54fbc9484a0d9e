"""``vecserve serve``: flags become VECSERVE_* settings for every uvicorn worker."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

pytest.importorskip("uvicorn")

from tests.helpers import argv, wait_until
from vecserve.service.serve import FLAGS, env_name, flag_of, serve
from vecserve.service.settings import Settings


@pytest.fixture
def captured(monkeypatch):
    import uvicorn

    calls = []

    def run(app, **kw):
        shared = os.environ.get("VECSERVE_METRICS_DIR")
        kw["metrics_dir"] = (shared, shared is not None and os.path.isdir(shared))
        calls.append((app, kw))

    monkeypatch.setattr(uvicorn, "run", run)
    for var in [env_name(f) for f in (*FLAGS, "redis_url", "metrics_dir")]:  # serve() sets these
        monkeypatch.setenv(var, "placeholder")
        monkeypatch.delenv(var)
    return calls


def test_flags_become_settings(captured, monkeypatch):
    monkeypatch.setenv("VECSERVE_MAX_TOPN", "77")  # the environment still counts
    result = CliRunner().invoke(
        serve,
        argv(
            "--port 9123 --workers 3 --default-model W2V --max-words 50 --ann --ann-recall 0.9"
            " --vector-cache 0 --redis-url redis://example:6379/0"
        ),
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    (app, kw) = captured[0]
    assert app == "vecserve.api:create_app" and kw["factory"] is True
    assert (kw["port"], kw["workers"], kw["host"]) == (9123, 3, "127.0.0.1")
    s = Settings()  # what each worker's create_app() reads
    assert (s.default_model, s.max_words, s.ann, s.max_topn) == ("W2V", 50, True, 77)
    assert s.ann_recall == 0.9
    assert s.redis_url == "redis://example:6379/0" and s.vector_cache == 0
    shared, existed = kw["metrics_dir"]  # 3 workers: a fresh directory to merge metrics in
    assert existed and not os.path.exists(shared)  # ... removed when the server stops


def test_one_worker_needs_no_metrics_dir(captured):
    assert CliRunner().invoke(serve, [], catch_exceptions=False).exit_code == 0
    assert captured[0][1]["metrics_dir"] == (None, False)


def test_bad_setting_is_one_line_error(captured, monkeypatch):
    monkeypatch.setenv("VECSERVE_MAX_WORDS", "lots")
    result = CliRunner().invoke(serve, [])
    assert result.exit_code == 1 and not captured
    assert result.output.startswith("Error: invalid setting: $VECSERVE_MAX_WORDS: Input should")
    assert "lots" not in result.output  # values are never echoed: some are secrets
    assert "Traceback" not in result.output


def test_help_has_example():
    out = CliRunner().invoke(serve, ["--help"]).output
    assert "Example:" in out and "vecserve serve --key" in out


def test_two_workers_answer_metrics_for_both(store, redis_url, tmp_path):
    """A real ``vecserve serve --workers 2``: /metrics counts the requests of every worker."""

    import httpx
    import numpy as np

    from tests.api_support import serving
    from vecserve.loader import load_arrays

    load_arrays(["a", "b"], np.eye(2), name="M", store=store, progress=False)
    args = argv("--workers 2 --redis-url {} --default-model M --log-level warning", redis_url)
    with serving(args, tmp_path) as (base, _log):
        n = 40
        for _ in range(n):  # a new connection each: the kernel spreads them over the workers
            assert httpx.get(f"{base}/vectors?words=a").status_code == 200
        line = 'vecserve_requests_total{endpoint="/vectors",method="GET",status="200"} '
        seen = [""]

        def merged() -> bool:  # both workers' requests are in the merge
            seen[0] = text = httpx.get(f"{base}/metrics").text
            return f"{line}{float(n)}\n" in text and "vecserve_worker_processes 2.0\n" in text

        wait_until(merged, timeout=15, interval=0.2, what=lambda: seen[0])


def test_flags_are_made_from_the_settings_fields():
    """Each flag's help is its field's description and names its variable and default."""
    out = " ".join(CliRunner().invoke(serve, ["--help"], terminal_width=10_000).output.split())
    for name in FLAGS:
        field = Settings.model_fields[name]
        assert flag_of(name) in out
        assert " ".join(field.description.split()) in out
        assert env_name(name) in out
        if field.default is not None:
            assert f"default: {field.default!r}" in out
