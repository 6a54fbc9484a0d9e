"""The store: the one room that talks to Redis and knows its key names.

- :mod:`.keys` — every key name; :mod:`.records` — :class:`ModelInfo`,
  :class:`LoadState` and the vocabulary blob encoding; :mod:`.boundary` — redis-py's
  errors translated into ours (the one boundary); :mod:`.resp` — requests packed by
  hand, their replies read; :mod:`.lua` — the Lua scripts (``lua/*.lua``), read once.
- :mod:`.registry` — :class:`Store`, a facade over one mixin per concern: :mod:`.rows`
  (the generation-consistent read of rows and its hot paths), :mod:`.subword_rows`
  (fastText), :mod:`.vocabulary`, :mod:`.integrity` (:class:`RowCheck`, vocabulary
  hashes), :mod:`.remains` (generations nothing accounts for), :mod:`.deletion`,
  :mod:`.server` (server mode, :class:`MemoryFacts`, waiting for replicas).
- :mod:`.wire` — reads as steps (sans-I/O), driven on our own connections by
  :mod:`.syncwire` (redis-py) and :mod:`.asyncwire` (``redis.asyncio``); :mod:`.clients`
  — the asyncio client of an async reader, the cache's tracking connections.
- :mod:`.facts` — :class:`~.facts.Witness`: what a load saw of the server's INFO, the
  commit's proof that no acknowledged key left it.
- :mod:`.lease` — :class:`Lease`: one loader per model at a time.
- :mod:`.pins` — :class:`Pin`: a reader's lease on one generation;
  :mod:`.generations` — the retired generations a model keeps (pinned, or for
  rollback), their collection, rollback.
- :mod:`.loads` — :func:`begin_load` (fresh or resumed), :func:`cleanup_loads`;
  :mod:`.session` — :class:`LoadSession`: writes one generation batch by batch, then
  commits it (:mod:`.commit`); :func:`drop_load`.

Imports go one way: keys, records, boundary, resp, lua <- wire <- syncwire, asyncwire <-
clients, the mixins <- registry <- facts, lease <- generations <- pins, commit <- session
<- loads. Nothing outside the store imports redis (``embedded.py`` aside: it runs the
server).

Visibility: readers look a model up in ``vecserve:models`` only, so a load is invisible
until :meth:`LoadSession.commit` writes that one hash field. Every load writes a new
generation; its prefix ``P`` is the model name itself when no other generation of the
name uses it (so a model loaded once lives at exactly ``NAME:token``), and
``NAME~<generation>`` otherwise. Re-loading therefore writes next to the live generation,
flips the registry in one ``HSET``, then retires the old one, deleted at once unless a
pin holds it or it is kept for rollback (:mod:`.generations`): readers never see a mix.

>>> store = Store.from_url("redis://localhost:6379/0")     # doctest: +SKIP
>>> [m.name for m in store.list_models()]                  # doctest: +SKIP
['GOOGLE_W2V']
"""

from .keys import DEFAULT_CLUSTER_BUCKETS, EVENTS, LOADS, MODELS, NS, validate_model_name
from .lease import Lease
from .loads import begin_load, cleanup_loads
from .pins import Pin
from .records import LoadState, ModelInfo
from .registry import MemoryFacts, RowCheck, Store
from .session import LoadSession, drop_load

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
