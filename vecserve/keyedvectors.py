"""RedisKeyedVectors: gensim's ``KeyedVectors`` API over a model stored in Redis.

Change one line of a worker and keep its numbers::

    kv = KeyedVectors.load_word2vec_format("GoogleNews-vectors-negative300.bin", binary=True)
    kv = RedisKeyedVectors("GOOGLE_W2V", redis_url="redis://redis:6379/0")

How each kind of call is answered:

- **Lookups** (``kv[w]``, ``kv[words]``, ``get_vector``, ``in``, ``similarity``,
  ``n_similarity``, ``distance``, ``distances(w, others)``, ``get_mean_vector``,
  ``most_similar_to_given``, ``rank_by_centrality``, ``doesnt_match``,
  ``vectors_for_all``, ``wmdistance``): the needed vectors are fetched in ONE round trip
  (one ``MGET``, plus the model's registry entry in the same pipeline so a re-load is
  noticed at once; on a cluster one ``MGET`` per hash-tag bucket), then gensim's own
  arithmetic runs on them, so results are bit-identical to gensim's on the same vectors.
- **Metadata** (``len``, ``vector_size``, ``index_to_key``, ``key_to_index``,
  ``get_index``, ``get_vecattr(w, "count")``): from the registry; the vocabulary and
  counts are fetched once per generation, lazily, on first use.
- **Whole-matrix calls** (``most_similar`` in all its forms, ``most_similar_cosmul``,
  ``similar_by_word``/``_key``/``_vector``): if ``similarity_url`` (or
  ``$VECSERVE_SIMILARITY_URL``) is set they are sent to the vecserve HTTP service (the
  contract is in :mod:`vecserve.search.snapshot`), which holds the matrix once for all
  workers. Otherwise, and always for ``closer_than``, ``rank``, ``distances(w)`` and
  the evaluations, a local :class:`~vecserve.search.snapshot.SimilarityIndex` is used: a
  memory-mapped snapshot of the current generation, streamed out of Redis in bounded
  chunks once per generation into ``$VECSERVE_CACHE_DIR`` and shared by every process
  of the machine through the page cache.
- **Evaluation** (``evaluate_word_analogies``, ``evaluate_word_pairs``): gensim's own
  implementation runs on a zero-copy gensim view of the snapshot's first
  ``restrict_vocab`` rows. Both gensim methods only ever read those rows (``ok_vocab`` is
  ``index_to_key[:restrict_vocab]`` and ``most_similar`` is called with the same
  ``restrict_vocab``), so the result is exactly gensim's.

Missing words raise ``KeyError`` (:class:`~vecserve.errors.TokenNotFound`, with gensim's
message) unless ``missing="zeros"`` or ``"skip"`` is chosen for the instance or a call;
:meth:`RedisKeyedVectors.get_vectors` also returns the mask of found words.

Generations and the read path: every call reads through the model's reader core
(:mod:`vecserve.reader`), the same one the HTTP service uses. Every fetch carries the
registry entry in the same round trip; if it changed, the batch is re-read from the new
generation (the MGET runs before the HGET, so an unchanged entry proves the values came
from one live generation). Metadata (``len``, ``vector_size``) trusts the entry for
``model_ttl`` seconds (``$VECSERVE_MODEL_TTL``, default 1.0). With the cache on,
invalidations of the registry key flush it (see :mod:`vecserve.cache`). ``kv.pin()``
gives a view that reads the generation live at that moment through reloads, held by a
lease in Redis (:mod:`vecserve.store.pins`) until the view is closed.

asyncio: :class:`AsyncRedisKeyedVectors` has the same calls, answers, errors and cache,
with ``await`` on each call that does I/O (``await kv.get_vectors(words)``,
``await kv["king"]``, ``await kv.most_similar("king")``). Both classes drive the same
steps (:mod:`vecserve.store.wire`): one over redis-py, the other over ``redis.asyncio``.

Processes and threads: connections, cache and snapshot handles are created lazily in the
process that uses them; a child forked after construction (Celery prefork) drops the
inherited ones without closing their sockets and makes its own. All methods are
thread-safe; cache hits take no lock.

>>> kv = RedisKeyedVectors("GOOGLE_W2V", redis_url="redis://localhost:6379/0")  # doctest: +SKIP
>>> kv[["king", "queen"]].shape                                               # doctest: +SKIP
(2, 300)
"""

from __future__ import annotations

from .asyncvectors import AsyncRedisKeyedVectors
from .syncvectors import RedisKeyedVectors

# The two clients live one module each (syncvectors.py, asyncvectors.py); this module is
# their public face, the import path the design card, the docs and users name.
__all__ = ["AsyncRedisKeyedVectors", "RedisKeyedVectors"]
