"""Exact similarity search over one model generation: gensim's answers, from a local snapshot.

The questions that need the whole matrix (``most_similar`` and friends) are answered by a
:class:`SimilarityIndex`: a snapshot of one committed generation, built by streaming the
vocabulary and the vectors out of Redis in bounded chunks into a memory-mapped ``.npy``
file on local disk, then searched exactly with BLAS.

Public API (stable; the HTTP service codes against it)::

    SimilarityIndex.build(store, info, *, cache_dir=None, chunk=20_000) -> SimilarityIndex
    SimilarityIndex.from_arrays(index_to_key, vectors, *, name="", generation=0)
    index.name, .generation, .dim, .count, .index_to_key, .key_to_index, .vectors, .norms
    index.get_index(key, default=None) / has_index_for(key) / key in index / len(index)
    index.most_similar(positive=None, negative=None, topn=10, clip_start=0, clip_end=None,
                       restrict_vocab=None)
    index.most_similar_cosmul(positive=None, negative=None, topn=10, restrict_vocab=None)
    index.similar_by_word(word, topn=10, restrict_vocab=None)   (= similar_by_key)
    index.similar_by_vector(vector, topn=10, restrict_vocab=None)
    index.distances(word_or_vector, other_words=()) / closer_than(k1, k2) / rank(k1, k2)
    index.most_similar_batch(queries) -> list of results, one matrix multiply per group
    index.as_keyedvectors(limit=None) -> gensim KeyedVectors over the memory map (no copy)

    IndexManager(store, *, cache_dir=None)
    manager.get(name, *, info=None) -> SimilarityIndex of the CURRENT generation
    manager.invalidate(name=None); manager.close()

What is stored, and why not a unit-norm matrix: the snapshot keeps the decoded vectors
exactly as Redis holds them (``vectors``, float32) plus their L2 norms (``norms``,
computed as gensim's ``fill_norms`` does). Every query then runs gensim's own arithmetic
(``dot(vectors[clip_start:clip_end], mean) / norms[clip_start:clip_end]``, then
``matutils.argsort``) on the same slice shape, so scores AND the order of ties are
bit-identical to gensim's on the same vectors. A pre-normalised matrix would be 0-1 ulp
off and reorder near-ties. The top n is found by :mod:`vecserve.search.exact` (one
streaming pass over the scores, gensim's ``argsort`` where ties decide), and
``most_similar_batch`` answers many queries with one blocked ``sgemm``, each answer
proven equal to the single query's (scores to the bit) or computed the single way.

gensim quirks kept for parity: ``most_similar_cosmul`` ignores ``restrict_vocab`` (as
gensim 4.4 does); a missing word raises ``KeyError("Key 'w' not present in vocabulary")``
from ``most_similar`` and ``KeyError("Key 'w' not present")`` elsewhere; ``int`` keys are
positions in the vocabulary.

On-disk cache: ``$VECSERVE_CACHE_DIR`` or ``<platform user cache dir>/vecserve``, one
directory per generation named ``<model>.g<generation>.<sha/created tag>`` holding
``vectors.npy``, ``norms.npy`` and ``vocab.idx`` (and, once a large batch needed them,
the int8 rows of exact batches: :mod:`vecserve.search.i8rows`). It is built in a temporary directory
and renamed into place (atomic), so concurrent builders are safe and a restart reuses
it; a new generation has a new name, so it is rebuilt; older generations' directories
of the same model are removed once a newer one is in place.

Memory shared by processes: vectors, norms and the vocabulary are all memory-mapped, so
every API worker serving the same generation shares their pages. The vocabulary
(``vocab.idx``, :mod:`vecserve.search.vocab`) holds the words' UTF-8 bytes, their offsets
and an open-addressing hash table of rows: ``index_to_key`` and ``key_to_index`` are
read-only views over it (a :class:`~vecserve.search.vocab.SharedVocab` and its mapping), not
a per-process ``list`` and ``dict``. A missing or damaged ``vocab.idx`` is refused in one
logged line and rewritten from Redis; a damaged vectors or norms file has the whole
snapshot rebuilt.

The HTTP service answers its most_similar routes from this class (through
:mod:`vecserve.search.planner`); their JSON contract is documented where HTTP lives,
:mod:`vecserve.service.routes_similarity`.

>>> import numpy as np
>>> index = SimilarityIndex.from_arrays(["a", "b", "c"], np.eye(3, dtype=np.float32))
>>> index.most_similar("a", topn=1)
[('b', 0.0)]
"""

from __future__ import annotations

# ensure_list, mean_vector and split_weights: importable from here as before (they are
# search.arith's)
from ..arith import ensure_list as ensure_list
from ..arith import mean_vector as mean_vector
from ..arith import split_weights as split_weights
from ..exact import gensim_argsort
from .files import default_cache_dir, snapshot_dir
from .index import SimilarityIndex
from .manager import IndexManager

__all__ = [
    "IndexManager",
    "SimilarityIndex",
    "default_cache_dir",
    "gensim_argsort",
    "snapshot_dir",
]
