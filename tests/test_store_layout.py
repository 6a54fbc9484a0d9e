"""The store layout's version (``vecserve/store/records.py``): every load records the layout
it wrote, an entry without one is layout 1, and a newer layout is refused by every reader
with one clear error rather than read as if it were this one."""

import json
import os

import numpy as np
import pytest

from tests.api_support import run_vecserve
from vecserve import RedisKeyedVectors
from vecserve.errors import LayoutTooNew
from vecserve.store import LOADS, MODELS, Store, begin_load
from vecserve.store.records import LAYOUT_VERSION

NEWER = LAYOUT_VERSION + 1


def _load(store, name="M"):
    s = begin_load(store, name, dim=4, codec="f32", restart=True)
    s.write(["car", "bus"], np.arange(8, dtype=np.float32).reshape(2, 4))
    return s.commit()


def _rewrite(store, key, name, **change):
    """The record of ``name`` in hash ``key`` with fields changed (None: removed)."""
    data = json.loads(store.client.hget(key, name))
    for field, value in change.items():
        if value is None:
            data.pop(field)
        else:
            data[field] = value
    store.client.hset(key, name, json.dumps(data))


def test_a_load_records_the_layout_it_writes(store):
    s = begin_load(store, "M", dim=4, codec="f32")
    assert json.loads(store.client.hget(LOADS, "M"))["layout"] == LAYOUT_VERSION
    s.write(["car"], np.ones((1, 4), np.float32))
    info = s.commit()
    assert info.layout == LAYOUT_VERSION
    assert json.loads(store.client.hget(MODELS, "M"))["layout"] == LAYOUT_VERSION


def test_an_entry_without_a_layout_is_layout_1_and_reads(store, redis_url):
    _load(store)
    _rewrite(store, MODELS, "M", layout=None)
    assert "layout" not in json.loads(store.client.hget(MODELS, "M"))
    fresh = Store.from_url(redis_url)
    try:
        assert fresh.get_model("M").layout == 1
    finally:
        fresh.close()
    with RedisKeyedVectors("M", redis_url=redis_url) as kv:
        assert kv["bus"].tolist() == [4.0, 5.0, 6.0, 7.0]


def test_a_newer_layout_is_refused_by_every_reader(store, redis_url):
    _load(store)
    _rewrite(store, MODELS, "M", layout=NEWER)
    said = rf"model 'M' is stored in layout {NEWER}.* up to {LAYOUT_VERSION}"
    fresh = Store.from_url(redis_url)
    try:
        with pytest.raises(LayoutTooNew, match=said):
            fresh.get_model("M")
        with pytest.raises(LayoutTooNew, match=said):
            fresh.model_from_entry("M", fresh.registry_entry("M"))
        # listed (a listing reads no rows), and never replaced or deleted by this vecserve
        assert [m.layout for m in fresh.list_models()] == [NEWER]
        with pytest.raises(LayoutTooNew, match=said):
            begin_load(fresh, "M", dim=4, codec="f32")
        with pytest.raises(LayoutTooNew, match=said):
            fresh.delete_model("M")
        assert fresh.client.get("M:car") is not None
    finally:
        fresh.close()
    with pytest.raises(LayoutTooNew, match=said):
        RedisKeyedVectors("M", redis_url=redis_url)["car"]


def test_an_unfinished_load_of_a_newer_layout_is_not_resumed(store):
    s = begin_load(store, "M", dim=4, codec="f32")
    s.write(["car"], np.ones((1, 4), np.float32))
    s.lease.release()
    _rewrite(store, LOADS, "M", layout=NEWER)
    with pytest.raises(LayoutTooNew, match=rf"layout {NEWER}"):
        store.get_load("M")
    with pytest.raises(LayoutTooNew, match=rf"layout {NEWER}"):
        begin_load(store, "M", dim=4, codec="f32", resume=True)


def test_the_cli_says_a_newer_layout_in_one_line(store, redis_url):
    _load(store)
    _rewrite(store, MODELS, "M", layout=NEWER)
    env = {**os.environ, "VECSERVE_REDIS_URL": redis_url}
    proc = run_vecserve("models", "info", "M", env=env, check=False)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert f"model 'M' is stored in layout {NEWER}" in line and "Traceback" not in proc.stderr
