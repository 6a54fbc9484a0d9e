"""Metrics through prometheus_client, merged over worker processes (real processes here;
the real two-worker service is in test_api_serve)."""

from __future__ import annotations

import subprocess

from tests.helpers import program
from vecserve.service.metrics import Metrics


def _scrape(directory) -> str:
    return subprocess.run(
        program("metrics_scrape", directory), capture_output=True, text=True, check=True
    ).stdout


def _sample(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in the scrape:\n{text}")


def test_workers_merge_counters_histograms_and_live_gauges(tmp_path):
    a, b = (
        subprocess.Popen(
            program("metrics_worker", tmp_path, *args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for args in (("3", "10", "5"), ("2", "12", "7"))
    )
    try:
        assert a.stdout.readline().strip() == "ready" and b.stdout.readline().strip() == "ready"
        text = _scrape(tmp_path)
        req = 'vecserve_requests_total{endpoint="/v",method="GET",status="200"}'
        assert _sample(text, req) == 5
        assert _sample(text, 'vecserve_index_rows{model="M"}') == 12  # the largest
        assert _sample(text, 'vecserve_vector_cache_entries{model="M"}') == 12  # summed
        assert _sample(text, 'vecserve_request_duration_seconds_count{endpoint="/v"}') == 2
        assert (
            _sample(text, 'vecserve_request_duration_seconds_bucket{endpoint="/v",le="0.001"}') == 1
        )
        assert (
            _sample(text, 'vecserve_request_duration_seconds_bucket{endpoint="/v",le="0.25"}') == 2
        )
        assert _sample(text, "vecserve_worker_processes") == 3  # a, b and the scraper

        b.stdin.close()  # b exits: its totals stay, its state goes
        b.wait(timeout=30)
        text = _scrape(tmp_path)
        assert _sample(text, req) == 5  # totals never drop
        assert _sample(text, 'vecserve_index_rows{model="M"}') == 10
        assert _sample(text, 'vecserve_vector_cache_entries{model="M"}') == 5
        assert _sample(text, "vecserve_worker_processes") == 2
    finally:
        for p in (a, b):
            if not p.stdin.closed:
                p.stdin.close()
            p.wait(timeout=30)
            p.stdout.close()


def test_collectors_set_gauges_before_each_render():
    m = Metrics()
    state = {"n": 1}
    m.on_collect(lambda metrics: metrics.set("vecserve_index_rows", state["n"], model="M"))
    assert b'vecserve_index_rows{model="M"} 1.0' in m.render()
    state["n"] = 4
    assert b'vecserve_index_rows{model="M"} 4.0' in m.render()
    assert m.value("vecserve_index_rows", model="M") == 4
