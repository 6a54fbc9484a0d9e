"""API keys: ``Authorization: Bearer <key>`` on every endpoint but the health probes and
the explorer page's own files (``/``, ``/static/...``: the page must load to ask for a key;
every JSON call it makes still needs one).

Keys come from ``VECSERVE_API_KEYS`` (comma-separated) and/or a file
(``VECSERVE_API_KEYS_FILE``, ``vecserve serve --api-keys-file``: one key a line, blank
lines and ``#`` comments ignored). With no key configured the service is open, as before.

A presented key is compared with every configured key in constant time
(:func:`hmac.compare_digest`, no early exit), so timing tells nothing of how much of a key
matched. Metrics keys (``VECSERVE_METRICS_KEYS``) open ``/metrics`` and nothing else:
the bearer token of a Prometheus scrape, which then can read the service's counters but no
vector; any other path answers such a key ``403``. Keys are never logged, never in a
metric or an error body; a refusal is ``401`` with ``WWW-Authenticate: Bearer`` and a JSON
body.

>>> keys = load_keys("k1, k2", None)
>>> key_matches(keys, "k2"), key_matches(keys, "k3")
(True, False)
"""

from __future__ import annotations

import hmac
from pathlib import Path

import orjson

from ..errors import VecserveError

__all__ = ["OPEN_PATHS", "OPEN_PREFIXES", "ApiKeyMiddleware", "is_open", "key_matches", "load_keys"]

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/"})
OPEN_PREFIXES = ("/static/",)


def is_open(path: str) -> bool:
    """True for the paths served without a key.

    >>> is_open("/"), is_open("/static/app.js"), is_open("/models"), is_open("/static")
    (True, True, False, False)
    """
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def load_keys(inline: str | None, path: str | Path | None) -> list[bytes]:
    """The configured keys; raises VecserveError for an unreadable or empty key file."""
    keys = [k.strip() for k in (inline or "").split(",") if k.strip()]
    if path is not None:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise VecserveError(f"cannot read the API keys file {path}: {exc}") from exc
        found = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
        if not found:
            raise VecserveError(f"the API keys file {path} holds no key")
        keys += found
    return [k.encode() for k in keys]


def key_matches(keys: list[bytes], presented: str | bytes) -> bool:
    """True if ``presented`` is one of ``keys``; constant time, every key compared."""
    given = presented.encode() if isinstance(presented, str) else presented
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(key, given)
    return ok


class ApiKeyMiddleware:
    """Pure ASGI middleware: 401 unless a configured key is presented (health and the
    explorer page's files exempt)."""

    def __init__(self, app, *, keys: list[bytes], metrics_keys: list[bytes] = ()):
        self.app = app
        self.keys = keys
        self.metrics_keys = list(metrics_keys)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        metrics = scope["path"] == "/metrics"
        if not self.keys and not (metrics and self.metrics_keys):  # metrics keys alone
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        scheme, _, token = (header or b"").partition(b" ")
        bearer = header is not None and scheme.lower() == b"bearer"
        if bearer and (
            key_matches(self.keys, token) or (metrics and key_matches(self.metrics_keys, token))
        ):
            await self.app(scope, receive, send)
            return
        status = 401
        if header is None:
            detail, challenge = "an API key is required: Authorization: Bearer <key>", b"Bearer"
        elif bearer and key_matches(self.metrics_keys, token):
            status, detail = 403, "this key opens /metrics only"
            challenge = b'Bearer error="insufficient_scope"'
        else:
            detail, challenge = "invalid API key", b'Bearer error="invalid_token"'
        error = "Unauthorized" if status == 401 else "Forbidden"
        body = orjson.dumps({"error": error, "detail": detail})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            (b"www-authenticate", challenge),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def declare_bearer(openapi: dict) -> dict:
    """Declare the bearer scheme in an OpenAPI document, required everywhere but health."""
    comps = openapi.setdefault("components", {})
    comps.setdefault("securitySchemes", {})["bearerAuth"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "One of the service's API keys (VECSERVE_API_KEYS).",
    }
    for path, ops in openapi.get("paths", {}).items():
        if is_open(path):
            continue
        for op in ops.values():
            if isinstance(op, dict):
                op["security"] = [{"bearerAuth": []}]
                op.setdefault("responses", {})["401"] = {"description": "Missing or wrong key"}
    return openapi
