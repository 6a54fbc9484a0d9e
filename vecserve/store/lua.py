"""The store's Lua scripts: one ``.lua`` file each in ``vecserve/store/lua/``, read once
when this module is imported (package data: a wheel carries them).

What a script does and its KEYS and ARGV are said in its file's leading ``--`` comment;
those lines are dropped here, so what ``EVAL`` sends on every call is the code alone.

>>> DELETE_IF_EQUAL.splitlines()[0]
"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end"
"""

from __future__ import annotations

from importlib.resources import files

__all__ = ["DELETE_IF_EQUAL", "SUBWORD_READ", "TAKE_IF_EQUAL", "VOCAB_PUSH"]


def _script(name: str) -> str:
    """The code of ``lua/NAME.lua``, its leading comment lines dropped."""
    text = (files(__package__) / "lua" / f"{name}.lua").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    return "".join(lines)


#: fastText reads: every word's row and only the missing words' n-gram rows, one round
#: trip (:mod:`.subword_rows`; read-only, sent with ``EVAL_RO``).
SUBWORD_READ = _script("subword_read")
#: A load's vocabulary blob appended at a known position, idempotently (:mod:`.session`).
VOCAB_PUSH = _script("vocab_push")
#: A lease deleted only while it holds the expected token (:mod:`.lease`).
DELETE_IF_EQUAL = _script("delete_if_equal")
#: A lease handed to a new token only while it holds the expected one (:mod:`.lease`).
TAKE_IF_EQUAL = _script("take_if_equal")
