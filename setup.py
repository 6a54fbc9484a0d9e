"""Build the Cython extensions (the trainer's kernels); everything else is in pyproject.toml.

``VECSERVE_DEBUG_BUILD=1`` turns bounds checking and wraparound back on.
"""

import os
from pathlib import Path

from setuptools import Extension, setup


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
            [str(p)],
            include_dirs=[np.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=["-O3", "-ffast-math"] if not debug else ["-O0", "-g"],
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
