"""Prometheus metrics of the HTTP service, in the text exposition format, no dependency.

A :class:`Metrics` holds counters, and latency histograms with fixed buckets, keyed by
label values; :meth:`Metrics.render` writes them as ``text/plain; version=0.0.4``.

Several uvicorn workers: a scrape reaches one of them, so each worker also publishes its
values (:class:`MetricsShare`) as ``<pid>.json`` in a shared directory
(``VECSERVE_METRICS_DIR``; ``vecserve serve --workers N`` makes one per run) at most
``interval`` seconds old, and the worker that answers the scrape merges every file:
counters and histograms are summed over all workers (those that exited too, so totals
never go back), gauges are taken from live workers (the largest value; summed for
per-worker quantities such as cache entries), and ``vecserve_worker_processes`` says
how many live workers were merged.

>>> m = Metrics()
>>> m.inc("vecserve_cache_hits_total", cache="model")
>>> m.observe("vecserve_request_duration_seconds", 0.003, endpoint="/vectors")
>>> "vecserve_cache_hits_total{cache=\\"model\\"} 1" in m.render()
True
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..procs import pid_alive

__all__ = ["BUCKETS", "HELP", "Metrics", "MetricsMiddleware", "MetricsShare"]

log = logging.getLogger(__name__)

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
    "vecserve_worker_processes": ("gauge", "Live worker processes whose metrics are merged."),
}
# Gauges that count something each worker holds: summed over workers (others: the max).
SUMMED_GAUGES = frozenset({"vecserve_vector_cache_entries"})

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
        self._collectors: list[Callable[[Metrics], None]] = []

    def on_collect(self, fn: Callable[[Metrics], None]) -> None:
        """Call ``fn(self)`` before every render or snapshot (to set gauges of state)."""
        self._collectors.append(fn)

    def _collect(self) -> None:
        for fn in self._collectors:
            fn(self)

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

    def snapshot(self) -> dict:
        """The values as JSON-ready data (what :class:`MetricsShare` publishes)."""
        self._collect()
        with self._lock:
            return {
                "values": {
                    n: [[list(k), v] for k, v in d.items()] for n, d in self._values.items()
                },
                "hist": {
                    n: [[list(k), [list(h[0]), h[1], h[2]]] for k, h in d.items()]
                    for n, d in self._hist.items()
                },
            }

    @classmethod
    def merged(cls, snapshots: list[dict], live: list[bool], *, buckets=BUCKETS) -> Metrics:
        """One :class:`Metrics` of several workers' snapshots (see the module docstring)."""
        out = cls(buckets=buckets)
        for snap, alive in zip(snapshots, live, strict=True):
            for name, series in snap["values"].items():
                gauge = HELP.get(name, ("untyped",))[0] == "gauge"
                if gauge and not alive:
                    continue
                target = out._values.setdefault(name, {})
                for labels, v in series:
                    key = tuple(tuple(x) for x in labels)
                    if not gauge or name in SUMMED_GAUGES:
                        target[key] = target.get(key, 0.0) + v
                    else:
                        target[key] = max(target.get(key, v), v)
            for name, series in snap["hist"].items():
                target = out._hist.setdefault(name, {})
                for labels, (counts, total, n) in series:
                    key = tuple(tuple(x) for x in labels)
                    h = target.setdefault(key, [[0] * len(counts), 0.0, 0])
                    h[0] = [a + b for a, b in zip(h[0], counts, strict=True)]
                    h[1] += total
                    h[2] += n
        out._values["vecserve_worker_processes"] = {(): float(sum(live))}
        return out

    def render(self) -> str:
        self._collect()
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


class MetricsShare:
    """Publish one worker's :class:`Metrics` to ``directory`` and merge every worker's.

    ``start()`` writes ``<pid>.json`` now and then every ``interval`` seconds (atomically:
    a temporary file renamed into place) from a daemon thread; :meth:`render` writes this
    worker's file afresh and renders the merge of all files. The directory must be
    private to one run of the service (``vecserve serve`` makes a fresh one).
    """

    def __init__(self, directory: str | os.PathLike, metrics: Metrics, *, interval: float = 1.0):
        self.directory = Path(directory)
        self.metrics = metrics
        self.interval = interval
        self.pid = os.getpid()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsShare:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.publish()
        self._thread = threading.Thread(target=self._run, name="vecserve-metrics", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.publish()
            except OSError as exc:  # a full or vanished directory must not kill the worker
                log.warning("cannot publish metrics to %s: %s", self.directory, exc)

    def publish(self) -> None:
        path = self.directory / f"{self.pid}.json"
        tmp = path.with_name(f".{self.pid}.tmp")
        tmp.write_text(json.dumps(self.metrics.snapshot()))
        os.replace(tmp, path)

    def render(self) -> str:
        self.publish()
        snapshots, live = [], []
        for path in sorted(self.directory.glob("*.json")):
            try:
                snap = json.loads(path.read_text())
                pid = int(path.stem)
            except (OSError, ValueError):
                continue  # vanished or foreign: skip
            snapshots.append(snap)
            live.append(pid == self.pid or pid_alive(pid))
        return Metrics.merged(snapshots, live, buckets=self.metrics.buckets).render()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self.publish()  # the final counts of this worker stay in the merge
