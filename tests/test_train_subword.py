"""fastText's subword model trained by vecserve: n-gram ids, kernels, files, Redis, resume.

The n-gram ids are gensim's (``ft_ngram_hashes``); the kernels match a NumPy rendering of
fastText's update rules; the saved ``.bin`` is read by gensim (and by fastText's own
``load_model`` where the ``fasttext`` module is installed) with the trainer's vectors; a
committed model answers a word it never saw as gensim does from the saved file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from gensim.models.fasttext import ft_ngram_hashes, load_facebook_model
from vecserve.train._subword import SubwordWorker

from tests.helpers import topic_corpus, topic_purity, wait_until
from vecserve.errors import TrainingError
from vecserve.train import FastText, _kernels, checkpoint

WORDS = ["cat", "cats", "naïve", "über", "日本語", "a", "x-ray", "résumé", "ok"]
SMALL = {"vector_size": 16, "window": 3, "min_count": 1, "sample": 0, "seed": 7, "bucket": 997}


def _word_corpus(n_sentences=400, seed=1):
    """Sentences of WORDS and of topic words (suffixes shared within a topic)."""
    rng = np.random.default_rng(seed)
    return [list(rng.choice(WORDS, 8)) for _ in range(n_sentences)] + topic_corpus(300)


def _trained(**kw) -> FastText:
    params = dict(SMALL, epochs=2, workers=1)
    params.update(kw)
    return FastText(_word_corpus(), **params)


# -- n-gram ids -------------------------------------------------------------------------


@pytest.mark.parametrize("minn, maxn", [(3, 6), (1, 3), (2, 2)])
def test_input_rows_are_the_word_then_gensims_ngram_buckets(minn, maxn):
    model = FastText(
        [WORDS * 3], vector_size=8, min_count=1, min_n=minn, max_n=maxn, bucket=1000, workers=1
    )
    model.build_vocab([WORDS * 3])
    n = len(model.vocab)
    for i, word in enumerate(model.vocab.words):
        rows = model._sub_rows[model._sub_ptr[i] : model._sub_ptr[i + 1]]
        assert rows[0] == i
        assert (rows[1:] - n).tolist() == list(ft_ngram_hashes(word, minn, maxn, 1000)), word


def test_max_n_zero_trains_words_alone():
    model = FastText(_word_corpus(50), **dict(SMALL, max_n=0), epochs=1, workers=1)
    assert model.wi.shape == (len(model.vocab), 16)
    assert np.array_equal(model.word_vectors(), model.syn0)


# -- kernels against NumPy --------------------------------------------------------------


def _reference(wi, wo, sub_ptr, sub_rows, inputs, pairs, alpha, mean=True):
    """fastText's update in NumPy: the input (mean of the rows of ``inputs``' words)
    predicts each ``(target, negatives)`` of ``pairs`` in turn (output rows updated at
    once); after each pair its gradient goes whole to every input row (a row listed
    twice gets it twice) and the input is taken again from the rows."""
    table = _kernels.sigmoid_table()
    rows = np.concatenate([sub_rows[sub_ptr[w] : sub_ptr[w + 1]] for w in inputs])
    for target, negs in pairs:
        h = wi[rows].sum(0, dtype=np.float32)
        if mean:
            h = h / np.float32(len(rows))
        work = np.zeros_like(h)
        for out, label in [(target, 1.0), *((g, 0.0) for g in negs)]:
            if label == 0.0 and out == target:
                continue
            f = float(h @ wo[out])
            if f >= 6:
                g = (label - 1.0) * alpha
            elif f <= -6:
                g = label * alpha
            else:
                g = (label - table[int((f + 6) * 83)]) * alpha
            work += g * wo[out]
            wo[out] += g * h
        for r in rows:
            wi[r] += work


def _setup(seed=0, n=6, bucket=11, d=8, negative=3):
    rng = np.random.default_rng(seed)
    wi = rng.normal(0, 0.5, (n + bucket, d)).astype(np.float32)
    wo = rng.normal(0, 0.5, (n, d)).astype(np.float32)
    per_word = [np.r_[w, n + rng.integers(0, bucket, rng.integers(0, 5))] for w in range(n)]
    sub_ptr = np.r_[0, np.cumsum([len(r) for r in per_word])].astype(np.int64)
    sub_rows = np.concatenate(per_word).astype(np.int32)
    keep_all = np.full(n, 2**32 - 1, np.uint32)
    tables = (keep_all, np.zeros(n, np.uint32), np.arange(n, dtype=np.int32))
    return wi, wo, sub_ptr, sub_rows, tables, negative


@pytest.mark.parametrize("sg", [1, 0])
def test_kernel_steps_match_numpy(sg):
    wi, wo, ptr, rows, tables, neg = _setup()
    worker = SubwordWorker(wi, wo, ptr, rows, *tables, sg=sg, negative=neg, window=2)
    ref_wi, ref_wo = wi.copy(), wo.copy()
    contexts, centre = [1, 3, 4], 2
    centre_rows = rows[ptr[centre] : ptr[centre + 1]]
    assert len(set(centre_rows)) < len(centre_rows)  # a bucket repeats: its mean moves more
    if sg:
        negs = [[0, 2, 5], [1, 1, 4], [3, 0, 0]]  # 2 in the first: the pair's target, skipped
        worker.sg_step(centre, contexts, negs, alpha=0.1)
        _reference(ref_wi, ref_wo, ptr, rows, [centre], list(zip(contexts, negs, strict=True)), 0.1)
    else:
        negs = [0, 2, 5]
        worker.cbow_step(centre, contexts, negs, alpha=0.1)
        _reference(ref_wi, ref_wo, ptr, rows, contexts, [(centre, negs)], 0.1)
    np.testing.assert_allclose(wi, ref_wi, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(wo, ref_wo, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(wi, _setup()[0])  # it did change something


@pytest.mark.parametrize("sg", [1, 0])
def test_hierarchical_softmax_steps_match_numpy(sg):
    from vecserve.train.tables import huffman_tree

    wi, wo, ptr, rows, tables, _ = _setup(seed=3)
    n = len(wo)
    tree = huffman_tree(np.array([50, 30, 20, 9, 5, 2], np.int64))
    syn1 = np.random.default_rng(4).normal(0, 0.5, (n - 1, 8)).astype(np.float32)
    worker = SubwordWorker(wi, None, ptr, rows, *tables, syn1, tree.codes, tree.points,
                           tree.codelens, sg=sg, negative=0, window=2, hs=1)  # fmt: skip
    ref_wi, ref_syn1 = wi.copy(), syn1.copy()
    table = _kernels.sigmoid_table()
    contexts, centre = [1, 3, 5], 2
    inputs, targets = ([centre], contexts) if sg else (contexts, [centre])
    if sg:
        worker.sg_step(centre, contexts, [], alpha=0.1)
    else:
        worker.cbow_step(centre, contexts, [], alpha=0.1)
    in_rows = np.concatenate([rows[ptr[w] : ptr[w + 1]] for w in inputs])
    for t in targets:  # one target's path after the other, as _reference's pairs
        h = ref_wi[in_rows].sum(0, dtype=np.float32) / np.float32(len(in_rows))
        work = np.zeros_like(h)
        for k in range(tree.codelens[t]):
            node, label = tree.points[t, k], 1.0 - tree.codes[t, k]
            f = float(h @ ref_syn1[node])
            if -6 < f < 6:  # hierarchical softmax skips a score out of the table
                g = (label - table[int((f + 6) * 83)]) * 0.1
                work += g * ref_syn1[node]
                ref_syn1[node] += g * h
        for r in in_rows:
            ref_wi[r] += work
    np.testing.assert_allclose(wi, ref_wi, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(syn1, ref_syn1, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(syn1, np.random.default_rng(4).normal(0, 0.5, (n - 1, 8)))


def test_worker_checks_its_arrays():
    wi, wo, ptr, rows, tables, neg = _setup()
    with pytest.raises(ValueError, match="outside wi"):
        SubwordWorker(wi, wo, ptr, rows + 100, *tables, sg=1, negative=neg, window=2)
    with pytest.raises(TypeError, match="float32"):
        SubwordWorker(wi.astype(np.float64), wo, ptr, rows, *tables, sg=1, negative=3, window=2)


# -- the model --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sg, hs, mode",
    [(1, 0, "subword-sg-neg"), (0, 0, "subword-cbow-mean-neg"), (1, 1, "subword-sg-hs"),
     (0, 1, "subword-cbow-mean-hs")],
)  # fmt: skip
def test_learns_topics_and_is_reproducible(sg, hs, mode):
    corpus = topic_corpus()
    params = dict(SMALL, vector_size=24, sg=sg, epochs=5, workers=1, bucket=5000)
    if hs:
        params.update(hs=1, negative=0)
    if not sg:
        params["alpha"] = 0.05
    a = FastText(corpus, **params)
    assert topic_purity(a.wv) > 0.9
    b = FastText(corpus, **params)
    assert np.array_equal(a.wi, b.wi)
    out = a.syn1 if hs else a.syn1neg
    assert np.array_equal(out, b.syn1 if hs else b.syn1neg) and out.any()
    assert a.train_stats["mode"] == mode


def test_unseen_words_come_from_ngrams():
    model = _trained()
    kv = model.wv
    assert "catss" not in kv.key_to_index
    sim = kv.similarity("catss", "cats")
    assert sim > kv.similarity("catss", "日本語")


def test_skip_gram_ends_at_fasttexts_final_rate_cbow_keeps_the_floor():
    """Subword skip-gram's default final rate is 0.0001 whatever the corpus's size (the
    word2vec floor cost it WS-353 and unseen words); CBOW keeps the short-run floor; a
    rate the user gives is kept in both."""
    sg, cbow = _trained(sg=1, epochs=1), _trained(sg=0, epochs=1)
    assert sg._plan_run().min_alpha == pytest.approx(1e-4)
    cbow_run = cbow._plan_run()
    assert cbow_run.min_alpha == pytest.approx(cbow_run.start_alpha / 4)
    assert _trained(sg=1, epochs=1, min_alpha=0.003)._plan_run().min_alpha == 0.003


@pytest.mark.parametrize(
    "params, match",
    [
        ({"hs": 1}, "trains one loss"),
        ({"max_n": 2, "min_n": 3}, "max_n=2"),
        ({"bucket": 0}, "bucket=0"),
        ({"min_n": 0}, "min_n=0"),
    ],
)
def test_bad_parameters(params, match):
    with pytest.raises(TrainingError, match=match):
        FastText(**params)


# -- files ------------------------------------------------------------------------------


@pytest.mark.parametrize("sg, hs", [(1, 0), (0, 0), (1, 1)])
def test_gensim_reads_the_saved_bin_with_our_vectors(tmp_path, sg, hs):
    model = _trained(sg=sg, **({"hs": 1, "negative": 0} if hs else {}))
    path = tmp_path / "m.bin"
    model.save_facebook_model(path)
    ft = load_facebook_model(str(path))
    assert ft.wv.index_to_key == model.wv.index_to_key
    assert (ft.wv.min_n, ft.wv.max_n, ft.wv.bucket) == (3, 6, 997)
    assert ft.sg == sg and ft.hs == hs and ft.negative == (0 if hs else 5) and ft.window == 3
    assert np.array_equal(ft.wv.vectors, model.wv.vectors)
    assert np.array_equal(ft.wv.vectors_ngrams, model.vectors_ngrams)
    if hs:  # the inner nodes, and fastText's unused last row
        assert np.array_equal(ft.syn1[:-1], model.syn1) and not ft.syn1[-1].any()
    else:
        assert np.array_equal(ft.syn1neg, model.syn1neg)
    for word in ["catss", "naïf", "übers", "日本", "zzz"]:
        assert np.array_equal(ft.wv[word], model.wv[word]), word
    assert [ft.wv.get_vecattr(w, "count") for w in WORDS] == [
        model.wv.get_vecattr(w, "count") for w in WORDS
    ]


@pytest.mark.parametrize("hs", [0, 1])
def test_fasttexts_own_load_model_reads_the_bin(tmp_path, hs):
    fasttext = pytest.importorskip("fasttext")
    model = _trained(**({"hs": 1, "negative": 0} if hs else {}))
    path = tmp_path / "m.bin"
    model.save_facebook_model(path)
    ft = fasttext.load_model(str(path))
    assert ft.get_dimension() == 16
    for word in [*WORDS, "catss", "naïf", "日本"]:
        np.testing.assert_allclose(ft.get_word_vector(word), model.wv[word], rtol=1e-5, atol=1e-7)


def test_refuses_a_token_fasttext_cannot_read(tmp_path):
    model = FastText([["a b", "c"]] * 5, **dict(SMALL, epochs=1, workers=1))
    with pytest.raises(TrainingError, match="whitespace"):
        model.save_facebook_model(tmp_path / "m.bin")
    assert not (tmp_path / "m.bin").exists()


# -- Redis ------------------------------------------------------------------------------


def test_committed_model_answers_unseen_words_as_gensim_from_the_file(tmp_path, redis_url):
    from vecserve.keyedvectors import RedisKeyedVectors

    model = _trained()
    info = model.to_redis("TEST_TRAIN_FT", redis_url=redis_url, progress=False)
    assert (info.min_n, info.max_n, info.ngram_buckets) == (3, 6, 997)
    path = tmp_path / "m.bin"
    model.save_facebook_model(path)
    ft = load_facebook_model(str(path)).wv
    words = ["cats", "catss", "naïf", "日本", "x-rays"]
    with RedisKeyedVectors("TEST_TRAIN_FT", redis_url=redis_url) as kv:
        assert len(kv) == len(ft)
        assert np.array_equal(kv["cats"], ft["cats"])
        np.testing.assert_allclose(kv[words], np.vstack([ft[w] for w in words]), rtol=0, atol=1e-7)
        assert kv.get_vecattr("cats", "count") == ft.get_vecattr("cats", "count")


def _corpus_file(tmp_path, n=400):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(" ".join(s) for s in _word_corpus(n)) + "\n")
    return path


def test_cli_trains_commits_and_saves(tmp_path, redis_url):
    from vecserve.cli import cli
    from vecserve.keyedvectors import RedisKeyedVectors

    corpus, out = _corpus_file(tmp_path), tmp_path / "m.bin"
    args = ["train", str(corpus), "--key", "TEST_TRAIN_FT_CLI", "--redis-url", redis_url]
    args += ["--subwords", "--buckets", "500", "--min-n", "2", "--save", str(out)]
    args += ["--min-count", "1", "--vector-size", "8", "--epochs", "1", "--workers", "1"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "saved the fastText model" in result.output
    ft = load_facebook_model(str(out)).wv
    assert (ft.min_n, ft.max_n, ft.bucket) == (2, 6, 500)
    with RedisKeyedVectors("TEST_TRAIN_FT_CLI", redis_url=redis_url) as kv:
        np.testing.assert_allclose(kv["catss"], ft["catss"], rtol=0, atol=1e-7)


def test_cli_saves_vec_text_where_asked(tmp_path):
    from gensim.models import KeyedVectors

    from vecserve.cli import cli

    corpus, out = _corpus_file(tmp_path), tmp_path / "m.vec"
    args = ["train", str(corpus), "--subwords", "--buckets", "500", "--save", str(out), "--text"]
    args += ["--min-count", "1", "--vector-size", "8", "--epochs", "1", "--workers", "1"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    vec = KeyedVectors.load_word2vec_format(str(out))
    model = FastText(str(corpus), sg=1, vector_size=8, min_count=1, bucket=500, epochs=1, workers=1)
    assert vec.index_to_key == model.wv.index_to_key
    np.testing.assert_allclose(vec.vectors, model.wv.vectors, rtol=1e-5, atol=1e-6)


def test_cli_errors_are_one_line(tmp_path):
    from vecserve.cli import cli

    corpus = _corpus_file(tmp_path, 20)
    runner = CliRunner()
    result = runner.invoke(cli, ["train", str(corpus), "--save", "x", "--min-n", "2"])
    assert result.exit_code == 2 and "--min-n: n-gram options need --subwords" in result.output
    result = runner.invoke(cli, ["train", str(corpus), "--save", "x", "--subwords", "--hs"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "Error: --hs=1 with --negative=5: a subword model trains one loss" in result.output


# -- checkpoints ------------------------------------------------------------------------


def _train_cmd(corpus, *args):
    return [sys.executable, "-m", "vecserve.cli", "train", str(corpus), "--subwords",
            "--buckets", "20000", "--min-count", "1", "--vector-size", "32", "--epochs", "4",
            "--workers", "1", "--seed", "3", "--sample", "0", *map(str, args)]  # fmt: skip


def test_resume_after_a_kill_equals_an_uninterrupted_run(tmp_path):
    corpus = tmp_path / "c.txt"
    with open(corpus, "w") as f:
        for s in _word_corpus(6000, seed=2):
            f.write(" ".join(s) + "\n")
    ckpt, env = tmp_path / "ckpt", dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(_train_cmd(corpus, "--checkpoint-dir", ckpt, "--save", tmp_path / "x"),
                            env=env, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_until((ckpt / checkpoint.FILE_NAME).exists, timeout=120, what="the first checkpoint")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "it finished before the kill: make it longer"
    resumed = subprocess.run(
        _train_cmd(corpus, "--checkpoint-dir", ckpt, "--resume", "--save", tmp_path / "r.bin"),
        capture_output=True,
        text=True,
        env=env,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming after epoch" in resumed.stderr
    whole = subprocess.run(_train_cmd(corpus, "--save", tmp_path / "w.bin"), capture_output=True)
    assert whole.returncode == 0, whole.stderr
    a = load_facebook_model(str(tmp_path / "r.bin"))
    b = load_facebook_model(str(tmp_path / "w.bin"))
    assert np.array_equal(a.wv.vectors_ngrams, b.wv.vectors_ngrams)
    assert np.array_equal(a.wv.vectors, b.wv.vectors) and np.array_equal(a.syn1neg, b.syn1neg)


def test_a_word2vec_checkpoint_is_not_resumed_as_subwords(tmp_path):
    from vecserve.train import Word2Vec

    Word2Vec(_word_corpus(50), **{k: v for k, v in SMALL.items() if k != "bucket"},
             epochs=1, workers=1, checkpoint_dir=tmp_path)  # fmt: skip
    with pytest.raises(TrainingError, match="other parameters"):
        FastText(_word_corpus(50), **SMALL, epochs=1, workers=1, checkpoint_dir=tmp_path,
                 resume=True)  # fmt: skip


def test_cbows_kept_sums_train_as_the_rows_where_no_rows_are_shared():
    """Words alone (``max_n=0``: no row shared by two words) on one thread: CBOW with
    each window word's sum of rows kept from centre to centre trains the vectors that
    summing every row for every centre trains (up to float rounding)."""
    corpus = [s[:6] for s in _word_corpus(60)]
    models = []
    for cache in (0, 1):
        model = FastText(**dict(SMALL, max_n=0, sg=0, alpha=0.05, epochs=1, workers=1))
        model.build_vocab(corpus)
        worker = SubwordWorker(model.wi, model.syn1neg, model._sub_ptr, model._sub_rows,
                               model._sample_int, *model._alias, sg=0, negative=5, window=3,
                               cbow_cache=cache)  # fmt: skip
        model._kernel_worker = lambda worker=worker: worker
        model.train()
        models.append(model)
    exact, kept = models
    untrained = FastText(**dict(SMALL, max_n=0, sg=0))
    untrained.build_vocab(corpus)
    assert np.abs(exact.wi - untrained.wi).max() > 1e-3  # it trained
    np.testing.assert_allclose(kept.wi, exact.wi, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(kept.syn1neg, exact.syn1neg, rtol=1e-4, atol=1e-6)
