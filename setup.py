"""Build the Cython extensions (the trainer's kernels, the IVF scan); everything else is in
pyproject.toml.

Each ``vecserve/**/*.pyx`` is one extension; the C headers beside it (``*.h``, included by
the ``.pyx``) are its dependencies, so changing one rebuilds it, and they ship in the sdist
(MANIFEST.in). Warnings are on (``-Wall -Wextra``). ``VECSERVE_DEBUG_BUILD=1`` turns
bounds checking and wraparound back on.

Floating-point flags, per package (:func:`float_flags`):

- ``vecserve/search`` (``_exact``, ``_ivfscan``): IEEE arithmetic, no ``-ffast-math``.
  These kernels promise gensim's answers bit for bit and the same float from every loop
  (portable, AVX2, a batch or one query); the int8 passes prove upper bounds whose
  rounding slack assumes the arithmetic as written; NaN and infinities must be seen (a
  zero row is NaN in gensim and never ranks). ``-ffast-math`` licenses reassociation,
  contraction and "no NaN exists", each of which breaks one of those. Kept:
  ``-fno-math-errno`` (nothing reads ``errno``; lets ``lrintf`` and ``sqrt`` be inlined) and
  ``-ffp-contract=off`` (GCC's GNU-mode default contracts ``a * b + c`` into an FMA in
  the functions built for AVX2, which the portable loops do not: every FMA is explicit).
  Their SIMD is written in intrinsics and their top-k compares integer keys, so nothing
  they vectorise needed ``-ffast-math`` (BENCHMARKS.md, "C kernels' flags").
- ``vecserve/train`` (``_kernels``, ``_sync``): ``-ffast-math`` stays. Training promises no
  bit-exact result (Hogwild threads update shared rows in any order), its dot products and
  axpys are plain C loops that vectorise only when sums may be reassociated, and its one
  NaN/infinity test (``_sync.pyx``) reads exponent bits, which holds under
  ``-ffinite-math-only``.
"""

import os
from pathlib import Path

from setuptools import Extension, setup

#: The floating-point flags of each package's extensions (see the module docstring).
FLOAT_FLAGS = {
    "search": ["-fno-math-errno", "-ffp-contract=off"],
    "train": ["-ffast-math"],
}


def float_flags(pyx: Path) -> list[str]:
    """The floating-point flags of the extension built from ``pyx``: its package's, and
    IEEE arithmetic (none) for a package not named in :data:`FLOAT_FLAGS`."""
    return FLOAT_FLAGS.get(pyx.parent.name, [])


def extensions():
    pyx = sorted(Path("vecserve").rglob("*.pyx"))
    if not pyx:
        return []
    import numpy as np
    from Cython.Build import cythonize

    debug = os.environ.get("VECSERVE_DEBUG_BUILD") == "1"
    flags = ["-Wall", "-Wextra", *(["-O0", "-g"] if debug else ["-O3"])]
    exts = [
        Extension(
            ".".join(p.with_suffix("").parts),
            [str(p)],
            depends=[str(h) for h in sorted(p.parent.glob("*.h"))],
            include_dirs=[np.get_include(), str(p.parent)],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=flags + ([] if debug else float_flags(p)),
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
