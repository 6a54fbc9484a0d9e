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

from tests.helpers import listening_port, wait_until


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
def running_app(app, *, host: str = "127.0.0.1", **config):
    """``app`` under a real uvicorn server in a thread, on a listening socket bound here
    and handed to uvicorn (port 0: the kernel picks a port nobody holds); yields its base
    URL once it serves, and stops it after. ``config``: more of uvicorn's ``Config``
    arguments. The fixture ``live_server`` wraps this."""
    import socket
    import threading

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws="none", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: server.started or not thread.is_alive(), timeout=20, what="uvicorn to start"
        )
        assert server.started, "uvicorn exited at start"
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


@contextlib.contextmanager
def serving(args: list[str], tmp_path, *, verify=True, env: dict | None = None):
    """A real ``vecserve serve ARGS`` subprocess: yields ``(base_url, log)`` once
    ``/healthz`` answers, and stops it after. It binds port 0 itself (the kernel picks a
    port nobody holds), and the port is read back from the process. ``--ssl-certfile`` in
    ``args`` means https (``verify``: an ``ssl.SSLContext`` trusting its certificate)."""
    import os
    import subprocess
    import sys

    scheme = "https" if "--ssl-certfile" in args else "http"
    env = {**os.environ, "VECSERVE_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    argv = [sys.executable, "-m", "vecserve.cli", "serve", "--port", "0", *args]
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:

        def alive() -> bool:
            assert proc.poll() is None, log.read_text()
            return True

        port = listening_port(proc.pid, alive=alive)
        base = f"{scheme}://127.0.0.1:{port}"

        def healthy() -> bool:
            alive()
            try:
                return httpx.get(f"{base}/healthz", timeout=1, verify=verify).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, interval=0.1, what=lambda: f"{base}/healthz; {log.read_text()}")
        yield base, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_for_ann(client, name: str, states=("ready",), *, timeout: float = 60.0) -> dict:
    """Poll ``GET /models/NAME`` until its ANN index is in one of ``states``; its ``ann``."""
    seen = {}

    def state():
        seen.update(client.get(f"/models/{name}").json()["ann"])
        return seen.get("state") in states and dict(seen)

    return wait_until(state, timeout=timeout, what=lambda: f"the ANN index of {name}: {seen}")


def run_vecserve(*args, env: dict | None = None, check: bool = True):
    """The real ``vecserve`` command in a subprocess (``python -m vecserve.cli``)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "vecserve.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if check:
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc
