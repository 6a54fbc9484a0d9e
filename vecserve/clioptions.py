"""Click options that commands in different layers share (``vecserve``, ``vecserve serve``,
``vecserve train``), declared once so their names and help cannot drift apart.

An option's value is None when the flag is not given; the default (a ``VECSERVE_*``
variable, then the built-in one) is then decided where the value is used, through
:mod:`vecserve.config` or the service's settings, never by click.

The CLI's language, kept here: the model is ``--key``/``-k`` everywhere
(:func:`model_option`); ``-q``, ``-v`` and ``--redis-url`` work before or after the
subcommand (:func:`add_global_options`, :func:`redis_url_option`); ``--json`` means the
same on every listing; an old spelling stays as a hidden alias (:func:`alias_option`).
"""

from __future__ import annotations

import functools
import logging

import click

from .config import check_redis_url
from .errors import InvalidSetting

__all__ = [
    "QUIET_HELP",
    "VERBOSE_HELP",
    "add_global_options",
    "alias_option",
    "json_option",
    "model_option",
    "redis_url_option",
    "set_verbosity",
]


def _given_redis_url(ctx: click.Context, param: click.Parameter, value: str | None):
    """The flag's value, checked; when not given here, the one given to a parent command
    (``vecserve --redis-url URL models info M``)."""
    if value is None:
        parent = ctx.parent
        while parent is not None and value is None:
            value = parent.params.get("redis_url")
            parent = parent.parent
        return value
    try:
        return check_redis_url(value, "")
    except InvalidSetting as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def redis_url_option(f):
    """``--redis-url URL``: where the command's Redis is (None: ``$VECSERVE_REDIS_URL``,
    else the embedded server, as :func:`vecserve.connect.connect` decides)."""
    return click.option(
        "--redis-url",
        default=None,
        metavar="URL",
        callback=_given_redis_url,
        help="Redis/Valkey URL (redis://, rediss://, unix://); a cluster node URL works too. "
        "Default: $VECSERVE_REDIS_URL, else vecserve's embedded server.",
    )(f)


def model_option(*, required: bool = True, help: str = "The model's name."):
    """``--key``/``-k NAME``, the model a command works on, as the variable ``name``."""
    return click.option("--key", "-k", "name", required=required, metavar="NAME", help=help)


def json_option(help: str = "Print JSON instead of text."):
    """``--json``: machine-readable output (the variable ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def alias_option(flag: str, target: str, *, note: str | None = None, **attrs):
    """A hidden old spelling ``flag`` of the option whose variable is ``target``, kept so
    that scripts keep working. Giving both is a usage error; ``note`` (a deprecation) is
    printed in one line when the old spelling is used."""
    hidden_name = "_alias_" + target

    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            old = kwargs.pop(hidden_name, None)
            if old is not None:
                ctx = click.get_current_context()
                if ctx.get_parameter_source(target) == click.core.ParameterSource.COMMANDLINE:
                    raise click.UsageError(f"{flag} is the old spelling of an option also given")
                if note:
                    click.echo(f"vecserve: {note}", err=True)
                kwargs[target] = old
            return command(*args, **kwargs)

        return click.option(flag, hidden_name, hidden=True, default=None, **attrs)(wrapper)

    return decorate


def set_verbosity(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``-q`` (errors and warnings only) or ``-v`` (also the details), wherever given."""
    if value:
        level = logging.WARNING if param.name == "quiet" else logging.DEBUG
        logging.getLogger("vecserve").setLevel(level)


QUIET_HELP = "Only print warnings and errors."
VERBOSE_HELP = "Also print the details (what a commit checked, timings)."


def add_global_options(command: click.Command) -> click.Command:
    """Give ``command`` and every subcommand under it ``-q`` and ``-v`` (the ``vecserve``
    group's options, accepted after the subcommand too); idempotent."""
    if getattr(command, "_vecserve_global", False):
        return command
    command._vecserve_global = True  # type: ignore[attr-defined]
    taken = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    for flags, name, text in (
        (("-q", "--quiet"), "quiet", QUIET_HELP),
        (("-v", "--verbose"), "verbose", VERBOSE_HELP),
    ):
        if not taken & set(flags):
            command.params.append(
                click.Option(
                    [*flags, name],
                    is_flag=True,
                    expose_value=False,
                    callback=set_verbosity,
                    help=text,
                )
            )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_global_options(sub)
    return command
