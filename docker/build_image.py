"""Build the vecserve image from this checkout, carrying the machine's pip configuration
into the builder stage only.

    python docker/build_image.py --tag vecserve:dev [--base-image vecserve-debian:bookworm]

The build context is a temporary folder holding what .dockerignore lets through plus
docker/build-conf/ filled from this machine's pip settings (`pip config list`, which
includes PIP_* variables): index URLs, the CA bundle (pip's ``cert``, else
SSL_CERT_FILE / REQUESTS_CA_BUNDLE) and constraint files are copied in; local-disk
indexes and find-links (file:// URLs, paths) are left out, as the build cannot see this
machine's disk. The build runs with host networking (the build reaches what this machine
reaches, over its loopback too) and the legacy builder (no BuildKit needed).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF_IN_IMAGE = "/etc/vecserve-build"
KEPT = ("index-url", "extra-index-url", "trusted-host", "constraint", "cert", "default-timeout",
        "retries", "proxy", "timeout")  # fmt: skip


def pip_settings(python: str = sys.executable) -> dict[str, str]:
    """pip's effective settings, the environment's PIP_* over the files, as key -> value."""
    out = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, value = line.partition("=")
        if not sep:
            continue
        scope, _, key = name.rpartition(".")
        (env if scope == ":env:" else files)[key] = ast.literal_eval(value)
    return files | env


def is_local(url: str) -> bool:
    return url.startswith("file:") or "://" not in url


def write_build_conf(dest: Path, settings: dict[str, str]) -> list[str]:
    """Write dest/pip.conf (and the files it names) for the builder; returns what it kept."""
    dest.mkdir(parents=True, exist_ok=True)
    lines, kept = ["[global]"], []
    cert = (
        settings.get("cert")
        or os.environ.get("SSL_CERT_FILE")
        or os.environ.get("REQUESTS_CA_BUNDLE")
    )
    for key in KEPT:
        value = cert if key == "cert" else settings.get(key)
        if not value:
            continue
        if key in ("index-url", "extra-index-url"):
            urls = [u for u in value.split() if not is_local(u)]
            if not urls:
                continue
            value = " ".join(urls)
        elif key == "cert":
            if not Path(value).is_file():
                continue
            shutil.copyfile(value, dest / "ca.crt")
            value = f"{CONF_IN_IMAGE}/ca.crt"
        elif key == "constraint":
            names = []
            for i, path in enumerate(value.split()):
                if Path(path).is_file():
                    shutil.copyfile(path, dest / f"constraints-{i}.txt")
                    names.append(f"{CONF_IN_IMAGE}/constraints-{i}.txt")
            if not names:
                continue
            value = " ".join(names)
        lines.append(f"{key} = {value}")
        kept.append(key)
    (dest / "pip.conf").write_text("\n".join(lines) + "\n")
    return kept


def make_context(dest: Path) -> None:
    """The files the Dockerfile copies, without build outputs (as .dockerignore says)."""
    for name in (
        "Dockerfile",
        ".dockerignore",
        "pyproject.toml",
        "setup.py",
        "MANIFEST.in",
        "README.md",
    ):
        shutil.copy2(ROOT / name, dest / name)
    skip = shutil.ignore_patterns("__pycache__", "*.py[cod]", "*.so", "*.egg-info")

    def outputs(folder: str, names: list[str]) -> set[str]:
        # C generated from a .pyx beside it; hand-written C (no such .pyx) is a source.
        generated = {n for n in names if n.endswith(".c") and n[:-2] + ".pyx" in names}
        return skip(folder, names) | generated

    shutil.copytree(ROOT / "vecserve", dest / "vecserve", ignore=outputs)
    shutil.copytree(ROOT / "docker" / "build-conf", dest / "docker" / "build-conf")


def build(tags: dict[str | None, str], base_image: str | None = None, quiet: bool = False) -> None:
    """Build each {target stage (None: the last): tag} from one context, in order; later
    builds reuse the layers of earlier ones."""
    with tempfile.TemporaryDirectory(prefix="vecserve-build-") as tmp:
        ctx = Path(tmp)
        make_context(ctx)
        kept = write_build_conf(ctx / "docker" / "build-conf", pip_settings())
        print(f"pip settings for the builder stage: {', '.join(kept) or 'none'}", flush=True)
        argv = ["docker", "build", "--network", "host"]
        if base_image:
            argv += ["--build-arg", f"BASE_IMAGE={base_image}"]
        for proxy in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            if os.environ.get(proxy):  # predefined build args: never kept in the image
                argv += ["--build-arg", proxy]
        if quiet:
            argv.append("--quiet")
        env = os.environ | {"DOCKER_BUILDKIT": "0"}
        for target, tag in tags.items():
            stage = ["--target", target] if target else []
            subprocess.run([*argv, *stage, "--tag", tag, str(ctx)], check=True, env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", default="vecserve:latest")
    ap.add_argument("--base-image", help="the Dockerfile's BASE_IMAGE (default: its own)")
    ap.add_argument("--builder-tag", help="also tag the builder stage (sdist, wheels)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    try:
        tags = {"builder": args.builder_tag} if args.builder_tag else {}
        build(tags | {None: args.tag}, args.base_image, args.quiet)
    except subprocess.CalledProcessError as exc:
        sys.exit(f"build_image: docker build failed (exit {exc.returncode})")


if __name__ == "__main__":
    main()
