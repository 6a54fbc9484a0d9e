"""Build the Cython extensions (the trainer's kernels, the IVF scan); everything else is in
pyproject.toml.

Each ``vecserve/**/*.pyx`` is one extension; the C headers beside it (``*.h``, included by
the ``.pyx``) are its dependencies, so changing one rebuilds it, and they ship in the sdist
(MANIFEST.in). Warnings are on (``-Wall -Wextra``). ``VECSERVE_DEBUG_BUILD=1`` turns
bounds checking and wraparound back on.
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
    flags = ["-Wall", "-Wextra", *(["-O0", "-g"] if debug else ["-O3", "-ffast-math"])]
    exts = [
        Extension(
            ".".join(p.with_suffix("").parts),
            [str(p)],
            depends=[str(h) for h in sorted(p.parent.glob("*.h"))],
            include_dirs=[np.get_include(), str(p.parent)],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=flags,
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
