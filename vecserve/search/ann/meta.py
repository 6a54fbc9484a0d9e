"""An index's build metadata, typed: :class:`BuildMeta` (and its recall :class:`Target`),
kept beside the index as ``ann-<tag>.json``.

The file's JSON is the one indexes have always carried (the same keys, the same values;
:meth:`BuildMeta.to_json` writes them, :meth:`BuildMeta.from_json` reads them), so an index
built by an earlier version is read as it is: one built to fixed settings before recall
targets existed has no ``target`` (:attr:`BuildMeta.target` is None; the manager rebuilds it
where it sets a target, saying why), one built before IVF names no ``kind`` (HNSW).

>>> meta = BuildMeta.from_json({"library": "usearch 2.9.0", "params": {"nprobe": 4},
...                             "rows": 10, "build_seconds": 0.5, "recall_at_10": 0.9})
>>> meta.params.kind, meta.target, meta.usable, meta.to_json()["recall_at_10"]
('hnsw', None, True, 0.9)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from .params import AnnParams

__all__ = ["BuildMeta", "Measured", "Target"]


@dataclass(frozen=True)
class Target:
    """What a build made of its recall target: ``met`` (within the latency budget), else
    the ``reason`` approximate queries are answered exactly; the ``setting`` chosen
    (``{"nprobe": n, "oversample": o}`` or ``{"expansion_search": ef}``)."""

    recall: float
    met: bool
    reason: str | None
    latency_budget: float | None = None
    setting: dict[str, int] = field(default_factory=dict)
    tuning_queries: int = 0

    @classmethod
    def from_json(cls, data: dict) -> Target:
        return cls(
            recall=data["recall"],
            met=bool(data.get("met", True)),
            reason=data.get("reason"),
            latency_budget=data.get("latency_budget"),
            setting=dict(data.get("setting") or {}),
            tuning_queries=int(data.get("tuning_queries", 0)),
        )

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BuildMeta:
    """How an index was built and what it measured. ``recall_interval``, ``query_ms`` and
    ``exact_query_ms`` come from a targeted build (:mod:`.tuning`); ``index_bytes`` once
    the index is saved; ``nlist`` for IVF."""

    library: str
    params: AnnParams
    rows: int
    build_seconds: float
    name: str | None = None
    generation: int | None = None
    nlist: int | None = None
    recall_at_10: float = 0.0
    recall_interval: tuple[float, float] | None = None
    recall_queries: int = 0
    query_ms: float | None = None
    exact_query_ms: float | None = None
    target: Target | None = None
    index_bytes: int | None = None

    @property
    def usable(self) -> bool:
        """Whether approximate queries may use the index: it met its recall target within
        its latency budget, or was built to fixed settings (no target)."""
        return self.target is None or self.target.met

    @property
    def fallback_reason(self) -> str | None:
        return None if self.usable else self.target.reason

    def with_params(self, params: AnnParams) -> BuildMeta:
        return replace(self, params=params)

    @classmethod
    def from_json(cls, data: dict) -> BuildMeta:
        """The metadata of an index file's ``.json`` (any version's; see the module)."""
        interval = data.get("recall_interval")
        target = data.get("target")
        return cls(
            library=data.get("library", ""),
            params=AnnParams.from_json(data.get("params", {})),
            rows=int(data["rows"]) if "rows" in data else -1,
            build_seconds=float(data.get("build_seconds", 0.0)),
            name=data.get("name"),
            generation=data.get("generation"),
            nlist=data.get("nlist"),
            recall_at_10=float(data.get("recall_at_10", 0.0)),
            recall_interval=tuple(interval) if interval is not None else None,
            recall_queries=int(data.get("recall_queries", 0)),
            query_ms=data.get("query_ms"),
            exact_query_ms=data.get("exact_query_ms"),
            target=Target.from_json(target) if target is not None else None,
            index_bytes=data.get("index_bytes"),
        )

    def to_json(self) -> dict:
        """The ``.json`` beside the index: the keys in the order indexes always had them;
        the keys of a targeted build only with a target, ``nlist`` only for IVF. (An index of
        a model without rows now writes a targeted build's every key, as null or empty,
        where earlier versions left some out: every version reads both.)"""
        out: dict = {
            "library": self.library,
            "params": asdict(self.params),
            "name": self.name,
            "generation": self.generation,
            "rows": self.rows,
        }
        if self.nlist is not None:
            out["nlist"] = self.nlist
        out["build_seconds"] = self.build_seconds
        out["recall_at_10"] = self.recall_at_10
        if self.target is not None:
            interval = self.recall_interval
            out["recall_interval"] = list(interval) if interval is not None else None
        out["recall_queries"] = self.recall_queries
        if self.target is not None or self.query_ms is not None:
            out["query_ms"] = self.query_ms
        if self.target is not None:
            out["exact_query_ms"] = self.exact_query_ms
            out["target"] = self.target.to_json()
        if self.index_bytes is not None:
            out["index_bytes"] = self.index_bytes
        return out


@dataclass(frozen=True)
class Measured:
    """What a build measured of its index (:mod:`.tuning`): the :class:`BuildMeta` fields
    it sets."""

    recall_at_10: float
    recall_queries: int
    recall_interval: tuple[float, float] | None = None
    query_ms: float | None = None
    exact_query_ms: float | None = None
    target: Target | None = None

    def into(self, meta: BuildMeta) -> BuildMeta:
        """``meta`` with these measurements."""
        return replace(meta, **{f.name: getattr(self, f.name) for f in fields(self)})
