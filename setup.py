"""Build the Cython extensions (the trainer's kernels); everything else is in pyproject.toml.

An extension's C sources are the ``.c`` files named after it (``_kernels.pyx`` and its
``_w2v.c`` are listed in ``C_SOURCES``), compiled with warnings on. ``VECSERVE_DEBUG_BUILD=1``
turns bounds checking and wraparound back on.
"""

import os
from pathlib import Path

from setuptools import Extension, setup

#: the C files compiled into an extension beside its .pyx (headers next to them)
C_SOURCES = {"vecserve/train/_kernels.pyx": ["vecserve/train/_w2v.c"]}
WARNINGS = ["-Wall", "-Wextra"]


def extensions():
    pyx = sorted(Path("vecserve").rglob("*.pyx"))
    if not pyx:
        return []
    import numpy as np
    from Cython.Build import cythonize

    debug = os.environ.get("VECSERVE_DEBUG_BUILD") == "1"
    exts = [
        Extension(
            ".".join(p.with_suffix("").parts),
            [str(p), *C_SOURCES.get(p.as_posix(), [])],
            include_dirs=[np.get_include(), str(p.parent)],
            depends=[str(h) for h in sorted(p.parent.glob("*.h"))],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=(["-O3", "-ffast-math"] if not debug else ["-O0", "-g"]) + WARNINGS,
        )
        for p in pyx
    ]
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={
            "boundscheck": debug,
            "wraparound": debug,
            "cdivision": not debug,
            "initializedcheck": debug,
        },
    )


setup(ext_modules=extensions())
