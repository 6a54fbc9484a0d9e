"""`vecserve load -`: a vector file piped into the real command (plain, gzip, bz2),
read once in constant memory and equal to gensim's reading of the same file; what
cannot be done with a stream (resume, formats read at random) is said in one line."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import numpy as np
import pytest
import redis
from gensim.models import KeyedVectors

from tests.helpers import gensim_data, start_valkey
from vecserve.keyedvectors import RedisKeyedVectors
from vecserve.store.layout import LOADS, MODELS


def piped(producer: str, *args: str, url: str) -> subprocess.CompletedProcess:
    """``producer | vecserve ARGS`` through a shell, the command as a user runs it."""
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "vecserve.cli", *args])
    return subprocess.run(
        f"set -o pipefail; {producer} | {command}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        env={**os.environ, "VECSERVE_REDIS_URL": url},
        timeout=120,
    )


def one_line(proc) -> str:
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("compress", ["cat", "gzip -c", "bzip2 -c"])
@pytest.mark.parametrize(
    "name, binary", [("lee_fasttext.vec", False), ("euclidean_vectors.bin", True)]
)
def test_a_pipe_loads_what_gensim_reads(store, compress, name, binary):
    path = gensim_data(name)
    proc = piped(f"{compress} {shlex.quote(path)}", "load", "-", "--key", "M", url=store.url)
    assert proc.returncode == 0, proc.stderr
    ref = KeyedVectors.load_word2vec_format(path, binary=binary)
    n = len(ref.key_to_index)  # gensim keeps a None key per duplicate at the end
    assert f"M: {n:,} vectors x {ref.vector_size} " in proc.stdout
    info = store.get_model("M")
    assert info.source == "<stdin>" and info.count == n
    assert store.vocab(info) == ref.index_to_key[:n]
    with RedisKeyedVectors("M", redis_url=store.url) as kv:
        got = kv[ref.index_to_key[:n]]
    assert got.view(np.uint32).tolist() == ref.vectors[:n].view(np.uint32).tolist()


def test_a_stream_cannot_be_resumed_and_says_so(store):
    lee = shlex.quote(gensim_data("lee_fasttext.vec"))
    line = one_line(piped(f"cat {lee}", "load", "-", "--key", "M", "--resume", url=store.url))
    assert line.startswith("Error: <stdin>: a stream cannot be read again, so its load cannot")
    assert "--restart" in line and store.client.dbsize() == 0


def test_formats_read_at_random_need_a_file(store):
    ft = shlex.quote(gensim_data("lee_fasttext.bin"))
    line = one_line(piped(f"cat {ft}", "load", "-", "--key", "M", url=store.url))
    assert "a fasttext-bin file cannot be read from a stream" in line
    assert "save it to a file" in line and store.client.dbsize() == 0


def test_a_wrong_format_on_a_stream_commits_nothing(store):
    lee = shlex.quote(gensim_data("lee_fasttext.vec"))
    proc = piped(f"gzip -c {lee}", "load", "-", "--key", "M", "--format", "w2v-bin", url=store.url)
    assert "the content is not w2v-bin: it looks like w2v-text" in one_line(proc)
    assert store.client.dbsize() == 0


def test_a_stream_that_redis_stops_is_dropped_not_left_to_resume(tmp_path):
    """Out of memory in mid-stream (a GloVe stream has no count, so no pre-flight
    refusal): the partial load is dropped, and the line says the stream cannot be
    resumed rather than offering `--resume`."""
    server = start_valkey(tmp_path / "v", {"maxmemory": "3mb", "maxmemory-policy": "noeviction"})
    try:
        rng = np.random.default_rng(1)
        glove = tmp_path / "g.txt"
        with open(glove, "w") as f:
            for i in range(20_000):
                f.write(f"w{i} " + " ".join(f"{x:.5f}" for x in rng.random(50)) + "\n")
        proc = piped(f"cat {glove}", "load", "-", "--key", "G", url=server.url)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        (line,) = [x for x in proc.stderr.splitlines() if x.startswith("Error: ")]
        assert "Load of 'G' from <stdin> stopped after" in line
        assert "a stream cannot be read again" in line and "--resume" not in line
        assert "Run the command again (with --restart if" in line
        r = redis.Redis(port=server.port)
        assert not r.hlen(LOADS) and not r.hlen(MODELS)
    finally:
        server.stop()


def test_a_named_pipe_is_read_once_as_a_stream(store, tmp_path):
    """A path that is no regular file (a FIFO here; `/dev/stdin`, `<(curl ...)` alike) is
    a stream: read once, never reopened, and not resumable."""
    fifo = tmp_path / "vectors.fifo"
    os.mkfifo(fifo)
    lee = shlex.quote(gensim_data("lee_fasttext.vec"))
    writer = subprocess.Popen(f"gzip -c {lee} > {shlex.quote(str(fifo))}", shell=True)
    try:
        proc = piped("true", "load", str(fifo), "--key", "F", url=store.url)
    finally:
        writer.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr
    info = store.get_model("F")
    assert info.count == 1762 and info.source == str(fifo)
    writer = subprocess.Popen(f"cat {lee} > {shlex.quote(str(fifo))}", shell=True)
    try:
        line = one_line(piped("true", "load", str(fifo), "--key", "F", "--resume", url=store.url))
    finally:
        writer.wait(timeout=60)
    assert "a stream cannot be read again, so its load cannot be resumed" in line
