"""Shared fixtures: real Redis-protocol servers started by the tests themselves.

- ``redis_url``: vecserve's own embedded valkey-server in a temporary data dir, started
  through the same :class:`vecserve.embedded.EmbeddedServer` that the CLI uses; or the
  throw-away server given by ``pytest --redis-url URL`` / ``$VECSERVE_TEST_REDIS_URL``
  (it is FLUSHED between tests). Never ``$VECSERVE_REDIS_URL``: that is where users point
  vecserve at their real data, so the suite removes it from its environment at start
  (the library, and every command a test runs, then never reaches that server).
- ``cluster_url``: a 3-node Redis Cluster of valkey-server processes on loopback, formed
  with CLUSTER ADDSLOTSRANGE + CLUSTER MEET (no valkey-cli needed).
- ``store``: a :class:`vecserve.store.Store` on ``redis_url``, flushed after each test.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from vecserve.embedded import EmbeddedServer, ValkeyProcess, free_port
from vecserve.store import Store

TEST_URL_ENV = "VECSERVE_TEST_REDIS_URL"


def pytest_addoption(parser):
    parser.addoption(
        "--redis-url",
        default=None,
        metavar="URL",
        help="a THROW-AWAY Redis/Valkey for the tests (FLUSHALL between tests); default "
        f"${TEST_URL_ENV}, else a server the suite starts. $VECSERVE_REDIS_URL is never used.",
    )


def pytest_configure(config):
    # $VECSERVE_REDIS_URL names a user's own server: nothing in the suite may reach it
    os.environ.pop("VECSERVE_REDIS_URL", None)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory, pytestconfig):
    url = pytestconfig.getoption("--redis-url") or os.environ.get(TEST_URL_ENV)
    if url:
        yield url
        return
    server = EmbeddedServer(tmp_path_factory.mktemp("embedded"))
    server.acquire()
    yield server.url
    server.release()
    server.stop()


@pytest.fixture
def store(redis_url):
    s = Store.from_url(redis_url)
    s.client.flushall()
    yield s
    try:
        s.client.flushall()
    finally:
        s.close()


def start_cluster(
    base: Path, n: int = 3, *, replicas: bool = False, node_timeout: int = 5000
) -> list[ValkeyProcess]:
    """Start ``n`` cluster-enabled primaries (and a replica of each if ``replicas``) and
    join them into one cluster; replicas come after the primaries in the list."""
    nodes = []
    for i in range(2 * n if replicas else n):
        port = free_port()
        while port > 55535:  # the cluster bus listens on port + 10000
            port = free_port()
        nodes.append(
            ValkeyProcess(
                base / f"node{i}",
                port=port,
                config={
                    "cluster-enabled": "yes",
                    "cluster-config-file": "nodes.conf",
                    "cluster-node-timeout": str(node_timeout),
                },
            ).start()
        )
    clients = [redis.Redis(port=p.port) for p in nodes]
    per = 16384 // n
    for i, c in enumerate(clients[:n]):
        lo, hi = i * per, (16383 if i == n - 1 else (i + 1) * per - 1)
        c.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
    for c in clients[1:]:
        c.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
    total = len(nodes)
    deadline = time.monotonic() + 30

    def wait(what: str, ok) -> None:
        while True:
            infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
            text = [i.decode() if isinstance(i, bytes) else str(i) for i in infos]
            if ok(text):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster did not {what}: {text[0][:200]}")
            time.sleep(0.05)

    wait("form", lambda text: all(
        "cluster_state:ok" in t and f"cluster_known_nodes:{total}" in t for t in text
    ))  # fmt: skip
    if replicas:
        for primary, replica in zip(clients[:n], clients[n:], strict=True):
            replica.execute_command(
                "CLUSTER", "REPLICATE", primary.execute_command("CLUSTER", "MYID")
            )
        while not all(c.info("replication").get("master_link_status") == "up" for c in clients[n:]):
            assert time.monotonic() < deadline, "replicas did not sync"
            time.sleep(0.05)
    for c in clients:
        c.close()
    return nodes


@pytest.fixture(scope="session")
def cluster_nodes(tmp_path_factory):
    nodes = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield nodes
    for p in nodes:
        p.stop()


@pytest.fixture
def cluster_url(cluster_nodes):
    url = f"redis://127.0.0.1:{cluster_nodes[0].port}"
    s = Store.from_url(url)
    s.client.flushall(target_nodes="primaries")
    yield url
    s.client.flushall(target_nodes="primaries")
    s.close()


@pytest.fixture
def cluster_store(cluster_url):
    s = Store.from_url(cluster_url)
    yield s
    s.close()


def gensim_data(name: str) -> str:
    from gensim.test.utils import datapath

    return datapath(name)


def write_w2v(path: Path, tokens, vectors, *, binary: bool = True) -> Path:
    """Write a word2vec file with gensim (the reference writer)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vectors.shape[1])
    kv.add_vectors(list(tokens), np.asarray(vectors, dtype=np.float32))
    kv.save_word2vec_format(str(path), binary=binary)
    return path


@pytest.fixture
def small_bin(tmp_path):
    """A 500 x 20 word2vec .bin with a few non-ASCII tokens, and its arrays."""
    rng = np.random.default_rng(7)
    tokens = [f"w{i}" for i in range(497)] + ["café", "日本", "naïve"]
    vectors = rng.standard_normal((500, 20)).astype(np.float32)
    path = write_w2v(tmp_path / "small.bin", tokens, vectors)
    return path, tokens, vectors
