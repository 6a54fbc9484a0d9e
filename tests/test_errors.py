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


def test_families_catch_what_the_library_raises(tmp_path):
    """Each family is caught whole, by its base or by the builtin callers caught before:
    bad settings are ConfigurationErrors and still ValueErrors; a load's errors say
    whether they are resumable; a stopped load is a load and a store error."""
    import numpy as np
    import pytest

    from vecserve.codec import get_codec
    from vecserve.loader import load_arrays
    from vecserve.readers import open_vectors
    from vecserve.search.ann import AnnParams

    for bad in (
        lambda: AnnParams(kind="kd-tree"),
        lambda: AnnParams(recall=1.5),
        lambda: get_codec("f8"),
        lambda: load_arrays(["a", "a"], np.eye(2, dtype=np.float32), name="T"),
        lambda: open_vectors(tmp_path / "none.txt", limit=-1),
    ):
        with pytest.raises(errors.ConfigurationError) as caught:
            bad()
        assert isinstance(caught.value, ValueError)
    missing = tmp_path / "missing.bin"
    with pytest.raises(errors.LoadError) as caught:
        open_vectors(missing)
    assert caught.value.resumable is False and str(missing) in str(caught.value)
    stop = LoadInterrupted("reset", model="M", path="m.bin", written=3)
    assert isinstance(stop, errors.LoadError) and isinstance(stop, errors.StoreError)
    assert issubclass(errors.ModelNotFound, errors.QueryError)
    assert issubclass(errors.ModelNotFound, KeyError)
    families = (errors.ConfigurationError, errors.LoadError, errors.StoreError, errors.QueryError)
    assert all(issubclass(f, VecserveError) for f in families)
