"""Least-privilege Redis users (``vecserve acl``) against a real valkey-server.

The users are created from the lines ``vecserve acl`` prints; each role is then used the
way it is meant to be (a worker's RedisKeyedVectors, ``vecserve get``, ``vecserve serve``,
a loader) and refused what it must not do, with a clear error naming command and user.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis

from tests.api_support import AppClient, run_vecserve, serving
from vecserve.acl import setuser_line
from vecserve.embedded import ValkeyProcess
from vecserve.errors import PermissionDenied, VecserveError
from vecserve.loader import load_arrays, load_file

from .helpers import argv, gensim_data

WORDS = ["king", "queen", "man", "woman", "apple"]
VECTORS = np.random.default_rng(0).standard_normal((len(WORDS), 8)).astype(np.float32)


def cli(*args, url: str, check: bool = True):
    return run_vecserve(*args, env={**os.environ, "VECSERVE_REDIS_URL": url}, check=check)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("acl")
    with ValkeyProcess(data, unixsocket=data / "valkey.sock") as valkey:
        admin = redis.Redis.from_url(valkey.url)
        for line in (
            setuser_line("worker", user="w", password="wpw"),
            setuser_line("api", user="a", password="apw", model="M"),
            setuser_line("loader", user="l", password="lpw", model="L"),
        ):
            admin.execute_command(*line.split())
        admin.execute_command(
            *argv(
                "ACL SETUSER nomget on >npw ~* +@connection +hget +hgetall +get +lrange +subscribe"
            )
        )
        # the worker line as it was before fastText reads used EVAL_RO
        old_worker = setuser_line("worker", user="old", password="opw").split()
        admin.execute_command(*[w for w in old_worker if w != "+eval_ro"])
        load_arrays(WORDS, VECTORS, name="M", redis_url=valkey.url)
        load_file(gensim_data("toy-model.bin"), name="FT", redis_url=valkey.url)
        yield valkey.unixsocket
        admin.close()


def url(socket: Path, user: str, password: str) -> str:
    return f"unix://{user}:{password}@{socket}"


@pytest.mark.parametrize("cache", [0, 100])
def test_worker_reads_with_redis_keyed_vectors(server, cache):
    from vecserve import RedisKeyedVectors

    kv = RedisKeyedVectors("M", redis_url=url(server, "w", "wpw"), cache=cache)
    try:
        for _ in range(2):  # the second read is a cache hit when the cache is on
            assert np.array_equal(kv[["king", "apple"]], VECTORS[[0, 4]])
        assert kv.most_similar("king", topn=2)[0][0] in WORDS
        with pytest.raises(KeyError):
            kv["nope"]
    finally:
        kv.close()


@pytest.mark.parametrize("user", ["w", "old"])
def test_worker_reads_fasttext_words_it_never_saw(server, user):
    """The worker role reads a fastText batch in one MGET with read rights only (the
    generation's vocabulary hashes say which words need n-grams), the ACL line from
    before EVAL_RO too. A generation without those hashes (loaded by an older vecserve)
    is read with one EVAL_RO where the role has it, else with an MGET of every word's
    n-grams: the same vectors each way; neither user can run a writing script."""
    from gensim.models.fasttext import load_facebook_vectors

    from vecserve import RedisKeyedVectors

    want = load_facebook_vectors(gensim_data("toy-model.bin"))
    words = ["the", "raskolnikovish", "日本語", "night"]
    expected = np.vstack([want[w] for w in words])
    kv = RedisKeyedVectors("FT", redis_url=url(server, user, {"w": "wpw", "old": "opw"}[user]))
    admin = redis.Redis(unix_socket_path=str(server))
    key = f"vecserve:vocabh:{kv.info.prefix}"
    hashes = admin.get(key)
    try:
        np.testing.assert_allclose(kv[words], expected, atol=1e-6)
        store = kv._get_store()
        assert hashes and store.vocab_hashes(kv.info) is not None
        admin.delete(key)  # as a generation loaded before the hashes existed
        entry = admin.hget("vecserve:models", "FT")
        admin.hset("vecserve:models", "FT", replace(kv.info, word_hashes=False).to_json())
        kv.close()  # a reader of that older generation
        kv = RedisKeyedVectors("FT", redis_url=url(server, user, {"w": "wpw", "old": "opw"}[user]))
        store = kv._get_store()
        np.testing.assert_allclose(
            kv[["raskolnikovish", "the", "dostoevskyish"]],
            np.vstack([want[w] for w in ["raskolnikovish", "the", "dostoevskyish"]]),
            atol=1e-6,
        )
        assert store.subword_script is (user == "w")
        with pytest.raises(redis.exceptions.NoPermissionError):
            store.client.execute_command("EVAL", "return redis.call('SET', 'x', 1)", 0)
        # refused by the ACL (the worker writes only its pins) or as a write in EVAL_RO
        with pytest.raises(redis.ResponseError, match=r"not allowed|(?i:no permissions to)"):
            store.client.execute_command("EVAL_RO", "return redis.call('SET', 'x', 1)", 0)
    finally:
        admin.set(key, hashes)
        if "entry" in locals():
            admin.hset("vecserve:models", "FT", entry)
        admin.close()
        kv.close()


def test_worker_cannot_write(server):
    with pytest.raises(PermissionDenied) as info:
        load_arrays(["x"], np.ones((1, 8), np.float32), name="X", redis_url=url(server, "w", "wpw"))
    msg = str(info.value)
    # the worker may SET its pin keys only: refused the command or the key
    assert "Redis user 'w'" in msg and "wpw" not in msg
    assert "no permissions to run the" in msg or "No permissions to access a key" in msg
    assert isinstance(info.value, VecserveError)


def test_cli_get_as_worker_and_a_refused_load_is_one_line(server, tmp_path):
    out = cli("get", "king", "queen", "--key", "M", url=url(server, "w", "wpw")).stdout
    assert out.startswith("king\t[") and "queen\t[" in out
    vec = tmp_path / "v.txt"
    vec.write_text("1 3\nx 1 2 3\n")
    proc = cli("load", str(vec), "--key", "X", url=url(server, "w", "wpw"), check=False)
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert "pre-flight check skipped: the Redis user may not run INFO" in err  # a worker
    err = err.splitlines()[-1]
    assert len(proc.stderr.strip().splitlines()) == 2 and "Traceback" not in proc.stderr
    assert "o permissions to" in err and "Redis user 'w'" in err and "wpw" not in err


def test_loader_writes_its_model_only(server):
    loader = url(server, "l", "lpw")
    info = load_arrays(WORDS, VECTORS, name="L", redis_url=loader)
    again = load_arrays(WORDS, VECTORS * 2, name="L", redis_url=loader)  # a reload: new gen
    assert again.generation == info.generation + 1
    with pytest.raises(PermissionDenied, match=r"Redis user 'l' .* No permissions to access a key"):
        load_arrays(WORDS, VECTORS, name="OTHER", redis_url=loader)
    assert "L " in cli("models", url=loader).stdout  # reading the registry is allowed
    assert "OTHER" not in redis.Redis(unix_socket_path=str(server)).hkeys("vecserve:models")


def test_api_user_limited_to_its_model(server):
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    app = create_app(Settings(redis_url=url(server, "a", "apw"), default_model="M"))
    with AppClient(app) as client:
        r = client.get("/vectors", params={"words": "king,apple"})
        assert r.status_code == 200 and r.json()["words"] == ["king", "apple"]
        assert (
            client.get("/most_similar", params={"positive": "king", "topn": 2}).status_code == 200
        )


def test_api_answers_503_json_when_its_user_lacks_a_right(server):
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    app = create_app(Settings(redis_url=url(server, "nomget", "npw"), default_model="M"))
    with AppClient(app) as client:
        r = client.get("/vectors", params={"words": "king"})
        assert r.status_code == 503
        body = r.json()
        assert body["error"] == "PermissionDenied" and "mget" in body["detail"].lower()
        assert "npw" not in r.text


def test_serve_runs_as_the_read_only_user(server, tmp_path):
    args = argv("--redis-url {} --default-model M --log-level warning", url(server, "w", "wpw"))
    with serving(args, tmp_path) as (base, log):
        r = httpx.get(f"{base}/vectors", params={"words": "king"})
        assert r.status_code == 200 and r.json()["words"] == ["king"]
        # the first query builds the model's snapshot: seconds on a loaded machine
        r = httpx.get(f"{base}/most_similar", params={"positive": "queen", "topn": 3}, timeout=60)
        assert r.status_code == 200, r.text
    assert "wpw" not in log.read_text() and "Traceback" not in log.read_text()


def test_acl_command_prints_a_line_per_role():
    out = cli("acl", "worker", "--user", "celery", url="redis://unused").stdout.split()
    assert out[:3] == ["ACL", "SETUSER", "celery"] and "-@dangerous" in out and "%R~*" in out
    proc = cli("acl", "loader", url="redis://unused", check=False)
    assert proc.returncode == 1 and "--key NAME" in proc.stderr


def test_aclfile_keeps_the_users_across_restarts_and_the_default_user_off(tmp_path):
    """`vecserve acl --aclfile` writes the users a server reads at every start: the
    passwords as hashes, the default user disabled, other users' lines kept."""
    import subprocess
    import time

    from vecserve.embedded import NO_RETRY, server_binary

    acl, sock = tmp_path / "users.acl", tmp_path / "v.sock"
    env = {**os.environ, "ADMIN_PW": "admin-secret-1", "API_PW": "api-secret-1"}
    for role, var in (("admin", "ADMIN_PW"), ("api", "API_PW")):
        proc = run_vecserve("acl", role, "--password-env", var, "--aclfile", str(acl), env=env)
        assert proc.stdout == "" and f"added user vecserve-{role}" in proc.stderr
    made = run_vecserve("acl", "worker", "--user", "celery", "--aclfile", str(acl), env=env)
    celery_pw = made.stdout.split()[-1]  # a random one, shown once
    text = acl.read_text()
    assert text.splitlines()[0].startswith("user default off ")
    assert "secret" not in text and celery_pw not in text and oct(acl.stat().st_mode)[-3:] == "600"
    missing = run_vecserve(
        "acl", "api", "--password-env", "NOPE", "--aclfile", str(acl), check=False
    )
    assert missing.returncode != 0 and "$NOPE is not set" in missing.stderr
    (tmp_path / "other.conf").write_text("port 6379\n")
    other = run_vecserve("acl", "api", "--aclfile", str(tmp_path / "other.conf"), check=False)
    assert other.returncode == 1 and "other.conf:1: not an ACL file" in other.stderr
    assert (tmp_path / "other.conf").read_text() == "port 6379\n"

    def start():
        argv = [str(server_binary()), "--port", "0", "--unixsocket", str(sock)]
        argv += ["--aclfile", str(acl), "--dir", str(tmp_path), "--appendonly", "yes"]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "valkey did not start"
            time.sleep(0.02)
        return proc

    def as_user(user=None, password=None):  # a refused AUTH is not retried
        return redis.Redis(
            unix_socket_path=str(sock), username=user, password=password, retry=NO_RETRY
        )

    server = start()
    try:
        admin = as_user("vecserve-admin", "admin-secret-1")
        # vecserve writes its batches in MULTI/EXEC: the AOF replays them at a restart
        load_arrays(
            WORDS, VECTORS, name="M", redis_url=f"unix://vecserve-admin:admin-secret-1@{sock}"
        )
        for _ in range(2):  # the second time after a restart: the users came from the file
            with pytest.raises(redis.AuthenticationError):
                as_user().ping()  # the default user: NOAUTH
            with pytest.raises(redis.AuthenticationError):
                as_user("default", "").ping()
            got = cli("get", "king", "--key", "M", url=f"unix://vecserve-api:api-secret-1@{sock}")
            assert got.returncode == 0 and got.stdout.strip()
            assert as_user("celery", celery_pw).ping()
            with pytest.raises(redis.exceptions.NoPermissionError):
                as_user("vecserve-api", "api-secret-1").set("M:x", b"")
            admin.close()
            server.terminate()
            server.wait(timeout=15)
            server = start()
            admin = as_user("vecserve-admin", "admin-secret-1")
        # a new password for one user replaces its line and keeps the others
        env["API_PW"] = "api-secret-2"
        run_vecserve("acl", "api", "--password-env", "API_PW", "--aclfile", str(acl), env=env)
        admin.execute_command("ACL", "LOAD")
        assert as_user("vecserve-api", "api-secret-2").ping()
        with pytest.raises(redis.AuthenticationError):
            as_user("vecserve-api", "api-secret-1").ping()
        assert as_user("celery", celery_pw).ping()
        admin.close()
    finally:
        server.terminate()
        server.wait(timeout=15)
