"""The Docker image and the compose stack, built and run for real.

One build per test session (the images are shared by the tests here and removed at the
end): a Debian base image and a Redis image made from Debian packages
(docker/debian-images.sh; no image registry is needed), the vecserve image on that base
(docker/build_image.py, which carries this machine's pip settings into the builder stage
only), and the builder stage itself, which holds the sdist and the wheels.

Everything runs with host networking, on ports and a compose project of this session's
own, so every connection stays on loopback and nothing else on the machine is touched.
Skipped, with the reason, where no Docker daemon answers; under CI (CI=true) that is a
failure instead: .ci/run starts the daemon.

VECSERVE_TEST_BASE_IMAGE / VECSERVE_TEST_REDIS_IMAGE use existing images instead of
building them (e.g. python:3.12-slim and valkey/valkey:8 where a registry is reachable);
VECSERVE_TEST_APP_IMAGE (with VECSERVE_TEST_BUILDER_IMAGE, its builder stage) an already
built vecserve image, for re-running the compose tests after a change to compose files only.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import argv, wait_until

ROOT = Path(__file__).resolve().parents[1]
RUN = f"vecserve-test-{os.getpid()}"
MODEL = "LEE"
LEE = "lee_fasttext.vec"

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]


def docker(*args: str, check: bool = True, timeout: float = 900, **kw) -> str:
    out = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False, **kw
    )
    if check and out.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: exit {out.returncode}\n{out.stderr}")
    return out.stdout


def container_logs(cid: str) -> str:
    """A container's output, stdout and stderr."""
    out = subprocess.run(["docker", "logs", cid], capture_output=True, text=True, check=True)
    return out.stdout + out.stderr


def compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


def why_not() -> str | None:
    """Why the docker tests cannot run here, or None."""
    if not shutil.which("docker"):
        return "no docker command (Debian: apt-get install docker.io docker-compose mmdebstrap)"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        return "no Docker daemon answers (.ci/run starts dockerd --bridge=none --iptables=false)"
    if compose_command() is None:
        return "no docker-compose and no `docker compose`"
    building = not (os.environ.get("VECSERVE_TEST_BASE_IMAGE"))
    if building and not shutil.which("mmdebstrap"):
        return "no mmdebstrap to build the Debian base image (or set VECSERVE_TEST_BASE_IMAGE)"
    return None


@pytest.fixture(scope="module")
def images():
    reason = why_not()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the docker tests must run under CI: {reason}")
        pytest.skip(reason)
    tags = {
        "base": os.environ.get("VECSERVE_TEST_BASE_IMAGE") or f"{RUN}-debian:bookworm",
        "redis": os.environ.get("VECSERVE_TEST_REDIS_IMAGE") or f"{RUN}-redis:bookworm",
        "app": f"{RUN}:latest",
        "builder": f"{RUN}-builder:latest",
    }
    built = []
    try:
        started = time.monotonic()
        env = os.environ | {
            "VECSERVE_DEBIAN_IMAGE": tags["base"],
            "VECSERVE_REDIS_IMAGE": tags["redis"],
        }
        wanted = [
            k for k in ("base", "redis") if not os.environ.get(f"VECSERVE_TEST_{k.upper()}_IMAGE")
        ]
        if wanted:
            built += [tags[k] for k in wanted]
            subprocess.run(
                [str(ROOT / "docker" / "debian-images.sh"), *wanted], env=env, check=True
            )
        base_done = time.monotonic()
        if os.environ.get("VECSERVE_TEST_APP_IMAGE"):
            tags["app"] = os.environ["VECSERVE_TEST_APP_IMAGE"]
            tags["builder"] = os.environ.get("VECSERVE_TEST_BUILDER_IMAGE")
        else:
            argv = [sys.executable, str(ROOT / "docker" / "build_image.py"), "--quiet"]
            argv += ["--tag", tags["app"], "--builder-tag", tags["builder"]]
            built += [tags["builder"], tags["app"]]
            subprocess.run([*argv, "--base-image", tags["base"]], check=True)
        done = time.monotonic()
        print(
            f"\nimages: base images {base_done - started:.0f}s, "
            f"vecserve image {done - base_done:.0f}s"
        )
        yield tags
    finally:
        if built:
            docker("rmi", "--force", *reversed(built), check=False)


def image_size_mb(tag: str) -> float:
    return int(docker("image", "inspect", "--format", "{{.Size}}", tag)) / 1e6


def test_runtime_image_has_no_compiler_no_pip_conf_and_a_nonroot_user(images):
    config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", images["app"]))
    assert config["User"] == "vecserve"
    assert "healthz" in " ".join(config["Healthcheck"]["Test"])
    script = (
        "id -u; for c in gcc cc g++ c++; do p=$(command -v $c) && echo compiler: $p; done; "
        "ls /etc/vecserve-build 2>&1 || true; python -m pip --version 2>&1 || true; "
        "vecserve --help >/dev/null && echo cli-ok"
    )
    out = docker("run", "--rm", "--network", "none", images["app"], "sh", "-c", script)
    lines = out.splitlines()
    assert lines[0] != "0", "runs as root"
    assert "compiler:" not in out, f"a compiler in the image: {out}"
    assert "No such file" in out, "the builder's pip configuration reached the runtime image"
    assert "No module named pip" in out
    assert lines[-1] == "cli-ok"
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", images["app"])
    assert "vecserve-build" not in history and "ca.crt" not in history
    print(f"\nruntime image {images['app']}: {image_size_mb(images['app']):.0f} MB")


def test_wheel_from_sdist_installs_and_runs_the_demo_without_a_compiler(images, tmp_path):
    """The builder made the sdist and, from it, the wheel; the runtime image (no compiler)
    installs the wheel into a fresh venv, offline, and runs `vecserve demo`."""
    if not images["builder"]:
        pytest.skip("VECSERVE_TEST_APP_IMAGE without VECSERVE_TEST_BUILDER_IMAGE")
    cid = docker("create", images["builder"]).strip()
    try:
        docker("cp", f"{cid}:/dist", str(tmp_path))
        docker("cp", f"{cid}:/wheels", str(tmp_path))
    finally:
        docker("rm", cid, check=False)
    dist = sorted(p.name for p in (tmp_path / "dist").iterdir())
    assert [n.endswith(".tar.gz") for n in dist].count(True) == 1, dist
    assert [n.endswith(".whl") for n in dist].count(True) == 1, dist
    sdist = next((tmp_path / "dist").glob("*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    needed = ["vecserve/train/_kernels.pxd", "vecserve/train/_w2v.h", "vecserve/service/static/"]
    for name in needed:
        assert any(name in n for n in names), f"{name} not in {sdist.name}"
    wheel = next(n for n in dist if n.endswith(".whl"))
    assert not wheel.endswith("-none-any.whl"), f"{wheel}: built without its C extensions"
    (tmp_path / "wheels").chmod(0o755)
    script = (
        "python3 -m venv /tmp/fresh && "
        "/tmp/fresh/bin/pip install -q --no-index --find-links /wheels vecserve && "
        "/tmp/fresh/bin/vecserve demo"
    )
    wheels = f"{tmp_path / 'wheels'}:/wheels:ro"
    out = docker(*argv("run --rm --network none -v {} {} sh -c {}", wheels, images["app"], script))
    assert "identical to gensim: True" in out, out
    assert "same as gensim: True" in out, out


def free_port() -> int:
    """A port free right now, for a container on host networking: valkey and uvicorn in a
    container are given a number (their port cannot be read back from here); one taken
    meanwhile makes that container fail to start, and the test with it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    """The compose stack of this session, on host networking and ports of its own, with
    the secrets docs/deploy.md has an operator put in .env (fresh ones)."""

    def __init__(self, images: dict[str, str], data: Path):
        import secrets

        self.redis_port, self.api_port = free_port(), free_port()
        self.project = RUN
        self.secrets = {
            name: secrets.token_hex(16)
            for name in (
                "VECSERVE_REDIS_ADMIN_PASSWORD",
                "VECSERVE_REDIS_API_PASSWORD",
                "VECSERVE_REDIS_MAINTAINER_PASSWORD",
                "VECSERVE_API_KEYS",
                "VECSERVE_METRICS_KEYS",
            )
        }
        self.key = self.secrets["VECSERVE_API_KEYS"]
        self._cids: dict[str, str] = {}  # service -> container, until the next up or down
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("VECSERVE_")}
        self.env |= self.secrets | {
            "COMPOSE_PROJECT_NAME": self.project,
            "VECSERVE_IMAGE": images["app"],
            "VECSERVE_REDIS_IMAGE": images["redis"],
            "VECSERVE_REDIS_PORT": str(self.redis_port),
            "VECSERVE_REDIS_BIND": "127.0.0.1",
            "VECSERVE_REDIS_HOST": "127.0.0.1",
            "VECSERVE_API_HOST": "127.0.0.1",
            "VECSERVE_API_PORT": str(self.api_port),
            "VECSERVE_MODEL": MODEL,
            "VECSERVE_LOAD_FILE": LEE,
            "VECSERVE_DATA": str(data),
            "VECSERVE_CLEANUP_INTERVAL": "2",
        }

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        if args and args[0] in ("up", "down"):
            self._cids.clear()
        files = argv("-f docker-compose.yml -f docker/compose.host.yml")
        out = subprocess.run(
            [*compose_command(), *files, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and out.returncode != 0:
            raise AssertionError(
                f"compose {' '.join(args)}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
            )
        return out.stdout + out.stderr

    def get(self, path: str, timeout: float = 10, key: str | None = "api") -> dict:
        """GET path as JSON, with the API key (key="api"), another one, or none (None)."""
        url = f"http://127.0.0.1:{self.api_port}{path}"
        key = self.key if key == "api" else key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout
        ) as r:
            body = r.read()
        return json.loads(body) if path != "/metrics" else {"text": body.decode()}

    def refused(self, path: str, key: str | None = None) -> int:
        """The HTTP status of a request that must fail."""
        with pytest.raises(urllib.error.HTTPError) as err:
            self.get(path, key=key)
        err.value.close()  # the error holds the response open
        return err.value.code

    def wait_healthy(self, deadline_s: float = 120) -> None:
        """The API answers /healthz and Docker's own HEALTHCHECK says healthy."""
        seen = []

        def healthy() -> bool:
            health = docker("inspect", "--format", "{{.State.Health.Status}}", self.cid("api"))
            seen.append(health.strip())
            return seen[-1] == "healthy"

        def why() -> str:
            return f"the api container to be healthy (it is {seen[-1]}):\n" + self.compose(
                "logs", "--tail", "30", "api"
            )

        wait_until(healthy, timeout=deadline_s, interval=2, what=why)

    def cid(self, service: str) -> str:
        """The service's container (docker itself answers in ms where compose takes ~1 s)."""
        if service not in self._cids:
            self._cids[service] = self.compose("ps", "-q", service).strip()
        return self._cids[service]

    def redis_cli(self, *args: str, user: str | None = "vecserve-admin", password=None) -> str:
        """valkey-cli in the Redis container, as user (None: unauthenticated), the password
        in the environment (REDISCLI_AUTH), never on the command line. An error reply
        (NOAUTH, WRONGPASS) is its output, whatever the exit status."""
        auth = []
        if user:
            role = user.removeprefix("vecserve-").upper()
            password = password or self.secrets[f"VECSERVE_REDIS_{role}_PASSWORD"]
            auth = ["-e", f"REDISCLI_AUTH={password}", "-e", f"VALKEYCLI_AUTH={password}"]
        cli = ["valkey-cli", "-p", str(self.redis_port), "--no-auth-warning"]
        cli += ["--user", user] if user else []
        out = subprocess.run(
            ["docker", "exec", *auth, self.cid("redis"), *cli, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return out.stdout + out.stderr

    def wait_redis_healthy(self, deadline_s: float = 60) -> None:
        def healthy() -> bool:
            state = docker("inspect", "--format", "{{.State.Health.Status}}", self.cid("redis"))
            return state.strip() == "healthy"

        wait_until(healthy, timeout=deadline_s, interval=0.5, what="redis to be healthy again")


def gensim_lee():
    from gensim.models import KeyedVectors
    from gensim.test.utils import datapath

    return KeyedVectors.load_word2vec_format(datapath(LEE)), Path(datapath(LEE))


def default_refused(stack: Stack, in_container: bool = True) -> None:
    """Redis's default user: no command without AUTH, no AUTH as default."""
    import redis

    from vecserve.embedded import NO_RETRY

    if in_container:
        assert "NOAUTH" in stack.redis_cli("ping", user=None)
        assert "WRONGPASS" in stack.redis_cli("ping", user="default", password="anything")
    for password in (None, "", "anything"):
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=stack.redis_port, password=password, retry=NO_RETRY).ping()


def cleanups(stack: Stack) -> int:
    """How many times the cleanup service ran `vecserve models cleanup` to its end."""
    return container_logs(stack.cid("cleanup")).count("nothing to clean up")


def answered(stack: Stack, path: str) -> dict | None:
    """The answer, or None while the API reports Redis unreachable (503) after a restart."""
    try:
        return stack.get(path)
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        exc.close()
        if exc.code != 503:
            logs = stack.compose("logs", "--tail", "40", "api")
            raise AssertionError(f"{path}: {exc.code} {body}\n{logs}") from None
        return None


def test_compose_stack_loads_serves_and_keeps_the_model(images, tmp_path):
    kv, source = gensim_lee()
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(source, data / LEE)
    data.chmod(0o755)
    (data / LEE).chmod(0o644)
    stack = Stack(images, data)
    try:
        stack.compose("up", "-d", "--no-build")
        stack.wait_healthy()
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            stack.get("/readyz")
        not_ready.value.close()  # the error holds the response open
        assert not_ready.value.code == 503, "ready before the default model is loaded"

        out = stack.compose("--profile", "load", "run", "--rm", "loader")
        assert f"{MODEL}: {len(kv):,} vectors x {kv.vector_size}" in out, out

        words = ["government", "police", "court"]
        got = stack.get("/vectors?words=" + ",".join(words))
        assert got["words"] == words and got["missing"] == []
        np.testing.assert_array_equal(np.asarray(got["vectors"], dtype=np.float32), kv[words])
        near = stack.get("/most_similar?positive=government&topn=5")["results"]
        want = kv.most_similar("government", topn=5)
        assert [w for w, _ in near] == [w for w, _ in want]
        np.testing.assert_allclose([s for _, s in near], [s for _, s in want], atol=1e-5)
        generation = stack.get(f"/models/{MODEL}")["generation"]
        assert stack.get("/readyz")["status"] == "ready"

        # API keys: none or a wrong one is refused; the metrics key opens /metrics only
        assert stack.refused("/vectors?words=government") == 401
        assert stack.refused("/vectors?words=government", key="not-a-key") == 401
        metrics_key = stack.secrets["VECSERVE_METRICS_KEYS"]
        assert "vecserve_requests_total" in stack.get("/metrics", key=metrics_key)["text"]
        assert stack.refused("/vectors?words=government", key=metrics_key) == 403

        # Redis's users come from the ACL file on its volume (hashes, no password), the
        # default user is off: refused from the host and in the container
        acl_file = docker("exec", stack.cid("redis"), "cat", "/data/users.acl")
        assert acl_file.startswith("user default off "), acl_file
        for user in ("vecserve-admin", "vecserve-api", "vecserve-maintainer"):
            assert f"user {user} " in acl_file
        assert not any(secret in acl_file for secret in stack.secrets.values())
        default_refused(stack)

        wait_until(lambda: cleanups(stack), timeout=30, what="a run of the cleanup service")
        # Redis restarts alone (as its restart policy restarts it): the users are read
        # again from the file, the API authenticates again (no WRONGPASS) and answers
        stack.compose("restart", "redis")
        stack.wait_redis_healthy()
        runs_before = cleanups(stack)
        default_refused(stack, in_container=False)
        after = wait_until(
            lambda: answered(stack, "/vectors?words=" + ",".join(words)),
            timeout=30,
            interval=0.5,
            what=lambda: (
                "the API to answer after Redis restarted:\n"
                + stack.compose("logs", "--tail", "20", "api")
            ),
        )
        np.testing.assert_array_equal(np.asarray(after["vectors"], dtype=np.float32), kv[words])
        assert stack.get("/readyz")["status"] == "ready"
        # the scheduled cleanup runs again, as its own user, after the restart
        wait_until(
            lambda: cleanups(stack) > runs_before,
            timeout=30,
            interval=1,
            what=lambda: (
                "vecserve models cleanup in the cleanup service's log:\n"
                + stack.compose("logs", "--tail", "20", "cleanup")
            ),
        )
        logs = container_logs(stack.cid("api")) + container_logs(stack.cid("cleanup"))
        assert "WRONGPASS" not in logs and "NOPERM" not in logs and "Traceback" not in logs

        config = stack.redis_cli("config", "get", "maxmemory-policy")
        assert "noeviction" in config.split()
        assert "yes" in stack.redis_cli("config", "get", "appendonly").split()
        clients = stack.redis_cli("client", "list")
        addrs = [f.split("=", 1)[1] for f in clients.split() if f.startswith("addr=")]
        assert addrs and all(a.startswith("127.") for a in addrs), clients

        # Down and up again: the volume keeps the model (same generation, same vectors).
        stack.compose("down")
        stack.compose("up", "-d", "--no-build")
        stack.wait_healthy()
        assert stack.get("/readyz")["status"] == "ready"
        assert stack.get(f"/models/{MODEL}")["generation"] == generation
        again = stack.get("/vectors?words=" + ",".join(words))
        np.testing.assert_array_equal(np.asarray(again["vectors"], dtype=np.float32), kv[words])
    finally:
        subprocess.run(
            [
                *compose_command(),
                *argv(
                    "-f docker-compose.yml -f docker/compose.host.yml"
                    " --profile load down --volumes --remove-orphans"
                ),
            ],
            cwd=ROOT,
            env=stack.env,
            capture_output=True,
            check=False,
            timeout=300,
        )
    assert not docker("volume", "ls", "-q", "--filter", f"name={stack.project}").strip()
