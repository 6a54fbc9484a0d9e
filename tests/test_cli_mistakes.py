"""Every command, every common mistake: a non-zero exit, a few lines, never a traceback.

The command tree is walked from ``vecserve.cli.cli`` itself (lazy commands such as
``train`` and ``serve`` included), so a new command is in the matrix without being named
here. The matrix runs each command in-process through click's ``CliRunner`` (the same
code as the ``vecserve`` script: ``main`` only calls ``cli``); a representative subset
runs the real command in a subprocess. Servers are real: the session's valkey, and a
port nothing listens on for "a server that refuses".
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import click
import numpy as np
import pytest
from click.testing import CliRunner

from tests.helpers import write_w2v
from vecserve.cli import cli

REFUSING = "redis://127.0.0.1:1"  # nothing listens on port 1


@pytest.fixture(autouse=True)
def _environment_kept():
    """`serve` run in-process turns its flags into VECSERVE_* variables (for its uvicorn
    workers): put the environment back after each test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


NO_SCHEME = "localhost:6379"


def walk(group: click.Group, prefix=()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None:
            continue
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from walk(command, (*prefix, name))


COMMANDS = dict(walk(cli))


def test_the_walk_finds_every_command():
    names = {" ".join(p) for p in COMMANDS}
    assert {"load", "get", "similar", "train", "serve", "models", "models info", "acl"} <= names
    assert len(TAKE_A_MODEL) >= 8  # get, similar, serve, models info|check|delete|history|...
    assert {"server start", "server status", "models rollback", "demo"} <= names


@pytest.fixture(scope="module")
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("mistakes")
    garbage = base / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 8)
    return {"missing": str(base / "nope.bin"), "garbage": str(garbage), "dir": str(base)}


def argv_for(path, command, *, model="NOPE", file=None, port=None) -> list[str]:
    """The command's argv with its required arguments filled in (a model, words, a file),
    so that what fails is the mistake under test."""
    args = list(path)
    for p in command.params:
        if isinstance(p, click.Argument) and (p.required or p.name in ("name_arg", "texts")):
            args += {
                "words": ["king"],
                "texts": ["the king"],
                "role": ["worker"],
                "name_arg": [model],
                "file": [file],
                "corpus": [file],
            }.get(p.name, ["1"])
        elif isinstance(p, click.Option) and p.opts[0] == "--key":
            args += ["--key", model]
    if path == ("serve",):
        args += ["--port", str(port)]  # never starts: the port is taken
    if path == ("models", "delete"):
        args += ["--yes"]
    if path == ("acl",):
        args = ["acl", "loader"]
    return args


def assert_clean(result, what):
    shown = f"{what}\n{result.output}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{what} raised {result.exception!r}"
    )
    assert "Traceback" not in result.output, shown
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 0 or len(lines) <= 4, shown


MISTAKES = ["url-no-scheme-env", "url-no-scheme-flag", "refusing-server", "bad-data-dir"]


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_every_command_fails_cleanly(path, mistake, files, taken_port, tmp_path):
    """Bad settings and a refusing server: every command that needs Redis fails in a few
    lines with a non-zero exit; those that do not (acl, help-only groups) are unaffected."""
    command = COMMANDS[path]
    if isinstance(command, click.Group) and not command.invoke_without_command:
        pytest.skip("a group alone shows its help")
    env = {  # never the user's data dir: server commands fail on this one too
        "VECSERVE_CACHE_DIR": str(tmp_path / "cache"),
        "VECSERVE_REDIS_URL": REFUSING,
        "VECSERVE_DATA_DIR": "/dev/null/data",
    }
    args = argv_for(path, command, file=files["garbage"], port=taken_port)
    if mistake == "url-no-scheme-env":
        env["VECSERVE_REDIS_URL"] = NO_SCHEME
    elif mistake == "url-no-scheme-flag":
        args += ["--redis-url", NO_SCHEME] if "redis_url" in _names(command) else []
    elif mistake == "bad-data-dir":
        env["VECSERVE_REDIS_URL"] = ""  # the embedded server, in a data dir that cannot be
    result = CliRunner().invoke(cli, args, env=env)
    assert_clean(result, f"vecserve {' '.join(args)} ({mistake})")
    uses_redis = "redis_url" in _names(command) or path[0] == "server"
    if uses_redis and path != ("server", "stop"):  # stopping what never ran is no error
        assert result.exit_code != 0, f"{args} ({mistake}) exit 0:\n{result.output}"


def _names(command) -> set[str]:
    return {p.name for p in command.params}


TAKE_A_MODEL = [  # those that make one (load, train, acl) are not asked about it
    p
    for p, c in COMMANDS.items()
    if {"name", "default_model"} & _names(c) and p not in {("load",), ("train",), ("acl",)}
]


@pytest.mark.parametrize("path", TAKE_A_MODEL, ids=" ".join)
def test_unknown_model_says_which_exist(path, redis_url, store, small_bin, files, taken_port):
    """Everywhere a model name is taken, an unknown one is answered with the near match and
    the models that exist."""
    from vecserve.loader import load_file

    load_file(small_bin[0], name="GOOGLE_W2V", store=store, progress=False)
    command = COMMANDS[path]
    args = argv_for(path, command, model="google_w2v", file=str(small_bin[0]), port=taken_port)
    env = {"VECSERVE_REDIS_URL": redis_url}
    if path == ("serve",):  # the port is free here so that the model is what is refused
        args = args[:-2] + ["--port", "0"]
    result = CliRunner().invoke(cli, args, env=env)
    assert_clean(result, " ".join(args))
    assert result.exit_code == 1
    assert "did you mean GOOGLE_W2V?" in result.output, result.output


@pytest.mark.parametrize(
    "path", [p for p, c in COMMANDS.items() if {"file", "corpus"} & _names(c)], ids=" ".join
)
def test_missing_and_wrong_files(path, redis_url, store, files):
    command = COMMANDS[path]
    for which in ("missing", "garbage", "dir"):
        args = argv_for(path, command, model="X", file=files[which])
        result = CliRunner().invoke(cli, args, env={"VECSERVE_REDIS_URL": redis_url})
        assert_clean(result, f"{args}")
        assert result.exit_code != 0 and files[which] in result.output, result.output


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("VECSERVE_CACHE_DIR", "/dev/null/cache", "/dev/null is not a directory"),
        ("VECSERVE_CACHE_DIR", "/proc/cache", "cannot be made"),
        ("VECSERVE_SIMILARITY_URL", "api:8000", "not an http(s) URL"),
        ("VECSERVE_MODEL_TTL", "soon", "not a number of seconds"),
    ],
)
def test_bad_settings_on_a_working_server(
    variable, value, expected, redis_url, store, small_bin, tmp_path
):
    """A setting read deep inside a command (the snapshot's cache dir, the similarity
    service, the reader's TTL) is still one line naming it."""
    from vecserve.loader import load_file

    load_file(small_bin[0], name="OK", store=store, progress=False)
    env = {"VECSERVE_REDIS_URL": redis_url, "VECSERVE_CACHE_DIR": str(tmp_path), variable: value}
    for args in (["similar", "w1", "-k", "OK"], ["load", str(small_bin[0]), "-k", "OK2", "--ann"]):
        result = CliRunner().invoke(cli, args, env=env)
        assert_clean(result, f"{args} {variable}={value}")
        if variable == "VECSERVE_CACHE_DIR" or args[0] == "similar":
            assert result.exit_code == 1 and expected in result.output, result.output
    assert "OK2" not in {m.name for m in store.list_models()} or variable != "VECSERVE_CACHE_DIR"


def test_every_option_has_help_and_takes_the_global_options():
    for path, command in COMMANDS.items():
        names = {o for p in command.params for o in p.opts}
        assert {"-q", "-v"} <= names, path
        for p in command.params:
            if isinstance(p, click.Option) and not p.hidden:
                assert p.help, f"vecserve {' '.join(path)} {p.opts[0]} has no help"


def test_one_name_for_the_model():
    """--key names the model wherever one is taken (old spellings hidden, still working)."""
    for path, command in COMMANDS.items():
        shown = {o for p in command.params if not getattr(p, "hidden", False) for o in p.opts}
        assert not {"--model", "--default-model"} & shown, path
        if "name" in _names(command):
            assert "--key" in shown and "-k" in shown, path
    assert "--threads" in {o for p in COMMANDS[("train",)].params for o in p.opts}


# -- the real command ---------------------------------------------------------------------


def run(*args, env=None, input=None):
    return subprocess.run(
        [sys.executable, "-m", "vecserve.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        input=input,
        timeout=120,
    )


def one_line_error(proc, *expected):
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) <= 3, proc.stderr
    for text in expected:
        assert text in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["models"], {"VECSERVE_REDIS_URL": NO_SCHEME}, ["VECSERVE_REDIS_URL", "redis://"]),
        (["models", "--redis-url", NO_SCHEME], {}, ["--redis-url", "has no scheme"]),
        (["--redis-url", "redis://h:x", "models"], {}, ["the port is not a number"]),
        (["models", "info", "--key", "M"], {"VECSERVE_REDIS_URL": REFUSING}, ["unreachable"]),
        (["server", "start", "--data-dir", "/dev/null/x"], {}, ["/dev/null is not a directory"]),
        (["serve"], {"VECSERVE_REDIS_URL": "unix://"}, ["no socket path"]),
        (["train", "/nonexistent/corpus", "--key", "X"], {}, ["/nonexistent/corpus"]),
        (["similar", "x"], {}, ["--key"]),
        (["models", "info"], {}, ["--key NAME"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_real_command_mistakes(args, env, expected):
    one_line_error(run(*args, env=env), *expected)


def test_serve_on_a_port_in_use_says_so_before_starting(taken_port, redis_url, store):
    proc = run("serve", "--port", str(taken_port), env={"VECSERVE_REDIS_URL": redis_url})
    one_line_error(proc, f"127.0.0.1:{taken_port}", "in use")
    assert "Uvicorn" not in proc.stderr and "startup" not in proc.stderr


def test_real_delete_asks_and_aliases_work(redis_url, store, small_bin):
    env = {"VECSERVE_REDIS_URL": redis_url}
    assert run("load", str(small_bin[0]), "-k", "ALIAS", "-q", env=env).returncode == 0
    # -q after the command: only the result line, no log lines
    assert run("-v", "models", "info", "ALIAS", env=env).returncode == 0  # old positional
    one_line_error(run("models", "delete", "--key", "ALIAS", env=env), "pass --yes")
    acl = run("acl", "loader", "--model", "ALIAS", env=env)  # the old spelling
    assert acl.returncode == 0 and "~ALIAS" in acl.stdout
    listing = json.loads(run("models", "--json", env=env).stdout)
    assert [m["name"] for m in listing["models"]] == ["ALIAS"]
    gone = run("models", "delete", "ALIAS", "--yes", env=env)
    assert gone.returncode == 0 and "deleted ALIAS" in gone.stdout


def test_similar_answers_like_gensim(redis_url, store, tmp_path):
    """`vecserve similar` (the real command) gives gensim's most_similar: words, order and
    similarities, with negatives, over vectors whose tokens end in punctuation."""
    from gensim.models import KeyedVectors

    rng = np.random.default_rng(5)
    tokens = [f"w{i}" for i in range(300)] + ["government,", "court."]
    vectors = rng.standard_normal((len(tokens), 16)).astype(np.float32)
    path = write_w2v(tmp_path / "v.bin", tokens, vectors)
    env = {"VECSERVE_REDIS_URL": redis_url, "VECSERVE_CACHE_DIR": str(tmp_path / "cache")}
    assert run("load", str(path), "--key", "SIM", "-q", env=env).returncode == 0
    ref = KeyedVectors.load_word2vec_format(str(path), binary=True)
    for args, positive, negative, topn in [
        (["w1"], ["w1"], [], 10),
        (
            ["w1", "government,", "--negative", "w7", "--topn", "5"],
            ["w1", "government,"],
            ["w7"],
            5,
        ),
    ]:
        proc = run("similar", *args, "--key", "SIM", "--json", env=env)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        want = ref.most_similar(positive=positive, negative=negative, topn=topn)
        assert [w for w, _ in got] == [w for w, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-6)
    text = run("similar", "court.", "--topn", "3", "-k", "SIM", env=env)
    lines = text.stdout.splitlines()
    assert len(lines) == 3 and all(line.split("  ", 1)[1].startswith('"') for line in lines)
    one_line_error(run("similar", "zzz", "-k", "SIM", env=env), "zzz")


def test_delete_asks_on_a_terminal(redis_url, store, small_bin):
    """On a terminal, `models delete` asks; "n" keeps the model, "y" deletes it."""
    import pty

    from vecserve.loader import load_file

    load_file(small_bin[0], name="ASKED", store=store, progress=False)
    env = {**os.environ, "VECSERVE_REDIS_URL": redis_url}
    for answer, kept in (("n", True), ("y", False)):
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "vecserve.cli", "models", "delete", "--key", "ASKED"],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        os.close(follower)
        os.write(leader, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=60)
        os.close(leader)
        assert b"delete model ASKED (500 vectors x 20)" in err, err
        assert (b"deleted ASKED" in out) is not kept
        assert ("ASKED" in {m.name for m in store.list_models()}) is kept
        assert proc.returncode == (1 if kept else 0) and b"Traceback" not in err


def test_serve_s_default_model_from_the_environment_may_come_later(
    redis_url, store, monkeypatch, tmp_path
):
    """`--key NOPE` is refused at start; the same model from $VECSERVE_DEFAULT_MODEL (a
    deployment whose loader runs after the API starts) is a one-line warning, and the
    service starts."""
    import uvicorn

    started = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: started.append(kw["port"]))
    for var in ("VECSERVE_DEFAULT_MODEL", "VECSERVE_METRICS_DIR"):  # serve() sets these:
        monkeypatch.setenv(var, "placeholder")  # recorded, so put back as they were
        monkeypatch.delenv(var)
    env = {"VECSERVE_REDIS_URL": redis_url, "VECSERVE_CACHE_DIR": str(tmp_path)}
    refused = CliRunner().invoke(cli, ["serve", "--key", "LATER", "--port", "0"], env=env)
    assert refused.exit_code == 1 and "--key LATER: no such model" in refused.output
    assert started == []
    env["VECSERVE_DEFAULT_MODEL"] = "LATER"
    warned = CliRunner().invoke(cli, ["serve", "--port", "0"], env=env)
    assert warned.exit_code == 0, warned.output
    assert "$VECSERVE_DEFAULT_MODEL=LATER is not loaded yet" in warned.output
    assert started == [0]
