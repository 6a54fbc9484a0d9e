"""The IVF kind of approximate index (vecserve/search/ivf.py through vecserve/search/ann.py): exact
answers when every list is scanned, progress while it builds, mapped from disk after a
restart, and a damaged file rebuilt or refused with a one-line reason."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

import numpy as np
import pytest

from tests.api_support import AppClient, wait_for_ann
from vecserve.api import create_app
from vecserve.loader import load_arrays
from vecserve.search import ann as ann_module
from vecserve.search.ann import AnnIndex, AnnManager, AnnParams, disk_status
from vecserve.search.ann import build as ann_build
from vecserve.search.ann import params as ann_params
from vecserve.search.ivf import I8_SLACK, IvfIndex, quantize
from vecserve.search.snapshot import SimilarityIndex
from vecserve.service.settings import Settings

N, DIM = 6_000, 24
IVF = AnnParams(kind="ivf", nlist=32, nprobe=4)


@pytest.fixture
def sim(store, tmp_path) -> SimilarityIndex:
    """A committed clustered model and its snapshot on disk (as the service builds it)."""
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((30, DIM))
    vectors = centres[rng.integers(0, 30, N)] + 0.5 * rng.standard_normal((N, DIM))
    load_arrays([f"w{i}" for i in range(N)], vectors.astype(np.float32), name="I", store=store)
    return SimilarityIndex.build(store, store.get_model("I"), cache_dir=tmp_path)


def _builds(monkeypatch) -> list:
    builds, real = [], AnnIndex.build
    monkeypatch.setattr(
        AnnIndex, "build", classmethod(lambda cls, *a, **k: builds.append(1) or real(*a, **k))
    )
    return builds


def test_every_list_scanned_gives_the_exact_answer_and_its_scores(sim):
    ann = AnnIndex.build(sim, params=AnnParams(kind="ivf", nlist=32, nprobe=32, recall=None))
    assert isinstance(ann.index, IvfIndex) and ann.index.nlist == 32
    assert ann.recall_at_10 >= 0.99
    for word in ["w0", "w17", "w4242"]:
        exact = sim.most_similar(word, topn=10)
        got = ann.most_similar(sim, [word], [], topn=10)
        assert [w for w, _ in got] == [w for w, _ in exact]
        exact_scores = dict(exact)
        for w, score in got:  # the snapshot's own arithmetic: the same float32 cosines
            assert score == exact_scores[w]
    # an analogy (positive and negative words, the query's words excluded)
    got = ann.most_similar(sim, ["w1", "w2"], ["w3"], topn=5)
    assert got == sim.most_similar(["w1", "w2"], ["w3"], topn=5)


def test_fewer_lists_scanned_stay_close_and_scores_stay_exact(sim):
    ann = AnnIndex.build(sim, params=IVF)
    assert ann.meta.nlist == 32 and ann.meta.params.kind == "ivf"
    assert ann.recall_at_10 >= 0.9  # 4 of 32 lists over 30 clusters
    got = ann.most_similar_batch(sim, [(["w5"], [], 10), (["w6"], [], 3), (["w7"], [], 0)])
    assert [len(r) for r in got] == [10, 3, 0]
    for w, s in got[0]:
        assert s == pytest.approx(float(sim.distances("w5", [w])[0] * -1 + 1), abs=1e-6)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_a_batch_gives_each_query_its_single_answer(sim, kind):
    # 400 queries over 32 lists: lists shared by many queries, the scan split in two threads
    ann = AnnIndex.build(sim, params=replace(IVF, kind=kind, recall=None))
    rng = np.random.default_rng(3)
    asked = [([f"w{i}"], [], int(rng.integers(0, 15))) for i in rng.choice(N, 400, replace=False)]
    asked += [(["w1", "w2"], ["w3"], 5), (["w9"], [], 10)]  # an analogy, a repeated word
    asked += [(["w9"], [], 10)]
    singles = [ann.most_similar(sim, *q) for q in asked]
    assert ann.most_similar_batch(sim, asked) == singles
    assert all(len(got) == q[2] for got, q in zip(singles, asked, strict=True))
    assert all(w not in q[0] + q[1] for got, q in zip(singles, asked, strict=True) for w, _ in got)


def test_progress_is_reported_while_it_builds(sim, monkeypatch):
    monkeypatch.setattr(ann_build, "BUILD_CHUNK", 1_000)
    gate, reached, seen = threading.Event(), threading.Event(), []
    update = ann_module.BuildProgress.update

    def held(self, done, total):
        update(self, done, total)
        seen.append(done)
        if done >= total // 2 and not gate.is_set():  # halfway: hold the real build
            reached.set()
            gate.wait(60)

    monkeypatch.setattr(ann_module.BuildProgress, "update", held)
    manager = AnnManager(enabled=True, params=IVF)
    try:
        assert manager.get(sim) is None
        assert reached.wait(60), "the build never reported progress"
        status = manager.status(sim)
        assert status["state"] == "building" and status["library"].startswith("vecserve IVF")
        prog, done = status["progress"], seen[-1]
        assert N // 2 <= done < N and len(seen) > 3  # k-means rounds and chunks reported
        assert prog["done"] == done and prog["total"] == N
        assert prog["share"] == pytest.approx(done / N, abs=1e-4)
        assert prog["vectors_per_s"] > 0  # and the ETA is what is left at that rate
        assert prog["eta_s"] == pytest.approx((N - done) / prog["vectors_per_s"], abs=0.11)
        theirs = disk_status(sim.path, IVF)  # what another process (the CLI) sees
        assert theirs["state"] == "building" and theirs["progress"]["done"] == done
        gate.set()
        ann = manager.get(sim, wait=True)
        assert ann is not None and manager.status(sim)["state"] == "ready"
        assert seen == sorted(seen) and seen[-1] == N
        assert disk_status(sim.path, IVF)["state"] == "ready"
        assert not list(sim.path.glob("*.progress.json"))
    finally:
        gate.set()
        manager.close()


def test_reused_across_a_restart_mapped_not_rebuilt(sim, monkeypatch):
    first = AnnManager(enabled=True, params=IVF).get(sim, wait=True)
    assert first is not None
    path = AnnManager(params=IVF).path_for(sim)
    assert path.name == "ann-ivf-nlist32-i8.ivf" and path.exists()
    builds = _builds(monkeypatch)
    reopened = SimilarityIndex.open(sim.path, name=sim.name, generation=sim.generation)
    manager = AnnManager(enabled=True, params=IVF)  # a new process's manager
    again = manager.get(reopened)
    assert again is not None and builds == []
    assert isinstance(again.index.rows.base, np.memmap)  # mapped from the file, not read in
    assert again.meta.build_seconds == first.meta.build_seconds
    assert again.meta.index_bytes == path.stat().st_size
    got = again.most_similar(reopened, ["w9"], [], 5)
    assert got == first.most_similar(sim, ["w9"], [], 5)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_index_file_is_rebuilt_or_refused(sim, monkeypatch, caplog, damage):
    AnnManager(enabled=True, params=IVF).get(sim, wait=True)
    path = AnnManager(params=IVF).path_for(sim)
    if damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size // 2)
        reason = "truncated or damaged IVF index"
    else:
        path.write_bytes(b"\0" * 4096)
        reason = "not a vecserve IVF index"
    with pytest.raises(ValueError, match=reason):
        IvfIndex.open(path)

    # a process that does not build indexes refuses it and says why, in one line
    disabled = AnnManager(enabled=False, params=IVF)
    assert disabled.get(sim) is None
    status = disabled.status(sim)
    assert status["state"] == "failed" and reason in status["error"]
    assert str(path) in status["error"] and "\n" not in status["error"]

    # a builder replaces it
    builds = _builds(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="vecserve.search.ann"):
        ann = AnnManager(enabled=True, params=IVF).get(sim, wait=True)
    assert builds == [1] and ann is not None and ann.recall_at_10 >= 0.9
    assert any(reason in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert IvfIndex.open(path).count == N


def test_the_service_answers_with_an_ivf_index_for_large_models(
    redis_url, sim, tmp_path, monkeypatch
):
    """kind "auto" picks IVF from IVF_FROM_ROWS rows (lowered here to this model's size)."""
    monkeypatch.setattr(ann_params, "IVF_FROM_ROWS", N)
    settings = Settings(
        redis_url=redis_url, default_model="I", preload=True, ann=True, cache_dir=tmp_path
    )
    with AppClient(create_app(settings)) as client:
        ann = wait_for_ann(client, "I")
        assert ann["library"].startswith("vecserve IVF") and ann["params"]["kind"] == "ivf"
        # int8 rows, int64 ids and float32 scales, and a few lists' centroids
        assert ann["recall_at_10"] >= 0.9 and N * DIM < ann["index_bytes"] < N * (DIM + 12) + 4096
        q = {"positive": ["w3"], "topn": 5, "approx": True}
        r = client.post("/most_similar", json=q).json()
        assert r["approximate"] is True
        exact = dict(sim.most_similar("w3", topn=50))
        for w, s in r["results"]:
            assert s == pytest.approx(exact[w], abs=1e-6)
        # exact queries go through the index's float16 rows once it is ready
        taken, real = [], AnnIndex.exact_most_similar
        monkeypatch.setattr(
            AnnIndex, "exact_most_similar", lambda *a: taken.append(real(*a)) or taken[-1]
        )
        r = client.get("/most_similar?positive=w3,w4&negative=w5&topn=7").json()
        assert r["approximate"] is False and taken and taken[0] is not None
        want = sim.most_similar(["w3", "w4"], ["w5"], topn=7)
        assert [w for w, _ in r["results"]] == [w for w, _ in want]


def test_a_damaged_hnsw_file_is_refused_and_rebuilt_too(sim, monkeypatch):
    hnsw = AnnParams(kind="hnsw", expansion_add=32)
    AnnManager(enabled=True, params=hnsw).get(sim, wait=True)
    path = AnnManager(params=hnsw).path_for(sim)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    disabled = AnnManager(params=hnsw)
    assert disabled.get(sim) is None
    error = disabled.status(sim)["error"]
    assert error.startswith(f"{path}: damaged HNSW index") and "\n" not in error
    builds = _builds(monkeypatch)
    ann = AnnManager(enabled=True, params=hnsw).get(sim, wait=True)
    assert builds == [1] and ann is not None and len(ann.index) == N


def _queries():
    rng = np.random.default_rng(4)
    for i in rng.choice(N, 25, replace=False):
        yield [f"w{i}"], [], 10
    yield ["w1", "w2"], ["w3"], 5
    yield ["w7"], [], 200


def test_exact_answers_through_the_float16_rows_are_the_snapshots(sim):
    """Every row scanned in float16, candidates re-scored: the full scan's words in its
    order, scores within float rounding; the shortcut proves its answer every time here."""
    ann = AnnIndex.build(sim, params=IVF)
    for pos, neg, topn in _queries():
        got = ann.exact_most_similar(sim, pos, neg, topn)
        want = sim.most_similar(pos, neg, topn=topn)
        assert got is not None
        assert [w for w, _ in got] == [w for w, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-6)


def _unit_rows_at(cosines: np.ndarray, rng) -> np.ndarray:
    """Unit rows with the given cosines to the first axis."""
    other = rng.standard_normal((len(cosines), DIM))
    other[:, 0] = 0
    other /= np.linalg.norm(other, axis=1, keepdims=True)
    rows = np.sqrt(1 - cosines**2)[:, None] * other
    rows[:, 0] = cosines
    return rows


@pytest.mark.parametrize("case", ["dense", "ties"])
def test_the_exact_shortcut_declines_what_it_cannot_prove(store, tmp_path, case):
    """Neighbours packed closer than the stored rows can tell apart (1,200 rows 1e-6
    apart in cosine: no ties, but the last candidate is within the bound of the 11th), or tied
    exact scores (ten identical rows): None, and the caller scans the snapshot. So do
    HNSW indexes and topn 0."""
    rng = np.random.default_rng(8)
    cos = rng.uniform(-0.5, 0.5, N)
    if case == "dense":
        cos[:1200] = 0.9999 - 1e-6 * np.arange(1200)
    else:
        cos[:50] = 0.99 - 1e-3 * np.arange(50)
    rows = _unit_rows_at(cos, rng)
    rows[0] = 0
    rows[0, 0] = 1.0  # the query word
    if case == "ties":
        rows[5:15] = rows[5]
    load_arrays([f"d{i}" for i in range(N)], rows.astype(np.float32), name="D", store=store)
    sim = SimilarityIndex.build(store, store.get_model("D"), cache_dir=tmp_path)
    ann = AnnIndex.build(sim, params=IVF)
    assert ann.exact_most_similar(sim, ["d0"], [], 10) is None
    assert sim.most_similar("d0", topn=10)[0][0] == "d1"
    if case == "ties":  # away from the tie, the same data proves its answers
        got = ann.exact_most_similar(sim, ["d20"], [], 3)
        want = sim.most_similar("d20", topn=3)
        assert got is not None and [w for w, _ in got] == [w for w, _ in want]
    assert ann.exact_most_similar(sim, ["d0"], [], 0) is None
    hnsw = AnnIndex.build(sim, params=AnnParams(kind="hnsw", expansion_add=32))
    assert hnsw.exact_most_similar(sim, ["d20"], [], 3) is None


def test_scan_all_reads_every_row_in_parts(sim, tmp_path):
    IvfIndex.build_arrays(sim.vectors, tmp_path / "a.ivf", nlist=8, norms=sim.norms)
    index = IvfIndex.open(tmp_path / "a.ivf")
    q = np.asarray(sim.vectors[5] / sim.norms[5], dtype=np.float32)
    one = index.scan_all(q, 50, threads=1)
    for threads in (2, 3):
        rows, scores = index.scan_all(q, 50, threads=threads)
        np.testing.assert_array_equal(rows, one[0])
        np.testing.assert_array_equal(scores, one[1])
    assert one[0][0] == 5 and np.all(np.diff(one[1]) <= 0)


def test_a_batchs_query_vectors_are_query_vectors_floats(sim):
    # one-word queries are made together, in gensim's operations: the same float32 bits
    rng = np.random.default_rng(5)
    asked = [([f"w{i}"], [], 10) for i in rng.choice(N, 300, replace=False)]
    asked += [(["w1", "w2"], ["w3"], 5), ([7], [], 3), ([sim.vectors[4]], [], 2), ("w8", [], 1)]
    asked += [([np.int64(9)], [], 2), ([N - 1], [], 1)]  # positions, as gensim takes them
    for group in (asked, *([a] for a in asked)):  # together, and each alone
        means, excludes = sim.query_vectors([a[:2] for a in group])
        for (positive, negative, _), mean, exclude in zip(group, means, excludes, strict=True):
            want, want_exclude = sim.query_vector(positive, negative)
            np.testing.assert_array_equal(mean.view(np.int32), want.view(np.int32))
            assert exclude == want_exclude
    with pytest.raises(KeyError):
        sim.query_vectors([(["nope"], [])])


@pytest.mark.parametrize("dtype", ["i8", "f16", "f32"])
def test_stored_rows_score_within_the_files_bound(sim, tmp_path, dtype):
    IvfIndex.build_arrays(sim.vectors, tmp_path / "a.ivf", nlist=8, norms=sim.norms, dtype=dtype)
    index = IvfIndex.open(tmp_path / "a.ivf")
    assert (index.scales is not None) == (dtype == "i8")
    unit = np.asarray(sim.vectors, np.float64) / np.asarray(sim.norms, np.float64)[:, None]
    rng = np.random.default_rng(3)
    worst = 0.0
    for _ in range(5):
        q = rng.standard_normal(DIM)
        q = (q / np.linalg.norm(q)).astype(np.float32)
        rows, scores = index.scan_all(q, N)
        assert len(rows) == N and sorted(rows) == list(range(N))
        err = float(np.abs(scores - unit[rows] @ q.astype(np.float64)).max())
        assert err <= index.query_bound(q)  # int8: the rows' and the query's codes' errors
        assert index.score_bound <= index.query_bound(q) < index.score_bound + 1e-3
        worst = max(worst, err)
    if dtype == "i8":  # a bound of the rows' own errors: far tighter than the codes' step
        assert 0.1 * index.score_bound < worst and index.score_bound < 0.05
        # the header holds the rows' largest error (written once the rows are)
        largest = quantize(unit.astype(np.float32))[2]
        assert index.score_bound == pytest.approx(largest + I8_SLACK, rel=1e-6)


def test_an_int8_file_with_a_bad_score_bound_is_refused(sim, tmp_path):
    path = tmp_path / "a.ivf"
    IvfIndex.build_arrays(sim.vectors, path, nlist=8, norms=sim.norms, dtype="i8")
    raw = path.read_bytes()
    head = raw[:4096]
    at = head.index(b'"score_bound": ') + len(b'"score_bound": ')
    end = head.index(b"}", at)
    for bad in (b"-1", b'"x"', b"null"):
        damaged = raw[:at] + bad.ljust(end - at) + raw[end:]
        path.write_bytes(damaged)
        with pytest.raises(ValueError, match="damaged IVF"):
            IvfIndex.open(path)
