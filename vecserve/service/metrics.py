"""Prometheus metrics of the HTTP service, through ``prometheus_client``.

A :class:`Metrics` holds the service's counters, gauges and latency histograms (names,
help and label names in :data:`SPECS`) in a registry of its own, so several apps in one
process (tests) never collide. ``inc`` / ``set`` / ``observe`` take the labels as keyword
arguments; :meth:`Metrics.render` answers a scrape (``text/plain; version=0.0.4``).

Several uvicorn workers: a scrape reaches one of them. Given a directory
(``VECSERVE_METRICS_DIR``; ``vecserve serve --workers N`` makes one per run),
prometheus_client's multiprocess mode keeps each worker's values in memory-mapped files
there, and the worker that answers merges them: counters and histograms summed over every
worker that ran (totals never go back), gauges over live workers only (the largest value,
or the sum for per-worker quantities such as cache entries), and
``vecserve_worker_processes`` counts the live workers. Files of workers that died are
marked dead at scrape time (:func:`vecserve.procs.pid_alive`).

>>> m = Metrics()
>>> m.inc("vecserve_cache_hits_total", cache="model")
>>> m.observe("vecserve_request_duration_seconds", 0.003, endpoint="/vectors")
>>> b'vecserve_cache_hits_total{cache="model"} 1.0' in m.render()
True
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess as prom_multiprocess
from prometheus_client import values as prom_values

from ..procs import pid_alive

__all__ = ["BUCKETS", "SPECS", "Metrics", "MetricsMiddleware"]

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

# name -> (kind, help, label names[, multiprocess mode of a gauge])
SPECS: dict[str, tuple] = {
    "vecserve_requests_total": (
        "counter",
        "HTTP requests by endpoint, method and status.",
        ("endpoint", "method", "status"),
    ),
    "vecserve_request_duration_seconds": (
        "histogram",
        "HTTP request latency by endpoint.",
        ("endpoint",),
    ),
    "vecserve_cache_hits_total": (
        "counter",
        "Cache hits by cache (model, index, vectors).",
        ("cache",),
    ),
    "vecserve_cache_misses_total": (
        "counter",
        "Cache misses by cache (model, index, vectors).",
        ("cache",),
    ),
    "vecserve_vector_cache_entries": (
        "gauge",
        "Vectors held in a model's vector cache (summed over workers).",
        ("model",),
        "livesum",
    ),
    "vecserve_vector_keys_lost": (
        "gauge",
        "Vector keys of a model's live generation its cache saw leave Redis without a "
        "reload (evicted, deleted): the model is damaged.",
        ("model",),
        "livemax",
    ),
    "vecserve_vectors_served_total": ("counter", "Vectors returned by /vectors.", ()),
    "vecserve_words_missing_total": ("counter", "Requested words not in the model.", ()),
    "vecserve_texts_embedded_total": ("counter", "Texts embedded by /embed.", ()),
    "vecserve_text_tokens_total": ("counter", "Tokens pooled by /embed.", ()),
    "vecserve_index_build_seconds": (
        "gauge",
        "Seconds the last build (or open from the disk cache) of a model's index took.",
        ("model",),
        "livemax",
    ),
    "vecserve_index_rows": ("gauge", "Rows in a model's similarity index.", ("model",), "livemax"),
    "vecserve_ann_recall_at_10": (
        "gauge",
        "Measured recall@10 of a model's ANN index.",
        ("model",),
        "livemax",
    ),
    "vecserve_store_errors_total": (
        "counter",
        "Requests answered 503: Redis unavailable or refusing (an error reply).",
        (),
    ),
    "vecserve_model_damaged_total": (
        "counter",
        "Requests answered 500 ModelDamaged: words of the vocabulary whose rows are gone.",
        ("model",),
    ),
    "vecserve_worker_processes": (
        "gauge",
        "Live worker processes whose metrics are merged.",
        (),
        "livesum",
    ),
}

_KINDS = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
_PID_FILE = re.compile(r"_(\d+)\.db$")

prometheus_client.disable_created_metrics()  # no *_created series: only the metrics listed here


class Metrics:
    """The service's metrics; with ``directory``, shared by every worker of one run.

    ``directory`` switches this process to prometheus_client's multiprocess mode (a
    process holds one app, so one mode): the directory must be private to one run of the
    service, as ``vecserve serve`` makes it.
    """

    def __init__(self, *, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(self.directory)
            prom_values.ValueClass = prom_values.MultiProcessValue()
        self.registry = CollectorRegistry(auto_describe=True)
        self._metrics: dict[str, object] = {}
        self._children: dict[tuple, object] = {}  # (name, *label values) -> labelled child
        for name, (kind, text, labels, *mode) in SPECS.items():
            kw: dict = {"registry": self.registry, "labelnames": labels}
            if kind == "histogram":
                kw["buckets"] = BUCKETS
            if kind == "gauge" and self.directory is not None:
                kw["multiprocess_mode"] = mode[0]
            self._metrics[name] = _KINDS[kind](name, text, **kw)
        self._collectors: list[Callable[[Metrics], None]] = []
        self._lock = threading.Lock()
        self.set("vecserve_worker_processes", 1)

    def on_collect(self, fn: Callable[[Metrics], None]) -> None:
        """Call ``fn(self)`` before every render (to set gauges of state)."""
        self._collectors.append(fn)

    def _child(self, name: str, labels: dict):
        key = (name, *labels.items())
        child = self._children.get(key)
        if child is None:
            metric = self._metrics[name]
            child = metric.labels(**labels) if labels else metric  # type: ignore[attr-defined]
            self._children[key] = child
        return child

    def inc(self, name: str, amount: float = 1.0, /, **labels: str) -> None:
        self._child(name, labels).inc(amount)

    def set(self, name: str, value: float, /, **labels: str) -> None:
        self._child(name, labels).set(value)

    def observe(self, name: str, seconds: float, /, **labels: str) -> None:
        self._child(name, labels).observe(seconds)

    def value(self, name: str, /, **labels: str) -> float:
        """This process's value of a counter or gauge (0 if never set); handy in tests."""
        got = self.registry.get_sample_value(name, labels)
        return 0.0 if got is None else got

    def render(self) -> bytes:
        """The scrape: this process's values, or every worker's in multiprocess mode."""
        for fn in self._collectors:
            fn(self)
        if self.directory is None:
            return generate_latest(self.registry)
        with self._lock:
            self._forget_dead_workers()
            merged = CollectorRegistry()
            prom_multiprocess.MultiProcessCollector(merged, path=str(self.directory))
            return generate_latest(merged)

    def _forget_dead_workers(self) -> None:
        """Drop the live-gauge files of workers that exited (uvicorn has no exit hook)."""
        dead = set()
        for path in self.directory.glob("gauge_live*_*.db"):  # type: ignore[union-attr]
            m = _PID_FILE.search(path.name)
            if m and not pid_alive(int(m.group(1))):
                dead.add(int(m.group(1)))
        for pid in dead:
            prom_multiprocess.mark_process_dead(pid, path=str(self.directory))


class MetricsMiddleware:
    """Pure ASGI middleware: counts and times every HTTP request by route template.

    The endpoint label is the matched route's path (``/models/{name}``), never the raw
    URL, so label cardinality stays bounded; unmatched paths count as ``<unmatched>``.
    """

    def __init__(self, app, *, metrics: Metrics, clock: Callable[[], float] = time.perf_counter):
        self.app = app
        self.metrics = metrics
        self.clock = clock

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = self.clock()
        status = 500

        async def send_wrapper(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "<unmatched>"
            m = self.metrics
            m.inc(
                "vecserve_requests_total",
                endpoint=endpoint,
                method=scope["method"],
                status=str(status),
            )
            m.observe("vecserve_request_duration_seconds", self.clock() - start, endpoint=endpoint)
