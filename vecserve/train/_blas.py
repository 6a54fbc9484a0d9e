"""Keep OpenBLAS's own thread pool out of the trainer's way.

The kernels call BLAS (scipy's OpenBLAS) on tiny operands (vectors of ~100 floats,
matrices of ~10 x 100) from several worker threads at once: the workers are the
parallelism, and OpenBLAS's own pool should not add threads that compete with them for
the cores (OpenBLAS keeps such small calls on the calling thread anyway; on the shared
2-core benchmark machine the difference was lost in the noise). So training sets the
pool to one thread and restores it afterwards, as scikit-learn does: through
``threadpoolctl`` when it is installed, otherwise by calling ``*openblas_set_num_threads``
in every OpenBLAS library loaded in the process (Linux: found in ``/proc/self/maps``).

>>> with single_threaded_blas():
...     pass
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["single_threaded_blas"]


def _openblas_libs() -> list[tuple[object, object]]:
    """(getter, setter) pairs of the OpenBLAS libraries loaded in this process."""
    import scipy.linalg.cython_blas  # noqa: F401  (makes sure scipy's OpenBLAS is loaded)

    try:
        with open("/proc/self/maps") as fh:
            paths = {ln.split()[-1] for ln in fh if "openblas" in ln.lower() and "/" in ln}
    except OSError:
        return []
    found = []
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_", ""):
            for suffix in ("", "64_"):
                get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype = ctypes.c_int
                    put.argtypes = [ctypes.c_int]
                    found.append((get, put))
                    break
            else:
                continue
            break
    return found


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Within the block, OpenBLAS uses one thread (its callers bring their own)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        libs = _openblas_libs()
        saved = [get() for get, _ in libs]
        for _, put in libs:
            put(1)
        try:
            yield
        finally:
            for (_, put), n in zip(libs, saved, strict=True):
                put(n)
    else:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
