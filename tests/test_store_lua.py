"""``vecserve/store/lua.py``: the store's Lua scripts are files read once, and shipped."""

import re
from pathlib import Path

import vecserve.store.lua as lua

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "vecserve" / "store" / "lua"


def test_every_script_file_is_loaded_without_its_comment():
    loaded = {name.lower(): getattr(lua, name) for name in lua.__all__}
    files = sorted(p.stem for p in SCRIPTS.glob("*.lua"))
    assert files == sorted(loaded)
    for stem in files:
        text = (SCRIPTS / f"{stem}.lua").read_text()
        assert text.startswith("--"), f"{stem}.lua says what it does first"
        code = loaded[stem]
        assert "redis.call" in code and text.endswith(code)
        assert not any(line.startswith("--") for line in code.splitlines())


def test_the_wheel_carries_the_scripts():
    """A wheel built from the sdist (the Docker image) has only the package data named."""
    config = (ROOT / "pyproject.toml").read_text()
    section = config.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    line = re.search(r'^"vecserve\.store" = \[(.*)\]$', section, re.M)
    assert line, "pyproject.toml's package-data names no files of vecserve.store"
    patterns = re.findall(r'"([^"]+)"', line.group(1))
    assert any(Path("lua/x.lua").match(p) for p in patterns)
