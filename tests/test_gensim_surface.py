"""Every public read-only name of gensim's own KeyedVectors works on RedisKeyedVectors
with gensim's result.

The test enumerates gensim's public names (the class's and a loaded instance's), so a
method a future gensim adds fails here until it is handled: given a parity check in
CALLS, or listed in WRITES with the reason it does not apply to a read-only model.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from gensim.models import KeyedVectors

from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays

from .helpers import gensim_data

# Mutators, file I/O and building a model: a model served from Redis is read-only
# (written by `vecserve load`), so these are deliberately absent.
WRITES = {
    "add_lifecycle_event",
    "add_vector",
    "add_vectors",
    "allocate_vecattrs",
    "fill_norms",
    "init_sims",
    "intersect_word2vec_format",
    "load",
    "load_word2vec_format",
    "resize_vectors",
    "save",
    "save_word2vec_format",
    "set_vecattr",
    "sort_by_descending_frequency",
    "unit_normalize_all",
}
# Names gensim 4 removed: reading them raises AttributeError there, and here too.
REMOVED = {"index2entity", "index2word", "vectors_norm", "vocab"}


def _same(got, want):
    if isinstance(want, np.ndarray):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-6)
    elif isinstance(want, (list, tuple)) and want and isinstance(want[0], tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            for x, y in zip(g, w, strict=True):
                assert x == (pytest.approx(y, rel=1e-5) if isinstance(y, float) else y)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _same(got[k], want[k])
    else:
        assert got == want


def _analogies(tmp_path, m) -> str:
    words = m.index_to_key
    path = tmp_path / "analogies.txt"
    path.write_text(f": section\n{words[0]} {words[1]} {words[2]} {words[3]}\n")
    return str(path)


def _pairs(tmp_path, m) -> str:
    words = m.index_to_key
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{words[i]}\t{words[i + 1]}\t{i}.0\n" for i in range(6)))
    return str(path)


a, b, c, d = "government", "Government", "police", "court"
CALLS = {
    "closer_than": lambda m, t: m.closer_than(a, c),
    "cosine_similarities": lambda m, t: m.cosine_similarities(m[a], np.stack([m[b], m[c]])),
    "distance": lambda m, t: m.distance(a, b),
    "distances": lambda m, t: m.distances(a, [b, c]),
    "doesnt_match": lambda m, t: m.doesnt_match([a, b, c, d]),
    "evaluate_word_analogies": lambda m, t: m.evaluate_word_analogies(_analogies(t, m))[0],
    "evaluate_word_pairs": lambda m, t: tuple(m.evaluate_word_pairs(_pairs(t, m))[0]),
    "expandos": lambda m, t: m.expandos,
    "get_index": lambda m, t: m.get_index(c),
    "get_mean_vector": lambda m, t: m.get_mean_vector([a, c]),
    "get_normed_vectors": lambda m, t: m.get_normed_vectors(),
    "get_vecattr": lambda m, t: m.get_vecattr(c, "count"),
    "get_vector": lambda m, t: m.get_vector(c, norm=True),
    "has_index_for": lambda m, t: (m.has_index_for(c), m.has_index_for("qqqzz")),
    "index_to_key": lambda m, t: m.index_to_key,
    "key_to_index": lambda m, t: m.key_to_index,
    "lifecycle_events": lambda m, t: None,  # a log of how the object was made: no parity
    "log_accuracy": lambda m, t: m.log_accuracy({"section": "s", "correct": [1], "incorrect": []}),
    "log_evaluate_word_pairs": lambda m, t: m.log_evaluate_word_pairs(
        (0.5, 0.1), (0.4, 0.2), 0.0, "pairs.tsv"
    ),
    "mapfile_path": lambda m, t: m.mapfile_path,
    "most_similar": lambda m, t: m.most_similar(positive=[a, c], negative=[d], topn=5),
    "most_similar_cosmul": lambda m, t: m.most_similar_cosmul(positive=[a, c], topn=5),
    "most_similar_to_given": lambda m, t: m.most_similar_to_given(a, [b, c, d]),
    "n_similarity": lambda m, t: m.n_similarity([a, b], [c, d]),
    "next_index": lambda m, t: m.next_index,
    "norms": lambda m, t: m.norms if m.norms is not None else np.linalg.norm(m.vectors, axis=1),
    "rank": lambda m, t: m.rank(a, c),
    "rank_by_centrality": lambda m, t: m.rank_by_centrality([a, b, c, d]),
    "relative_cosine_similarity": lambda m, t: m.relative_cosine_similarity(a, b),
    "similar_by_key": lambda m, t: m.similar_by_key(c, topn=4),
    "similar_by_vector": lambda m, t: m.similar_by_vector(m[c], topn=4),
    "similar_by_word": lambda m, t: m.similar_by_word(c, topn=4),
    "similarity": lambda m, t: m.similarity(a, c),
    "similarity_unseen_docs": lambda m, t: _raises(NotImplementedError, m.similarity_unseen_docs),
    "vector_size": lambda m, t: m.vector_size,
    "vectors": lambda m, t: m.vectors,
    "vectors_for_all": lambda m, t: m.vectors_for_all([c, a, "qqqzz"]).vectors,
    "wmdistance": lambda m, t: _raises((ImportError,), m.wmdistance, [a, c], [b, d]),
    "word_vec": lambda m, t: _deprecated(m.word_vec, c),
    "words_closer_than": lambda m, t: _deprecated(m.words_closer_than, a, c),
}


def _deprecated(fn, *args):
    with pytest.warns(DeprecationWarning, match="Call to deprecated"):
        return fn(*args)


def _raises(exc, fn, *args):
    try:
        fn(*args)
    except exc as e:
        return type(e).__name__
    return "returned"


def _public_names() -> set[str]:
    kv = KeyedVectors.load_word2vec_format(gensim_data("lee_fasttext.vec"))
    names = {n for n in dir(KeyedVectors) if not n.startswith("_")}
    return names | {n for n in vars(kv) if not n.startswith("_")}


def test_every_public_name_is_handled():
    unhandled = sorted(_public_names() - WRITES - REMOVED - set(CALLS))
    assert unhandled == [], "new gensim names: add a parity check or a reason to skip"


@pytest.fixture(scope="module")
def pair(redis_url, tmp_path_factory):
    from vecserve.store import Store

    kv = KeyedVectors.load_word2vec_format(gensim_data("lee_fasttext.vec"))
    store = Store.from_url(redis_url)
    load_arrays(kv.index_to_key, kv.vectors, name="SURFACE", store=store)
    rkv = RedisKeyedVectors("SURFACE", store=store, cache_dir=tmp_path_factory.mktemp("snap"))
    yield kv, rkv
    rkv.close()
    store.client.flushall()
    store.close()


@pytest.mark.parametrize("name", sorted(CALLS))
def test_read_only_name_equals_gensim(pair, tmp_path, name):
    kv, rkv = pair
    try:
        import ot  # noqa: F401

        if name == "wmdistance":
            assert rkv.wmdistance([a, c], [b, d]) == pytest.approx(kv.wmdistance([a, c], [b, d]))
            return
    except ImportError:
        pass
    want = CALLS[name](kv, tmp_path)
    got = CALLS[name](rkv, tmp_path)
    _same(got, want)


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_removed_names_raise_attribute_error_as_in_gensim(pair, name):
    kv, rkv = pair
    with pytest.raises(AttributeError):
        getattr(kv, name)
    with pytest.raises(AttributeError):
        getattr(rkv, name)


def test_static_helpers_are_gensims_own():
    for name in ("log_accuracy", "log_evaluate_word_pairs"):
        assert isinstance(inspect.getattr_static(RedisKeyedVectors, name), staticmethod)


# -- empty and None arguments: gensim's errors, on both clients and both paths ------------

EMPTY = {
    "most_similar([])": lambda m: m.most_similar([]),
    "most_similar(None)": lambda m: m.most_similar(None),
    "most_similar()": lambda m: m.most_similar(),
    "most_similar(positive=[], negative=[])": lambda m: m.most_similar(positive=[], negative=[]),
    "most_similar([], topn=None)": lambda m: m.most_similar([], topn=None),
    "most_similar(empty 2-d array)": lambda m: m.most_similar(np.empty((0, 10), np.float32)),
    "most_similar([], topn=0)": lambda m: m.most_similar([], topn=0),
    "most_similar_cosmul([])": lambda m: m.most_similar_cosmul([]),
    "most_similar_cosmul(None)": lambda m: m.most_similar_cosmul(None),
    "most_similar_cosmul([], [c])": lambda m: m.most_similar_cosmul([], [c]),
    "most_similar_cosmul([], ['qqqzz'])": lambda m: m.most_similar_cosmul([], ["qqqzz"]),
    "similar_by_vector(None)": lambda m: m.similar_by_vector(None),
    "get_mean_vector([])": lambda m: m.get_mean_vector([]),
    "n_similarity([], [c])": lambda m: m.n_similarity([], [c]),
    "n_similarity([c], [])": lambda m: m.n_similarity([c], []),
    "doesnt_match([])": lambda m: m.doesnt_match([]),
    "rank_by_centrality([])": lambda m: m.rank_by_centrality([]),
    "most_similar_to_given(a, [])": lambda m: m.most_similar_to_given(a, []),
}


def _outcome(call, m):
    """``("returned", value)`` or ``("raised", the exception)``."""
    try:
        return ("returned", call(m))
    except Exception as exc:  # the parity is in which exception and what it says
        return ("raised", exc)


@pytest.fixture(scope="module")
def service(redis_url, tmp_path_factory):
    """The real HTTP service on the SURFACE model, under uvicorn, for the whole module."""
    pytest.importorskip("uvicorn")
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    from .api_support import running_app

    dir_ = tmp_path_factory.mktemp("service")
    settings = Settings(redis_url=redis_url, cache_dir=dir_, model_ttl=0)
    with running_app(create_app(settings)) as url:
        yield url


@pytest.mark.parametrize("client", ["sync", "async"])
@pytest.mark.parametrize("path", ["snapshot", "service"])
@pytest.mark.parametrize("case", sorted(EMPTY))
def test_empty_arguments_raise_as_in_gensim(pair, service, redis_url, tmp_path, client, path, case):
    """Empty and None query arguments: gensim's exception (type and message), or its
    answer where it answers (``topn=0``), from both clients, whether the local
    snapshot answers or the HTTP service does."""
    from .kv_support import close_all, make_kv

    kv, _ = pair
    want = _outcome(EMPTY[case], kv)
    options = {"similarity_url": service} if path == "service" else {}
    m = make_kv(client, "SURFACE", redis_url=redis_url, cache_dir=tmp_path, **options)
    try:
        got = _outcome(EMPTY[case], m)
    finally:
        if client == "sync":
            m.close()
        close_all()
    if want[0] == "returned":
        assert got[0] == "returned", got
        _same(got[1], want[1])
        return
    assert got[0] == "raised", got
    # gensim's type (or a vecserve subclass: QueryRejected is a ValueError, TokenNotFound
    # a KeyError) and gensim's message, unless it is Python's own (a TypeError's)
    assert isinstance(got[1], type(want[1])), (got, want)
    assert isinstance(want[1], TypeError) or got[1].args[:1] == want[1].args[:1], (got, want)
