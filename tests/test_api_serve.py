"""``vecserve serve``: flags become VECSERVE_* settings for every uvicorn worker."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

pytest.importorskip("uvicorn")

from vecserve.serve import _OPTION_ENV, serve
from vecserve.settings import Settings


@pytest.fixture
def captured(monkeypatch):
    import uvicorn

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
    for var in _OPTION_ENV.values():  # serve() sets these: restore them afterwards
        monkeypatch.setenv(var, "placeholder")
        monkeypatch.delenv(var)
    return calls


def test_flags_become_settings(captured, monkeypatch):
    monkeypatch.setenv("VECSERVE_MAX_TOPN", "77")  # the environment still counts
    result = CliRunner().invoke(
        serve,
        ["--port", "9123", "--workers", "3", "--default-model", "W2V", "--max-words", "50",
         "--ann", "--vector-cache", "0", "--redis-url", "redis://example:6379/0"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (app, kw) = captured[0]
    assert app == "vecserve.api:create_app" and kw["factory"] is True
    assert (kw["port"], kw["workers"], kw["host"]) == (9123, 3, "127.0.0.1")
    s = Settings()  # what each worker's create_app() reads
    assert (s.default_model, s.max_words, s.ann, s.max_topn) == ("W2V", 50, True, 77)
    assert s.redis_url == "redis://example:6379/0" and s.vector_cache == 0


def test_bad_setting_is_one_line_error(captured, monkeypatch):
    monkeypatch.setenv("VECSERVE_MAX_WORDS", "lots")
    result = CliRunner().invoke(serve, [])
    assert result.exit_code == 1 and not captured
    assert result.output.startswith("Error: invalid setting")
    assert "Traceback" not in result.output


def test_help_has_example():
    out = CliRunner().invoke(serve, ["--help"]).output
    assert "Example:" in out and "vecserve serve --default-model" in out
