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
