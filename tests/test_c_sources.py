"""The C of vecserve's extensions (``vecserve/**/*.h``, included by their ``.pyx``):
each header compiles on its own with every warning on (as errors), with its SIMD loops
and without them (``VS_NO_SIMD``), and is formatted as ``.clang-format`` says."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEADERS = sorted((ROOT / "vecserve").rglob("*.h"))
WARNINGS = ["-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Wstrict-prototypes", "-Werror"]


def test_the_extensions_c_is_in_headers():
    assert ROOT / "vecserve/search/_ivfscan.h" in HEADERS
    pyx = (ROOT / "vecserve/search/_ivfscan.pyx").read_text()
    assert 'cdef extern from "_ivfscan.h"' in pyx and '"""\n    #include' not in pyx


@pytest.mark.parametrize("simd", [True, False], ids=["simd", "portable"])
@pytest.mark.parametrize("header", HEADERS, ids=lambda p: p.name)
def test_header_compiles_without_warnings(header, simd, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler here")
    src = tmp_path / "use.c"
    src.write_text(f'#include "{header.name}"\n')
    cmd = [
        cc,
        "-std=c99",
        "-O2",
        *WARNINGS,
        "-Wno-unused-function",
        "-fsyntax-only",
        f"-I{header.parent}",
        *([] if simd else ["-DVS_NO_SIMD"]),
        str(src),
    ]
    got = subprocess.run(cmd, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr


@pytest.mark.parametrize("header", HEADERS, ids=lambda p: p.name)
def test_header_is_formatted(header):
    fmt = shutil.which("clang-format")
    if fmt is None:
        pytest.skip("clang-format is not installed (pip install -e '.[test]' brings it)")
    got = subprocess.run(
        [fmt, "--dry-run", "--Werror", str(header)], capture_output=True, text=True, cwd=ROOT
    )
    assert got.returncode == 0, got.stderr
