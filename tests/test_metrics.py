"""Merging the metrics of several workers (the real two-worker service: test_api_serve)."""

from __future__ import annotations

import json

from vecserve.service.metrics import Metrics


def test_merge_sums_counters_and_histograms_and_takes_gauges_from_live_workers():
    a, b = Metrics(), Metrics()
    a.inc("vecserve_requests_total", 3, endpoint="/v")
    b.inc("vecserve_requests_total", 2, endpoint="/v")
    a.observe("vecserve_request_duration_seconds", 0.001, endpoint="/v")
    b.observe("vecserve_request_duration_seconds", 0.2, endpoint="/v")
    a.set("vecserve_index_rows", 10, model="M")
    b.set("vecserve_index_rows", 12, model="M")
    a.set("vecserve_vector_cache_entries", 5, model="M")
    b.set("vecserve_vector_cache_entries", 7, model="M")

    both = Metrics.merged([a.snapshot(), b.snapshot()], [True, True])
    assert both.value("vecserve_requests_total", endpoint="/v") == 5
    assert both.value("vecserve_index_rows", model="M") == 12  # the largest
    assert both.value("vecserve_vector_cache_entries", model="M") == 12  # held by each: summed
    text = both.render()
    assert 'vecserve_request_duration_seconds_count{endpoint="/v"} 2' in text
    assert 'vecserve_request_duration_seconds_bucket{endpoint="/v",le="0.001"} 1' in text
    assert 'vecserve_request_duration_seconds_bucket{endpoint="/v",le="0.25"} 2' in text
    assert "vecserve_worker_processes 2" in text

    b_exited = Metrics.merged([a.snapshot(), b.snapshot()], [True, False])
    assert b_exited.value("vecserve_requests_total", endpoint="/v") == 5  # totals never drop
    assert b_exited.value("vecserve_index_rows", model="M") == 10  # b's state is gone
    assert b_exited.value("vecserve_vector_cache_entries", model="M") == 5
    assert b_exited.value("vecserve_worker_processes") == 1


def test_collectors_set_gauges_before_each_render():
    m = Metrics()
    state = {"n": 1}
    m.on_collect(lambda metrics: metrics.set("vecserve_index_rows", state["n"], model="M"))
    assert 'vecserve_index_rows{model="M"} 1' in m.render()
    state["n"] = 4
    published = json.loads(json.dumps(m.snapshot()))  # what a worker writes to its file
    assert published["values"]["vecserve_index_rows"] == [[[["model", "M"]], 4.0]]
