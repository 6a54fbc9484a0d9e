"""The store: the one place that knows Redis key names (see :mod:`.layout`).

- :mod:`.layout` — key names, the metadata records (:class:`ModelInfo`,
  :class:`LoadState`), the vocabulary blob encoding, and the translation of redis-py's
  errors into :class:`~vecserve.errors.StoreUnavailable` (the one boundary for it).
- :mod:`.registry` — :class:`Store`: the model registry, reads of vectors and
  vocabularies, deletes; works with ``redis.Redis`` and ``redis.RedisCluster`` alike.
- :mod:`.facts` — :class:`~.facts.Witness`: what a load saw of the server's INFO, the
  commit's proof that no acknowledged key left it.
- :mod:`.lease` — :class:`Lease`: one loader per model at a time.
- :mod:`.pins` — :class:`Pin`: a reader's lease on one generation; the retired
  generations a model keeps (pinned, or for rollback), their collection, rollback.
- :mod:`.session` — :func:`begin_load` and :class:`LoadSession`: writes one generation
  batch by batch, then commits it; :func:`drop_load`, :func:`cleanup_loads`.

Imports go one way: layout <- registry <- facts, lease <- pins <- session.

Visibility: readers look a model up in ``vecserve:models`` only, so a load is invisible
until :meth:`LoadSession.commit` writes that one hash field. Every load writes a new
generation; its prefix ``P`` is the model name itself when no other generation of the
name uses it (so a model loaded once lives at exactly ``NAME:token``), and
``NAME~<generation>`` otherwise. Re-loading therefore writes next to the live generation,
flips the registry in one ``HSET``, then retires the old one, deleted at once unless a
pin holds it or it is kept for rollback (:mod:`.pins`): readers never see a mix.

>>> store = Store.from_url("redis://localhost:6379/0")     # doctest: +SKIP
>>> [m.name for m in store.list_models()]                  # doctest: +SKIP
['GOOGLE_W2V']
"""

from .layout import (
    DEFAULT_CLUSTER_BUCKETS,
    EVENTS,
    LOADS,
    MODELS,
    NS,
    LoadState,
    ModelInfo,
    validate_model_name,
)
from .lease import Lease
from .pins import Pin
from .registry import MemoryFacts, RowCheck, Store
from .session import LoadSession, begin_load, cleanup_loads, drop_load

__all__ = [
    "DEFAULT_CLUSTER_BUCKETS",
    "EVENTS",
    "LOADS",
    "MODELS",
    "NS",
    "Lease",
    "LoadSession",
    "LoadState",
    "MemoryFacts",
    "ModelInfo",
    "Pin",
    "RowCheck",
    "Store",
    "begin_load",
    "cleanup_loads",
    "drop_load",
    "validate_model_name",
]
