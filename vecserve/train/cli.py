"""``vecserve train``: train word2vec on a corpus and land the vectors in Redis (or a file).

The lead's ``vecserve.cli`` registers :func:`train` (lazily); the command only parses
flags, calls :class:`~vecserve.train.Word2Vec` and the loader, and turns vecserve's errors
into one line and a non-zero exit. Progress goes through the ``vecserve`` logger, which
the ``vecserve`` group sends to stderr.

Started by ``mpiexec -n N`` (or ``srun``), every rank runs this same command and they
train together (:mod:`vecserve.train.distributed`); rank 0 alone logs, writes ``--save``
and commits to Redis. A rank that fails says so in one line and leaves at once (no MPI
finalisation, which would wait for the others), so the launcher stops the job; the other
ranks, stopped by the launcher's SIGTERM, say in one line that nothing was committed.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import click

from ..cli import friendly_errors, redis_url_option
from ..errors import VecserveError

__all__ = ["train"]


@click.command("train")
@click.argument("corpus", type=click.Path(path_type=str))
@click.option("--key", "-k", "name", default=None, help="Model name to commit in Redis.")
@click.option("--save", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Also write the vectors to this file in word2vec format.")  # fmt: skip
@click.option("--binary/--text", default=True, show_default=True, help="Format for --save.")
@click.option("--codec", type=click.Choice(["f32", "f16", "i8"]), default="f32",
              show_default=True, help="How vectors are stored in Redis.")  # fmt: skip
@click.option("--vector-size", "--size", default=100, show_default=True, type=int)
@click.option("--window", default=5, show_default=True, type=int)
@click.option("--min-count", default=5, show_default=True, type=int)
@click.option("--max-vocab-size", default=None, type=int, help="Prune while counting.")
@click.option("--max-final-vocab", default=None, type=int, help="Keep at most N words.")
@click.option("--sg/--cbow", default=True, show_default=True, help="Skip-gram or CBOW.")
@click.option("--hs", is_flag=True, help="Hierarchical softmax.")
@click.option("--negative", default=5, show_default=True, type=int)
@click.option("--cbow-mean/--cbow-sum", default=True, show_default=True)
@click.option("--sample", default=1e-3, show_default=True, type=float)
@click.option("--alpha", default=None, type=float,
              help="Initial learning rate [default: 0.025 skip-gram, 0.05 CBOW].")  # fmt: skip
@click.option("--min-alpha", default=0.0001, show_default=True, type=float)
@click.option("--epochs", "--iter", default=5, show_default=True, type=int)
@click.option("--workers", "-j", default=None, type=int,
              help="Threads [default: the cores this process may use].")  # fmt: skip
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--batch/--no-batch", default=None,
              help="HogBatch (sgemm) updates [default: on for skip-gram].")  # fmt: skip
@click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=str),
              default=None, help="Save the model there after every epoch.")  # fmt: skip
@click.option("--resume", is_flag=True, help="Continue from --checkpoint-dir's checkpoint.")
@click.option("--sync-words", default=50_000, show_default=True, type=int,
              help="Under mpiexec: words a rank trains between two model syncs.")  # fmt: skip
@click.option("--sync-min-per-epoch", default=128, show_default=True, type=int,
              help="Under mpiexec: at least this many syncs an epoch (short runs).")  # fmt: skip
@click.option("--sync-budget", default=2.0, show_default=True, type=float,
              help="Under mpiexec: bytes a rank sends per epoch, in float32 models.")  # fmt: skip
@click.option("--sync-cap", default=2.0, show_default=True, type=float,
              help="Under mpiexec: 1 averages ranks' changes to a row, N adds them.")  # fmt: skip
@click.option("--sync-coherent/--no-sync-coherent", default=True, show_default=True,
              help="Under mpiexec: add changes the ranks disagree on.")  # fmt: skip
@click.option("--sync-dtype", default="int16", show_default=True,
              type=click.Choice(["float32", "float16", "int16", "int8"]),
              help="Under mpiexec: the changes' precision on the wire.")  # fmt: skip
@click.option("--sync-schedule", default="doubling", show_default=True,
              type=click.Choice(["doubling", "rates"]),
              help="Under mpiexec: rows synced by frequency rank or by update rate.")  # fmt: skip
@click.option("--sync-warmup", default=0.25, show_default=True, type=float,
              help="Under mpiexec: share of the first epoch synced 4x as often.")  # fmt: skip
@click.option("--sync-scale-alpha", default=0.8, show_default=True, type=float, metavar="POWER",
              help="Under mpiexec: alpha x (ranks / sync cap) ** POWER (0: off).")  # fmt: skip
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="Under mpiexec: exchange a sync's changes while training on.")  # fmt: skip
@click.option("--sync-depth", default=1, show_default=True, type=click.IntRange(min=1),
              help="Under mpiexec: syncs under way at once while training on.")  # fmt: skip
@redis_url_option
@friendly_errors
def train(corpus, name, save, binary, codec, redis_url, alpha, sg, **options):
    """Train word2vec on CORPUS on all cores; commit the vectors as model --key.

    CORPUS is a text file (one sentence per line, or text8-style one huge line), a .gz or
    .bz2 file, or a directory of such files. Word counts are kept with the vectors.

    Under ``mpiexec -n N`` the N ranks train data-parallel, each on its share of CORPUS
    with -j threads; rank 0 commits. Install the MPI extra: pip install 'vecserve[mpi]'.

    \b
    Example:
        vecserve train text8 --key TEXT8_W2V --sample 1e-4 --epochs 5
        vecserve train corpus/ --key NEWS --cbow --save news.bin
        mpiexec -n 4 vecserve train corpus/ --key NEWS -j 2 --checkpoint-dir ckpt/
    """
    from .distributed import Group

    if not name and not save:
        raise click.UsageError("give --key NAME (Redis) and/or --save PATH")
    if alpha is None:
        alpha = 0.025 if sg else 0.05
    group = Group.from_environment()
    if group.size == 1:
        _train(group, corpus, name, save, binary, codec, redis_url, alpha, sg, options)
        return
    state = {"committed": False}
    _on_sigterm(group, state)
    if group.rank != 0:
        logging.getLogger("vecserve").setLevel(logging.WARNING)
    try:
        _train(group, corpus, name, save, binary, codec, redis_url, alpha, sg, options, state)
    except VecserveError as exc:
        if group.rank == 0 or not getattr(exc, "collective", False):
            click.echo(f"Error: rank {group.rank} of {group.size}: {exc}", err=True)
        _leave(1)
    except KeyboardInterrupt:
        _leave(130)


def _train(group, corpus, name, save, binary, codec, redis_url, alpha, sg, options, state=None):
    from .model import Word2Vec

    model = Word2Vec(corpus, sg=int(sg), alpha=alpha, comm=group, **options)
    if group.rank != 0:
        return
    if save:
        model.save_word2vec_format(save, binary=binary)
        click.echo(f"saved {len(model.vocab):,} vectors to {save}")
    if name:
        info = model.to_redis(name, redis_url=redis_url, codec=codec)
        if state is not None:
            state["committed"] = True
        count = getattr(info, "count", len(model.vocab))
        ranks = f" (trained on {group.size} ranks)" if group.size > 1 else ""
        click.echo(f"{name}: {count:,} vectors x {model.vector_size} committed{ranks}")


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
