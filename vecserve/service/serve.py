"""``vecserve serve``: run the HTTP API (:mod:`vecserve.api`) under uvicorn.

The service's options are the fields of :class:`.settings.Settings`, and so are the flags:
each flag in :data:`FLAGS` is made from its field (name, type, bounds, description,
default), so the two cannot disagree. A flag given becomes the field's ``VECSERVE_*``
variable, read by :class:`.settings.Settings` in each worker (uvicorn starts workers from
the import string ``vecserve.api:create_app``), so flags and the environment configure the
service the same way; a flag wins over a variable already set. Registered by the CLI with
``cli.add_command(serve)``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import types
import typing
from pathlib import Path

import click

from ..clioptions import alias_option, redis_url_option

try:
    from .settings import Settings
except ImportError:  # the api extra is not installed: `serve` says so when run
    Settings = None

__all__ = ["FLAGS", "env_name", "flag_of", "serve", "settings_env"]

#: The :class:`.settings.Settings` fields that are ``vecserve serve`` flags besides
#: ``--redis-url`` (the option every command shares). The others are set in the
#: environment only: ``api_keys`` is a secret, which a command line shows to every user of
#: the machine (``ps``); ``metrics_dir`` is made by ``serve --workers N`` itself.
FLAGS = (
    "default_model",
    "cache_dir",
    "preload",
    "ann",
    "ann_recall",
    "max_words",
    "max_topn",
    "max_body_bytes",
    "vector_cache",
    "api_keys_file",
)


#: fields whose flag is not their name: the model is ``--key`` in every command (the old
#: ``--default-model`` stays, hidden)
RENAMED = {"default_model": "--key"}


def flag_of(field: str) -> str:
    """The flag of a settings field.

    >>> flag_of("max_words"), flag_of("default_model")
    ('--max-words', '--key')
    """
    return RENAMED.get(field, "--" + field.replace("_", "-"))


def env_name(field: str) -> str:
    """The variable :class:`.settings.Settings` reads a field from.

    >>> env_name("max_words")
    'VECSERVE_MAX_WORDS'
    """
    return Settings.model_config["env_prefix"] + field.upper()


def settings_env(**options) -> dict[str, str]:
    """The ``VECSERVE_*`` variables for the options that were given (None = not given).

    >>> settings_env(redis_url="redis://r:6379/0", ann=True, max_words=None)
    {'VECSERVE_REDIS_URL': 'redis://r:6379/0', 'VECSERVE_ANN': 'true'}
    """
    return {
        env_name(key): str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in options.items()
        if value is not None and key in Settings.model_fields
    }


def _option(name: str):
    """A click option made from the settings field ``name``; its value is None unless given,
    so the field's default (and the environment) decide."""
    field = Settings.model_fields[name]
    kind = field.annotation
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(t for t in typing.get_args(kind) if t is not type(None))
    flag = flag_of(name)
    if name == "default_model":  # the model is --key in every command
        return click.option(
            flag,
            "-k",
            name,
            default=None,
            metavar="NAME",
            help=f"{field.description} [${env_name(name)}]",
        )
    help = f"{field.description} [${env_name(name)}"
    help += "]" if field.default is None else f"; default: {field.default!r}]"
    if kind is bool:
        return click.option(f"{flag}/--no-{flag[2:]}", name, default=None, help=help)
    if kind is int:
        low = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
        kind, metavar = click.IntRange(min=low), "N"
    elif kind is float:
        bound = {
            k: getattr(m, k)
            for m in field.metadata
            for k in ("gt", "ge", "lt", "le")
            if getattr(m, k, None) is not None
        }
        low, high = bound.get("gt", bound.get("ge")), bound.get("lt", bound.get("le"))
        kind = click.FloatRange(low, high, min_open="gt" in bound, max_open="lt" in bound)
        metavar = "X"
    elif kind is Path:  # a *_dir field names a directory, a *_file field a file
        directory = name.endswith("_dir")
        kind = click.Path(file_okay=not directory, dir_okay=directory)
        metavar = "DIR" if directory else "FILE"
    else:
        kind, metavar = str, "TEXT"
    return click.option(flag, name, type=kind, default=None, metavar=metavar, help=help)


def _settings_options(f):
    for name in reversed(FLAGS if Settings is not None else ()):
        f = _option(name)(f)
    return f


def port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be served on (as uvicorn would bind it), or None."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"--host {host!r} is not an address of this machine ({exc.strerror or exc})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == 98:  # EADDRINUSE
                return "the port is in use (another server runs there: stop it or pick --port)"
            return exc.strerror or str(exc)
    return None


def _check_default_model(settings, *, flag: bool) -> None:
    """``--key NAME`` (``flag``) must name a model that exists (listing those that do).
    From ``$VECSERVE_DEFAULT_MODEL`` (a deployment, whose loader may come later) it is a
    warning: requests without ``model=`` answer 404 until it is loaded. An unreachable
    Redis is not refused here: the service answers 503 until it is up."""
    from ..connect import open_store
    from ..errors import ModelNotFound, VecserveError

    if not settings.default_model:
        return
    try:
        with open_store(settings.redis_url) as store:
            names = sorted(m.name for m in store.list_models())
            if settings.default_model in names:
                return
            raise ModelNotFound(settings.default_model)
    except ModelNotFound:
        import difflib

        near = difflib.get_close_matches(
            settings.default_model.upper(), [n.upper() for n in names], n=1
        )
        match = next((n for n in names if near and n.upper() == near[0]), None)
        guess = f"; did you mean {match}?" if match else ""
        there = f"models: {', '.join(names)}" if names else "no models yet"
        if flag:
            raise click.ClickException(
                f"--key {settings.default_model}: no such model{guess} ({there})"
            ) from None
        click.echo(
            f"vecserve: ${env_name('default_model')}={settings.default_model} is not loaded "
            f"yet{guess} ({there}); requests without model= answer 404 until it is",
            err=True,
        )
    except VecserveError:
        return


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
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="TCP port to listen on (0: any free one).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="uvicorn worker processes (they share the memory-mapped similarity index).",
)
@redis_url_option
@_settings_options
@alias_option("--default-model", "default_model")
@click.option(
    "--ssl-certfile",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Serve HTTPS with this certificate (PEM).",
)
@click.option(
    "--ssl-keyfile",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="The certificate's private key (PEM).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    help="uvicorn's log level.",
)
def serve(host, port, workers, log_level, ssl_certfile, ssl_keyfile, **options):
    """Serve vectors, similarity and most_similar over HTTP (FastAPI under uvicorn).

    Every option can also be set as a VECSERVE_* environment variable (e.g.
    VECSERVE_DEFAULT_MODEL for --key, the model of requests that name none). OpenAPI
    docs are at /docs.

    \b
    Example:
        vecserve serve --key GOOGLE_W2V --port 8000
        curl 'localhost:8000/vectors?words=king,queen'
        curl 'localhost:8000/most_similar?positive=king,woman&negative=man&topn=3'
        vecserve serve --api-keys-file keys.txt --ssl-certfile c.pem --ssl-keyfile k.pem
    """
    try:
        import uvicorn
        from pydantic import ValidationError

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
    except ValidationError as exc:  # named from its fields; the value is left out (secrets)
        raise click.ClickException(
            "invalid setting: "
            + "; ".join(
                f"{'$' + env_name(str(e['loc'][0])) if e['loc'] else 'settings'}: "
                + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )
        ) from exc
    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise click.ClickException("--ssl-certfile and --ssl-keyfile go together")
    try:  # a bad key file fails here, in one line, not in every worker
        load_keys(
            settings.api_keys.get_secret_value() if settings.api_keys else None,
            settings.api_keys_file,
        )
    except VecserveError as exc:
        raise click.ClickException(str(exc)) from exc
    taken = port_taken(host, port)  # before uvicorn's start-up lines, in one line
    if taken:
        raise click.ClickException(f"cannot serve on {host}:{port}: {taken}")
    _check_default_model(settings, flag=options.get("default_model") is not None)
    click.echo(f"vecserve: {redis_memory_line(settings.redis_url)}", err=True)
    with contextlib.ExitStack() as stack:
        if workers > 1 and settings.metrics_dir is None:  # /metrics answers for every worker
            shared = stack.enter_context(tempfile.TemporaryDirectory(prefix="vecserve-metrics-"))
            os.environ[env_name("metrics_dir")] = shared
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
