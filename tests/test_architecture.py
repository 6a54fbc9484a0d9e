"""ARCHITECTURE.md stays true: its paths exist, every module is in a layer, and no module
imports a layer above its own. Also: every docstring example runs (doctests)."""

from __future__ import annotations

import ast
import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vecserve"
DOC = (ROOT / "ARCHITECTURE.md").read_text()


def _modules() -> dict[str, Path]:
    """``{"store.registry": path, ...}`` for every module of the package (not __init__),
    Cython ones (``.pyx``) included."""
    out = {}
    for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyx")]:
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _layers() -> dict[str, int]:
    block = re.search(r"```layers\n(.*?)```", DOC, re.S)
    assert block, "ARCHITECTURE.md has no ```layers block"
    layers = {}
    for line in block.group(1).splitlines():
        level, *names = line.split()
        for name in names:
            layers[name] = int(level)
    return layers


LAYERS = _layers()


def _component(module: str) -> str:
    """The layer entry a module belongs to: the longest listed prefix of its name."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return ".".join(parts[:n])
    raise AssertionError(f"vecserve.{module} is in no layer of ARCHITECTURE.md")


def _imports(module: str, path: Path) -> set[str]:
    """Every vecserve module ``module`` imports (lazy imports inside functions included).
    Cython modules import no vecserve module (not checked: ``ast`` cannot read them)."""
    if path.suffix == ".pyx":
        return set()
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            target = [*base, *(node.module.split(".") if node.module else [])]
            if node.module:
                found.add(".".join(target))
            else:
                found.update(".".join([*target, a.name]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vecserve."):
            found.add(node.module.removeprefix("vecserve."))
        elif isinstance(node, ast.Import):
            found.update(
                a.name.removeprefix("vecserve.")
                for a in node.names
                if a.name.startswith("vecserve.")
            )
    return {f for f in found if f}


def test_every_path_named_exists():
    named = set(re.findall(r"`(vecserve/[\w/.]*)`", DOC))
    assert len(named) > 10
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert missing == []


def test_every_module_is_in_a_layer_and_every_layer_entry_exists():
    modules = _modules()
    for module in modules:
        if module:
            _component(module)
    for name in LAYERS:
        assert name in modules, f"ARCHITECTURE.md lists {name}, which is no module"


def test_no_module_imports_a_higher_layer():
    bad = []
    for module, path in _modules().items():
        if not module:
            continue  # vecserve/__init__.py re-exports the public names
        mine = _component(module)
        for target in _imports(module, path):
            if target.split(".")[0] == "__version__" or not target:
                continue
            theirs = _component(target) if target.split(".")[0] in _top() else None
            if theirs is None or theirs == mine or mine.startswith(theirs + "."):
                continue
            if LAYERS[theirs] >= LAYERS[mine]:
                bad.append(
                    f"{module} (layer {LAYERS[mine]}) imports {target} (layer {LAYERS[theirs]})"
                )
    assert bad == []


def _top() -> set[str]:
    return {m.split(".")[0] for m in _modules() if m}


def _doctest_modules() -> list[str]:
    # the suite's shared helpers too: their examples are how a test author learns them
    return [*sorted(f"vecserve.{m}" if m else "vecserve" for m in _modules()), "tests.helpers"]


@pytest.mark.parametrize("name", _doctest_modules())
def test_doctests(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} doctest(s) of {name} failed (output above)"


def test_only_config_and_the_service_settings_read_vecserve_variables():
    """The invariant: ``VECSERVE_*`` is read in ``config.py`` and ``service/settings.py``
    only (no click ``envvar=``, no ``os.environ`` / ``os.getenv`` read of such a name)."""
    read = re.compile(
        r"""envvar=|(environ\.get|getenv)\(\s*["']VECSERVE_|environ\[["']VECSERVE_\w*["']\](?!\s*=)"""
    )
    for module, path in _modules().items():
        if module in ("config", "service.settings") or path.suffix != ".py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            assert not read.search(line), f"vecserve/{module}:{n} reads VECSERVE_*: {line.strip()}"


def test_programs_the_tests_run_are_files():
    """A Python program a test or a benchmark runs in another process (or on MPI ranks) is
    a file (``tests/programs/``, ``tests/mpi/``, ``bench/programs/``): linted and
    formatted, its tracebacks naming lines. Never a string handed to ``python -c``."""
    inline = re.compile(r"""executable\)?\s*,\s*["']-c["']""")
    found = [
        str(path.relative_to(ROOT))
        for folder in ("tests", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if inline.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_only_the_store_imports_redis():
    """The store is the one room that talks to Redis: redis-py is imported in
    ``vecserve/store/`` only (and in ``embedded.py``, which runs vecserve's own server);
    lazy imports inside functions count too."""
    found = []
    for module, path in _modules().items():
        if path.suffix != ".py" or module == "embedded" or module.split(".")[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n == "redis" or n.startswith("redis.") for n in names):
                found.append(f"vecserve/{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []
