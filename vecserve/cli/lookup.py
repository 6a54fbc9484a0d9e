"""``vecserve get`` and ``vecserve similar``: vectors and nearest neighbours of words."""

from __future__ import annotations

import json

import click

from ..clierrors import friendly_errors
from ..clioptions import json_option, model_option, redis_url_option
from ..errors import VecserveError
from .root import cli

__all__ = ["get", "similar"]


@cli.command()
@click.argument("words", nargs=-1, required=True)
@model_option(help="The model.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON {word: vector}.")
@redis_url_option
@friendly_errors
def get(words, name, as_json, redis_url):
    """Print the vectors of WORDS from model --key (one round trip).

    For a fastText model, words outside its vocabulary get vectors built from their
    character n-grams (marked "from subwords").

    \b
    Example:
        vecserve get king queen --key GOOGLE_W2V
    """
    from ..connect import open_store

    with open_store(redis_url) as store:
        info, matrix, in_vocab = store.read_rows_subwords(store.get_model(name), list(words))
    found = [True] * len(words) if info.subwords else in_vocab.tolist()
    built = (
        set() if not info.subwords else {w for w, ok in zip(words, in_vocab, strict=True) if not ok}
    )
    missing = [w for w, ok in zip(words, found, strict=True) if not ok]
    if as_json:
        click.echo(
            json.dumps({w: v.tolist() for w, v, ok in zip(words, matrix, found, strict=True) if ok})
        )
    else:
        for w, v, ok in zip(words, matrix, found, strict=True):
            if ok:
                shown = " ".join(f"{x:.4f}" for x in v[:8])
                more = " ..." if info.dim > 8 else ""
                note = ", from subwords" if w in built else ""
                click.echo(f"{w}\t[{shown}{more}] ({info.dim} dims{note})")
    if missing:
        raise click.ClickException(f"not in {name}: {', '.join(missing)}")


@cli.command()
@click.argument("words", nargs=-1, required=True)
@model_option(help="The model to search.")
@click.option(
    "--negative",
    "-n",
    multiple=True,
    metavar="WORD",
    help="A word to move away from (repeat for more), as gensim's negative=.",
)
@click.option(
    "--topn",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many neighbours.",
)
@click.option(
    "--approx",
    is_flag=True,
    help="Answer from the approximate index (built into the cache dir first if need be, "
    "as `load --ann` does); exact when the index cannot meet its recall target.",
)
@json_option('Print JSON: [["word", similarity], ...], gensim\'s answer.')
@redis_url_option
@friendly_errors
def similar(words, name, negative, topn, approx, as_json, redis_url):
    """Print the nearest neighbours of WORDS (their mean) in model --key: gensim's
    most_similar(positive=WORDS, negative=--negative, topn=--topn), exact by default.

    One line per neighbour: the similarity, then the token in quotes (a token may end in
    punctuation). The first call on a model builds its similarity snapshot in the cache
    dir ($VECSERVE_CACHE_DIR); later calls map it.

    \b
    Example:
        vecserve similar king --key GOOGLE_W2V
        vecserve similar king woman --negative man --topn 3 --key GOOGLE_W2V
        vecserve similar paris --key GOOGLE_W2V --approx --json
    """
    from ..connect import open_store

    positive, negative = list(words), list(negative)
    with open_store(redis_url) as store:
        store.get_model(name)  # an unknown model before a word: ModelNotFound
        try:
            if approx:
                result = _similar_approx(store, name, positive, negative, topn)
            else:
                from ..keyedvectors import RedisKeyedVectors

                with RedisKeyedVectors(name, store=store) as kv:
                    result = kv.most_similar(positive=positive, negative=negative, topn=topn)
        except VecserveError:
            raise
        except (KeyError, ValueError) as exc:  # gensim's errors for an unknown word
            raise click.ClickException(f"{name}: {exc.args[0] if exc.args else exc}") from exc
    if as_json:
        click.echo(json.dumps([[w, float(s)] for w, s in result]))
        return
    for w, s in result:
        click.echo(f"{s:.4f}  {json.dumps(w, ensure_ascii=False)}")


def _similar_approx(store, name, positive, negative, topn):
    """The approximate index's answer (as the service's ``approx=true``), built if need be."""
    try:
        from ..search.ann import AnnManager, AnnParams, build_for
        from ..search.planner import Planner, Query
        from ..search.snapshot import IndexManager
    except ImportError as exc:
        raise click.ClickException(
            f"--approx needs the api extra: pip install 'vecserve[api]' ({exc})"
        ) from exc
    indexes = IndexManager(store)
    try:
        sim = indexes.get(name)
        manager = AnnManager(enabled=True, params=AnnParams())
        build_for(sim, manager)  # as `load --ann` and the service's preload
        query = Query(positive=tuple(positive), negative=tuple(negative), topn=topn, approx=True)
        answer = Planner(sim, name=name, ann=manager).answer(query)
    finally:
        indexes.close()
    if not answer.approximate:
        click.echo(f"vecserve: answered exactly ({answer.approximate_status})", err=True)
    return answer.results
