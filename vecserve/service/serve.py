"""``vecserve serve``: run the HTTP API (:mod:`vecserve.api`) under uvicorn.

Flags become ``VECSERVE_*`` environment variables, read by :class:`.settings.Settings`
in each worker (uvicorn starts workers from the import string
``vecserve.api:create_app``), so flags and the environment configure the service the same
way; a flag wins over a variable already set. Registered by the CLI with
``cli.add_command(serve)``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import click

__all__ = ["serve", "settings_env"]

_OPTION_ENV = {
    "redis_url": "VECSERVE_REDIS_URL",
    "default_model": "VECSERVE_DEFAULT_MODEL",
    "cache_dir": "VECSERVE_CACHE_DIR",
    "preload": "VECSERVE_PRELOAD",
    "ann": "VECSERVE_ANN",
    "max_words": "VECSERVE_MAX_WORDS",
    "max_topn": "VECSERVE_MAX_TOPN",
    "max_body_bytes": "VECSERVE_MAX_BODY_BYTES",
    "vector_cache": "VECSERVE_VECTOR_CACHE",
    "api_keys_file": "VECSERVE_API_KEYS_FILE",
}


def settings_env(**options) -> dict[str, str]:
    """The ``VECSERVE_*`` variables for the options that were given (None = not given).

    >>> settings_env(redis_url="redis://r:6379/0", ann=True, max_words=None)
    {'VECSERVE_REDIS_URL': 'redis://r:6379/0', 'VECSERVE_ANN': 'true'}
    """
    env = {}
    for key, value in options.items():
        if value is None or key not in _OPTION_ENV:
            continue
        env[_OPTION_ENV[key]] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def redis_memory_line(redis_url: str | None) -> str:
    """One line on the server's memory and eviction policy (a policy that evicts keys
    without a TTL can damage models), or why it is unknown; never raises."""
    from ..connect import open_store
    from ..errors import VecserveError

    try:
        with open_store(redis_url) as store:
            facts = store.memory_facts()
            where = store.url
    except VecserveError as exc:
        return f"Redis not reachable yet ({exc}); the service answers 503 until it is"
    if facts is None:
        return f"Redis at {where}: eviction policy unknown (this user may not run INFO)"
    return f"Redis at {where}: " + "; ".join(f.describe() for f in facts)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="uvicorn worker processes (they share the memory-mapped similarity index).",
)
@click.option(
    "--redis-url",
    envvar="VECSERVE_REDIS_URL",
    default=None,
    metavar="URL",
    help="Redis/Valkey URL. Default: $VECSERVE_REDIS_URL, else the embedded server.",
)
@click.option("--default-model", default=None, metavar="NAME", help="Model when none is given.")
@click.option(
    "--cache-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Local directory for memory-mapped similarity indexes.",
)
@click.option(
    "--preload/--no-preload",
    default=None,
    help="Build the default model's index at start-up; /readyz waits for it.",
)
@click.option("--ann/--no-ann", default=None, help="Build approximate (IVF or HNSW) indexes too.")
@click.option("--max-words", type=click.IntRange(min=1), default=None, help="Words per request.")
@click.option("--max-topn", type=click.IntRange(min=1), default=None, help="Largest topn.")
@click.option(
    "--max-body-bytes", type=click.IntRange(min=1024), default=None, help="Largest request body."
)
@click.option(
    "--vector-cache",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Hot vectors per model kept in each worker's memory, invalidated by Redis "
    "(default 20000; 0 = off).",
)
@click.option(
    "--api-keys-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Require `Authorization: Bearer <key>` with one of the keys in FILE (one a line) "
    "on every endpoint but /healthz, /readyz and the explorer page; or set "
    "VECSERVE_API_KEYS=k1,k2.",
)
@click.option("--ssl-certfile", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Serve HTTPS with this certificate (PEM).")  # fmt: skip
@click.option("--ssl-keyfile", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The certificate's private key (PEM).")  # fmt: skip
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def serve(host, port, workers, log_level, ssl_certfile, ssl_keyfile, **options):
    """Serve vectors, similarity and most_similar over HTTP (FastAPI under uvicorn).

    Every option can also be set as a VECSERVE_* environment variable (e.g.
    VECSERVE_DEFAULT_MODEL). OpenAPI docs are at /docs.

    \b
    Example:
        vecserve serve --default-model GOOGLE_W2V --port 8000
        curl 'localhost:8000/vectors?words=king,queen'
        curl 'localhost:8000/most_similar?positive=king,woman&negative=man&topn=3'
        vecserve serve --api-keys-file keys.txt --ssl-certfile c.pem --ssl-keyfile k.pem
    """
    try:
        import uvicorn

        from ..errors import VecserveError
        from .auth import load_keys
        from .settings import Settings
    except ImportError as exc:
        raise click.ClickException(
            f"the HTTP service needs the api extra: pip install 'vecserve[api]' ({exc})"
        ) from exc
    os.environ.update(settings_env(**options))
    try:
        settings = Settings()
    except ValueError as exc:
        first = str(exc).splitlines()
        raise click.ClickException(f"invalid setting: {' '.join(first[:3])}") from exc
    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise click.ClickException("--ssl-certfile and --ssl-keyfile go together")
    try:  # a bad key file fails here, in one line, not in every worker
        load_keys(
            settings.api_keys.get_secret_value() if settings.api_keys else None,
            settings.api_keys_file,
        )
    except VecserveError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"vecserve: {redis_memory_line(settings.redis_url)}", err=True)
    with contextlib.ExitStack() as stack:
        if workers > 1 and settings.metrics_dir is None:  # /metrics answers for every worker
            shared = stack.enter_context(tempfile.TemporaryDirectory(prefix="vecserve-metrics-"))
            os.environ["VECSERVE_METRICS_DIR"] = shared
        try:
            uvicorn.run(
                "vecserve.api:create_app",
                factory=True,
                host=host,
                port=port,
                workers=workers,
                log_level=log_level,
                proxy_headers=True,
                ssl_certfile=ssl_certfile,
                ssl_keyfile=ssl_keyfile,
            )
        except OSError as exc:
            raise click.ClickException(f"cannot serve on {host}:{port}: {exc}") from exc
