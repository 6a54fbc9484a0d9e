"""Word models (word2vec, fastText) embed text with the rule fitted at load.

The rule (case, phrases) is fitted from the vocabulary and recorded in the registry
entry; ``embed`` of a text equals gensim's ``get_mean_vector`` of the same tokens (its
defaults: rows unit-normalised first), fastText's unknown words through their n-grams.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from gensim.models import KeyedVectors
from gensim.models.fasttext import load_facebook_vectors

from vecserve.errors import NoTokenizer, TextRejected
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.loader import load_arrays, load_file
from vecserve.store.layout import MODELS
from vecserve.text.spec import TextSpec
from vecserve.text.tokenize import WordTokenizer

from . import text_support
from .helpers import gensim_data
from .text_support import corpus_head

st = text_support.st  # this module's store (text_support)
TEXTS = [
    "The king and the queen went to the river.",
    "A man, a woman and a child; the dog is not here!",
    "",
    "zzqx qqzz",
    "anarchism is a political philosophy that advocates stateless societies",
    "house music of the night ",
]


@pytest.fixture(scope="module")
def trained(st, redis_url, tmp_path_factory):
    """A real word2vec model: vecserve's trainer on 3 MB of wiki100m, committed as T_W2V
    (through the loader, which records its word rule) and saved for gensim."""
    tmp = tmp_path_factory.mktemp("w2v")
    (tmp / "corpus.txt").write_bytes(corpus_head(3_000_000))
    run = [sys.executable, "-m", "vecserve.cli", "train", str(tmp / "corpus.txt")]
    run += ["--key", "T_W2V", "--size", "32", "--epochs", "1", "--min-count", "3"]
    run += ["--save", str(tmp / "w2v.txt"), "--text", "--redis-url", redis_url]
    done = subprocess.run(run, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    return KeyedVectors.load_word2vec_format(str(tmp / "w2v.txt"))


def test_word2vec_embed_is_gensims_mean_of_the_same_tokens(st, trained):
    ref = trained
    spec = TextSpec.from_json(st.get_model("T_W2V").text)
    assert spec.kind == "words" and spec.lowercase  # the vocabulary has no upper case
    tok = WordTokenizer(spec)
    with RedisKeyedVectors("T_W2V", store=st, cache=True) as kv:
        got = kv.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        tokens = tok.words(text)
        known = [t for t in tokens if t in ref.key_to_index]
        assert (got.used[i], got.unknown[i]) == (len(known), len(tokens) - len(known))
        if known:
            want = ref.get_mean_vector(known)  # pre_normalize=True, gensim's default
            assert np.abs(got.vectors[i] - want).max() < 1e-6
        else:
            assert not got.vectors[i].any()  # empty or all-unknown: the zero vector
    assert tok.words(TEXTS[0])[:3] == ["the", "king", "and"]  # lowercased
    assert got.used[0] >= 8 and got.unknown[3] == 2  # "." and the made-up words unknown


def _same_neighbours(got, want, tol=1e-5):
    """gensim's answer: the same scores, the same words wherever the scores are apart."""
    gs, ws = np.array([x[1] for x in got]), np.array([x[1] for x in want])
    assert len(got) == len(want) and np.abs(gs - ws).max() < tol, (got, want)
    for i, ((gw, _), (ww, _)) in enumerate(zip(got, want, strict=True)):
        near = np.abs(ws - ws[i]) < tol  # a tie may come in either order
        assert gw == ww or gw in {w for (w, _), n in zip(want, near, strict=True) if n}


def test_a_text_is_a_vector_in_similarity_queries(st, trained, tmp_path):
    """``Text("...")`` where gensim takes a vector: embedded by the model's rule, then
    the answer gensim gives for that mean vector; a plain str stays a word."""
    import asyncio

    from gensim import matutils

    from vecserve import AsyncRedisKeyedVectors, Text

    ref = trained
    tok = WordTokenizer(TextSpec.from_json(st.get_model("T_W2V").text))

    def mean(text):
        return ref.get_mean_vector([t for t in tok.words(text) if t in ref.key_to_index])

    a, b = "The king and the queen went to the river.", "a man and a woman in the city"
    va, vb = mean(a), mean(b)
    with RedisKeyedVectors("T_W2V", store=st, cache_dir=tmp_path) as kv:
        got = kv.most_similar(positive=[Text(a)], topn=10)
        _same_neighbours(got, ref.most_similar(positive=[va], topn=10))
        _same_neighbours(kv.most_similar(Text(a), topn=5), ref.most_similar(va, topn=5))
        _same_neighbours(
            kv.most_similar(positive=["king", (Text(a), 0.5)], negative=[Text(b)], topn=5),
            ref.most_similar(positive=["king", (va, 0.5)], negative=[vb], topn=5),
        )
        _same_neighbours(
            kv.most_similar_cosmul(positive=[Text(a)], negative=["man"], topn=5),
            ref.most_similar_cosmul(positive=[va], negative=["man"], topn=5),
        )
        [one, two] = kv.most_similar_batch([Text(a), {"positive": [Text(b)], "topn": 3}])
        _same_neighbours(one, got)
        _same_neighbours(two, ref.most_similar(vb, topn=3))
        sim = kv.similarity(Text(a), "king")
        assert abs(sim - np.dot(matutils.unitvec(va), matutils.unitvec(ref["king"]))) < 1e-6
        both = np.dot(matutils.unitvec(va), matutils.unitvec(vb))
        assert abs(kv.similarity(Text(a), Text(b)) - both) < 1e-6
        assert abs(kv.distance(Text(b), Text(a)) - (1 - both)) < 1e-6
        dists = kv.distances(Text(a), ["king", "queen"])
        assert np.abs(dists - ref.distances(va, ["king", "queen"])).max() < 1e-6
        # a str is a word, as in gensim: the same KeyError
        with pytest.raises(KeyError) as theirs:
            ref.most_similar("the king")
        with pytest.raises(KeyError) as ours:
            kv.most_similar("the king")
        assert str(ours.value) == str(theirs.value)
        with pytest.raises(TextRejected, match="'zzqx qqzz' has no token model 'T_W2V' knows"):
            kv.most_similar(positive=[Text("zzqx qqzz")])
        with pytest.raises(TextRejected, match="has no token"):
            kv.similarity(Text(""), "king")
        # in a batch, that text is its own query's error (the others answered)
        bad, good = kv.most_similar_batch([Text("zzqx"), Text(a)], return_exceptions=True)
        assert isinstance(bad, TextRejected)
        _same_neighbours(good, got)
        with pytest.raises(TextRejected) as exc:
            kv.most_similar_batch([Text(a), Text("zzqx")])
        assert "(query 1 of the batch of 2)" in exc.value.__notes__
        with kv.pin() as pinned:
            _same_neighbours(pinned.most_similar(positive=[Text(a)], topn=10), got)
            assert abs(pinned.similarity("king", Text(a)) - sim) < 1e-6

    async def run():
        async with AsyncRedisKeyedVectors("T_W2V", store=st, cache_dir=tmp_path) as akv:
            return await akv.most_similar(positive=[Text(a)]), await akv.similarity(Text(a), "king")

    near, asim = asyncio.run(run())
    _same_neighbours(near, got)
    assert abs(asim - sim) < 1e-6


def test_sif_pooling_weights_words_by_the_models_counts(st, trained):
    info = st.get_model("T_W2V")
    assert info.has_counts and TextSpec.from_json(info.text).sif
    vocab = [t for chunk in st.iter_vocab(info) for t in chunk]
    counts = st.counts(info).astype(np.float64)
    p = dict(zip(vocab, (counts / counts.sum()).astype(np.float32).tolist(), strict=True))
    tok = WordTokenizer(TextSpec.from_json(info.text))
    with RedisKeyedVectors("T_W2V", store=st) as kv:
        got = kv.embed(TEXTS, pooling="sif")
        with pytest.raises(TextRejected, match="pooling must be"):
            kv.embed(["x"], pooling="max")
    for i, text in enumerate(TEXTS):
        known = [t for t in tok.words(text) if t in trained.key_to_index]
        if known:
            weights = np.array([1e-3 / (1e-3 + p[t]) for t in known])
            want = trained.get_mean_vector(known, weights=weights)
            assert np.abs(got.vectors[i] - want).max() < 1e-6
    # frequent words weigh less: "the" counts for less than in the plain mean
    with RedisKeyedVectors("T_W2V", store=st) as kv:
        plain = kv.embed(TEXTS[:1]).vectors[0]
    assert np.abs(got.vectors[0] - plain).max() > 1e-3
    with RedisKeyedVectors("T_PHRASES_SIF", store=st) as kv:
        _phrase_model(st, "T_PHRASES_SIF")
        with pytest.raises(TextRejected, match="no word counts"):
            kv.embed(["the king"], pooling="sif")


def test_fasttext_unknown_words_through_their_ngrams(st):
    path = gensim_data("lee_fasttext.bin")
    load_file(path, name="T_FT", store=st, progress=False)
    ref = load_facebook_vectors(path)
    texts = ["the governmentality of australians", "qzxv"]
    with RedisKeyedVectors("T_FT", store=st) as kv:
        got = kv.embed(texts)
    spec = TextSpec.from_json(st.get_model("T_FT").text)
    for i, text in enumerate(texts):
        tokens = WordTokenizer(spec).words(text)
        assert got.used[i] == len(tokens) and got.unknown[i] == 0  # every word has a vector
        assert np.abs(got.vectors[i] - ref.get_mean_vector(tokens)).max() < 1e-6


def _phrase_model(st, name="T_PHRASES"):
    tokens = ["New_York_Times", "New_York", "New", "York", "Times", "the", "The", "king"]
    vectors = np.random.default_rng(5).normal(size=(len(tokens), 20)).astype(np.float32)
    load_arrays(tokens, vectors, name=name, store=st, progress=False)
    ref = KeyedVectors(20)
    ref.add_vectors(tokens, vectors)
    return ref


def test_phrases_join_greedily_and_case_is_kept(st):
    ref = _phrase_model(st)
    spec = TextSpec.from_json(st.get_model("T_PHRASES").text)
    assert (spec.lowercase, spec.joiner, spec.max_phrase) == (False, "_", 3)
    with RedisKeyedVectors("T_PHRASES", store=st) as kv:
        got = kv.embed(["The New York Times and the New York king", "York New"])
        assert got.used.tolist() == [5, 2] and got.unknown.tolist() == [1, 0]
        want = ref.get_mean_vector(["The", "New_York_Times", "the", "New_York", "king"])
        assert np.abs(got.vectors[0] - want).max() < 1e-6
        # the rule is overridable: lowercased text no longer meets "The" or the phrases
        low = kv.embed(["The New York Times"], tokenizer={"lowercase": True})
        assert low.used.tolist() == [1] and low.unknown.tolist() == [3]
        # ... and phrases can be turned off
        plain = kv.embed(["the New York Times"], tokenizer={"joiner": ""})
        assert plain.used.tolist() == [4]
        want = ref.get_mean_vector(["the", "New", "York", "Times"])
        assert np.abs(plain.vectors[0] - want).max() < 1e-6
        norm = kv.embed(["the king"], normalize=True).vectors[0]
        assert abs(np.linalg.norm(norm) - 1) < 1e-6
        with pytest.raises(TextRejected, match="unknown tokenizer option"):
            kv.embed(["x"], tokenizer={"colour": "blue"})


def test_a_model_without_a_text_rule_needs_one_given(st):
    ref = _phrase_model(st, "T_OLD")
    entry = json.loads(st.client.hget(MODELS, "T_OLD"))
    del entry["text"]  # as an older vecserve registered it
    st.client.hset(MODELS, "T_OLD", json.dumps(entry))
    with RedisKeyedVectors("T_OLD", store=st, model_ttl=0) as kv:
        with pytest.raises(NoTokenizer, match="'T_OLD' has no recorded tokenizer"):
            kv.embed(["the king"])
        got = kv.embed(["the king"], tokenizer={"lowercase": False})
    assert np.abs(got.vectors[0] - ref.get_mean_vector(["the", "king"])).max() < 1e-6


@pytest.mark.cluster
def test_embed_on_a_redis_cluster(cluster_store):
    """Rows in hash-tagged buckets and the text blob on another node: the same answer."""
    ref = _phrase_model(cluster_store, "T_CLUSTER")
    with RedisKeyedVectors("T_CLUSTER", store=cluster_store, cache=True) as kv:
        for _ in range(2):  # the second time from the cache
            got = kv.embed(["The New York Times", "the king"])
            want = ref.get_mean_vector(["The", "New_York_Times"])
            assert np.abs(got.vectors[0] - want).max() < 1e-6
            assert got.used.tolist() == [2, 2]
