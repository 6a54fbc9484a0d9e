"""The embedded server: started by the first command, kept up, shared, durable, restarted
after a crash, stopped on request -- with the real ``vecserve`` command."""

import contextlib
import json
import os
import subprocess
import sys

import pytest
import redis

from tests.api_support import run_vecserve
from tests.helpers import program, start_valkey, wait_until
from vecserve.embedded import (
    EmbeddedServer,
    ValkeyProcess,
    embedded_server,
    read_pid,
    wait_pid_gone,
)
from vecserve.procs import pid_alive


def vecserve(data_dir, *args, check=True):
    env = {k: v for k, v in os.environ.items() if k != "VECSERVE_REDIS_URL"}
    return run_vecserve(*args, env={**env, "VECSERVE_DATA_DIR": str(data_dir)}, check=check)


def status(data_dir) -> dict:
    return json.loads(vecserve(data_dir, "server", "status", "--json", check=False).stdout)


@pytest.fixture
def data_dir(tmp_path):
    yield tmp_path / "data"
    EmbeddedServer(tmp_path / "data").stop()  # never leave a server behind


def test_started_by_one_command_used_by_the_next(data_dir, tmp_path):
    vec = tmp_path / "v.txt"
    vec.write_text("2 3\nking 1 2 3\nqueen 4 5 6\n")
    assert status(data_dir) == {"running": False, "data_dir": str(data_dir)}
    vecserve(data_dir, "load", str(vec), "--key", "M")
    first = status(data_dir)
    assert first["running"] and first["models"] == ["M"]
    assert (
        "queen\t[4.0000 5.0000 6.0000]" in vecserve(data_dir, "get", "queen", "--key", "M").stdout
    )
    again = status(data_dir)
    assert again["pid"] == first["pid"], "the second command attached, no restart"
    assert again["uptime_seconds"] >= first["uptime_seconds"]
    # durable without a shutdown: the commit was saved in the background
    wait_until(lambda: status(data_dir)["saved"], timeout=30, what="the committed load saved")
    assert (data_dir / "dump.rdb").exists()


def test_status_and_stop_saving_only_changes(data_dir):
    server = EmbeddedServer(data_dir).acquire()
    client = redis.Redis.from_url(server.url)
    client.execute_command("SAVE")
    mtime = (data_dir / "dump.rdb").stat().st_mtime_ns
    assert status(data_dir)["saved"] is True
    out = vecserve(data_dir, "server", "stop").stdout
    assert "nothing to save" in out
    assert (data_dir / "dump.rdb").stat().st_mtime_ns == mtime, "no save without changes"
    server.release()

    server = EmbeddedServer(data_dir).acquire()  # started again
    redis.Redis.from_url(server.url).set("k", "v")
    st = status(data_dir)
    assert st["saved"] is False and st["unsaved_changes"] >= 1
    assert "saved its changes" in vecserve(data_dir, "server", "stop").stdout
    assert vecserve(data_dir, "server", "status", check=False).returncode == 3
    with embedded_server(data_dir) as url:
        assert redis.Redis.from_url(url).get("k") == b"v"


def test_a_crashed_server_is_restarted_by_the_next_command(data_dir, tmp_path):
    vec = tmp_path / "v.txt"
    vec.write_text("1 2\nw 1 2\n")
    vecserve(data_dir, "load", str(vec), "--key", "M")
    wait_until(lambda: status(data_dir)["saved"], timeout=30, what="the load saved")
    pid = read_pid(data_dir)
    os.kill(pid, 9)
    assert wait_pid_gone(pid, 10)
    assert (data_dir / "valkey.sock").exists(), "a crash leaves the socket file behind"
    assert "M" in vecserve(data_dir, "models").stdout  # restarted from its data dir
    assert status(data_dir)["pid"] != pid


def test_two_commands_at_once_start_one_server(data_dir):
    env = {k: v for k, v in os.environ.items() if k != "VECSERVE_REDIS_URL"}
    env["VECSERVE_DATA_DIR"] = str(data_dir)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "vecserve.cli", "models"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    pid = status(data_dir)["pid"]
    assert pid_alive(pid)
    servers = []
    for p in subprocess.run(
        ["pgrep", "valkey-server"], capture_output=True, text=True
    ).stdout.split():
        try:
            if os.readlink(f"/proc/{p}/cwd") == str(data_dir.resolve()):
                servers.append(int(p))
        except OSError:
            pass
    assert servers == [pid]


def test_server_survives_the_holders_ctrl_c(data_dir):
    """The server runs in its own session: a SIGINT to the client's group spares it."""
    proc = subprocess.run(
        program("embedded_ctrl_c", data_dir),
        capture_output=True,
        text=True,
        start_new_session=True,
    )
    assert "up" in proc.stdout
    with embedded_server(data_dir) as url:
        assert redis.Redis.from_url(url).ping()


def test_starting_a_running_server_again_starts_no_second_one(tmp_path):
    server = ValkeyProcess(tmp_path / "srv", unixsocket=tmp_path / "srv.sock")
    with server.start():  # __enter__ starts too
        first = server.process
        assert server.start() is server and server.process is first
        assert first.poll() is None
    assert first.poll() is not None  # stopped on exit: nothing left running


def test_server_start_is_idempotent_and_status_says_where_and_how_much(data_dir):
    out = vecserve(data_dir, "server", "start").stdout
    st = status(data_dir)
    assert f"pid {st['pid']}, socket {data_dir / 'valkey.sock'}" in out
    again = vecserve(data_dir, "server", "start").stdout
    assert f"pid {st['pid']}," in again, "a second start attached to the running server"
    assert st["socket"] == str(data_dir / "valkey.sock")
    assert st["data_dir"] == str(data_dir)
    assert st["used_memory"] > 0 and st["used_memory_human"]
    assert st["models"] == [] and st["saved"] is True
    text = vecserve(data_dir, "server", "status").stdout
    assert f"pid       {st['pid']}" in text and f"data dir  {data_dir}" in text
    assert "models    0" in text and "saved     yes" in text
    assert "policy    no maxmemory (" in text and "policy noeviction" in text
    assert st["maxmemory_policy"] == "noeviction" and st["maxmemory"] == 0


def test_serve_and_commands_share_one_server(data_dir, tmp_path, monkeypatch):
    """`vecserve serve` on the embedded default and two loads at once, all on one server:
    the service sees both models without a restart."""
    import httpx

    from tests.api_support import serving

    monkeypatch.delenv("VECSERVE_REDIS_URL", raising=False)
    files = []
    for name in ("A", "B"):
        f = tmp_path / f"{name}.txt"
        f.write_text(f"2 3\n{name.lower()}1 1 2 3\n{name.lower()}2 4 5 6\n")
        files.append((name, f))
    with serving([], tmp_path, env={"VECSERVE_DATA_DIR": str(data_dir)}) as (base, _):
        pid = status(data_dir)["pid"]
        env = {**os.environ, "VECSERVE_DATA_DIR": str(data_dir)}
        loads = [
            subprocess.Popen(
                [sys.executable, "-m", "vecserve.cli", "load", str(f), "--key", n],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n, f in files
        ]
        for p in loads:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        models = httpx.get(f"{base}/models").json()["models"]
        assert sorted(m["name"] for m in models) == ["A", "B"]
        got = httpx.get(f"{base}/vectors", params={"words": "b2", "model": "B"}).json()
        assert got["vectors"] == [[4.0, 5.0, 6.0]]
        assert status(data_dir)["pid"] == pid, "the server was not restarted by anyone"
    assert status(data_dir)["models"] == ["A", "B"], "the service's exit left the server up"


@pytest.mark.parametrize("holder", ["silent", "valkey"])
def test_a_tcp_test_server_moves_off_a_port_someone_took(tmp_path, monkeypatch, holder):
    """``start_valkey`` (replicas, cluster nodes: valkey cannot bind port 0) picks a port
    free a moment ago; when another process holds it by then (a listener that never
    answers, or another valkey-server), the server starts again on another port."""
    import socket

    import vecserve.embedded as embedded

    real = embedded.free_port
    with contextlib.ExitStack() as stack:
        if holder == "silent":
            other = stack.enter_context(socket.socket())
            other.bind(("127.0.0.1", 0))
            other.listen()
            taken = other.getsockname()[1]
        else:
            first = stack.enter_context(ValkeyProcess(tmp_path / "other", port=real()))
            taken = first.port
        offered = [taken]
        monkeypatch.setattr(embedded, "free_port", lambda: offered.pop() if offered else real())
        node = start_valkey(tmp_path / "node")
        try:
            assert node.port != taken and node.data_dir.name == "node-1"
            with redis.Redis(port=node.port) as r:
                assert r.info("server")["process_id"] == node.process.pid
        finally:
            node.stop()
