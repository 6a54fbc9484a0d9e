"""Where a command's Redis is: a URL, ``$VECSERVE_REDIS_URL``, or the embedded server.

Every entry point (the CLI, :class:`~vecserve.keyedvectors.RedisKeyedVectors`, the HTTP
service, the loader) connects through :func:`connect` or :func:`open_store`, so "use this
URL or start the embedded server" is decided in one place.

>>> with open_store("redis://localhost:6379/0") as store:   # doctest: +SKIP
...     print([m.name for m in store.list_models()])
['GOOGLE_W2V']
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from . import config
from .embedded import EmbeddedServer
from .store import Store

__all__ = ["Connection", "connect", "open_store"]


class Connection:
    """A resolved Redis URL, holding the embedded server while it is used.

    ``release()`` (or leaving the ``with`` block) lets go of the embedded server, if any.
    """

    def __init__(self, url: str, embedded: EmbeddedServer | None = None):
        self.url = url
        self.embedded = embedded

    def release(self) -> None:
        embedded, self.embedded = self.embedded, None
        if embedded is not None:
            embedded.release()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def connect(
    redis_url: str | None = None, *, data_dir: str | os.PathLike | None = None
) -> Connection:
    """``redis_url``, else ``$VECSERVE_REDIS_URL``, else the embedded server (attached)."""
    url = config.redis_url(redis_url)
    if url is not None:
        return Connection(url)
    server = EmbeddedServer(data_dir).acquire()
    return Connection(server.url, server)


@contextlib.contextmanager
def open_store(
    redis_url: str | None = None, *, data_dir: str | os.PathLike | None = None
) -> Iterator[Store]:
    """A connected :class:`~vecserve.store.Store` on :func:`connect`'s server.

    On the embedded server every committed load is saved in the background at once, so
    it is durable without waiting for a shutdown (a server you run has its own policy).
    """
    with connect(redis_url, data_dir=data_dir) as conn:
        store = Store.from_url(conn.url)
        if conn.embedded is not None:
            store.after_commit = conn.embedded.save_soon
        try:
            yield store
        finally:
            store.close()
