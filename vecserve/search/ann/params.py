"""The parameters of an approximate index (:class:`AnnParams`) and the defaults the
module docstring of :mod:`vecserve.search.ann` explains."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ...errors import InvalidSetting

__all__ = ["DEFAULT_DTYPE", "DEFAULT_RECALL", "IVF_FROM_ROWS", "PROOF_EXTRA", "AnnParams", "kinds"]

#: Rows from which ``kind="auto"`` picks IVF over HNSW (see the package docstring).
IVF_FROM_ROWS = 100_000
#: The stored vectors' type of each kind unless told otherwise.
DEFAULT_DTYPE = {"ivf": "i8", "hnsw": "f16"}
#: Candidates an exact query through an IVF index re-scores beyond the ``w`` it answers:
#: enough that the rows within the stored scores' bound of the ``w``-th (1e-3 for float
#: rows, ~0.014 for int8 ones) are among them. Real 219k x 300 vectors' neighbourhoods
#: are dense: int8 rows prove 52 of 200 answers with 64, 190 with 1,024 (float16: 200).
PROOF_EXTRA = {"float": 64, "i8": 1024}
#: The recall@10 an index is built to meet unless told otherwise.
DEFAULT_RECALL = 0.95


@dataclass(frozen=True)
class AnnParams:
    """Index parameters. ``kind``: ``"ivf"``, ``"hnsw"`` or ``"auto"`` (IVF for models of
    at least :data:`IVF_FROM_ROWS` rows, HNSW below).

    HNSW (usearch names): ``connectivity``, ``expansion_add``, ``expansion_search``,
    ``dtype`` (default f16: half the graph's vector copy). IVF: ``nlist`` lists (0: one
    per ~512 rows, at most 4096), ``nprobe`` lists scanned a query, ``dtype`` the stored
    rows' type (default ``i8``: a quarter of float32's bytes scanned; or ``f16``,
    ``f32``). Both: ``oversample`` x (topn + excluded) candidates re-scored exactly.

    The recall target: ``recall`` (default 0.95), recall@10 the build makes the index
    meet on the model's own queries (``recall_queries`` to choose the setting and as
    many held aside to measure it, :mod:`vecserve.search.recall`): it sets ``nprobe``
    (IVF) or ``expansion_search`` (HNSW) to the least that meets it. When the least
    that meets it answers slower than ``latency_budget`` x an exact query (or 2 ms,
    whichever is more), or nothing meets it, the index says so and approximate queries
    are answered exactly. ``recall=None``: the fixed ``nprobe`` / ``expansion_search``.

    >>> AnnParams().resolved(3_000_000).filename, AnnParams().resolved(5_000).filename
    ('ann-ivf-i8.ivf', 'ann-usearch-f16-M16-ef128.usearch')
    """

    kind: str = "auto"
    connectivity: int = 16
    expansion_add: int = 128
    expansion_search: int = 128
    dtype: str = ""  # the kind's default: DEFAULT_DTYPE
    nlist: int = 0
    nprobe: int = 16
    oversample: int = 2
    recall_queries: int = 500
    recall: float | None = DEFAULT_RECALL
    latency_budget: float = 0.2

    def __post_init__(self) -> None:
        if self.kind not in ("auto", "ivf", "hnsw"):
            raise InvalidSetting(f"unknown ANN index kind {self.kind!r} (auto, ivf or hnsw)")
        if self.recall is not None and not 0 < self.recall <= 1:
            raise InvalidSetting(f"recall target {self.recall} is not in (0, 1]")

    @classmethod
    def from_json(cls, data: dict) -> AnnParams:
        """The parameters an index's metadata names. An index's file predates ``kind``
        when it names none (HNSW was the only kind then); a name this version does not
        know is ignored (the file's behaviour is its stored settings)."""
        known = {f.name for f in fields(cls)}
        return cls(**{"kind": "hnsw", **{k: v for k, v in data.items() if k in known}})

    def resolved(self, rows: int) -> AnnParams:
        """These parameters for a model of ``rows`` rows: a concrete ``kind`` and ``dtype``."""
        kind = self.kind if self.kind != "auto" else "ivf" if rows >= IVF_FROM_ROWS else "hnsw"
        return replace(self, kind=kind, dtype=self.dtype or DEFAULT_DTYPE[kind])

    @property
    def setting_name(self) -> str:
        """The search effort a recall target sets: ``nprobe`` (IVF), ``expansion_search``."""
        return "nprobe" if self.kind == "ivf" else "expansion_search"

    @property
    def tag(self) -> str:
        # a recall target other than the default is its own file: the settings differ
        target = "" if self.recall == DEFAULT_RECALL else f"-r{self.recall or 'fixed'}"
        if self.kind == "ivf":
            return (f"ivf-nlist{self.nlist}" if self.nlist else "ivf") + f"-{self.dtype}{target}"
        return f"usearch-{self.dtype}-M{self.connectivity}-ef{self.expansion_add}{target}"

    @property
    def filename(self) -> str:
        """The index file's name in the snapshot directory (``resolved`` parameters)."""
        return f"ann-{self.tag}.{'ivf' if self.kind == 'ivf' else 'usearch'}"

    @property
    def library(self) -> str:
        return "vecserve IVF (NumPy/BLAS)" if self.kind == "ivf" else "usearch (HNSW)"


def kinds(params: AnnParams) -> list[AnnParams]:
    """The concrete parameters ``params`` may resolve to (``auto``: IVF, then HNSW).

    >>> [p.filename for p in kinds(AnnParams())]
    ['ann-ivf-i8.ivf', 'ann-usearch-f16-M16-ef128.usearch']
    """
    names = ["ivf", "hnsw"] if params.kind == "auto" else [params.kind]
    return [replace(params, kind=k, dtype=params.dtype or DEFAULT_DTYPE[k]) for k in names]
