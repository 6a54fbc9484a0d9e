"""Prometheus metrics of the HTTP service, in the text exposition format, no dependency.

A :class:`Metrics` holds counters, and latency histograms with fixed buckets, keyed by
label values; :meth:`Metrics.render` writes them as ``text/plain; version=0.0.4``. Values
are per process: with several uvicorn workers each answers for itself (scrape each, or
run one worker per container as the compose file does).

>>> m = Metrics()
>>> m.inc("vecserve_cache_hits_total", cache="model")
>>> m.observe("vecserve_request_duration_seconds", 0.003, endpoint="/vectors")
>>> "vecserve_cache_hits_total{cache=\\"model\\"} 1" in m.render()
True
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable

__all__ = ["BUCKETS", "HELP", "Metrics", "MetricsMiddleware"]

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

HELP = {
    "vecserve_requests_total": ("counter", "HTTP requests by endpoint, method and status."),
    "vecserve_request_duration_seconds": ("histogram", "HTTP request latency by endpoint."),
    "vecserve_cache_hits_total": ("counter", "Cache hits by cache (model, index, vectors)."),
    "vecserve_cache_misses_total": ("counter", "Cache misses by cache (model, index, vectors)."),
    "vecserve_vector_cache_entries": ("gauge", "Vectors held in a model's vector cache."),
    "vecserve_vectors_served_total": ("counter", "Vectors returned by /vectors."),
    "vecserve_words_missing_total": ("counter", "Requested words not in the model."),
    "vecserve_index_build_seconds": (
        "gauge",
        "Seconds the last build (or open from the disk cache) of a model's index took.",
    ),
    "vecserve_index_rows": ("gauge", "Rows in a model's similarity index."),
    "vecserve_ann_recall_at_10": ("gauge", "Measured recall@10 of a model's ANN index."),
    "vecserve_store_errors_total": ("counter", "Requests answered 503: Redis unavailable."),
}

Labels = tuple[tuple[str, str], ...]


def _fmt_labels(labels: Labels, extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = labels + extra
    if not items:
        return ""
    esc = ((k, v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")) for k, v in items)
    return "{" + ",".join(f'{k}="{v}"' for k, v in esc) + "}"


def _fmt_value(v: float) -> str:
    return repr(float(v)) if v != int(v) else str(int(v))


class Metrics:
    """Thread-safe counters, gauges and histograms; :meth:`render` gives Prometheus text."""

    def __init__(self, *, buckets: tuple[float, ...] = BUCKETS):
        self.buckets = buckets
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = {}
        self._hist: dict[str, dict[Labels, list]] = {}

    def inc(self, name: str, amount: float = 1.0, /, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._values.setdefault(name, {})
            series[key] = series.get(key, 0.0) + amount

    def set(self, name: str, value: float, /, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._values.setdefault(name, {})[key] = float(value)

    def observe(self, name: str, seconds: float, /, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        i = bisect.bisect_left(self.buckets, seconds)
        with self._lock:
            h = self._hist.setdefault(name, {}).get(key)
            if h is None:
                h = self._hist[name][key] = [[0] * (len(self.buckets) + 1), 0.0, 0]
            h[0][i] += 1
            h[1] += seconds
            h[2] += 1

    def value(self, name: str, /, **labels: str) -> float:
        """Current value of a counter or gauge (0 if never set); handy in tests."""
        with self._lock:
            return self._values.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        out: list[str] = []
        with self._lock:
            names = sorted(set(self._values) | set(self._hist))
            for name in names:
                kind, text = HELP.get(name, ("untyped", name))
                out.append(f"# HELP {name} {text}")
                out.append(f"# TYPE {name} {kind}")
                for labels, v in sorted(self._values.get(name, {}).items()):
                    out.append(f"{name}{_fmt_labels(labels)} {_fmt_value(v)}")
                for labels, (counts, total, n) in sorted(self._hist.get(name, {}).items()):
                    cum = 0
                    for le, c in zip((*self.buckets, float("inf")), counts, strict=True):
                        cum += c
                        le_s = "+Inf" if le == float("inf") else repr(le)
                        out.append(f"{name}_bucket{_fmt_labels(labels, (('le', le_s),))} {cum}")
                    out.append(f"{name}_sum{_fmt_labels(labels)} {total!r}")
                    out.append(f"{name}_count{_fmt_labels(labels)} {n}")
        return "\n".join(out) + "\n"


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
