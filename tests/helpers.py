"""Helpers the test modules share (fixtures live in ``conftest.py``; plain functions here).

- :func:`wait_until`: THE polling loop of the suite (a condition, a deadline, a message).
- :func:`gensim_data`, :func:`write_w2v`: gensim's test files and a reference writer.
- :func:`start_valkey`: a valkey-server on a TCP port of its own (replicas, cluster nodes).
- :func:`start_cluster`: a Redis Cluster of valkey-server processes on loopback;
  :func:`cluster_client`: a redis-py client of one that closes all it opened.
- :func:`listening_port`: the TCP port a child process listens on (it bound port 0).
- :func:`program`: the command line of a program of ``tests/programs/``.
- :func:`argv`: a command line written as one string, its paths and URLs kept whole.
- :func:`topic_corpus`, :func:`write_topic_corpus`, :func:`topic_purity`: a corpus whose
  topics a trained model must find, and how well it found them.

Sockets: a test server listens on a unix socket, or on TCP port 0 (the kernel gives it a
port nobody holds; :func:`listening_port` reads it back). The one exception is a
valkey-server that must be on TCP (a replica, a cluster node): valkey cannot be asked for
port 0, so :func:`start_valkey` picks a port free a moment ago and, if someone took it
meanwhile, starts the server again on another.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 60.0,
    interval: float = 0.05,
    what: str | Callable[[], str] = "the condition",
) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something truthy,
    and return that; after ``timeout`` seconds fail naming ``what`` (a string, or a
    function giving one: a log, the last state seen).

    >>> wait_until(lambda: 42)
    42
    """
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}"
            )
        time.sleep(interval)


def program(name: str, *args) -> list[str]:
    """The command that runs ``tests/programs/NAME.py`` with ``args`` in a new Python."""
    return [sys.executable, str(Path(__file__).parent / "programs" / f"{name}.py"), *map(str, args)]


def argv(line: str, *values) -> list[str]:
    """A command line: ``line`` split at whitespace, each ``{}`` in it replaced by the
    next of ``values`` as ONE argument (``str()`` of it: a path may hold spaces).

    >>> argv("load {} --key M --batch-size {}", "/tmp/a dir/m.bin", 500)
    ['load', '/tmp/a dir/m.bin', '--key', 'M', '--batch-size', '500']
    >>> argv("tests/mpi/{}", "x.py")
    Traceback (most recent call last):
    ...
    ValueError: 'tests/mpi/{}': a {} stands for a whole argument, not part of one
    """
    words = line.split()
    if any("{}" in w and w != "{}" for w in words):
        raise ValueError(f"{line!r}: a {{}} stands for a whole argument, not part of one")
    if words.count("{}") != len(values):
        raise ValueError(f"{line!r} has {words.count('{}')} {{}} for {len(values)} values")
    given = iter(values)
    return [str(next(given)) if w == "{}" else w for w in words]


def gensim_data(name: str) -> str:
    """The path of one of gensim's own test files (``lee_fasttext.vec``...)."""
    from gensim.test.utils import datapath

    return datapath(name)


def write_w2v(path: Path, tokens, vectors, *, binary: bool = True) -> Path:
    """Write a word2vec file with gensim (the reference writer)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vectors.shape[1])
    kv.add_vectors(list(tokens), np.asarray(vectors, dtype=np.float32))
    kv.save_word2vec_format(str(path), binary=binary)
    return path


def listening_port(pid: int, *, timeout: float = 60.0, alive: Callable[[], bool] = bool) -> int:
    """The TCP port that process ``pid`` listens on, once it listens: a server started
    with port 0 binds the port itself, so no other process can take it first.

    Read from ``/proc`` (Linux): the inodes of the process's sockets, then the LISTEN
    entries of ``/proc/net/tcp``."""

    def port() -> int | None:
        assert alive(), f"process {pid} exited before it listened"
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:  # closed meanwhile
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                        return int(fields[1].rsplit(":", 1)[1], 16)
        return None

    return wait_until(port, timeout=timeout, what=f"process {pid} to listen on a TCP port")


def cluster_client(url: str):
    """A ``redis.RedisCluster`` on the cluster of node ``url`` whose ``close()`` closes every
    node's connections (one made by ``RedisCluster.from_url`` leaves them open for the
    garbage collector, which then warns of them in some later test)."""
    from urllib.parse import urlsplit

    import redis

    node = urlsplit(url)
    return redis.RedisCluster(host=node.hostname, port=node.port)


def start_valkey(data_dir: Path, config: dict[str, str] | None = None, *, attempts: int = 5):
    """A started valkey-server on a loopback TCP port of its own, for the tests that need
    TCP: a replica (``replicaof HOST PORT``) and cluster nodes (their peers and the cluster
    bus, port + 10000, reach them there). Every other test server is on a unix socket.

    Why a port number is picked here at all: valkey cannot be asked for port 0 (0 means
    "no TCP"), so the port is one that is free right now. Should another process take it
    before valkey binds it, valkey exits at start, or the port answers as that other
    process (its ``INFO`` pid is not ours): the server is started again on another port,
    in ``DIR-1``, ``DIR-2``... so a failed start leaves nothing behind."""
    import redis

    from vecserve.embedded import EmbeddedServerError, ValkeyProcess, free_port

    cluster = (config or {}).get("cluster-enabled") == "yes"
    for attempt in range(attempts):
        port = free_port()
        while cluster and port > 55535:  # the cluster bus listens on port + 10000
            port = free_port()
        where = data_dir if attempt == 0 else data_dir.with_name(f"{data_dir.name}-{attempt}")
        node = ValkeyProcess(where, port=port, config=config)
        try:
            node.start()
        except EmbeddedServerError:
            if attempt == attempts - 1:
                raise
            continue
        with redis.Redis(port=port) as r:
            if r.info("server")["process_id"] == node.process.pid:
                return node
        node.kill()  # the port answered as someone else's server
    raise AssertionError(f"no free port for valkey-server in {attempts} attempts")


def start_cluster(base: Path, n: int = 3, *, replicas: bool = False, node_timeout: int = 5000):
    """Start ``n`` cluster-enabled primaries (and a replica of each if ``replicas``) and
    join them into one cluster; replicas come after the primaries in the list. Each node
    is a :func:`start_valkey` (a TCP port of its own, retried if taken)."""
    import redis

    config = {
        "cluster-enabled": "yes",
        "cluster-config-file": "nodes.conf",
        "cluster-node-timeout": str(node_timeout),
    }
    nodes = [start_valkey(base / f"node{i}", config) for i in range(2 * n if replicas else n)]
    clients = [redis.Redis(port=p.port) for p in nodes]
    per = 16384 // n
    for i, c in enumerate(clients[:n]):
        lo, hi = i * per, (16383 if i == n - 1 else (i + 1) * per - 1)
        c.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
    for c in clients[1:]:
        c.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
    total = len(nodes)

    def infos() -> list[str]:
        got = [c.execute_command("CLUSTER", "INFO") for c in clients]
        return [i.decode() if isinstance(i, bytes) else str(i) for i in got]

    wait_until(
        lambda: all(
            "cluster_state:ok" in t and f"cluster_known_nodes:{total}" in t for t in infos()
        ),
        timeout=30,
        what=lambda: f"the cluster to form: {infos()[0][:200]}",
    )
    if replicas:
        for primary, replica in zip(clients[:n], clients[n:], strict=True):
            replica.execute_command(
                "CLUSTER", "REPLICATE", primary.execute_command("CLUSTER", "MYID")
            )
        wait_until(
            lambda: all(
                c.info("replication").get("master_link_status") == "up" for c in clients[n:]
            ),
            timeout=30,
            what="the replicas to sync",
        )
    for c in clients:
        c.close()
    return nodes


TOPICS = 4
PER_TOPIC = 8


def topic_corpus(n_sentences=600, length=10, seed=0):
    """Each sentence draws its words from one topic: topic-mates share every context."""
    rng = np.random.default_rng(seed)
    return [
        [f"t{t}w{w}" for w in rng.integers(0, PER_TOPIC, length)]
        for t in rng.integers(0, TOPICS, n_sentences)
    ]


def write_topic_corpus(path: Path, n_sentences: int, seed: int = 0) -> Path:
    """:func:`topic_corpus` as a text file, a sentence a line."""
    with open(path, "w") as f:
        for s in topic_corpus(n_sentences, seed=seed):
            f.write(" ".join(s) + "\n")
    return path


def topic_purity(kv) -> float:
    """Share of words whose 3 nearest neighbours (in keyed vectors ``kv``) are all from
    their own topic."""
    good = 0
    for t in range(TOPICS):
        for w in range(PER_TOPIC):
            near = kv.most_similar(f"t{t}w{w}", topn=3)
            good += all(n.startswith(f"t{t}w") for n, _ in near)
    return good / (TOPICS * PER_TOPIC)


def durable_valkey(tmp_path: Path):
    """A started valkey-server on a unix socket that syncs every write to its append-only
    file: a kill loses nothing it acknowledged, and ``start()`` again (same data dir)
    brings back what was written, a load's lease included."""
    from vecserve.embedded import ValkeyProcess

    return ValkeyProcess(
        tmp_path / "srv",
        unixsocket=tmp_path / "srv.sock",
        config={"appendonly": "yes", "appendfsync": "always"},
    ).start()


def kill_on_third_batch(monkeypatch, server, then: Callable[[], None] | None = None):
    """Make a load's third batch write (100 vectors written, in batches of 50) kill
    ``server``, then call ``then``; returns the real ``LoadSession.write_encoded``."""
    from vecserve.store import LoadSession

    real_write = LoadSession.write_encoded
    calls = {"n": 0}

    def dying_write(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            server.kill()
            if then is not None:
                then()
        return real_write(self, *a, **kw)

    monkeypatch.setattr(LoadSession, "write_encoded", dying_write)
    return real_write
