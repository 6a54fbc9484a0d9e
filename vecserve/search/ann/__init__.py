"""Opt-in approximate nearest neighbours over a similarity snapshot: an inverted file
(IVF, :mod:`vecserve.search.ivf`) for large models, an HNSW graph (usearch) for small ones.

Which index: ``AnnParams(kind="auto")`` (the default) builds an IVF index for models of
at least :data:`IVF_FROM_ROWS` (100,000) rows and an HNSW graph below; ``kind="ivf"`` or
``"hnsw"`` forces one. On large clustered models IVF builds several times faster than an
HNSW graph and, scanning a few lists, finds the exact top 10 where HNSW's recall stays
below it. On small models HNSW builds in under a minute, answers a little faster and
keeps a small file: HNSW is the choice there. On uniform random data
(no structure to find) no index of either kind is both fast and exact: IVF's recall
grows with ``nprobe`` roughly as the share of rows scanned. BENCHMARKS.md ("Similarity
search: the IVF index") holds the figures.

Why our own IVF, not faiss-cpu's: faiss's IndexIVFFlat finds the same candidates but
scans no faster, its 8-bit scalar-quantised lists scan slower, IVF-PQ loses more recall
than re-ranking wins back, and faiss-cpu is a large dependency bringing its own OpenBLAS
and OpenMP runtime. The NumPy IVF runs on the BLAS every install has, and its one file
is memory-mapped and shared by every worker like the snapshot.

Why usearch for HNSW: of the well-kept HNSW libraries that install here (usearch,
faiss-cpu, hnswlib), usearch ships manylinux wheels for every CPython we support, is
small, and serves an index straight from a memory-mapped file
(``Index.restore(path, view=True)``).

Both kinds are built once per model generation, cached on local disk next to the exact
snapshot (``ann-<tag>.ivf`` / ``ann-<tag>.usearch`` and a ``.json`` of metadata), built
by one process among all sharing the cache dir (an ``flock``), shared through the page
cache by every uvicorn worker and reused after a restart. A damaged file is refused with
a one-line reason and rebuilt by the next process that builds indexes.

How a query runs: the query's unit mean vector is built exactly as gensim does
(:meth:`SimilarityIndex.query_vector`), the index returns ``oversample x (topn +
excluded)`` candidates, and those are re-scored exactly against the float32 snapshot --
so the scores returned are gensim's cosines, only the candidate set is approximate.

Quality is a target, not a knob: each build sets the index's search effort (``nprobe``
for IVF, ``expansion_search`` for HNSW) to the least that answers the model's own
queries at recall@10 >= ``AnnParams.recall`` (default 0.95; recall@10 is the share of
the exact top 10 that the approximate top 10 finds), chosen on one set of sampled rows
and measured on another held aside (:mod:`vecserve.search.recall`). The estimate, its 95%
interval and the setting chosen are stored with the index and shown in ``GET
/models/{name}`` and ``vecserve models info``. Where that least setting is no faster
than ``latency_budget`` x an exact query (uniform noise: nearly every list), the index
says so and approximate queries are answered exactly (:attr:`AnnIndex.usable`); an IVF
index still speeds up exact queries (:meth:`AnnIndex.exact_most_similar`).

>>> import numpy as np
>>> from vecserve.search.snapshot import SimilarityIndex
>>> rng = np.random.default_rng(0)
>>> sim = SimilarityIndex.from_arrays([f"w{i}" for i in range(500)],
...                                   rng.standard_normal((500, 16)).astype(np.float32))
>>> ann = AnnIndex.build(sim, recall_queries=50)
>>> ann.recall_at_10 >= 0.95, ann.most_similar(sim, ["w0"], [], topn=1) == sim.most_similar(
...     "w0", topn=1)
(True, True)
>>> fixed = AnnParams(kind="ivf", nlist=8, nprobe=8, recall=None)  # every list: exact
>>> ivf = AnnIndex.build(sim, params=fixed)
>>> ivf.recall_at_10, ivf.most_similar(sim, ["w0"], [], 3) == sim.most_similar("w0", topn=3)
(1.0, True)

Uniform noise has no structure an index could use: no setting meets the target cheaply.

>>> noise = AnnIndex.build(sim, params=AnnParams(kind="ivf", nlist=8))
>>> noise.usable, noise.fallback_reason
(False, 'recall@10 0.95 needs nprobe >= 6 of 8 lists (75% of the rows): no faster than...')

The package, a module a concept: :mod:`.params` (:class:`AnnParams`), :mod:`.meta` (the
typed build metadata kept beside each index), :mod:`.build` (the HNSW and IVF builders),
:mod:`.tuning` (the recall target), :mod:`.index` (:class:`AnnIndex`: build, open,
query), :mod:`.disk` (what processes sharing a cache dir see: progress, the build lock,
:func:`disk_status`), :mod:`.manager` (:class:`AnnManager`) and :mod:`.prepare`
(:func:`build_for`, :func:`build_model`: what a generation's search needs, readied in
one place for ``vecserve load --ann`` and the service's preload). Import from here.
"""

from .build import BUILD_CHUNK
from .disk import BuildLock, BuildProgress, disk_status
from .index import AnnIndex
from .manager import WAIT_POLL, AnnManager
from .meta import BuildMeta, Target
from .params import DEFAULT_DTYPE, DEFAULT_RECALL, IVF_FROM_ROWS, PROOF_EXTRA, AnnParams
from .prepare import Built, build_for, build_model
from .tuning import EF_LADDER, MAX_OVERSAMPLE, recall_at_k

__all__ = [
    "BUILD_CHUNK",
    "DEFAULT_DTYPE",
    "DEFAULT_RECALL",
    "EF_LADDER",
    "IVF_FROM_ROWS",
    "MAX_OVERSAMPLE",
    "PROOF_EXTRA",
    "WAIT_POLL",
    "AnnIndex",
    "AnnManager",
    "AnnParams",
    "BuildLock",
    "BuildMeta",
    "BuildProgress",
    "Built",
    "Target",
    "build_for",
    "build_model",
    "disk_status",
    "recall_at_k",
]
