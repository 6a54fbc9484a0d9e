"""The approximate index builds in the background: the service is ready as soon as exact
search is, reports the build's progress, answers approximate queries exactly (and says
so) meanwhile, and maps the finished index from disk after a restart instead of
rebuilding it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.api_support import AppClient, wait_for_ann
from tests.helpers import program, wait_until
from vecserve.api import create_app
from vecserve.loader import load_arrays
from vecserve.search import ann as ann_module
from vecserve.search.ann import build as ann_build
from vecserve.search.ann import manager as ann_manager
from vecserve.service.settings import Settings

N, DIM = 20_000, 16


@pytest.fixture
def model(store):
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((50, DIM))
    vectors = (centres[rng.integers(0, 50, N)] + 0.3 * rng.standard_normal((N, DIM))).astype(
        np.float32
    )
    words = [f"w{i}" for i in range(N)]
    load_arrays(words, vectors, name="A", store=store)
    return words


def _count_builds(monkeypatch) -> list:
    """Count AnnIndex.build calls from now on (each appends to the returned list)."""
    builds = []
    real = ann_module.AnnIndex.build

    def counted(cls, *args, **kwargs):
        builds.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ann_module.AnnIndex, "build", classmethod(counted))
    return builds


def test_ready_before_the_ann_build_ends_with_progress_and_flagged_answers(
    redis_url, model, tmp_path, monkeypatch
):
    monkeypatch.setattr(ann_build, "BUILD_CHUNK", 2_000)
    gate, reached = threading.Event(), threading.Event()
    update = ann_module.BuildProgress.update

    def held(self, done, total):  # hold the real build after its third chunk
        update(self, done, total)
        if done >= 6_000 and not gate.is_set():
            reached.set()
            gate.wait(60)

    monkeypatch.setattr(ann_module.BuildProgress, "update", held)
    settings = Settings(
        redis_url=redis_url, default_model="A", preload=True, ann=True, cache_dir=tmp_path
    )
    try:
        with AppClient(create_app(settings)) as client:
            wait_until(lambda: client.get("/readyz").status_code == 200, what="/readyz")
            assert reached.wait(60), "the build never started"
            assert client.get("/readyz").json()["status"] == "ready"  # while it builds
            ann = client.get("/models/A").json()["ann"]
            assert ann["state"] == "building"
            prog = ann["progress"]
            assert prog["done"] == 6_000 and prog["total"] == N
            assert prog["share"] == pytest.approx(6_000 / N, abs=1e-4)
            assert prog["vectors_per_s"] > 0 and prog["eta_s"] > 0
            # another process (the CLI) sees the same build through the cache dir
            info = _models_info("A", redis_url, tmp_path)["ann"]
            assert info["state"] == "building" and info["progress"]["done"] == 6_000
            q = {"positive": ["w1"], "topn": 5, "approx": True}
            r = client.post("/most_similar", json=q).json()
            assert r["approximate"] is False and r["approximate_status"] == "building"
            exact = client.post("/most_similar", json={**q, "approx": False}).json()
            assert r["results"] == exact["results"]  # answered exactly meanwhile
            gate.set()
            wait_for_ann(client, "A")
            r = client.post("/most_similar", json=q).json()
            assert r["approximate"] is True and "approximate_status" not in r
            info = _models_info("A", redis_url, tmp_path)["ann"]
            assert info["state"] == "ready" and info["recall_at_10"] > 0.5
            assert not list(tmp_path.rglob("*.progress.json"))
    finally:
        gate.set()


def _models_info(name, redis_url, cache_dir) -> dict:
    import json
    import os

    from tests.api_support import run_vecserve

    env = {**os.environ, "VECSERVE_REDIS_URL": redis_url, "VECSERVE_CACHE_DIR": str(cache_dir)}
    return json.loads(run_vecserve("models", "info", name, env=env).stdout)


def test_one_builder_per_index_across_processes(store, model, tmp_path, monkeypatch):
    """While another process holds an index's build lock, a manager does not build it too:
    it reports that process's progress, then maps the index it leaves."""
    import subprocess

    from vecserve.search.snapshot import SimilarityIndex

    monkeypatch.setattr(ann_manager, "WAIT_POLL", 0.05)
    sim = SimilarityIndex.build(store, store.get_model("A"), cache_dir=tmp_path)
    manager = ann_module.AnnManager(enabled=True)
    path = manager.path_for(sim)
    holder = subprocess.Popen(
        program("ann_lock_holder", f"{path}.lock", f"{path}.progress.json"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        real = ann_module.AnnIndex.build
        builds = _count_builds(monkeypatch)
        assert manager.get(sim) is None
        status = wait_until(lambda: (st := manager.status(sim)).get("builder") and st)
        assert status["state"] == "building" and status["progress"]["done"] == 5000
        assert ann_module.disk_status(path.parent)["state"] == "building"
        time.sleep(0.3)
        assert builds == [], "built while another process held the lock"
        monkeypatch.setattr(ann_module.AnnIndex, "build", real)
        theirs = ann_module.AnnIndex.build(sim, path=path)  # the other process finishes
        holder.kill()
        got = wait_until(lambda: manager.ready(sim) and manager.get(sim))
        assert got.meta.build_seconds == theirs.meta.build_seconds
        assert builds == []
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
        manager.close()


def test_the_index_is_mapped_after_a_restart_not_rebuilt(redis_url, model, tmp_path, monkeypatch):
    settings = Settings(
        redis_url=redis_url, default_model="A", preload=True, ann=True, cache_dir=tmp_path
    )
    with AppClient(create_app(settings)) as client:
        wait_for_ann(client, "A")
    builds = []
    real = ann_module.AnnIndex.build
    monkeypatch.setattr(
        ann_module.AnnIndex,
        "build",
        classmethod(lambda cls, *a, **k: builds.append(1) or real(*a, **k)),
    )
    with AppClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="/readyz")
        ann = wait_for_ann(client, "A")
        assert ann["rows"] == N
        r = client.post("/most_similar", json={"positive": ["w1"], "topn": 5, "approx": True})
        assert r.json()["approximate"] is True
    assert builds == [], "the second service rebuilt the index instead of mapping it"


def test_load_with_ann_builds_the_index_the_service_then_maps(
    redis_url, store, tmp_path, monkeypatch
):
    import os

    from tests.api_support import run_vecserve
    from tests.helpers import write_w2v

    rng = np.random.default_rng(3)
    words = [f"v{i}" for i in range(3_000)]
    path = write_w2v(tmp_path / "m.bin", words, rng.standard_normal((3_000, 12)).astype("f4"))
    cache = tmp_path / "cache"
    env = {**os.environ, "VECSERVE_REDIS_URL": redis_url, "VECSERVE_CACHE_DIR": str(cache)}
    out = run_vecserve("load", str(path), "--key", "L", "--ann", env=env).stdout
    assert "L: approximate index of generation 1 ready" in out and "recall@10" in out
    assert "target 0.95" in out and "95% CI" in out
    info = _models_info("L", redis_url, cache)["ann"]  # the estimate and the setting chosen
    assert info["state"] == "ready" and info["target"]["met"] is True
    assert info["recall_at_10"] >= 0.95 and len(info["recall_interval"]) == 2
    assert set(info["target"]["setting"]) == {"expansion_search"}

    builds = _count_builds(monkeypatch)
    settings = Settings(
        redis_url=redis_url, default_model="L", preload=True, ann=True, cache_dir=cache
    )
    with AppClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="/readyz")
        assert client.get("/models/L").json()["ann"]["state"] == "ready"
        r = client.post("/most_similar", json={"positive": ["v1"], "topn": 3, "approx": True})
        assert r.json()["approximate"] is True
    assert builds == [], "the service rebuilt what vecserve load --ann built"


def test_load_with_another_recall_target_is_served_with_the_same_target(
    redis_url, store, tmp_path, monkeypatch
):
    import os

    from tests.api_support import run_vecserve
    from tests.helpers import write_w2v

    rng = np.random.default_rng(8)
    words = [f"r{i}" for i in range(2_000)]
    path = write_w2v(tmp_path / "m.bin", words, rng.standard_normal((2_000, 12)).astype("f4"))
    cache = tmp_path / "cache"
    env = {**os.environ, "VECSERVE_REDIS_URL": redis_url, "VECSERVE_CACHE_DIR": str(cache)}
    out = run_vecserve(
        "load", str(path), "--key", "R", "--ann", "--ann-recall", "0.99", env=env
    ).stdout
    assert "target 0.99" in out
    [built] = cache.rglob("ann-*.usearch")
    assert built.name.endswith("-r0.99.usearch")
    info = _models_info("R", redis_url, cache)["ann"]  # found whatever its target
    assert info["target"]["recall"] == 0.99 and info["recall_at_10"] >= 0.99

    builds = _count_builds(monkeypatch)
    settings = Settings(
        redis_url=redis_url,
        default_model="R",
        preload=True,
        ann=True,
        ann_recall=0.99,
        cache_dir=cache,
    )
    with AppClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="/readyz")
        ann = wait_for_ann(client, "R")
        assert ann["target"]["recall"] == 0.99
    assert builds == [], "the service rebuilt what vecserve load --ann-recall built"
    bad = run_vecserve("load", str(path), "--key", "R", "--ann-recall", "1.5", env=env, check=False)
    assert bad.returncode != 0 and "--ann-recall" in bad.stderr
