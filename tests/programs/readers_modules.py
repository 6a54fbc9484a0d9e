"""Import the formats table and the CLI, then print the ``vecserve.readers`` modules that
came with them: ``readers_modules.py`` (start-up must not import the parsers)."""

import sys

import vecserve.cli
import vecserve.readers.formats  # noqa: F401

print(sorted(m for m in sys.modules if m.startswith("vecserve.readers.")))
