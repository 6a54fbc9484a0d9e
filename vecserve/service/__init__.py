"""The HTTP service's parts; :mod:`vecserve.api` assembles them into the app.

- :mod:`.settings` — :class:`~.settings.Settings`, the service's ``VECSERVE_*`` settings.
- :mod:`.deps` — the per-process state (:class:`~.deps.AppContext`) and FastAPI
  dependencies: store handle, model cache, row reads.
- :mod:`.schemas` — request and response models (pydantic), query validation.
- :mod:`.responses` — content negotiation (JSON, float32, ``.npy``), error bodies.
- :mod:`.metrics` — Prometheus metrics and their merge across uvicorn workers.
- :mod:`.serve` — the ``vecserve serve`` command (uvicorn).
- routers by area — :mod:`.routes_vectors`, :mod:`.routes_similarity` (most_similar's
  answers: :mod:`.similar`), :mod:`.routes_service`, :mod:`.embed`, :mod:`.explorer`,
  :mod:`.docs`; :mod:`.params`, the query string's word lists; :mod:`.fastpath`, the two
  plain ASGI routes ahead of FastAPI's.

Nothing outside the service imports this package, except the CLI's lazy ``serve`` entry.
"""
