"""BENCHMARKS.md stays the current state and every command in it stays runnable.

Each ``## `` section names its machine and date and gives at least one command; each
``python bench/X.py ...`` command's script exists, answers ``--help`` (no benchmark runs)
and knows every option the command passes; each ``bash bench/X.sh`` script exists and
parses. A run name given to ``--runs`` must be one the script lists.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "BENCHMARKS.md"


def sections() -> dict[str, str]:
    """``## `` heading -> its text, up to the next ``## ``."""
    parts = re.split(r"^## (.+)$", DOC.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def commands(text: str) -> list[str]:
    """The ``$ `` lines of the ``console`` blocks, continuation lines joined."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for cmd in re.split(r"^\$ ", block.replace("\\\n", " "), flags=re.M)[1:]:
            out.append(" ".join(cmd.split()))
    return out


def script_calls() -> list[tuple[str, str, list[str]]]:
    """(section, interpreter, argv from the script on) for every bench script called."""
    calls = []
    for title, text in sections().items():
        for cmd in commands(text):
            # "$(...)" substitutions are shell, not options: one placeholder word.
            words = shlex.split(re.sub(r'"\$\(.*?\)"', "SUBST", cmd))
            for i, word in enumerate(words):
                script = words[i + 1] if i + 1 < len(words) else ""
                if word in ("python", "bash") and script.startswith("bench/"):
                    calls.append((title, word, words[i + 1 :]))
    return calls


def test_every_section_has_a_machine_a_date_and_a_command():
    found = sections()
    assert len(found) >= 10
    for title, text in found.items():
        assert re.search(r"^Machine: \S", text, flags=re.M), f"{title!r}: no 'Machine:' line"
        assert re.search(r"Date: 20\d\d-\d\d-\d\d", text), f"{title!r}: no 'Date: YYYY-MM-DD'"
        assert any("bench/" in c for c in commands(text)), f"{title!r}: no bench command"


def test_the_doc_stays_short():
    assert len(DOC.read_text(encoding="utf-8").splitlines()) < 600


@cache
def help_text(script: str) -> str:
    proc = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{script} --help failed:\n{proc.stderr[-2000:]}"
    return proc.stdout


CALLS = script_calls()


@pytest.mark.parametrize(
    ("section", "interpreter", "argv"),
    CALLS,
    ids=[f"{c[2][0]}-{n}" for n, c in enumerate(CALLS)],
)
def test_command_is_runnable(section, interpreter, argv):
    script = ROOT / argv[0]
    assert script.is_file(), f"{section!r}: {argv[0]} does not exist"
    if interpreter == "bash":
        subprocess.run(["bash", "-n", str(script)], check=True)
        return
    text = help_text(argv[0])
    for n, word in enumerate(argv[1:], start=1):
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            assert re.search(rf"(^|[\s,\[]){re.escape(option)}\b", text), (
                f"{section!r}: {argv[0]} has no option {option}"
            )
        if argv[n - 1] == "--runs":  # the help lists the runs, wrapped at any hyphen
            listed = "".join(text.split())
            for run in word.split(","):
                assert run.split(":")[0] in listed, f"{section!r}: {argv[0]} has no run {run}"
