"""The real ``vecserve`` command, run as a subprocess the way a user runs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import wait_until, write_w2v
from vecserve.cli import cli
from vecserve.store import begin_load

VECSERVE = shutil.which("vecserve") or ""


def run(*args, env=None, check=True):
    argv = [VECSERVE] if VECSERVE else [sys.executable, "-m", "vecserve.cli"]
    proc = subprocess.run([*argv, *args], capture_output=True, text=True, env=env, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def env(redis_url, store):
    e = dict(os.environ, VECSERVE_REDIS_URL=redis_url)
    return e


def test_load_models_info_get_delete(env, small_bin):
    path, _tokens, vectors = small_bin
    out = run("load", str(path), "--key", "SMALL", env=env).stdout
    assert "SMALL: 500 vectors x 20 (f32, w2v-bin) committed as generation 1" in out
    listing = run("models", env=env).stdout
    assert "SMALL" in listing and "500" in listing
    info = json.loads(run("models", "info", "SMALL", env=env).stdout)
    assert info["count"] == 500 and info["dim"] == 20 and info["prefix"] == "SMALL"
    got = json.loads(run("get", "w1", "café", "--key", "SMALL", "--json", env=env).stdout)
    assert np.allclose(got["w1"], vectors[1]) and np.allclose(got["café"], vectors[497])
    refused = run("models", "delete", "SMALL", env=env, check=False)  # stdin is no terminal
    assert refused.returncode == 1 and "pass --yes" in refused.stderr
    assert "SMALL" in run("models", env=env).stdout
    assert "deleted SMALL (500 vectors)" in run("models", "delete", "SMALL", "-y", env=env).stdout
    assert "no models" in run("models", env=env).stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["load", "/nonexistent/v.bin", "--key", "X"], "/nonexistent/v.bin"),
        (["models", "info", "NOPE"], "model 'NOPE' not found"),
        (["load", "{bad}", "--key", "a:b"], "invalid model name"),
        (["get", "zzz", "--key", "NOPE"], "model 'NOPE' not found"),
    ],
)
def test_errors_are_one_line_and_nonzero(env, args, message):
    proc = run(*args, env=env, check=False)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_corrupt_file_via_cli(env, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("2 3\na 1 2 3\nb 1 2\n")
    proc = run("load", str(bad), "--key", "BAD", env=env, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr and "line 3" in proc.stderr
    assert "no models" in run("models", env=env).stdout


def test_unreachable_redis_is_one_line(small_bin):
    path, _, _ = small_bin
    e = dict(os.environ, VECSERVE_REDIS_URL="redis://127.0.0.1:1")
    proc = run("load", str(path), "--key", "X", env=e, check=False)
    assert proc.returncode == 1 and "unreachable" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_embedded_default_persists_between_commands(tmp_path, small_bin):
    path, _, _ = small_bin
    e = {k: v for k, v in os.environ.items() if k != "VECSERVE_REDIS_URL"}
    e["VECSERVE_DATA_DIR"] = str(tmp_path / "data")
    e["VECSERVE_CACHE_DIR"] = str(tmp_path / "cache")  # the demo's snapshot: never the user's
    try:
        run("load", str(path), "--key", "EMB", env=e)
        assert "EMB" in run("models", env=e).stdout  # a new process, the same server
        run("server", "stop", env=e)
        assert "EMB" in run("models", env=e).stdout  # a restarted server, from its data
        demo = run("demo", env=e).stdout
        assert "DEMO: 1,762 vectors x 10" in demo
        assert demo.count("identical to gensim: True") + demo.count("same as gensim: True") == 2
        assert "DEMO" in run("models", env=e).stdout
    finally:
        run("server", "stop", env=e)


def test_incomplete_load_is_listed_and_cleaned(env, store, tmp_path):
    path = write_w2v(tmp_path / "v.bin", ["a", "b"], np.ones((2, 3), np.float32))
    s = begin_load(store, "HALF", dim=3, codec="f32", source=str(path))
    s.write(["a"], np.ones((1, 3), np.float32))
    s.lease.release()
    listing = run("models", env=env).stdout
    assert "HALF" in listing and "INCOMPLETE" in listing and "--resume" in listing
    proc = run("load", str(path), "--key", "HALF", env=env, check=False)
    assert proc.returncode == 1 and "--resume" in proc.stderr
    assert "dropped interrupted load of HALF" in run("models", "cleanup", env=env).stdout
    assert "no models" in run("models", env=env).stdout


def test_every_command_documents_an_example():
    import click

    ctx = click.Context(cli)

    def walk(group, prefix=()):
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            if cmd is None:
                continue
            yield (*prefix, name), cmd
            if isinstance(cmd, click.Group):
                yield from walk(cmd, (*prefix, name))

    names = {p for p, _ in walk(cli)}
    assert {("load",), ("models",), ("models", "cleanup"), ("serve",)} <= names
    for path, cmd in walk(cli):
        assert "Example" in (cmd.help or ""), f"`vecserve {' '.join(path)}` lacks an example"


def test_a_killed_load_resumes_at_once(env, store, tmp_path):
    """SIGKILL mid-load: nothing visible, the dead loader's lease is taken over, and
    `--resume` completes to exactly the model an uninterrupted load gives."""
    import signal

    from vecserve.errors import ModelNotFound

    n = 200_000
    tokens = [f"t{i}" for i in range(n)]
    vectors = np.random.default_rng(3).standard_normal((n, 20)).astype(np.float32)
    path = write_w2v(tmp_path / "big.bin", tokens, vectors)
    argv = [VECSERVE] if VECSERVE else [sys.executable, "-m", "vecserve.cli"]
    proc = subprocess.Popen(
        [*argv, "load", str(path), "--key", "KILLED", "--batch-size", "50"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def under_way() -> bool:
        assert proc.poll() is None, "the load ended before it could be killed"
        state = store.get_load("KILLED")
        return state is not None and state.written >= 80_000

    wait_until(under_way, interval=0.005, what="the load to write 80,000 vectors")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with pytest.raises(ModelNotFound):
        store.get_model("KILLED")
    assert 80_000 <= store.get_load("KILLED").written < n
    assert store.lock_holder("KILLED") is not None  # the dead process's lease is still there
    listing = run("models", env=env).stdout  # but its process is known dead on this host
    assert "KILLED" in listing and "INCOMPLETE" in listing and "loading now" not in listing
    (state,) = json.loads(run("models", "--json", env=env).stdout)["loads"]
    assert state["name"] == "KILLED" and state["state"] == "incomplete"
    proc = run("load", str(path), "--key", "KILLED", "--resume", env=env)
    assert "KILLED: 200,000 vectors x 20" in proc.stdout
    # the rate is this run's: the vectors it wrote over its own time
    line = next(x for x in proc.stderr.splitlines() if "loaded KILLED" in x)
    took, rate = re.search(r"in ([\d.]+)s, ([\d,]+) vec/s", line).groups()
    written_now = n - state["written"]
    assert f"resumed after {state['written']:,} vectors" in line
    # (counting the earlier run's vectors too would make it >= 1.6x too high)
    assert 0.75 < float(rate.replace(",", "")) * float(took) / written_now < 1.3, line
    info = store.get_model("KILLED")
    assert store.vocab(info) == tokens
    got, found = info.codec_obj.decode_values(store.fetch(info, tokens), 20)
    assert found.all() and np.array_equal(got, vectors)
    assert store.list_loads() == []


@pytest.mark.parametrize(
    ("content", "args", "expect"),
    [
        ("2 3\na 1 2 3\nb 1 2 3\n", ["--encoding", "nope"], "unknown encoding 'nope'"),
        ("a 1 2 3\nb 1\t2 3\n", [], "line 2, vector #2"),
        ("2 3\na 1 2 3\n", ["--format", "nope"], "Invalid value for '--format'"),
    ],
)
def test_bad_input_is_one_line_and_no_traceback(env, tmp_path, content, args, expect):
    path = tmp_path / "v.txt"
    path.write_text(content)
    proc = run("load", str(path), "--key", "BAD", *args, env=env, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert expect in proc.stderr, proc.stderr
    assert len(lines) <= 3 and ("Error:" in lines[-1] or "error" in lines[-1].lower())
    assert "BAD" not in run("models", env=env).stdout


def test_load_options_are_the_library_s():
    """`vecserve load`'s choices and defaults are `load_file`'s: formats, codecs, defaults."""
    import inspect

    from vecserve.codec import CODECS
    from vecserve.loader import load_file
    from vecserve.readers import FORMATS

    params = {p.name: p for p in cli.commands["load"].params}
    assert list(params["format"].type.choices) == ["auto", *FORMATS]
    assert list(params["codec"].type.choices) == list(CODECS)
    library = inspect.signature(load_file).parameters
    for name in ("codec", "unicode_errors", "encoding", "limit", "batch_size", "progress"):
        assert params[name].default == library[name].default, name
    assert params["format"].default == library["format"].default


def test_the_commit_s_proof_is_shown_at_v_only(env, small_bin):
    """A clean load says that it committed; what the commit checked is for -v (given
    before or after the command)."""
    path = str(small_bin[0])
    quiet = run("load", path, "--key", "PROOF", env=env)
    assert "rows present" not in quiet.stderr and "committed as generation 1" in quiet.stdout
    for argv in (["-v", "load", path, "--key", "PROOF"], ["load", path, "-k", "PROOF", "-v"]):
        assert "500 rows present" in run(*argv, env=env).stderr
    silent = run("load", path, "--key", "PROOF", "-q", env=env)
    assert silent.stderr == "" and "committed as generation 4" in silent.stdout


def test_train_threads_and_its_old_spelling(tmp_path):
    """`train --threads` (-j); `--workers` (processes in `serve`) still works, with a note."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    base = ["train", str(corpus), "--min-count", "1", "--vector-size", "4", "--epochs", "1"]
    new = run(*base, "--threads", "1", "--save", str(tmp_path / "a.bin"))
    assert "saved 8 vectors" in new.stdout and "deprecated" not in new.stderr
    old = run(*base, "--workers", "1", "--save", str(tmp_path / "b.bin"), "-q")
    assert "saved 8 vectors" in old.stdout
    assert old.stderr.strip() == (
        "vecserve: `vecserve train --workers` is now --threads (-j): --workers means "
        "processes (as in `vecserve serve`)"
    )
    both = run(*base, "--workers", "1", "-j", "2", "--save", str(tmp_path / "c.bin"), check=False)
    assert both.returncode == 2 and "old spelling" in both.stderr
    bad = run(*base, "--min-count", "99", "--save", str(tmp_path / "d.bin"), check=False)
    assert (
        bad.returncode == 1 and "lower --min-count" in bad.stderr and "min_count" not in bad.stderr
    )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--format", "glove"], "--format does not apply"),
        (["--limit", "5"], "--limit does not apply"),
        (["--resume"], "--resume does not apply"),
        (["--encoding", "latin-1"], "--encoding does not apply"),
    ],
)
def test_a_static_model_directory_refuses_what_it_cannot_honour(tmp_path, flags, said):
    """`vecserve load DIR` of a static embedding model's directory refuses the options
    of a vector file in one line each, before anything is read or written."""
    from click.testing import CliRunner

    model = tmp_path / "potion"
    model.mkdir()
    for part in ("config.json", "model.safetensors", "tokenizer.json"):
        (model / part).write_text("{}")
    result = CliRunner().invoke(cli, ["load", str(model), "--key", "S", *flags])
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: {model}: {said} to a static embedding model's directory")


def test_similar_approx_builds_through_the_one_entry_point(env, small_bin, tmp_path):
    """`vecserve similar --approx` readies the model's search as `load --ann` does (the
    index lands in the cache dir) and answers with the exact top words on this model."""
    path, _, _ = small_bin
    env = {**env, "VECSERVE_CACHE_DIR": str(tmp_path / "cache")}  # never the user's
    run("load", str(path), "--key", "APX", env=env)
    exact = json.loads(run("similar", "w1", "--key", "APX", "--json", env=env).stdout)
    proc = run("similar", "w1", "--key", "APX", "--json", "--approx", env=env)
    approx = json.loads(proc.stdout)
    assert [w for w, _ in approx] == [w for w, _ in exact]
    assert list((tmp_path / "cache").rglob("ann-*"))  # built where the service maps it
