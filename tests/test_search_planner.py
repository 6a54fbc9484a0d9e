"""The query planner and the wire format of query items (vecserve/search/planner.py,
vecserve/search/wire.py): one typed query in, one answer out; the query's own errors
raised before any search, an error inside a search never turned into the caller's."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from vecserve.errors import BadQuery, GenerationChanged, QueryRejected, TokenNotFound
from vecserve.search.planner import Limits, Planner, Query
from vecserve.search.snapshot import SimilarityIndex
from vecserve.search.wire import Vector, Weighted, encode_items, parse_item, read_item

from .helpers import program


@pytest.fixture
def sim() -> SimilarityIndex:
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(50)]
    return SimilarityIndex.from_arrays(words, rng.standard_normal((50, 8)).astype(np.float32))


def test_the_wire_format_round_trips(sim):
    items = [("w1", 2.0), np.arange(8, dtype=np.float32), 3, "w4", (np.ones(8), -1.0)]
    parsed = [parse_item(i, dim=8) for i in encode_items(items)]
    assert parsed[0] == ("w1", 2.0) and parsed[2] == 3 and parsed[3] == "w4"
    assert parsed[1].dtype == np.float32 and np.array_equal(parsed[1], items[1])
    assert parsed[4][1] == -1.0 and parsed[4][0].dtype == np.float64
    with pytest.raises(BadQuery, match="components"):
        parse_item([1.5, 2.0], dim=8)
    # JSON's 3.0 is the integer 3 (as the OpenAPI schema's "integer" says): a position
    assert parse_item(3.0, dim=8) == 3 and parse_item([3.0, 2.0], dim=8) == (3, 2.0)
    assert isinstance(read_item({"vector": [1.0] * 8, "dtype": "<f2"}), Vector)
    assert isinstance(read_item([[1.0, 2.0], 0.5]).key, Vector)
    for bad in (
        -1,
        True,
        [],
        [1.0, True],
        {"vector": [7e4], "dtype": "<f2"},
        ["w", "x"],
        {"vector": [1.0], "dtype": {}},
    ):
        with pytest.raises(BadQuery, match="is not a word"):
            read_item(bad)


def test_a_query_reads_its_items_once_and_fits_them_to_the_model_when_planned(sim):
    q = Query(positive=["w1", 3.0, ["w2", 2.0], {"vector": [1.0] * 8, "dtype": "<f4"}])
    assert q.positive[:3] == ("w1", 3, Weighted("w2", 2.0))
    assert isinstance(q.positive[3], Vector) and q.positive[3].dtype == "<f4"
    with pytest.raises(ValueError, match="is not a word"):  # refused when read
        Query(positive=[["w1", "w2"]])
    short = Query(positive=[[1.0, 2.0, 3.0]])  # read; its length is the model's business
    with pytest.raises(BadQuery, match="8 components"):
        Planner(sim).answer(short)
    # [position, number] is a pair, except on a 2-d model where it is a bare vector
    assert read_item([3, 0.5]) == Weighted(3, 0.5, either=True)
    assert parse_item([3, 0.5], dim=8) == (3, 0.5)
    assert parse_item([3, 0.5], dim=2).tolist() == [3.0, 0.5]


def test_texts_are_embedded_once_per_query_and_searched_as_vectors(sim):
    asked = []

    class Texts:  # the planner's RowSource for texts: a vector per text, tokens used
        def text_rows(self, texts):
            asked.append(texts)
            rows = np.stack([np.full(8, len(t), np.float32) for t in texts])
            return sim.generation, rows, np.array([0 if t == "zzz" else 1 for t in texts])

    planner = Planner(sim, rows=Texts())
    q = Query(positive=[{"text": "ab"}, [{"text": "abc"}, 2.0]], negative=[{"text": "ab"}])
    got = planner.answer(q)
    assert asked == [["ab", "abc"]]  # each distinct text once
    two, three = np.full(8, 2, np.float32), np.full(8, 3, np.float32)
    assert got.results == sim.most_similar([two, (three, 2.0)], [two])
    with pytest.raises(TokenNotFound):  # no token of the text is in the model
        planner.answer(Query(positive=[{"text": "zzz"}]))
    with pytest.raises(QueryRejected, match="text rule"):
        Planner(sim).answer(Query(positive=[{"text": "ab"}]))


def test_the_query_and_the_planner_need_no_pydantic():
    """The base install (RedisKeyedVectors imports the planner) has no pydantic, no
    FastAPI: the query type is a dataclass; the service's bodies build it."""
    out = subprocess.run(program("base_install_query"), capture_output=True, text=True)
    assert out.stdout.strip() == "2.0", out.stderr


def test_answers_are_the_snapshots(sim):
    planner = Planner(sim)
    got = planner.answer(Query(positive=("w1", "w2"), negative=("w3",), topn=5))
    assert got.results == sim.most_similar(["w1", "w2"], ["w3"], topn=5)
    assert not got.approximate and got.approximate_status is None
    everything = planner.answer(Query(positive=("w1",), topn=None))
    assert everything.similarities.dtype == np.float64 and len(everything.similarities) == 50
    cosmul = planner.answer(Query(positive=("w1",), topn=3, cosmul=True))
    assert cosmul.results == sim.most_similar_cosmul(["w1"], topn=3)
    batch = planner.answer_batch([Query(positive=("w1",), topn=3), Query(positive=("w2",))])
    for b, single in zip(
        batch, [sim.most_similar("w1", topn=3), sim.most_similar("w2")], strict=True
    ):
        assert [w for w, _ in b.results] == [w for w, _ in single]  # scores: sgemm's rounding
        np.testing.assert_allclose([x for _, x in b.results], [x for _, x in single], atol=1e-6)


def test_the_querys_errors_come_before_any_search(sim, monkeypatch):
    planner = Planner(sim, name="M", limits=Limits(max_words=3, max_topn=20, max_batch=1))
    monkeypatch.setattr(sim, "most_similar", lambda *a, **k: pytest.fail("searched"))
    with pytest.raises(TokenNotFound):
        planner.answer(Query(positive=("nope",)))
    with pytest.raises(BadQuery, match="topn=21"):
        planner.answer(Query(positive=("w1",), topn=21))
    with pytest.raises(BadQuery, match="4 positive items"):
        planner.answer(Query(positive=("w1", "w2", "w3", "w4")))
    with pytest.raises(QueryRejected, match=r"^cannot compute mean with no input$"):
        planner.answer(Query())
    with pytest.raises(QueryRejected, match=r"^cannot compute similarity with no input$"):
        planner.answer(Query(negative=("w1",), cosmul=True))
    with pytest.raises(BadQuery, match="cosmul takes"):
        planner.answer(Query(positive=(["w1", 2.0],), cosmul=True))
    with pytest.raises(BadQuery, match="2 queries"):
        planner.answer_batch([Query(positive=("w1",))] * 2)


def test_a_batch_reports_each_querys_own_error_in_its_slot(sim, monkeypatch):
    planner = Planner(sim, name="M", limits=Limits(max_topn=20))
    asked = [
        Query(positive=("w1",), topn=3),
        Query(positive=("nope",)),
        Query(),
        Query(positive=("w2",), topn=21),
        Query(positive=("w3",), negative=("w4",)),
    ]
    got = planner.answer_batch(asked)
    assert [type(a) for a in got[1:4]] == [TokenNotFound, QueryRejected, BadQuery]
    for i in (0, 4):
        assert [w for w, _ in got[i].results] == [w for w, _ in planner.answer(asked[i]).results]

    def broken(*args, **kwargs):
        raise ValueError("an internal fault")

    monkeypatch.setattr(sim, "most_similar_batch", broken)  # not a query's: the batch's
    with pytest.raises(ValueError, match="internal fault"):
        planner.answer_batch(asked)


def test_an_error_inside_a_search_is_not_the_callers(sim, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("an internal fault")

    monkeypatch.setattr(sim, "most_similar", broken)
    with pytest.raises(ValueError, match="internal fault"):  # not QueryRejected (a 400)
        Planner(sim).answer(Query(positive=("w1",)))


def test_unknown_words_of_a_fasttext_model_come_from_the_reader(sim):
    vec = np.linspace(-1, 1, 8).astype(np.float32)
    asked = []

    class Rows:  # the planner's RowSource (the service's reader in the service)
        def __init__(self, generation):
            self.generation = generation

        def subword_rows(self, words):
            asked.append(words)
            return self.generation, np.stack([vec * (i + 1) for i in range(len(words))])

    planner = Planner(sim, subwords=True, rows=Rows(sim.generation))
    got = planner.answer(Query(positive=("w1", "oovword"), topn=4))
    assert asked == [["oovword"]] and got.subwords == ["oovword"]
    unit = vec / np.linalg.norm(vec)
    assert got.results == sim.most_similar(["w1", unit], topn=4)

    with pytest.raises(GenerationChanged):
        moved = Rows(sim.generation + 1)
        Planner(sim, subwords=True, rows=moved).answer(Query(positive=("oovword",)))
