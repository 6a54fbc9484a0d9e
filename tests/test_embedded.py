"""The embedded server: start, share between processes, persist across restarts."""

import os
import subprocess
import sys

import redis

from vecserve.embedded import (
    EmbeddedServer,
    ValkeyProcess,
    embedded_server,
    free_port,
    read_pid,
    wait_pid_gone,
)


def test_start_attach_release_and_persist(tmp_path):
    first = EmbeddedServer(tmp_path).acquire()
    assert first.url == f"unix://{tmp_path.resolve()}/valkey.sock"
    client = redis.Redis.from_url(first.url)
    client.set("k", "v")
    second = EmbeddedServer(tmp_path).acquire()  # attaches, does not start another
    first.release()
    assert client.ping(), "the server must stay up while another holder uses it"
    second.release()
    client.close()
    assert not (tmp_path / "valkey.sock").exists(), "last holder stops the server"
    assert (tmp_path / "dump.rdb").exists(), "and saves the data first"
    with embedded_server(tmp_path) as url:
        assert redis.Redis.from_url(url).get("k") == b"v"


def test_stale_socket_of_a_crashed_server_is_replaced(tmp_path):
    server = EmbeddedServer(tmp_path).acquire()
    pid = read_pid(tmp_path)
    os.kill(pid, 9)  # crash the server under its holder
    assert wait_pid_gone(pid, 10)
    assert (tmp_path / "valkey.sock").exists(), "a crash leaves the socket file behind"
    server.release()  # must not hang or raise on a dead server
    with embedded_server(tmp_path) as url:
        assert redis.Redis.from_url(url).ping()


def test_server_survives_the_holders_ctrl_c(tmp_path):
    """The server runs in its own session: a SIGINT to the client's group spares it."""
    code = (
        "import sys, signal, os; from vecserve.embedded import EmbeddedServer;"
        f"s = EmbeddedServer({str(tmp_path)!r}).acquire(); print('up', flush=True);"
        "os.killpg(0, signal.SIGINT)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, start_new_session=True
    )
    assert "up" in proc.stdout
    with embedded_server(tmp_path) as url:
        assert redis.Redis.from_url(url).ping()


def test_starting_a_running_server_again_starts_no_second_one(tmp_path):
    server = ValkeyProcess(tmp_path / "srv", port=free_port())
    with server.start():  # __enter__ starts too
        first = server.process
        assert server.start() is server and server.process is first
        assert first.poll() is None
    assert first.poll() is not None  # stopped on exit: nothing left running
