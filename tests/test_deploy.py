"""Dockerfile and docker-compose.yml read as text: everything they reference exists
(files, extras, commands, options, endpoints). tests/test_docker.py builds and runs them."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest

yaml = pytest.importorskip("yaml")
tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.strip().startswith("#") and not buf:
            continue
        buf += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if line.endswith("\\") or not buf:
            continue
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def exec_form(args: str) -> list[str]:
    import json

    return json.loads(args) if args.startswith("[") else shlex.split(args)


def extras_in(text: str) -> set[str]:
    import re

    return {
        e.strip()
        for m in re.findall(r"vecserve\[([^\]]+)\]|\.\[([^\]]+)\]", text)
        for group in m
        if group
        for e in group.split(",")
    }


def pyproject_extras() -> set[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(data["project"]["optional-dependencies"])


def check_cli(argv: list[str]) -> None:
    """``vecserve <cmd> ...``: the command exists and every --option is one of its own."""
    assert argv[0] == "vecserve", argv
    from vecserve.cli import cli
    from vecserve.service.serve import serve

    commands = dict(cli.commands)
    commands.setdefault("serve", serve)  # the lead registers it with cli.add_command
    cmd = commands[argv[1]]
    known = {
        o for p in cmd.params if isinstance(p, click.Option) for o in p.opts + p.secondary_opts
    }
    for arg in argv[2:]:
        if arg.startswith("--"):
            assert arg.split("=")[0] in known, f"{argv[1]} has no option {arg}"


def test_dockerfile_is_multistage_nonroot_with_healthcheck():
    steps = dockerfile()
    froms = [a for i, a in steps if i == "FROM"]
    assert len(froms) == 2 and froms[0].endswith("AS builder")
    base = next(a for i, a in steps if i == "ARG" and a.startswith("BASE_IMAGE="))
    assert base.endswith("-slim"), "the default base is what users pull"
    assert all(f.split()[0] == "${BASE_IMAGE}" for f in froms)
    at = [i for i, (ins, _) in enumerate(steps) if ins == "FROM"]
    builder, final = steps[at[0] : at[1]], steps[at[1] :]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1] not in ("root", "0")
    health = [a for i, a in final if i == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0]
    assert ":8000/healthz" in health[0] and "8000" in [a for i, a in final if i == "EXPOSE"]
    assert "VECSERVE_HEALTH_URL" in health[0], "compose points the probe at its port"
    assert any("gcc" in a for i, a in builder if i == "RUN"), "the builder compiles extensions"
    assert not any("gcc" in a for i, a in final if i == "RUN"), "no compiler in the runtime"
    cmd = exec_form(next(a for i, a in reversed(final) if i == "CMD"))
    check_cli(cmd)
    assert cmd[1] == "serve" and "0.0.0.0" in cmd


def test_dockerfile_copies_files_that_exist_and_extras_that_exist():
    for ins, args in dockerfile():
        if ins != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = shlex.split(args)
        for src in sources:
            if "*" in src:
                continue  # optional (e.g. README.md*)
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
    extras = extras_in((ROOT / "Dockerfile").read_text())
    assert "api" in extras
    missing = extras - pyproject_extras()
    assert not missing, f"extras not in pyproject.toml: {missing}"


def test_dockerignore_keeps_what_the_build_needs():
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for needed in ("vecserve", "pyproject.toml", "setup.py", "README.md"):
        assert needed not in ignored
    assert ".git" in ignored and "**/*.so" in ignored


def acl_users(c: dict) -> dict[str, list[str]]:
    """The acl service's `vecserve acl` lines: user -> argv, each checked against the CLI."""
    service = c["services"]["acl"]
    script = service["command"][-1]
    users = {}
    for line in script.splitlines():
        if not line.strip():
            continue
        argv = shlex.split(line)
        check_cli(argv)
        assert argv[:2] == ["vecserve", "acl"]
        assert argv[argv.index("--aclfile") + 1] == "/data/users.acl"
        var = argv[argv.index("--password-env") + 1]
        assert service["environment"][var] == "${" + var + ":?set it in .env (docs/deploy.md)}"
        user = argv[argv.index("--user") + 1] if "--user" in argv else f"vecserve-{argv[2]}"
        users[user] = argv
    return users


def url_user(url: str) -> tuple[str, str]:
    """(user, password variable) of a compose Redis URL."""
    import re

    m = re.fullmatch(r"redis://([^:]+):\$\{(\w+)\}@\$\{VECSERVE_REDIS_HOST:-redis\}:.+/0", url)
    assert m, f"not a URL with a user and a password variable: {url}"
    return m.group(1), m.group(2)


def test_compose_services():
    c = compose()
    services = c["services"]
    assert set(services) >= {"acl", "redis", "api", "cleanup", "loader"}
    redis = services["redis"]
    argv = list(map(str, redis["command"]))
    assert "--appendonly" in argv and argv[argv.index("--appendonly") + 1] == "yes"
    volume = redis["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in c["volumes"]
    assert argv[argv.index("--maxmemory-policy") + 1] == "noeviction", "vectors are never evicted"
    # users from an ACL file on Redis's own volume, written before Redis starts
    assert argv[argv.index("--aclfile") + 1] == "/data/users.acl"
    assert "--protected-mode" not in argv and "--requirepass" not in argv
    assert redis["depends_on"]["acl"]["condition"] == "service_completed_successfully"
    acl = services["acl"]
    assert acl["volumes"] == [f"{volume[0]}:/data"] and acl["restart"] == "no"
    assert acl["network_mode"] == "none"
    users = acl_users(c)
    assert set(users) == {"vecserve-admin", "vecserve-api", "vecserve-maintainer"}
    # the healthcheck is an authenticated PING, healthy on PONG only (not on NOAUTH)
    test = redis["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL" and test[1].endswith("ping | grep -qx PONG")
    assert "--user vecserve-api" in test[1]
    auth = "${VECSERVE_REDIS_API_PASSWORD}"
    assert redis["environment"] == {"VALKEYCLI_AUTH": auth, "REDISCLI_AUTH": auth}

    api = services["api"]
    assert api["build"] == "." and (ROOT / "Dockerfile").exists()
    user, password = url_user(api["environment"]["VECSERVE_REDIS_URL"])
    assert user == "vecserve-api" and users[user][2] == "api", "the API reads only"
    assert password == users[user][users[user].index("--password-env") + 1]
    assert api["environment"]["VECSERVE_API_KEYS"].startswith("${VECSERVE_API_KEYS:?")
    assert api["environment"]["VECSERVE_METRICS_KEYS"] == "${VECSERVE_METRICS_KEYS:-}"
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    check_cli(api["command"])
    port = api["command"][api["command"].index("--port") + 1]
    # The image's HEALTHCHECK, pointed at the port the service listens on.
    assert api["environment"]["VECSERVE_HEALTH_URL"] == f"http://127.0.0.1:{port}/healthz"
    published = yaml.safe_load((ROOT / "docker-compose.override.yml").read_text())
    assert published["services"]["api"]["ports"] == [f"{port}:{port}"]
    cache = api["volumes"][0].split(":")
    assert cache[0] in c["volumes"] and cache[1] == api["environment"]["VECSERVE_CACHE_DIR"]

    cleanup = services["cleanup"]
    assert cleanup["image"] == api["image"] and cleanup["restart"] == "unless-stopped"
    assert "vecserve models cleanup" in cleanup["command"][-1]
    assert "${VECSERVE_CLEANUP_INTERVAL:-3600}" in cleanup["command"][-1]
    user, _ = url_user(cleanup["environment"]["VECSERVE_REDIS_URL"])
    assert users[user][2] == "maintainer"

    loader = services["loader"]
    assert loader["profiles"] == ["load"] and loader["image"] == api["image"]
    assert loader["restart"] == "no"
    assert "./data}:/data:ro" in loader["volumes"][0]
    assert loader["environment"] == cleanup["environment"]
    argv = loader["command"]
    assert argv[:2] == ["vecserve", "load"] and argv[2].startswith("/data/")
    assert "--key" in argv
    check_cli(argv)
    host = yaml.safe_load((ROOT / "docker" / "compose.host.yml").read_text())["services"]
    assert set(host) == set(services) - {"acl"}


def test_healthcheck_path_is_served():
    from vecserve.api import create_app
    from vecserve.service.settings import Settings

    paths = create_app(Settings()).openapi()["paths"]
    assert "/healthz" in paths and "/readyz" in paths
