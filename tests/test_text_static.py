"""Static embedding models served from Redis: ``kv.embed`` equals the reference libraries.

Real models only, nothing from the model hub: WordLlama's shipped 32,000 x 256 table and
its Llama 2 tokenizer (the ``wordllama`` wheel), and Model2Vec directories that
``model2vec`` itself writes from that table and tokenizer (float32, float16 and int8 rows,
per-token weights, a token mapping) and from a WordLevel tokenizer trained by
``tokenizers`` on a slice of ``wiki100m`` (its unknown token is dropped, as Model2Vec
does). Texts are real sentences and 1,000-word documents from the same corpus.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vecserve.errors import TextRejected, VectorFileError
from vecserve.keyedvectors import AsyncRedisKeyedVectors, RedisKeyedVectors
from vecserve.loader import load_file
from vecserve.text.embed import MAX_TEXT_CHARS, MAX_TEXTS

from . import text_support
from .text_support import corpus_head

wordllama = pytest.importorskip("wordllama")
model2vec = pytest.importorskip("model2vec")
from model2vec import StaticModel  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from wordllama import WordLlama  # noqa: E402

WL_DIR = Path(wordllama.__file__).parent
TOL = 1e-6
st = text_support.st  # this module's store (text_support)


def _corpus_words(n_bytes: int = 600_000) -> list[str]:
    return corpus_head(n_bytes).decode("utf-8", "ignore").split()


@pytest.fixture(scope="module")
def texts():
    words = _corpus_words()
    short = [" ".join(words[i : i + 3 + i % 17]) for i in range(0, 20 * 200, 20)]
    docs = [" ".join(words[i : i + 1000]) for i in range(0, 10_000, 1000)]
    odd = ["", "   ", "Zürich — naïve café ☃ 東京", "THE Cat", "a"]
    return short + docs + odd


@pytest.fixture(scope="module")
def wl_ref(tmp_path_factory):
    """WordLlama's own inference object, offline (the tokenizer from a cache dir)."""
    cache = tmp_path_factory.mktemp("wl")
    (cache / "tokenizers").mkdir()
    shutil.copy(WL_DIR / "tokenizers" / "l2_supercat_tokenizer_config.json", cache / "tokenizers")
    return WordLlama.load(cache_dir=cache, disable_download=True)


@pytest.fixture(scope="module")
def wl(st):
    load_file(WL_DIR, name="T_WL", store=st, progress=False)
    kv = RedisKeyedVectors("T_WL", store=st, cache=True)
    yield kv
    kv.close()


def test_wordllama_load_records_its_tokenizer(st, wl, wl_ref):
    info = st.get_model("T_WL")
    assert (info.count, info.dim, info.source_format) == (32_000, 256, "wordllama")
    spec = json.loads(info.text)
    assert spec["kind"] == "tokenizer" and spec["family"] == "wordllama"
    # the token rows are served like words
    tid = wl_ref.tokenizer.token_to_id("▁the")
    assert np.array_equal(wl["▁the"], wl_ref.embedding[tid])


@pytest.mark.parametrize("norm", [False, True])
def test_wordllama_embed_equals_its_library(wl, wl_ref, texts, norm):
    got = wl.embed(texts, normalize=norm)
    with np.errstate(invalid="ignore"):  # WordLlama divides an empty text's 0 by 0
        ref = wl_ref.embed(texts, norm=norm)
    real = got.used > 0
    assert np.abs(got.vectors[real] - ref[real]).max() < TOL
    # empty text: the zero vector (WordLlama: zeros, or NaN once normalised)
    assert not real[-5] and np.all(got.vectors[~real] == 0)
    lengths = [sum(e.attention_mask) for e in wl_ref.tokenize(texts)]
    assert got.used.tolist() == lengths and not got.unknown.any()


def test_wordllama_matryoshka_dims(wl, wl_ref, texts):
    got = wl.embed(texts[:50], dims=64, normalize=True).vectors
    # WordLlama's trunc_dim keeps the first columns of every row; then its norm=True
    head = wl_ref.embed(texts[:50])[:, :64]
    head /= np.linalg.norm(head, axis=1, keepdims=True)
    assert got.shape == (50, 64) and np.abs(got - head).max() < TOL
    with pytest.raises(TextRejected, match=r"dims must be 1\.\.256"):
        wl.embed(["x"], dims=300)


def test_embed_reads_the_batch_in_one_round_trip_and_caches(st, texts):
    kv = RedisKeyedVectors("T_WL", store=st, cache=True)
    try:
        kv.embed(["warm up the registry"])
        before = st.client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)
        first = kv.embed(texts[:1000])
        after = st.client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)
        assert after - before == 1  # every distinct token of the batch in one MGET
        kv._get_cache().wait_ready(5)
        again = kv.embed(texts[:1000])
        assert np.array_equal(first.vectors, again.vectors)
    finally:
        kv.close()


def test_async_client_and_pinned_view_embed(st, wl, texts):
    import asyncio

    want = wl.embed(texts[:20]).vectors
    with wl.pin() as pinned:
        assert np.array_equal(pinned.embed(texts[:20]).vectors, want)

    async def run():
        async with AsyncRedisKeyedVectors("T_WL", store=st) as akv:
            return (await akv.embed(texts[:20])).vectors

    assert np.array_equal(asyncio.run(run()), want)


def test_bad_text_is_rejected_naming_it(wl):
    with pytest.raises(TextRejected, match="text 1 is not UTF-8"):
        wl.embed(["fine", b"\xff\xfe"])
    with pytest.raises(TextRejected, match="text 0 has 1,000,001 characters"):
        wl.embed(["x" * (MAX_TEXT_CHARS + 1)])
    with pytest.raises(TextRejected, match="texts in one batch"):
        wl.embed([""] * (MAX_TEXTS + 1))
    with pytest.raises(TextRejected, match="text 0 is a int"):
        wl.embed([3])


# -- Model2Vec ----------------------------------------------------------------------------


def _wl_table():
    from safetensors.numpy import load_file as st_load

    table = st_load(str(WL_DIR / "weights" / "l2_supercat_256.safetensors"))["embedding.weight"]
    tok = Tokenizer.from_file(str(WL_DIR / "tokenizers" / "l2_supercat_tokenizer_config.json"))
    return table.astype(np.float32), tok


def _m2v_dir(path: Path, **kwargs) -> Path:
    table, tok = _wl_table()
    vectors = kwargs.pop("vectors", table)
    StaticModel(vectors=vectors, tokenizer=tok, **kwargs).save_pretrained(path)
    return path


def _m2v_case(name, tmp: Path):
    table, _ = _wl_table()
    rng = np.random.default_rng(7)
    if name == "f32-normalized":
        return _m2v_dir(tmp, normalize=True)
    if name == "f16-max64":
        return _m2v_dir(tmp, vectors=table.astype(np.float16), max_length=64)
    if name == "int8":
        q = np.clip(np.round(table / np.abs(table).max() * 127), -127, 127).astype(np.int8)
        return _m2v_dir(tmp, vectors=q, normalize=True)
    if name == "weights-mapping":
        # vocabulary quantisation: 32,000 token ids onto 4,000 rows, with per-token weights
        rows = table[rng.choice(len(table), 4000, replace=False)]
        mapping = rng.integers(0, 4000, len(table))
        weights = rng.uniform(0.2, 2.0, len(table)).astype(np.float32)
        return _m2v_dir(tmp, vectors=rows, token_mapping=mapping, weights=weights, max_length=None)
    raise AssertionError(name)


@pytest.mark.parametrize("case", ["f32-normalized", "f16-max64", "int8", "weights-mapping"])
def test_model2vec_embed_equals_encode(st, tmp_path, texts, case):
    path = _m2v_case(case, tmp_path / case)
    name = f"T_M2V_{case.replace('-', '_')}"
    load_file(path, name=name, store=st, progress=False)
    ref = StaticModel.from_pretrained(path)
    want = ref.encode(texts, use_multiprocessing=False)
    with RedisKeyedVectors(name, store=st) as kv:
        got = kv.embed(texts)
    # float16 tables: Model2Vec answers in float16 (its own rounding, 2**-11 relative)
    # float32: 1e-6 of the largest component (an ulp of a component near 1 is 6e-8)
    tol = (2e-3 if want.dtype == np.float16 else TOL) * max(1.0, np.abs(want).max())
    assert np.abs(got.vectors - want.astype(np.float32)).max() < tol
    assert np.all(got.vectors[got.used == 0] == 0)
    cap = None if ref.max_length is None else ref.max_length * ref.median_token_length
    ids = ref.tokenize([t[:cap] for t in texts])  # encode's character cut, then truncation
    if ref.max_length is not None:
        assert max(len(x) for x in ids) == ref.max_length  # the documents were truncated
    assert got.used.tolist() == [len(x) for x in ids]


def test_model2vec_matryoshka_dims(st, tmp_path, texts):
    path = _m2v_dir(tmp_path / "m", normalize=True)
    load_file(path, name="T_M2V_DIMS", store=st, progress=False)
    ref = StaticModel.from_pretrained(path, dimensionality=64)
    with RedisKeyedVectors("T_M2V_DIMS", store=st) as kv:
        got = kv.embed(texts[:200], dims=64)
    assert np.abs(got.vectors - ref.encode(texts[:200], use_multiprocessing=False)).max() < TOL


def test_model2vec_drops_the_unknown_token_of_a_word_level_tokenizer(st, tmp_path, texts):
    from tokenizers import models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        [" ".join(_corpus_words(200_000))],
        trainers.WordLevelTrainer(vocab_size=3000, special_tokens=["[UNK]"]),
    )
    vectors = np.random.default_rng(3).normal(size=(tok.get_vocab_size(), 32)).astype(np.float32)
    StaticModel(vectors=vectors, tokenizer=tok, normalize=False).save_pretrained(tmp_path / "wl")
    load_file(tmp_path / "wl", name="T_M2V_WORDS", store=st, progress=False)
    ref = StaticModel.from_pretrained(tmp_path / "wl")
    with RedisKeyedVectors("T_M2V_WORDS", store=st) as kv:
        got = kv.embed(texts)
    want = ref.encode(texts, use_multiprocessing=False)
    assert np.abs(got.vectors - want).max() < TOL
    assert got.unknown.sum() > 0  # rare words fell to [UNK] and were not pooled
    unk = tok.token_to_id("[UNK]")
    full = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert got.unknown.tolist()[:200] == [sum(i == unk for i in x) for x in full][:200]


def test_a_tokenizer_past_the_table_is_refused_naming_both_sizes(st, tmp_path):
    path = _m2v_dir(tmp_path / "m")
    table, _ = _wl_table()
    from safetensors.numpy import save_file

    save_file({"embeddings": table[:1000]}, str(path / "model.safetensors"))
    with pytest.raises(
        VectorFileError, match=r"ids run to 31,999 \(32,000 tokens\) past the table of 1,000 rows"
    ):
        load_file(path, name="T_BAD", store=st, progress=False)
    assert "T_BAD" not in st.list_models()


# -- sentence-transformers' StaticEmbedding ------------------------------------------------


def test_sentence_transformers_static_embedding_directory(st, tmp_path, texts):
    """A saved StaticEmbedding (module dir + Normalize): its ``encode`` is the tokenizer's
    ids without special tokens, an EmbeddingBag mean, then unit length."""
    from safetensors.numpy import save_file

    table, tok = _wl_table()
    (tmp_path / "0_StaticEmbedding").mkdir()
    (tmp_path / "1_Normalize").mkdir()
    save_file(
        {"embedding.weight": table}, str(tmp_path / "0_StaticEmbedding" / "model.safetensors")
    )
    tok.save(str(tmp_path / "0_StaticEmbedding" / "tokenizer.json"))
    modules = [
        {
            "idx": 0,
            "name": "0",
            "path": "0_StaticEmbedding",
            "type": "sentence_transformers.models.StaticEmbedding",
        },
        {
            "idx": 1,
            "name": "1",
            "path": "1_Normalize",
            "type": "sentence_transformers.models.Normalize",
        },
    ]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    load_file(tmp_path, name="T_ST", store=st, progress=False)
    with RedisKeyedVectors("T_ST", store=st) as kv:
        got = kv.embed(texts)
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    want = np.stack([table[x].mean(axis=0) if x else np.zeros(256, np.float32) for x in ids])
    norms = np.linalg.norm(want, axis=1, keepdims=True)
    want = np.divide(want, norms, out=np.zeros_like(want), where=norms > 0)
    assert np.abs(got.vectors - want).max() < TOL
    assert st.get_model("T_ST").source_format == "sentence-transformers"


def test_sentence_transformers_encode_itself(st, tmp_path, texts):
    """Where sentence-transformers is installed (it needs torch: not a test extra), the
    directory it saves itself loads, and ``embed`` equals its ``encode``."""
    pytest.importorskip("torch")
    models = pytest.importorskip("sentence_transformers.models")
    from sentence_transformers import SentenceTransformer

    table, tok = _wl_table()
    module = models.StaticEmbedding(tok, embedding_weights=table)
    SentenceTransformer(modules=[module, models.Normalize()], device="cpu").save(str(tmp_path))
    load_file(tmp_path, name="T_ST_REAL", store=st, progress=False)
    want = SentenceTransformer(str(tmp_path), device="cpu").encode(texts, batch_size=64)
    with RedisKeyedVectors("T_ST_REAL", store=st) as kv:
        got = kv.embed(texts)
    assert np.abs(got.vectors - want).max() < TOL
