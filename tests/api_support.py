"""A synchronous test client for ASGI apps: ``httpx.AsyncClient`` over ``ASGITransport``,
with the app's lifespan running (its state handed to every request, as a server does).

Starlette's own ``TestClient`` now warns unless the ``httpx2`` package is installed; this
keeps the tests on plain httpx and on exactly the code path a real server takes.
"""

from __future__ import annotations

import contextlib
import functools

import anyio.from_thread
import httpx


class AppClient:
    """``with AppClient(app) as client: client.get("/healthz")``."""

    def __init__(self, app, *, base_url: str = "http://testserver"):
        self.app = app
        self.base_url = base_url
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> AppClient:
        stack = self._stack.__enter__()
        self.portal = stack.enter_context(anyio.from_thread.start_blocking_portal())
        lifespan = self.app.router.lifespan_context(self.app)
        state = stack.enter_context(self.portal.wrap_async_context_manager(lifespan)) or {}
        app = self.app

        async def with_state(scope, receive, send):
            scope["state"] = dict(state)
            await app(scope, receive, send)

        transport = httpx.ASGITransport(app=with_state, raise_app_exceptions=False)
        self.client = httpx.AsyncClient(transport=transport, base_url=self.base_url)
        stack.callback(lambda: self.portal.call(self.client.aclose))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)

    def request(self, method: str, url: str, **kwargs) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.request, method, url, **kwargs))

    def get(self, url: str, **kwargs) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs) -> httpx.Response:
        return self.request("POST", url, **kwargs)


@contextlib.contextmanager
def serving(args: list[str], tmp_path, *, verify=True, env: dict | None = None):
    """A real ``vecserve serve ARGS`` subprocess on a free port: yields ``(base_url, log)``
    once ``/healthz`` answers, and stops it after. ``--ssl-certfile`` in ``args`` means
    https (``verify``: an ``ssl.SSLContext`` trusting its certificate)."""
    import os
    import subprocess
    import sys
    import time

    from vecserve.embedded import free_port

    port = free_port()
    scheme = "https" if "--ssl-certfile" in args else "http"
    env = {**os.environ, "VECSERVE_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    argv = [sys.executable, "-m", "vecserve.cli", "serve", "--port", str(port), *args]
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"{scheme}://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1, verify=verify).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield base, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_vecserve(*args, env: dict | None = None, check: bool = True):
    """The real ``vecserve`` command in a subprocess (``python -m vecserve.cli``)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "vecserve.cli", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc
