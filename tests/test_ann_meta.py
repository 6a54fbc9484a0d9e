"""The approximate index's build metadata (vecserve/search/ann/meta.py): typed in memory,
the same JSON on disk as the versions before it wrote, so their indexes are mapped as they
are (none is rebuilt for the change)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vecserve.search.ann import AnnIndex, AnnManager, AnnParams, BuildMeta, disk_status
from vecserve.search.snapshot import SimilarityIndex

# The .json files vecserve wrote before search/ann became a package (commit 9158d39), for
# indexes over _sim() below: a targeted IVF build that fell back to exact, a targeted HNSW
# build that met its target, and a build to fixed settings.
BEFORE = {
    "ivf-target": {
        "library": "vecserve IVF, numpy 2.4.6",
        "params": {
            "kind": "ivf", "connectivity": 16, "expansion_add": 128, "expansion_search": 128,
            "dtype": "i8", "nlist": 4, "nprobe": 3, "oversample": 2, "recall_queries": 500,
            "recall": 0.95, "latency_budget": 0.2,
        },
        "name": "M", "generation": 3, "rows": 300, "nlist": 4, "build_seconds": 0.006,
        "recall_at_10": 0.0, "recall_interval": None, "recall_queries": 150,
        "query_ms": None, "exact_query_ms": None,
        "target": {
            "recall": 0.95, "met": False,
            "reason": "recall@10 0.95 needs nprobe >= 3 of 4 lists (75% of the rows): "
            "no faster than 0.2 x an exact query",
            "latency_budget": 0.2, "setting": {"nprobe": 3, "oversample": 2},
            "tuning_queries": 150,
        },
        "index_bytes": 6720,
    },
    "hnsw-target": {
        "library": "usearch 2.26.6",
        "params": {
            "kind": "hnsw", "connectivity": 16, "expansion_add": 128, "expansion_search": 16,
            "dtype": "f16", "nlist": 0, "nprobe": 16, "oversample": 2, "recall_queries": 50,
            "recall": 0.95, "latency_budget": 0.2,
        },
        "name": "M", "generation": 3, "rows": 300, "build_seconds": 0.018,
        "recall_at_10": 1.0, "recall_interval": [0.994, 1.0], "recall_queries": 50,
        "query_ms": 0.03, "exact_query_ms": 0.025,
        "target": {
            "recall": 0.95, "met": True, "reason": None, "latency_budget": 0.2,
            "setting": {"expansion_search": 16}, "tuning_queries": 50,
        },
        "index_bytes": 49064,
    },
    "ivf-fixed": {
        "library": "vecserve IVF, numpy 2.4.6",
        "params": {
            "kind": "ivf", "connectivity": 16, "expansion_add": 128, "expansion_search": 128,
            "dtype": "i8", "nlist": 4, "nprobe": 4, "oversample": 2, "recall_queries": 500,
            "recall": None, "latency_budget": 0.2,
        },
        "name": "M", "generation": 3, "rows": 300, "nlist": 4, "build_seconds": 0.004,
        "recall_at_10": 1.0, "recall_queries": 300, "query_ms": 0.018, "index_bytes": 6720,
    },
}  # fmt: skip
PARAMS = {
    "ivf-target": AnnParams(kind="ivf", nlist=4),
    "hnsw-target": AnnParams(kind="hnsw", recall_queries=50),
    "ivf-fixed": AnnParams(kind="ivf", nlist=4, nprobe=4, recall=None),
}
#: What differs between two builds of the same index: times, versions, HNSW's file size.
VARIES = ("library", "build_seconds", "query_ms", "exact_query_ms", "index_bytes")


def _sim() -> SimilarityIndex:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    return SimilarityIndex.from_arrays([f"w{i}" for i in range(300)], x, name="M", generation=3)


@pytest.mark.parametrize("case", BEFORE)
def test_the_metadata_reads_and_writes_the_json_of_before(case):
    meta = BuildMeta.from_json(BEFORE[case])
    assert meta.to_json() == BEFORE[case]
    assert list(json.dumps(meta.to_json())) == list(json.dumps(BEFORE[case]))  # key order
    assert meta.usable is (case != "ivf-target")
    assert (meta.target is None) is (case == "ivf-fixed")


@pytest.mark.parametrize("case", BEFORE)
def test_a_build_writes_what_the_version_before_wrote(case, tmp_path):
    p = PARAMS[case].resolved(300)
    # one thread: a multi-threaded HNSW build of 300 rows may leave a row unreachable
    AnnIndex.build(_sim(), path=tmp_path / p.filename, params=p, threads=1)
    now = json.loads((tmp_path / p.filename).with_suffix(".json").read_text())
    assert list(now) == list(BEFORE[case])
    same = {k: v for k, v in now.items() if k not in VARIES}
    assert same == {k: v for k, v in BEFORE[case].items() if k not in VARIES}


@pytest.mark.parametrize("case", ["ivf-target", "hnsw-target"])
def test_an_index_written_before_is_mapped_as_it_is(case, tmp_path, monkeypatch):
    """An index file beside the .json of before: opened, not rebuilt, its settings used."""
    sim = _sim()
    sim.path = tmp_path
    p = PARAMS[case].resolved(300)
    path = tmp_path / p.filename
    AnnIndex.build(sim, path=path, params=p)
    path.with_suffix(".json").write_text(json.dumps(BEFORE[case], indent=1))
    monkeypatch.setattr(AnnIndex, "build", None)  # a rebuild would fail the test
    manager = AnnManager(enabled=True, params=PARAMS[case])
    ann = manager.get(sim)
    assert ann is not None and ann.meta == BuildMeta.from_json(BEFORE[case])
    setting = ann.params.setting_name
    assert getattr(ann.index, setting) == BEFORE[case]["params"][setting]
    assert manager.ready(sim) is (case == "hnsw-target")
    status = manager.status(sim)
    assert status["state"] == ("ready" if case == "hnsw-target" else "exact-fallback")
    assert {k: v for k, v in status.items() if k in BEFORE[case]} == {
        k: v for k, v in BEFORE[case].items() if k != "name"
    }
    assert disk_status(tmp_path, PARAMS[case])["recall_at_10"] == BEFORE[case]["recall_at_10"]
