"""``vecserve train``: train word2vec on a corpus and land the vectors in Redis (or a file).

The lead's ``vecserve.cli`` registers :func:`train` (lazily); the command only parses
flags, calls :class:`~vecserve.train.Word2Vec` and the loader, and turns vecserve's errors
into one line and a non-zero exit. Progress goes through the ``vecserve`` logger, which
the ``vecserve`` group sends to stderr.
"""

from __future__ import annotations

import click

from ..cli import friendly_errors, redis_url_option

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
@click.option("--workers", "-j", default=None, type=int, help="Threads [default: all cores].")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--batch/--no-batch", default=None,
              help="HogBatch (sgemm) updates [default: on for skip-gram].")  # fmt: skip
@redis_url_option
@friendly_errors
def train(corpus, name, save, binary, codec, redis_url, alpha, sg, **options):
    """Train word2vec on CORPUS on all cores; commit the vectors as model --key.

    CORPUS is a text file (one sentence per line, or text8-style one huge line), a .gz or
    .bz2 file, or a directory of such files. Word counts are kept with the vectors.

    \b
    Example:
        vecserve train text8 --key TEXT8_W2V --sample 1e-4 --epochs 5
        vecserve train corpus/ --key NEWS --cbow --save news.bin
    """
    from .model import Word2Vec

    if not name and not save:
        raise click.UsageError("give --key NAME (Redis) and/or --save PATH")
    if alpha is None:
        alpha = 0.025 if sg else 0.05
    model = Word2Vec(corpus, sg=int(sg), alpha=alpha, **options)
    if save:
        model.save_word2vec_format(save, binary=binary)
        click.echo(f"saved {len(model.vocab):,} vectors to {save}")
    if name:
        info = model.to_redis(name, redis_url=redis_url, codec=codec)
        count = getattr(info, "count", len(model.vocab))
        click.echo(f"{name}: {count:,} vectors x {model.vector_size} committed")
