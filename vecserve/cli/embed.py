"""``vecserve embed``: the vectors of texts, from the command line (one round trip).

Imported only when used (:class:`vecserve.cli.LazyGroup`'s table); the library call is
``RedisKeyedVectors.embed``, its errors one line on stderr (:func:`vecserve.cli.friendly_errors`).
"""

from __future__ import annotations

import json
import sys

import click

from ..clierrors import friendly_errors
from ..clioptions import redis_url_option
from ..errors import TextRejected

__all__ = ["embed"]


@click.command()
@click.argument("texts", nargs=-1)
@click.option("--key", "-k", "name", required=True, help="Model name.")
@click.option(
    "--normalize/--no-normalize", default=None, help="Unit vectors (default: the model's)."
)
@click.option("--dims", type=click.IntRange(min=1), default=None, help="Keep the first N dims.")
@click.option(
    "--pooling",
    type=click.Choice(["mean", "sif"]),
    default="mean",
    show_default=True,
    help="sif: weight words by a/(a+p), p from the model's counts.",
)
@click.option(
    "--stdin", "from_stdin", is_flag=True, help="Read texts from standard input, one a line."
)
@redis_url_option
@friendly_errors
def embed(texts, name, normalize, dims, pooling, from_stdin, redis_url):
    """Print one JSON line per text: its vector and how many of its tokens were used.

    Texts are cut into the model's tokens (a static model's tokenizer, or the word rule
    recorded at load), read in one round trip and averaged. A text with no known token
    has the zero vector.

    \b
    Example:
        $ vecserve embed "the cat sat on the mat" --key WL
        {"text": "the cat sat on the mat", "tokens": 6, "unknown": 0, "vector": [...]}
        $ cut -f2 titles.tsv | vecserve embed --stdin --key POTION > vectors.jsonl
    """
    from ..keyedvectors import RedisKeyedVectors

    items = list(texts)
    if from_stdin:
        raw = sys.stdin.buffer.read()
        try:
            items += raw.decode("utf-8").splitlines()
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            where = f"line {line}, byte {exc.start}"
            raise TextRejected(f"standard input is not UTF-8: {where}") from None
    if not items:
        raise click.UsageError("give TEXTS or --stdin")
    with RedisKeyedVectors(name, redis_url=redis_url) as kv:
        got = kv.embed(items, normalize=normalize, dims=dims, pooling=pooling)
    out = sys.stdout
    for text, vec, used, unknown in zip(
        items, got.vectors.tolist(), got.used.tolist(), got.unknown.tolist(), strict=True
    ):
        row = {"text": text, "tokens": used, "unknown": unknown, "vector": vec}
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
