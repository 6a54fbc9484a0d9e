"""``vecserve/errors.py``: the hierarchy drawn in its docstring is the real class tree, and
errors carry what callers need as fields, never only in the message."""

from __future__ import annotations

import re

import vecserve.errors as errors
from vecserve.errors import LoadInterrupted, StoreUnavailable, TokenNotFound, VecserveError


def drawn_parents() -> dict[str, str]:
    """``{class: parent}`` read from the docstring's drawing (4 columns a level)."""
    parents: dict[str, str] = {}
    stack: list[str] = []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^    ((?:[│ ]   )*)[├└]── (\w+)", line)
        if m is None:
            if re.match(r"^    VecserveError\b", line):
                stack = ["VecserveError"]
            continue
        depth = len(m.group(1)) // 4 + 1
        del stack[depth:]
        parents[m.group(2)] = stack[depth - 1]
        stack.append(m.group(2))
    return parents


def real_parents() -> dict[str, str]:
    """``{class: its nearest VecserveError base}`` for every exported error class."""
    out = {}
    for name in errors.__all__:
        cls = getattr(errors, name)
        if cls is VecserveError:
            continue
        out[name] = next(b for b in cls.__bases__ if issubclass(b, VecserveError)).__name__
    return out


def test_the_drawing_is_the_class_tree():
    assert drawn_parents() == real_parents()


def test_load_interrupted_carries_fields():
    exc = LoadInterrupted("Connection closed by server", model="W2V", path="/d/w.bin", written=7)
    assert isinstance(exc, StoreUnavailable)  # retried like any outage
    assert (exc.reason, exc.model, exc.path, exc.written) == (
        "Connection closed by server",
        "W2V",
        "/d/w.bin",
        7,
    )
    assert exc.resume_command == "vecserve load /d/w.bin --key W2V --resume"
    assert str(exc).startswith("Connection closed by server. Load of 'W2V' from /d/w.bin")
    assert exc.resumable and "kept to resume from" in str(exc)
    stream = LoadInterrupted("OOM", model="W2V", path="<stdin>", written=7, resumable=False)
    assert not stream.resumable and "a stream cannot be read again" in str(stream)


def test_token_not_found_lists_the_missing_words():
    assert TokenNotFound("a", "M").missing == ["a"]
    exc = TokenNotFound("a", "M", missing=["a", "b"])
    assert (exc.token, exc.model, exc.missing, str(exc)) == (
        "a",
        "M",
        ["a", "b"],
        "Key 'a' not present in vocabulary",
    )
