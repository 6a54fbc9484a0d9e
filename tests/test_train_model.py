"""Word2Vec end to end on small corpora: it learns, it is reproducible, gensim reads it."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from gensim.models import KeyedVectors

from tests.helpers import PER_TOPIC, TOPICS, topic_corpus, topic_purity
from vecserve.errors import TrainingError
from vecserve.train import Word2Vec
from vecserve.train.plan import min_alpha_for

CORPUS = topic_corpus()
SMALL = {"vector_size": 24, "window": 3, "min_count": 1, "sample": 0, "seed": 7}


@pytest.mark.parametrize(
    "mode",
    [
        {"sg": 1, "batch": True},
        {"sg": 1, "batch": False},
        {"sg": 0, "alpha": 0.05},
        {"sg": 0, "alpha": 0.05, "batch": True},
        {"sg": 0, "cbow_mean": 0, "alpha": 0.01},
        {"sg": 1, "hs": 1, "negative": 0},
        {"sg": 0, "hs": 1, "negative": 0, "alpha": 0.05},
    ],
    ids=["sg-hogbatch", "sg-pairs", "cbow-mean", "cbow-hogbatch", "cbow-sum", "sg-hs", "cbow-hs"],
)
def test_learns_topic_structure(mode):
    model = Word2Vec(CORPUS, **SMALL, epochs=5, workers=2, **mode)
    assert topic_purity(model.wv) >= 0.9, model.mode


def test_single_worker_with_seed_is_reproducible():
    a = Word2Vec(CORPUS, **SMALL, epochs=2, workers=1, sg=1)
    b = Word2Vec(CORPUS, **SMALL, epochs=2, workers=1, sg=1)
    np.testing.assert_array_equal(a.wv.vectors, b.wv.vectors)
    c = Word2Vec(CORPUS, **{**SMALL, "seed": 8}, epochs=2, workers=1, sg=1)
    assert not np.array_equal(a.wv.vectors, c.wv.vectors)


def test_default_mode_is_hogbatch_for_skipgram_negative():
    assert Word2Vec(sg=1).mode == "sg-neg-hogbatch"
    assert Word2Vec(sg=1, hs=1, negative=0).mode == "sg-hs"
    assert Word2Vec(sg=1, batch=False).mode == "sg-neg"
    assert Word2Vec().mode == "cbow-mean-neg"
    assert Word2Vec(batch=True).mode == "cbow-mean-neg-hogbatch"


def test_the_final_rate_follows_the_words_trained_unless_given():
    """Without ``min_alpha`` a run ends at :func:`min_alpha_for` of its words trained
    (corpus words x epochs); given, it is used as is."""
    auto = Word2Vec(CORPUS, **SMALL, epochs=2, workers=1, sg=1)
    assert auto.min_alpha is None  # the parameter as given
    assert auto.train_stats["min_alpha"] == min_alpha_for(0.025, 2 * 6000) == 0.025 / 4
    fixed = Word2Vec(CORPUS, **SMALL, epochs=2, workers=1, sg=1, min_alpha=0.0001)
    assert fixed.train_stats["min_alpha"] == 0.0001
    assert not np.array_equal(auto.wv.vectors, fixed.wv.vectors)


def test_stats_and_keyedvectors():
    model = Word2Vec(CORPUS, **SMALL, epochs=1, workers=2)
    stats = model.train_stats
    assert stats["corpus_words"] == 6000 and stats["trained_words"] == 6000
    assert stats["words_per_second"] > 0
    kv = model.wv
    assert len(kv) == TOPICS * PER_TOPIC and kv.vector_size == 24
    word = kv.index_to_key[0]
    assert kv.get_vecattr(word, "count") == model.vocab.counts[0]
    np.testing.assert_array_equal(kv[word], model.syn0[0])


@pytest.mark.parametrize("binary", [True, False])
def test_gensim_loads_what_we_save(tmp_path, binary):
    model = Word2Vec(CORPUS, **SMALL, epochs=1, workers=1)
    path = tmp_path / ("v.bin" if binary else "v.txt")
    model.save_word2vec_format(path, binary=binary)
    kv = KeyedVectors.load_word2vec_format(str(path), binary=binary)
    assert set(kv.index_to_key) == set(model.wv.index_to_key)
    for w in model.wv.index_to_key[:5]:
        np.testing.assert_allclose(kv[w], model.wv[w], rtol=1e-5, atol=1e-6)


def test_one_shot_iterator_and_pruned_two_pass_agree():
    a = Word2Vec(iter(CORPUS), **SMALL, epochs=1, workers=1)
    b = Word2Vec(CORPUS, **SMALL, epochs=1, workers=1, max_vocab_size=10_000)
    assert a.wv.index_to_key == b.wv.index_to_key
    np.testing.assert_array_equal(a.wv.vectors, b.wv.vectors)


def test_reads_files(tmp_path):
    (tmp_path / "c.txt").write_text("\n".join(" ".join(s) for s in CORPUS))
    model = Word2Vec(tmp_path / "c.txt", **SMALL, epochs=1, workers=1)
    assert len(model.wv) == TOPICS * PER_TOPIC
    assert model.source.endswith("c.txt")


@pytest.mark.parametrize(
    "params,match",
    [
        ({"vector_size": 0}, "vector_size=0"),
        ({"vector_size": -3}, "vector_size"),
        ({"window": 0}, "window"),
        ({"epochs": 0}, "epochs"),
        ({"workers": 0}, "workers"),
        ({"negative": 0, "hs": 0}, "negative"),
        ({"alpha": 0}, "alpha"),
        ({"min_alpha": 1.0}, "min_alpha"),
        ({"sample": -1}, "sample"),
        ({"batch": True, "hs": 1, "negative": 0}, "batch"),
        ({"cbow_batch": 0}, "cbow_batch"),
        ({"sync_depth": 0}, "sync_depth=0: must be an integer >= 1"),
        ({"sync_depth": 1.5}, "sync_depth"),
        ({"sync_dtype": "int4"}, "sync_dtype='int4': must be one of float32, float16, int16, int8"),
    ],
)
def test_bad_parameters(params, match):
    with pytest.raises(TrainingError, match=match):
        Word2Vec([["a", "b"]], **params)


def test_bad_corpora(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(TrainingError, match="empty"):
        Word2Vec(empty)
    with pytest.raises(TrainingError, match="min_count=5"):
        Word2Vec([["rare", "words", "only"]], min_count=5)
    binary = tmp_path / "vectors.bin"
    binary.write_bytes(np.arange(1000, dtype=np.float32).tobytes())
    with pytest.raises(TrainingError, match="binary"):
        Word2Vec(binary)
    with pytest.raises(TrainingError, match="no such file"):
        Word2Vec(tmp_path / "nope.txt")
    with pytest.raises(TrainingError, match="one-shot"):  # two passes when pruning
        Word2Vec(iter(CORPUS), max_vocab_size=1000)
    with pytest.raises(TrainingError, match="fewer than 2"):
        Word2Vec([["lonely"]], min_count=1)


def test_cli_train_saves(tmp_path):
    from vecserve.cli import cli

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(" ".join(s) for s in CORPUS))
    out = tmp_path / "v.txt"
    args = ["train", str(corpus), "--save", str(out), "--text", "--min-count", "1"]
    args += ["--vector-size", "8", "--epochs", "1", "--workers", "1"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "saved 32 vectors" in result.output
    assert KeyedVectors.load_word2vec_format(str(out)).vector_size == 8


def test_cli_errors_are_one_line(tmp_path):
    from vecserve.cli import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["train", str(tmp_path / "nope"), "--save", "x"])
    assert result.exit_code != 0
    assert "no such file" in result.output and "Traceback" not in result.output
    result = runner.invoke(cli, ["train", str(tmp_path)])
    assert result.exit_code != 0 and "--key" in result.output


def test_to_redis_lands_a_model_keyedvectors_reads(redis_url):
    from vecserve.keyedvectors import RedisKeyedVectors

    model = Word2Vec(CORPUS, **SMALL, epochs=1, workers=1)
    model.to_redis("TEST_TRAIN_W2V", redis_url=redis_url)
    with RedisKeyedVectors("TEST_TRAIN_W2V", redis_url=redis_url) as kv:
        assert len(kv) == len(model.wv)
        word = model.wv.index_to_key[3]
        np.testing.assert_allclose(kv[word], model.wv[word], rtol=1e-6)
        assert kv.get_vecattr(word, "count") == model.vocab.counts[3]


def test_cli_train_to_redis(tmp_path, redis_url):
    from vecserve.cli import cli
    from vecserve.keyedvectors import RedisKeyedVectors

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(" ".join(s) for s in CORPUS))
    args = ["train", str(corpus), "--key", "TEST_TRAIN_CLI", "--redis-url", redis_url]
    args += ["--min-count", "1", "--vector-size", "8", "--epochs", "1", "--workers", "1"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "TEST_TRAIN_CLI: 32 vectors x 8 committed" in result.output
    with RedisKeyedVectors("TEST_TRAIN_CLI", redis_url=redis_url) as kv:
        assert len(kv) == 32


def test_worker_error_stops_training(monkeypatch):
    model = Word2Vec(**SMALL, epochs=3, workers=2, job_words=100)
    model.build_vocab(CORPUS)

    class Broken:
        def train(self, *args):
            raise RuntimeError("kernel exploded")

    monkeypatch.setattr(model, "_kernel_worker", lambda: Broken())
    with pytest.raises(TrainingError, match="kernel exploded"):
        model.train()
