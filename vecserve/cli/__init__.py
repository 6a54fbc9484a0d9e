"""The ``vecserve`` command line: thin over the library.

Each command parses its flags, calls one library function and turns the library's root
exception (:class:`~vecserve.errors.VecserveError`) into a one-line message and a
non-zero exit (:mod:`vecserve.clierrors`); a traceback means a bug.

A module per command group: :mod:`.root` (the group, logging, lazy commands),
:mod:`.loading` (``load``), :mod:`.models` (``models ...``), :mod:`.lookup` (``get``,
``similar``), :mod:`.server` (``server ...``), :mod:`.admin` (``acl``, ``demo``),
:mod:`.embed` (``embed``, imported when used).
``vecserve.cli:main`` is the console entry point; ``python -m vecserve.cli`` runs it too.
"""

from __future__ import annotations

from ..clierrors import friendly_errors
from . import admin, loading, lookup, models, server  # noqa: F401 - each registers its commands
from .loading import FORMATS
from .root import LazyGroup, cli

__all__ = ["FORMATS", "LazyGroup", "cli", "friendly_errors", "main"]


def main() -> None:
    cli(prog_name="vecserve")
