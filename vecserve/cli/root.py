"""The ``vecserve`` command group: logging, -q/-v/--redis-url before or after the
command, and the commands imported only when used (``serve``, ``train``, ``embed``)."""

from __future__ import annotations

import importlib
import logging
import sys

import click

from ..clioptions import QUIET_HELP, VERBOSE_HELP, add_global_options, redis_url_option

__all__ = ["LazyGroup", "cli"]


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"vecserve: {record.getMessage()}"


class LazyGroup(click.Group):
    """A group whose heavier commands are imported only when used (fast start-up)."""

    lazy = {  # noqa: RUF012
        "serve": "vecserve.service.serve:serve",
        "train": "vecserve.train.cli:train",
        "embed": "vecserve.cli.embed:embed",
    }

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx, name):
        if name in self.lazy and name not in self.commands:
            module, attr = self.lazy[name].split(":")
            try:
                mod = importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    raise
                return None  # that part of vecserve is not installed/built here
            self.add_command(getattr(mod, attr), name)
        command = super().get_command(ctx, name)
        # -q and -v after the subcommand too, on every command, lazy ones included
        return None if command is None else add_global_options(command)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vecserve")
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
@click.option("-v", "--verbose", is_flag=True, help=VERBOSE_HELP)
@redis_url_option
def cli(quiet: bool, verbose: bool, redis_url: str | None) -> None:
    """Serve word vectors out of Redis, embed text with them, train word2vec or fastText into it.

    -q, -v and --redis-url may come before or after the command.

    \b
    Example:
        vecserve load GoogleNews-vectors-negative300.bin --key GOOGLE_W2V
        vecserve similar king queen --key GOOGLE_W2V
        vecserve models
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    root = logging.getLogger("vecserve")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
