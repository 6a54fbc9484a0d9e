"""The CLI's one error language: a :class:`~vecserve.errors.VecserveError` becomes one
line on stderr and exit status 1, with what to do next where the error's fields say it
(a near model name, how to continue a stopped load).

Every command wraps itself in :func:`friendly_errors`: the ``vecserve`` commands
(:mod:`vecserve.cli`) and those registered lazily (``vecserve train``, ``vecserve
embed``), which import this module, not the command group.
"""

from __future__ import annotations

import difflib
import functools
import sys

import click

from .errors import LoadInterrupted, ModelNotFound, VecserveError

__all__ = ["friendly_errors"]


def friendly_errors(f):
    """Turn vecserve's errors into one line on stderr and exit status 1 (130 on Ctrl-C)."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except ModelNotFound as exc:
            raise click.ClickException(f"{exc}{_models_hint(exc.name)}") from exc
        except LoadInterrupted as exc:
            raise click.ClickException(f"{exc}{_load_hint(exc)}") from exc
        except VecserveError as exc:
            raise click.ClickException(str(exc)) from exc
        except KeyboardInterrupt:
            click.echo("vecserve: interrupted", err=True)
            sys.exit(130)

    return wrapper


def _load_hint(exc: LoadInterrupted) -> str:
    """What to do after a load stopped: continue it, or (a stream) run it again."""
    if exc.resumable:
        return f" Continue with `{exc.resume_command}` or drop it with `vecserve models cleanup`."
    return " Run the command again (with --restart if `vecserve models` still lists the load)."


def _models_hint(name: str) -> str:
    """What to say after "model 'X' not found": the near match and the models there are
    (asked of the same server the command used; nothing when it cannot be asked)."""
    ctx = click.get_current_context(silent=True)
    url = None
    while ctx is not None and url is None:
        url = ctx.params.get("redis_url")
        ctx = ctx.parent
    try:
        from .connect import open_store

        with open_store(url) as store:
            names = sorted(m.name for m in store.list_models())
    except VecserveError:
        return ""
    if not names:
        return "; there are no models yet (vecserve load FILE --key NAME)"
    exc_name = str(name)
    if exc_name in names:
        return ""
    near = {n.lower(): n for n in names}
    match = near.get(exc_name.lower()) or next(
        iter(difflib.get_close_matches(exc_name, names, n=1, cutoff=0.6)), None
    )
    if match is None:
        low = difflib.get_close_matches(exc_name.lower(), list(near), n=1, cutoff=0.6)
        match = near[low[0]] if low else None
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    guess = f"; did you mean {match}?" if match else ""
    return f"{guess} (models: {shown})"
