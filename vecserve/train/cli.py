"""``vecserve train``: train word2vec on a corpus and land the vectors in Redis (or a file).

The lead's ``vecserve.cli`` registers :func:`train` (lazily); the command only parses
flags, calls :class:`~vecserve.train.Word2Vec` and the loader, and turns vecserve's errors
into one line and a non-zero exit. Its training options are the library's parameters
(:mod:`vecserve.train.params`: names, defaults, help), so the two cannot disagree; the
one deliberate difference is declared there too: the command trains skip-gram unless
``--cbow``. Progress goes through the ``vecserve`` logger, which the ``vecserve`` group
sends to stderr.

Started by ``mpiexec -n N`` (or ``srun``), every rank runs this same command and they
train together (:mod:`vecserve.train.distributed`); rank 0 alone logs, writes ``--save``
and commits to Redis. A rank that fails says so in one line and leaves at once (no MPI
finalisation, which would wait for the others), so the launcher stops the job; the other
ranks, stopped by the launcher's SIGTERM, say in one line that nothing was committed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

import click

from ..clierrors import friendly_errors
from ..clioptions import alias_option, redis_url_option
from ..codec import CODECS
from ..errors import TrainingError, VecserveError
from .params import option_fields

__all__ = ["train"]


def _param_option(f: dataclasses.Field) -> Callable:
    """The ``vecserve train`` option of one parameter: its name, default and help from
    :mod:`vecserve.train.params` (a boolean is a ``--x/--no-x`` switch)."""
    meta = f.metadata
    name = f.name.replace("_", "-")
    default = meta.get("cli_default", f.default)
    flags = (
        _RENAMED.get(f.name)
        or meta.get("flags")
        or ((f"--{name}/--no-{name}",) if isinstance(default, bool) else (f"--{name}",))
    )
    kwargs: dict[str, Any] = {"default": default, "help": meta["help"]}
    if meta.get("is_flag"):
        kwargs.update(is_flag=True, default=bool(default))
    elif "/" in flags[0]:
        kwargs["default"] = None if default is None else bool(default)
    elif "choices" in meta:
        kwargs["type"] = click.Choice(meta["choices"])
    elif "min" in meta:
        kwargs["type"] = click.IntRange(min=meta["min"])
    else:
        kwargs["type"] = meta.get("type") or type(default)
    if "metavar" in meta:
        kwargs["metavar"] = meta["metavar"]
    kwargs["show_default"] = default is not None and not meta.get("is_flag")
    return click.option(*flags, f.name, **kwargs)


#: the command's spelling where the library's name would mean something else on the command
#: line: ``--workers`` is processes in ``vecserve serve``, so threads are ``--threads``
_RENAMED = {"workers": ("--threads", "-j")}


def _param_options(command: Callable) -> Callable:
    for f in reversed(option_fields()):
        command = _param_option(f)(command)
    return command


def _flag(name: str) -> str:
    """The option of parameter ``name`` as the command spells it (``--min-count``)."""
    spelled = {f.name: f for f in option_fields()}.get(name)
    flags = (_RENAMED.get(name) or (spelled.metadata.get("flags") if spelled else None)) or ()
    first = flags[0].split("/")[0] if flags else "--" + name.replace("_", "-")
    return first


def flagged(message: str) -> str:
    """``message`` with the library's parameter names (``min_count=0``, ``lower
    min_count``) written as this command's flags (``--min-count=0``).

    >>> flagged("no word occurs at least min_count=5 times; lower min_count")
    'no word occurs at least --min-count=5 times; lower --min-count'
    >>> flagged("workers=0: must be a positive integer")
    '--threads=0: must be a positive integer'
    >>> flagged("lower alpha or sync_cap; the negative samples")
    'lower --alpha or --sync-cap; the negative samples'
    """
    for f in option_fields():
        plain = "_" not in f.name  # "window", "alpha": only as name=value or "lower alpha"
        pattern = (
            rf"(?<![\w-]){f.name}(?==)|(?<=lower ){f.name}\b|(?<=raise ){f.name}\b"
            if plain
            else rf"(?<![\w-]){f.name}\b"
        )
        message = re.sub(pattern, _flag(f.name), message)
    return message


@click.command("train")
@click.argument("corpus", type=click.Path(path_type=str))
@click.option(
    "--key", "-k", "name", default=None, metavar="NAME", help="Model name to commit in Redis."
)
@click.option(
    "--save",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help="Also write the vectors to this file in word2vec format.",
)
@click.option("--binary/--text", default=True, show_default=True, help="Format for --save.")
@click.option(
    "--codec",
    type=click.Choice(list(CODECS)),
    default="f32",
    show_default=True,
    help="How vectors are stored in Redis.",
)
@_param_options
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Save the model there after every epoch.",
)
@click.option("--resume", is_flag=True, help="Continue from --checkpoint-dir's checkpoint.")
@click.option(
    "--subwords",
    is_flag=True,
    help="Train fastText's subword model (character n-grams: vectors for unseen words); "
    "--save then writes fastText's .bin (--text: .vec).",
)
@click.option(
    "--allow-eviction",
    is_flag=True,
    help="Commit even into a server whose maxmemory-policy is allkeys-* (it may evict "
    "parts of the model later: lookups then raise ModelDamaged); refused otherwise.",
)
@redis_url_option
@alias_option(
    "--workers",
    "workers",
    type=int,
    note="`vecserve train --workers` is now --threads (-j): --workers means processes "
    "(as in `vecserve serve`)",
)
@friendly_errors
def train(corpus, name, save, binary, codec, redis_url, allow_eviction, **options):
    """Train word2vec (fastText with --subwords) on CORPUS; commit the vectors as model --key.

    CORPUS is a text file (one sentence per line, or text8-style one huge line), a .gz or
    .bz2 file, or a directory of such files. Word counts are kept with the vectors.

    Under ``mpiexec -n N`` the N ranks train data-parallel, each on its share of CORPUS
    with -j (--threads) threads; rank 0 commits. Install the MPI extra: pip install 'vecserve[mpi]'.

    \b
    Example:
        vecserve train text8 --key TEXT8_W2V --sample 1e-4 --epochs 5
        vecserve train corpus/ --key NEWS --cbow --save news.bin
        vecserve train titles.txt --key JOBS --subwords --save jobs.bin
        mpiexec -n 4 vecserve train corpus/ --key NEWS -j 2 --checkpoint-dir ckpt/
    """
    from .distributed import Group

    if not name and not save:
        raise click.UsageError("give --key NAME (Redis) and/or --save PATH")
    group = Group.from_environment()
    if group.size == 1:
        try:
            _train(group, corpus, name, save, binary, codec, redis_url, allow_eviction, options)
        except TrainingError as exc:
            raise click.ClickException(flagged(str(exc))) from exc
        return
    state = {"committed": False}
    _on_sigterm(group, state)
    if group.rank != 0:
        logging.getLogger("vecserve").setLevel(logging.WARNING)
    try:
        _train(group, corpus, name, save, binary, codec, redis_url, allow_eviction, options, state)
    except VecserveError as exc:
        collective = isinstance(exc, TrainingError) and exc.collective
        if group.rank == 0 or not collective:
            click.echo(f"Error: rank {group.rank} of {group.size}: {flagged(str(exc))}", err=True)
        if collective:  # every rank raised it: none leaves before rank 0 has said it (the
            group.max(0)  # launcher stops the job as soon as one rank exits non-zero)
        _leave(1)
    except KeyboardInterrupt:
        _leave(130)


def _train(
    group, corpus, name, save, binary, codec, redis_url, allow_eviction, options, state=None
):
    model_class, options = _model_class(options)
    model = model_class(corpus, comm=group, **options)
    if group.rank != 0:
        return
    if save and binary and hasattr(model, "save_facebook_model"):
        model.save_facebook_model(save)
        click.echo(f"saved the fastText model ({len(model.vocab):,} words) to {save}")
    elif save:
        model.save_word2vec_format(save, binary=binary)
        click.echo(f"saved {len(model.vocab):,} vectors to {save}")
    if name:
        info = model.to_redis(name, redis_url=redis_url, codec=codec, allow_eviction=allow_eviction)
        if state is not None:
            state["committed"] = True
        count = getattr(info, "count", len(model.vocab))
        ranks = f" (trained on {group.size} ranks)" if group.size > 1 else ""
        click.echo(f"{name}: {count:,} vectors x {model.vector_size} committed{ranks}")


_SUBWORD_FLAGS = {"min_n": "--min-n", "max_n": "--max-n", "bucket": "--buckets"}


def _model_class(options: dict) -> tuple[type, dict]:
    """``--subwords``: :class:`~vecserve.train.FastText` with the n-gram options given;
    otherwise :class:`~vecserve.train.Word2Vec`, and an n-gram option is a usage error."""
    from .params import subword_names

    options = dict(options)
    subwords = options.pop("subwords", False)
    given = {k: options.pop(k) for k in subword_names() if k in options}
    given = {k: v for k, v in given.items() if v is not None}
    if subwords:
        from .subword import FastText

        return FastText, {**options, **given}
    if given:
        flags = ", ".join(_SUBWORD_FLAGS[k] for k in sorted(given))
        raise click.UsageError(f"{flags}: n-gram options need --subwords")
    from .model import Word2Vec

    return Word2Vec, options


def _leave(status: int) -> None:
    """Exit now, without MPI's finalisation (it would wait for ranks that never come)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _on_sigterm(group, state) -> None:
    """The launcher stops the job with SIGTERM when a rank died: say so in one line."""

    def stopped(signum, frame):
        done = "the model was committed" if state["committed"] else "nothing was committed"
        click.echo(
            f"Error: rank {group.rank} of {group.size}: the MPI job was stopped "
            f"({signal.Signals(signum).name}: another rank failed or was killed, see the "
            f"launcher's message); {done}",
            err=True,
        )
        _leave(143 if signum == signal.SIGTERM else 130)

    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGINT, stopped)
